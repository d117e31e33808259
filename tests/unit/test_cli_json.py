"""The CLI's contract for scripts (issue 17): --json everywhere, JSON errors, --wait's exit codes,
arguments checked before any connection, and a --version that imports almost nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from sluice.client import Client
from sluice_dev.cli import main
from sluice_dev.cli.target import Target
from tests.unit.test_cli import all_commands
from tests.unit.test_client import ACCEPTED, JOB, FakeTransport, ok


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> CliRunner:
    for var in [v for v in os.environ if v.startswith("SLUICE_")]:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    return CliRunner(mix_stderr=False)


def json_error(result: Result) -> dict[str, Any]:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    error = json.loads(lines[0])["error"]
    assert set(error) == {"code", "message", "exit"} and error["exit"] == result.exit_code
    return dict(error)


def test_every_command_takes_json(runner: CliRunner) -> None:
    leaves = [c for c in all_commands(main) if c and not isinstance(_command(c), click.Group)]
    assert len(leaves) > 15
    missing = [" ".join(c) for c in leaves if "--json" not in runner.invoke(main, [*c, "--help"]).stdout]
    assert not missing, missing


def _command(path: tuple[str, ...]) -> click.Command:
    command: click.Command = main
    for name in path:
        assert isinstance(command, click.Group)
        command = command.commands[name]
    return command


def test_a_command_added_later_gets_json_too(runner: CliRunner) -> None:
    @click.command("later-cmd")
    def later() -> None:
        from sluice_dev.cli.output import emit

        emit({"ok": True}, "ok")

    @click.command("own-json")
    @click.option("--json", "as_json", is_flag=True)
    def own(as_json: bool) -> None:
        click.echo(f"as_json={as_json}")

    main.add_command(later)
    main.add_command(own)
    try:
        assert json.loads(runner.invoke(main, ["later-cmd", "--json"]).stdout) == {"ok": True}
        assert json.loads(runner.invoke(main, ["--json", "later-cmd"]).stdout) == {"ok": True}
        assert runner.invoke(main, ["later-cmd"]).stdout == "ok\n"
        assert runner.invoke(main, ["--json", "own-json"]).stdout == "as_json=True\n"
        assert runner.invoke(main, ["own-json", "--json"]).stdout == "as_json=True\n"
        assert runner.invoke(main, ["own-json"]).stdout == "as_json=False\n"
    finally:
        main.commands.pop("later-cmd")
        main.commands.pop("own-json")


@pytest.mark.parametrize("args", [
    ["queues", "--json"],
    ["--json", "queues"],
    ["queue", "pause", "echo", "--json"],
    ["queue", "caps", "echo", "--max-dead", "3", "--json"],
    ["dlq", "redrive", "echo", "--all", "--json"],
    ["dlq", "purge", "echo", "--yes", "--json"],
    ["top", "--once", "--json"],
    ["cancel", JOB, "--json"],
    ["status", JOB, "--json"],
])
def test_without_a_stack_the_error_is_json(runner: CliRunner, args: list[str]) -> None:
    result = runner.invoke(main, args)
    assert result.exit_code == 1 and result.stdout == ""
    error = json_error(result)
    assert error["code"] == "NO_TARGET" and error["message"].startswith("no local stack is running")


@pytest.mark.parametrize(("args", "code", "exit_code"), [
    (["enqueue", "echo", "--json"], "USAGE", 2),  # --payload is missing
    (["queues", "--json", "--no-such-option"], "USAGE", 2),
    (["--json", "no-such-command"], "USAGE", 2),
    (["enqueue", "echo", "-p", "{not json", "--json"], "INVALID_INPUT", 1),
    (["dlq", "purge", "echo", "--json"], "INVALID_INPUT", 1),
])
def test_usage_and_input_errors_are_json_too(runner: CliRunner, args: list[str], code: str,
                                            exit_code: int) -> None:
    result = runner.invoke(main, args)
    assert result.exit_code == exit_code
    assert json_error(result)["code"] == code


def test_without_json_errors_stay_one_line_of_text(runner: CliRunner) -> None:
    result = runner.invoke(main, ["queue", "pause", "echo"])
    assert result.exit_code == 1 and result.stderr.startswith("error: no local stack")


@pytest.mark.parametrize(("payload", "message"), [("{not json", "--payload is not JSON"),
                                                  ("@missing.json", "cannot read the payload file")])
def test_a_bad_payload_is_reported_before_a_missing_stack(runner: CliRunner, payload: str,
                                                          message: str) -> None:
    result = runner.invoke(main, ["enqueue", "echo", "--payload", payload])
    assert result.exit_code == 1
    assert message in result.stderr and "no local stack" not in result.stderr


def _view(status: str) -> dict[str, Any]:
    return {"job_id": JOB, "queue": "emails", "attempts": 1, "created_at_ms": 1, "updated_at_ms": 2,
            "status": status}


def _fake_api(monkeypatch: pytest.MonkeyPatch, *replies: Any) -> None:
    fake = Client("http://api.test", transport=FakeTransport(*replies), sleep=lambda _s: None)
    monkeypatch.setattr(Target, "client", lambda _self: fake)
    monkeypatch.setattr(Target, "has_api", lambda _self: True)


@pytest.mark.parametrize(("status", "exit_code"), [("succeeded", 0), ("failed", 4), ("dead", 5),
                                                   ("cancelled", 6)])
def test_wait_exits_with_the_code_of_the_final_state(runner: CliRunner, monkeypatch: pytest.MonkeyPatch,
                                                     status: str, exit_code: int) -> None:
    _fake_api(monkeypatch, ok(ACCEPTED, 202), ok(_view("leased")), ok(_view(status)))
    result = runner.invoke(main, ["enqueue", "emails", "-p", "{}", "--wait", "--json"])
    assert result.exit_code == exit_code, result.stderr
    assert json.loads(result.stdout)["status"] == status
    _fake_api(monkeypatch, ok(_view(status)))
    assert runner.invoke(main, ["status", JOB, "--wait"]).exit_code == exit_code
    _fake_api(monkeypatch, ok(_view(status)))
    assert runner.invoke(main, ["status", JOB]).exit_code == 0  # without --wait: a report, not a verdict


def test_a_wait_that_times_out_says_so(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_api(monkeypatch, ok(_view("leased")))
    result = runner.invoke(main, ["status", JOB, "--wait", "--timeout", "0.01"])
    assert result.exit_code == 7
    assert result.stderr.startswith("error: gave up waiting after 0.01s") and "still leased" in result.stderr
    assert "cannot connect" not in result.stderr
    _fake_api(monkeypatch, ok(ACCEPTED, 202), ok(_view("queued")))
    result = runner.invoke(main, ["enqueue", "emails", "-p", "{}", "--wait", "--timeout", "0.01", "--json"])
    assert result.exit_code == 7 and json_error(result)["code"] == "WAIT_TIMEOUT"


def test_check_as_json(runner: CliRunner) -> None:
    result = runner.invoke(main, ["check", "sluice_dev.examples", "--json"])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["function"] == "WorkerFunction"
    echo = next(q for q in report["queues"] if q["queue"] == "echo")
    assert (echo["timeout_s"], echo["timeout_from"], echo["fits"]) == (268, "default", True)
    result = runner.invoke(main, ["check", "sluice.no_such_handlers", "--json"])
    assert result.exit_code == 1 and json_error(result)["code"] == "NO_HANDLER"


@pytest.mark.parametrize("args", [["queue", "pause", "Bad!"], ["queue", "caps", "Bad!", "--max-dead", "1"],
                                  ["dlq", "list", "Bad!"], ["dlq", "purge", "Bad!", "--yes"],
                                  ["dlq", "redrive", "echo", "bad id!"]])
def test_a_bad_queue_name_or_job_id_is_reported_before_a_missing_stack(runner: CliRunner,
                                                                       args: list[str]) -> None:
    result = runner.invoke(main, [*args, "--json"])
    assert result.exit_code == 1
    assert json_error(result)["code"] in ("INVALID_QUEUE", "INVALID_INPUT")
