-- stats.lua: a consistent snapshot of one queue's depths (read only).
--
-- Input
--   KEYS[1] job prefix  sluice:{q}:job:  (job keys = prefix .. id, built here: same slot)
--   KEYS[2] ready  KEYS[3] delayed  KEYS[4] leased  KEYS[5] dead  (zsets)
--   KEYS[6] config hash  KEYS[7] idle zset (workers waiting for work, score = until when)
--   KEYS[8] seq string (where the priority bands of ready lie now)
--   KEYS[9] finished hash (cumulative endings, written by ack, fail, cancel and reclaim)
--   KEYS[10] used string (the bytes its jobs count against its budget)
--   KEYS[11] groups hash (fair groups: '#ready' counts the jobs waiting in groups' ready zsets)
-- Output
--   {ready (ungrouped and grouped), delayed, leased, dead, oldest_ready_age_ms (-1 when ready is empty), now_ms,
--    config as {field, value, field, value ...}, idle workers (deadline after TIME),
--    {succeeded, dead, cancelled} from the finished hash (false where a field is missing or not a
--    count), used bytes (0 when the counter is missing or not a count)}
--   The oldest ready job is the earliest-enqueued of the heads of the ten priority
--   bands (within a band jobs are FIFO, reclaimed ones first), so this costs at most ten lookups.
--   It looks at ungrouped jobs only (a grouped job's age is not in it: a stub, docs/engine.md).
--   The config hash is read whole while it is no bigger than config.lua and lease.lua leave it
--   (CONFIG_FIELDS fields, CONFIG_BYTES bytes). A team's own Redis user may HSET it by hand
--   (session 36): a stuffed one (100,000 fields cost 145 ms a call, with Redis blocked, at every
--   gateway's and relay's stats of the queue) gives only the fields a script writes, each within
--   its size (KNOWN), one HSTRLEN and one HGET each.

--@include _lib.lua

local prefix, ready = KEYS[1], KEYS[2]
local CONFIG_FIELDS, CONFIG_BYTES = 32, 65536
-- config.lua's fields (and lease.lua's policy_attempts), each with the longest value they write.
local KNOWN = {{'max_in_flight', 32}, {'burst', 32}, {'high_watermark', 32}, {'low_watermark', 32},
               {'max_delayed', 32}, {'max_dead', 32}, {'max_in_flight_per_group', 32}, {'max_bytes', 32},
               {'rate_per_s', 32}, {'paused', 32}, {'sensitive', 40000}, {POLICY_FIELD, 32}}

-- HLEN, MEMORY USAGE and HSTRLEN by pcall: a Redis user whose access string predates them (the
-- template's change not yet applied by ElastiCache while the new layer runs) reads the hash whole,
-- as before.
local function config_of(key)
  local n = redis.pcall('HLEN', key)
  if type(n) ~= 'number' then return redis.call('HGETALL', key) end
  if n == 0 then return {} end
  if n <= CONFIG_FIELDS then
    local bytes = redis.pcall('MEMORY', 'USAGE', key, 'SAMPLES', '0')
    if type(bytes) ~= 'number' or bytes <= CONFIG_BYTES then return redis.call('HGETALL', key) end
  end
  local out = {}
  for _, f in ipairs(KNOWN) do
    local len = redis.pcall('HSTRLEN', key, f[1])
    if type(len) ~= 'number' then return redis.call('HGETALL', key) end
    if len > 0 and len <= f[2] then
      out[#out + 1] = f[1]
      out[#out + 1] = redis.call('HGET', key, f[1])
    end
  end
  return out
end

local now = now_ms()
local oldest = nil
-- The jobs in ready took their seqs less than FRONT steps before the counter's value now
-- (_lib.lua: while they entered ready less than about 101 days ago), so band pr holds the BAND scores up to its score for that value: its reclaimed
-- jobs (to_front) in the lower half, the others above them.
-- Every key read here but the zsets is one the queue's team may write by hand: each value is read
-- within the size a script writes it (_lib.lua small_get, small_hget), and a count only as a count.
-- A seq that is not one reads as TIME in µs (take_seq keeps it at or above that).
local top = int_in(small_get(KEYS[8], 16), 0, MAX_TOKEN) or now_us()
for pr = 0, MAX_PRIORITY do
  local hi = ready_score(pr, top)
  -- Bounds as numbers: redis.call sends them exactly; '..' would round them.
  local head = redis.call('ZRANGEBYSCORE', ready, hi - BAND + 1, hi, 'LIMIT', 0, 1)
  if #head > 0 then
    local meta = small_hget(prefix .. head[1], 'm', 64)
    local e = type(meta) == 'string' and tonumber(string.match(meta, '(%d+)$'))
    if e and (oldest == nil or e < oldest) then oldest = e end
  end
end
local age = -1
if oldest then age = math.max(0, now - oldest) end
local grouped = int_in(small_hget(KEYS[11], '#ready', 17), -MAX_TOKEN, MAX_TOKEN) or 0
-- A count of the finished hash, or false (as HMGET's missing field) for one that is not a count.
local function count(field)
  local v = small_hget(KEYS[9], field, 16)
  return int_in(v, 0, MAX_TOKEN) and v or false
end
local finished = {count('succeeded'), count('dead'), count('cancelled')}
return {redis.call('ZCARD', ready) + math.max(grouped, 0), redis.call('ZCARD', KEYS[3]),
        redis.call('ZCARD', KEYS[4]), redis.call('ZCARD', KEYS[5]), age, now, config_of(KEYS[6]),
        redis.call('ZCOUNT', KEYS[7], now + 1, '+inf'),
        finished,
        int_in(small_get(KEYS[10], 16), 0, MAX_TOKEN) or 0}
