-- rate.lua: take up to `wanted` tokens from the queue's shared token bucket.
--
-- Input
--   KEYS[1] bucket  hash  sluice:{q}:bucket  fields tokens (float), ts (ms of last refill)
--   KEYS[2] config  hash  sluice:{q}:config  fields rate_per_s, burst (read only; a value longer
--                   than 32 bytes reads as the strictest: no token granted, a burst of 1)
--   ARGV[1] wanted  1..1000000
-- Output
--   granted: how many of `wanted` may be pushed now (0..wanted). With no rate set
--   (rate_per_s <= 0) everything is granted and the bucket is not touched.
--   Same arithmetic as sluice.core.policy.refill/take: capacity max(1, burst), refill
--   rate_per_s per second, a missing bucket starts full. Time from TIME, so every
--   relay instance shares one clock and one bucket.
-- Errors (nothing written)
--   INVALID_INPUT wanted

--@include _lib.lua

local bucket, config = KEYS[1], KEYS[2]
local wanted = int_in(ARGV[1], 1, 1000000)
if not wanted then return invalid('wanted') end

-- Each field within the size config.lua writes (the queue's team may write the hash by hand:
-- _lib.lua small_hget). A longer one reads as the strictest: rate_per_s grants nothing, burst is 1.
local rate = small_hget(config, 'rate_per_s', 32)
if rate == true then return 0 end
rate = tonumber(rate) or 0
if rate <= 0 then return wanted end
local burst = small_hget(config, 'burst', 32)
local capacity = math.max(1, burst ~= true and tonumber(burst) or 0)

local now = now_ms()
local b = redis.call('HMGET', bucket, 'tokens', 'ts')
local tokens, ts = tonumber(b[1]), tonumber(b[2])
if not tokens or not ts then tokens, ts = capacity, now end
tokens = math.min(capacity, tokens + math.max(0, now - ts) * rate / 1000)
local granted = math.floor(math.min(wanted, tokens))
redis.call('HSET', bucket, 'tokens', tokens - granted, 'ts', now)
return granted
