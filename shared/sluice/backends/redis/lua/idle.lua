-- idle.lua: a worker says it waits for work in this queue until now + ms (0: no longer).
--
-- Input
--   KEYS[1] idle zset  sluice:{q}:idle   member = worker id, score = until when it waits (ms)
--   ARGV[1] worker_id  (1..256 bytes)   ARGV[2] ms  (0..60000; 0 removes the worker)
-- Output
--   the number of workers still waiting after this call (their deadline after TIME)
--   Members whose deadline passed are removed here, so the set holds only live waiters; the
--   key expires with its last waiter. The relay reads the count (stats.lua) and starts no
--   new worker for jobs a waiting one will take (push.lua wakes it).
-- Errors (nothing written)
--   INVALID_INPUT <what>

--@include _lib.lua

local idle, worker = KEYS[1], ARGV[1]
if type(worker) ~= 'string' or #worker < 1 or #worker > 256 then return invalid('worker_id') end
local ms = int_in(ARGV[2], 0, 60000)
if not ms then return invalid('ms') end

local now = now_ms()
redis.call('ZREMRANGEBYSCORE', idle, '-inf', now)
if ms == 0 then
  redis.call('ZREM', idle, worker)
else
  redis.call('ZADD', idle, now + ms, worker)
  if redis.call('PTTL', idle) < ms then redis.call('PEXPIRE', idle, ms) end
end
return redis.call('ZCARD', idle)
