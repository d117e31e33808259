-- fence.lua: record a job's fencing token unless a newer one is recorded (sluice_fence.redis_store).
--
-- Input
--   KEYS[1] the fence's key, sluice-fence:<namespace>:<job id>[/<resource>]: a string holding the
--           newest token recorded for it
--   ARGV[1] token   a canonical decimal in 1..2^63-1 ("^[1-9][0-9]*$", at most 19 digits). Tokens are
--                   compared as strings of digits (the longer is the larger; equal lengths compare
--                   as text): exact past 2^53, where Lua's numbers (doubles) are not
--   ARGV[2] ttl_ms  1..31536000000: how long the record outlives its last write (a year at most)
-- Output
--   {verdict, newest}: verdict 'new' (recorded: newer than any recorded, or none was), 'same' (it is
--   the newest already: a retry of the same attempt; its time to live starts again) or 'stale'
--   (older: nothing written); newest, the token recorded after the call (a string)
-- Errors (nothing written)
--   INVALID_INPUT token|ttl_ms
--   INVALID_STATE <key>   the key holds something this script never writes

local MAX_TOKEN = '9223372036854775807'  -- 2^63 - 1
local MAX_TTL_MS = 31536000000

local function canonical(t)
  if type(t) ~= 'string' or #t > 19 or not string.match(t, '^[1-9]%d*$') then return false end
  return #t < 19 or t <= MAX_TOKEN
end

local function older(a, b)
  return #a < #b or (#a == #b and a < b)
end

local token, ttl = ARGV[1], ARGV[2]
if not canonical(token) then return redis.error_reply('INVALID_INPUT token') end
if type(ttl) ~= 'string' or not string.match(ttl, '^[1-9]%d*$') or #ttl > 11 or tonumber(ttl) > MAX_TTL_MS then
  return redis.error_reply('INVALID_INPUT ttl_ms')
end
local newest = redis.call('GET', KEYS[1])
if newest and not canonical(newest) then return redis.error_reply('INVALID_STATE ' .. KEYS[1]) end
if newest and older(token, newest) then return {'stale', newest} end
redis.call('SET', KEYS[1], token, 'PX', ttl)
if newest == token then return {'same', token} end
return {'new', token}
