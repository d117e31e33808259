-- redrive.lua: move dead-lettered jobs back to ready with fresh attempts.
--
-- Input
--   KEYS[1] job prefix  sluice:{q}:job:  (job keys = prefix .. id; same slot)
--   KEYS[2] dead  KEYS[3] ready  (zsets)  KEYS[4] seq
--   ARGV[1] job_id, or "" for the oldest dead jobs
--   ARGV[2] limit  1..1000 (with ""; the caller loops until 0)
-- Output
--   number of jobs moved. Each gets attempts 0, state waiting, a place at the end of
--   its priority band; its token and last error are kept (tokens never go back).
-- Errors (nothing written)
--   NOT_FOUND job=<id>  that job is not dead-lettered;  INVALID_INPUT <what>

--@include _lib.lua

local prefix, dead, ready, seqkey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
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
for _, id in ipairs(ids) do
  local key = prefix .. id
  local pr = tonumber(redis.call('HGET', key, 'pr'))
  if pr then
    redis.call('HSET', key, 's', 'w', 'a', 0)
    redis.call('HDEL', key, 'c', 'w')
    to_ready(ready, seqkey, id, pr)
  end
end
if #ids > 0 then redis.call('ZREM', dead, unpack(ids)) end
return #ids
