-- registry_load.lua: load the registry's Redis cache from the durable registry (DynamoDB), a
-- chunk at a time; the last chunk sets the loaded mark, so a limit is checked (register.lua)
-- only once every name is in. Loading twice, or alongside registrations, is harmless: SADD.
--
-- Input
--   KEYS[1] registry set  sluice:queues
--   KEYS[2] loaded mark   sluice:queues:{sluice:queues}:loaded
--   ARGV[1] last          1: this is the last chunk (set the mark), 0: more follow
--   ARGV[2..] names       0..1000 public queue names ^[a-z0-9][a-z0-9_-]{0,63}$, none sluice-...
-- Output
--   how many names were new to the set
-- Errors (nothing written)
--   INVALID_INPUT last | names | queue

--@include _lib.lua

local registry, loaded = KEYS[1], KEYS[2]
local last = ARGV[1]
if last ~= '0' and last ~= '1' then return invalid('last') end
if #ARGV > 1001 then return invalid('names') end
for i = 2, #ARGV do
  local q = ARGV[i]
  if #q == 0 or #q > 64 or not string.match(q, '^[a-z0-9][a-z0-9_%-]*$') or string.sub(q, 1, 7) == 'sluice-' then
    return invalid('queue')
  end
end
local added = 0
for i = 2, #ARGV do
  added = added + redis.call('SADD', registry, ARGV[i])
end
if last == '1' then redis.call('SET', loaded, '1') end
return added
