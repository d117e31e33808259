-- listing.lua: one page of a queue's ready jobs, its fair groups' included, newest first (read only;
-- the operator's listing, issue 32's review: sluice.core.listing, backends/redis/admin.py).
--
-- A grouped job that is ready waits in its group's zset (<group prefix> .. group, the scores it would
-- have in ready). The page is what one zset holding ready and every group's would give, read
-- backwards from the cursor: a k-way merge here, in Redis, so the client parses only the page (with
-- the zsets read by the client, parsing their scores cost more than 300 ms a page at 1,000 groups).
--
-- Input
--   KEYS[1] ready zset  KEYS[2] group prefix sluice:{q}:g:  KEYS[3] groups hash  KEYS[4] the turns'
--           old zset (group -> turn number)  (fair groups: _lib.lua; the groups that may hold ready
--           jobs are those marked in turns, '>group', those left out at their per-group limit, a
--           leased count 'group', and those of the old layout lease.lua has not moved yet)
--   ARGV[1] the cursor's score ('' : from the newest)  ARGV[2] the cursor's job id
--   ARGV[3] want: jobs to return at most (1..1001: a page and one more, to know another follows)
--   ARGV[4] prefix: only job ids starting with it ('' : all)  ARGV[5] budget: entries examined at
--           most (1..100000) before the page stops at a boundary
--   ARGV[6] which zsets (optional): '' or absent, ready and every group (read here from KEYS[3] and
--           KEYS[4]); 'few', the same when there are at most ARGV[7] groups, else the reply {-1}
--           and nothing else done; 'ready', ready and the groups named in ARGV[7..]; 'groups',
--           those groups only. The operator's page asks 'few' first and, over more groups, names
--           at most that many a call and merges the calls' pages (sluice.core.listing.merge_parts),
--           so no call blocks Redis for a queue of 100,000 groups (one call reading them all took
--           2.7 s; session 35's hostile review)
--   ARGV[7..] group names (with 'ready' or 'groups'), or the most groups (with 'few'); a name no
--           group may have is skipped
-- Output
--   {examined, boundary id, boundary score, id1, score1, id2, score2, ...}: the jobs strictly after
--   the cursor (a lower score, or the same score and a lower id by bytes), newest first, at most
--   want; the boundary ('' '' : none) is the last entry examined when the budget ran out first,
--   where the next page goes on. Scores are Redis's own text (exact integers).
-- Cost: one ZRANGE per zset for its head, then one per refill (chunks of 8, doubling to 128), one
-- heap step per entry examined: O((zsets + examined) log zsets).
-- Errors (nothing written: it writes nothing)
--   INVALID_INPUT <what>   a bad score, want, budget or prefix

--@include _lib.lua

local ready, gprefix, groups, old = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local cscore, cid, prefix = ARGV[1], ARGV[2], ARGV[4]
local want, budget = int_in(ARGV[3], 1, 1001), int_in(ARGV[5], 1, 100000)
if not want then return invalid('want') end
if not budget then return invalid('budget') end
if #prefix > 128 or #cid > 256 then return invalid('prefix') end
local cnum = nil
if cscore ~= '' then
  if #cscore > 18 or not string.match(cscore, '^%-?%d+$') then return invalid('cursor score') end
  cnum = tonumber(cscore)
end

local which = ARGV[6] or ''
if which ~= '' and which ~= 'few' and which ~= 'ready' and which ~= 'groups' then return invalid('which') end
local most = nil
if which == 'few' then
  most = int_in(ARGV[7], 1, 100000)
  if not most then return invalid('most') end
end
local zsets, seen = {}, {}
if which ~= 'groups' then zsets[1] = ready end
local function add_group(g)
  if g ~= '' and not seen[g] and valid_group(g) then
    seen[g] = true
    zsets[#zsets + 1] = gprefix .. g
  end
end
if which == '' or which == 'few' then
  -- a group has at most two fields ('>g' and 'g') beside a few '#' counters: far more fields than
  -- that are more groups than asked for, said by the hash's length before any name is read (HKEYS
  -- of a hash of 200,000 fields blocked Redis 44 ms a call; a team's user may make it any size)
  if most and redis.call('HLEN', groups) > 2 * most + 16 then return {-1} end
  local fields = redis.call('HKEYS', groups)
  for _, f in ipairs(fields) do
    local c = string.sub(f, 1, 1)
    if c == '>' then add_group(string.sub(f, 2)) elseif c ~= '#' then add_group(f) end
  end
  for _, g in ipairs(redis.call('ZRANGE', old, 0, -1)) do add_group(g) end
  if most and #zsets - 1 > most then return {-1} end
else
  for i = 7, #ARGV do add_group(ARGV[i]) end
end

-- Per zset: its buffer of read entries, where the next read starts, and whether it is read out.
local buf, at, off, size, done = {}, {}, {}, {}, {}
local top = cnum and ('(' .. cscore) or '+inf'

-- Ids by bytes, as a zset orders equal scores (Lua's '<' would follow the server's locale).
local function bytes_gt(a, b)
  for j = 1, math.min(#a, #b) do
    local x, y = string.byte(a, j), string.byte(b, j)
    if x ~= y then return x > y end
  end
  return #a > #b
end

-- newest first: a higher score, or the same score and a higher id by bytes
local function newer(a, b)
  if a[1] ~= b[1] then return a[1] > b[1] end
  return bytes_gt(a[2], b[2])
end

local function refill(i)
  local rows = redis.call('ZRANGE', zsets[i], top, '-inf', 'BYSCORE', 'REV', 'LIMIT', off[i], size[i],
                          'WITHSCORES')
  local b = {}
  for j = 1, #rows, 2 do b[#b + 1] = {tonumber(rows[j + 1]), rows[j], rows[j + 1], i} end
  off[i] = off[i] + #b
  done[i] = #b < size[i]
  size[i] = math.min(size[i] * 2, 128)
  buf[i], at[i] = b, 1
end

local heap = {}
local function push(e)
  heap[#heap + 1] = e
  local k = #heap
  while k > 1 do
    local p = math.floor(k / 2)
    if not newer(heap[k], heap[p]) then break end
    heap[k], heap[p] = heap[p], heap[k]
    k = p
  end
end
local function pop()
  local first = heap[1]
  heap[1] = heap[#heap]
  heap[#heap] = nil
  local k, n = 1, #heap
  while true do
    local l, r, m = 2 * k, 2 * k + 1, k
    if l <= n and newer(heap[l], heap[m]) then m = l end
    if r <= n and newer(heap[r], heap[m]) then m = r end
    if m == k then break end
    heap[k], heap[m] = heap[m], heap[k]
    k = m
  end
  return first
end
local function next_of(i)
  if at[i] > #buf[i] then
    if done[i] then return end
    refill(i)
    if at[i] > #buf[i] then return end
  end
  local e = buf[i][at[i]]
  at[i] = at[i] + 1
  push(e)
end

for i = 1, #zsets do
  -- the cursor's score-mates after it first (ready's scores are unique but for a rare clash)
  buf[i], at[i], off[i], size[i], done[i] = {}, 1, 0, 8, false
  if cnum then
    local mates = redis.call('ZRANGE', zsets[i], cscore, cscore, 'BYSCORE', 'REV', 'WITHSCORES')
    for j = 1, #mates, 2 do
      if bytes_gt(cid, mates[j]) then buf[i][#buf[i] + 1] = {cnum, mates[j], mates[j + 1], i} end
    end
  end
  if #buf[i] == 0 then
    size[i] = 1  -- the head alone: most zsets give nothing to a page of a few
    refill(i)
  end
  next_of(i)
end

local out, examined, bid, bscore = {}, 0, '', ''
while #heap > 0 do
  local e = pop()
  examined = examined + 1
  if prefix == '' or string.sub(e[2], 1, #prefix) == prefix then
    out[#out + 1] = e[2]
    out[#out + 1] = e[3]
    if #out / 2 >= want then break end
  end
  next_of(e[4])
  if examined >= budget and #heap > 0 then
    bid, bscore = e[2], e[3]
    break
  end
end
local reply = {examined, bid, bscore}
for j = 1, #out do reply[#reply + 1] = out[j] end
return reply
