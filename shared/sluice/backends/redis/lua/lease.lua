-- lease.lua: hand out up to n jobs, after reclaiming due delayed jobs and expired leases.
--
-- Input
--   KEYS[1] job prefix  sluice:{q}:job:  (job keys = prefix .. id, built here: same slot)
--   KEYS[2] ready  KEYS[3] delayed  KEYS[4] leased  KEYS[5] dead  (zsets)
--   KEYS[6] tokens hash (job id -> lease token)  KEYS[7] seq string
--   KEYS[8] config hash (max_in_flight, read only)
--   KEYS[9] settle zset (expiries that ended a job, for the relay to tell the jobs table)
--   KEYS[10] finished hash (cumulative endings: an expiry's dead or cancelled job counts there)
--   KEYS[11] used string (the queue's counted bytes: a job an expiry removes gives its sz back)
--   KEYS[12] group prefix  KEYS[13] turns zset  KEYS[14] groups hash  (fair groups: _lib.lua)
--   ARGV[1] n              1..1000 jobs wanted
--   ARGV[2] lease_ms       10..43200000, or 0 = each job's own lease_ms
--   ARGV[3] reclaim_limit  0..10000 delayed jobs and expired leases reclaimed first (each)
--                          (an expired lease's job goes to the front of its band: _lib.lua to_front)
-- Output
--   {now_ms, t0, then 2 entries per leased job: "<job_id> <a> <meta>[ <g>]", payload}
--   g is the job's redrive generation, present only once it was redriven (docs/store.md):
--   the worker's grant needs it to leave a final item.
--   The k-th job returned (k = 1, 2, ...) has token t0 + k and attempt a + 1 (a = attempts
--   used before; it is written to the job only if this lease fails or expires).
--   meta = "<priority>,<max_attempts>,<lease_ms>,<enqueued_at_ms>"; a lease's deadline
--   is now_ms + (ARGV[2], or the meta's lease_ms when ARGV[2] is 0).
--   Two reply entries per job, and no numbers formatted per job, because parsing reply
--   entries is what a Python client pays for and formatting numbers is what Lua pays for.
--   Tokens come from one take_seq of seq, so each is greater than any token the job had, before
--   a Redis data loss or a failover to a lagging replica too (seq never goes below TIME in
--   microseconds: _lib.lua take_seq).
--   Jobs leave ready highest priority first, FIFO within a priority. With
--   max_in_flight > 0 in config, no more than max_in_flight jobs are leased at once.
--   Fair groups: while turns is empty (no group has a job to lease) this is all, as before groups.
--   Otherwise the groups in turns and the default group (ungrouped jobs, in ready) are served
--   round-robin in turn order: the first n groups in turns share the n jobs, one each in turn
--   (a group with fewer jobs, or fewer leases left under max_in_flight_per_group, takes what it
--   can and the others take the rest); each group's jobs leave by priority, FIFO within. A group
--   served goes to the end of turns, or leaves it when it has no job left or reached its limit
--   (it comes back when a job of it arrives or a lease of it ends: _lib.lua group_done). For a
--   grouped job the reply entry ends " <g> <group>" (g is "0" when never redriven).
-- Errors (nothing written)
--   INVALID_INPUT <what>

--@include _lib.lua

local prefix, ready, delayed, leased, dead, tokens, seqkey, config, settle, finished, used =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11]
local G = keys_of_groups(KEYS[12], KEYS[13], KEYS[14])
local n = int_in(ARGV[1], 1, 1000)
if not n then return invalid('n') end
local lease_ms = int_in(ARGV[2], 0, MAX_LEASE_MS)
if not lease_ms or (lease_ms > 0 and lease_ms < MIN_LEASE_MS) then return invalid('lease_ms') end
local limit = int_in(ARGV[3], 0, 10000)
if not limit then return invalid('reclaim_limit') end

local now = now_ms()
reclaim(prefix, ready, delayed, leased, tokens, dead, seqkey, settle, finished, used, now, limit, G)

local cfg = redis.call('HMGET', config, 'max_in_flight', 'max_in_flight_per_group')
local max_in_flight = tonumber(cfg[1]) or 0
if max_in_flight > 0 then
  n = math.min(n, max_in_flight - redis.call('ZCARD', leased))
end
local out = {now, 0}
if n <= 0 then return out end

-- Up to `want` jobs from the groups in turns (and the default group, '' there), round-robin:
-- the first `want` groups in turn order share them, one job each in turn, each up to its room
-- (its ready jobs, and under `per_group` its leases left). Returns popped ({id, score, ...}), the
-- group of each popped pair by its index (nil: the default group) and whether a group was
-- dropped (no job left, or at its limit). Served groups with room left go to the end of turns.
-- Per group served: a ZCARD, a ZPOPMIN and its count (HINCRBY; under a limit, one HMGET and one
-- HSET for all): what a batch spread over many groups pays more than one from a single zset.
-- A count of 1 (the common case with many groups) goes as the string '1': redis.call formats
-- each number argument, and that costs about as much as the ZCARD (callgrind, docs/engine.md).
local function lease_groups(want, per_group)
  local default_ready = redis.call('ZCARD', ready)
  if default_ready > 0 then enter_turns(G, '') end
  local heads = redis.call('ZRANGE', G.turns, 0, want - 1)
  local n_heads, room, busy = #heads, {}, {}
  if per_group > 0 then
    local named = {}
    for _, g in ipairs(heads) do
      if g ~= '' then named[#named + 1] = g end
    end
    local counted = #named > 0 and redis.call('HMGET', G.state, unpack(named)) or {}
    local j = 0
    for i, g in ipairs(heads) do
      if g ~= '' then
        j = j + 1
        busy[i] = tonumber(counted[j]) or 0
      end
    end
  end
  local got = {}
  for i, g in ipairs(heads) do
    got[i] = 0
    if g == '' then
      room[i] = default_ready
    else
      room[i] = redis.call('ZCARD', G.prefix .. g)
      if per_group > 0 then room[i] = math.max(0, math.min(room[i], per_group - busy[i])) end
    end
  end
  local popped, group_at, left, cursor = {}, {}, want, 1
  while left > 0 do
    -- One job per group with room, in turn from where the last round stopped, until `left`.
    local share, given, idle, i = {}, 0, 0, cursor
    for x = 1, n_heads do share[x] = 0 end
    while given < left and idle < n_heads do
      if got[i] + share[i] < room[i] then
        share[i] = share[i] + 1
        given, idle, cursor = given + 1, 0, i % n_heads + 1
      else
        idle = idle + 1
      end
      i = i % n_heads + 1
    end
    if given == 0 then break end
    for x, g in ipairs(heads) do
      if share[x] > 0 then
        local jobs = redis.call('ZPOPMIN', g == '' and ready or G.prefix .. g, share[x] == 1 and '1' or share[x])
        local k = #jobs / 2
        for y = 1, #jobs, 2 do
          popped[#popped + 1] = jobs[y]
          popped[#popped + 1] = jobs[y + 1]
          if g ~= '' then group_at[#popped - 1] = g end
        end
        got[x] = got[x] + k
        left = left - k
        if k < share[x] then room[x] = got[x] end  -- never expected (ZCARD said more): empty now
      end
    end
  end
  local again, gone, counts, taken = {}, {}, {}, 0
  for i, g in ipairs(heads) do
    if got[i] >= room[i] then
      gone[#gone + 1] = g  -- no job left, or at its limit
    elseif got[i] > 0 then
      again[#again + 1] = g
    end
    if g ~= '' and got[i] > 0 then
      taken = taken + got[i]
      if per_group > 0 then
        counts[#counts + 1] = g
        counts[#counts + 1] = busy[i] + got[i]
      else
        redis.call('HINCRBY', G.state, g, got[i] == 1 and '1' or got[i])
      end
    end
  end
  if #counts > 0 then redis.call('HSET', G.state, unpack(counts)) end
  if taken > 0 then redis.call('HINCRBY', G.state, '#ready', -taken) end
  if #gone > 0 then redis.call('ZREM', G.turns, unpack(gone)) end
  if #again > 0 then
    local t, z = take_turns(G, #again), {}
    for x, g in ipairs(again) do
      z[#z + 1] = t + x
      z[#z + 1] = g
    end
    redis.call('ZADD', G.turns, unpack(z))
  end
  return popped, group_at, #gone > 0
end

local popped, group_at
local in_turns = redis.call('ZCARD', G.turns)
if in_turns == 1 and redis.call('ZSCORE', G.turns, '') then
  redis.call('DEL', G.turns)  -- only the default group is left: no turns to take
  in_turns = 0
end
if in_turns == 0 then
  popped = redis.call('ZPOPMIN', ready, n)  -- no group has a job to lease: as before groups
else
  local per_group = tonumber(cfg[2]) or 0
  local dropped
  popped, group_at, dropped = lease_groups(n, per_group)
  -- Groups found empty or at their limit left turns: the ones behind them may have work.
  if #popped == 0 and dropped and redis.call('EXISTS', G.turns) == 1 then
    popped, group_at = lease_groups(n, per_group)
  end
end
if #popped == 0 then return out end

local token = take_seq(seqkey, #popped / 2) - #popped / 2
out[2] = token
-- One deadline string for the batch (when the caller gave the lease length), so ZADD
-- does not format the same number once per job.
local deadline = lease_ms > 0 and string.format('%d', now + lease_ms)
local lz, tz = {}, {}
for i = 1, #popped, 2 do
  local id = popped[i]
  local f = redis.call('HMGET', prefix .. id, 'p', 'a', 'm', 'g')
  if f[1] then
    token = token + 1
    lz[#lz + 1] = deadline or now + tonumber(string.match(f[3], '^%d,%d+,(%d+)'))
    lz[#lz + 1] = id
    tz[#tz + 1] = id
    tz[#tz + 1] = token
    local group = group_at and group_at[i]
    if group then
      out[#out + 1] = id .. ' ' .. (f[2] or '0') .. ' ' .. f[3] .. ' ' .. (f[4] or '0') .. ' ' .. group
    else
      out[#out + 1] = f[4] and id .. ' ' .. (f[2] or '0') .. ' ' .. f[3] .. ' ' .. f[4]
        or id .. ' ' .. (f[2] or '0') .. ' ' .. f[3]
    end
    out[#out + 1] = f[1]
  end
end
if #lz > 0 then
  redis.call('ZADD', leased, unpack(lz))
  redis.call('HSET', tokens, unpack(tz))
end
return out
