-- extend.lua: push the lease deadline of a job the caller still holds.
--
-- Input
--   KEYS[1] job hash  sluice:{q}:job:<id>     KEYS[2] leased zset
--   ARGV[1] job_id    ARGV[2] token           ARGV[3] lease_ms (10..43200000)
-- Output
--   {deadline_ms, cancel_requested (0|1)}   deadline = now + lease_ms
--   A lease whose deadline passed but that no lease/reap call has reclaimed yet is still
--   the caller's: nobody else can hold it, so it may be extended.
-- Errors (nothing written)
--   NOT_FOUND job=<id>                               no such job
--   STALE_TOKEN job=<id> mine=<t> current=<t>        a newer lease exists
--   LEASE_LOST job=<id> mine=<t> current=<t>         not leased (reclaimed, released) or unknown token
--   INVALID_INPUT <what>

--@include _lib.lua

local key, leased, id = KEYS[1], KEYS[2], ARGV[1]
local token = int_in(ARGV[2], 1, 9007199254740991)
if not token then return invalid('token') end
local lease_ms = int_in(ARGV[3], MIN_LEASE_MS, MAX_LEASE_MS)
if not lease_ms then return invalid('lease_ms') end

local f = redis.call('HMGET', key, 't', 's', 'c')
local code, cur = holder_error(f, token)
if code then return redis.error_reply(holder_reply(code, id, ARGV[2], cur)) end

local deadline = now_ms() + lease_ms
redis.call('ZADD', leased, 'XX', deadline, id)
return {deadline, f[3] == '1' and 1 or 0}
