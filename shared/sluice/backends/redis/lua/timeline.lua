-- timeline.lua: append a worker's steps on one job to the job's timeline (issue 32 item 2).
--
-- Input
--   KEYS[1] the job's timeline list  sluice:{q}:tl:<id>
--   ARGV[1] cap     (1..200)  entries kept: the oldest go first
--   ARGV[2] ttl_ms  (1000..604800000)  the list expires this long after its last append
--   ARGV[3..] entries (1..16 of them, each 1..512 bytes): one step each, a small JSON object
--             the worker built (sluice.worker.runtime.timeline); never decoded here
-- Output
--   the list's length after the append (at most cap)
--   The entries carry the worker's own clock: a worker sends what it buffered in one call (its
--   lease and grant; its write, ack and finish), so the time of this call is not the steps' time.
--   The list is capped and expires: a job leased over and over keeps only its last cap steps,
--   and a finished job's timeline is gone ttl_ms later. Nothing else reads or writes it.
-- Errors (nothing written)
--   INVALID_INPUT <what>

--@include _lib.lua

local tl = KEYS[1]
local cap = int_in(ARGV[1], 1, 200)
if not cap then return invalid('cap') end
local ttl = int_in(ARGV[2], 1000, 604800000)
if not ttl then return invalid('ttl_ms') end
local n = #ARGV - 2
if n < 1 or n > 16 then return invalid('entries') end
for i = 3, #ARGV do
  if #ARGV[i] < 1 or #ARGV[i] > 512 then return invalid('entry') end
end

local len = redis.call('RPUSH', tl, unpack(ARGV, 3))
if len > cap then
  redis.call('LPOP', tl, len - cap)
  len = cap
end
redis.call('PEXPIRE', tl, ttl)
return len
