-- push.lua: the relay's exactly-once hand-off of a batch of Kafka records into one queue.
--
-- Input
--   KEYS[1] relayed   hash  sluice:{q}:relayed:<topic>:<partition>  fields owner, offset
--   KEYS[2] job prefix      sluice:{q}:job:  (job keys = prefix .. id, built here: same slot)
--   KEYS[3] ready  zset     KEYS[4] delayed zset     KEYS[5] seq string
--   KEYS[6] wake   list     sluice:{q}:wake  (tokens for waiting workers' BLPOP, and the prefix of
--                           each waiting worker's own list, sluice:{q}:wake:<worker>: below)
--   KEYS[7] used   string   sluice:{q}:used  (bytes its jobs count against its budget; one that is
--                           not a count, which the team's user may SET by hand, is dropped: below)
--   KEYS[8] config hash     sluice:{q}:config  (max_bytes: the queue's own budget; paused; read only,
--                           each field within 32 bytes: a longer paused reads as paused, a longer
--                           max_bytes as unset)
--   KEYS[9] group prefix  KEYS[10] turns list  KEYS[11] groups hash  (fair groups: _lib.lua)
--   KEYS[12] dead  KEYS[13] leased  (zsets)  KEYS[14] tokens hash  (a redrive a failover lost: below)
--   KEYS[15] idle  zset     sluice:{q}:idle  (workers waiting for work: idle.lua; read only)
--   ARGV[1] owner_token     the relay's lease token on this partition (positive integer)
--   ARGV[2] k               number of records (1..1000)
--   ARGV[3] records         a JSON array of 8k strings, k groups of 8: offset, job_id, payload,
--                           meta, run_at_ms (as in enqueue.lua), redrive_gen, group ("" = none: a
--                           grouped job waits in its group's ready zset), traceparent ("" = none;
--                           stored as the job's tp and counted in its sz). One argument rather
--                           than 8k: the client packs one string instead of thousands (issue 18).
--                           redrive_gen: 0, or the job's redrive generation in the jobs table,
--                           stored as the new job's g (a redriven job replayed after a Redis
--                           loss: its grant needs the generation to leave its final item)
--   ARGV[4] budget          the deployment's byte budget per queue (0 = none), for a queue whose
--                           config has no max_bytes of its own
--   ARGV[5] follow          -1, or the last offset of the call before this one in the same round
--                           (a batch of more than 1000 records goes in several calls): unless the
--                           stored offset reached it (that call was taken whole), this call takes
--                           nothing, so no record passes one the budget left behind
-- Output
--   {pushed, skipped, stored_offset, left, paused}
--   Paused: a batch with fresh jobs for a queue whose config says paused takes nothing (all k
--   left, paused 1): the relay reads a queue's config every refresh_s, and a job enqueued just
--   after an operator's pause was pushed and ran on the config of before it. The relay holds the
--   records as it holds a paused queue's (relay/pusher.py).
--   Budget (issue 28): each fresh job counts job_size bytes (stored as its sz, added to used).
--   Records are taken in order while their jobs fit the budget; the first fresh job that does
--   not fit stops the take, and it and every record after it are left: nothing of them is
--   written and the stored offset stays below them (the relay keeps them). A queue that counts
--   0 bytes takes one job whatever its size, so a job larger than the budget cannot wedge it.
--   pushed + skipped + left = k.
--   Records at or below the stored offset, and jobs whose hash already exists (or that
--   repeat an id in this batch), are skipped, save one case: a record whose redrive_gen is
--   above the generation its existing job carries (g) is a redrive Redis does not have (a
--   failover to a replica that lagged behind the redrive's move, or a redrive that stopped
--   between its Kafka append and its move): the job takes that g and fresh attempts, and a
--   dead one goes back to ready as redrive.lua moves it, as does a leased one (its lease is
--   one from before the redrive, which the rollback brought back: its holder is stale), both
--   counted pushed; a ready or delayed one waits where it is (docs/redis-loss.md). The stored offset becomes the largest
--   offset seen (it never goes down) and the stored owner the caller's token, in the
--   same atomic step as the enqueue: a relay that dies before its Kafka commit pushes
--   nothing twice. A batch with fresh jobs wakes the workers waiting for work now (idle.lua) that
--   began waiting last (the latest deadlines), one per fresh job and at most WAKE_MAX: a token in
--   each one's own list, KEYS[6] .. ':' .. worker id (one kept, for WAKE_TTL_MS), which its BLPOP
--   takes (worker/registry.py, linger). A worker never woken is not needed: it ends at its
--   linger's end, so a trickle keeps one worker, not every worker that waits (issue 28: with one
--   shared list each BLPOP took a token in turn, and a queue getting a job every 0.2 s kept every
--   waiter alive, each woken inside its 1 s linger). With nobody waiting, one token goes to the
--   shared list KEYS[6] (at most WAKE_MAX kept, for WAKE_TTL_MS), for a worker that registers
--   just after this push. A token per job (before issue 30) only left stale tokens behind, each
--   costing a later waiter an empty lease.
-- Errors (nothing written)
--   STALE_TOKEN mine=<token> current=<token>  a relay with a newer token owns the partition
--   INVALID_INPUT <what>
--   RESERVED_QUEUE queue=<q> prefix=<p>  the queue is one of Sluice's own: no record goes there

--@include _lib.lua

local WAKE_MAX = 16        -- tokens kept: one per waiting worker to wake is enough
local WAKE_TTL_MS = 5000  -- a token nobody took only costs a worker one empty lease; let it go

local relayed, prefix, ready, delayed, seqkey, wake, used, config =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local dead, leased, tokens, idle = KEYS[12], KEYS[13], KEYS[14], KEYS[15]
local G = keys_of_groups(KEYS[9], KEYS[10], KEYS[11])
local reserved = refuse_reserved(prefix)
if reserved then return reserved end
local owner = int_in(ARGV[1], 1, MAX_TOKEN)
if not owner then return invalid('owner token') end
local k = int_in(ARGV[2], 1, 1000)
if not k or #ARGV ~= 5 then return invalid('record count') end
local budget = int_in(ARGV[4], 0, MAX_TOKEN)
if not budget then return invalid('budget') end
local follow = int_in(ARGV[5], -1, MAX_TOKEN)
if not follow then return invalid('follow') end
local ok, R = pcall(cjson.decode, ARGV[3])
if not ok or type(R) ~= 'table' or #R ~= 8 * k then return invalid('records') end

-- The queue's team may write the relayed hash by hand too: an owner or offset that is not one a
-- script writes reads as none (a 10 MB owner cost 175 ms a push, echoed in the refusal).
local current = small_hget(relayed, 'owner', 16)
if owner < (int_in(current, 1, MAX_TOKEN) or 0) then
  return redis.error_reply('STALE_TOKEN mine=' .. ARGV[1] .. ' current=' .. current)
end
local stored_offset = int_in(small_hget(relayed, 'offset', 16), -1, MAX_TOKEN) or -1

local now = now_ms()
local max_offset, starts, groups, traces = stored_offset, {}, nil, nil
for r = 0, k - 1 do
  local i = 1 + 8 * r
  local offset = int_in(R[i], 0, MAX_TOKEN)
  if not offset then return invalid('offset') end
  if not int_in(R[i + 5], 0, MAX_TOKEN) then return invalid('redrive_gen') end
  local bad = check_job(R, i + 1, now)
  if bad then return bad end
  local kept
  groups, kept = keep_optional(groups, i + 1, R[i + 6], valid_group)
  if not kept then return invalid('group of ' .. R[i + 1]) end
  traces, kept = keep_optional(traces, i + 1, R[i + 7], valid_trace)
  if not kept then return invalid('traceparent of ' .. R[i + 1]) end
  if offset > max_offset then max_offset = offset end
  if offset > stored_offset then starts[#starts + 1] = i + 1 end
end

if stored_offset < follow then return {0, 0, stored_offset, k, 0} end

local fresh = new_jobs(R, prefix, starts)
local taken = k
local use = 0
if #fresh > 0 then
  -- The config and used are keys the queue's team may write by hand (_lib.lua small_hget): each is
  -- read only within the size a script writes. A longer paused reads as paused and a longer
  -- max_bytes as unset (the deployment's budget): the team holds its own queue, nobody else's.
  local paused = small_hget(config, 'paused', 32)
  if paused == true or paused == '1' then return {0, 0, stored_offset, k, 1} end
  local own = small_hget(config, 'max_bytes', 32)
  budget = type(own) == 'string' and tonumber(own) or 0
  if budget == 0 then budget = tonumber(ARGV[4]) end
  -- A used INCRBY would refuse (not an integer, or longer than any count) failed create_jobs after
  -- its first writes; it is dropped here, before them, as a lost counter is (counted from 0 again).
  local u = small_get(used, 16)
  use = int_in(u, 0, MAX_TOKEN)
  if u and not use then redis.call('DEL', used) end
  use = use or 0
end
if budget > 0 and #fresh > 0 then
  -- Each job's size is at most its bytes in ARGV[3] plus its id again (<= 128), the prefix and
  -- the overhead: when the whole batch fits by that bound, no job needs looking at (the common
  -- case, a queue far from its budget, pays for no second pass over the batch).
  if use + #ARGV[3] + k * (128 + #prefix + JOB_OVERHEAD) <= budget then budget = 0 end
end
if budget > 0 and #fresh > 0 then
  for n, s in ipairs(fresh) do
    local sz = job_size(prefix, R[s], R[s + 1], R[s + 2]) + #R[s + 6]  -- its traceparent too (create_jobs)
    if use > 0 and use + sz > budget then
      taken = (s - 2) / 8  -- the records before this one's (s = 8r + 2 for record r, 0-based)
      for j = #fresh, n, -1 do fresh[j] = nil end
      break
    end
    use = use + sz
  end
  if taken < k then
    max_offset = stored_offset
    for r = 0, taken - 1 do max_offset = math.max(max_offset, tonumber(R[1 + 8 * r])) end
  end
end
if taken == 0 then return {0, 0, stored_offset, k, 0} end
redis.call('HSET', relayed, 'owner', ARGV[1], 'offset', max_offset)
create_jobs(R, prefix, ready, delayed, seqkey, fresh, now, used, G, groups, traces)
local made = {}
for _, s in ipairs(fresh) do
  made[s] = true
  if R[s + 4] ~= '0' then redis.call('HSET', prefix .. R[s], 'g', R[s + 4]) end
end
-- Existing jobs of the records taken (s = 8r + 2 for record r < taken) under an older generation
-- than the jobs table's: the redrive's own move never reached this Redis. Make it now.
local revived = 0
for _, s in ipairs(starts) do
  if s < 8 * taken + 2 and not made[s] and R[s + 4] ~= '0' then
    local key = prefix .. R[s]
    local f = redis.call('HMGET', key, 'm', 'g', 'grp')
    if f[1] and (tonumber(f[2]) or 0) < tonumber(R[s + 4]) then
      if redis.call('ZREM', dead, R[s]) == 1 then
        redriven_to_ready(G, key, ready, seqkey, R[s], R[s + 4], f)
        revived = revived + 1
      elseif redis.call('ZREM', leased, R[s]) == 1 then
        redis.call('HDEL', tokens, R[s])
        if f[3] then group_done(G, f[3], 1) end
        redriven_to_ready(G, key, ready, seqkey, R[s], R[s + 4], f)
        revived = revived + 1
      else  -- ready or delayed as it was before its redrive: its next lease is the redrive's
        redis.call('HDEL', key, 'a')
        redis.call('HSET', key, 'g', R[s + 4])
      end
    end
  end
end
if #fresh + revived > 0 then
  -- The workers that began waiting last (the latest deadlines), one per job: a worker not woken
  -- is not needed, and ends at its linger's end (a FIFO wake kept every waiter of a trickle alive).
  local waiters = redis.call('ZREVRANGEBYSCORE', idle, '+inf', now, 'LIMIT', 0,
                             math.min(#fresh + revived, WAKE_MAX))
  for _, worker in ipairs(waiters) do
    local own = wake .. ':' .. worker
    if redis.call('LPUSH', own, '1') > 1 then redis.call('LTRIM', own, 0, 0) end
    redis.call('PEXPIRE', own, WAKE_TTL_MS)
  end
  if #waiters == 0 then
    if redis.call('LPUSH', wake, '1') > WAKE_MAX then redis.call('LTRIM', wake, 0, WAKE_MAX - 1) end
    redis.call('PEXPIRE', wake, WAKE_TTL_MS)
  end
end
return {#fresh + revived, taken - #fresh - revived, max_offset, k - taken, 0}
