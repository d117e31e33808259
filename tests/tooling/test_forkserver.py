"""The local Lambda service's fork server: containers forked from one zygote that imported once, each
still a container of its own (environment, module state, session, death), as a fresh process was."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluice_dev.local.forkserver import PRELOAD, ForkServer
from sluice_dev.local.lambdas import Function, LocalLambda

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

# Imports from sluice (so the zygote preloads sluice's modules, as for sluice's functions), keeps
# state in its own module and in a preloaded one, and reads the environment.
HANDLER = '''
import os, sys
import sluice.core.config as config

calls = 0

def handler(event, context):
    global calls
    calls += 1
    seen = getattr(config, "_probe", None)
    config._probe = context.function_name
    if event.get("wait_for_kill"):
        import time
        time.sleep(30)
    return {"pid": os.getpid(), "sid": os.getsid(0), "calls": calls, "probe_before": seen,
            "only": os.environ.get("ONLY"), "shared": os.environ.get("SHARED"), "cwd": os.getcwd(),
            "argv": sys.argv[1:], "preloaded": "boto3" in sys.modules,
            "cmdline": open("/proc/self/cmdline", "rb").read().decode()}
'''


@pytest.fixture
def service(tmp_path: Path) -> Iterator[LocalLambda]:
    app = tmp_path / "fn" / "app.py"
    app.parent.mkdir()
    app.write_text(HANDLER)
    ref = f"{app}:handler"
    fns = [Function("a", ref, 10_000, 2, {"ONLY": "a", "SHARED": "x"}),
           Function("b", ref, 10_000, 1, {"SHARED": "y"})]
    svc = LocalLambda(fns, tmp_path / "logs").start()
    yield svc
    svc.stop()


def call(svc: LocalLambda, name: str, event: dict[str, Any] | None = None) -> Any:
    inv = svc.invoke(name, event or {}, asynchronous=False)
    assert inv.done.wait(30), f"{name} did not answer"
    assert inv.error is None, inv.error
    return inv.result


def test_each_forked_container_has_its_own_environment_module_state_and_session(service: LocalLambda) -> None:
    a, b = call(service, "a"), call(service, "b")
    assert (a["only"], a["shared"]) == ("a", "x") and (b["only"], b["shared"]) == (None, "y")
    # The zygote imported sluice and boto3, but no container's state leaks into another's.
    assert a["preloaded"] and b["preloaded"]
    assert a["calls"] == b["calls"] == 1 and a["probe_before"] is None and b["probe_before"] is None
    assert a["pid"] != b["pid"] and a["sid"] == a["pid"] and b["sid"] == b["pid"]
    assert a["cwd"] == os.getcwd() and a["argv"][0] == "a" and b["argv"][0] == "b"
    # ps shows each as the container it is (tests/stack/test_dev.py finds the functions so)
    assert a["cmdline"].split("\0")[1:5] == ["-m", "sluice_dev.local.container", "a", a["argv"][1]]
    assert b["cmdline"].rstrip("\0").split("\0")[2:4] == ["sluice_dev.local.container", "b"]
    again = call(service, "a")  # the warm container keeps its state, as a Lambda container does
    assert again["pid"] == a["pid"] and again["calls"] == 2 and again["probe_before"] == "a"
    zygote = next(iter(service._zygotes.values())).proc.pid
    assert zygote not in {a["pid"], b["pid"]}
    assert service.counts["cold_starts"] == 2


def test_a_killed_forked_container_is_reported_and_replaced_by_a_fresh_one(service: LocalLambda) -> None:
    first = call(service, "b")
    victim = service.invoke("b", {"wait_for_kill": True})
    deadline = time.monotonic() + 15
    while not [c for c in service.describe() if c["busy"]] and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(first["pid"], signal.SIGKILL)
    assert victim.done.wait(15)
    assert victim.error == f"container {first['pid']} exited with -9"
    assert service.counts["crashed"] == 1
    fresh = call(service, "b")
    assert fresh["pid"] != first["pid"] and fresh["calls"] == 1 and fresh["probe_before"] is None


def test_when_the_zygote_dies_its_containers_end_and_the_next_spawn_starts_another(
        service: LocalLambda) -> None:
    first = call(service, "a")
    zygote = next(iter(service._zygotes.values()))
    zygote.proc.kill()
    zygote.proc.wait(10)
    deadline = time.monotonic() + 10
    while service.describe() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert service.describe() == []
    with pytest.raises(ProcessLookupError):
        for _ in range(50):
            os.kill(first["pid"], 0)
            time.sleep(0.1)
    second = call(service, "a")
    assert second["pid"] != first["pid"] and second["calls"] == 1
    assert next(iter(service._zygotes.values())).proc.pid != zygote.proc.pid


def test_a_service_started_after_another_forks_from_the_same_zygote_with_fresh_containers(
        service: LocalLambda, tmp_path: Path) -> None:
    """A test file's stack, or a chaos run's, after another's in one process: its zygote has
    imported already, and its containers start as fresh as the first service's did."""
    first = call(service, "a")
    zygote = next(iter(service._zygotes.values()))
    ref = service.functions["a"].handler
    service.stop()
    assert zygote.alive  # kept for the next service, with none of the first one's containers
    later = LocalLambda([Function("a", ref, 10_000, 1, {"ONLY": "later"})], tmp_path / "later").start()
    try:
        again = call(later, "a")
        assert next(iter(later._zygotes.values())) is zygote
        assert again["pid"] != first["pid"] and again["calls"] == 1 and again["probe_before"] is None
        assert again["only"] == "later"
    finally:
        later.stop()


