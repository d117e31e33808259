-- _lib.lua: helpers shared by the scripts. Not a script itself: scripts.py pastes
-- this file where a script says "--@include _lib.lua" (Lua code only, never
-- Python values). Helpers take their keys as parameters; every key still comes
-- from the calling script's KEYS.
--
-- A job is a small hash (few fields, so one HMGET serves a lease):
--   p    payload JSON, stored as given (never decoded here)
--   m    "<priority>,<max_attempts>,<lease_ms>,<enqueued_at_ms>" (priority is one digit;
--        an enqueued_at_ms of 0 is replaced by the script's TIME; a max_attempts of 0: its caller
--        sent none, the handler's retry policy decides: see max_attempts_of)
--   a    attempts used by leases that have ended (absent = 0); the running lease is
--        attempt a + 1. Ack deletes the hash, so a is only written when a lease fails,
--        expires or is redriven: a lease itself writes nothing to the job hash.
--   c    "1" when a cancel was requested while the job was leased
--   err  the last error
--   g    redrive generation (absent = 0): set by redrive.lua to the generation the jobs
--        table minted for that redrive; lease hands it to the worker, whose grant may
--        leave a final item only for a newer generation (docs/store.md)
--   grp  its fair-share group (absent: the queue's default group). A grouped job waits in its
--        group's ready zset (<group prefix> .. grp), not in ready; see "Fair groups" below.
--   tp   its W3C traceparent (absent: untraced; sluice.core.traces): the worker's spans of the
--        job are children of it. Counted in sz.
--   sz   the bytes the job counts against its queue's budget (job_size): added to the
--        queue's used counter (keys.used) when the hash is made, taken off when it is
--        deleted (release_bytes). A hash without sz (made before budgets) counts 0.
-- A job's state is where its id is: ready or delayed (waiting), leased (and a field in
-- the tokens hash holding its lease token), or dead.
--
-- Lease tokens come from the queue's seq counter (one take_seq per lease call), so a
-- job's lease tokens strictly increase, across a Redis data loss and a failover to a lagging
-- replica too (take_seq never goes below TIME in microseconds). DynamoDB mints the fencing token; its grant refuses a lease
-- token below the one it last granted (docs/store.md). The same counter orders ready
-- jobs FIFO within a priority.
--
-- Job keys are built as <job prefix> .. <job id>; the prefix is passed in KEYS and
-- carries the {queue} hash tag, so every job key lives in the same cluster slot.
--
-- Error replies read "CODE text k=v ...": scripts.py maps CODE to a sluice.core.errors class.

local BAND = 17592186044416          -- 2^44: ready score = (9 - priority) * BAND + seq
local FRONT = 8796093022208          -- 2^43: a reclaimed job's score is its ready score - FRONT
-- Bands stay apart while the jobs in ready at once took their seqs less than FRONT steps
-- apart. take_seq keeps the counter at or above TIME in microseconds, so that is while they
-- entered ready less than FRONT µs (about 101 days) apart: a job that waited in ready longer
-- (a queue paused for months) is leased ahead of newer jobs of the higher bands, and stats.lua
-- no longer sees it as its band's head. Nothing is lost or leased twice; only the order bends.
-- Limits; tests/unit/test_engine_lua.py checks they equal sluice.core.models' constants.
local MAX_PRIORITY = 9
local MAX_ATTEMPTS = 100
local DEFAULT_MAX_ATTEMPTS = 5       -- an unset (0) max_attempts where no worker told a policy: reclaim
-- The config hash's field holding the handler's retry policy's max_attempts (lease.lua, lapse_limit).
local POLICY_FIELD = 'policy_attempts'
local MIN_LEASE_MS = 10
local MAX_LEASE_MS = 43200000
local MAX_DELAY_MS = 604800000
local MAX_SKEW_MS = 3600000          -- a run_at up to this past TIME + 7 days is clamped, not refused
local MAX_TOKEN = 9007199254740991   -- 2^53 - 1: Lua numbers are doubles
-- What a job counts against its budget besides its own bytes (sluice.core.limits.JOB_OVERHEAD_BYTES).
local JOB_OVERHEAD = 200
-- The job hash's format (sluice.core.formats.REDIS_JOB), its field v. Format 1 (no v: written before
-- issue 29) has p, m and perhaps g, a, err, c, and no sz or grp: every script reads it (sz absent
-- counts 0 bytes; no grp: the job is in no group).
local JOB_FORMAT = '2'
-- Queues named with this prefix are Sluice's own (sluice.core.models.RESERVED_QUEUE_PREFIX).
local RESERVED_PREFIX = 'sluice-'

