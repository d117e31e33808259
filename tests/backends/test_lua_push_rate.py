"""push.lua and rate.lua on a real redis-server: the keys they leave and their errors."""

from __future__ import annotations

import json
import time

import pytest
import redis

from sluice.backends.redis.engine import RedisQueue
from sluice.backends.redis.keys import QUEUES_KEY, QueueKeys
from sluice.backends.redis.scripts import source
from sluice.core.errors import InvalidInput, InvalidQueueName, LeaseLost, StaleToken
from sluice.core.models import MAX_DELAY_MS, JobSpec
from tests.backends.test_engine_support import job, members, redis_now_ms, snapshot, spec, where

pytestmark = pytest.mark.integration
K = QueueKeys("q")
TOPIC = "sluice.jobs"




def recs(*offsets: int, prefix: str = "j", **kw: object) -> list[tuple[int, JobSpec]]:
    return [(o, spec(f"{prefix}{o}", **kw)) for o in offsets]  # type: ignore[arg-type]


def test_push_enqueues_and_records_offset_and_owner(rq: RedisQueue, redis_client: redis.Redis) -> None:
    result = rq.push("q", TOPIC, 2, 5, recs(10, 11, 12))
    assert (result.pushed, result.skipped, result.offset) == (3, 0, 12)
    assert redis_client.hgetall(K.relayed(TOPIC, 2)) == {"owner": "5", "offset": "12"}
    assert members(redis_client, "q", "ready") == ["j10", "j11", "j12"]
    assert job(redis_client, "q", "j11")["p"] == '{"id":"j11"}'
    assert job(redis_client, "q", "j11")["m"].startswith("0,5,30000,")
    assert redis_client.smembers(QUEUES_KEY) == {"q"}


def test_push_wakes_a_waiting_worker_through_a_list_of_its_own(rq: RedisQueue,
                                                               redis_client: redis.Redis) -> None:
    """Issue 28 (on a cluster too): push.lua writes the waiting worker's own wake list, a key it
    builds from KEYS[6] in the queue's slot, and the worker's BLPOP of its own list and the
    shared one takes the token."""
    rq.idle("q", "fn:req-1", 5_000)
    assert rq.push("q", TOPIC, 0, 1, recs(0)).pushed == 1
    assert redis_client.llen(K.wake_of("fn:req-1")) == 1 and redis_client.llen(K.wake) == 0
    assert rq.wait_for_work("q", 100, "fn:req-1") is True
    assert rq.wait_for_work("q", 100, "fn:req-1") is False


def test_push_stores_a_redriven_jobs_generation_for_its_grant(rq: RedisQueue,
                                                              redis_client: redis.Redis) -> None:
    """A redriven job pushed again (after a Redis loss) carries the jobs table's redrive generation,
    which the lease hands to the grant; a job Redis already holds keeps its own when it is that
    generation or newer (a job Redis holds under an older one: the next test)."""
    rq.enqueue(spec("held"))
    redis_client.hset(K.job("held"), "g", 9)
    result = rq.push("q", TOPIC, 0, 1, recs(0, 1), gens={"j1": 3, "held": 9})
    assert (result.pushed, result.skipped) == (2, 0)
    assert job(redis_client, "q", "j1")["g"] == "3" and "g" not in job(redis_client, "q", "j0")
    before = snapshot(redis_client)
    assert rq.push("q", TOPIC, 0, 1, [(2, spec("held"))], gens={"held": 9}).skipped == 1
    assert rq.push("q", TOPIC, 0, 1, [(3, spec("held"))], gens={"held": 8}).skipped == 1
    assert {k: v for k, v in snapshot(redis_client).items() if "relayed" not in k} == {
        k: v for k, v in before.items() if "relayed" not in k}
    leased = {j.job_id: j.redrive_gen for j in rq.lease("q", 3, 5_000)}
    assert leased == {"held": 9, "j0": 0, "j1": 3}
    with pytest.raises(InvalidInput):
        rq.push("q", TOPIC, 0, 1, recs(5), gens={"j5": -1})


