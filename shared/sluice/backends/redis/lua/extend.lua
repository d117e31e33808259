-- extend.lua: push the lease deadline of a job the caller still holds.
--
-- Input
--   KEYS[1] job hash  sluice:{q}:job:<id>   KEYS[2] leased zset   KEYS[3] tokens hash
--   ARGV[1] job_id    ARGV[2] token         ARGV[3] lease_ms (10..43200000)
-- Output
--   {deadline_ms, cancel_requested (0|1)}   deadline = now + lease_ms
--   A lease whose deadline passed but that no lease/reap call has reclaimed yet is still
--   the caller's: nobody else can hold it, so it may be extended.
-- Errors (nothing written)
--   NOT_FOUND job=<id>                               no such job
--   STALE_TOKEN job=<id> mine=<t> current=<t>        a newer lease exists
--   LEASE_LOST job=<id> mine=<t> [current=<t>]       not leased (reclaimed, released) or unknown token
--   INVALID_INPUT <what>

--@include _lib.lua

local key, leased, tokens, id = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
if not int_in(ARGV[2], 1, MAX_TOKEN) then return invalid('token') end
local lease_ms = int_in(ARGV[3], MIN_LEASE_MS, MAX_LEASE_MS)
if not lease_ms then return invalid('lease_ms') end

local bad = holder_error(id, ARGV[2], redis.call('HGET', tokens, id), key)
if bad then return redis.error_reply(bad) end

local deadline = now_ms() + lease_ms
redis.call('ZADD', leased, 'XX', deadline, id)
return {deadline, redis.call('HGET', key, 'c') == '1' and 1 or 0}
