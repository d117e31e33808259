-- release.lua: give a lease back without counting the attempt (a worker shutting down).
--
-- Input
--   KEYS[1] job hash  KEYS[2] leased zset  KEYS[3] ready zset  KEYS[4] tokens hash
--   KEYS[5] seq  KEYS[6] settle zset  KEYS[7] finished hash (a removed job counts as cancelled)
--   KEYS[8] used string: a removed job gives its sz back (keys.used)
--   KEYS[9] group prefix  KEYS[10] turns list  KEYS[11] groups hash  (fair groups: _lib.lua; a
--           grouped job's group has one lease less, and the job goes back to its group)
--   ARGV[1] job_id    ARGV[2] token
-- Output
--   "released"   back in ready (end of its priority band); attempts unchanged
--   "cancelled"  a cancel had been requested: the job is removed instead, and
--                "cancelled:<g>:<id>" is added to settle (the store was told "queued")
-- Errors (nothing written)
--   NOT_FOUND / STALE_TOKEN / LEASE_LOST as in extend.lua; INVALID_INPUT <what>

--@include _lib.lua

local key, leased, ready, tokens, seqkey, settle, finished, used =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local G = keys_of_groups(KEYS[9], KEYS[10], KEYS[11])
local id = ARGV[1]
if not int_in(ARGV[2], 1, MAX_TOKEN) then return invalid('token') end

local bad = holder_error(id, ARGV[2], redis.call('HGET', tokens, id), key)
if bad then return redis.error_reply(bad) end

local f = redis.call('HMGET', key, 'm', 'c', 'g', 'sz', 'grp')
redis.call('ZREM', leased, id)
redis.call('HDEL', tokens, id)
if f[5] then group_done(G, f[5], 1) end
if f[2] == '1' then
  redis.call('DEL', key)
  release_bytes(used, int_in(f[4], 0, MAX_JOB_BYTES) or 0)  -- the team may write sz by hand
  redis.call('ZADD', settle, now_ms(), settle_member('cancelled', id, f[3]))
  count_finished(finished, 0, 0, 1)
  return 'cancelled'
end
to_ready(G, ready, seqkey, id, priority_of(f[1]), f[5] or nil)
return 'released'
