-- sample.lua: append one sample of a queue's depths, and the waits of the jobs started since the
-- sample before, to the queue's last hour (issue 32's closing review; sluice.core.depth).
--
-- Input
--   KEYS[1] waits hash  sluice:{q}:waits  (bucket -> count; lease.lua counts each first lease)
--   KEYS[2] depth list  sluice:{q}:depth  (one text per sample, oldest first)
--   ARGV[1..4] ready, delayed, leased, dead  (0..2^53-1: the counts the relay just measured)
--   ARGV[5] cap      1..10000  samples kept: the oldest go first
--   ARGV[6] ttl_ms   1000..604800000  the list expires this long after its last sample
--   ARGV[7] gap_ms   0..3600000  no sample while the last one is younger than this (a second
--           relay sampling the same queue): nothing written, the waits stay for the next
-- Output
--   1 when a sample was appended, 0 when the last one is younger than gap_ms
--   The sample is "<now_ms>,<ready>,<delayed>,<leased>,<dead>", then ";<bucket>:<count>,..." when
--   jobs started since the sample before; the waits hash is emptied in the same step, so each
--   start is counted in exactly one sample. Time is Redis TIME. A histogram that would make the
--   sample longer than MAX_SAMPLE is left out (the waits still taken).
--   A waits hash no lease.lua left (more than WAIT_FIELDS fields, or over WAIT_BYTES: a team's own
--   Redis user may HSET it by hand, session 36) is neither read nor deleted: the sample has the
--   depths alone, and the hash stays the team's to delete (freeing twenty 1 MB values took Redis
--   1.6-5.6 ms, an UNLINK too: a hash of so few fields is freed at once). HLEN, and MEMORY USAGE over
--   at most WAIT_FIELDS fields, cost microseconds whatever the hash holds; reading it whole took
--   157-393 ms at 100,000 fields and 68-648 ms at twenty 1 MB values, Redis blocked for every queue.
-- Errors (nothing written)
--   INVALID_INPUT <what>

--@include _lib.lua

local waits, list = KEYS[1], KEYS[2]
-- lease.lua writes buckets 0..200 (sluice.core.depth.MAX_BUCKET), each a count: a few KB.
local WAIT_FIELDS, WAIT_BYTES = 201, 65536
-- sluice.core.depth.MAX_SAMPLE: a longer sample is skipped when read, its depths with it, so a
-- histogram that would make one (field names written by hand) is left out and the depths kept.
local MAX_SAMPLE = 4096
local counts = {}
for i = 1, 4 do
  counts[i] = int_in(ARGV[i], 0, MAX_TOKEN)
  if not counts[i] then return invalid('count') end
end
local cap = int_in(ARGV[5], 1, 10000)
if not cap then return invalid('cap') end
local ttl = int_in(ARGV[6], 1000, 604800000)
if not ttl then return invalid('ttl_ms') end
local gap = int_in(ARGV[7], 0, 3600000)
if not gap then return invalid('gap_ms') end

local now = now_ms()
local last = redis.call('LINDEX', list, -1)
if last then
  local t = tonumber(string.match(last, '^(%d+),'))
  if t and now - t < gap then return 0 end
end
local sample = string.format('%d', now) .. ',' .. table.concat({ARGV[1], ARGV[2], ARGV[3], ARGV[4]}, ',')
-- By pcall: a Redis user whose access string predates HLEN and MEMORY USAGE (the template's change
-- not yet applied by ElastiCache while the new layer runs) reads the hash whole, as before.
local n, read = redis.pcall('HLEN', waits), true
if type(n) == 'number' then
  read = n > 0 and n <= WAIT_FIELDS
  if read then
    local bytes = redis.pcall('MEMORY', 'USAGE', waits, 'SAMPLES', '0')
    read = type(bytes) ~= 'number' or bytes <= WAIT_BYTES
  end
end
if read then
  local h = redis.call('HGETALL', waits)
  if #h > 0 then
    local parts = {}
    for i = 1, #h, 2 do parts[#parts + 1] = h[i] .. ':' .. h[i + 1] end
    local histogram = table.concat(parts, ',')
    if #sample + 1 + #histogram <= MAX_SAMPLE then sample = sample .. ';' .. histogram end
    redis.call('DEL', waits)
  end
end
local len = redis.call('RPUSH', list, sample)
if len > cap then redis.call('LTRIM', list, len - cap, -1) end
redis.call('PEXPIRE', list, ttl)
return 1
