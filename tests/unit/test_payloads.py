"""Large payloads in S3, a pointer in the record (issue 28, item 4; sluice.core.payloads).

The gateway writes a payload above the threshold to the payload store before the record is
appended, and the record (sealed) carries the pointer; the worker resolves it before the handler
runs. Forged pointers are refused at the gateway, and a pointer that is not its job's own is
never followed by a worker.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from sluice.core import ids, payloads, schedules, seal
from sluice.core.bus import EventBus
from sluice.core.caller import Caller
from sluice.core.errors import BackendUnavailable, InvalidInput, PayloadUnavailable
from sluice.core.families import ChildRequest, FamilyRequest
from sluice.core.models import JobSpec, dump_json
from sluice.core.wire import BatchRequest, EnqueueRequest
from sluice.gateway import schedules as api_schedules
from sluice.gateway.api import Api, Backends, IdMinting, Intake
from sluice.gateway.families import enqueue_children
from sluice_dev.fakes import FakeLog, FakePayloadStore, FakeQueue, FakeStore, kit

KEY = b"unit-test-job-id-key-0123456789"
INLINE = 1024
PARENT = ids.mint(1_700_000_000_000, "emails", KEY)
FIRED_AT = 1_799_982_000_000  # a time "rate(1 hour)" fires at (tests/unit/test_schedule_firing.py)
BIG = {"blob": "x" * 5000, "n": 1}  # about 5 KB of JSON: above INLINE


def api(store: FakePayloadStore | None, log: FakeLog | None = None) -> Api:
    backends = Backends(log or FakeLog(), FakeStore(), FakeQueue(), events=EventBus())  # type: ignore[arg-type]
    return Api(backends, IdMinting(KEY), intake=Intake(payloads=store, inline_max_bytes=INLINE),
               clock=lambda: 1_700_000_000_000)


def pointer_of(value: Any, queue: str, job_id: str) -> dict[str, Any]:
    body = dump_json(value).encode()
    return payloads.Pointer(payloads.payload_key(queue, job_id), hashlib.sha256(body).hexdigest(),
                            len(body)).as_payload()


# -- the gateway -------------------------------------------------------------------------------------

def test_a_small_payload_stays_inline_and_makes_no_store_call() -> None:
    store, log = FakePayloadStore(), FakeLog()
    api(store, log).enqueue("emails", EnqueueRequest(payload={"to": "a@example.com"}))
    assert store.puts == [] and log.records[0].payload == {"to": "a@example.com"}


def test_the_threshold_is_the_payloads_json_size() -> None:
    store, log = FakePayloadStore(), FakeLog()
    exactly = "x" * (INLINE - 2)  # its JSON is the string's quotes and INLINE - 2 characters
    api(store, log).enqueue("q", EnqueueRequest(payload=exactly))
    api(store, log).enqueue("q", EnqueueRequest(payload=exactly + "x"))
    assert log.records[0].payload == exactly  # at the threshold: inline
    assert payloads.parse(log.records[1].payload) is not None and len(store.puts) == 1


def test_a_large_payload_goes_to_the_store_and_the_sealed_record_carries_its_pointer() -> None:
    store, log = FakePayloadStore(), FakeLog()
    accepted = api(store, log).enqueue("emails", EnqueueRequest(payload=BIG)).body
    (record,) = log.records
    body = dump_json(BIG).encode()
    assert record.payload == {"$sluice": "s3", "key": f"payloads/emails/{accepted.job_id}",  # type: ignore[union-attr]
                              "sha256": hashlib.sha256(body).hexdigest(), "bytes": len(body)}
    assert store.objects[record.payload["key"]] == body
    assert len(record.payload_json()) < 200  # what Kafka and Redis hold
    assert seal.verify_spec(record, [KEY])  # the seal covers the pointer, so its digest binds the object
    tampered = record.model_copy(update={"payload": {**record.payload, "sha256": "0" * 64}})
    assert not seal.verify_spec(tampered, [KEY])


def test_every_large_job_of_a_batch_gets_its_own_object_before_the_append() -> None:
    store, log = FakePayloadStore(), FakeLog()
    order: list[str] = []
    log.before_ack = lambda: order.append(f"append after {len(store.puts)} puts")
    jobs = [EnqueueRequest(payload=BIG), EnqueueRequest(payload=1), EnqueueRequest(payload=BIG)]
    api(store, log).enqueue_batch("q", BatchRequest(jobs=jobs))
    assert order == ["append after 2 puts"]
    assert [payloads.parse(r.payload) is not None for r in log.records] == [True, False, True]
    assert store.puts == [f"payloads/q/{r.job_id}" for r in log.records if r.payload != 1]


def test_an_unreachable_store_appends_nothing() -> None:
    store, log = FakePayloadStore(), FakeLog()
    store.down = True
    with pytest.raises(BackendUnavailable):
        api(store, log).enqueue("q", EnqueueRequest(payload=BIG))
    assert log.records == [] and log.pending == []


def test_without_a_store_every_payload_stays_inline() -> None:
    log = FakeLog()
    api(None, log).enqueue("q", EnqueueRequest(payload=BIG))
    assert log.records[0].payload == BIG


FORGED = [
    {"$sluice": "s3", "key": "payloads/payroll/01J0000000000000000000000.payroll.x", "sha256": "a" * 64,
     "bytes": 10},
    {"$sluice": "anything"},
    {"$sluice": None, "other": 1},
]


@pytest.mark.parametrize("forged", FORGED)
def test_a_payload_shaped_like_a_pointer_is_refused_everywhere(forged: dict[str, Any]) -> None:
    """Hostile: a caller forging a pointer to another queue's object. Refused at the gateway (400),
    nothing written; a pointer-looking value deeper in a payload is only data."""
    store, log = FakePayloadStore(), FakeLog()
    gateway = api(store, log)
    with pytest.raises(InvalidInput, match=r"'\$sluice' member is reserved"):
        gateway.enqueue("emails", EnqueueRequest(payload=forged))
    with pytest.raises(InvalidInput, match="job 1: payload"):
        gateway.enqueue_batch("emails", BatchRequest(jobs=[EnqueueRequest(payload=1),
                                                           EnqueueRequest(payload=forged)]))
    family = FamilyRequest(parent_id=PARENT, token=1,
                           jobs=[ChildRequest(queue="emails", key="c", payload=forged)])
    with pytest.raises(InvalidInput, match="reserved"):
        enqueue_children(gateway, family, Caller.sluice(9))
    firing = schedules.Schedule("nightly", "rate(1 hour)", "emails", forged, 0)  # an operator's schedule
    gateway.clock = lambda: FIRED_AT
    with pytest.raises(InvalidInput, match="reserved"):
        api_schedules.fire(gateway, firing, FIRED_AT)
    assert log.records == [] and store.puts == []
    gateway.enqueue("emails", EnqueueRequest(payload={"data": forged}))  # wrapped: an ordinary payload
    assert log.records[0].payload == {"data": forged}


def test_a_derived_id_s_large_payload_is_stored_under_that_id() -> None:
    """A child's, a continuation's and a firing's ids are derived, not minted: the key follows them
    (a continuation's stored record keeps its pointer until its release reseals it)."""
    store = FakePayloadStore()
    gateway = api(store)
    child = ChildRequest(queue="resize", key="c1", payload=BIG)
    spec = gateway.pipeline.spec("resize", child, 1_700_000_000_000, None, job_id="derived-child.resize")
    assert store.puts == ["payloads/resize/derived-child.resize"] and seal.verify_spec(spec, [KEY])
    released = gateway.pipeline.reseal(JobSpec.model_validate_json(spec.model_dump_json()), 1_700_000_900_000)
    assert released.payload == spec.payload and seal.verify_spec(released, [KEY])


# -- the pointer, pure ---------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [
    {"$sluice": "s3", "key": "payloads/q/j", "sha256": "z" * 64, "bytes": 1},
    {"$sluice": "s3", "key": "payloads/q/j", "sha256": "a" * 64, "bytes": True},
    {"$sluice": "s3", "key": "payloads/q/j", "sha256": "a" * 64, "bytes": 1, "bucket": "other"},
    {"$sluice": "http", "key": "payloads/q/j", "sha256": "a" * 64, "bytes": 1},
])
def test_a_malformed_pointer_is_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(PayloadUnavailable, match="malformed"):
        payloads.parse(bad)


