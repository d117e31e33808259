"""The worker Lambda handler: real event shapes, a fake LambdaContext, adapters from wiring."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import sluice
from sluice.core.config import Settings
from sluice.core.errors import HandlerNotFound, InvalidInput
from sluice.core.models import Job
from sluice.entry import root as wiring
from sluice.entry.worker import load_app, parse_dispatch
from sluice.worker.runtime.context import JobContext
from sluice_dev.fakes import FakeLambdaContext, FakeQueue, FakeStore
from tests.loading import module_from_file

APP = Path(__file__).resolve().parents[2] / "functions" / "worker" / "app.py"

# The handlers module the Lambda loads in these tests (Settings.handlers_module).
app = sluice.Worker()
ran: list[tuple[str, int]] = []


@app.handler("thumbnails", timeout_s=1)
def thumbnails(job: Job, ctx: JobContext) -> dict[str, Any]:
    ran.append((job.job_id, ctx.token))
    return {"thumb": f"{job.payload}-small"}


@app.handler("emails", timeout_s=10)
def emails(job: Job, ctx: JobContext) -> None:
    raise AssertionError("a 10 s job must not be leased with 5 s left")


def load_function() -> ModuleType:
    return module_from_file(APP, "worker_function_app")


@pytest.fixture
def wired(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeQueue, FakeStore]]:
    queue, store = FakeQueue(), FakeStore()
    settings = Settings(handlers_module=__name__, lambda_margin_ms=500, default_lease_seconds=2)
    monkeypatch.setattr(wiring, "settings", lambda: settings)
    monkeypatch.setattr(wiring, "queue", lambda s=None: queue)
    monkeypatch.setattr(wiring, "store", lambda s=None: store)
    ran.clear()
    yield queue, store


def test_the_dispatch_event_drains_the_named_queue(wired: tuple[FakeQueue, FakeStore],
                                                   event_json: Callable[[str], dict[str, Any]]) -> None:
    queue, store = wired
    for i in range(3):
        queue.add("thumbnails", f"img-{i}", f"cat{i}")
    out = load_function().handler(event_json("worker_dispatch.json"), FakeLambdaContext(30_000))
    assert out["succeeded"] == 3 and out["leased"] == 3 and out["source"] == "relay"
    assert out["request_id"] == "6f1c1a8e-2a4b-4c1e-9d55-0c2b8f7e5a10" and out["stopped"] == "empty"
    assert store.get_job("img-1").result == {"thumb": "cat1-small"}
    assert store.get_job("img-1").lease_owner == "sluice-worker:6f1c1a8e-2a4b-4c1e-9d55-0c2b8f7e5a10"
    assert [r[0] for r in ran] == ["img-0", "img-1", "img-2"]


def test_the_schedule_event_with_five_seconds_leases_no_ten_second_job(
        wired: tuple[FakeQueue, FakeStore], event_json: Callable[[str], dict[str, Any]]) -> None:
    queue, _ = wired
    queue.add("thumbnails", "img", "dog")
    queue.add("emails", "mail", None)
    out = load_function().handler(event_json("worker_schedule.json"), FakeLambdaContext(5_000))
    assert out["source"] == "schedule" and out["succeeded"] == 1
    assert out["skipped_for_time"] == ["emails"]
    assert queue.job("emails", "mail").state == "ready" and queue.job("emails", "mail").attempts == 0
    assert all(c[1] != "emails" for c in queue.called("lease"))


@pytest.mark.parametrize("event", [
    {}, {"queues": []}, {"queues": ["Bad Name"]}, {"queues": ["q"], "batch": 0},
    {"queues": ["q"], "batch": 10_000}, {"queues": "q"}, [], "x", None,
    {"version": "0", "detail-type": "Scheduled Event", "source": "aws.events", "detail": {}},
])
def test_events_that_are_not_dispatches_get_a_typed_error(wired: tuple[FakeQueue, FakeStore],
                                                           event: Any) -> None:
    queue, _ = wired
    with pytest.raises(InvalidInput, match="not a worker dispatch event"):
        load_function().handler(event, FakeLambdaContext(30_000))
    assert queue.calls == []


def test_the_event_fixtures_parse() -> None:
    root = Path(__file__).resolve().parents[1] / "events"
    for name in ("worker_dispatch.json", "worker_schedule.json"):
        import json

        event = parse_dispatch(json.loads((root / name).read_text()))
        assert event.queues and event.batch >= 1


def test_load_app_finds_the_worker_or_says_why_not() -> None:
    assert load_app(__name__) is app
    with pytest.raises(HandlerNotFound, match="cannot import"):
        load_app("sluice.no_such_module_here")
    with pytest.raises(HandlerNotFound, match=r"exactly one sluice\.Worker"):
        load_app("sluice.core.policy")


def test_a_drain_of_an_empty_queue_builds_no_store_and_the_first_job_builds_it_once(
        wired: tuple[FakeQueue, FakeStore], event_json: Callable[[str], dict[str, Any]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 14 (cold start): the worker Lambda's store (boto3 and a DynamoDB client) is built
    on the first leased job, not for a dispatch that finds its queue empty."""
    queue, store = wired
    builds: list[object] = []

    def build(s: object = None) -> FakeStore:
        builds.append(s)
        return store

    monkeypatch.setattr(wiring, "store", build)
    function = load_function()
    out = function.handler(event_json("worker_dispatch.json"), FakeLambdaContext(30_000))
    assert out["leased"] == 0 and out["stopped"] == "empty" and builds == []
    queue.add("thumbnails", "img-0", "cat")
    queue.add("thumbnails", "img-1", "dog")
    out = function.handler(event_json("worker_dispatch.json"), FakeLambdaContext(30_000))
    assert out["succeeded"] == 2 and len(builds) == 1
    assert store.get_job("img-1").result == {"thumb": "dog-small"}


def test_a_store_that_cannot_be_built_hands_the_leased_jobs_back(wired: tuple[FakeQueue, FakeStore]) -> None:
    """The store held lazily fails to build after a lease: the jobs go back to ready (not stranded
    until their lease expires) and the drain raises the build's error."""
    from sluice.core.errors import ConfigError
    from sluice.core.lazy import Lazy
    from sluice.worker.runtime.options import WorkerOptions

    queue, _ = wired

    def broken() -> FakeStore:
        raise ConfigError("no jobs table")

    queue.add("thumbnails", "img-0", "cat")
    worker = app.bind(queue=queue, store=Lazy(broken), options=WorkerOptions(concurrency=1))
    with pytest.raises(ConfigError, match="no jobs table"):
        worker.drain(["thumbnails"], 5, lambda: 30_000)
    job = queue.job("thumbnails", "img-0")
    assert job.state == "ready" and job.attempts == 0
    assert ran == []
