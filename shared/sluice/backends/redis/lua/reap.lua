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
--   KEYS[14] config hash: the handler's retry policy's attempts a worker's lease kept there, read
--           when a lease lapsed (_lib.lua lapse_limit)
--   ARGV[1] limit  1..10000 of each kind per call
-- Output
--   {expired, promoted}. An expired lease counts as an attempt: the job goes back to
--   the front of its band in ready, or to dead when attempts >= lapse_limit (the caller's max_attempts
--   and the handler's policy's, the lower), or is removed when a cancel was
--   requested; those two endings are also recorded in settle. Due delayed jobs move to ready.
-- Errors (nothing written)
--   INVALID_INPUT limit

--@include _lib.lua

local limit = int_in(ARGV[1], 1, 10000)
if not limit then return invalid('limit') end
local expired, promoted = reclaim(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6], KEYS[5], KEYS[7],
  KEYS[8], KEYS[9], KEYS[10], now_ms(), limit, keys_of_groups(KEYS[11], KEYS[12], KEYS[13]), KEYS[14])
return {expired, promoted}
