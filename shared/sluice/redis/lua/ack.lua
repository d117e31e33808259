-- ack.lua: finish one or more leased jobs (success): their hashes are deleted.
--
-- Input
--   KEYS[1] job prefix  sluice:{q}:job:  (job keys = prefix .. id; same slot)
--   KEYS[2] leased zset
--   ARGV    pairs: job_id, token (1..1000 pairs)
-- Output
--   one entry per pair: 1 = acked, or an error string for that job alone:
--   "NOT_FOUND job=<id>", "STALE_TOKEN job=<id> mine=<t> current=<t>",
--   "LEASE_LOST job=<id> mine=<t> current=<t>" (the others are still acked).
--   A stale ack changes nothing for its job. An id repeated in one call is acked once;
--   its repeats report NOT_FOUND, as they would if sent one after another.
-- Errors (nothing written)
--   INVALID_INPUT <what>

--@include _lib.lua

local prefix, leased = KEYS[1], KEYS[2]
local pairs_n = #ARGV / 2
if pairs_n < 1 or pairs_n > 1000 or #ARGV % 2 ~= 0 then return invalid('pair count') end
local tokens = {}
for i = 1, pairs_n do
  tokens[i] = int_in(ARGV[2 * i], 1, 9007199254740991)
  if not tokens[i] then return invalid('token') end
end

local out, keys, ids, seen = {}, {}, {}, {}
for i = 1, pairs_n do
  local id = ARGV[2 * i - 1]
  local code, cur
  if seen[id] then
    code = 'NOT_FOUND'
  else
    code, cur = holder_error(redis.call('HMGET', prefix .. id, 't', 's'), tokens[i])
  end
  if code then
    out[i] = holder_reply(code, id, ARGV[2 * i], cur)
  else
    seen[id] = true
    out[i] = 1
    keys[#keys + 1] = prefix .. id
    ids[#ids + 1] = id
  end
end
if #keys > 0 then
  redis.call('DEL', unpack(keys))
  redis.call('ZREM', leased, unpack(ids))
end
return out
