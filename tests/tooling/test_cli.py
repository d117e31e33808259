"""Every CLI command against one running local stack (started once for the module)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from sluice.backends.redis.engine import RedisQueue
from sluice_dev.cli import main
from sluice_dev.local.dev import DevOptions, DevStack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, Any]]]:
    state = tmp_path_factory.mktemp("cli") / ".sluice"
    dev = DevStack(DevOptions(state_dir=state, workers=2, gateway_concurrency=2, log_level="WARNING",
                              safety_net_every_s=1, settings={"default_lease_seconds": 5}))
    endpoints = dev.start()
    yield state, endpoints
    dev.stop()


@pytest.fixture
def cli(stack: tuple[Path, dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> Any:
    for var in [v for v in os.environ if v.startswith("SLUICE_")]:
        monkeypatch.delenv(var)
    state, _ = stack
    runner = CliRunner()

    def run(*args: str, ok: bool = True) -> Result:
        result = runner.invoke(main, ["--state-dir", str(state), *args])
        if ok:
            assert result.exit_code == 0, (args, result.output)
        return result

    return run


@pytest.fixture
def engine(stack: tuple[Path, dict[str, Any]]) -> RedisQueue:
    return RedisQueue.from_url(stack[1]["redis_url"])


def test_enqueue_wait_and_status(cli: Any) -> None:
    out = cli("enqueue", "echo", "--payload", '{"n": 1}', "--json")
    job_id = json.loads(out.output)["job_id"]
    done = json.loads(cli("status", job_id, "--wait", "--json").output)
    assert done["status"] == "succeeded" and done["result"] == {"echo": {"n": 1}}
    plain = cli("status", job_id).output
    assert job_id in plain and "succeeded" in plain and '{"echo": {"n": 1}}' in plain
    waited = cli("enqueue", "hash", "-p", '{"data": "x", "rounds": 3}', "--wait").output
    assert "succeeded" in waited and "sha256" in waited


def test_idempotency_key_returns_the_same_job(cli: Any) -> None:
    first = cli("enqueue", "echo", "-p", "[1]", "-k", "cli-key-1").output.split()[0]
    second = cli("enqueue", "echo", "-p", "[1]", "-k", "cli-key-1").output.split()[0]
    assert first == second
    conflict = cli("enqueue", "echo", "-p", "[2]", "-k", "cli-key-1", ok=False)
    assert conflict.exit_code == 1 and "error:" in conflict.output


def test_delayed_job_can_be_cancelled(cli: Any) -> None:
    job_id = cli("enqueue", "echo", "-p", "1", "--delay", "60").output.split()[0]
    assert "cancelled" in cli("cancel", job_id).output
    assert "cancelled" in cli("status", job_id).output


def test_unknown_job_is_one_line_and_exit_3(cli: Any) -> None:
    result = cli("status", "01NOSUCHJOB0000000000000000", ok=False)
    assert result.exit_code == 3
    assert result.output.strip().startswith("error:") and len(result.output.strip().splitlines()) == 1


def test_queue_knobs_change_the_config_the_relay_reads(cli: Any, engine: RedisQueue) -> None:
    assert "paused" in cli("queue", "pause", "knobs").output
    assert engine.get_config("knobs").paused
    assert "50/s burst 7" in cli("queue", "rate", "knobs", "--per-second", "50", "--burst", "7").output
    assert "max in flight 3" in cli("queue", "limit", "knobs", "--max-in-flight", "3").output
    assert "pause above 100, resume below 40" in cli("queue", "watermark", "knobs", "--high", "100",
                                                     "--low", "40").output
    assert "running" in cli("queue", "resume", "knobs").output
    assert "delayed 500, dead default" in cli("queue", "caps", "knobs", "--max-delayed", "500").output
    assert "bytes 65536" in cli("queue", "caps", "knobs", "--max-bytes", "65536").output
    config = engine.get_config("knobs")
    assert (config.paused, config.rate_per_s, config.burst, config.max_in_flight) == (False, 50.0, 7, 3)
    rows = [json.loads(x) for x in cli("queues", "--json").output.splitlines()]
    knobs = next(r for r in rows if r["queue"] == "knobs")
    assert (knobs["rate_per_s"], knobs["burst"], knobs["max_in_flight"], knobs["paused"]) == \
        (50.0, 7, 3, False)
    assert (knobs["max_delayed"], knobs["max_dead"]) == (500, 0)
    assert (knobs["max_bytes"], knobs["budget_bytes"], knobs["used_bytes"]) == (65536, 65536, 0)
    table = cli("queues").output
    assert "in redis" in table and "0 B / 64.0 KB (0%)" in table
    cli("queue", "caps", "knobs", "--max-bytes", "0")  # back to the deployment's default budget
    rows = [json.loads(x) for x in cli("queues", "--json").output.splitlines()]
    knobs = next(r for r in rows if r["queue"] == "knobs")
    assert (knobs["max_bytes"], knobs["budget_bytes"]) == (0, 32 * 1024 * 1024)
    table = cli("queues").output
    assert "knobs" in table and "echo" in table and "sluice-relay" not in table
    bad = cli("queue", "rate", "knobs", "--per-second", "-1", ok=False)
    assert bad.exit_code == 1 and "error:" in bad.output


def wait_dead(engine: RedisQueue, queue: str, n: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while engine.stats(queue).dead < n:
        assert time.monotonic() < deadline, engine.stats(queue)
        time.sleep(0.2)


def test_dead_letters_list_redrive_and_purge(cli: Any, engine: RedisQueue) -> None:
    ids = [cli("enqueue", "flaky", "-p", json.dumps({"always_fail": True, "n": i}), "--max-attempts", "1")
           .output.split()[0] for i in range(2)]
    wait_dead(engine, "flaky", 2)
    listed = [json.loads(x) for x in cli("dlq", "list", "flaky", "--json").output.splitlines()]
    assert {d["job_id"] for d in listed} >= set(ids)
    assert all("on purpose" in (d["last_error"] or "") for d in listed)
    assert ids[0] in cli("dlq", "list", "flaky").output
    assert "1 job back" in cli("dlq", "redrive", "flaky", ids[0]).output
    assert engine.stats("flaky").dead == 1
    wait_dead(engine, "flaky", 2)  # it ran again, and failed again
    missing = cli("dlq", "redrive", "flaky", "01NOSUCHJOB0000000000000000", ok=False)
    assert missing.exit_code == 3
    assert "2 jobs back" in cli("dlq", "redrive", "flaky", "--all").output
    wait_dead(engine, "flaky", 2)
    assert "2 dead jobs purged" in cli("dlq", "purge", "flaky", "--yes").output
    assert engine.stats("flaky").dead == 0
    assert "no dead jobs" in cli("dlq", "list", "flaky").output


def test_top_once_shows_queues_and_throughput(cli: Any) -> None:
    cli("enqueue", "echo", "-p", "2", "--wait")
    out = cli("top", "--once").output
    assert "echo" in out and "overdue leases" in out and "acked since start" in out


def test_the_console_script_itself(stack: tuple[Path, dict[str, Any]]) -> None:
    state, _ = stack
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    result = subprocess.run([str(Path(sys.executable).parent / "sluice"), "--state-dir", str(state), "queues",
                             "--json"], capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    assert any(json.loads(x)["queue"] == "echo" for x in result.stdout.splitlines())


def test_operators_reach_redis_and_dynamodb_through_settings_without_a_local_stack(
        stack: tuple[Path, dict[str, Any]], cli: Any, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    _state, endpoints = stack
    job_id = cli("enqueue", "echo", "-p", '"direct"', "--wait").output.split()[0]
    monkeypatch.setenv("SLUICE_REDIS_URL", endpoints["redis_url"])
    monkeypatch.setenv("SLUICE_JOBS_TABLE", endpoints["jobs_table"])
    monkeypatch.setenv("SLUICE_AWS_ENDPOINT_URL", endpoints["aws_endpoint_url"])
    runner = CliRunner()
    elsewhere = ["--state-dir", str(tmp_path / "no-stack-here")]
    queues = runner.invoke(main, [*elsewhere, "queues", "--json"])
    assert queues.exit_code == 0, queues.output
    assert any(json.loads(x)["queue"] == "echo" for x in queues.output.splitlines())
    status = runner.invoke(main, [*elsewhere, "status", job_id, "--json"])
    assert status.exit_code == 0, status.output
    record = json.loads(status.output)
    assert record["status"] == "succeeded" and record["result"] == {"echo": "direct"}


def test_wait_exit_codes_and_json_output_on_a_real_stack(cli: Any, engine: RedisQueue) -> None:
    failed = cli("enqueue", "hash", "-p", "[1]", "--wait", "--json", ok=False)  # the handler Fails
    assert failed.exit_code == 4 and json.loads(failed.output)["status"] == "failed"
    dead = cli("enqueue", "flaky", "-p", json.dumps({"always_fail": True, "n": "exit-5"}),
               "--max-attempts", "1", "--wait", ok=False)
    assert dead.exit_code == 5 and "dead" in dead.output
    job_id = json.loads(cli("enqueue", "echo", "-p", "1", "--delay", "60", "--json").output)["job_id"]
    timed_out = cli("status", job_id, "--wait", "--timeout", "0.5", ok=False)
    assert timed_out.exit_code == 7 and "gave up waiting" in timed_out.output
    assert "cannot connect" not in timed_out.output
    assert json.loads(cli("cancel", job_id, "--json").output)["status"] == "cancelled"
    assert cli("status", job_id, "--wait", ok=False).exit_code == 6
    missing = cli("status", "01NOSUCHJOB0000000000000000", "--json", ok=False)
    assert missing.exit_code == 3 and json.loads(missing.output)["error"]["code"] == "NOT_FOUND"

    paused = json.loads(cli("queue", "pause", "jsonknobs", "--json").output)
    assert (paused["queue"], paused["paused"]) == ("jsonknobs", True)
    assert json.loads(cli("queue", "caps", "jsonknobs", "--max-dead", "9", "--json").output)["max_dead"] == 9
    assert json.loads(cli("queue", "resume", "jsonknobs", "--json").output)["paused"] is False
    assert json.loads(cli("dlq", "redrive", "hash", "--all", "--json").output) == \
        {"queue": "hash", "moved": 1, "refused": {}}
    wait_dead(engine, "hash", 1)  # it ran again, and Failed again
    assert json.loads(cli("dlq", "purge", "hash", "--yes", "--json").output) == {"queue": "hash", "purged": 1}
    snapshot = json.loads(cli("top", "--once", "--json").output)
    assert any(q["queue"] == "echo" and "overdue_leases" in q for q in snapshot["queues"])


def test_queue_sensitive_on_redis_keeps_the_durable_copy_and_refuses_internal_queues(
        stack: tuple[Path, dict[str, Any]], cli: Any, engine: RedisQueue) -> None:
    # It wrote the config hash only: a Redis loss unmarked the fields, and an internal queue, which
    # the operator API refuses, was taken.
    from sluice_dev.cli.target import Target

    directory = Target(stack[0], env={}).queue_directory()
    assert directory is not None
    assert "sensitive /secret" in cli("queue", "sensitive", "sens", "/secret").output
    assert engine.get_config("sens").sensitive == ("/secret",)
    assert directory.sensitive_of("sens") == ("/secret",)
    internal = cli("queue", "sensitive", "sluice-relay", "/x", ok=False)
    assert internal.exit_code != 0 and "reserved" in internal.output
    assert engine.get_config("sluice-relay").sensitive == () and directory.sensitive_of("sluice-relay") == ()
