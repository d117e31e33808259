-- register.lua: add a queue name to the registry's Redis cache, within the registry's limit.
--
-- The durable registry is DynamoDB's queues table (docs/relay.md, "The queue registry"); this set
-- is its cache, loaded from it by registry_load.lua after a Redis loss. The limit is decided here,
-- atomically, so two gateways racing for the last slot cannot both take it.
--
-- Input
--   KEYS[1] registry set    sluice:queues
--   KEYS[2] reserved set    sluice:queues:{sluice:queues}:reserved  (the reserved names it holds)
--   KEYS[3] loaded mark     sluice:queues:{sluice:queues}:loaded    (set once the set is loaded)
--           (KEYS[2] and KEYS[3] carry the hash tag {sluice:queues}: the slot of KEYS[1])
--   ARGV[1] queue name      ^[a-z0-9][a-z0-9_-]{0,63}$
--   ARGV[2] limit           0..1000000000 public names the registry may hold (0 = no limit)
--   ARGV[3] mode            limit     a new name is checked against the limit (a gateway's
--                                     reservation before its 202)
--                           admitted  no limit: a record a gateway already accepted (the relay)
--                           reserved  one of Sluice's own queues (sluice-...): never counted
-- Output
--   1 added, 0 already registered (a registered name is never refused, whatever the limit)
-- Errors (nothing written)
--   QUEUE_NOT_ALLOWED registry full ... limit=<limit>  the name is new and `limit` public names are
--                 registered (reserved names do not count); the gateway answers 403
--   REGISTRY_COLD  mode limit, a new name, and the set was not loaded since Redis lost it: load
--                 it (registry_load.lua) and call again
--   INVALID_INPUT queue | limit | mode

--@include _lib.lua

local registry, reserved, loaded = KEYS[1], KEYS[2], KEYS[3]
local queue = ARGV[1]
if type(queue) ~= 'string' or #queue == 0 or #queue > 64 or not string.match(queue, '^[a-z0-9][a-z0-9_%-]*$') then
  return invalid('queue')
end
local limit = int_in(ARGV[2], 0, 1000000000)
if not limit then return invalid('limit') end
local mode = ARGV[3]
local internal = string.sub(queue, 1, 7) == 'sluice-'
if mode == 'reserved' then
  if not internal then return invalid('mode') end
  -- every time, not only when new: a name registered before the reserved set existed joins it
  redis.call('SADD', reserved, queue)
  return redis.call('SADD', registry, queue)
end
if (mode ~= 'limit' and mode ~= 'admitted') or internal then return invalid('mode') end
if redis.call('SISMEMBER', registry, queue) == 1 then return 0 end
if mode == 'limit' and limit > 0 then
  if redis.call('EXISTS', loaded) == 0 then
    return redis.error_reply('REGISTRY_COLD the registry cache is not loaded since Redis lost it')
  end
  local public = redis.call('SCARD', registry) - redis.call('SCARD', reserved)
  if public >= limit then
    return redis.error_reply('QUEUE_NOT_ALLOWED registry full: a new queue would pass the limit limit=' .. limit)
  end
end
return redis.call('SADD', registry, queue)