def test_push_makes_a_redrive_that_redis_never_got(rq: RedisQueue, redis_client: redis.Redis) -> None:
    """A job Redis holds under an older redrive generation than its record's (the jobs table's) is a
    redrive whose move this Redis never got: a failover to a replica that lagged behind it, or a
    redrive that stopped between its Kafka append and its move. The push makes it: fresh attempts,
    the record's generation, and a dead job, or one leased under a lease from before the redrive,
    goes back to ready; a waiting one waits where it is. The redrive's own move, if it comes after,
    finds it done (docs/redis-loss.md, "Redriven jobs")."""
    for j in ("dead", "again", "held"):
        rq.enqueue(spec(j, max_attempts=1))
    got = {j.job_id: j for j in rq.lease("q", 3, 60_000)}
    for j in ("dead", "again"):
        assert rq.fail("q", j, got[j].lease_token, f"broke {j}") == "dead"
    redis_client.hset(K.job("again"), "g", 2)  # dead again under the generation its record carries
    rq.enqueue(spec("waits", max_attempts=2))
    redis_client.hset(K.job("waits"), "a", 1)
    result = rq.push("q", TOPIC, 0, 1, [(0, spec("dead")), (1, spec("again")), (2, spec("held")),
                                        (3, spec("waits")), (4, spec("new"))],
                     gens={"dead": 2, "again": 2, "held": 1, "waits": 3})
    assert (result.pushed, result.skipped) == (3, 2)
    assert [where(redis_client, "q", j) for j in ("dead", "again", "held", "waits", "new")] == [
        {"ready"}, {"dead"}, {"ready"}, {"ready"}, {"ready"}]
    assert [job(redis_client, "q", j).get("g") for j in ("dead", "again", "held", "waits", "new")] == [
        "2", "2", "1", "3", None]
    assert not any("a" in job(redis_client, "q", j) for j in ("dead", "held", "waits"))
    assert redis_client.llen(K.wake) == 1  # a token for the batch: nobody waits (issue 30)
    # The redrive's move comes after: done already, nothing moves twice.
    before = snapshot(redis_client)
    assert rq.redrive("q", "dead", 2) == 1
    assert snapshot(redis_client) == before
    # The stale holder of the lease from before the redrive holds nothing.
    with pytest.raises(LeaseLost):
        rq.extend("q", "held", got["held"].lease_token, 5_000)
    leased = {j.job_id: j.redrive_gen for j in rq.lease("q", 5, 5_000)}
    assert leased == {"dead": 2, "held": 1, "waits": 3, "new": 0}


def test_push_replay_is_skipped_exactly_once(rq: RedisQueue, redis_client: redis.Redis) -> None:
    rq.push("q", TOPIC, 0, 1, recs(0, 1, 2))
    # A relay that died before its Kafka commit replays 0..2 and continues with 3, 4.
    result = rq.push("q", TOPIC, 0, 1, recs(0, 1, 2, 3, 4))
    assert (result.pushed, result.skipped, result.offset) == (2, 3, 4)
    assert redis_client.zcard(K.ready) == 5
    # Offsets are per partition: the same offsets on another partition are new records.
    result = rq.push("q", TOPIC, 1, 1, recs(0, 1, prefix="p1-"))
    assert (result.pushed, result.skipped) == (2, 0)


def test_push_skips_existing_job_ids_and_in_batch_duplicates(rq: RedisQueue,
                                                            redis_client: redis.Redis) -> None:
    rq.enqueue(spec("dup", payload="first"))
    result = rq.push("q", TOPIC, 0, 1, [(0, spec("dup", payload="second")), (1, spec("x")),
                                        (2, spec("x", payload="again"))])
    assert (result.pushed, result.skipped) == (1, 2)
    assert job(redis_client, "q", "dup")["p"] == '"first"'
    assert job(redis_client, "q", "x")["p"] == '{"id":"x"}'


def test_push_offset_never_goes_down(rq: RedisQueue, redis_client: redis.Redis) -> None:
    rq.push("q", TOPIC, 0, 1, recs(100))
    result = rq.push("q", TOPIC, 0, 1, recs(50, 60))
    assert (result.pushed, result.skipped, result.offset) == (0, 2, 100)
    assert redis_client.hget(K.relayed(TOPIC, 0), "offset") == "100"


def test_push_newer_owner_fences_older(rq: RedisQueue, redis_client: redis.Redis) -> None:
    rq.push("q", TOPIC, 0, 7, recs(0))
    rq.push("q", TOPIC, 0, 9, recs(1))
    before = snapshot(redis_client)
    with pytest.raises(StaleToken) as err:
        rq.push("q", TOPIC, 0, 8, recs(2))
    assert (err.value.mine, err.value.current) == (8, 9)
    assert snapshot(redis_client) == before


