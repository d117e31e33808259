-- redrive.lua: move dead-lettered jobs back to ready with fresh attempts.
--
-- Input
--   KEYS[1] job prefix  sluice:{q}:job:  (job keys = prefix .. id, built here: same slot)
--   KEYS[2] dead  KEYS[3] ready  (zsets)  KEYS[4] seq
--   KEYS[5] settle zset: the moved jobs' "dead:<id>" entries are dropped (a redriven job
--           must not be settled dead in the jobs table after it was given another chance)
--   ARGV[1] job_id, or "" for the oldest dead jobs
--   ARGV[2] limit  1..1000 (with ""; the caller loops until 0)
-- Output
--   number of jobs moved. Each gets attempts 0 and a place at the end of its priority
--   band; its last error is kept.
-- Errors (nothing written)
--   NOT_FOUND job=<id>  that job is not dead-lettered;  INVALID_INPUT <what>

--@include _lib.lua

local prefix, dead, ready, seqkey, settle = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local one = ARGV[1]
local limit = int_in(ARGV[2], 1, 1000)
if not limit then return invalid('limit') end

local ids
if one ~= '' then
  if not redis.call('ZSCORE', dead, one) then return redis.error_reply('NOT_FOUND job=' .. one) end
  ids = {one}
else
  ids = redis.call('ZRANGE', dead, 0, limit - 1)
end
if #ids == 0 then return 0 end
for _, id in ipairs(ids) do
  local key = prefix .. id
  local meta = redis.call('HGET', key, 'm')
  if meta then
    redis.call('HDEL', key, 'a', 'c')
    to_ready(ready, seqkey, id, priority_of(meta))
  end
end
redis.call('ZREM', dead, unpack(ids))
local entries = {}
for i, id in ipairs(ids) do entries[i] = 'dead:' .. id end
redis.call('ZREM', settle, unpack(entries))
return #ids
