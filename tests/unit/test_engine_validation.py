"""RedisQueue validates in Python before it touches Redis: bad input never reaches the client."""

from __future__ import annotations

import math
from typing import Any

import pytest

from sluice.backends.redis.checks import job_fields
from sluice.backends.redis.engine import RedisQueue
from sluice.core.errors import InvalidInput, InvalidQueueName
from sluice.core.models import JobSpec


class Untouchable:
    """A redis client stand-in that fails the test if anything is called on it."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the engine used the client ({name}) for input it should have refused")


@pytest.fixture
def rq() -> RedisQueue:
    return RedisQueue(Untouchable())  # type: ignore[arg-type]


def raw(**overrides: Any) -> JobSpec:
    fields: dict[str, Any] = {"job_id": "a", "queue": "q", "payload": None, "priority": 0, "max_attempts": 5,
                              "lease_ms": 30_000, "run_at_ms": 0, "enqueued_at_ms": 0}
    return JobSpec.model_construct(**(fields | overrides))


@pytest.mark.parametrize("call", [
    lambda rq: rq.lease("bad queue", 1, 1_000),
    lambda rq: rq.lease("q", 0, 1_000),
    lambda rq: rq.lease("q", 1, 9),
    lambda rq: rq.lease("q", 1, 1_000, worker_id="w" * 257),
    lambda rq: rq.extend("q", "a", 0, 1_000),
    lambda rq: rq.extend("q", "a b", 1, 1_000),
    lambda rq: rq.ack("q", "a", -1),
    lambda rq: rq.ack_many("q", [("a", 1), ("b", True)]),
    lambda rq: rq.ack_many("q", [("a", 1), "b"]),
    lambda rq: rq.ack_many("q", [("a", 1, 2)]),
    lambda rq: rq.fail("q", "a", 1, "x", retry_after_ms=-5),
    lambda rq: rq.fail("q", "a", 1, b"bytes"),
    lambda rq: rq.release("q", "a", 2**53),
    lambda rq: rq.cancel("q", ""),
    lambda rq: rq.reap("q", 0),
    lambda rq: rq.redrive("q", "a:b"),
    lambda rq: rq.redrive("q", "a", generation=-1),
    lambda rq: rq.redrive("q", "a", generation=True),
    lambda rq: rq.redrive("q", "a", generation=2**53),
    lambda rq: rq.redrive("q", None, generation=1),  # a generation belongs to one job
    lambda rq: rq.cancel("q", "a", settle=1),
    lambda rq: rq.dead_letters("q", 0),
    lambda rq: rq.set_config("q", max_in_flight=-1),
    lambda rq: rq.set_config("q"),
    lambda rq: rq.enqueue(raw(payload={1, 2})),
    lambda rq: rq.enqueue(raw(payload=math.nan)),
    lambda rq: rq.enqueue(raw(max_attempts=-1)),  # 0 is "unset": the handler's retry policy decides
    lambda rq: rq.enqueue(raw(max_attempts=101)),
    lambda rq: rq.enqueue(raw(run_at_ms=-1)),
    lambda rq: rq.enqueue_many([raw(job_id="ok"), raw(job_id="bad id")]),
    lambda rq: rq.enqueue({"job_id": "a", "queue": "q"}),
    lambda rq: rq.push("q", "t", 0, 0, [(0, raw())]),
    lambda rq: rq.push("q", "t", -1, 1, [(0, raw())]),
    lambda rq: rq.push("q", "t", 0, 1, [(0, raw(queue="other"))]),
    lambda rq: rq.push("q", "t", 0, 1, [(-1, raw())]),
    lambda rq: rq.take_rate("q", 0),
])
def test_refused_before_any_redis_call(rq: RedisQueue, call: Any) -> None:
    with pytest.raises((InvalidInput, InvalidQueueName)):
        call(rq)


def test_job_fields_pack_the_meta_the_scripts_read() -> None:
    spec = JobSpec(job_id="a", queue="q", payload={"b": 1, "a": [True, None]}, priority=7, max_attempts=3,
                   lease_ms=1500, run_at_ms=5, enqueued_at_ms=42)
    fields = job_fields(spec, "q", now_ms=1_000)
    assert fields == ("a", '{"a":[true,null],"b":1}', "7,3,1500,42", 5, "", "")  # no group, no trace


def test_job_fields_leave_a_missing_enqueued_at_to_the_script() -> None:
    assert job_fields(JobSpec(job_id="a", queue="q"), "q", now_ms=777).meta == "0,5,30000,0"


def test_error_text_is_truncated_not_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}
    rq = RedisQueue(Untouchable())  # type: ignore[arg-type]
    monkeypatch.setattr(rq.scripts, "fail", lambda *args: seen.setdefault("error", args[3]) and "retry")
    assert rq.fail("q", "a", 1, "e" * 10_000) == "retry"
    assert len(seen["error"]) == 4000


def _decoded(**overrides: Any) -> Any:
    from sluice.core.models import DecodedJob

    fields: dict[str, Any] = {"job_id": "a", "queue": "q", "payload": "null", "priority": 0,
                              "max_attempts": 5, "lease_ms": 30_000, "run_at_ms": 0, "enqueued_at_ms": 0}
    return DecodedJob(**(fields | overrides))


@pytest.mark.parametrize(("records", "gens"), [
    ([(0, _decoded(queue="other"))], None),
    ([(0, ("a", "q", "null", 0, 5, 30_000, 0, 0))], None),  # a plain tuple, not a DecodedJob
    ([(-1, _decoded())], None),
    ([(True, _decoded())], None),
    ([(0, _decoded(run_at_ms=2**52 + 1))], None),
    ([(0, _decoded(payload="x" * (10 * 1024 * 1024)))], None),
    # a redrive generation that is not an int in range, falsy ones included (push_args reads
    # the table only for the jobs it names: these must still be refused)
    ([(0, _decoded())], {"a": False}),
    ([(0, _decoded())], {"a": None}),
    ([(0, _decoded())], {"a": 0.0}),
    ([(0, _decoded())], {"a": -1}),
    ([(0, _decoded())], {"a": "1"}),
    ([(0, _decoded())], {"a": 2**53}),
])
def test_push_args_refuse_bad_records_and_generations(records: Any, gens: Any) -> None:
    from sluice.backends.redis.relay_engine import push_args

    with pytest.raises(InvalidInput):
        push_args("q", 1, records, horizon=2**52, gens=gens)


def test_push_args_carry_each_jobs_redrive_generation() -> None:
    import json

    from sluice.backends.redis.relay_engine import push_args

    records = [(0, _decoded(job_id="a")), (1, _decoded(job_id="b", run_at_ms=7, priority=2))]
    cases: list[tuple[Any, list[str]]] = [(None, ["0", "0"]), ({}, ["0", "0"]), ({"b": 3}, ["0", "3"]),
                                          ({"a": 0, "z": 9}, ["0", "0"])]
    for gens, want in cases:
        [args] = push_args("q", 1, records, horizon=2**52, gens=gens)
        flat = json.loads(args[2])
        assert args[:2] == [1, 2]
        assert flat == ["0", "a", "null", "0,5,30000,0", "0", want[0], "", "",  # no group, no trace
                        "1", "b", "null", "2,5,30000,0", "7", want[1], "", ""]
