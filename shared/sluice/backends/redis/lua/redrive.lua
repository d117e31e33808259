-- redrive.lua: move dead-lettered jobs back to ready with fresh attempts.
--
-- Input
--   KEYS[1] job prefix  sluice:{q}:job:  (job keys = prefix .. id, built here: same slot)
--   KEYS[2] dead  KEYS[3] ready  (zsets)  KEYS[4] seq
--   KEYS[5] settle zset: the moved jobs' pending endings ("dead:<g>:<id>",
--           "cancelled:<g>:<id>", and the older "<state>:<id>") are dropped: a redriven job
--           must not be settled final in the jobs table after it was given another chance
--   KEYS[6] group prefix  KEYS[7] turns list  KEYS[8] groups hash  (fair groups: _lib.lua; a
--           grouped job goes back to its group's ready zset)
--   ARGV[1] job_id, or "" for the oldest dead jobs
--   ARGV[2] limit  1..1000 (with ""; the caller loops until 0)
--   ARGV[3] generation  0..2^53-1: the redrive generation the jobs table minted for this
--           redrive (sluice.gateway.redrive); stored as the job's g, which lease hands to the
--           worker's grant. 0 leaves g alone (queues without a jobs table: the relay's own)
-- Output
--   number of jobs moved (1 for a job already carrying ARGV[3]: push.lua made this redrive). Each gets attempts 0 and a place at the end of its priority
--   band; its last error is kept.
-- Errors (nothing written)
--   NOT_FOUND job=<id>  that job is not dead-lettered;  INVALID_INPUT <what>

--@include _lib.lua

local prefix, dead, ready, seqkey, settle = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local G = keys_of_groups(KEYS[6], KEYS[7], KEYS[8])
local one = ARGV[1]
local limit = int_in(ARGV[2], 1, 1000)
if not limit then return invalid('limit') end
local gen = int_in(ARGV[3], 0, MAX_TOKEN)
if not gen then return invalid('generation') end

local ids
if one ~= '' then
  -- The job carries this generation already: the relay read the redrive's record before this move
  -- and made the redrive itself (push.lua), and the job may have run and died again since. Done.
  if gen > 0 and (tonumber(redis.call('HMGET', prefix .. one, 'g')[1]) or 0) >= gen then return 1 end
  if not redis.call('ZSCORE', dead, one) then return redis.error_reply('NOT_FOUND job=' .. one) end
  ids = {one}
else
  ids = redis.call('ZRANGE', dead, 0, limit - 1)
end
if #ids == 0 then return 0 end
local entries = {}
for _, id in ipairs(ids) do
  local key = prefix .. id
  local f = redis.call('HMGET', key, 'm', 'g', 'grp')
  for _, state in ipairs({'dead', 'cancelled'}) do
    entries[#entries + 1] = settle_member(state, id, f[2])
    entries[#entries + 1] = state .. ':' .. id
  end
  if f[1] then redriven_to_ready(G, key, ready, seqkey, id, gen > 0 and ARGV[3] or '0', f) end
end
redis.call('ZREM', dead, unpack(ids))
redis.call('ZREM', settle, unpack(entries))
return #ids
