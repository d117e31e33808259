-- lease.lua: hand out up to n jobs, after reclaiming due delayed jobs and expired leases.
--
-- Input
--   KEYS[1] job prefix  sluice:{q}:job:  (job keys = prefix .. id, built here: same slot)
--   KEYS[2] ready  KEYS[3] delayed  KEYS[4] leased  KEYS[5] dead  (zsets)
--   KEYS[6] tokens hash (job id -> lease token)  KEYS[7] seq string
--   KEYS[8] config hash (max_in_flight read; the policy's attempts, ARGV[4], kept)
--   KEYS[9] settle zset (expiries that ended a job, for the relay to tell the jobs table)
--   KEYS[10] finished hash (cumulative endings: an expiry's dead or cancelled job counts there)
--   KEYS[11] used string (the queue's counted bytes: a job an expiry removes gives its sz back)
--   KEYS[12] group prefix  KEYS[13] turns list  KEYS[14] groups hash  (fair groups: _lib.lua)
--   KEYS[15] the turns zset of the layout before (read, moved into KEYS[13], deleted)
--   KEYS[16] optional: the waits hash (bucket -> count; sluice.core.depth): each job leased for the
--            first time (no attempt used) counts its wait, now_ms - its enqueued_at_ms, in bucket
--            floor(log2(wait + 1) * 4) (at most 200): one HINCRBY per distinct bucket of the call.
--            The relay's sample.lua takes and empties it. Absent: nothing counted.
--   ARGV[1] n              1..1000 jobs wanted
--   ARGV[2] lease_ms       10..43200000, or 0 = each job's own lease_ms
--   ARGV[3] reclaim_limit  0..10000 delayed jobs and expired leases reclaimed first (each)
--                          (an expired lease's job goes to the front of its band: _lib.lua to_front)
--   ARGV[4] policy         optional: the queue's handler's retry policy's max_attempts, 1..100, or 0
--                          for a handler without one; absent or '' leaves what an earlier lease told.
--                          Kept in the config hash (_lib.lua POLICY_FIELD; written only when it
--                          changes), it bounds the attempts a lapsed lease uses up, here and in
--                          reap.lua, as the worker bounds a failed one (_lib.lua lapse_limit)
-- Output
--   {now_ms, t0, then 2 entries per leased job: "<job_id> <a> <meta>[ <g>]", payload}
--   g is the job's redrive generation, present only once it was redriven (docs/store.md):
--   the worker's grant needs it to leave a final item. A traced job's entry (its hash has tp)
--   is always "<job_id> <a> <meta> <g> <group or empty> <tp>".
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
--   grouped job the reply entry ends " <g> <group>" (g is "0" when never redriven). Each group's
--   leases are counted only under max_in_flight_per_group (found set with no counts kept: counted
--   afresh from leased first); turns found in the old zset (KEYS[15]) move into the list first.
-- Errors (nothing written)
--   INVALID_INPUT <what>

--@include _lib.lua

local prefix, ready, delayed, leased, dead, tokens, seqkey, config, settle, finished, used =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11]
local G = keys_of_groups(KEYS[12], KEYS[13], KEYS[14])
local turns_zset, waits = KEYS[15], KEYS[16]
local WAIT_SCALE = 4 / math.log(2)  -- 4 buckets per power of two (sluice.core.depth.BUCKETS_PER_OCTAVE)
local n = int_in(ARGV[1], 1, 1000)
if not n then return invalid('n') end
local lease_ms = int_in(ARGV[2], 0, MAX_LEASE_MS)
if not lease_ms or (lease_ms > 0 and lease_ms < MIN_LEASE_MS) then return invalid('lease_ms') end
local limit = int_in(ARGV[3], 0, 10000)
if not limit then return invalid('reclaim_limit') end
local told = ARGV[4]
if told and told ~= '' and not int_in(told, 0, MAX_ATTEMPTS) then return invalid('policy') end

local cfg = redis.call('HMGET', config, 'max_in_flight', 'max_in_flight_per_group', POLICY_FIELD)
local policy = policy_of(cfg[3])
if told and told ~= '' and told ~= (cfg[3] or '0') then  -- a new policy (a deploy): one write
  if told == '0' then
    redis.call('HDEL', config, POLICY_FIELD)
  else
    redis.call('HSET', config, POLICY_FIELD, told)
  end
  policy = policy_of(told)
end
local now = now_ms()
reclaim(prefix, ready, delayed, leased, tokens, dead, seqkey, settle, finished, used, now, limit, G, config,
        policy)

local max_in_flight = tonumber(cfg[1]) or 0
if max_in_flight > 0 then
  n = math.min(n, max_in_flight - redis.call('ZCARD', leased))
end
local out = {now, 0}
if n <= 0 then return out end

-- Numbers written back as strings: redis.call formats each number argument with %.17g, which costs
-- about as much as a small command (callgrind, docs/engine.md); '%d' is cheap, and counts repeat.
local texts = {}
local function text(x)
  local t = texts[x]
  if not t then
    t = string.format('%d', x)
    texts[x] = t
  end
  return t
end

-- The layout before kept turns in a zset (group -> turn number, '#turn' in the groups hash) and
-- every group's leased count, unmarked: the zset's groups join the list in their order (those
-- already in it keep their place), once, at the first lease that finds it, and the counts go (a
-- limit in config counts afresh: recount_groups). Old code still running beside this code may add
-- to the zset again; it moves again.
local function migrate_turns()
  for _, g in ipairs(redis.call('ZRANGE', turns_zset, 0, -1)) do enter_turns(G, g) end
  redis.call('DEL', turns_zset)
  redis.call('HDEL', G.state, '#turn')
  if not counts_kept(G) then drop_counts(G) end  -- kept unmarked then; a limit recounts them below
end

-- Up to `want` jobs from the groups in turns (and the default group, '' there), round-robin:
-- the first `want` groups in turn order (one LPOP) share them, one job each in turn, each up to
-- its room (under `per_group` its leases left; the default group's ready jobs). A group's ready
-- jobs are not counted first: a pop that returns fewer than asked shows the group empty, and one
-- EXISTS over the groups served in full answers whether they have any left (per group only when
-- some emptied and some did not). Served groups with work and room left go back to the end of
-- turns (one RPUSH); the others leave it. Returns popped as pairs {id, group or false} and whether
-- a group was dropped. Per group served: one ZPOPMIN; per batch: one EXISTS, one RPUSH, one HDEL
-- and, while counts are kept (a per-group limit: `counted_too`), one HMGET and one HSET: what a
-- batch spread over many groups pays more than one from a single zset. Few Lua tables and no
-- string built twice per group: at 50 groups a batch, the Lua around the calls cost as much as
-- the calls (callgrind, docs/engine.md "Measured").
local function lease_groups(want, per_group, counted_too, zset_only)
  local heads = redis.call('LPOP', G.turns, want)
  if not heads and zset_only then  -- no list, so the one key found was the old zset
    migrate_turns()
    heads = redis.call('LPOP', G.turns, want)
  end
  heads = heads or {}
  -- The default group takes turns while ready has jobs: it joins at the end when not in them (the
  -- heads taken are the list's first, so it is among them if there is room).
  local default_ready = redis.call('ZCARD', ready)
  if default_ready > 0 and redis.call('HSETNX', G.state, '>', '1') == 1 then
    if #heads < want then heads[#heads + 1] = '' else redis.call('RPUSH', G.turns, '') end
  end
  local n_heads = #heads
  if n_heads == 0 then return {}, false end
  -- The heads' leased counts, when kept ('' (the default group) is never a field).
  local counted = counted_too and redis.call('HMGET', G.state, unpack(heads)) or {}
  -- Per head: its ready zset, its room (emptied or at its limit: room == got) and what it gave.
  -- The first round takes one job from each group with room, in turn order (n_heads <= want).
  local key, room, got, popped, np = {}, {}, {}, {}, 0
  for i = 1, n_heads do
    local g, z, r = heads[i], ready, default_ready
    if g ~= '' then
      z = G.prefix .. g
      r = per_group > 0 and per_group - (tonumber(counted[i]) or 0) or want + 1
    end
    key[i], got[i], room[i] = z, 0, 0
    if r > 0 then
      local job = redis.call('ZPOPMIN', z)
      if job[1] then
        popped[np + 1], popped[np + 2], np = job[1], g ~= '' and g, np + 2
        got[i], room[i] = 1, r
      end
    end
  end
  local left, cursor, share = want - np / 2, 1, {}
  while left > 0 do
    -- One more job per group with room, in turn from where the last round stopped, until `left`.
    local given, idle, i = 0, 0, cursor
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
    for x = 1, n_heads do
      local s = share[x]
      if s > 0 then
        local jobs = redis.call('ZPOPMIN', key[x], s)
        local g, k = key[x] ~= ready and heads[x], #jobs / 2
        for y = 1, #jobs, 2 do
          popped[np + 1], popped[np + 2], np = jobs[y], g, np + 2
        end
        got[x] = got[x] + k
        left = left - k
        if k < s then room[x] = got[x] end  -- its ready zset is empty now
      end
    end
  end
  -- The named groups served in full with room left may have ready jobs: one EXISTS over them all,
  -- and one per group only when some have and some have not.
  local keys = {}
  for i = 1, n_heads do
    if got[i] < room[i] and key[i] ~= ready then keys[#keys + 1] = key[i] end
  end
  local live = #keys > 0 and redis.call('EXISTS', unpack(keys)) or 0
  local again, gone, counts, taken = {}, {}, {}, 0
  for i = 1, n_heads do
    local g, k = heads[i], got[i]
    local stays = k < room[i]
    if k > 0 and key[i] ~= ready then
      taken = taken + k
      if stays and live < #keys then stays = live > 0 and redis.call('EXISTS', key[i]) == 1 end
      if counted_too then
        counts[#counts + 1] = g
        counts[#counts + 1] = text((tonumber(counted[i]) or 0) + k)
      end
    end
    if stays then
      again[#again + 1] = g
    else
      gone[#gone + 1] = '>' .. g  -- no job left, or at its limit
    end
  end
  if #counts > 0 then redis.call('HSET', G.state, unpack(counts)) end
  if taken > 0 then redis.call('HINCRBY', G.state, '#ready', text(-taken)) end
  if #gone > 0 then redis.call('HDEL', G.state, unpack(gone)) end
  if #again > 0 and redis.call('RPUSH', G.turns, unpack(again)) == 1 and again[1] == '' then
    redis.call('DEL', G.turns)  -- only the default group is left: no turns to take, as before groups
    redis.call('HDEL', G.state, '>')
  end
  return popped, #gone > 0
end

local popped, grouped_pairs = nil, false  -- grouped: pairs {id, group or false}, else ZPOPMIN's
-- One call tells a queue no group has a job to lease (the common case: leased as before groups).
local found = redis.call('EXISTS', G.turns, turns_zset)
if found == 0 then
  popped = redis.call('ZPOPMIN', ready, n)
else
  if found == 2 then migrate_turns() end
  local per_group, counted_too = tonumber(cfg[2]) or 0, false
  if per_group > 0 then
    counted_too = counts_kept(G)
    -- A limit with no counts kept: the layout before kept them unmarked, or old code set it.
    if not counted_too then
      recount_groups(G, prefix, leased)
      counted_too = true
    end
  end
  -- Without a limit the counts are not kept here. ('#counted' left by a config.lua of the layout
  -- before that set the limit to 0 would let ack lower counts nothing raises: they only go, and
  -- any later limit set by today's config.lua counts afresh.)
  local dropped
  popped, dropped = lease_groups(n, per_group, counted_too, found == 1)
  -- Groups found empty or at their limit left turns: the ones behind them may have work.
  if #popped == 0 and dropped and redis.call('EXISTS', G.turns) == 1 then
    popped = lease_groups(n, per_group, counted_too, false)
  end
  grouped_pairs = true
end
if #popped == 0 then return out end

local token = take_seq(seqkey, #popped / 2) - #popped / 2
out[2] = token
-- One deadline string for the batch (when the caller gave the lease length), so ZADD
-- does not format the same number once per job.
local deadline = lease_ms > 0 and string.format('%d', now + lease_ms)
local lz, tz, wb = {}, {}, waits and {}
for i = 1, #popped, 2 do
  local id = popped[i]
  local f = redis.call('HMGET', prefix .. id, 'p', 'a', 'm', 'g', 'tp')
  if f[1] then
    token = token + 1
    if wb and (not f[2] or f[2] == '0') then  -- a first start: its wait since the enqueue
      local e = tonumber(string.match(f[3], '^%d,%d+,%d+,(%d+)'))
      if e then
        local b = math.min(200, math.floor(math.log(math.max(0, now - e) + 1) * WAIT_SCALE + 1e-9))
        wb[b] = (wb[b] or 0) + 1
      end
    end
    lz[#lz + 1] = deadline or now + tonumber(string.match(f[3], '^%d,%d+,(%d+)'))
    lz[#lz + 1] = id
    tz[#tz + 1] = id
    tz[#tz + 1] = string.format('%d', token)
    local group = grouped_pairs and popped[i + 1]
    if f[5] then
      out[#out + 1] = id .. ' ' .. (f[2] or '0') .. ' ' .. f[3] .. ' ' .. (f[4] or '0') .. ' ' .. (group or '')
        .. ' ' .. f[5]
    elseif group then
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
if wb then
  for b, c in pairs(wb) do redis.call('HINCRBY', waits, text(b), text(c)) end
end
return out
