-- fields.lua: jobs' hash fields, each read only within its read bound (a read: writes nothing).
--
-- The operator's listing and dead-letter list read fields of job hashes that a queue's team may
-- write by hand (docs/security.md, "Values a team may stuff"): a field is read only when it is no
-- longer than what Sluice writes there (sluice.core.read_bounds), and the first field (the payload)
-- only while the call's budget lasts. In Redis rather than as pipelined HSTRLENs and HMGETs: one
-- command for the client to pack and parse, not six a job (a page of 50: 4.4 ms of redis-py alone).
--
-- Input
--   KEYS[1] job prefix  sluice:{q}:job:  (job keys = prefix .. id, built here: same slot)
--   ARGV[1] n_fields   1..8
--   ARGV[2..n+1]       the fields, each 1..16 bytes
--   ARGV[n+2..2n+1]    each field's bound in bytes (0..2**53-1)
--   ARGV[2n+2]         budget: bytes of the first field read over the whole call at most, in the
--                      order of the ids (0: no budget)
--   ARGV[2n+3..]       job ids, 1..1000 of them, each 1..128 bytes
-- Output
--   {per id, per field in order: the value; false when the field is absent (or empty); or its
--   length, an integer, when it is present and not read (over its bound, or past the budget)}
-- Errors (nothing read)
--   INVALID_INPUT <what>

--@include _lib.lua

local prefix = KEYS[1]
local n = int_in(ARGV[1], 1, 8)
if not n then return invalid('n_fields') end
local first_id = 2 * n + 3
local ids = #ARGV - first_id + 1
if ids < 1 or ids > 1000 then return invalid('ids') end
local fields, bounds = {}, {}
for j = 1, n do
  fields[j] = ARGV[1 + j]
  bounds[j] = int_in(ARGV[1 + n + j], 0, MAX_TOKEN)
  if #fields[j] < 1 or #fields[j] > 16 then return invalid('field') end
  if not bounds[j] then return invalid('bound') end
end
local budget = int_in(ARGV[2 * n + 2], 0, MAX_TOKEN)
if not budget then return invalid('budget') end
for i = first_id, #ARGV do
  if #ARGV[i] < 1 or #ARGV[i] > 128 then return invalid('id') end
end

local left = budget > 0 and budget or nil
local out = {}
for i = first_id, #ARGV do
  local key = prefix .. ARGV[i]
  for j = 1, n do
    local size = redis.call('HSTRLEN', key, fields[j])
    local read = size > 0 and size <= bounds[j]
    if read and j == 1 and left then
      read = size <= left
      if read then left = left - size end
    end
    if read then
      out[#out + 1] = redis.call('HGET', key, fields[j])
    elseif size > 0 then
      out[#out + 1] = size
    else
      out[#out + 1] = false
    end
  end
end
return out
