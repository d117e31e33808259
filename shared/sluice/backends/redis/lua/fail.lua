-- fail.lua: a leased job's attempt failed: schedule a retry, or dead-letter it.
--
-- Input
--   KEYS[1] job hash  sluice:{q}:job:<id>
--   KEYS[2] leased  KEYS[3] ready  KEYS[4] delayed  KEYS[5] dead  (zsets)
--   KEYS[6] tokens hash  KEYS[7] seq  KEYS[8] settle zset
--   KEYS[9] finished hash: a job that ends in dead counts there (as cancelled when its settle
--           entry says cancelled, else as dead: the handler's Fail, attempts used up)
--   KEYS[10] group prefix  KEYS[11] turns list  KEYS[12] groups hash  (fair groups: _lib.lua; a
--           grouped job's group has one lease less, and a retry ready now goes to its group)
--   KEYS[13] used string: a job removed for its cancel request gives its sz back (keys.used)
--   ARGV[1] job_id  ARGV[2] token  ARGV[3] error (kept as the job's last error)
--   ARGV[4] retry_after_ms  0..604800000 (0 = ready now; the caller computes the backoff)
--   ARGV[5] permanent       0 | 1 (1 = no more attempts)
-- Output
--   "dead"       when permanent, or attempts >= max_attempts (the job moves to dead, score = now);
--                a job whose max_attempts is unset (0: the handler's retry policy decides) ends
--                by the worker's `permanent` alone, within MAX_ATTEMPTS (_lib.lua max_attempts_of)
--   "cancelled"  not permanent, and a cancel was requested: the job is removed (hash deleted, its
--                sz given back), as reclaim and release.lua remove it; the dead set holds only
--                dead jobs (issue 29, item 8)
--   "retry"      otherwise: to delayed at now + retry_after_ms, or straight to ready
--   The attempt is counted (a + 1) and the error kept. A non-permanent failure that ends the
--   job (cancel requested, or attempts used up) also adds "cancelled:<g>:<id>" /
--   "dead:<g>:<id>" to settle (g: the job's redrive generation): the worker may have told the
--   store "queued". A permanent one with a cancel request is dead: the worker wrote its verdict.
-- Errors (nothing written)
--   NOT_FOUND / STALE_TOKEN / LEASE_LOST as in extend.lua; INVALID_INPUT <what>

--@include _lib.lua

local key, leased, ready, delayed, dead, tokens, seqkey, settle, finished =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local G = keys_of_groups(KEYS[10], KEYS[11], KEYS[12])
local id = ARGV[1]
if not int_in(ARGV[2], 1, MAX_TOKEN) then return invalid('token') end
local err = ARGV[3]
if #err > 65536 then return invalid('error') end
local after = int_in(ARGV[4], 0, MAX_DELAY_MS)
if not after then return invalid('retry_after_ms') end
local permanent = ARGV[5]
if permanent ~= '0' and permanent ~= '1' then return invalid('permanent') end

local bad = holder_error(id, ARGV[2], redis.call('HGET', tokens, id), key)
if bad then return redis.error_reply(bad) end

local f = redis.call('HMGET', key, 'a', 'm', 'c', 'g', 'grp')
local a = (tonumber(f[1]) or 0) + 1
local now = now_ms()
redis.call('ZREM', leased, id)
redis.call('HDEL', tokens, id)
if f[5] then group_done(G, f[5], 1) end
if permanent == '0' and f[3] == '1' then
  local sz = int_in(redis.call('HGET', key, 'sz'), 0, MAX_JOB_BYTES)  -- the team may write sz by hand
  release_bytes(KEYS[13], sz or 0)
  redis.call('DEL', key)
  redis.call('ZADD', settle, now, settle_member('cancelled', id, f[4]))
  count_finished(finished, 0, 0, 1)
  return 'cancelled'
end
redis.call('HSET', key, 'a', a, 'err', err)
if permanent == '1' or a >= max_attempts_of(f[2], MAX_ATTEMPTS) then
  redis.call('ZADD', dead, now, id)
  if permanent == '0' then redis.call('ZADD', settle, now, settle_member('dead', id, f[4])) end
  count_finished(finished, 0, 1, 0)
  return 'dead'
end
if after > 0 then
  redis.call('ZADD', delayed, now + after, id)
else
  to_ready(G, ready, seqkey, id, priority_of(f[2]), f[5] or nil)
end
return 'retry'
