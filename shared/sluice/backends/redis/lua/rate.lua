-- rate.lua: take up to `wanted` tokens from the queue's shared token bucket.
--
-- Input
--   KEYS[1] bucket  hash  sluice:{q}:bucket  fields tokens (float), ts (ms of last refill)
--   KEYS[2] config  hash  sluice:{q}:config  fields rate_per_s, burst (read only)
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

local cfg = redis.call('HMGET', config, 'rate_per_s', 'burst')
local rate = tonumber(cfg[1]) or 0
if rate <= 0 then return wanted end
local capacity = math.max(1, tonumber(cfg[2]) or 0)

local now = now_ms()
local b = redis.call('HMGET', bucket, 'tokens', 'ts')
local tokens, ts = tonumber(b[1]), tonumber(b[2])
if not tokens or not ts then tokens, ts = capacity, now end
tokens = math.min(capacity, tokens + math.max(0, now - ts) * rate / 1000)
local granted = math.floor(math.min(wanted, tokens))
redis.call('HSET', bucket, 'tokens', tokens - granted, 'ts', now)
return granted
