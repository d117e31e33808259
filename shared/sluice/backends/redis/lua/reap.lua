-- reap.lua: reclaim expired leases and promote due delayed jobs, for queues whose
-- workers are not calling lease (driven by a schedule and by the relay).
--
-- Input
--   KEYS[1] job prefix  sluice:{q}:job:  (job keys = prefix .. id, built here: same slot)
--   KEYS[2] ready  KEYS[3] delayed  KEYS[4] leased  KEYS[5] dead  (zsets)
--   KEYS[6] tokens hash  KEYS[7] seq
--   KEYS[8] settle zset: "dead:<g>:<id>" / "cancelled:<g>:<id>" for each expiry that ended a job
--   KEYS[9] finished hash: those endings are counted there too (dead / cancelled, cumulative)
--   KEYS[10] used string: a job removed for its cancel request gives its sz back (keys.used)
--   KEYS[11] group prefix  KEYS[12] turns list  KEYS[13] groups hash  (fair groups: _lib.lua;
--           promoted and reclaimed grouped jobs go to their group's ready zset)
--   KEYS[14] config hash: the handler's retry policy's attempts a worker's lease kept there (_lib.lua
--           lapse_limit), read within 16 bytes (a longer value reads as none told)
--   KEYS[15] timeline prefix  sluice:{q}:tl:  (a job's timeline = prefix .. id; touched only while
--           ARGV[2] > 0)
--   ARGV[1] limit  1..10000 of each kind per call
--   ARGV[2] timeline ttl_ms  0 (timelines off: the default; nothing read or written for them), or
--           1000..604800000: each lapsed lease gets a "reap" step on its job's timeline (issue 32:
--           {"t":<TIME ms>,"k":"reap","w":"relay","l":<the lease token that lapsed>,"a":<attempt>,
--           "o":"ready"|"dead"|"cancelled"|"gone"}), the list capped at ARGV[3] and expiring
--           ttl_ms after, as timeline.lua appends. Absent: 0.
--   ARGV[3] timeline cap  1..200 (read only while ARGV[2] > 0; absent: 64)
-- Output
--   {expired, promoted}. An expired lease counts as an attempt: the job goes back to
--   the front of its band in ready, or to dead when attempts >= lapse_limit (the caller's max_attempts
--   and the handler's policy's, the lower), or is removed when a cancel was
--   requested; those two endings are also recorded in settle. Due delayed jobs move to ready.
-- Errors (nothing written)
--   INVALID_INPUT limit | timeline_ttl_ms | timeline_cap

--@include _lib.lua

local limit = int_in(ARGV[1], 1, 10000)
if not limit then return invalid('limit') end
local tl = nil
local ttl = ARGV[2] or '0'
if ttl ~= '0' then
  ttl = int_in(ttl, 1000, 604800000)
  if not ttl then return invalid('timeline_ttl_ms') end
  local cap = int_in(ARGV[3] or '64', 1, 200)
  if not cap then return invalid('timeline_cap') end
  tl = {prefix = KEYS[15], ttl = ttl, cap = cap}
end
-- The policy read here, within the size lease.lua writes it (the queue's team may write the config
-- hash by hand: a 10 MB one cost 2.4 ms a reap, and one ZADD of a lapsed entry makes every reap read
-- it): one HSTRLEN a call even with nothing to reclaim. A longer one reads as none told.
local policy = policy_of(small_hget(KEYS[14], POLICY_FIELD, 16))
local expired, promoted = reclaim(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6], KEYS[5], KEYS[7],
  KEYS[8], KEYS[9], KEYS[10], now_ms(), limit, keys_of_groups(KEYS[11], KEYS[12], KEYS[13]), KEYS[14],
  policy, tl)
return {expired, promoted}