def test_a_fork_ends_at_its_stdins_eof_and_is_reaped_with_its_exit_code(tmp_path: Path) -> None:
    app = tmp_path / "app.py"
    app.write_text("def handler(event, context):\n    return event\n")
    with open(tmp_path / "log", "ab") as log:
        server = ForkServer(sys.executable, dict(os.environ), log)
        try:
            proc = server.spawn(["f", f"{app}:handler"], dict(os.environ), log)
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(b'{"id": 1, "event": {"x": 1}, "timeout_ms": 1000}\n')
            proc.stdin.flush()
            assert proc.stdout.readline() == b'{"id": 1, "result": {"x": 1}}\n'
            assert proc.poll() is None
            proc.stdin.close()
            assert proc.wait(10) == 0
            killed = server.spawn(["f", f"{app}:handler"], dict(os.environ), log)
            os.killpg(killed.pid, signal.SIGTERM)
            assert killed.wait(10) == -signal.SIGTERM
        finally:
            server.close()
    assert server.proc.returncode == 0
    assert "sluice.entry.root" in PRELOAD


def test_a_zygote_that_does_not_answer_in_time_is_given_up(tmp_path: Path) -> None:
    with open(tmp_path / "log", "ab") as log:
        server = ForkServer(sys.executable, dict(os.environ), log)  # still starting: it cannot answer
        try:
            with pytest.raises(OSError, match="did not fork"):
                server.spawn(["f", "x:handler"], dict(os.environ), log, timeout=0.001)
            assert not server.alive  # its late answer must not answer the next spawn
            with pytest.raises(OSError, match="ended"):
                server.spawn(["f", "x:handler"], dict(os.environ), log)
        finally:
            server.close()


def test_a_zygote_refuses_to_preload_a_module_that_reads_the_settings_at_import(tmp_path: Path) -> None:
    # worker_function prepares at import (Settings.from_env): every fork would keep the zygote's.
    with open(tmp_path / "log", "ab") as log:
        server = ForkServer(sys.executable, dict(os.environ), log, (*PRELOAD, "sluice.entry.worker_function"))
        try:
            with pytest.raises(OSError, match="fork"):
                server.spawn(["f", "x:handler"], dict(os.environ), log, timeout=30)
        finally:
            server.close()
    assert server.proc.returncode != 0
    assert "read the settings at import" in (tmp_path / "log").read_text()

