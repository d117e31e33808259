-- lease.lua: hand out up to n jobs, after reclaiming due delayed jobs and expired leases.
--
-- Input
--   KEYS[1] job prefix  sluice:{q}:job:  (job keys = prefix .. id; same slot)
--   KEYS[2] ready  KEYS[3] delayed  KEYS[4] leased  KEYS[5] dead  (zsets)
--   KEYS[6] seq string  KEYS[7] config hash (max_in_flight, read only)
--   ARGV[1] n              1..1000 jobs wanted
--   ARGV[2] lease_ms       10..43200000, or 0 = each job's own lease_ms
--   ARGV[3] worker_id      stored on the job while leased (may be empty)
--   ARGV[4] reclaim_limit  0..10000 delayed jobs and expired leases reclaimed first (each)
-- Output
--   {now_ms, then 8 entries per leased job:
--    job_id, token, attempt, payload, priority, max_attempts, enqueued_at_ms, lease_ms}
--   The deadline of each lease is now_ms + lease_ms. Each leased job's token is its
--   previous token + 1 (so strictly greater than any token it had) and its attempts + 1.
--   Jobs leave ready highest priority first, FIFO within a priority. With max_in_flight
--   > 0 in config, no more than max_in_flight jobs are leased at once.
-- Errors (nothing written)
--   INVALID_INPUT <what>

--@include _lib.lua

local prefix, ready, delayed, leased, dead, seqkey, config =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local n = int_in(ARGV[1], 1, 1000)
if not n then return invalid('n') end
local lease_ms = int_in(ARGV[2], 0, MAX_LEASE_MS)
if not lease_ms or (lease_ms > 0 and lease_ms < MIN_LEASE_MS) then return invalid('lease_ms') end
local worker = ARGV[3]
if type(worker) ~= 'string' or #worker > 256 then return invalid('worker_id') end
local limit = int_in(ARGV[4], 0, 10000)
if not limit then return invalid('reclaim_limit') end

local now = now_ms()
reclaim(prefix, ready, delayed, leased, dead, seqkey, now, limit)

local max_in_flight = tonumber(redis.call('HGET', config, 'max_in_flight')) or 0
if max_in_flight > 0 then
  n = math.min(n, max_in_flight - redis.call('ZCARD', leased))
end
local out = {now}
if n <= 0 then return out end

local popped = redis.call('ZPOPMIN', ready, n)
local lz = {}
for i = 1, #popped, 2 do
  local id = popped[i]
  local key = prefix .. id
  local f = redis.call('HMGET', key, 't', 'a', 'p', 'pr', 'ma', 'e', 'lm')
  if f[3] then
    local token, attempt = (tonumber(f[1]) or 0) + 1, (tonumber(f[2]) or 0) + 1
    local ms = lease_ms
    if ms == 0 then ms = tonumber(f[7]) end
    -- One HSET for token, attempts, state and owner: the same atomic effect as HINCRBY
    -- on each, in one call (the hash was just read).
    redis.call('HSET', key, 't', token, 'a', attempt, 's', 'l', 'w', worker)
    lz[#lz + 1] = now + ms
    lz[#lz + 1] = id
    out[#out + 1] = id
    out[#out + 1] = token
    out[#out + 1] = attempt
    out[#out + 1] = f[3]
    out[#out + 1] = tonumber(f[4])
    out[#out + 1] = tonumber(f[5])
    out[#out + 1] = tonumber(f[6])
    out[#out + 1] = ms
  end
end
if #lz > 0 then redis.call('ZADD', leased, unpack(lz)) end
return out
