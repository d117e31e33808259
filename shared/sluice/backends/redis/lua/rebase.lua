-- rebase.lua: after Redis lost data, let a replaying relay push a partition's records again.
--
-- The relayed hash of (queue, topic, partition) makes push.lua skip records at or below
-- its offset. After a Redis loss a relay that had not noticed yet may have pushed a few
-- records into the new Redis, recording an offset above records the loss took. The
-- replaying relay, whose owner token carries a newer generation (docs/redis-loss.md),
-- moves the offset back to just below where its replay starts. Records that are still
-- in Redis are skipped by push.lua anyway (their job hash exists).
--
-- Input
--   KEYS[1] relayed hash  sluice:{q}:relayed:<topic>:<partition>  fields owner, offset
--   ARGV[1] owner_token   the replaying relay's push owner token (positive integer)
--   ARGV[2] offset        the new offset: one below the replay's first record (>= -1)
-- Output
--   1 rebased (owner set to ARGV[1], offset lowered to ARGV[2] if it was higher); 0 left
--   alone because an owner token at least as new wrote it
-- Errors (nothing written)
--   INVALID_INPUT <what>

--@include _lib.lua

local relayed = KEYS[1]
local owner = int_in(ARGV[1], 1, MAX_TOKEN)
if not owner then return invalid('owner token') end
local offset = int_in(ARGV[2], -1, MAX_TOKEN)
if not offset then return invalid('offset') end

-- Read as push.lua reads them (the queue's team may write the hash by hand): an owner that is not a
-- token is none, and an offset that is not one is replaced.
if (int_in(small_hget(relayed, 'owner', 16), 1, MAX_TOKEN) or 0) >= owner then return 0 end
local stored = small_hget(relayed, 'offset', 16)
local stored_offset = int_in(stored, -1, MAX_TOKEN)
if stored and (not stored_offset or stored_offset > offset) then
  redis.call('HSET', relayed, 'owner', ARGV[1], 'offset', ARGV[2])
else
  redis.call('HSET', relayed, 'owner', ARGV[1])
end
return 1
