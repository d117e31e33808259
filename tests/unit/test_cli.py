"""The CLI without any stack: help everywhere, and one-line errors with a non-zero exit."""

from __future__ import annotations

import os
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from sluice.core.errors import InvalidInput
from sluice_dev.cli import main
from sluice_dev.cli.jobs import parse_payload


def all_commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = [prefix]
    for name, cmd in group.commands.items():
        if isinstance(cmd, click.Group):
            out += all_commands(cmd, (*prefix, name))
        else:
            out.append((*prefix, name))
    return out


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> CliRunner:
    for var in [v for v in os.environ if v.startswith("SLUICE_")]:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    return CliRunner()


def test_every_command_has_help(runner: CliRunner) -> None:
    commands = all_commands(main)
    names = {" ".join(c) for c in commands}
    for expected in ("enqueue", "status", "queues", "queue pause", "queue resume", "queue rate",
                     "queue limit", "queue caps",
                     "dlq list", "dlq redrive", "dlq purge", "top", "dev", "demo"):
        assert expected in names
    for command in commands:
        result = runner.invoke(main, [*command, "--help"])
        assert result.exit_code == 0, (command, result.output)
        assert "Usage:" in result.output


@pytest.mark.parametrize("args", [
    ["enqueue", "echo", "--payload", "{}"],
    ["status", "01ABC"],
    ["queues"],
    ["queue", "pause", "echo"],
    ["queue", "rate", "echo", "--per-second", "5", "--burst", "2"],
    ["queue", "limit", "echo", "--max-in-flight", "3"],
    ["queue", "limit", "echo", "--per-group", "2"],
    ["enqueue", "echo", "--payload", "{}", "--group", "org:42"],
    ["dlq", "list", "echo"],
    ["dlq", "redrive", "echo", "--all"],
    ["dlq", "purge", "echo", "--yes"],
    ["top", "--once"],
])
def test_without_a_stack_every_command_says_so_in_one_line(runner: CliRunner, args: list[str]) -> None:
    result = runner.invoke(main, args)
    assert result.exit_code != 0
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error: no local stack is running")
    assert "sluice dev" in lines[0]
    assert "Traceback" not in result.output


@pytest.mark.parametrize(("args", "message"), [
    (["enqueue", "echo", "--payload", "{not json"], "--payload is not JSON"),
    (["enqueue", "Bad Queue!", "--payload", "1"], "invalid queue name"),
    (["dlq", "purge", "echo"], "--yes"),
    (["dlq", "redrive", "echo"], "either a JOB_ID or --all"),
    (["dlq", "redrive", "echo", "01ABC", "--all"], "either a JOB_ID or --all"),
    (["enqueue", "echo", "--payload", "1", "--group", "bad group"], "group"),
    (["queue", "limit", "echo"], "--max-in-flight, --per-group or both"),
])
def test_bad_input_is_refused_before_anything_is_contacted(runner: CliRunner, args: list[str],
                                                           message: str) -> None:
    result = runner.invoke(main, ["--api-url", "http://127.0.0.1:9", *args])
    assert result.exit_code == 1
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_usage_errors_exit_2_with_clicks_message(runner: CliRunner) -> None:
    result = runner.invoke(main, ["enqueue", "echo"])
    assert result.exit_code == 2
    assert "--payload" in result.output
    result = runner.invoke(main, ["enqueue", "echo", "--payload", "1", "--priority", "10"])
    assert result.exit_code == 2


def test_payload_from_a_file(tmp_path: Path) -> None:
    f = tmp_path / "p.json"
    f.write_text('{"a": [1, 2]}')
    assert parse_payload(f"@{f}") == {"a": [1, 2]}
    with pytest.raises(InvalidInput, match="cannot read"):
        parse_payload(f"@{tmp_path / 'missing.json'}")


def test_version(runner: CliRunner) -> None:
    result = runner.invoke(main, ["--version"])
    assert result.exit_code == 0
    assert "sluice" in result.output


def test_dev_with_a_handlers_module_that_does_not_import_fails_before_starting_anything(
        runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(main, ["dev", "--handlers", "no_such_module_xyz"])
    assert result.exit_code == 1
    assert "no_such_module_xyz" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / ".sluice" / "dev.pid").exists()  # the claim was given back