def test_resolve_reads_the_jobs_own_key_only_and_checks_size_and_digest() -> None:
    store = FakePayloadStore()
    key = payloads.payload_key("q", "j1")
    store.objects[key] = dump_json(BIG).encode()
    assert payloads.resolve(pointer_of(BIG, "q", "j1"), "q", "j1", store.get) == BIG
    assert payloads.resolve({"plain": 1}, "q", "j1", None) == {"plain": 1}
    with pytest.raises(PayloadUnavailable, match="not this job's own"):
        payloads.resolve(pointer_of(BIG, "q", "j1"), "q", "j2", store.get)
    store.objects[key] = dump_json({**BIG, "n": 2}).encode()  # same size, other content
    with pytest.raises(PayloadUnavailable, match="does not match"):
        payloads.resolve(pointer_of(BIG, "q", "j1"), "q", "j1", store.get)
    assert store.gets == [key, key]


# -- the worker ----------------------------------------------------------------------------------------

def drained(objects: dict[str, bytes] | None, payload: Any, *, job_id: str = "j1", queue: str = "q",
            store: bool = True) -> tuple[list[Any], FakeQueue, FakePayloadStore]:
    k = kit()
    fake = FakePayloadStore()
    fake.objects.update(objects or {})
    seen: list[Any] = []
    k.app.register(queue, lambda job, ctx: seen.append(job.payload))
    k.queue.add(queue, job_id, payload, max_attempts=3)
    k.worker().bind(payloads=fake if store else None).drain([queue], 1)
    return seen, k.queue, fake


