"""The schedule routes and the Scheduler entry, over fakes (issue 17, Schedules and hostile input)."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from sluice.core import schedules
from sluice.core.errors import ConfigError, InvalidSchedule
from sluice.core.routes import Route
from sluice.entry.gateway import Gateway
from sluice.entry.gateway_scheduler import scheduled_ms
from sluice.gateway.api import Api
from sluice.gateway.schedules import Schedules
from sluice_dev.fakes import FakeScheduleStore, FakeTrigger
from tests.unit.test_gateway_fakes import LambdaContext, Rig
from tests.unit.test_gateway_routes import routed_rig

AT_ISO, AT = "2027-01-01T03:00:00Z", 1_798_772_400_000


class World(Rig):
    def __init__(self, api: Api | None = None) -> None:
        """``api``: another rig's (a routed one), in place of this rig's own."""
        super().__init__()
        self.api = self.api if api is None else api
        # The fixtures' caller is the operator here: an empty list names nobody (issue 27, item 3).
        self.api.operators = (FIXTURE_ROLE,)
        self.store_s, self.trigger = FakeScheduleStore(), FakeTrigger()
        self.gateway = Gateway(self.api, schedules=lambda api: Schedules(api, self.store_s, self.trigger))

    def fire(self, name: str, when: str = AT_ISO, queue: str = "reports") -> dict[str, Any]:
        event = {"sluice_schedule": name, "queue": queue, "scheduled_time": when}
        with contextlib.suppress(InvalidSchedule):  # Scheduler delivers a firing at its time (issue 27)
            self.now_ms = scheduled_ms(when)
        return self.gateway(event, LambdaContext())


NIGHTLY = {"name": "nightly", "expression": "cron(0 3 * * ? *)", "payload": {"r": 1}}
BASE = "/v1/admin/queues/reports/schedules"
OPERATOR = "arn:aws:iam::123456789012:role/operator"
FIXTURE_ROLE = "arn:aws:iam::123456789012:role/web-servers"  # the role of tests/events' userArn


@pytest.fixture
def w() -> World:
    return World()


def test_create_get_list_pause_resume_delete(w: World) -> None:
    status, headers, body = w.call("POST", BASE, NIGHTLY)
    assert status == 201 and headers["location"] == f"/live{BASE}/nightly"  # under the caller's stage
    assert body["paused"] is False and body["created_at_ms"] == w.now_ms
    assert body["next_firing_ms"] == schedules.next_after(schedules.parse(NIGHTLY["expression"]), w.now_ms, 0)
    assert w.call("GET", BASE + "/nightly")[2] == body
    assert [s["name"] for s in w.call("GET", BASE)[2]["schedules"]] == ["nightly"]
    status, _, paused = w.call("POST", BASE + "/nightly/pause")
    assert status == 200 and paused["paused"] is True and paused["next_firing_ms"] is None
    assert w.call("POST", BASE + "/nightly/resume")[2]["paused"] is False
    assert w.call("DELETE", BASE + "/nightly")[0] == 204
    assert w.call("GET", BASE + "/nightly")[0] == 404
    assert w.trigger.calls == [("create", "nightly"), ("pause", "nightly"), ("resume", "nightly"),
                               ("delete", "nightly")]


def test_a_name_taken_is_409_and_a_missing_one_404(w: World) -> None:
    w.call("POST", BASE, NIGHTLY)
    status, _, body = w.call("POST", BASE, {**NIGHTLY, "expression": "rate(1 hour)"})
    assert (status, body["code"]) == (409, "SCHEDULE_EXISTS")
    assert w.store_s.items["reports", "nightly"].expression == NIGHTLY["expression"]
    for method, path in [("GET", BASE + "/none"), ("DELETE", BASE + "/none"),
                         ("POST", BASE + "/none/pause")]:
        status, _, body = w.call(method, path)
        assert (status, body["code"]) == (404, "SCHEDULE_NOT_FOUND"), path


@pytest.mark.parametrize(("change", "status", "code"), [
    ({"expression": "cron(0 3 * * *)"}, 400, "INVALID_SCHEDULE"),
    ({"expression": "cron(61 * * * ? *)"}, 400, "INVALID_SCHEDULE"),
    ({"expression": "cron(0 0 30 2 ? *)"}, 400, "INVALID_SCHEDULE"),
    ({"expression": "every day"}, 400, "INVALID_SCHEDULE"),
    ({"expression": "rate(30 seconds)"}, 400, "SCHEDULE_TOO_FREQUENT"),
    ({"expression": "cron(0 0 L * ? *)"}, 400, "UNSUPPORTED_SCHEDULE"),
    ({"name": "no/slash"}, 400, "INVALID_SCHEDULE"),
    ({"name": ""}, 400, "INVALID_SCHEDULE"),
    ({"payload": "x" * 300_000}, 413, "PAYLOAD_TOO_LARGE"),
])
def test_hostile_schedules_are_refused_with_the_exact_status_and_write_nothing(
        w: World, change: dict[str, Any], status: int, code: str) -> None:
    got, headers, body = w.call("POST", BASE, {**NIGHTLY, **change})
    assert (got, body["code"]) == (status, code), body
    assert headers["content-type"] == "application/problem+json"
    assert w.store_s.items == {} and w.store_s.writes == 0 and w.trigger.calls == []


def test_a_malformed_body_is_refused_by_the_body_guard(w: World) -> None:
    status, _, body = w.call("POST", BASE, raw='{"name": "a", "name": "b"}')
    assert status == 400 and body["status"] == 400
    status, _, body = w.call("POST", BASE, {**NIGHTLY, "extra": 1})
    assert status == 400 and body["status"] == 400
    assert w.store_s.writes == 0


def test_an_unknown_queue_is_refused_as_the_enqueue_path_does() -> None:
    w = World(routed_rig([Route("billing", "sluice-worker-billing", "billing")])[0].api)
    assert w.call("POST", "/v1/queues/reports/jobs", {"payload": 1})[0] == 404  # as an enqueue
    status, _, body = w.call("POST", BASE, NIGHTLY)
    assert (status, body["code"]) == (404, "NO_ROUTE")
    assert body["detail"].endswith("; nothing was written"), body  # a schedule, not an enqueue
    assert w.store_s.writes == 0 and w.trigger.calls == []


def test_a_payload_its_typed_queue_refuses_is_400_and_says_nothing_was_written() -> None:
    schema = {"type": "object", "properties": {"r": {"type": "integer"}}, "additionalProperties": False}
    w = World(routed_rig([Route("reports", "sluice-worker-reports", "reports", {"reports": schema})])[0].api)
    status, _, body = w.call("POST", BASE, {**NIGHTLY, "payload": {"nope": 1}})
    assert (status, body["code"]) == (400, "PAYLOAD_INVALID"), body
    assert body["detail"].endswith("; nothing was written"), body
    assert w.store_s.writes == 0 and w.trigger.calls == []
    assert w.call("POST", BASE, NIGHTLY)[0] == 201  # the schema's own payload is taken


def test_a_trigger_that_fails_leaves_no_item(w: World) -> None:
    w.trigger.fail = RuntimeError("scheduler down")
    assert w.call("POST", BASE, NIGHTLY)[0] == 500
    assert w.store_s.items == {}


def test_the_scheduler_entry_enqueues_the_derived_job_once_per_firing(w: World) -> None:
    w.call("POST", BASE, NIGHTLY)
    first, again = w.fire("nightly"), w.fire("nightly")
    assert first["statusCode"] == 202 and first == again
    assert [s.job_id for s in w.log.records] == [first["job_id"]] * 2  # the relay drops the repeat
    # keyless (issue 27): not "minted" by itself; GET finds it once the relay recorded it
    assert w.api.minted(first["job_id"]) is None
    assert first["job_id"] == schedules.firing_id("nightly", "reports", AT)


def test_the_scheduler_entry_skips_a_paused_schedule_and_refuses_without_retry(w: World) -> None:
    w.call("POST", BASE, NIGHTLY)
    w.call("POST", BASE + "/nightly/pause")
    assert w.fire("nightly") == {"statusCode": 200, "skipped": "paused"}
    assert w.fire("gone")["statusCode"] == 404
    assert w.fire("nightly", "<aws.scheduler.scheduled-time>")["statusCode"] == 400
    assert w.fire("nightly", "yesterday")["statusCode"] == 400
    assert w.log.records == []


def test_without_a_schedule_store_there_are_no_schedule_routes() -> None:
    rig = Rig()
    rig.api.operators = (FIXTURE_ROLE,)
    status, _, body = rig.call("GET", BASE)
    assert status == 404 and body["code"] == "NOT_FOUND"
    assert BASE not in rig.call("GET", "/v1/openapi.json")[2]["paths"]
    with pytest.raises(ConfigError):
        rig.gateway({"sluice_schedule": "nightly", "scheduled_time": AT_ISO}, LambdaContext())


def test_the_openapi_document_lists_the_schedule_routes(w: World) -> None:
    doc = w.call("GET", "/v1/openapi.json")[2]
    base = "/v1/admin/queues/{queue}/schedules"
    assert {base, base + "/{name}", base + "/{name}/pause", base + "/{name}/resume"} <= set(doc["paths"])
    assert not any(p.startswith("/v1/schedules") for p in doc["paths"])
    assert doc["paths"][base]["post"]["parameters"][0]["name"] == "queue"
    assert isinstance(w.api, Api)


@pytest.mark.parametrize(("queue", "code"), [("sluice-relay", "RESERVED_QUEUE"), ("Bad", "INVALID_INPUT"),
                                              ("a" * 65, "INVALID_INPUT")])  # the path pattern
def test_a_bad_queue_in_the_path_is_400_on_every_schedule_route_and_writes_nothing(
        w: World, queue: str, code: str) -> None:
    base = f"/v1/admin/queues/{queue}/schedules"
    for method, path, body in [("POST", base, NIGHTLY), ("GET", base, None),
                               ("GET", f"{base}/nightly", None), ("POST", f"{base}/nightly/pause", None),
                               ("DELETE", f"{base}/nightly", None)]:
        status, _, got = w.call(method, path, body)
        assert (status, got["code"]) == (400, code), (method, path, got)
    assert w.store_s.writes == 0 and w.trigger.calls == []


def test_a_caller_who_is_not_an_operator_is_refused_403_on_every_schedule_route(w: World) -> None:
    assert w.call("POST", BASE, NIGHTLY)[0] == 201
    writes, calls = w.store_s.writes, list(w.trigger.calls)
    w.api.operators = (OPERATOR,)  # the fixtures' caller (web-servers) is a plain enqueue caller
    for method, path, body in [("POST", BASE, {**NIGHTLY, "name": "other"}), ("GET", BASE, None),
                               ("GET", f"{BASE}/nightly", None), ("POST", f"{BASE}/nightly/pause", None),
                               ("POST", f"{BASE}/nightly/resume", None), ("DELETE", f"{BASE}/nightly", None)]:
        status, _, got = w.call(method, path, body)
        assert (status, got["code"]) == (403, "NOT_OPERATOR"), (method, path)
    assert w.store_s.writes == writes and w.trigger.calls == calls
    assert list(w.store_s.items) == [("reports", "nightly")]


def test_a_schedule_name_is_its_queues_another_queue_cannot_reach_it(w: World) -> None:
    assert w.call("POST", BASE, NIGHTLY)[0] == 201
    writes = w.store_s.writes
    other = "/v1/admin/queues/emails/schedules"
    for method, path in [("GET", f"{other}/nightly"), ("POST", f"{other}/nightly/pause"),
                         ("POST", f"{other}/nightly/resume"), ("DELETE", f"{other}/nightly")]:
        status, _, got = w.call(method, path)
        assert (status, got["code"]) == (404, "SCHEDULE_NOT_FOUND"), (method, path)
    assert w.call("GET", other)[2] == {"schedules": []}
    assert w.store_s.writes == writes and w.store_s.items["reports", "nightly"].paused is False
    status, _, body = w.call("POST", other, {**NIGHTLY, "payload": {"e": 1}})  # the same name, its own
    assert status == 201 and body["queue"] == "emails"
    assert w.store_s.items["reports", "nightly"].payload == {"r": 1}
    assert w.fire("nightly", queue="emails")["job_id"] != w.fire("nightly")["job_id"]
    assert [r.queue for r in w.log.records] == ["emails", "reports"]


def test_an_unrouted_queue_is_404_on_reads_too() -> None:
    w = World(routed_rig([Route("billing", "sluice-worker-billing", "billing")])[0].api)
    for method, path, then in [("GET", BASE, "(sluice routes list)"),
                               ("GET", f"{BASE}/nightly", "(sluice routes list)"),
                               ("POST", f"{BASE}/nightly/pause", "; nothing was changed"),
                               ("DELETE", f"{BASE}/nightly", "; nothing was changed")]:
        status, _, body = w.call(method, path)
        assert (status, body["code"]) == (404, "NO_ROUTE"), path
        assert body["detail"].endswith(then), body


def test_a_firing_without_its_queue_is_refused(w: World) -> None:
    w.call("POST", BASE, NIGHTLY)
    event = {"sluice_schedule": "nightly", "scheduled_time": AT_ISO}
    assert w.gateway(event, LambdaContext())["statusCode"] == 400
    assert w.log.records == []


def test_a_firing_refused_with_429_raises_so_scheduler_retries_it_and_a_later_delivery_is_the_job() -> None:
    """Issue 29: a firing the queue refuses for now (429: at its dead cap, held) was answered, so
    Scheduler took it as delivered and the firing was lost. It raises now: Scheduler retries it (for
    a day, then the firings dead-letter queue), and the retry that finds room enqueues the firing's job."""
    from sluice.core.bus import EventBus
    from sluice.core.errors import QueueFull
    from sluice.core.limits import Limits
    from sluice.core.models import QueueConfig
    from sluice.gateway.admission import Admission
    from sluice.gateway.api import Backends, IdMinting, Intake
    from tests.unit.test_gateway_fakes import KEY

    w, view = World(), [100.0]
    admission = Admission(w.queue, Limits(max_dead=1_000), ttl_ms=2_000, clock=lambda: view[0])  # type: ignore[arg-type]
    w.api = Api(Backends(w.log, w.store, w.queue, events=EventBus()), IdMinting(KEY),  # type: ignore[arg-type]
                intake=Intake(admission=admission), idempotency=w.idem, clock=lambda: w.now_ms)
    w.api.operators = (FIXTURE_ROLE,)
    w.gateway = Gateway(w.api, schedules=lambda api: Schedules(api, w.store_s, w.trigger))
    w.queue.registered = {"reports"}
    w.call("POST", BASE, NIGHTLY)
    w.queue.configs["reports"] = QueueConfig(max_dead=10)
    w.queue.seed("reports", "dead", 10)
    with pytest.raises(QueueFull):
        w.fire("nightly")
    assert w.log.records == []
    w.queue.seed("reports", "dead", 0)  # the operator purged them; Scheduler's retry comes later
    view[0] += 2.0
    retried = w.fire("nightly")
    assert retried["statusCode"] == 202 and retried["job_id"] == schedules.firing_id("nightly", "reports", AT)
    assert [s.job_id for s in w.log.records] == [retried["job_id"]]
