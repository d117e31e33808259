-- enqueue_internal.lua: add jobs to one of Sluice's own queues (the relay's partition
-- ownership jobs), idempotently by job id. enqueue.lua refuses these queues, and this
-- script refuses every other queue, so neither path opens the other.
--
-- Input
--   KEYS[1] job prefix  sluice:{q}:job:  (job keys = prefix .. id, built here: same slot)
--   KEYS[2] ready zset  KEYS[3] delayed zset  KEYS[4] seq string
--   KEYS[5] used string: the jobs' bytes are counted there (no budget here: push.lua has one)
--   KEYS[6] group prefix  KEYS[7] turns list  KEYS[8] groups hash  (fair groups: _lib.lua)
--   ARGV[1] k           number of jobs (1..1000)
--   then k groups of 6: job_id, payload (JSON), meta, run_at_ms (0 = now), group ("" = none),
--                       traceparent ("" = none: untraced; else sluice.core.traces.PATTERN, stored as tp)
--                       meta = "<priority 0..9>,<max_attempts 0..100, 0 = unset>,<lease_ms>,<enqueued_at_ms>"
--                       (enqueued_at_ms 0 = now)
-- Output
--   array of k integers: 1 = added, 0 = a job with that id already existed (or the id
--   repeats earlier in this batch); an existing job is left exactly as it was.
--   A job with run_at_ms <= now goes to ready, score (9 - priority) * 2^44 + seq
--   (higher priority first, FIFO within a priority), or a grouped job to its group's ready zset
--   (same score; the group enters turns); later ones go to delayed, score
--   run_at_ms.
-- Errors (nothing written)
--   INVALID_INPUT <what>
--   INVALID_QUEUE queue=<q>  the queue is not reserved (use enqueue.lua)

--@include _lib.lua

local prefix, ready, delayed, seqkey, used = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
if not refuse_reserved(prefix) then
  return redis.error_reply('INVALID_QUEUE queue=' .. tostring(queue_of(prefix)) .. ' is not reserved')
end
return enqueue_jobs(prefix, ready, delayed, seqkey, used, keys_of_groups(KEYS[6], KEYS[7], KEYS[8]))
