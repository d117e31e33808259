"""Per-queue CloudWatch metrics (issue 17): which EMF lines, with which ``Queue`` dimension, how
often, and the bound on the queues that get them."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from sluice.backends.aws.queue_metrics import (
    ALL_METRICS,
    DEPTH_METRICS,
    MAX_VALUES,
    QueueBound,
    QueueDepthMetrics,
    QueueWorkMetrics,
    emf_line,
)
from sluice.core import bus as ev
from sluice.core.config import Settings
from sluice.core.models import QueueConfig, QueueStats
from sluice.entry import root as wiring
from sluice.relay.config import RelayConfig
from sluice.relay.queues import QueueStates


def parse(line: str) -> dict[str, Any]:
    """An EMF line, checked the way CloudWatch reads it: every declared metric has its value."""
    body: dict[str, Any] = json.loads(line)
    (directive,) = body["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == "Sluice"
    assert directive["Dimensions"] == [["Queue"]]
    assert isinstance(body["_aws"]["Timestamp"], int)
    for metric in directive["Metrics"]:
        assert metric["Name"] in body, metric
    body["units"] = {m["Name"]: m["Unit"] for m in directive["Metrics"]}
    return body


def measured(queue: str, at: float, *, ready: int = 0, relayed: int = 0,
             oldest_ms: int | None = None) -> ev.QueueMeasured:
    stats = QueueStats(queue=queue, ready=ready, delayed=2, leased=3, dead=4, oldest_ready_age_ms=oldest_ms)
    return ev.QueueMeasured(at=at, stats=stats, relayed=relayed)


def test_emf_line_declares_each_metric_under_the_queue_dimension() -> None:
    metrics: list[tuple[str, str, float | list[float]]] = [
        ("QueueReady", "Count", 5), ("QueueWaitTime", "Milliseconds", [1.0, 2.0])]
    body = parse(emf_line("thumbs", metrics, at_s=1_700_000_000.5))
    assert body["Queue"] == "thumbs" and body["QueueReady"] == 5 and body["QueueWaitTime"] == [1.0, 2.0]
    assert body["_aws"]["Timestamp"] == 1_700_000_000_500
    assert body["units"] == {"QueueReady": "Count", "QueueWaitTime": "Milliseconds"}


def test_depths_once_a_minute_per_queue_with_the_relayed_sum() -> None:
    lines: list[str] = []
    obs = QueueDepthMetrics(QueueBound(cap=50), lines.append)
    obs(measured("a", 1000.0, ready=7, relayed=3, oldest_ms=12_500))  # the first measure publishes
    obs(measured("a", 1001.0, ready=8, relayed=4))
    obs(measured("a", 1030.0, ready=9, relayed=5))
    assert len(lines) == 1
    first = parse(lines[0])
    assert first["Queue"] == "a"
    depths = (first["QueueReady"], first["QueueDelayed"], first["QueueInFlight"], first["QueueDead"])
    assert depths == (7, 2, 3, 4)
    assert first["QueueOldestReadyAge"] == 12.5 and first["units"]["QueueOldestReadyAge"] == "Seconds"
    assert first["QueueJobsRelayed"] == 3
    assert set(first["units"]) == set(DEPTH_METRICS)
    obs(measured("a", 1060.0, ready=10, relayed=6))  # a minute after the last line
    assert len(lines) == 2
    second = parse(lines[1])
    assert second["QueueReady"] == 10 and second["QueueJobsRelayed"] == 4 + 5 + 6
    assert second["QueueOldestReadyAge"] == 0  # nothing ready: 0, so the age alarm still has data
    assert second["_aws"]["Timestamp"] == 1_060_000


def test_flush_publishes_what_was_measured_since_the_last_line_and_nothing_twice() -> None:
    lines: list[str] = []
    obs = QueueDepthMetrics(QueueBound(cap=50), lines.append)
    obs(measured("a", 1000.0, relayed=1))
    obs(measured("b", 1000.0, relayed=2))
    obs(measured("a", 1010.0, ready=3, relayed=5))
    obs.flush()
    relayed = [(parse(x)["Queue"], parse(x)["QueueJobsRelayed"]) for x in lines]
    assert relayed == [("a", 1), ("b", 2), ("a", 5)]
    obs.flush()
    assert len(lines) == 3


def test_other_events_are_ignored() -> None:
    lines: list[str] = []
    obs = QueueDepthMetrics(QueueBound(cap=50), lines.append)
    obs(ev.QueueHeld(queue="a", gate="dead_cap", held=True, depth=1))
    obs(ev.LagMeasured(lag=5))
    obs.flush()
    assert lines == []


def test_the_bound_caps_the_queues_at_the_first_seen() -> None:
    lines: list[str] = []
    obs = QueueDepthMetrics(QueueBound(cap=2), lines.append)
    for q in ("a", "b", "c", "a", "d"):
        obs(measured(q, 1000.0))
    obs(measured("c", 2000.0))
    assert sorted({parse(x)["Queue"] for x in lines}) == ["a", "b"]


def test_the_bound_with_names_admits_only_those_and_still_caps() -> None:
    bound = QueueBound(["x", "y", "z"], cap=2)
    assert [bound.admits(q) for q in ("a", "x", "z", "y", "x")] == [False, True, True, False, True]
    assert not QueueBound(cap=0).admits("a")


def test_the_bound_from_settings_names_then_allow_list_then_any() -> None:
    assert QueueBound.from_settings(Settings(metrics_queues="a, b")).names == {"a", "b"}
    s = Settings(queue_allow_list="c,d", metrics_queue_cap=7)
    bound = QueueBound.from_settings(s)
    assert bound.names == {"c", "d"} and bound.cap == 7
    assert QueueBound.from_settings(Settings(metrics_queues="a", queue_allow_list="c")).names == {"a"}
    default = QueueBound.from_settings(Settings())
    assert default.names is None and default.cap == 50


def started(queue: str, wait: int | None, at: float = 1000.0) -> ev.HandlerStarted:
    return ev.HandlerStarted(at=at, job="j", queue=queue, token=1, attempt=1, queue_wait_ms=wait)


def finished(queue: str, outcome: str) -> ev.Finished:
    return ev.Finished(job="j", queue=queue, lease=1, attempt=1, outcome=outcome)


def test_work_publishes_waits_and_endings_per_queue_at_flush() -> None:
    lines: list[str] = []
    obs = QueueWorkMetrics(QueueBound(cap=50), lines.append)
    for wait in (10, 20, 30):
        obs(started("a", wait))
    obs(started("a", None))  # no enqueue time: no wait value
    obs(started("b", 5))
    for outcome in ("succeeded", "succeeded", "failed", "dead", "retried", "released", "lease_lost"):
        obs(finished("a", outcome))
    assert lines == []
    obs.flush()
    by_queue = {parse(x)["Queue"]: parse(x) for x in lines}
    a, b = by_queue["a"], by_queue["b"]
    assert a["QueueWaitTime"] == [10.0, 20.0, 30.0] and a["units"]["QueueWaitTime"] == "Milliseconds"
    assert (a["QueueJobsSucceeded"], a["QueueJobsFailed"], a["QueueJobsDead"]) == (2, 1, 1)
    assert b["QueueWaitTime"] == [5.0] and "QueueJobsSucceeded" not in b  # no zero counts declared
    obs.flush()
    assert len(lines) == 2  # nothing twice


def test_work_flushes_a_queue_at_the_emf_values_limit() -> None:
    lines: list[str] = []
    obs = QueueWorkMetrics(QueueBound(cap=50), lines.append)
    for i in range(MAX_VALUES + 1):
        obs(started("a", i))
    assert len(lines) == 1 and parse(lines[0])["QueueWaitTime"] == [float(i) for i in range(MAX_VALUES)]
    obs.flush()
    assert parse(lines[1])["QueueWaitTime"] == [float(MAX_VALUES)]


def test_work_respects_the_bound() -> None:
    lines: list[str] = []
    obs = QueueWorkMetrics(QueueBound(["a"], cap=50), lines.append)
    obs(started("b", 5))
    obs(finished("b", "succeeded"))
    obs(started("a", 5))
    obs.flush()
    assert [parse(x)["Queue"] for x in lines] == ["a"]


def test_eleven_custom_metrics_a_queue() -> None:
    # docs/cost.md counts $0.30 x 11 a queue a month; a new metric must be counted there too.
    assert len(ALL_METRICS) == len(set(ALL_METRICS)) == 11


class Engine:
    def stats(self, queue: str) -> QueueStats:
        return QueueStats(queue=queue, ready=5, delayed=1, leased=2, dead=3, oldest_ready_age_ms=4_000,
                          config=QueueConfig())

    def set_config(self, queue: str, **changes: Any) -> QueueConfig:
        return QueueConfig(**changes)


def test_the_relays_refresh_emits_what_it_read_and_what_it_pushed_since() -> None:
    bus = ev.EventBus()
    seen: list[ev.QueueMeasured] = []
    bus.subscribe(seen.append, ev.QueueMeasured)
    assert not bus.listening  # an incident: no hot-path event is built for it
    q = QueueStates(Engine(), RelayConfig(refresh_s=1.0), events=bus)  # type: ignore[arg-type]
    q.get("q", now=0.0).pushed_since_refresh += 6
    q.get("q", now=0.5)  # within refresh_s: no read
    q.get("q", now=1.0)
    got = [(e.queue, e.stats.ready, e.stats.delayed, e.stats.leased, e.stats.dead,
            e.stats.oldest_ready_age_ms, e.relayed) for e in seen]
    assert got == [("q", 5, 1, 2, 3, 4_000, 0), ("q", 5, 1, 2, 3, 4_000, 6)]


def emf_lines(out: str) -> list[dict[str, Any]]:
    return [parse(x) for x in out.splitlines() if x.startswith("{") and '"Queue":' in x]


def test_the_worker_lambda_publishes_its_queues_wait_and_endings_after_the_drain(
        capsys: pytest.CaptureFixture[str], event_json: Callable[[str], dict[str, Any]]) -> None:
    from sluice.entry.worker import handle_dispatch
    from sluice_dev.fakes import FakeLambdaContext, FakeQueue, FakeStore
    from tests.unit import test_worker_lambda as w

    queue, store = FakeQueue(), FakeStore()
    settings = Settings(handlers_module=w.__name__, lambda_margin_ms=500, default_lease_seconds=2)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(wiring, "queue", lambda s=None: queue)
        mp.setattr(wiring, "store", lambda s=None: store)
        mp.setattr(wiring, "timelines", lambda s=None, bus=None: None)  # no Redis here (issue 32's recorder)
        for i in range(3):
            queue.add("thumbnails", f"img-{i}", f"cat{i}", enqueued_at_ms=int(ev.wall() * 1000) - 5_000)
        capsys.readouterr()
        out = handle_dispatch(event_json("worker_dispatch.json"), FakeLambdaContext(30_000), settings)
    assert out["succeeded"] == 3
    (line,) = [x for x in emf_lines(capsys.readouterr().out) if x["Queue"] == "thumbnails"]
    assert line["QueueJobsSucceeded"] == 3 and len(line["QueueWaitTime"]) == 3
    assert all(5_000 <= v < 60_000 for v in line["QueueWaitTime"])


def test_the_relay_lambda_publishes_each_queues_depths(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        event_json: Callable[[str], dict[str, Any]]) -> None:
    from sluice.entry import relay as relay_entry

    bus = ev.EventBus()

    class Relay:
        events = bus
        relay_id = "r"

        def run_for_lambda(self, remaining_ms: int, stop_before_ms: int) -> Any:
            bus.emit(measured("orders", ev.wall(), ready=4, relayed=2, oldest_ms=90_000))
            return control_report

    class Report:
        def publish(self, metrics: Any) -> None:
            pass

        def as_dict(self) -> dict[str, Any]:
            return {}

    control_report = Report()
    monkeypatch.setattr(wiring, "settings", lambda: Settings())
    monkeypatch.setattr(relay_entry, "scheduled_relay", lambda s, c, metrics=None: (Relay(), None))
    capsys.readouterr()
    relay_entry.run_scheduled(event_json("scheduled_relay.json"), FakeCtx())
    (line,) = emf_lines(capsys.readouterr().out)
    assert (line["Queue"], line["QueueReady"], line["QueueJobsRelayed"], line["QueueOldestReadyAge"]) == (
        "orders", 4, 2, 90.0)
    assert bus.listening is False  # detached at the end of the run


class FakeCtx:
    aws_request_id = "req"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000