def test_dev_suggests_a_first_job_on_a_queue_its_handlers_have() -> None:
    """`sluice dev --handlers myapp.jobs` (README) used to suggest `sluice enqueue echo`, a queue
    those handlers lack: the job went dead ("no handler registered for queue 'echo'")."""
    from sluice import Worker
    from sluice_dev.cli.local import try_hint

    assert try_hint(Worker().handlers) is None
    examples = try_hint(__import__("sluice_dev.examples", fromlist=["app"]).app.handlers)
    assert examples == "sluice enqueue echo --payload '{\"hello\": \"world\"}' --wait"
    app = Worker()
    app.handler("thumbnails")(lambda job, ctx: None)
    app.handler("archive")(lambda job, ctx: None)
    assert try_hint(app.handlers) == ("sluice enqueue archive --payload '<its JSON payload>' --wait   "
                                      "(queues: archive, thumbnails)")


def test_dev_runs_a_team_worker_from_the_teams_own_template(runner: CliRunner, tmp_path: Path) -> None:
    """docs/teams.md: the team deploys its own copy of infra/worker.yaml (its memory, timeout...);
    `sluice dev --worker` read only the checkout's. --worker-template names the team's copy: here
    one whose TeamName pattern refuses "media", before anything starts."""
    from tests.infra import cfn

    text = (cfn.ROOT / "infra" / "worker.yaml").read_text()
    pattern = "AllowedPattern: ^[a-z0-9][a-z0-9-]{0,20}$"
    assert text.count(pattern) == 1
    (tmp_path / "worker.yaml").write_text(text.replace(pattern, "AllowedPattern: ^[a-z]{1,3}$"))
    result = runner.invoke(main, ["dev", "--worker", "media=sluice_dev.examples_team",
                                  "--worker-template", str(tmp_path / "worker.yaml")])
    assert result.exit_code == 1, result.output
    assert "TeamName='media' does not match ^[a-z]{1,3}$" in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / ".sluice" / "dev.pid").exists()


def test_jobs_list_says_which_fields_the_operator_function_left_unread(
        runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    """Session 39 (``sluice.core.read_bounds``): an unread payload or error prints as [not read], not as
    "-" or blank, which would read as a job that has none."""
    from sluice.core.listing import JobPage, ListedJob
    from sluice_dev.cli.target import Target

    page = JobPage(queue="q", state="dead", jobs=[
        ListedJob(job_id="a", state="dead", attempts=1, unread=["payload", "last_error"]),
        ListedJob(job_id="b", state="dead", attempts=1, payload=None, last_error=None)])

    class Operator:
        def list_jobs(self, *_a: object, **_k: object) -> JobPage:
            return page

    monkeypatch.setattr(Target, "operator_client", lambda *_a, **_k: Operator())
    result = runner.invoke(main, ["jobs", "list", "q", "--state", "dead"])
    assert result.exit_code == 0, result.output
    row_a = next(line for line in result.output.splitlines() if "│ a " in line)
    row_b = next(line for line in result.output.splitlines() if "│ b " in line)
    assert row_a.count("[not read]") == 2 and "[not read]" not in row_b


def test_dlq_list_prints_a_handlers_error_as_its_text_not_as_rich_markup(
        runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    """Session 39: an error in brackets ("[not read: ...]", or a handler's own "[bold]...") printed
    blank or restyled: the table read it as rich markup."""
    from sluice.core.models import DeadJob
    from sluice_dev.cli.target import Target

    dead = [DeadJob(job_id="a", queue="q", attempts=1, died_at_ms=0, last_error="[not read: 10 bytes]"),
            DeadJob(job_id="b", queue="q", attempts=2, died_at_ms=0,
                    last_error="[bold]boom[/bold] [link=x]y")]

    class Operator:
        def dead_letters(self, *_a: object) -> list[DeadJob]:
            return dead

    monkeypatch.setattr(Target, "operator_api", lambda *_a, **_k: Operator())
    result = runner.invoke(main, ["dlq", "list", "q"])
    assert result.exit_code == 0, result.output
    assert "[not read: 10 bytes]" in result.output and "[bold]boom[/bold] [link=x]y" in result.output
