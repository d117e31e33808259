-- push.lua: the relay's exactly-once hand-off of a batch of Kafka records into one queue.
--
-- Input
--   KEYS[1] relayed   hash  sluice:{q}:relayed:<topic>:<partition>  fields owner, offset
--   KEYS[2] job prefix      sluice:{q}:job:  (job keys = prefix .. id, built here: same slot)
--   KEYS[3] ready  zset     KEYS[4] delayed zset     KEYS[5] seq string
--   ARGV[1] owner_token     the relay's lease token on this partition (positive integer)
--   ARGV[2] k               number of records (1..1000)
--   ARGV[3] records         a JSON array of 5k strings, k groups of 5: offset, job_id, payload,
--                           meta, run_at_ms (as in enqueue.lua). One argument rather than 5k:
--                           the client packs one string instead of thousands (issue 18).
-- Output
--   {pushed, skipped, stored_offset}
--   Records at or below the stored offset, and jobs whose hash already exists (or that
--   repeat an id in this batch), are skipped. The stored offset becomes the largest
--   offset seen (it never goes down) and the stored owner the caller's token, in the
--   same atomic step as the enqueue: a relay that dies before its Kafka commit pushes
--   nothing twice.
-- Errors (nothing written)
--   STALE_TOKEN mine=<token> current=<token>  a relay with a newer token owns the partition
--   INVALID_INPUT <what>
--   RESERVED_QUEUE queue=<q> prefix=<p>  the queue is one of Sluice's own: no record goes there

--@include _lib.lua

local relayed, prefix, ready, delayed, seqkey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local reserved = refuse_reserved(prefix)
if reserved then return reserved end
local owner = int_in(ARGV[1], 1, MAX_TOKEN)
if not owner then return invalid('owner token') end
local k = int_in(ARGV[2], 1, 1000)
if not k or #ARGV ~= 3 then return invalid('record count') end
local ok, R = pcall(cjson.decode, ARGV[3])
if not ok or type(R) ~= 'table' or #R ~= 5 * k then return invalid('records') end

local stored = redis.call('HMGET', relayed, 'owner', 'offset')
if owner < (tonumber(stored[1]) or 0) then
  return redis.error_reply('STALE_TOKEN mine=' .. ARGV[1] .. ' current=' .. stored[1])
end
local stored_offset = tonumber(stored[2]) or -1

local now = now_ms()
local max_offset, starts = stored_offset, {}
for r = 0, k - 1 do
  local i = 1 + 5 * r
  local offset = int_in(R[i], 0, MAX_TOKEN)
  if not offset then return invalid('offset') end
  local bad = check_job(R, i + 1, now)
  if bad then return bad end
  if offset > max_offset then max_offset = offset end
  if offset > stored_offset then starts[#starts + 1] = i + 1 end
end

local fresh = new_jobs(R, prefix, starts)
redis.call('HSET', relayed, 'owner', ARGV[1], 'offset', max_offset)
create_jobs(R, prefix, ready, delayed, seqkey, fresh, now)
return {#fresh, k - #fresh, max_offset}
