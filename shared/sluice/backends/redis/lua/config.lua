-- config.lua: set some of a queue's runtime knobs (the others are left as they are).
--
-- Input
--   KEYS[1] config hash  sluice:{q}:config
--   KEYS[2] group prefix  KEYS[3] turns list  KEYS[4] groups hash  (fair groups: _lib.lua)
--   KEYS[5] job prefix  sluice:{q}:job:  KEYS[6] leased zset  (to count each group's leases)
--   ARGV    pairs: field, value. Fields: max_in_flight, burst, high_watermark,
--           low_watermark, max_delayed, max_dead, max_in_flight_per_group (integers >= 0),
--           max_bytes (integer 0..2^53-1: the queue's byte budget, push.lua), rate_per_s
--           (number >= 0), paused (0 | 1), sensitive (a JSON array of at most 32 strings, at
--           most 40,000 bytes: the payload fields the operator's listing redacts, as JSON pointers
--           sluice.core.listing.check_sensitive checked first; '[]' marks none)
--   Setting max_in_flight_per_group above 0 counts each group's leased jobs afresh from the leased
--   set and keeps the counts from then on; 0 drops them (_lib.lua recount_groups, drop_counts).
--   Either way every group that had a count and has ready jobs takes turns again: lease.lua drops
--   a group at its limit, and a higher limit (or none) may let it lease again now.
-- Output
--   number of fields written
-- Errors (nothing written)
--   INVALID_INPUT <what>   unknown field, bad value, or low_watermark > high_watermark

--@include _lib.lua

local config = KEYS[1]
if #ARGV == 0 or #ARGV % 2 ~= 0 then return invalid('field/value pairs') end
local ints = {max_in_flight = true, burst = true, high_watermark = true, low_watermark = true,
              max_delayed = true, max_dead = true, max_in_flight_per_group = true}
local new = {}
for i = 1, #ARGV, 2 do
  local field, value = ARGV[i], ARGV[i + 1]
  if ints[field] then
    if not int_in(value, 0, 1000000000) then return invalid(field) end
  elseif field == 'max_bytes' then
    if not int_in(value, 0, MAX_TOKEN) then return invalid(field) end
  elseif field == 'rate_per_s' then
    local r = tonumber(value)
    if not r or r < 0 or r > 1000000000 or r ~= r then return invalid(field) end
  elseif field == 'paused' then
    if value ~= '0' and value ~= '1' then return invalid(field) end
  elseif field == 'sensitive' then
    if #value > 40000 then return invalid(field) end
    local ok, list = pcall(cjson.decode, value)
    if not ok or type(list) ~= 'table' or #list > 32 then return invalid(field) end
    local n = 0
    for _, entry in pairs(list) do
      n = n + 1
      if type(entry) ~= 'string' or #entry > 1024 then return invalid(field) end
    end
    if n ~= #list or string.sub(value, 1, 1) ~= '[' then return invalid(field) end
  else
    return invalid('field ' .. tostring(field))
  end
  new[field] = value
end
local cur = redis.call('HMGET', config, 'high_watermark', 'low_watermark')
local high = tonumber(new.high_watermark or cur[1]) or 0
local low = tonumber(new.low_watermark or cur[2]) or 0
if high > 0 and low > high then return invalid('low_watermark above high_watermark') end
redis.call('HSET', config, unpack(ARGV))
if new.max_in_flight_per_group then
  local G = keys_of_groups(KEYS[2], KEYS[3], KEYS[4])
  local had
  if tonumber(new.max_in_flight_per_group) > 0 then
    had = recount_groups(G, KEYS[5], KEYS[6])
  else
    had = drop_counts(G)
  end
  for _, group in ipairs(had) do
    if redis.call('ZCARD', G.prefix .. group) > 0 then enter_turns(G, group) end
  end
end
return #ARGV / 2
