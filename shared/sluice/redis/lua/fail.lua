-- fail.lua: a leased job's attempt failed: schedule a retry, or dead-letter it.
--
-- Input
--   KEYS[1] job hash  sluice:{q}:job:<id>
--   KEYS[2] leased  KEYS[3] ready  KEYS[4] delayed  KEYS[5] dead  (zsets)  KEYS[6] seq
--   ARGV[1] job_id  ARGV[2] token  ARGV[3] error (kept as the job's last error)
--   ARGV[4] retry_after_ms  0..604800000 (0 = ready now; the caller computes the backoff)
--   ARGV[5] permanent       0 | 1 (1 = no more attempts)
-- Output
--   "dead"   when permanent, a cancel was requested, or attempts >= max_attempts
--            (the job moves to dead, score = now)
--   "retry"  otherwise: to delayed at now + retry_after_ms, or straight to ready
-- Errors (nothing written)
--   NOT_FOUND / STALE_TOKEN / LEASE_LOST as in extend.lua; INVALID_INPUT <what>

--@include _lib.lua

local key, leased, ready, delayed, dead, seqkey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local id = ARGV[1]
local token = int_in(ARGV[2], 1, 9007199254740991)
if not token then return invalid('token') end
local err = ARGV[3]
if type(err) ~= 'string' or #err > 65536 then return invalid('error') end
local after = int_in(ARGV[4], 0, MAX_DELAY_MS)
if not after then return invalid('retry_after_ms') end
local permanent = ARGV[5]
if permanent ~= '0' and permanent ~= '1' then return invalid('permanent') end

local f = redis.call('HMGET', key, 't', 's', 'a', 'ma', 'pr', 'c')
local code, cur = holder_error(f, token)
if code then return redis.error_reply(holder_reply(code, id, ARGV[2], cur)) end

local now = now_ms()
redis.call('ZREM', leased, id)
if permanent == '1' or f[6] == '1' or (tonumber(f[3]) or 0) >= tonumber(f[4]) then
  redis.call('HSET', key, 's', 'x', 'err', err)
  redis.call('ZADD', dead, now, id)
  return 'dead'
end
redis.call('HSET', key, 's', 'w', 'err', err)
if after > 0 then
  redis.call('ZADD', delayed, now + after, id)
else
  to_ready(ready, seqkey, id, tonumber(f[5]))
end
return 'retry'
