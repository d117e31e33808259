-- enqueue.lua: add jobs to one queue, idempotently by job id.
--
-- Input
--   KEYS[1] job prefix  sluice:{q}:job:  (job keys = prefix .. id; same slot)
--   KEYS[2] ready zset  KEYS[3] delayed zset  KEYS[4] seq string
--   ARGV[1] k           number of jobs (1..1000)
--   then k groups of 7: job_id, payload, priority (0..9), max_attempts (1..100),
--                       lease_ms (10..43200000), run_at_ms (0 = now), enqueued_at_ms (0 = now)
-- Output
--   array of k integers: 1 = added, 0 = a job with that id already existed (or the id
--   repeats earlier in this batch); an existing job is left exactly as it was.
--   A job with run_at_ms <= now goes to ready, score (9 - priority) * 2^44 + seq
--   (higher priority first, FIFO within a priority); later ones go to delayed, score
--   run_at_ms.
-- Errors (nothing written)
--   INVALID_INPUT <what>

--@include _lib.lua

local prefix, ready, delayed, seqkey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local k = int_in(ARGV[1], 1, 1000)
if not k or #ARGV ~= 1 + 7 * k then return invalid('job count') end

local now = now_ms()
local out, starts, seen = {}, {}, {}
for r = 0, k - 1 do
  local i = 2 + 7 * r
  local bad = check_job(i, now)
  if bad then return bad end
  local id = ARGV[i]
  if seen[id] or redis.call('EXISTS', prefix .. id) == 1 then
    out[r + 1] = 0
  else
    seen[id] = true
    out[r + 1] = 1
    starts[#starts + 1] = i
  end
end

create_jobs(prefix, ready, delayed, seqkey, starts, now)
return out