def test_push_delayed_and_priority(rq: RedisQueue, redis_client: redis.Redis) -> None:
    later = redis_now_ms(redis_client) + 60_000
    rq.push("q", TOPIC, 0, 1, [(0, spec("low")), (1, spec("high", priority=9)),
                               (2, spec("later", run_at_ms=later))])
    assert members(redis_client, "q", "ready") == ["high", "low"]
    assert redis_client.zrange(K.delayed, 0, -1, withscores=True) == [("later", float(later))]


def test_push_of_a_maximum_delay_ahead_of_redis_time_is_clamped_not_refused(
        rq: RedisQueue, redis_client: redis.Redis) -> None:
    """Issue 13 (minor): a job accepted with the maximum delay by a host whose clock is a little
    ahead of Redis's used to be refused (by the relay's clock, then Redis TIME), and with it the
    whole batch, for as long as the skew lasted. Now Redis clamps it to TIME + 7 days."""
    before = redis_now_ms(redis_client)
    ahead = before + MAX_DELAY_MS + 5_000  # the gateway's clock was 5 s ahead
    result = rq.push("q", TOPIC, 0, 1, [(0, spec("now")), (1, spec("max", run_at_ms=ahead))])
    after = redis_now_ms(redis_client)
    assert (result.pushed, result.skipped) == (2, 0)
    assert members(redis_client, "q", "ready") == ["now"]
    when = redis_client.zscore(K.delayed, "max")
    assert when is not None and before + MAX_DELAY_MS <= when <= after + MAX_DELAY_MS
    # enqueue (a caller's own clock) tolerates a little skew too, and Redis clamps the same way
    assert rq.enqueue(spec("direct", run_at_ms=after + MAX_DELAY_MS + 5_000))
    direct = redis_client.zscore(K.delayed, "direct")
    assert direct is not None and direct <= redis_now_ms(redis_client) + MAX_DELAY_MS


def test_push_unsorted_offsets_are_sorted_first(rq: RedisQueue, redis_client: redis.Redis) -> None:
    records = recs(*range(1500))[::-1]
    result = rq.push("q", TOPIC, 0, 1, records)  # two chunks of <= 1000, in offset order
    assert (result.pushed, result.offset) == (1500, 1499)
    assert redis_client.zcard(K.ready) == 1500


@pytest.mark.parametrize("bad", [
    {"queue": "Q"}, {"topic": ""}, {"topic": "a:b"}, {"partition": -1}, {"owner": 0}, {"owner": -3},
    {"owner": True}, {"owner": 2**60}, {"records": []}, {"records": [(-1, "x")]},
    {"records": [(1, {"job_id": "x"})]}, {"records": [(1, spec("x", queue="other"))]},
    {"records": [(1, JobSpec.model_construct(job_id="x", queue="q", payload={1, 2}, priority=0,
                                             max_attempts=5, lease_ms=30_000, run_at_ms=0,
                                             enqueued_at_ms=0))]},
])
def test_push_hostile_input_writes_nothing(rq: RedisQueue, redis_client: redis.Redis,
                                           bad: dict[str, object]) -> None:
    rq.push("q", TOPIC, 0, 1, recs(0))
    before = snapshot(redis_client)
    args: dict[str, object] = {"queue": "q", "topic": TOPIC, "partition": 0, "owner": 1, "records": recs(1)}
    args.update(bad)
    with pytest.raises((InvalidInput, InvalidQueueName)):
        rq.push(args["queue"], args["topic"], args["partition"], args["owner"], args["records"])  # type: ignore[arg-type]
    assert snapshot(redis_client) == before


