-- purge.lua: delete dead-lettered jobs for good.
--
-- Input
--   KEYS[1] job prefix  sluice:{q}:job:  (job keys = prefix .. id, built here: same slot)
--   KEYS[2] dead zset
--   KEYS[3] used string: the deleted jobs give their sz back (keys.used)
--   ARGV[1] limit  1..1000 oldest dead jobs per call (the caller loops until 0)
-- Output
--   number of jobs deleted (hash and dead entry)
-- Errors (nothing written)
--   INVALID_INPUT limit

--@include _lib.lua

local prefix, dead, used = KEYS[1], KEYS[2], KEYS[3]
local limit = int_in(ARGV[1], 1, 1000)
if not limit then return invalid('limit') end
local ids = redis.call('ZRANGE', dead, 0, limit - 1)
if #ids == 0 then return 0 end
local keys = {}
for i, id in ipairs(ids) do keys[i] = prefix .. id end
local freed = sizes_of(keys)
redis.call('DEL', unpack(keys))
release_bytes(used, freed)
-- The ids are ranks 0..#ids-1 of dead.
redis.call('ZREMRANGEBYRANK', dead, 0, #ids - 1)
return #ids
