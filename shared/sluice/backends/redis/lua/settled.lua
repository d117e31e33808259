-- settled.lua: forget expiries the jobs table has been told about (see reclaim in _lib.lua), and
-- take out of the dead set the jobs whose item the jobs table holds final for good.
--
-- Input
--   KEYS[1] settle zset  sluice:{q}:settle  (member "<state>:<g>:<job id>" with g the job's
--           redrive generation, or the older "<state>:<job id>"; score = when it ended)
--   KEYS[2] job prefix  sluice:{q}:job:  (job keys = prefix .. id, built here: same slot)
--   KEYS[3] dead zset  KEYS[4] used string: a job taken out of dead gives its sz back (keys.used)
--   ARGV    triples: member, score, residue (1..1000 triples), as read by the caller before it
--           wrote DynamoDB. residue "1": the jobs table said the job is succeeded or cancelled (its
--           worker crashed before its last ack; a cancel won), so its dead job, if Redis holds one,
--           is not a dead job: it is deleted (hash and dead entry) with the entry. "0": only the entry.
-- Output
--   number of entries removed. An entry whose score changed since it was read (the job
--   was redriven, leased and ended again) is kept, and so is its job: that newer ending is
--   not settled yet.
-- Errors (nothing written)
--   INVALID_INPUT entries | member | score | residue

--@include _lib.lua

local settle, prefix, dead, used = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local n = #ARGV
if n == 0 or n % 3 ~= 0 or n > 3000 then return invalid('entries') end
local ids = {}
for i = 1, n, 3 do
  local state, id = string.match(ARGV[i], '^(%a+):([%w][%w_.%-]*)$')
  if not state then state, id = string.match(ARGV[i], '^(%a+):%d+:([%w][%w_.%-]*)$') end
  if not (state == 'dead' or state == 'cancelled') or #id > 128 then return invalid('member') end
  if not int_in(ARGV[i + 1], 0, 9007199254740991) then return invalid('score') end
  if ARGV[i + 2] ~= '0' and ARGV[i + 2] ~= '1' then return invalid('residue') end
  ids[i] = id
end
local removed, freed = 0, 0
for i = 1, n, 3 do
  local current = redis.call('ZSCORE', settle, ARGV[i])
  if current and tonumber(current) == tonumber(ARGV[i + 1]) then
    removed = removed + redis.call('ZREM', settle, ARGV[i])
    if ARGV[i + 2] == '1' and redis.call('ZREM', dead, ids[i]) == 1 then
      local key = prefix .. ids[i]
      freed = freed + size_of(key)
      redis.call('DEL', key)
    end
  end
end
release_bytes(used, freed)
return removed
