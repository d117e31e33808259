"""The schedule routes and the Scheduler entry, over fakes (issue 17, Schedules and hostile input)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from sluice import schedules
from sluice.api import Api
from sluice.api_schedules import Schedules
from sluice.errors import ConfigError, ScheduleExists, ScheduleNotFound
from sluice.http.app import Gateway
from sluice.routes import Route
from tests.unit.test_gateway_fakes import LambdaContext, Rig
from tests.unit.test_gateway_routes import routed_rig

AT_ISO, AT = "2027-01-01T03:00:00Z", 1_798_772_400_000


class FakeScheduleStore:
    def __init__(self) -> None:
        self.items: dict[str, schedules.Schedule] = {}
        self.writes = 0

    def create(self, schedule: schedules.Schedule) -> None:
        if schedule.name in self.items:
            raise ScheduleExists(f"schedule {schedule.name!r} exists")
        self.writes += 1
        self.items[schedule.name] = schedule

    def get(self, name: str) -> schedules.Schedule:
        if name not in self.items:
            raise ScheduleNotFound(f"no schedule {name!r}")
        return self.items[name]

    def all(self) -> list[schedules.Schedule]:
        return list(self.items.values())

    def set_paused(self, name: str, paused: bool) -> schedules.Schedule:
        self.writes += 1
        self.items[name] = dataclasses.replace(self.get(name), paused=paused)
        return self.items[name]

    def delete(self, name: str) -> None:
        self.get(name)
        self.writes += 1
        del self.items[name]


class FakeTrigger:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.fail: Exception | None = None

    def create(self, schedule: schedules.Schedule) -> None:
        if self.fail is not None:
            raise self.fail
        self.calls.append(("create", schedule.name))

    def set_paused(self, schedule: schedules.Schedule) -> None:
        self.calls.append(("pause" if schedule.paused else "resume", schedule.name))

    def delete(self, name: str) -> None:
        self.calls.append(("delete", name))


class World(Rig):
    def __init__(self) -> None:
        super().__init__()
        self.store_s, self.trigger = FakeScheduleStore(), FakeTrigger()
        self.gateway = Gateway(self.api, schedules=lambda api: Schedules(api, self.store_s, self.trigger))

    def fire(self, name: str, when: str = AT_ISO) -> dict[str, Any]:
        return self.gateway({"sluice_schedule": name, "scheduled_time": when}, LambdaContext())


NIGHTLY = {"name": "nightly", "expression": "cron(0 3 * * ? *)", "queue": "reports", "payload": {"r": 1}}


@pytest.fixture
def w() -> World:
    return World()


def test_create_get_list_pause_resume_delete(w: World) -> None:
    status, headers, body = w.call("POST", "/v1/schedules", NIGHTLY)
    assert status == 201 and headers["location"] == "/v1/schedules/nightly"
    assert body["paused"] is False and body["created_at_ms"] == w.now_ms
    assert body["next_firing_ms"] == schedules.next_after(schedules.parse(NIGHTLY["expression"]), w.now_ms, 0)
    assert w.call("GET", "/v1/schedules/nightly")[2] == body
    assert [s["name"] for s in w.call("GET", "/v1/schedules")[2]["schedules"]] == ["nightly"]
    status, _, paused = w.call("POST", "/v1/schedules/nightly/pause")
    assert status == 200 and paused["paused"] is True and paused["next_firing_ms"] is None
    assert w.call("POST", "/v1/schedules/nightly/resume")[2]["paused"] is False
    assert w.call("DELETE", "/v1/schedules/nightly")[0] == 204
    assert w.call("GET", "/v1/schedules/nightly")[0] == 404
    assert w.trigger.calls == [("create", "nightly"), ("pause", "nightly"), ("resume", "nightly"),
                               ("delete", "nightly")]


def test_a_name_taken_is_409_and_a_missing_one_404(w: World) -> None:
    w.call("POST", "/v1/schedules", NIGHTLY)
    status, _, body = w.call("POST", "/v1/schedules", {**NIGHTLY, "expression": "rate(1 hour)"})
    assert (status, body["code"]) == (409, "SCHEDULE_EXISTS")
    assert w.store_s.items["nightly"].expression == NIGHTLY["expression"]
    for method, path in [("GET", "/v1/schedules/none"), ("DELETE", "/v1/schedules/none"),
                         ("POST", "/v1/schedules/none/pause")]:
        status, _, body = w.call(method, path)
        assert (status, body["code"]) == (404, "SCHEDULE_NOT_FOUND"), path


@pytest.mark.parametrize(("change", "status", "code"), [
    ({"expression": "cron(0 3 * * *)"}, 400, "INVALID_SCHEDULE"),
    ({"expression": "cron(61 * * * ? *)"}, 400, "INVALID_SCHEDULE"),
    ({"expression": "cron(0 0 30 2 ? *)"}, 400, "INVALID_SCHEDULE"),
    ({"expression": "every day"}, 400, "INVALID_SCHEDULE"),
    ({"expression": "rate(30 seconds)"}, 400, "SCHEDULE_TOO_FREQUENT"),
    ({"expression": "cron(0 0 L * ? *)"}, 400, "UNSUPPORTED_SCHEDULE"),
    ({"queue": "sluice-relay"}, 400, "RESERVED_QUEUE"),
    ({"queue": "bad queue"}, 400, "INVALID_QUEUE"),
    ({"name": "no/slash"}, 400, "INVALID_SCHEDULE"),
    ({"name": ""}, 400, "INVALID_SCHEDULE"),
    ({"payload": "x" * 300_000}, 413, "PAYLOAD_TOO_LARGE"),
])
def test_hostile_schedules_are_refused_with_the_exact_status_and_write_nothing(
        w: World, change: dict[str, Any], status: int, code: str) -> None:
    got, headers, body = w.call("POST", "/v1/schedules", {**NIGHTLY, **change})
    assert (got, body["code"]) == (status, code), body
    assert headers["content-type"] == "application/problem+json"
    assert w.store_s.items == {} and w.store_s.writes == 0 and w.trigger.calls == []


def test_a_malformed_body_is_refused_by_the_body_guard(w: World) -> None:
    status, _, body = w.call("POST", "/v1/schedules", raw='{"name": "a", "name": "b"}')
    assert status == 400 and body["status"] == 400
    status, _, body = w.call("POST", "/v1/schedules", {**NIGHTLY, "extra": 1})
    assert status == 400 and body["status"] == 400
    assert w.store_s.writes == 0


def test_an_unknown_queue_is_refused_as_the_enqueue_path_does() -> None:
    rig, _ = routed_rig([Route("billing", "sluice-worker-billing", "billing")])
    w = World()
    w.api = rig.api
    w.gateway = Gateway(rig.api, schedules=lambda api: Schedules(api, w.store_s, w.trigger))
    assert w.call("POST", "/v1/queues/reports/jobs", {"payload": 1})[0] == 404  # as an enqueue
    status, _, body = w.call("POST", "/v1/schedules", NIGHTLY)
    assert (status, body["code"]) == (404, "NO_ROUTE")
    assert w.store_s.writes == 0 and w.trigger.calls == []


def test_a_trigger_that_fails_leaves_no_item(w: World) -> None:
    w.trigger.fail = RuntimeError("scheduler down")
    assert w.call("POST", "/v1/schedules", NIGHTLY)[0] == 500
    assert w.store_s.items == {}


def test_the_scheduler_entry_enqueues_the_derived_job_once_per_firing(w: World) -> None:
    w.call("POST", "/v1/schedules", NIGHTLY)
    first, again = w.fire("nightly"), w.fire("nightly")
    assert first["statusCode"] == 202 and first == again
    assert [s.job_id for s in w.log.records] == [first["job_id"]] * 2  # the relay drops the repeat
    assert w.api.minted(first["job_id"]) is not None
    assert first["job_id"] == schedules.firing_id("nightly", "reports", AT, w.api.job_id_key)


def test_the_scheduler_entry_skips_a_paused_schedule_and_refuses_without_retry(w: World) -> None:
    w.call("POST", "/v1/schedules", NIGHTLY)
    w.call("POST", "/v1/schedules/nightly/pause")
    assert w.fire("nightly") == {"statusCode": 200, "skipped": "paused"}
    assert w.fire("gone")["statusCode"] == 404
    assert w.fire("nightly", "<aws.scheduler.scheduled-time>")["statusCode"] == 400
    assert w.fire("nightly", "yesterday")["statusCode"] == 400
    assert w.log.records == []


def test_without_a_schedule_store_there_are_no_schedule_routes() -> None:
    rig = Rig()
    status, _, body = rig.call("GET", "/v1/schedules")
    assert status == 404 and body["code"] == "NOT_FOUND"
    assert "/v1/schedules" not in rig.call("GET", "/v1/openapi.json")[2]["paths"]
    with pytest.raises(ConfigError):
        rig.gateway({"sluice_schedule": "nightly", "scheduled_time": AT_ISO}, LambdaContext())


def test_the_openapi_document_lists_the_schedule_routes(w: World) -> None:
    doc = w.call("GET", "/v1/openapi.json")[2]
    assert {"/v1/schedules", "/v1/schedules/{name}", "/v1/schedules/{name}/pause",
            "/v1/schedules/{name}/resume"} <= set(doc["paths"])
    assert isinstance(w.api, Api)
