"""Issue 17: the operator API through the local server, whose caller identity comes from the
``X-Sluice-Local-Caller`` header (no IAM locally). A plain enqueue caller is refused (403) and
writes nothing; an operator is allowed."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest

from sluice_dev.local.api_server import LOCAL_CALLER_HEADER, LocalGateway
from tests.unit.test_gateway_admin import OPERATOR, OPERATOR_SESSION, WEB, Rig, dead_id

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def served() -> Iterator[tuple[Rig, LocalGateway]]:
    rig = Rig(operators=(OPERATOR,))
    with LocalGateway(rig.gateway) as server:
        yield rig, server


def request(server: LocalGateway, method: str, path: str, body: Any = None,
            caller: str | None = None) -> tuple[int, dict[str, Any]]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    headers = {"Content-Type": "application/json"}
    if caller is not None:
        headers[LOCAL_CALLER_HEADER] = caller
    try:
        conn.request(method, path, None if body is None else json.dumps(body), headers)
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        conn.close()


Q = "/v1/admin/queues/emails"


@pytest.mark.parametrize("caller", [None, WEB, "", "arn:aws:iam::123456789012:role/operator-not"])
def test_a_plain_enqueue_caller_is_refused_through_the_local_server(
        served: tuple[Rig, LocalGateway], caller: str | None) -> None:
    rig, server = served
    dead_id(rig)
    for method, path, body in [("POST", Q + "/pause", None), ("PUT", Q + "/rate", {"per_second": 1}),
                               ("POST", Q + "/dlq/redrive", {"all": True}), ("DELETE", Q + "/dlq", None),
                               ("GET", Q + "/dlq", None)]:
        status, doc = request(server, method, path, body, caller)
        assert (status, doc["code"]) == (403, "NOT_OPERATOR"), (method, path)
    assert rig.untouched()


@pytest.mark.parametrize("caller", [OPERATOR, OPERATOR_SESSION, WEB])
def test_with_no_operator_named_nobody_is_one_through_the_local_server(caller: str) -> None:
    """Issue 27, item 3: OperatorPrincipalArns empty (the default) fails closed, over real HTTP too."""
    rig = Rig(operators=())
    dead_id(rig)
    with LocalGateway(rig.gateway) as server:
        for method, path, body in [("POST", Q + "/pause", None), ("PUT", Q + "/rate", {"per_second": 1}),
                                   ("POST", Q + "/dlq/redrive", {"all": True}), ("DELETE", Q + "/dlq", None),
                                   ("GET", Q + "/dlq", None), ("GET", "/v1/admin/queues", None)]:
            status, doc = request(server, method, path, body, caller)
            assert (status, doc["code"]) == (403, "NOT_OPERATOR"), (method, path)
            assert "OperatorPrincipalArns" in doc["detail"]
    assert rig.untouched()


def test_an_operator_is_allowed_through_the_local_server(served: tuple[Rig, LocalGateway]) -> None:
    rig, server = served
    job = dead_id(rig)
    assert request(server, "POST", Q + "/pause", caller=OPERATOR_SESSION) == (200, {
        **rig.queue.config["emails"].model_dump(mode="json", exclude={"sensitive"}), "queue": "emails"})
    assert rig.queue.config["emails"].paused is True
    status, doc = request(server, "GET", Q + "/dlq?limit=5", caller=OPERATOR)
    assert status == 200 and [j["job_id"] for j in doc["jobs"]] == [job]
    status, doc = request(server, "POST", Q + "/dlq/redrive", {"job_id": job}, caller=OPERATOR)
    assert (status, doc["moved"]) == (200, 1) and rig.store.generations == {job: 1}


def test_the_client_drives_the_operator_api(served: tuple[Rig, LocalGateway]) -> None:
    from sluice.client import Client
    from sluice.core.errors import SluiceError

    rig, server = served
    first, second = dead_id(rig, 0), dead_id(rig, 1)
    operator = Client(server.url, headers={LOCAL_CALLER_HEADER: OPERATOR}, max_attempts=1)
    assert operator.pause("emails").paused is True
    assert operator.set_rate("emails", 2.5, burst=3).rate_per_s == 2.5
    assert operator.set_max_in_flight("emails", 4).max_in_flight == 4
    assert operator.set_watermarks("emails", 10).low_watermark == 5
    assert operator.resume("emails").paused is False
    assert [d.job_id for d in operator.dead_letters("emails", 10)] == [first, second]
    assert operator.redrive("emails", first)["moved"] == 1
    assert operator.purge_dead("emails") == 1
    writes = list(rig.queue.writes)
    plain = Client(server.url, headers={LOCAL_CALLER_HEADER: WEB}, max_attempts=1)
    with pytest.raises(SluiceError) as refused:
        plain.pause("emails")
    assert "not an operator" in str(refused.value)
    assert rig.queue.writes == writes


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    import os

    for var in [v for v in os.environ if v.startswith("SLUICE_")]:
        monkeypatch.delenv(var, raising=False)
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)  # the CLI signs (SigV4); the local server ignores signatures
    monkeypatch.chdir(tmp_path)


def test_the_cli_uses_the_operator_api_when_pointed_at_an_api_without_redis(
        served: tuple[Rig, LocalGateway], cli_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from sluice_dev.cli import main

    rig, server = served
    job = dead_id(rig)
    monkeypatch.setenv("SLUICE_API_URL", server.url)
    runner = CliRunner()
    refused = runner.invoke(main, ["queue", "pause", "emails"])  # no caller: no IAM identity
    assert refused.exit_code == 1 and "no IAM caller" in refused.output, refused.output
    assert rig.untouched()
    monkeypatch.setenv("SLUICE_LOCAL_CALLER", OPERATOR)
    for args in (["queue", "pause", "emails"], ["queue", "rate", "emails", "--per-second", "3"],
                 ["queue", "limit", "emails", "--max-in-flight", "2"],
                 ["queue", "watermark", "emails", "--high", "8"]):
        result = runner.invoke(main, args)
        assert result.exit_code == 0, (args, result.output)
    config = rig.queue.config["emails"]
    assert (config.paused, config.rate_per_s, config.max_in_flight,
            config.high_watermark) == (True, 3.0, 2, 8)
    listed = runner.invoke(main, ["dlq", "list", "emails", "--json"])
    assert listed.exit_code == 0 and job in listed.output
    redriven = runner.invoke(main, ["dlq", "redrive", "emails", job])
    assert redriven.exit_code == 0 and "1 job back" in redriven.output and rig.store.generations == {job: 1}
    assert runner.invoke(main, ["queue", "resume", "emails"]).exit_code == 0
    assert rig.queue.config["emails"].paused is False


def test_sluice_queues_top_and_caps_use_the_operator_api_without_redis(
        served: tuple[Rig, LocalGateway], cli_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 17: from a laptop with the API's URL and no Redis, ``sluice queues``, ``sluice top`` and
    ``sluice queue caps`` go through /v1/admin/queues[...]; a plain caller is refused."""
    from click.testing import CliRunner

    from sluice_dev.cli import main

    rig, server = served
    dead_id(rig)
    monkeypatch.setenv("SLUICE_API_URL", server.url)
    runner = CliRunner(mix_stderr=False)
    monkeypatch.setenv("SLUICE_LOCAL_CALLER", WEB)
    for args in (["queues"], ["top", "--once"], ["queue", "caps", "emails", "--max-dead", "3"]):
        refused = runner.invoke(main, args)
        assert refused.exit_code == 1 and "not an operator" in refused.output + refused.stderr, args
    assert rig.untouched()

    monkeypatch.setenv("SLUICE_LOCAL_CALLER", OPERATOR)
    capped = runner.invoke(main, ["queue", "caps", "emails", "--max-delayed", "40", "--max-dead", "3"])
    assert capped.exit_code == 0 and "delayed 40, dead 3" in capped.stdout, capped.output + capped.stderr
    assert (rig.queue.config["emails"].max_delayed, rig.queue.config["emails"].max_dead) == (40, 3)
    listed = runner.invoke(main, ["queues", "--json"])
    assert listed.exit_code == 0, listed.output + listed.stderr
    (row,) = [json.loads(line) for line in listed.stdout.splitlines()]
    assert (row["queue"], row["ready"], row["in_flight"], row["dead"]) == ("emails", 7, 2, 1)
    assert row["max_dead"] == 3
    assert row["route"] == "default worker"
    table = runner.invoke(main, ["queues"])
    assert table.exit_code == 0 and "emails" in table.stdout and "40/3" in table.stdout, table.stdout
    frame = runner.invoke(main, ["--json", "top", "--once"])
    assert frame.exit_code == 0, frame.output + frame.stderr
    (snapshot,) = [json.loads(line) for line in frame.stdout.splitlines()]
    assert snapshot["acked_since_start"] is None and snapshot["where"] == server.url
    (top_row,) = snapshot["queues"]
    assert (top_row["queue"], top_row["overdue_leases"], top_row["ready"]) == ("emails", 1, 7)
    shown = runner.invoke(main, ["top", "--once"])
    assert shown.exit_code == 0 and "sluice top" in shown.stdout and "emails" in shown.stdout, shown.stdout