def test_the_handler_gets_the_original_payload_never_the_pointer() -> None:
    objects = {"payloads/q/j1": dump_json(BIG).encode()}
    seen, queue, _ = drained(objects, pointer_of(BIG, "q", "j1"))
    assert seen == [BIG] and queue.job("q", "j1").state == "done"


def test_a_mismatching_object_fails_the_job_without_calling_the_handler() -> None:
    objects = {"payloads/q/j1": dump_json({"blob": "y" * 5000, "n": 1}).encode()}  # overwritten
    seen, queue, _ = drained(objects, pointer_of(BIG, "q", "j1"))
    job = queue.job("q", "j1")
    assert seen == [] and job.state in ("ready", "delayed")  # retried per policy
    assert job.last_error is not None and "does not match" in job.last_error


def test_a_missing_object_fails_the_job_with_the_reason() -> None:
    seen, queue, _ = drained({}, pointer_of(BIG, "q", "j1"))
    last = queue.job("q", "j1").last_error or ""
    assert seen == [] and "payload" in last and "missing" in last


def test_a_worker_never_follows_a_pointer_to_another_jobs_object() -> None:
    """Defence in depth: were a pointer to another queue's object ever in a record, the worker reads
    only the key its own job derives, so nothing of the other queue is read or handed over."""
    secret = {"salary": 1}
    objects = {"payloads/payroll/p1": dump_json(secret).encode()}
    seen, queue, fake = drained(objects, pointer_of(secret, "payroll", "p1"))
    assert seen == [] and fake.gets == []
    assert "not this job's own" in (queue.job("q", "j1").last_error or "")


def test_a_worker_without_a_store_says_so() -> None:
    seen, queue, _ = drained({}, pointer_of(BIG, "q", "j1"), store=False)
    assert seen == [] and "no payload store" in (queue.job("q", "j1").last_error or "")


def test_the_round_trip_gateway_record_to_handler() -> None:
    store, log = FakePayloadStore(), FakeLog()
    api(store, log).enqueue("q", EnqueueRequest(payload=BIG))
    record: JobSpec = log.records[0]
    seen, _, _ = drained(store.objects, json.loads(record.payload_json()), job_id=record.job_id)
    assert seen == [BIG]


# -- what else carries payloads: firings, the relay, redrives -----------------------------------------

def test_a_large_firing_is_stored_under_its_firing_id_and_the_relay_pushes_its_pointer() -> None:
    from tests.unit.test_gateway_fakes import KEY as RELAY_KEY
    from tests.unit.test_relay import World, run_steps

    assert RELAY_KEY == KEY  # the relay's World verifies seals with the gateway fakes' key
    store, log = FakePayloadStore(), FakeLog()
    gateway = api(store, log)
    gateway.clock = lambda: FIRED_AT
    fired = api_schedules.fire(gateway, schedules.Schedule("nightly", "rate(1 hour)", "reports", BIG, 0),
                               FIRED_AT)
    assert store.puts == [f"payloads/reports/{fired.job_id}"]
    world = World(partitions=1)
    world.source.append_spec(0, log.records[0])
    relay = world.relay(batch=10)
    run_steps(relay, 5)
    relay.stop()
    assert world.in_redis("reports") == [fired.job_id]  # the sealed pointer passed the relay's checks


def test_a_redrive_appends_the_same_pointer_sealed_anew_and_puts_nothing() -> None:
    from sluice.gateway.redrive import redrive_one

    store, log = FakePayloadStore(), FakeLog()
    gateway = api(store, log)
    gateway.enqueue("q", EnqueueRequest(payload=BIG))
    record = log.records[0]
    queue = FakeQueue()
    queue.enqueue(record)
    queue.jobs[("q", record.job_id)].state = "dead"
    assert redrive_one(queue, FakeStore(), "q", record.job_id, log=log,
                       reseal=gateway.pipeline.reseal_now) == 1
    again = log.records[-1]
    assert again.payload == record.payload and seal.verify_spec(again, [KEY])
    assert store.puts == [f"payloads/q/{record.job_id}"]  # the one put of its enqueue
