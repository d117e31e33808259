"""``sluice schedules create|list|show|pause|resume|delete`` (issue 31, item 5) over a fake operator API:
the requests each command sends, its output, and arguments checked before any connection
(tests/stack/test_client_stack.py runs them against a stack)."""

# ruff: noqa: F811 (``runner``, the CLI tests' fixture, imported and then named by each test)
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sluice.client import Client
from sluice_dev.cli import main
from sluice_dev.cli.target import Target
from sluice_dev.local.api_server import LOCAL_CALLER_HEADER, LOCAL_OPERATOR
from tests.unit.test_cli_json import json_error, runner  # noqa: F401
from tests.unit.test_client import FakeTransport, ok, problem

VIEW = {"name": "nightly", "expression": "cron(0 3 * * ? *)", "queue": "emails", "payload": {"n": 1},
        "paused": False, "created_at_ms": 1, "next_firing_ms": 1_796_612_400_000}


def fake_api(monkeypatch: pytest.MonkeyPatch, *replies: Any) -> FakeTransport:
    transport = FakeTransport(*replies)
    fake = Client("http://api.test", transport=transport, sleep=lambda _s: None)
    monkeypatch.setattr(Target, "operator_client", lambda _self, url=None, max_attempts=4: fake)
    return transport


def test_create_posts_the_schedule_and_prints_it(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    sent = fake_api(monkeypatch, ok(VIEW, 201)).sent
    result = runner.invoke(main, ["schedules", "create", "emails", "nightly", "cron(0 3 * * ? *)",
                                  "--payload", '{"n": 1}'])
    assert result.exit_code == 0, result.stderr
    assert sent == [("POST", "http://api.test/v1/admin/queues/emails/schedules", sent[0][2],
                     {"name": "nightly", "expression": "cron(0 3 * * ? *)", "payload": {"n": 1}})]
    assert result.stdout.splitlines() == ["created schedule nightly of emails",
                                          'nightly  cron(0 3 * * ? *)  active  next 2026-12-07 03:00:00Z  '
                                          'payload {"n":1}']


def test_list_prints_one_json_object_per_schedule(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    paused = {**VIEW, "name": "weekly", "paused": True, "next_firing_ms": None}
    fake_api(monkeypatch, ok({"schedules": [VIEW, paused]}))
    result = runner.invoke(main, ["schedules", "list", "emails", "--json"])
    assert [json.loads(line) for line in result.stdout.splitlines()] == [VIEW, paused]
    fake_api(monkeypatch, ok({"schedules": [paused]}))
    listed = runner.invoke(main, ["schedules", "list", "emails"]).stdout
    assert "weekly  cron(0 3 * * ? *)  paused  next -" in listed


@pytest.mark.parametrize(("verb", "method", "path", "status"), [
    ("pause", "POST", "/nightly/pause", 200), ("resume", "POST", "/nightly/resume", 200),
    ("show", "GET", "/nightly", 200), ("delete", "DELETE", "/nightly", 204)])
def test_pause_resume_show_and_delete_name_the_schedule_in_its_queue(
        runner: CliRunner, monkeypatch: pytest.MonkeyPatch, verb: str, method: str, path: str,
        status: int) -> None:
    sent = fake_api(monkeypatch, ok(VIEW, status) if status == 200 else ok(None, 204)).sent
    result = runner.invoke(main, ["schedules", verb, "emails", "nightly", "--json"])
    assert result.exit_code == 0, result.stderr
    assert sent[0][:2] == (method, f"http://api.test/v1/admin/queues/emails/schedules{path}")
    shown = json.loads(result.stdout)
    assert shown == (VIEW if status == 200 else {"queue": "emails", "name": "nightly", "deleted": True})


def test_the_apis_typed_error_is_the_commands_error(runner: CliRunner,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    fake_api(monkeypatch, problem(409, "SCHEDULE_EXISTS", "emails has a schedule named nightly"))
    result = runner.invoke(main, ["schedules", "create", "emails", "nightly", "rate(1 day)", "--json"])
    assert result.exit_code == 1 and json_error(result)["code"] == "SCHEDULE_EXISTS"


@pytest.mark.parametrize(("args", "code"), [
    (["create", "emails", "no/slash", "rate(1 day)"], "INVALID_SCHEDULE"),
    (["create", "Bad Queue", "nightly", "rate(1 day)"], "INVALID_QUEUE"),
    (["create", "emails", "nightly", "rate(1 day)", "-p", "{not json"], "INVALID_INPUT"),
    (["pause", "emails", "_x"], "INVALID_SCHEDULE"),
])
def test_bad_arguments_are_reported_before_any_connection(runner: CliRunner, args: list[str],
                                                          code: str) -> None:
    result = runner.invoke(main, ["schedules", *args, "--json"])  # no stack runs here: nothing to reach
    assert result.exit_code == 1 and json_error(result)["code"] == code


def test_without_a_stack_or_an_api_url_nothing_is_reached(runner: CliRunner) -> None:
    result = runner.invoke(main, ["schedules", "list", "emails"])
    assert result.exit_code == 1 and result.stderr.startswith("error: no local stack")


def test_the_operator_client_is_the_local_operator_or_a_signed_deployment(tmp_path: Path) -> None:
    local = Target(state_dir=tmp_path / ".sluice", env={})
    local.__dict__["local"] = {"gateway_url": "http://127.0.0.1:4010"}  # a running stack's endpoints
    client = local.operator_client()
    assert (client.api_url, client.headers, client.sign_sigv4) == (
        "http://127.0.0.1:4010", {LOCAL_CALLER_HEADER: LOCAL_OPERATOR}, False)
    url = "https://abc.execute-api.eu-west-1.amazonaws.com/prod"
    deployed = Target(state_dir=tmp_path / ".sluice", env={"SLUICE_API_URL": url, "SLUICE_REDIS_URL": "x"})
    client = deployed.operator_client()  # with Redis set too: schedules have no way but the API
    assert (client.api_url, client.headers, client.sign_sigv4) == (url, {}, True)


def test_a_local_server_given_by_its_url_is_not_signed(tmp_path: Path) -> None:
    """Session 36's walk: `SLUICE_API_URL=http://127.0.0.1:<port> sluice enqueue ...` against `sluice dev`
    failed with "no AWS credentials were found": the CLI signed for a server that checks no signature."""
    for url in ("http://127.0.0.1:4010", "http://localhost:4010/", "http://[::1]:4010"):
        target = Target(state_dir=tmp_path / ".sluice", env={"SLUICE_API_URL": url})
        assert target.client().sign_sigv4 is False, url
        operator = target.operator_client()
        assert (operator.sign_sigv4, operator.headers) == (False, {}), url  # the caller: SLUICE_LOCAL_CALLER
    for url in ("https://abc.execute-api.eu-west-1.amazonaws.com/prod", "https://127.example.com/x"):
        target = Target(state_dir=tmp_path / ".sluice", env={"SLUICE_API_URL": url})
        assert target.client().sign_sigv4 is True and target.operator_client().sign_sigv4 is True, url
