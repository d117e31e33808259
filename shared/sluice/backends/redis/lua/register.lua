-- register.lua: add a queue name to the registry, within the registry's limit.
--
-- Input
--   KEYS[1] registry set  sluice:queues  (the one global key: this script touches nothing else)
--   ARGV[1] queue name    ^[a-z0-9][a-z0-9_-]{0,63}$
--   ARGV[2] limit         0..1000000000 names the registry may hold (0 = no limit)
-- Output
--   1 added, 0 already registered (a registered name is never refused, whatever the limit)
-- Errors (nothing written)
--   QUEUE_NOT_ALLOWED limit=<limit>  the name is new and the registry already holds `limit` names
--   INVALID_INPUT queue | limit

--@include _lib.lua

local registry = KEYS[1]
local queue = ARGV[1]
if type(queue) ~= 'string' or #queue == 0 or #queue > 64 or not string.match(queue, '^[a-z0-9][a-z0-9_%-]*$') then
  return invalid('queue')
end
local limit = int_in(ARGV[2], 0, 1000000000)
if not limit then return invalid('limit') end
if redis.call('SISMEMBER', registry, queue) == 1 then return 0 end
if limit > 0 and redis.call('SCARD', registry) >= limit then
  return redis.error_reply('QUEUE_NOT_ALLOWED registry full: a new queue would pass the limit limit=' .. limit)
end
return redis.call('SADD', registry, queue)
