-- stats.lua: a consistent snapshot of one queue's depths (read only).
--
-- Input
--   KEYS[1] job prefix  sluice:{q}:job:  (job keys = prefix .. id, built here: same slot)
--   KEYS[2] ready  KEYS[3] delayed  KEYS[4] leased  KEYS[5] dead  (zsets)
--   KEYS[6] config hash  KEYS[7] idle zset (workers waiting for work, score = until when)
-- Output
--   {ready, delayed, leased, dead, oldest_ready_age_ms (-1 when ready is empty), now_ms,
--    config as {field, value, field, value ...}, idle workers (deadline after TIME)}
--   The oldest ready job is the earliest-enqueued of the heads of the ten priority
--   bands (within a band jobs are FIFO, reclaimed ones first), so this costs at most ten lookups.

--@include _lib.lua

local prefix, ready = KEYS[1], KEYS[2]
local now = now_ms()
local oldest = nil
for pr = 0, MAX_PRIORITY do
  local lo = ready_score(pr, 0) - FRONT  -- a band starts with its reclaimed jobs (_lib.lua to_front)
  -- Bounds as numbers: redis.call sends them exactly (%.17g); '..' would round them.
  local head = redis.call('ZRANGEBYSCORE', ready, lo, lo + BAND - 1, 'LIMIT', 0, 1)
  if #head > 0 then
    local meta = redis.call('HGET', prefix .. head[1], 'm')
    local e = meta and tonumber(string.match(meta, '(%d+)$'))
    if e and (oldest == nil or e < oldest) then oldest = e end
  end
end
local age = -1
if oldest then age = math.max(0, now - oldest) end
return {redis.call('ZCARD', ready), redis.call('ZCARD', KEYS[3]), redis.call('ZCARD', KEYS[4]),
        redis.call('ZCARD', KEYS[5]), age, now, redis.call('HGETALL', KEYS[6]),
        redis.call('ZCOUNT', KEYS[7], now + 1, '+inf')}
