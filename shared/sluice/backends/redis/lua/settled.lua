-- settled.lua: forget expiries the jobs table has been told about (see reclaim in _lib.lua).
--
-- Input
--   KEYS[1] settle zset  sluice:{q}:settle  (member "<state>:<g>:<job id>" with g the job's
--           redrive generation, or the older "<state>:<job id>"; score = when it ended)
--   ARGV    pairs: member, score (1..1000 pairs), as read by the caller before it wrote DynamoDB
-- Output
--   number of entries removed. An entry whose score changed since it was read (the job
--   was redriven, leased and ended again) is kept: that newer ending is not settled yet.
-- Errors (nothing written)
--   INVALID_INPUT entries | member | score

--@include _lib.lua

local n = #ARGV
if n == 0 or n % 2 ~= 0 or n > 2000 then return invalid('entries') end
for i = 1, n, 2 do
  local state, id = string.match(ARGV[i], '^(%a+):([%w][%w_.%-]*)$')
  if not state then state, id = string.match(ARGV[i], '^(%a+):%d+:([%w][%w_.%-]*)$') end
  if not (state == 'dead' or state == 'cancelled') or #id > 128 then return invalid('member') end
  if not int_in(ARGV[i + 1], 0, 9007199254740991) then return invalid('score') end
end
local removed = 0
for i = 1, n, 2 do
  local current = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if current and tonumber(current) == tonumber(ARGV[i + 1]) then
    removed = removed + redis.call('ZREM', KEYS[1], ARGV[i])
  end
end
return removed
