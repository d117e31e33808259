-- ack.lua: finish one or more leased jobs (success): their hashes are deleted.
--
-- Input
--   KEYS[1] job prefix  sluice:{q}:job:  (job keys = prefix .. id, built here: same slot)
--   KEYS[2] leased zset  KEYS[3] tokens hash (job id -> lease token)
--   KEYS[4] finished hash: each acked job counts as succeeded there, or as cancelled when a
--           cancel was requested (c = 1; the worker acks to drop a cancelled job)
--   KEYS[5] used string: the acked jobs' sz fields are given back (keys.used)
--   KEYS[6] group prefix  KEYS[7] turns list  KEYS[8] groups hash  (fair groups: _lib.lua; an
--           acked grouped job's group has one lease less, and takes turns again if it has work)
--   KEYS[9] recent zset (job id -> finished-at ms, Redis's TIME): each acked job is added and the
--           zset trimmed to its newest ARGV[2] (the operator's listing of finished jobs, issue 32)
--   ARGV[1] "<job_id> <token> <job_id> <token> ..." (1..1000 pairs, single spaces): one
--           argument rather than 2n, because encoding each argument is what a Python
--           client pays for (job ids cannot contain spaces)
--   ARGV[2] how many finished jobs the recent zset keeps (1..100000)
-- Output
--   {acked, then for each pair that was not acked: its index (1-based), its error}
--   errors: "NOT_FOUND job=<id>", "STALE_TOKEN job=<id> mine=<t> current=<t>",
--   "LEASE_LOST job=<id> mine=<t> [current=<t>]" (the others are still acked).
--   When all are acked the reply is just {n}: one entry for the client to parse.
--   A stale ack changes nothing for its job. An id repeated in one call is acked once;
--   its repeats report NOT_FOUND, as they would if sent one after another.
--   One HMGET of the tokens hash checks the whole batch.
-- Errors (nothing written)
--   INVALID_INPUT <what>

--@include _lib.lua

local prefix, leased, tokens, finished, used = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local G = keys_of_groups(KEYS[6], KEYS[7], KEYS[8])
local recent, kept = KEYS[9], ARGV[2]
if not int_in(kept, 1, 100000) then return invalid('kept') end
local ids, mine = {}, {}
for id, token in string.gmatch(ARGV[1], '(%S+) (%S+)') do
  ids[#ids + 1] = id
  mine[#mine + 1] = token
end
local n = #ids
-- The pairs must cover the whole argument, single-spaced: nothing was skipped.
if n < 1 or n > 1000 or #ARGV[1] ~= #table.concat(ids, ' ') + #table.concat(mine, ' ') + 1 then
  return invalid('pairs')
end

local current = redis.call('HMGET', tokens, unpack(ids))
local out, keys, done, seen = {0}, {}, {}, {}
for i = 1, n do
  local id = ids[i]
  -- A token equal to the stored one is well formed by definition; only the others are
  -- parsed (still before any write).
  if current[i] ~= mine[i] and not int_in(mine[i], 1, MAX_TOKEN) then return invalid('token') end
  local bad
  if seen[id] then
    bad = 'NOT_FOUND job=' .. id
  elseif current[i] ~= mine[i] then
    bad = holder_error(id, mine[i], current[i], prefix .. id)
  end
  if bad then
    out[#out + 1] = i
    out[#out + 1] = bad
  else
    seen[id] = true
    keys[#keys + 1] = prefix .. id
    done[#done + 1] = id
  end
end
if #done > 0 then
  local cancelled, freed, ended = 0, 0, nil
  for _, k in ipairs(keys) do
    local f = redis.call('HMGET', k, 'c', 'sz', 'grp')
    if f[1] == '1' then cancelled = cancelled + 1 end
    freed = freed + (int_in(f[2], 0, MAX_JOB_BYTES) or 0)  -- the team may write sz by hand
    if f[3] then
      ended = ended or {}
      ended[f[3]] = (ended[f[3]] or 0) + 1
    end
  end
  count_finished(finished, #done - cancelled, 0, cancelled)
  redis.call('DEL', unpack(keys))
  release_bytes(used, freed)
  redis.call('ZREM', leased, unpack(done))
  redis.call('HDEL', tokens, unpack(done))
  if ended then
    for group, k in pairs(ended) do group_done(G, group, k) end
  end
  local now, scored = now_ms(), {}
  for _, id in ipairs(done) do
    scored[#scored + 1] = now
    scored[#scored + 1] = id
  end
  redis.call('ZADD', recent, unpack(scored))
  redis.call('ZREMRANGEBYRANK', recent, 0, -tonumber(kept) - 1)
end
out[1] = #done
return out
