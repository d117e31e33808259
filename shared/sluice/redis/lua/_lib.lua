-- _lib.lua: helpers shared by the scripts. Not a script itself: scripts.py pastes
-- this file where a script says "--@include _lib.lua" (Lua code only, never
-- Python values). Helpers take their keys as parameters; every key still comes
-- from the calling script's KEYS.
--
-- Job hash fields (kept to short names, because the hash is read on every lease):
--   p  payload JSON (stored as given; never decoded here)
--   pr priority 0..9        ma max attempts        lm default lease ms
--   e  enqueued-at ms        s  state: w waiting (ready or delayed) | l leased | x dead
--   t  Redis token (absent = 0; liveness only, DynamoDB mints the fencing token)
--   a  attempts (absent = 0)  w worker id (while leased)  c "1" = cancel requested
--   err last error
--
-- Job keys are built as <job prefix> .. <job id>; the prefix is passed in KEYS and
-- carries the {queue} hash tag, so every job key lives in the same cluster slot.

local BAND = 17592186044416          -- 2^44: ready score = (9 - priority) * BAND + seq
-- Limits; tests/unit/test_engine_lua.py checks they equal sluice.models' constants.
local MAX_PRIORITY = 9
local MAX_ATTEMPTS = 100
local MIN_LEASE_MS = 10
local MAX_LEASE_MS = 43200000
local MAX_DELAY_MS = 604800000

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- A canonical integer in [lo, hi], or nil. Rejects "0x10", "1e3", " 5", "" and floats.
local function int_in(v, lo, hi)
  if type(v) ~= 'string' or not string.match(v, '^%-?%d+$') or #v > 16 then return nil end
  local n = tonumber(v)
  if n < lo or n > hi then return nil end
  return n
end

local function ready_score(priority, seq)
  return (MAX_PRIORITY - priority) * BAND + seq
end

local function invalid(what)
  return redis.error_reply('INVALID_INPUT ' .. what)
end

-- Validate the 7 job fields starting at ARGV[i]:
--   id, payload, priority, max_attempts, lease_ms, run_at_ms, enqueued_at_ms.
-- Returns nil when valid, else an error reply.
local function check_job(i, now)
  local id = ARGV[i]
  if type(id) ~= 'string' or #id == 0 or #id > 128 or not string.match(id, '^[%w][%w_.%-]*$') then
    return invalid('job id')
  end
  if type(ARGV[i + 1]) ~= 'string' or #ARGV[i + 1] == 0 then return invalid('payload of ' .. id) end
  if not int_in(ARGV[i + 2], 0, MAX_PRIORITY) then return invalid('priority of ' .. id) end
  if not int_in(ARGV[i + 3], 1, MAX_ATTEMPTS) then return invalid('max_attempts of ' .. id) end
  if not int_in(ARGV[i + 4], MIN_LEASE_MS, MAX_LEASE_MS) then return invalid('lease_ms of ' .. id) end
  if not int_in(ARGV[i + 5], 0, now + MAX_DELAY_MS) then return invalid('run_at_ms of ' .. id) end
  if not int_in(ARGV[i + 6], 0, now + MAX_DELAY_MS) then return invalid('enqueued_at_ms of ' .. id) end
  return nil
end

-- Create the jobs whose ARGV offsets are listed in `starts` (already validated, known
-- to be new). Ready jobs share one INCRBY of the sequence and one ZADD.
local function create_jobs(prefix, ready, delayed, seqkey, starts, now)
  local n_ready = 0
  for _, i in ipairs(starts) do
    if tonumber(ARGV[i + 5]) <= now then n_ready = n_ready + 1 end
  end
  local seq = 0
  if n_ready > 0 then seq = redis.call('INCRBY', seqkey, n_ready) - n_ready end
  local rz, dz = {}, {}
  for _, i in ipairs(starts) do
    local id, pr, run_at = ARGV[i], tonumber(ARGV[i + 2]), tonumber(ARGV[i + 5])
    local enq = tonumber(ARGV[i + 6])
    if enq == 0 then enq = now end
    redis.call('HSET', prefix .. id, 'p', ARGV[i + 1], 'pr', pr, 'ma', ARGV[i + 3],
      'lm', ARGV[i + 4], 'e', enq, 's', 'w')
    if run_at <= now then
      seq = seq + 1
      rz[#rz + 1] = ready_score(pr, seq)
      rz[#rz + 1] = id
    else
      dz[#dz + 1] = run_at
      dz[#dz + 1] = id
    end
  end
  if #rz > 0 then redis.call('ZADD', ready, unpack(rz)) end
  if #dz > 0 then redis.call('ZADD', delayed, unpack(dz)) end
end

-- Put one job back in ready at the end of its priority band.
local function to_ready(ready, seqkey, id, priority)
  local seq = redis.call('INCR', seqkey)
  redis.call('ZADD', ready, ready_score(priority, seq), id)
end

-- Before leasing (and from reap): move due delayed jobs to ready and expired leases
-- back to ready, or to dead when their attempts are used up (attempts were counted
-- when they were leased), or drop them when a cancel was requested. At most `limit`
-- of each per call, so one call never blocks the server for long.
-- Returns expired, promoted.
local function reclaim(prefix, ready, delayed, leased, dead, seqkey, now, limit)
  local promoted, expired = 0, 0
  if limit <= 0 then return 0, 0 end
  local due = redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, limit)
  if #due > 0 then
    local seq = redis.call('INCRBY', seqkey, #due) - #due
    local rz = {}
    for k, id in ipairs(due) do
      local pr = tonumber(redis.call('HGET', prefix .. id, 'pr'))
      if pr then
        rz[#rz + 1] = ready_score(pr, seq + k)
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
    local dz = {}
    for _, id in ipairs(gone) do
      local key = prefix .. id
      local f = redis.call('HMGET', key, 'a', 'ma', 'pr', 'c')
      local a, ma, pr = tonumber(f[1]) or 0, tonumber(f[2]), tonumber(f[3])
      if f[4] == '1' then
        redis.call('DEL', key)
      elseif pr == nil then
        -- A leased id without a hash: nothing to put back.
      elseif a >= ma then
        redis.call('HSET', key, 's', 'x', 'err', 'lease expired on attempt ' .. a)
        dz[#dz + 1] = now
        dz[#dz + 1] = id
      else
        redis.call('HSET', key, 's', 'w', 'err', 'lease expired on attempt ' .. a)
        to_ready(ready, seqkey, id, pr)
      end
    end
    if #dz > 0 then redis.call('ZADD', dead, unpack(dz)) end
    redis.call('ZREMRANGEBYRANK', leased, 0, #gone - 1)
    expired = #gone
  end
  return expired, promoted
end

-- The holder check shared by extend, ack, fail and release. f = HMGET(t, s).
-- Returns nil when `token` holds the lease, else an error code and the current token
-- as its stored string (Lua would print a number above 1e14 in exponent form).
local function holder_error(f, token)
  if not f[1] and not f[2] then return 'NOT_FOUND' end
  local cur = tonumber(f[1]) or 0
  if token < cur then return 'STALE_TOKEN', f[1] end
  if token > cur or f[2] ~= 'l' then return 'LEASE_LOST', f[1] or '0' end
  return nil
end

-- The error text for a failed holder check ("CODE job=<id> mine=<t> current=<t>").
local function holder_reply(code, id, mine, cur)
  if code == 'NOT_FOUND' then return 'NOT_FOUND job=' .. id end
  return code .. ' job=' .. id .. ' mine=' .. mine .. ' current=' .. cur
end
