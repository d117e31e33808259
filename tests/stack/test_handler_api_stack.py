"""The handler API of issue 31 on the local stack (`sluice dev`: gateway, Kafka, relay, Redis, the
worker Lambdas and the jobs table), one stack for the module:

- item 1: ``async def`` handlers next to sync ones. Before, an async handler's every attempt failed
  with "Object of type coroutine is not JSON serializable" until it was dead.
- item 4: a handler's ``RetryPolicy`` decides the attempts of a job whose caller sent none, a
  caller's max_attempts lowers it and never raises it, ``fail_on`` ends a job at once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice_dev.local.dev import DevOptions, DevStack
from tests.stack.gateway_http import http
from tests.stack.test_flows_stack import until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    state: Path = tmp_path_factory.mktemp("async") / ".sluice"
    dev = DevStack(DevOptions(state_dir=state, workers=2, log_level="WARNING", history=False,
                              handlers="tests.stack.handler_api_handlers"))
    dev.start()
    try:
        yield str(dev.endpoints["gateway_url"])
    finally:
        dev.stop()


def enqueue(gw: str, queue: str, payload: object, **options: object) -> str:
    status, accepted = http("POST", f"{gw}/v1/queues/{queue}/jobs", {"payload": payload, **options})
    assert status == 202, accepted
    return str(accepted["job_id"])


def ended(gw: str, job_id: str) -> dict[str, object]:
    return until(f"{gw}/v1/jobs/{job_id}", lambda v: v["status"] in ("succeeded", "failed", "dead"), 60)


def test_sync_and_async_handlers_run_side_by_side_in_one_worker(gw: str) -> None:
    jobs = {enqueue(gw, q, i): (q, i) for i in range(3) for q in ("sync-echo", "async-echo")}
    for job_id, (queue, i) in jobs.items():
        view = ended(gw, job_id)
        kind = queue.split("-")[0]
        assert (view["status"], view["attempts"]) == ("succeeded", 1), view
        assert view["result"] == {"echo": i, "kind": kind}


def test_an_async_handler_blocking_its_loop_past_its_lease_keeps_the_lease(gw: str) -> None:
    job_id = enqueue(gw, "async-block", {"sleep": 3}, lease_seconds=1)
    view = ended(gw, job_id)
    assert (view["status"], view["attempts"]) == ("succeeded", 1), view
    result = view["result"]
    assert isinstance(result, dict) and result["lost"] is False
    assert result["extended_ms"] >= 1_500  # renewed from the heartbeat's thread while the loop slept


def test_an_async_handler_starts_a_child_with_the_awaitable_enqueue(gw: str) -> None:
    parent = ended(gw, enqueue(gw, "async-parent", {}))
    assert parent["status"] == "succeeded", parent
    result = parent["result"]
    assert isinstance(result, dict)
    child = ended(gw, str(result["child"]))
    assert child["status"] == "succeeded" and child["parent_id"] == parent["job_id"]
    assert child["result"] == {"echo": {"from": parent["job_id"]}, "kind": "sync"}


def test_a_job_without_max_attempts_gets_its_handlers_policy_past_the_old_default(gw: str) -> None:
    view = ended(gw, enqueue(gw, "policy-flaky", {"ok_at": 7}))  # no max_attempts sent
    assert (view["status"], view["attempts"]) == ("succeeded", 7), view
    assert view["result"] == {"attempt": 7, "max_attempts": 7}


@pytest.mark.parametrize(("sent", "runs"), [(50, 7), (2, 2)])
def test_a_callers_max_attempts_lowers_the_policy_never_raises_it(gw: str, sent: int, runs: int) -> None:
    view = ended(gw, enqueue(gw, "policy-flaky", {"ok_at": 99}, max_attempts=sent))
    assert (view["status"], view["attempts"]) == ("dead", runs), view
    assert view["last_error"] == f"ConnectionError: attempt {runs} of {runs}"


def test_an_error_in_fail_on_ends_the_job_on_its_first_attempt(gw: str) -> None:
    view = ended(gw, enqueue(gw, "policy-flaky", {"ok_at": 1, "unrecoverable": True}))
    assert (view["status"], view["attempts"]) == ("failed", 1), view
    assert view["last_error"] == "Unrecoverable: the record is gone (not retried: the handler's RetryPolicy)"


@pytest.mark.parametrize("bad", [0, -1, 10**12, True, "5", 2.5])
def test_a_bad_max_attempts_is_a_400_naming_the_field(gw: str, bad: object) -> None:
    status, problem = http("POST", f"{gw}/v1/queues/policy-flaky/jobs", {"payload": {}, "max_attempts": bad})
    assert status == 400 and problem["errors"][0]["pointer"] == "/max_attempts", problem
