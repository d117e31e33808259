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
--   Tokens come from one INCRBY of seq, so each is greater than any token the job had, before
--   a Redis data loss too (a missing seq is seeded from TIME: _lib.lua take_seq).
--   Jobs leave ready highest priority first, FIFO within a priority. With
--   max_in_flight > 0 in config, no more than max_in_flight jobs are leased at once.
-- Errors (nothing written)
--   INVALID_INPUT <what>

--@include _lib.lua

local prefix, ready, delayed, leased, dead, tokens, seqkey, config, settle, finished, used =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11]
local n = int_in(ARGV[1], 1, 1000)
if not n then return invalid('n') end
local lease_ms = int_in(ARGV[2], 0, MAX_LEASE_MS)
if not lease_ms or (lease_ms > 0 and lease_ms < MIN_LEASE_MS) then return invalid('lease_ms') end
local limit = int_in(ARGV[3], 0, 10000)
if not limit then return invalid('reclaim_limit') end

local now = now_ms()
reclaim(prefix, ready, delayed, leased, tokens, dead, seqkey, settle, finished, used, now, limit)

local max_in_flight = tonumber(redis.call('HGET', config, 'max_in_flight')) or 0
if max_in_flight > 0 then
  n = math.min(n, max_in_flight - redis.call('ZCARD', leased))
end
local out = {now, 0}
if n <= 0 then return out end
local popped = redis.call('ZPOPMIN', ready, n)
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
    out[#out + 1] = f[4] and id .. ' ' .. (f[2] or '0') .. ' ' .. f[3] .. ' ' .. f[4]
      or id .. ' ' .. (f[2] or '0') .. ' ' .. f[3]
    out[#out + 1] = f[1]
  end
end
if #lz > 0 then
  redis.call('ZADD', leased, unpack(lz))
  redis.call('HSET', tokens, unpack(tz))
end
return out
