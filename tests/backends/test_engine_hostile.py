"""Hostile input named in issue 2: each gets a typed error, raised before any write.

Every case starts from a queue holding a leased job, a waiting job and a dead job, and
asserts that the whole database is unchanged afterwards.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import redis

from sluice.backends.redis.engine import RedisQueue
from sluice.core.errors import BackendUnavailable, InvalidInput, InvalidQueueName, LeaseLost, SluiceError
from sluice.core.models import MAX_DELAY_MS, JobSpec, LeasedJob
from sluice_dev.local.servers import free_port
from tests.backends.test_engine_support import redis_now_ms, snapshot, spec

pytestmark = pytest.mark.integration

BAD_QUEUE_NAMES = ["", "{q}", "q}", "{", "a:b", "q*", "*", "has space", " q", "q\n", "q\r\nFLUSHALL", "ça",
                   "队列", "Q", "-q", "_q", "q\x00", "a" * 65, None, 7, b"q"]




@pytest.fixture
def held(rq: RedisQueue) -> LeasedJob:
    """A queue with a leased job ("held"), a waiting one and a dead one."""
    rq.enqueue_many([spec("held", priority=9), spec("waiting"), spec("doomed", max_attempts=1, priority=8)])
    [held, doomed] = rq.lease("q", 2, 60_000)
    rq.fail("q", doomed.job_id, doomed.lease_token, "boom")
    return held


def refused(client: redis.Redis, call: Callable[[], Any], error: type[Exception] = InvalidInput) -> None:
    before = snapshot(client)
    with pytest.raises(error):
        call()
    assert snapshot(client) == before


def raw_spec(**overrides: Any) -> JobSpec:
    """A JobSpec that skipped pydantic validation, as a careless caller might build one."""
    fields: dict[str, Any] = {"schema_version": 1, "job_id": "new", "queue": "q", "payload": {"ok": 1},
                              "priority": 0, "max_attempts": 5, "lease_ms": 30_000, "run_at_ms": 0,
                              "enqueued_at_ms": 0, "idempotency_key": None}
    fields.update(overrides)
    return JobSpec.model_construct(**fields)


# --- queue names -------------------------------------------------------------------------------

QUEUE_CALLS: dict[str, Callable[[RedisQueue, Any], Any]] = {
    "enqueue": lambda rq, q: rq.enqueue(raw_spec(queue=q)),
    "lease": lambda rq, q: rq.lease(q, 1, 1_000),
    "extend": lambda rq, q: rq.extend(q, "held", 1, 1_000),
    "ack": lambda rq, q: rq.ack(q, "held", 1),
    "fail": lambda rq, q: rq.fail(q, "held", 1, "x"),
    "release": lambda rq, q: rq.release(q, "held", 1),
    "cancel": lambda rq, q: rq.cancel(q, "held"),
    "reap": lambda rq, q: rq.reap(q),
    "stats": lambda rq, q: rq.stats(q),
    "redrive": lambda rq, q: rq.redrive(q),
    "purge": lambda rq, q: rq.purge_dead(q),
    "set_config": lambda rq, q: rq.set_config(q, paused=True),
    "push": lambda rq, q: rq.push(q, "t", 0, 1, [(0, raw_spec(queue=q))]),
    "take_rate": lambda rq, q: rq.take_rate(q, 1),
}


@pytest.mark.parametrize("name", BAD_QUEUE_NAMES, ids=repr)
def test_bad_queue_names(rq: RedisQueue, redis_client: redis.Redis, held: LeasedJob, name: Any) -> None:
    for call in QUEUE_CALLS.values():
        refused(redis_client, lambda: call(rq, name), InvalidQueueName)  # noqa: B023 (called at once)


# --- delays, leases, attempts, priorities --------------------------------------------------------

@pytest.mark.parametrize("run_at", [-1, -10**12, 10**18, "soon", 1.5, True],
                         ids=["negative", "very negative", "absurd", "str", "float", "bool"])
def test_bad_run_at(rq: RedisQueue, redis_client: redis.Redis, held: LeasedJob, run_at: Any) -> None:
    refused(redis_client, lambda: rq.enqueue(raw_spec(run_at_ms=run_at)))


def test_delay_beyond_seven_days(rq: RedisQueue, redis_client: redis.Redis, held: LeasedJob) -> None:
    too_late = redis_now_ms(redis_client) + MAX_DELAY_MS + 60_000
    refused(redis_client, lambda: rq.enqueue(raw_spec(run_at_ms=too_late)))


@pytest.mark.parametrize("after", [-1, MAX_DELAY_MS + 1, 10**20, 0.5, "1s", True])
def test_bad_retry_after(rq: RedisQueue, redis_client: redis.Redis, held: LeasedJob, after: Any) -> None:
    refused(redis_client, lambda: rq.fail("q", "held", held.lease_token, "x", retry_after_ms=after))


@pytest.mark.parametrize("lease_ms", [-1, 0, 9, 12 * 3600 * 1000 + 1, 10**15, 1.5, "30s", True], ids=repr)
def test_bad_lease_lengths(rq: RedisQueue, redis_client: redis.Redis, held: LeasedJob, lease_ms: Any) -> None:
    refused(redis_client, lambda: rq.lease("q", 1, lease_ms))
    refused(redis_client, lambda: rq.extend("q", "held", held.lease_token, lease_ms))
    refused(redis_client, lambda: rq.enqueue(raw_spec(lease_ms=lease_ms)))


def test_no_lease_length_is_refused_where_one_is_required(rq: RedisQueue, redis_client: redis.Redis,
                                                          held: LeasedJob) -> None:
    refused(redis_client, lambda: rq.extend("q", "held", held.lease_token, None))  # type: ignore[arg-type]
    refused(redis_client, lambda: rq.enqueue(raw_spec(lease_ms=None)))


# 0 is no longer refused: it is "unset", the handler's retry policy decides (test_lua_unset_attempts.py)
@pytest.mark.parametrize("max_attempts", [-1, 101, 10**9, 2.0, "5", True, None], ids=repr)
def test_bad_max_attempts(rq: RedisQueue, redis_client: redis.Redis, held: LeasedJob,
                          max_attempts: Any) -> None:
    refused(redis_client, lambda: rq.enqueue(raw_spec(max_attempts=max_attempts)))


@pytest.mark.parametrize("priority", [-1, 10, 1.0, "9", None], ids=repr)
def test_bad_priority(rq: RedisQueue, redis_client: redis.Redis, held: LeasedJob, priority: Any) -> None:
    refused(redis_client, lambda: rq.enqueue(raw_spec(priority=priority)))


@pytest.mark.parametrize("n", [0, -1, 1001, 2.0, True])
def test_bad_lease_count(rq: RedisQueue, redis_client: redis.Redis, held: LeasedJob, n: Any) -> None:
    refused(redis_client, lambda: rq.lease("q", n, 1_000))


# --- payloads ------------------------------------------------------------------------------------

def _circular() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


BAD_PAYLOADS = {"set": {1, 2}, "object": object(), "bytes": b"\x00", "nan": math.nan, "inf": math.inf,
                "nested nan": {"a": [1, -math.inf]}, "circular": _circular(), "tuple key": {(1, 2): 3},
                "too big": "x" * (1024 * 1024 + 1)}


@pytest.mark.parametrize("payload", list(BAD_PAYLOADS.values()), ids=list(BAD_PAYLOADS))
def test_payload_not_json(rq: RedisQueue, redis_client: redis.Redis, held: LeasedJob, payload: Any) -> None:
    refused(redis_client, lambda: rq.enqueue(raw_spec(payload=payload)))
    refused(redis_client, lambda: rq.push("q", "t", 0, 1, [(0, raw_spec(payload=payload))]))


def test_one_bad_job_in_a_batch_writes_nothing(rq: RedisQueue, redis_client: redis.Redis,
                                               held: LeasedJob) -> None:
    batch = [spec("fine1"), raw_spec(job_id="x", payload={1}), spec("fine2")]
    refused(redis_client, lambda: rq.enqueue_many(batch))


@pytest.mark.parametrize("job_id", ["", "a b", "a:b", "{q}", "-x", ".x", "x" * 129, "é", "a\nb", None, 5])
def test_bad_job_ids(rq: RedisQueue, redis_client: redis.Redis, held: LeasedJob, job_id: Any) -> None:
    refused(redis_client, lambda: rq.enqueue(raw_spec(job_id=job_id)))
    refused(redis_client, lambda: rq.ack("q", job_id, held.lease_token))
    refused(redis_client, lambda: rq.cancel("q", job_id))


def test_bad_error_text(rq: RedisQueue, redis_client: redis.Redis, held: LeasedJob) -> None:
    refused(redis_client, lambda: rq.fail("q", "held", held.lease_token, None))  # type: ignore[arg-type]
    refused(redis_client, lambda: rq.fail("q", "held", held.lease_token, "x", permanent="yes"))  # type: ignore[arg-type]


# --- tokens --------------------------------------------------------------------------------------

@pytest.mark.parametrize("token", [0, -1, -(2**63), 1.0, "1", True, False, None, 2**53, 2**64],
                         ids=repr)
def test_malformed_tokens(rq: RedisQueue, redis_client: redis.Redis, held: LeasedJob, token: Any) -> None:
    refused(redis_client, lambda: rq.extend("q", "held", token, 1_000))
    refused(redis_client, lambda: rq.ack("q", "held", token))
    refused(redis_client, lambda: rq.ack_many("q", [("held", held.lease_token), ("held", token)]))
    refused(redis_client, lambda: rq.fail("q", "held", token, "x"))
    refused(redis_client, lambda: rq.release("q", "held", token))


@pytest.mark.parametrize("call", ["extend", "ack", "fail", "release"])
@pytest.mark.parametrize("which", ["unknown", "stale"])
def test_unknown_and_stale_tokens(rq: RedisQueue, redis_client: redis.Redis, held: LeasedJob, call: str,
                                  which: str) -> None:
    token = held.lease_token + 10_000 if which == "unknown" else held.lease_token - 1
    calls: dict[str, Callable[[], Any]] = {
        "extend": lambda: rq.extend("q", "held", token, 1_000),
        "ack": lambda: rq.ack("q", "held", token),
        "fail": lambda: rq.fail("q", "held", token, "x"),
        "release": lambda: rq.release("q", "held", token),
    }
    refused(redis_client, calls[call], LeaseLost)


# --- push ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("topic", ["", "a b", "x:y", "{t}", "t" * 250, None, 3])
def test_push_bad_topic(rq: RedisQueue, redis_client: redis.Redis, held: LeasedJob, topic: Any) -> None:
    refused(redis_client, lambda: rq.push("q", topic, 0, 1, [(0, spec("p"))]))


# --- the backend ---------------------------------------------------------------------------------

def test_unreachable_redis_is_backend_unavailable() -> None:
    rq = RedisQueue.from_url(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=0.5)
    for call in (lambda: rq.lease("q", 1, 1_000), lambda: rq.enqueue(spec("a")), lambda: rq.queues(),
                 lambda: rq.get_config("q"), lambda: rq.dead_letters("q")):
        with pytest.raises(BackendUnavailable):
            call()


def test_every_refusal_is_a_sluice_error(rq: RedisQueue, held: LeasedJob) -> None:
    with pytest.raises(SluiceError):
        rq.lease("Q", 1, 1_000)
    with pytest.raises(SluiceError):
        rq.ack("q", "held", held.lease_token + 1)
