"""The local Lambda service: warm containers behind the Invoke API that boto3 (and the relay) call."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from sluice.backends.aws.dispatch import LambdaDispatcher
from sluice.core.config import Settings
from sluice_dev.local.lambdas import Function, LambdaApi, LocalLambda

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

HANDLER = '''
import os, time
def handler(event, context):
    if event.get("fail"):
        raise ValueError("asked to fail")
    if event.get("sleep"):
        time.sleep(event["sleep"])
    with open(os.environ["OUT"], "a") as f:
        f.write(f"{os.getpid()} {event.get('n')}\\n")
    return {"pid": os.getpid(), "n": event.get("n"), "left_ms": context.get_remaining_time_in_millis(),
            "request_id": context.aws_request_id, "name": context.function_name}
'''


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[LocalLambda, LambdaApi, Path]]:
    app = tmp_path / "fn" / "app.py"
    app.parent.mkdir()
    app.write_text(HANDLER)
    out = tmp_path / "calls.txt"
    out.touch()
    fns = [Function("echo", f"{app}:handler", 3_000, 1, {"OUT": str(out)}, idle_s=1.0),
           Function("wide", f"{app}:handler", 3_000, 3, {"OUT": str(out)})]
    svc = LocalLambda(fns, tmp_path / "logs").start()
    api = LambdaApi(svc).start()
    yield svc, api, out
    api.stop()
    svc.stop()


def client(api: LambdaApi) -> Any:
    return boto3.client("lambda", endpoint_url=api.url, region_name="us-east-1")


def wait_lines(path: Path, n: int, timeout: float = 20) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = path.read_text().splitlines()
        if len(lines) >= n:
            return lines
        time.sleep(0.05)
    raise AssertionError(f"only {path.read_text().splitlines()} after {timeout}s")


def test_request_response_runs_the_handler_with_a_lambda_like_context(service: Any) -> None:
    _svc, api, _out = service
    reply = client(api).invoke(FunctionName="echo", Payload=json.dumps({"n": 1}))
    assert reply["StatusCode"] == 200 and "FunctionError" not in reply
    body = json.loads(reply["Payload"].read())
    assert body["n"] == 1 and body["name"] == "echo"
    assert 0 < body["left_ms"] <= 3_000
    assert body["pid"] != os.getpid()


def test_async_invokes_are_accepted_at_once_and_share_one_warm_container(service: Any) -> None:
    svc, api, out = service
    c = client(api)
    for n in range(3):
        assert c.invoke(FunctionName="echo", InvocationType="Event", Payload=json.dumps({"n": n}))[
            "StatusCode"] == 202
    lines = wait_lines(out, 3)
    assert sorted(int(x.split()[1]) for x in lines) == [0, 1, 2]
    assert len({x.split()[0] for x in lines}) == 1  # concurrency 1: the same warm process
    assert svc.counts["cold_starts"] == 1


def test_concurrency_spreads_parallel_invocations_over_containers(service: Any) -> None:
    svc, _api, out = service
    invs = [svc.invoke("wide", {"n": n, "sleep": 0.5}) for n in range(3)]
    for inv in invs:
        assert inv.done.wait(20) and inv.error is None
    assert len({x.split()[0] for x in wait_lines(out, 3)}) == 3


def test_handler_errors_timeouts_and_crashes_are_reported_not_hidden(service: Any) -> None:
    svc, api, _out = service
    reply = client(api).invoke(FunctionName="echo", Payload=json.dumps({"fail": True}))
    assert reply["FunctionError"] == "Unhandled"
    assert "asked to fail" in json.loads(reply["Payload"].read())["errorMessage"]
    slow = svc.invoke("echo", {"sleep": 30})
    assert slow.done.wait(15)
    assert slow.error == "Task timed out"
    assert svc.counts["timeouts"] == 1
    victim = svc.invoke("echo", {"sleep": 2})
    deadline = time.monotonic() + 10
    while not (busy := [c for c in svc.describe() if c["busy"]]) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(busy[0]["pid"], signal.SIGKILL)
    assert victim.done.wait(10)
    assert victim.error is not None and "exited" in victim.error
    again = svc.invoke("echo", {"n": 9}, asynchronous=False)  # a new container replaces it
    assert again.done.wait(15) and again.result["n"] == 9


def test_unknown_functions_and_bad_payloads_get_lambdas_errors(service: Any) -> None:
    _svc, api, _out = service
    c = client(api)
    with pytest.raises(c.exceptions.ResourceNotFoundException):
        c.invoke(FunctionName="nope", Payload=b"{}")
    with pytest.raises(c.exceptions.InvalidRequestContentException):
        c.invoke(FunctionName="echo", Payload=b"{not json")


def test_idle_containers_are_reclaimed(service: Any) -> None:
    svc, _api, _out = service
    assert svc.invoke("echo", {"n": 1}, asynchronous=False).done.wait(15)
    pid = svc.describe()[0]["pid"]
    deadline = time.monotonic() + 10
    while svc.describe() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert svc.describe() == []
    with pytest.raises(ProcessLookupError):
        for _ in range(50):  # the container exits at EOF; the reader thread reaps it
            os.kill(pid, 0)
            time.sleep(0.1)


def test_the_relays_lambda_dispatcher_reaches_it_through_settings(service: Any) -> None:
    _svc, api, out = service
    s = Settings(lambda_endpoint_url=api.url, aws_endpoint_url="http://127.0.0.1:9",
                 worker_function_name="wide")
    dispatcher = LambdaDispatcher.from_settings(s)
    assert dispatcher.dispatch("echo", 2, 5) == 2
    lines = wait_lines(out, 2)
    assert all(x.split()[1] == "None" for x in lines)  # the DispatchEvent has no "n"


def test_every_finished_invocation_is_reported_to_the_observer_and_a_second_stop_does_nothing(
        service: Any) -> None:
    svc, _api, _out = service
    seen: list[Any] = []
    svc.on_finish = seen.append
    ok = svc.invoke("echo", {"n": 4}, asynchronous=False)
    failed = svc.invoke("echo", {"fail": True}, asynchronous=False)
    assert ok.done.wait(15) and failed.done.wait(15)
    assert [(inv.id, inv.error is None) for inv in seen] == [(ok.id, True), (failed.id, False)]
    assert seen[0].result["n"] == 4 and "asked to fail" in (seen[1].error or "")
    svc.on_finish = lambda _inv: 1 / 0  # type: ignore[func-returns-value]  # a broken observer
    assert svc.invoke("echo", {"n": 5}, asynchronous=False).done.wait(15)  # is not the service's problem
    svc.stop()
    svc.stop()
    assert svc.describe() == []