-- Redis TIME in microseconds, read once per script call (now_ms and take_seq share it: a TIME
-- costs as much as the rest of take_seq).
local time_us = nil
local function now_us()
  if not time_us then
    local t = redis.call('TIME')
    time_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return time_us
end

local function small_hget(key, field, max)
  -- Bounded reads of a value a team's own Redis user may write by hand (its worker user may write
  -- every key of its queues: docs/security.md, "Values a team may stuff"). A script that reads such a
  -- value for another user (the relay, a gateway, the operator) first asks its length: a 10 MB value
  -- copied into Lua cost 20-130 ms a call with Redis blocked, at every push or stats call of the
  -- queue. Each returns the value; false when it is missing (or empty); true when it is longer than
  -- `max` (not read: the caller decides what such a value means). By pcall: a user whose access
  -- string predates STRLEN (ElastiCache applying the template after the layer runs) reads it whole.
  local n = redis.pcall('HSTRLEN', key, field)
  if type(n) ~= 'number' then return redis.call('HGET', key, field) end
  if n == 0 then return false end
  if n > max then return true end
  return redis.call('HGET', key, field)
end

local function small_get(key, max)
  -- small_hget's, for a string key.
  local n = redis.pcall('STRLEN', key)
  if type(n) ~= 'number' then return redis.call('GET', key) end
  if n == 0 then return false end
  if n > max then return true end
  return redis.call('GET', key)
end

local function now_ms()
  return math.floor(now_us() / 1000)
end

-- A canonical integer in [lo, hi], or nil. Rejects "0x10", "1e3", " 5", "" and floats.
local function int_in(v, lo, hi)
  if type(v) ~= 'string' or #v > 16 or not string.match(v, '^%-?%d+$') then return nil end
  local n = tonumber(v)
  if n < lo or n > hi then return nil end
  return n
end

local function invalid(what)
  return redis.error_reply('INVALID_INPUT ' .. what)
end

-- The queue of a key, read from its {hash tag} (keys.py puts it in every key of a queue).
local function queue_of(key)
  local s, e = string.find(key, '%b{}')
  if s then return string.sub(key, s + 1, e - 1) end
  return nil
end

