-- cancel.lua: cancel a job. A waiting job is removed; a leased job is marked.
--
-- Input
--   KEYS[1] job hash  KEYS[2] ready  KEYS[3] delayed  KEYS[4] dead  (zsets)
--   KEYS[5] tokens hash
--   ARGV[1] job_id
-- Output
--   "removed"    it was waiting (ready or delayed): hash and zset entry deleted
--   "requested"  it is leased: c = 1 on the hash. extend reports it to the worker; when
--                the lease ends other than by ack/fail (release, expiry) the job is removed,
--                and fail dead-letters it instead of retrying.
-- Errors (nothing written)
--   NOT_FOUND job=<id>         ALREADY_FINISHED job=<id> (it is dead-lettered)

local key, ready, delayed, dead, tokens, id = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[1]
if redis.call('EXISTS', key) == 0 then return redis.error_reply('NOT_FOUND job=' .. id) end
if redis.call('HEXISTS', tokens, id) == 1 then
  redis.call('HSET', key, 'c', '1')
  return 'requested'
end
if redis.call('ZSCORE', dead, id) then return redis.error_reply('ALREADY_FINISHED job=' .. id) end
redis.call('ZREM', ready, id)
redis.call('ZREM', delayed, id)
redis.call('DEL', key)
return 'removed'
