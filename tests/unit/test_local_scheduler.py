"""``sluice dev``'s scheduler (issue 17): it fires the stored schedules as EventBridge Scheduler
would, into the gateway's Scheduler entry, on an injected clock (no real minute is waited)."""

from __future__ import annotations

from typing import Any

from sluice.core import schedules
from sluice_dev.local.scheduler import LocalScheduler
from tests.unit.test_gateway_fakes import LambdaContext
from tests.unit.test_gateway_schedules import BASE, World
from tests.unit.test_relay import World as RelayWorld
from tests.unit.test_relay import run_steps

EVERY_MINUTE = {"name": "minutely", "expression": "rate(1 minute)", "payload": {"tick": True}}


class Rigged:
    """A gateway over fakes with a schedule store, and a local scheduler on the same clock."""

    def __init__(self) -> None:
        self.w = World()
        self.answers: list[dict[str, Any]] = []
        self.fail = False

    def into_gateway(self, event: dict[str, Any]) -> None:
        if self.fail:
            raise ConnectionError("the local Lambda service is restarting")
        self.answers.append(self.w.gateway(event, LambdaContext()))

    def scheduler(self) -> LocalScheduler:
        store = self.w.store_s
        return LocalScheduler(lambda: [s for q in ("reports", "emails") for s in store.all(q)],
                              self.into_gateway, clock=lambda: self.w.now_ms)


def test_a_rate_1_minute_schedule_fires_each_minute_as_scheduler_would() -> None:
    r = Rigged()
    created = r.w.now_ms
    ticker = r.scheduler()
    assert r.w.call("POST", BASE, EVERY_MINUTE)[0] == 201
    r.w.now_ms = created + 59_999
    assert ticker.tick() == []
    r.w.now_ms = created + 60_000
    (event,) = ticker.tick()
    assert event == {"sluice_schedule": "minutely", "queue": "reports",
                     "scheduled_time": schedules.iso(created + 60_000)}
    assert ticker.tick() == []  # handled: not again within the minute
    job_id = schedules.firing_id("minutely", "reports", created + 60_000)
    assert r.answers == [{"statusCode": 202, "job_id": job_id}]
    assert [(s.job_id, s.payload) for s in r.w.log.records] == [(job_id, {"tick": True})]
    r.w.now_ms = created + 120_500  # the next minute: another firing, another job
    (second,) = ticker.tick()
    assert second["scheduled_time"] == schedules.iso(created + 120_000)
    assert len({s.job_id for s in r.w.log.records}) == 2


def test_a_double_firing_makes_one_job() -> None:
    r = Rigged()
    created = r.w.now_ms
    one, other = r.scheduler(), r.scheduler()  # two schedulers (or Scheduler and sluice dev) overlapping
    r.w.call("POST", BASE, EVERY_MINUTE)
    r.w.now_ms = created + 60_000
    assert one.tick() == other.tick() != []
    first, again = r.answers
    assert first == again and first["statusCode"] == 202
    assert [s.job_id for s in r.w.log.records] == [first["job_id"]] * 2

    relay = RelayWorld(partitions=1)
    for spec in r.w.log.records:
        relay.source.append_spec(0, spec)
    running = relay.relay(batch=10)
    run_steps(running, 5)
    running.stop()
    assert relay.in_redis("reports") == [first["job_id"]]  # the relay drops the repeat: one job
    assert len(relay.engine.enqueued) == 1


def test_a_paused_schedule_does_not_fire_and_resumes_without_the_missed_firings() -> None:
    r = Rigged()
    created = r.w.now_ms
    ticker = r.scheduler()
    r.w.call("POST", BASE, EVERY_MINUTE)
    r.w.call("POST", f"{BASE}/minutely/pause")
    r.w.now_ms = created + 300_000
    assert ticker.tick() == []
    r.w.call("POST", f"{BASE}/minutely/resume")
    assert ticker.tick() == []  # the five minutes it was paused are not sent
    r.w.now_ms = created + 360_000
    (event,) = ticker.tick()
    assert event["scheduled_time"] == schedules.iso(created + 360_000)


def test_after_a_stall_only_the_latest_firing_is_sent_and_a_failed_send_is_sent_again() -> None:
    r = Rigged()
    created = r.w.now_ms
    ticker = r.scheduler()
    r.w.call("POST", BASE, EVERY_MINUTE)
    r.w.now_ms = created + 600_000 + 30_000  # ten firings were due
    r.fail = True
    assert ticker.tick() == []
    r.fail = False
    (event,) = ticker.tick()  # retried on the next tick, the same scheduled time
    assert event["scheduled_time"] == schedules.iso(created + 600_000)
    assert len(r.w.log.records) == 1


def test_schedules_of_two_queues_with_one_name_fire_as_two_jobs() -> None:
    r = Rigged()
    created = r.w.now_ms
    ticker = r.scheduler()
    r.w.call("POST", BASE, EVERY_MINUTE)
    r.w.call("POST", "/v1/admin/queues/emails/schedules", EVERY_MINUTE)
    r.w.now_ms = created + 60_000
    assert sorted(e["queue"] for e in ticker.tick()) == ["emails", "reports"]
    assert len({s.job_id for s in r.w.log.records}) == 2


def test_a_source_that_cannot_be_read_fires_nothing_and_is_read_again() -> None:
    calls = []

    def broken() -> list[schedules.Schedule]:
        calls.append(1)
        raise OSError("moto is restarting")

    ticker = LocalScheduler(broken, lambda _e: None, clock=lambda: 0)
    assert ticker.tick() == [] and ticker.tick() == [] and len(calls) == 2
