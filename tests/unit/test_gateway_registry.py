"""A 202 is binding (issue 28, item 3): the gateway reserves a new queue before it accepts a job of it
(``sluice.gateway.registry``), on every path into the pipeline: an enqueue, a batch, a schedule's
firing, a family's children and its continuation."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import pytest

from sluice.core import ids, schedules
from sluice.core.bus import EventBus
from sluice.core.errors import BackendUnavailable, QueueNotAllowed, StoreError
from sluice.core.families import ChildRequest, FamilyRequest, ThenRequest
from sluice.core.ports import ParkedState
from sluice.entry.gateway import Gateway
from sluice.gateway import schedules as api_schedules
from sluice.gateway.api import Api, Backends, IdMinting, Intake
from sluice.gateway.registry import MAX_KNOWN, Reservations
from tests.unit.test_gateway_fakes import KEY, Rig

JOBS = "/v1/queues/emails/jobs"


class Directory:
    """The durable registry (DynamoDB's queues table) in memory; ``fail`` makes its next puts fail."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.fail: Exception | None = None
        self.parking: dict[str, ParkedState] = {}  # the relay's counters (relay/parked_counts.py)
        self.sensitive: dict[str, tuple[str, ...]] = {}  # state.sensitive (issue 32's review)

    def put(self, queue: str) -> None:
        if self.fail is not None:
            raise self.fail
        if queue not in self.items:
            self.items.append(queue)

    def names(self) -> list[str]:
        return sorted(self.items)

    def parked(self) -> dict[str, ParkedState]:
        return {q: self.parking.get(q, ParkedState()) for q in self.names()}

    def parked_of(self, queue: str) -> ParkedState:
        return self.parking.get(queue, ParkedState())

    def sensitive_of(self, queue: str) -> tuple[str, ...]:
        return self.sensitive.get(queue, ())

    def set_sensitive(self, queue: str, fields: Sequence[str]) -> None:
        if self.fail is not None:
            raise self.fail
        self.put(queue)
        self.sensitive[queue] = tuple(fields)


def reserving(max_queues: int = 0) -> tuple[Rig, Directory]:
    rig, directory = Rig(), Directory()
    rig.queue.max_queues = max_queues
    rig.api = Api(Backends(rig.log, rig.store, rig.queue, events=EventBus()), IdMinting(KEY),  # type: ignore[arg-type]
                  intake=Intake(registry=Reservations(rig.queue, directory)),  # type: ignore[arg-type]
                  idempotency=rig.idem, clock=lambda: rig.now_ms)
    rig.gateway = Gateway(rig.api)
    return rig, directory


def test_a_new_queue_is_reserved_and_written_through_before_its_first_202() -> None:
    rig, directory = reserving(max_queues=1)
    assert rig.call("POST", JOBS, {"payload": 1})[0] == 202
    assert rig.queue.registered == {"emails"} and directory.items == ["emails"]
    code, _, doc = rig.call("POST", "/v1/queues/other/jobs/batch", {"jobs": [{"payload": 1}] * 3})
    assert (code, doc["code"], doc["status"]) == (403, "QUEUE_NOT_ALLOWED", 403)
    assert "registry full" in doc["detail"]
    assert [r.queue for r in rig.log.records] == ["emails"]  # the refused batch cost no Kafka write
    assert directory.items == ["emails"]


def test_a_container_reserves_a_queue_once_and_remembers_no_refusal() -> None:
    rig, directory = reserving(max_queues=1)
    calls: list[str] = []
    register = rig.queue.register

    def counted(queue: str) -> bool:
        calls.append(queue)
        return register(queue)

    rig.queue.register = counted  # type: ignore[method-assign]
    for _ in range(5):
        assert rig.call("POST", JOBS, {"payload": 1})[0] == 202
    assert calls == ["emails"]  # one reservation per queue per container, not one per request
    for _ in range(2):
        assert rig.call("POST", "/v1/queues/full/jobs", {"payload": 1})[0] == 403
    rig.queue.max_queues = 2  # an operator raised the limit: the next request finds the room
    assert rig.call("POST", "/v1/queues/full/jobs", {"payload": 1})[0] == 202
    assert calls == ["emails", "full", "full", "full"] and directory.names() == ["emails", "full"]


def test_a_failed_write_through_is_503_and_the_retry_is_accepted() -> None:
    rig, directory = reserving()
    directory.fail = StoreError("update_item: ResourceNotFoundException")
    code, headers, doc = rig.call("POST", JOBS, {"payload": 1})
    assert (code, doc["code"]) == (503, "UNAVAILABLE") and "retry-after" in headers
    assert rig.log.records == [] and rig.queue.registered == {"emails"}  # harmless: idempotent
    directory.fail = None
    assert rig.call("POST", JOBS, {"payload": 1})[0] == 202
    assert directory.items == ["emails"] and len(rig.log.records) == 1


def test_redis_down_refuses_a_new_queue_with_a_retryable_503() -> None:
    rig, _ = reserving()
    rig.queue.down = BackendUnavailable("redis unavailable")
    code, _, doc = rig.call("POST", JOBS, {"payload": 1})
    assert (code, doc["code"]) == (503, "UNAVAILABLE") and rig.log.records == []


def test_a_schedules_firing_reserves_its_queue() -> None:
    rig, directory = reserving(max_queues=1)
    rig.now_ms = 1_799_982_000_000
    schedule = schedules.Schedule.create("nightly", "cron(0 3 * * ? *)", "reports", {"r": 1}, 0)
    api_schedules.fire(rig.api, schedule, 1_799_982_000_000)
    assert directory.items == ["reports"]
    other = schedules.Schedule.create("nightly", "cron(0 3 * * ? *)", "another", {"r": 1}, 0)
    with pytest.raises(QueueNotAllowed):
        api_schedules.fire(rig.api, other, 1_799_982_000_000)
    assert [r.queue for r in rig.log.records] == ["reports"]


def test_a_familys_children_and_its_continuation_reserve_their_queues_before_anything_is_written() -> None:
    """The continuation is released later, but its id is answered now: its queue is reserved now."""
    rig, directory = reserving(max_queues=2)
    parent = ids.mint(rig.now_ms, "emails", KEY)
    request = FamilyRequest(parent_id=parent, token=1, jobs=[ChildRequest(queue="kids", key="a", payload=1)],
                            then=ThenRequest(queue="after", payload=2))
    with contextlib.suppress(Exception):  # the fake store keeps no families: the reservations came first
        rig.api.enqueue_children(request)
    assert directory.items == ["kids", "after"]
    refused = FamilyRequest(parent_id=parent, token=1, jobs=[ChildRequest(queue="kids", key="b", payload=1)],
                            then=ThenRequest(queue="third", payload=2))
    with pytest.raises(QueueNotAllowed):
        rig.api.enqueue_children(refused)
    assert rig.log.records == [] and directory.items == ["kids", "after"]


def test_a_flood_of_random_names_does_not_grow_a_containers_memory() -> None:
    class Cache:
        def register(self, queue: str) -> bool:
            return True

    reservations = Reservations(Cache())
    for i in range(MAX_KNOWN + 10):
        reservations.reserve(f"q{i}")
    assert len(reservations._known) <= MAX_KNOWN
    assert reservations.parked() is None  # no durable registry: Redis's is all there is


def test_the_operator_lists_queues_from_the_durable_registry_too() -> None:
    from sluice.gateway.admin import Admin

    rig, directory = reserving()
    directory.items = ["survived-a-redis-loss"]
    rows: Any = Admin(rig.queue, rig.store, rig.log, registry=rig.api.pipeline.registry).all_queues()  # type: ignore[arg-type]
    listed = [r["queue"] for r in rows]
    assert "survived-a-redis-loss" in listed
    assert listed == sorted(set(rig.queue.queues()) | set(directory.items))


def test_the_operator_rows_show_each_queues_parked_records_from_the_registry() -> None:
    """One scan of the registry for the listing, one GetItem for a queue: the lot is not counted."""
    from sluice.gateway.admin import Admin

    rig, directory = reserving()
    directory.items = ["held", "flowing"]
    directory.parking = {"held": ParkedState(6_000, 1_700_000_000_000)}
    admin = Admin(rig.queue, rig.store, rig.log, registry=rig.api.pipeline.registry)  # type: ignore[arg-type]
    rows = {r["queue"]: r for r in admin.all_queues()}
    assert (rows["held"]["parked"], rows["held"]["parked_at_ms"]) == (6_000, 1_700_000_000_000)
    assert (rows["flowing"]["parked"], rows["flowing"]["parked_at_ms"]) == (0, 0)
    assert admin.queue_stats("held")["parked"] == 6_000
    view = rig.api.stats("held")  # GET /v1/queues/{queue}
    assert (view.parked, view.parked_at_ms) == (6_000, 1_700_000_000_000)


def test_a_durable_registry_that_cannot_be_read_to_load_the_cache_is_a_503() -> None:
    """After a Redis loss the reservation loads the cache from DynamoDB first: a failed Scan is as
    retryable as a failed write-through, and nothing is appended."""
    rig, _ = reserving(max_queues=1)

    def cold(queue: str) -> bool:
        raise StoreError("scan sluice-queues: ResourceNotFoundException")

    rig.queue.register = cold  # type: ignore[method-assign]
    code, _, doc = rig.call("POST", JOBS, {"payload": 1})
    assert (code, doc["code"]) == (503, "UNAVAILABLE") and rig.log.records == []


def test_the_root_loads_a_lost_cache_from_the_table_and_writes_the_relays_new_queues_through(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from sluice.core.bus import QueueRegistered
    from sluice.core.config import Settings
    from sluice.entry import root

    directory = Directory()
    directory.items = ["known"]
    monkeypatch.setattr(root, "queue_directory", lambda s=None: directory)
    conn, bus = SimpleNamespace(registry_source=None), EventBus()
    root.durable_registry(conn, bus, Settings(queues_table="queues"))  # type: ignore[arg-type]
    root.durable_registry(conn, bus, Settings(queues_table="queues"))  # type: ignore[arg-type]  # once per bus
    bus.emit(QueueRegistered(queue="from-the-relay"))
    assert directory.items == ["known", "from-the-relay"]
    assert list(conn.registry_source()) == ["from-the-relay", "known"]
    bare = SimpleNamespace(registry_source=None)
    root.durable_registry(bare, EventBus(), Settings())  # type: ignore[arg-type]  # no table: Redis only
    assert bare.registry_source is None


def test_a_queues_sensitive_fields_are_kept_durably_and_survive_a_redis_loss() -> None:
    """Issue 32's review: the setting is written to the durable registry first, then to the config
    hash; the listing redacts the union, so a Redis loss (the config hash gone, the jobs replayed)
    cannot show a field an operator hid, and a failed durable write changes nothing."""
    from sluice.gateway.admin import Admin

    rig, directory = reserving()
    admin = Admin(rig.queue, rig.store, rig.log, registry=rig.api.pipeline.registry)  # type: ignore[arg-type]
    rig.queue.add("emails", "job-1", {"to": "a@b", "body": "hi"})
    assert admin.set_sensitive("emails", ["to"]).sensitive == ("/to",)
    assert directory.sensitive == {"emails": ("/to",)} and "emails" in directory.items
    rig.queue.configs.clear()  # Redis lost its data; the relay replays the job
    [job] = admin.list_jobs("emails", "ready", prefix="job-1").jobs
    assert job.payload == {"to": "[redacted]", "body": "hi"} and job.redacted == ["to"]
    directory.fail = StoreError("DynamoDB is down")
    with pytest.raises(StoreError):
        admin.set_sensitive("emails", [])
    assert rig.queue.get_config("emails").sensitive == () and directory.sensitive["emails"] == ("/to",)
    assert admin.list_jobs("emails", "ready", prefix="job-1").jobs[0].payload["to"] == "[redacted]"
