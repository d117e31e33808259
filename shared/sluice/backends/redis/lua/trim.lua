-- trim.lua: forget old dead jobs whose ending the jobs table already holds.
--
-- Input
--   KEYS[1] job prefix  sluice:{q}:job:  (job keys = prefix .. id, built here: same slot)
--   KEYS[2] dead zset   KEYS[3] settle zset
--   KEYS[4] used string: the deleted jobs give their sz back (keys.used)
--   ARGV[1] keep        0..1000000000: the newest `keep` dead jobs stay (0 = no count limit)
--   ARGV[2] max_age_ms  0..2^53-1: dead jobs that died longer ago than this go (0 = no age limit)
--   ARGV[3] limit       1..1000 oldest dead jobs looked at per call
-- Output
--   {trimmed, unsettled}: jobs deleted (hash and dead entry), and jobs over a limit that were
--   kept because the settle set still holds their ending ("dead:<g>:<id>" or
--   "cancelled:<g>:<id>" with g the job's redrive generation, or the older "<state>:<id>"):
--   the relay has not written it to the jobs table yet, and it reads the job's last error
--   from the hash. Every other dead job's ending is in the jobs table already: a worker
--   records a failure there before it calls fail.lua (docs/worker.md).
-- Errors (nothing written)
--   INVALID_INPUT keep | max_age_ms | limit

--@include _lib.lua

local prefix, dead, settle, used = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local keep = int_in(ARGV[1], 0, 1000000000)
if not keep then return invalid('keep') end
local max_age = int_in(ARGV[2], 0, MAX_TOKEN)
if not max_age then return invalid('max_age_ms') end
local limit = int_in(ARGV[3], 1, 1000)
if not limit then return invalid('limit') end
if keep == 0 and max_age == 0 then return {0, 0} end

local over = 0
if keep > 0 then over = math.max(0, redis.call('ZCARD', dead) - keep) end
local cutoff = -1
if max_age > 0 then cutoff = now_ms() - max_age end
local oldest = redis.call('ZRANGE', dead, 0, limit - 1, 'WITHSCORES')
local any_settle = redis.call('ZCARD', settle) > 0  -- the common case: nothing to look up

-- Whether job `id` (hash `key`) has an ending in the settle set the relay has not written yet.
local function unsettled_ending(id, key)
  if not any_settle then return false end
  local g = redis.call('HGET', key, 'g') or '0'
  for _, state in ipairs({'dead', 'cancelled'}) do
    if redis.call('ZSCORE', settle, settle_member(state, id, g))
        or redis.call('ZSCORE', settle, state .. ':' .. id) then
      return true
    end
  end
  return false
end

local gone, keys, unsettled = {}, {}, 0
for r = 1, #oldest, 2 do
  local id, died = oldest[r], tonumber(oldest[r + 1])
  local rank = (r - 1) / 2
  if rank >= over and died > cutoff then break end  -- sorted by died-at: the rest are newer
  if unsettled_ending(id, prefix .. id) then
    unsettled = unsettled + 1
  else
    gone[#gone + 1] = id
    keys[#keys + 1] = prefix .. id
  end
end
if #gone > 0 then
  local freed = sizes_of(keys)
  redis.call('DEL', unpack(keys))
  release_bytes(used, freed)
  redis.call('ZREM', dead, unpack(gone))
end
return {#gone, unsettled}
