"""Issue 31, item 2: ``sluice.Client`` and ``AsyncClient`` against a running local stack (``sluice
dev``'s gateway over HTTP/1.1, Kafka on Tansu, Redis, DynamoDB on moto): one kept-alive connection
for a client's sequential requests, counted by a TCP proxy in front of the gateway; ``close()``
closes it; the async client enqueues a pydantic model and waits for the job; ``create_schedule``
and ``sluice schedules`` create, list, pause and delete a schedule.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pydantic import BaseModel

from sluice.client import Client, ClientClosed, UrllibTransport
from sluice.client_async import AsyncClient
from sluice.core.errors import ScheduleExists, ScheduleNotFound
from sluice_dev.cli import main
from sluice_dev.local.api_server import LOCAL_CALLER_HEADER, LOCAL_OPERATOR
from sluice_dev.local.dev import DevOptions, DevStack
from tests.stack.tcp_count import CountingProxy

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
GETS = 50
OPERATOR = {LOCAL_CALLER_HEADER: LOCAL_OPERATOR}
Stack = tuple[Path, str, DevStack]  # the state dir, the gateway's URL, the stack


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    state: Path = tmp_path_factory.mktemp("client") / ".sluice"
    dev = DevStack(DevOptions(state_dir=state, handlers="tests.stack.client_handlers", workers=1,
                              log_level="WARNING", history=False, follow_events=False))
    endpoints = dev.start()
    try:
        yield state, str(endpoints["gateway_url"]), dev
    finally:
        dev.stop()


@pytest.fixture(scope="module")
def job_id(stack: Stack) -> str:
    with Client(stack[1]) as client:
        return client.enqueue("emails", {"n": 1}).job_id


def test_a_keyed_enqueue_sent_again_runs_once(stack: Stack) -> None:
    """Issue 33: a repeat of a keyed enqueue appends its record again (its first may have died
    before its append); through the real relay, Redis and worker the job still runs once, whether
    the repeats come before it ran or after it ended."""
    from kafka.partitioner.default import murmur2

    settings = stack[2].settings
    assert settings is not None

    def partition(job_id: str) -> int:  # kafka-python's default partitioner, the gateway's producer's
        return (murmur2(job_id.encode("utf-8")) & 0x7FFFFFFF) % settings.kafka_partitions

    with Client(stack[1]) as client:
        first = client.enqueue("emails", {"n": "keyed"}, idempotency_key="runs-once")
        for _ in range(2):
            assert client.enqueue("emails", {"n": "keyed"}, idempotency_key="runs-once") == first
        view = client.wait(first.job_id, timeout_s=90)
        assert (view.status, view.attempts) == ("succeeded", 1)
        for _ in range(2):
            assert client.enqueue("emails", {"n": "keyed"}, idempotency_key="runs-once") == first
        # A later job on the repeats' partition: once it ran, the relay had read the repeats before it.
        later = next(a for a in (client.enqueue("emails", {"n": i}, keyed=False) for i in range(400))
                     if partition(a.job_id) == partition(first.job_id))
        assert client.wait(later.job_id, timeout_s=90).status == "succeeded"
        again = client.status(first.job_id)
        assert (again.status, again.attempts, again.result) == ("succeeded", 1, view.result)


def test_sequential_requests_on_one_client_share_one_connection_until_close(
        stack: Stack, job_id: str) -> None:
    with CountingProxy(stack[1]) as proxy:
        client = Client(proxy.url)
        for _ in range(GETS):
            assert client.status(job_id).job_id == job_id
        assert (proxy.accepted, proxy.wait_open(1)) == (1, 1)
        client.close()
        assert proxy.wait_open(0) == 0  # closed, not left to the server's idle timeout
        with pytest.raises(ClientClosed):
            client.status(job_id)
        assert proxy.accepted == 1


def test_the_urllib_transport_of_before_opened_a_connection_per_request(
        stack: Stack, job_id: str) -> None:
    with CountingProxy(stack[1]) as proxy, Client(proxy.url, transport=UrllibTransport()) as client:
        for _ in range(10):
            client.status(job_id)
        assert proxy.accepted == 10


class Greeting(BaseModel):
    to: str
    times: int


def test_the_async_client_enqueues_a_model_and_waits_for_its_job(stack: Stack) -> None:
    async def run(url: str) -> tuple[Any, list[str]]:
        async with AsyncClient(url, max_connections=4) as client:
            accepted = await client.enqueue("emails", Greeting(to="ada", times=2))
            view = await client.wait(accepted.job_id, timeout_s=90)
            seen = await asyncio.gather(*(client.status(accepted.job_id) for _ in range(12)))
            return view, [s.status for s in seen]

    with CountingProxy(stack[1]) as proxy:
        view, statuses = asyncio.run(run(proxy.url))
        assert view.status == "succeeded" and view.result == {"sent": {"to": "ada", "times": 2}}
        assert statuses == ["succeeded"] * 12
        assert 1 <= proxy.accepted <= 4  # twelve at once over at most its pool's connections
        assert proxy.wait_open(0) == 0  # leaving `async with` closed them


def test_create_schedule_makes_a_schedule_that_list_shows(stack: Stack) -> None:
    with Client(stack[1], headers=OPERATOR) as client:
        created = client.create_schedule("emails", "client-nightly", "cron(0 3 * * ? *)",
                                          Greeting(to="ops", times=1))
        assert (created["queue"], created["paused"]) == ("emails", False)
        assert created["payload"] == {"to": "ops", "times": 1} and created["next_firing_ms"] > 0
        listed = {s["name"]: s for s in client.schedules("emails") or []}
        assert listed["client-nightly"]["expression"] == "cron(0 3 * * ? *)"
        assert client.get_schedule("emails", "client-nightly") == listed["client-nightly"]
        with pytest.raises(ScheduleExists) as again:
            client.create_schedule("emails", "client-nightly", "rate(1 day)", 1)
        assert again.value.details["status"] == 409
        client.delete_schedule("emails", "client-nightly")
        with pytest.raises(ScheduleNotFound):
            client.get_schedule("emails", "client-nightly")


def test_sluice_schedules_creates_lists_pauses_and_deletes(stack: Stack) -> None:
    def sluice(*args: str) -> list[Any]:
        out = CliRunner(mix_stderr=False).invoke(main, ["--state-dir", str(stack[0]), "schedules", *args,
                                                        "--json"])
        assert out.exit_code == 0, out.output + out.stderr
        return [json.loads(line) for line in out.stdout.splitlines()]

    (created,) = sluice("create", "emails", "cli-hourly", "rate(1 hour)", "--payload", '{"from": "cli"}')
    assert (created["name"], created["payload"], created["paused"]) == ("cli-hourly", {"from": "cli"}, False)
    assert "cli-hourly" in {s["name"] for s in sluice("list", "emails")}
    (paused,) = sluice("pause", "emails", "cli-hourly")
    assert paused["paused"] and paused["next_firing_ms"] is None
    (resumed,) = sluice("resume", "emails", "cli-hourly")
    assert not resumed["paused"]
    sluice("delete", "emails", "cli-hourly")
    assert "cli-hourly" not in {s["name"] for s in sluice("list", "emails")}


def test_the_docs_client_example_runs(stack: Stack, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """docs/api.md's example, as written, with ``API`` the local gateway. Locally IAM is a header
    (``X-Sluice-Local-Caller``, docs/api.md Operator API): every client it builds sends the local
    operator's; its SigV4 signature (dummy credentials, tests/conftest.py) is sent and ignored."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text(encoding="utf-8")
    marker = "tests/stack/test_client_stack.py::test_the_docs_client_example_runs"
    example = text.split(marker, 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    built = Client.__init__

    def as_local_operator(self: Client, *args: Any, **kwargs: Any) -> None:
        built(self, *args, **{**kwargs, "headers": {**(kwargs.get("headers") or {}), **OPERATOR}})

    monkeypatch.setattr(Client, "__init__", as_local_operator)
    exec(compile(example, "docs/api.md", "exec"), {"API": stack[1], "__name__": "docs_example"})
    assert capsys.readouterr().out.splitlines() == ["succeeded", "['nightly-digest']", "succeeded 5"]