def test_push_lua_rejects_bad_argv_before_writing(rq: RedisQueue, redis_client: redis.Redis) -> None:
    """The script validates on its own too (defence in depth against other callers)."""
    rq.push("q", TOPIC, 0, 1, recs(0))
    script = redis_client.register_script(source("push.lua"))
    # owner, count, offset, id, payload, meta, run_at, gen, group, traceparent
    good = [1, 1, 5, "ok", '"p"', "0,5,30000,0", 0, 0, "", ""]
    keys = [K.relayed(TOPIC, 0), K.job_prefix, K.ready, K.delayed, K.seq, K.wake, K.used, K.config,
            *K.group_keys, K.dead, K.leased, K.tokens, K.idle]  # push.lua's 15 (scripts.py)

    def argv(fields: list[object]) -> list[object]:  # the records go as one JSON array of strings
        return [fields[0], fields[1], json.dumps([str(f) for f in fields[2:]]), 0, -1]  # budget, follow

    script(keys=keys, args=argv([1, 1, 1, "ok", '"p"', "0,5,30000,0", 0, 0, "", ""]))  # the good one is good
    before = snapshot(redis_client)
    bad_args = []
    for index, value in [(2, "-1"), (3, "bad id!"), (4, ""), (5, "10,5,30000,0"), (5, "0,-1,30000,0"),
                         (5, "0,1000,30000,0"), (5, "0,5,5,0"), (5, "0,5,30000"), (5, "0,101,30000,0"),
                         (6, str(10**15)),
                         (6, "1.5"), (7, "-1"), (7, "x"), (7, str(2**53)), (0, "x"), (1, "2"),
                         (8, "bad group!"), (8, "-lead"), (8, "x" * 65), (8, "a{b}"), (8, "a b"),
                         (9, "not a traceparent"), (9, "00-" + "A" * 32 + "-" + "b" * 16 + "-01"),
                         (9, "00-" + "a" * 32 + "-" + "b" * 16 + "-01" + "x" * 100)]:
        args = list(good)
        args[index] = value
        bad_args.append(argv(args))
    records = json.loads(argv(good)[2])
    for blob in ["not json", "{}", json.dumps({"0": records}), json.dumps(records[:4]),
                 json.dumps(records * 2), json.dumps([5, *records[1:]]),
                 json.dumps([records[0], 7, *records[2:]]),
                 json.dumps([*records[:2], None, *records[3:]]),
                 json.dumps([*records[:3], ["x"], *records[4:]]), json.dumps([*records[:5], 3]),
                 json.dumps([*records[:6], 3]), json.dumps([*records[:6], None]), json.dumps(records[:6]),
                 json.dumps([*records[:7], 3]), json.dumps(records[:7]),
                 "[" * 2000 + "]" * 2000]:
        bad_args.append([1, 1, blob, 0, -1])
    for budget, follow in [("-1", -1), ("x", -1), ("1.5", -1), (0, "-2"), (0, "x"), (0, str(2**53))]:
        bad_args.append([*argv(good)[:3], budget, follow])
    bad_args.append([*argv(good), "extra"])
    bad_args.append([1, 1, *json.loads(argv(good)[2])])  # the old form: five arguments per record
    for args in bad_args:
        with pytest.raises(redis.ResponseError, match="INVALID_INPUT"):
            script(keys=keys, args=args)
    assert snapshot(redis_client) == before


def test_rate_unlimited_without_config(rq: RedisQueue, redis_client: redis.Redis) -> None:
    assert rq.take_rate("q", 500) == 500
    assert not redis_client.exists(K.bucket)


def test_rate_bucket_burst_then_refill(rq: RedisQueue, redis_client: redis.Redis) -> None:
    # 10 a second, not 100: a fresh-clone CI's loaded backends tier let 10 ms pass between the first two
    # calls, and a token came back
    redis_client.hset(K.config, mapping={"rate_per_s": 10, "burst": 20})
    assert rq.take_rate("q", 50) == 20  # a new bucket starts full
    assert rq.take_rate("q", 50) == 0
    time.sleep(1.2)  # about 12 tokens at 10/s
    got = rq.take_rate("q", 50)
    assert 10 <= got <= 20
    bucket = redis_client.hgetall(K.bucket)
    assert float(bucket["tokens"]) < 1
    assert abs(int(bucket["ts"]) - redis_now_ms(redis_client)) < 1000


def test_rate_burst_zero_means_capacity_one(rq: RedisQueue, redis_client: redis.Redis) -> None:
    redis_client.hset(K.config, mapping={"rate_per_s": 1000, "burst": 0})
    assert rq.take_rate("q", 10) == 1


@pytest.mark.parametrize("wanted", [0, -1, 10**7, True, 1.5])
def test_rate_hostile_wanted(rq: RedisQueue, redis_client: redis.Redis, wanted: object) -> None:
    redis_client.hset(K.config, mapping={"rate_per_s": 10, "burst": 5})
    before = snapshot(redis_client)
    with pytest.raises(InvalidInput):
        rq.take_rate("q", wanted)  # type: ignore[arg-type]
    assert snapshot(redis_client) == before
