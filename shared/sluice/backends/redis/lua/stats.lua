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
--    {succeeded, dead, cancelled} from the finished hash (false where a field is missing),
--    used bytes (0 when the counter is missing)}
--   The oldest ready job is the earliest-enqueued of the heads of the ten priority
--   bands (within a band jobs are FIFO, reclaimed ones first), so this costs at most ten lookups.
--   It looks at ungrouped jobs only (a grouped job's age is not in it: a stub, docs/engine.md).

--@include _lib.lua

local prefix, ready = KEYS[1], KEYS[2]
local now = now_ms()
local oldest = nil
-- The jobs in ready took their seqs less than FRONT steps before the counter's value now
-- (_lib.lua: while they entered ready less than about 101 days ago), so band pr holds the BAND scores up to its score for that value: its reclaimed
-- jobs (to_front) in the lower half, the others above them.
local top = tonumber(redis.call('GET', KEYS[8])) or 0
for pr = 0, MAX_PRIORITY do
  local hi = ready_score(pr, top)
  -- Bounds as numbers: redis.call sends them exactly; '..' would round them.
  local head = redis.call('ZRANGEBYSCORE', ready, hi - BAND + 1, hi, 'LIMIT', 0, 1)
  if #head > 0 then
    local meta = redis.call('HGET', prefix .. head[1], 'm')
    local e = meta and tonumber(string.match(meta, '(%d+)$'))
    if e and (oldest == nil or e < oldest) then oldest = e end
  end
end
local age = -1
if oldest then age = math.max(0, now - oldest) end
local grouped = tonumber(redis.call('HGET', KEYS[11], '#ready')) or 0
return {redis.call('ZCARD', ready) + math.max(grouped, 0), redis.call('ZCARD', KEYS[3]),
        redis.call('ZCARD', KEYS[4]), redis.call('ZCARD', KEYS[5]), age, now, redis.call('HGETALL', KEYS[6]),
        redis.call('ZCOUNT', KEYS[7], now + 1, '+inf'),
        redis.call('HMGET', KEYS[9], 'succeeded', 'dead', 'cancelled'),
        tonumber(redis.call('GET', KEYS[10])) or 0}
