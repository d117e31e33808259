-- cancel.lua: cancel a job. A waiting job is removed; a leased job is marked.
--
-- Input
--   KEYS[1] job hash  KEYS[2] ready  KEYS[3] delayed  KEYS[4] dead  (zsets)
--   KEYS[5] tokens hash  KEYS[6] settle zset
--   KEYS[7] finished hash: a removed job counts there as cancelled (cumulative)
--   KEYS[8] used string: a removed job gives its sz back (keys.used)
--   KEYS[9] group prefix  KEYS[10] turns list  KEYS[11] groups hash  (fair groups: _lib.lua; a
--           waiting grouped job leaves its group's ready zset, the group leaves turns if emptied)
--   ARGV[1] job_id
--   ARGV[2] settle  "0" | "1": "1" when the jobs table still says the job is leased (its
--           holder died and its lease was reclaimed, so it waits again): removing it must
--           also record "cancelled:<g>:<id>" in settle, or nothing would ever end the item
--   ARGV[3] cancelled  "0" | "1": "1" when the jobs table says cancelled already (not with
--           settle "1"): a job Redis dead-lettered meanwhile is no dead job (issue 29, item 8)
-- Output
--   "removed"    it was waiting (ready or delayed): hash and zset entry deleted (and, with
--                settle "1", the ending recorded in settle, score = Redis time). With cancelled
--                "1" a dead-lettered job is removed too (hash and dead entry; not counted again)
--   "requested"  it is leased: c = 1 on the hash. extend reports it to the worker; when
--                the lease ends other than by ack/fail (release, expiry) the job is removed,
--                and fail dead-letters it instead of retrying.
-- Errors (nothing written)
--   NOT_FOUND job=<id>         ALREADY_FINISHED job=<id> (it is dead-lettered; cancelled "0")
--   INVALID_INPUT settle | cancelled

--@include _lib.lua

local key, ready, delayed, dead, tokens, settle, finished, used =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local id, record, cancelled = ARGV[1], ARGV[2], ARGV[3]
if record ~= '0' and record ~= '1' then return invalid('settle') end
if cancelled ~= '0' and (cancelled ~= '1' or record == '1') then return invalid('cancelled') end
if redis.call('EXISTS', key) == 0 then return redis.error_reply('NOT_FOUND job=' .. id) end
if redis.call('HEXISTS', tokens, id) == 1 then
  redis.call('HSET', key, 'c', '1')
  return 'requested'
end
local was_dead = redis.call('ZSCORE', dead, id)
if was_dead and cancelled == '0' then return redis.error_reply('ALREADY_FINISHED job=' .. id) end
local f = redis.call('HMGET', key, 'g', 'grp')
local size = size_of(key)  -- bounded: the team may write sz by hand
if was_dead then
  redis.call('ZREM', dead, id)
  redis.call('DEL', key)
  release_bytes(used, size)
  return 'removed'
end
local g = f[1]
if f[2] then remove_grouped(keys_of_groups(KEYS[9], KEYS[10], KEYS[11]), f[2], id) end
redis.call('ZREM', ready, id)
redis.call('ZREM', delayed, id)
redis.call('DEL', key)
release_bytes(used, size)
if record == '1' then redis.call('ZADD', settle, now_ms(), settle_member('cancelled', id, g)) end
count_finished(finished, 0, 0, 1)
return 'removed'
