-- release.lua: give a lease back without counting the attempt (a worker shutting down).
--
-- Input
--   KEYS[1] job hash  KEYS[2] leased zset  KEYS[3] ready zset  KEYS[4] seq
--   ARGV[1] job_id    ARGV[2] token
-- Output
--   "released"   back in ready (end of its priority band), attempts - 1
--   "cancelled"  a cancel had been requested: the job is removed instead
-- Errors (nothing written)
--   NOT_FOUND / STALE_TOKEN / LEASE_LOST as in extend.lua; INVALID_INPUT <what>

--@include _lib.lua

local key, leased, ready, seqkey, id = KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1]
local token = int_in(ARGV[2], 1, 9007199254740991)
if not token then return invalid('token') end

local f = redis.call('HMGET', key, 't', 's', 'a', 'pr', 'c')
local code, cur = holder_error(f, token)
if code then return redis.error_reply(holder_reply(code, id, ARGV[2], cur)) end

redis.call('ZREM', leased, id)
if f[5] == '1' then
  redis.call('DEL', key)
  return 'cancelled'
end
redis.call('HSET', key, 's', 'w', 'a', math.max(0, (tonumber(f[3]) or 0) - 1))
to_ready(ready, seqkey, id, tonumber(f[4]))
return 'released'