-- Whether `key` belongs to a reserved queue (Sluice's own).
local function is_reserved(key)
  local queue = queue_of(key)
  return queue ~= nil and string.sub(queue, 1, #RESERVED_PREFIX) == RESERVED_PREFIX
end

-- nil when the queue of `key` is public, else the RESERVED_QUEUE error reply. Only
-- enqueue_internal.lua writes jobs into a reserved queue.
local function refuse_reserved(key)
  if is_reserved(key) then
    local queue = queue_of(key)
    return redis.error_reply('RESERVED_QUEUE queue=' .. queue .. ' prefix=' .. RESERVED_PREFIX)
  end
  return nil
end

-- The most a job's sz can be: 10 digits, more than one job Redis can hold (a string is at most
-- 512 MB). Summed over a call's 1000 jobs it stays below 1e17, an integer Redis reads from Lua.
local MAX_JOB_BYTES = 9999999999

local function size_of(key)
  -- The bytes job hash `key` counts against its budget, for the relay's, a gateway's and the
  -- operator's scripts. Its team's worker user may write sz by hand (docs/security.md, "Values a
  -- team may stuff"): it is read bounded, and one that is not a count of at most MAX_JOB_BYTES counts
  -- 0, so the team loses only its own byte accounting and the caller's DECRBY cannot refuse it after
  -- the caller's first write. Worker scripts (and a lapsed job's, in lease.lua and reap.lua) check sz
  -- the same way after reading it whole: the worker's user has no HSTRLEN.
  return int_in(small_hget(key, 'sz', 10), 0, MAX_JOB_BYTES) or 0
end

-- The queue's seq counter moved on by n (n >= 1) to at least TIME in microseconds + n; returns
-- its new value v: the caller takes v - n + 1 .. v, n consecutive values above both the counter's
-- old value and TIME. Every script takes seq through here, after it validated its input.
--
-- Why max(counter + n, TIME + n) and not INCRBY alone: Redis can forget its last writes. A counter that
-- is missing (Redis lost its data, or the queue is new) would start again from n, and a replica
-- that lagged behind its primary when it was promoted keeps an older counter; either way lease
-- tokens already handed out would be handed out again. The jobs table's grant refuses a lease
-- token below the one it last granted and accepts an equal one (a retry of the same lease), so a
-- repeated token let the older holder's grant land after the new holder's and make it stale
-- (docs/store.md, "A grant is fenced on the Redis lease"; the job model's preloss-worker-grants
-- and failover-holders-share-a-token). Drawn from TIME, the first token after a loss or a
-- failover is above every one handed out before it as long as the counter never ran ahead of
-- TIME by more than the time the loss or failover took (seconds: it runs ahead only while the
-- queue takes more than a million seqs a second, a job takes about three an attempt) and the new
-- primary's clock is not behind the old one's by as much (ElastiCache's nodes keep NTP time).
-- TIME in µs was about 1.8e15 in 2026: tokens and ready scores stay below 2^53 (exact in a
-- double, MAX_TOKEN) until about 2250. Ready scores within a band are FIFO as before; see FRONT
-- for the bound this puts on how long a job may wait in ready.
-- Reserved queues take INCRBY alone: their lease tokens are the low 32 bits of the relay's owner
-- tokens (sluice.relay.recovery.tracker.owner_token), and a recovery generation above them
-- orders them across a loss or a failover (a promoted replica has a new replication id, so the
-- Redis epoch changes and the relay replays under the next generation: docs/redis-loss.md).
local function take_seq(seqkey, n)
  if is_reserved(seqkey) then return redis.call('INCRBY', seqkey, n) end
  local v = math.max(tonumber(redis.call('GET', seqkey)) or 0, now_us()) + n
  redis.call('SET', seqkey, string.format('%d', v))
  return v
end

-- The bytes job `id` counts against its queue's budget (sluice.core.limits.job_bytes).
local function job_size(prefix, id, payload, meta)
  return #payload + #meta + 2 * #id + #prefix + JOB_OVERHEAD
end

-- Give back `n` bytes of the queue's budget (keys.used): jobs whose hashes were deleted. The
-- counter never goes below 0 (a hash counted before a counter was lost is not counted twice).
-- The team's own user may SET the counter: one DECRBY refuses (not an integer; near -2^63) is
-- dropped, as push.lua drops it (counted from 0 again), by pcall: the caller wrote already, and
-- failing here would leave its call half done.
local function release_bytes(used, n)
  if n <= 0 then return end
  local left = redis.pcall('DECRBY', used, n)
  if type(left) ~= 'number' or left <= 0 then redis.call('DEL', used) end
end

-- The sum of the sz fields of the job hashes `keys` (before they are deleted).
local function sizes_of(keys)
  local n = 0
  for _, key in ipairs(keys) do n = n + size_of(key) end
  return n
end

local function ready_score(priority, seq)
  return (MAX_PRIORITY - priority) * BAND + seq
end

local function priority_of(meta)
  return string.byte(meta, 1) - 48
end

-- The job's max_attempts, or `unset` when its caller sent none (0): the handler's retry policy
-- decides then, and only the worker knows it. fail.lua passes MAX_ATTEMPTS (the worker's own
-- verdict, its `permanent`, decides).
local function max_attempts_of(meta, unset)
  local m = tonumber(string.match(meta, '^%d,(%d+)'))
  if m == 0 then return unset end
  return m
end

-- The policy's attempts as the config hash keeps them (HGET's reply), or false: none told, or a
-- value no script wrote (only lease.lua writes the field; config.lua refuses it).
local function policy_of(v)
  return int_in(v, 1, MAX_ATTEMPTS) or false
end

-- The attempts a lapsed lease may use up (reclaim: no worker is asked, it died, froze or timed out):
-- sluice.core.policy.attempts_allowed, the caller's max_attempts and the handler's retry policy's
-- `policy` (a number; false when no worker told one: DEFAULT_MAX_ATTEMPTS for an unset job, as before
-- policies), the lower when both say. The worker tells the policy with each lease (lease.lua
-- ARGV[4]), kept in the queue's config hash as POLICY_FIELD.
local function lapse_limit(meta, policy)
  local m = tonumber(string.match(meta, '^%d,(%d+)'))
  if not policy then
    if m == 0 then return DEFAULT_MAX_ATTEMPTS end
    return m
  end
  if m == 0 or m > policy then return policy end
  return m
end

-- Validate a job given as A[i..i+3]: id, payload, meta, run_at_ms (A: ARGV, or the records
-- push.lua decoded from its one argument).
-- Returns nil when valid, else an error reply. Jobs of one batch mostly share their
-- "<priority>,<max_attempts>,<lease_ms>" head, so each distinct head is range-checked
-- once per call (`heads`); enqueued_at_ms must be at most 13 digits (before 2286) and
-- run_at_ms "0" needs no parsing: these checks run for every job of every push.
local heads = {}
local function check_job(A, i, now)
  local id, payload, meta, run_at = A[i], A[i + 1], A[i + 2], A[i + 3]
  if type(id) ~= 'string' or type(payload) ~= 'string' or type(meta) ~= 'string' then
    return invalid('job')
  end
  if #id == 0 or #id > 128 or not string.match(id, '^[%w][%w_.%-]*$') then
    return invalid('job id')
  end
  if #payload == 0 then return invalid('payload of ' .. id) end
  local head, e = string.match(meta, '^(%d,%d%d?%d?,%d+),(%d+)$')
  if not head or #e > 13 then return invalid('meta of ' .. id) end
  if not heads[head] then
    local ma, lm = string.match(head, '^%d,(%d+),(%d+)$')
    ma, lm = tonumber(ma), tonumber(lm)
    if ma < 0 or ma > MAX_ATTEMPTS or lm < MIN_LEASE_MS or lm > MAX_LEASE_MS then
      return invalid('meta of ' .. id)
    end
    heads[head] = true
  end
  -- The caller bounded the delay on its own clock, which may be a little ahead of TIME:
  -- refusing it here would refuse its whole batch, so up to MAX_SKEW_MS past the horizon is
  -- accepted and create_jobs clamps it to TIME + 7 days. Beyond that it is nonsense.
  if run_at ~= '0' and not int_in(run_at, 0, now + MAX_DELAY_MS + MAX_SKEW_MS) then
    return invalid('run_at_ms of ' .. id)
  end
  return nil
end

-- Keys of the jobs at offsets `starts` of A that do not exist yet (and are not repeated
-- within the batch), as a list of offsets. One EXISTS over the whole batch answers
-- the common case (all new); only when some exist is each one looked up.
local function new_jobs(A, prefix, starts)
  local keys = {}
  for k, i in ipairs(starts) do keys[k] = prefix .. A[i] end
  local fresh, seen = {}, {}
  local any = #keys > 0 and redis.call('EXISTS', unpack(keys)) > 0
  for k, i in ipairs(starts) do
    local id = A[i]
    if not seen[id] and not (any and redis.call('EXISTS', keys[k]) == 1) then
      fresh[#fresh + 1] = i
    end
    seen[id] = true
  end
  return fresh
end

-- Fair groups (issue 28, item 5; docs/engine.md "Fair groups"). A script that may move a grouped
-- job takes three more KEYS, passed to the helpers as G = {prefix=, turns=, state=}:
--   prefix  sluice:{q}:g:  a group's ready zset is prefix .. group (same scores as ready)
--   turns   list: the rotation of groups that may have a job to lease, in turn order, each once
--           (sluice:{q}:rota; lease.lua takes its head groups with one LPOP and pushes back with
--           one RPUSH the served ones that still have work: no turn number to format per group)
--   state   hash: <group> -> its leased jobs (absent = 0), kept only while '#counted' is there (a
--           per-group limit is set: config.lua; without one nothing reads them, and keeping them
--           cost a count per group served in every lease and ack); '>' .. group -> '1' while the
--           group is in turns (so joining keeps its place: one HSETNX); '#ready' -> jobs in all the
--           groups' ready zsets. No group name starts with '#' or '>' (valid_group).
-- Ungrouped jobs (the default group) stay in ready and touch none of these. A group is put in
-- turns (keeping its place if it is there) whenever it may have become leasable: a job entered its
-- ready zset, or one of its leases ended. lease.lua drops a group it finds empty or at its limit.
-- Before this layout turns was a zset (sluice:{q}:turns, group -> turn number, and '#turn' in
-- state): lease.lua moves what it finds there into the list (lease.lua, migrate_turns).
local function valid_group(g)
  return #g <= 64 and string.match(g, '^[%w][%w_.:%-]*$') ~= nil
end

-- A traceparent as the gateway writes it (sluice.core.traces.PATTERN): version 00, lower-case hex.
local function valid_trace(t)
  return #t == 55 and string.match(t, '^00%-[0-9a-f]+%-[0-9a-f]+%-[0-9a-f][0-9a-f]$') ~= nil
    and string.sub(t, 36, 36) == '-' and string.sub(t, 53, 53) == '-'
end

-- A job's optional field (its group, its traceparent): '' is none; else it must pass `valid` and is
-- kept in `map` (made on first use) under the job's offset `at`. Returns the map, and false if invalid.
local function keep_optional(map, at, value, valid)
  if value == '' then return map, true end
  if type(value) ~= 'string' or not valid(value) then return map, false end
  map = map or {}
  map[at] = value
  return map, true
end

local function keys_of_groups(prefix, turns, state)
  return {prefix = prefix, turns = turns, state = state}
end

-- `group` joins the end of turns unless it is in them already (then it keeps its place: the
-- common case for a busy group, one HSETNX).
local function enter_turns(G, group)
  if redis.call('HSETNX', G.state, '>' .. group, '1') == 1 then redis.call('RPUSH', G.turns, group) end
end

-- Whether the groups' leased counts are kept ('#counted'); read once per script call.
local counting = nil
local function counts_kept(G)
  if counting == nil then counting = redis.call('HEXISTS', G.state, '#counted') == 1 end
  return counting
end

-- Forget every group's leased count (and '#counted'); returns the groups that had one.
local function drop_counts(G)
  local state, had = redis.call('HGETALL', G.state), {}
  for i = 1, #state, 2 do
    local c = string.sub(state[i], 1, 1)
    if c ~= '#' and c ~= '>' then had[#had + 1] = state[i] end
  end
  for i = 1, #had, 1000 do redis.call('HDEL', G.state, unpack(had, i, math.min(i + 999, #had))) end
  redis.call('HDEL', G.state, '#counted')
  counting = false
  return had
end

-- Count each group's leased jobs afresh from the leased set (the truth) and keep them from now on:
-- a per-group limit was set, or found set with no counts kept (an earlier layout kept them always,
-- unmarked). O(leased jobs), once per change of the limit. Returns the groups that had a count.
local function recount_groups(G, prefix, leased)
  local had = drop_counts(G)
  local per, args = {}, {'#counted', '1'}
  for _, id in ipairs(redis.call('ZRANGE', leased, 0, -1)) do
    local g = redis.call('HGET', prefix .. id, 'grp')
    if g then per[g] = (per[g] or 0) + 1 end
  end
  for g, k in pairs(per) do
    args[#args + 1] = g
    args[#args + 1] = k
  end
  for i = 1, #args, 1000 do redis.call('HSET', G.state, unpack(args, i, math.min(i + 999, #args))) end
  counting = true
  return had
end

-- Job `id` with ready score `score` into its ready set: ready, or its group's (`group` nil: none).
local function add_ready(G, ready, group, score, id)
  if not group then
    redis.call('ZADD', ready, score, id)
    return
  end
  redis.call('ZADD', G.prefix .. group, score, id)
  redis.call('HINCRBY', G.state, '#ready', 1)
  enter_turns(G, group)
end

-- `k` leases of `group`'s jobs ended: its count goes down, and it takes turns again if it has work
-- (it may have left them at its limit). Without a limit (no counts) a group left turns only when
-- it had no ready job, and one arriving brings it back: nothing to do.
local function group_done(G, group, k)
  if not counts_kept(G) then return end
  if redis.call('HINCRBY', G.state, group, -k) <= 0 then redis.call('HDEL', G.state, group) end
  if redis.call('ZCARD', G.prefix .. group) > 0 then enter_turns(G, group) end
end

-- Remove waiting job `id` of `group` from its group's ready zset (a cancel); the group leaves turns
-- when that was its last ready job.
local function remove_grouped(G, group, id)
  local key = G.prefix .. group
  if redis.call('ZREM', key, id) == 0 then return end
  redis.call('HINCRBY', G.state, '#ready', -1)
  if redis.call('ZCARD', key) == 0 and redis.call('HDEL', G.state, '>' .. group) == 1 then
    redis.call('LREM', G.turns, 1, group)
  end
end

-- Create the (validated, new) jobs at offsets `starts` of A. Ready jobs share one
-- take_seq and one ZADD (per group); delayed ones one ZADD, run-at at most 7 days
-- from TIME. Each job's size is stored as its sz and added to `used` (one INCRBY), its format as
-- v. `groups` (or
-- nil: no job has one) maps an offset to its job's group, `traces` (or nil) to its traceparent.
local function create_jobs(A, prefix, ready, delayed, seqkey, starts, now, used, G, groups, traces)
  local n_ready = 0
  for _, i in ipairs(starts) do
    if tonumber(A[i + 3]) <= now then n_ready = n_ready + 1 end
  end
  local seq = 0
  if n_ready > 0 then seq = take_seq(seqkey, n_ready) - n_ready end
  local rz, dz, gz, order, bytes, fixed = {}, {}, nil, {}, 0, #prefix + JOB_OVERHEAD
  -- Numbers go to Redis as strings made here: redis.call formats a number argument with %.17g,
  -- which costs about as much as a small command (docs/engine.md); sizes repeat, so each distinct
  -- one is formatted once, and a score, unique, with '%d' (issue 30).
  local sizes = {}
  for _, i in ipairs(starts) do
    local id, meta, run_at = A[i], A[i + 2], math.min(tonumber(A[i + 3]), now + MAX_DELAY_MS)
    local n = #A[i + 1] + #meta + 2 * #id + fixed  -- job_size, inlined: this runs for every job pushed
    local trace = traces and traces[i]
    if trace then n = n + #trace end
    bytes = bytes + n
    local sz = sizes[n]
    if not sz then
      sz = string.format('%d', n)
      sizes[n] = sz
    end
    if string.sub(meta, -2) == ',0' then meta = string.sub(meta, 1, -2) .. now end  -- enqueued now
    local group = groups and groups[i]
    if group or trace then  -- tp is optional, as grp: format 2 (readers of before ignore it)
      local f = {'p', A[i + 1], 'm', meta, 'sz', sz, 'v', JOB_FORMAT}
      if group then f[#f + 1], f[#f + 2] = 'grp', group end
      if trace then f[#f + 1], f[#f + 2] = 'tp', trace end
      redis.call('HSET', prefix .. id, unpack(f))
    else
      redis.call('HSET', prefix .. id, 'p', A[i + 1], 'm', meta, 'sz', sz, 'v', JOB_FORMAT)
    end
    if run_at <= now then
      seq = seq + 1
      local z = rz
      if group then
        gz = gz or {}
        z = gz[group]
        if not z then
          z = {}
          gz[group] = z
          order[#order + 1] = group  -- groups enter turns in the order their jobs came
        end
      end
      z[#z + 1] = string.format('%d', ready_score(priority_of(meta), seq))
      z[#z + 1] = id
    else
      dz[#dz + 1] = string.format('%d', run_at)
      dz[#dz + 1] = id
    end
  end
  if #rz > 0 then redis.call('ZADD', ready, unpack(rz)) end
  if #dz > 0 then redis.call('ZADD', delayed, unpack(dz)) end
  if bytes > 0 then redis.call('INCRBY', used, bytes) end
  if gz then
    local added = 0
    for _, group in ipairs(order) do
      local z = gz[group]
      redis.call('ZADD', G.prefix .. group, unpack(z))
      added = added + #z / 2
      enter_turns(G, group)
    end
    redis.call('HINCRBY', G.state, '#ready', added)
  end
end

-- The body of enqueue.lua and enqueue_internal.lua, which differ only in which queues they
-- accept: ARGV = n, then n x (id, payload, meta, run_at_ms, group or "", traceparent or ""). Validates every job
-- before the first write, creates the new ones, and returns 1 (added) or 0 (already there) per job.
-- Their bytes are counted in `used`, with no budget: only the relay's push.lua enforces one.
-- G: the group keys (keys_of_groups).
local function enqueue_jobs(prefix, ready, delayed, seqkey, used, G)
  local k = int_in(ARGV[1], 1, 1000)
  if not k or #ARGV ~= 1 + 6 * k then return invalid('job count') end

  local now = now_ms()
  local starts, groups, traces = {}, nil, nil
  for r = 1, k do
    local i = 6 * r - 4
    local bad = check_job(ARGV, i, now)
    if bad then return bad end
    local ok
    groups, ok = keep_optional(groups, i, ARGV[i + 4], valid_group)
    if not ok then return invalid('group of ' .. ARGV[i]) end
    traces, ok = keep_optional(traces, i, ARGV[i + 5], valid_trace)
    if not ok then return invalid('traceparent of ' .. ARGV[i]) end
    starts[r] = i
  end

  local fresh = new_jobs(ARGV, prefix, starts)
  create_jobs(ARGV, prefix, ready, delayed, seqkey, fresh, now, used, G, groups, traces)
  local added, out = {}, {}
  for _, i in ipairs(fresh) do added[i] = true end
  for r = 1, k do out[r] = added[starts[r]] and 1 or 0 end
  return out
end

-- The settle-set member recording that job `id` (redrive generation `g`, a hash field
-- value or false) ended in `state` with no worker left to tell the jobs table:
-- "<state>:<g>:<id>". The relay fences its DynamoDB write on the generation (docs/store.md).
local function settle_member(state, id, g)
  return state .. ':' .. (g or '0') .. ':' .. id
end

-- Add to the queue's cumulative counts of jobs that left it for good (keys.finished: a hash
-- succeeded / dead / cancelled). Only ever incremented; readers take differences between two
-- reads, so reading never takes a count away from another reader.
local function count_finished(finished, succeeded, dead, cancelled)
  if succeeded > 0 then redis.call('HINCRBY', finished, 'succeeded', succeeded) end
  if dead > 0 then redis.call('HINCRBY', finished, 'dead', dead) end
  if cancelled > 0 then redis.call('HINCRBY', finished, 'cancelled', cancelled) end
end

-- Put one job back in ready (its group's, `group` not nil) at the end of its priority band.
local function to_ready(G, ready, seqkey, id, priority, group)
  local seq = take_seq(seqkey, 1)
  add_ready(G, ready, group, ready_score(priority, seq), id)
end

-- A dead job redriven: fresh attempts, no cancel request, redrive generation `gen` (a string; '0'
-- leaves g alone), back in ready (its group's) at the end of its band. `f`: its HMGET 'm', 'g',
-- 'grp'. The caller takes it out of the dead set (redrive.lua; push.lua, a redrive a failover lost).
local function redriven_to_ready(G, key, ready, seqkey, id, gen, f)
  redis.call('HDEL', key, 'a', 'c')
  if gen ~= '0' then redis.call('HSET', key, 'g', gen) end
  to_ready(G, ready, seqkey, id, priority_of(f[1]), f[3] or nil)
end

-- A "reap" step on the timeline of each job whose lapsed lease reclaim took back (issue 32): the
-- lease token that lapsed (l: the drawing's lane), the attempt it used up (a) and where the job
-- went (o: ready, dead, cancelled, or gone when its hash was missing), at Redis TIME, as
-- timeline.lua appends (capped at tl.cap, expiring tl.ttl after): three calls per lapsed lease.
-- The step is sluice.core.timeline's format, built here as text (no JSON library needed).
local function note_reaps(tl, gone, fs, ends, leases, now)
  for k, id in ipairs(gone) do
    local lease = leases[k] and string.match(leases[k], '^%d+$')
    local a = (tonumber(fs[k][1]) or 0) + 1
    local step = string.format('{"t":%d,"k":"reap","w":"relay",%s"a":%d,"o":"%s"}', now,
      lease and '"l":' .. lease .. ',' or '', a, ends[k])
    local key = tl.prefix .. id
    local len = redis.call('RPUSH', key, step)
    if len > tl.cap then redis.call('LPOP', key, len - tl.cap) end
    redis.call('PEXPIRE', key, tl.ttl)
  end
end

-- Before leasing (and from reap): move due delayed jobs to ready, and end expired
-- leases: the attempt is counted, then the job goes back to the front of ready, or to dead when its
-- attempts are used up, or is dropped when a cancel was requested. At most `limit` of
-- each per call, so one call never blocks the server for long. Returns expired, promoted.
-- The endings (dead, cancelled) are added to the `finished` counters (count_finished).
-- A job dropped for its cancel request gives its bytes back to `used` (keys.used).
-- A lapsed job that goes back goes to the front of its priority band: it has waited longest, so
-- it runs next (and a frozen holder wakes to find it taken over). Its score is FRONT below the
-- band's usual scores: ahead of every job of its band, behind every job of the higher bands (see
-- FRONT), FIFO among reclaimed jobs. Their seqs are taken once for them all (one take_seq, not
-- one per job) and the ungrouped ones enter ready with one ZADD (issue 30: a batch's counters
-- move once); a grouped one enters its group's zset in its place among the others' writes.
-- A lapse ends the job's attempts at lapse_limit: `policy` is the handler's retry policy's attempts
-- as the caller read them from `config` (lease.lua: a number, or false for none); nil (reap.lua) reads
-- them from `config` here, only when a lease lapsed, so a reap with nothing to reclaim costs no read.
-- `tl` (reap.lua, while timelines are on; nil otherwise: no read, no write) is {prefix, ttl, cap}:
-- each lapsed lease gets a "reap" step on its job's timeline (note_reaps).
local function reclaim(prefix, ready, delayed, leased, tokens, dead, seqkey, settle, finished, used, now,
                       limit, G, config, policy, tl)
  local promoted, expired = 0, 0
  if limit <= 0 then return 0, 0 end
  local due = redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, limit)
  if #due > 0 then
    local seq = take_seq(seqkey, #due) - #due
    local rz = {}
    for k, id in ipairs(due) do
      local f = redis.call('HMGET', prefix .. id, 'm', 'grp')
      if f[2] then
        add_ready(G, ready, f[2], ready_score(priority_of(f[1]), seq + k), id)
      elseif f[1] then
        rz[#rz + 1] = string.format('%d', ready_score(priority_of(f[1]), seq + k))
        rz[#rz + 1] = id
      end
    end
    if #rz > 0 then redis.call('ZADD', ready, unpack(rz)) end
    -- The due ids are exactly ranks 0..#due-1: the lowest run-at scores.
    redis.call('ZREMRANGEBYRANK', delayed, 0, #due - 1)
    promoted = #due
  end
  local gone = redis.call('ZRANGEBYSCORE', leased, '-inf', now, 'LIMIT', 0, limit)
  if #gone > 0 then
    local dz, sz, n_dead, n_cancelled, freed = {}, {}, 0, 0, 0
    if policy == nil then policy = policy_of(redis.call('HGET', config, POLICY_FIELD)) end
    -- First every job's fields, and how many go back (their seqs, taken at once), then the writes.
    local fs, back = {}, 0
    for k, id in ipairs(gone) do
      local f = redis.call('HMGET', prefix .. id, 'a', 'm', 'c', 'g', 'sz', 'grp')
      fs[k] = f
      if f[3] ~= '1' and f[2] and (tonumber(f[1]) or 0) + 1 < lapse_limit(f[2], policy) then back = back + 1 end
    end
    local seq = back > 0 and take_seq(seqkey, back) - back or 0
    local rz, ends = {}, tl and {}
    for k, id in ipairs(gone) do
      local key, f = prefix .. id, fs[k]
      if ends then ends[k] = f[3] == '1' and 'cancelled' or not f[2] and 'gone' or 'ready' end
      if f[6] then group_done(G, f[6], 1) end
      if f[3] == '1' then
        redis.call('DEL', key)
        freed = freed + (int_in(f[5], 0, MAX_JOB_BYTES) or 0)  -- the team may write sz by hand
        n_cancelled = n_cancelled + 1
        sz[#sz + 1] = now
        sz[#sz + 1] = settle_member('cancelled', id, f[4])
      elseif f[2] then
        local a = (tonumber(f[1]) or 0) + 1
        redis.call('HSET', key, 'a', a, 'err', 'lease expired on attempt ' .. a)
        if a >= lapse_limit(f[2], policy) then
          if ends then ends[k] = 'dead' end
          dz[#dz + 1] = now
          dz[#dz + 1] = id
          n_dead = n_dead + 1
          sz[#sz + 1] = now
          sz[#sz + 1] = settle_member('dead', id, f[4])
        else
          seq = seq + 1
          local score = ready_score(priority_of(f[2]), seq) - FRONT
          if f[6] then
            add_ready(G, ready, f[6], score, id)
          else
            rz[#rz + 1] = string.format('%d', score)
            rz[#rz + 1] = id
          end
        end
      end
    end
    if #rz > 0 then redis.call('ZADD', ready, unpack(rz)) end
    if #dz > 0 then redis.call('ZADD', dead, unpack(dz)) end
    release_bytes(used, freed)
    count_finished(finished, 0, n_dead, n_cancelled)
    -- No worker is left to tell the jobs table, which still says "leased": the relay will.
    if #sz > 0 then redis.call('ZADD', settle, unpack(sz)) end
    if ends then note_reaps(tl, gone, fs, ends, redis.call('HMGET', tokens, unpack(gone)), now) end
    redis.call('HDEL', tokens, unpack(gone))
    -- The expired ids are exactly ranks 0..#gone-1: the earliest deadlines.
    redis.call('ZREMRANGEBYRANK', leased, 0, #gone - 1)
    expired = #gone
  end
  return expired, promoted
end

-- Why `mine` (a token, as ARGV string) does not hold job `id`'s lease, given the
-- current lease token `cur` (string, or false when the job is not leased).
-- Returns nil when it does, else the error text "CODE job=<id> mine=<t> current=<t>".
local function holder_error(id, mine, cur, job_key)
  if cur == mine then return nil end
  if not cur then
    if redis.call('EXISTS', job_key) == 0 then return 'NOT_FOUND job=' .. id end
    return 'LEASE_LOST job=' .. id .. ' mine=' .. mine
  end
  local code = 'LEASE_LOST'  -- a token never issued for this lease
  if tonumber(mine) < tonumber(cur) then code = 'STALE_TOKEN' end
  return code .. ' job=' .. id .. ' mine=' .. mine .. ' current=' .. cur
end
