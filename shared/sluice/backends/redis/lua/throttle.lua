-- throttle.lua: one request of `size` body bytes from a caller's two token buckets, or nothing.
--
-- Input
--   KEYS[1] bucket  hash  sluice:{caller:<digest>}:bucket  fields r (request tokens), b (byte
--                         tokens), t (ms of the last take); one caller's, shared by every gateway
--   ARGV[1] rate_per_s   requests per second, a decimal (0: no request limit)
--   ARGV[2] burst        request bucket capacity, 0..1000000 (at least 1 is used)
--   ARGV[3] bytes_per_s  body bytes per second, 0..2^40 (0: no byte limit)
--   ARGV[4] byte_burst   byte bucket capacity, 0..2^40 (at least 1 is used)
--   ARGV[5] size         this request's body bytes, 0..2^40 (a body over byte_burst costs byte_burst)
-- Output
--   {allowed 1|0, retry_after_ms, request tokens left (floor), byte tokens left (floor)}
--   Same arithmetic as sluice.core.throttle.take: a missing bucket starts full, each refills at
--   its rate up to its capacity; a request is allowed only if both hold enough, and then takes
--   one request token and its bytes from both. Refused, nothing is written (the refill is a
--   function of t, so it is not lost). The key expires once both would be full again, so an
--   idle caller costs no memory. Time from TIME: every gateway shares one clock.
-- Errors (nothing written)
--   INVALID_INPUT rate_per_s | burst | bytes_per_s | byte_burst | size

--@include _lib.lua

local MAX_BYTES = 1099511627776  -- 2^40

-- A non-negative decimal ("2", "0.5", "12.25") below `hi`, or nil.
local function decimal_below(v, hi)
  if type(v) ~= 'string' or #v > 24 or not string.match(v, '^%d+%.?%d*$') then return nil end
  local n = tonumber(v)
  if not n or n >= hi then return nil end
  return n
end

local bucket = KEYS[1]
local rate = decimal_below(ARGV[1], 1000000000)
if not rate then return invalid('rate_per_s') end
local burst = int_in(ARGV[2], 0, 1000000)
if not burst then return invalid('burst') end
local bps = int_in(ARGV[3], 0, MAX_BYTES)
if not bps then return invalid('bytes_per_s') end
local byte_burst = int_in(ARGV[4], 0, MAX_BYTES)
if not byte_burst then return invalid('byte_burst') end
local size = int_in(ARGV[5], 0, MAX_BYTES)
if not size then return invalid('size') end

local r_cap, b_cap = math.max(1, burst), math.max(1, byte_burst)
local now = now_ms()
local h = redis.call('HMGET', bucket, 'r', 'b', 't')
local r, b, t = tonumber(h[1]), tonumber(h[2]), tonumber(h[3])
if not r or not b or not t then r, b, t = r_cap, b_cap, now end
local elapsed = math.max(0, now - t)
if rate > 0 then r = math.min(r_cap, r + elapsed * rate / 1000) end
if bps > 0 then b = math.min(b_cap, b + elapsed * bps / 1000) end
local cost = 0
if bps > 0 then cost = math.min(size, b_cap) end

local wait = 0
if rate > 0 and r < 1 then wait = math.max(wait, math.ceil((1 - r) * 1000 / rate)) end
if bps > 0 and b < cost then wait = math.max(wait, math.ceil((cost - b) * 1000 / bps)) end
if wait > 0 then return {0, wait, math.floor(r), math.floor(b)} end

if rate > 0 then r = r - 1 end
b = b - cost
local ttl = 0
if rate > 0 then ttl = r_cap * 1000 / rate end
if bps > 0 then ttl = math.max(ttl, b_cap * 1000 / bps) end
redis.call('HSET', bucket, 'r', string.format('%.6f', r), 'b', string.format('%.3f', b), 't', now)
redis.call('PEXPIRE', bucket, math.ceil(ttl) + 1000)
return {1, 0, math.floor(r), math.floor(b)}
