"""The nemesis's fault delivery: arming files taken by one process, fallbacks, pauses and wake-ups.

Real child processes stand in for workers (a process runtime's slot or a Lambda container):
the nemesis signals whatever pid its ``Targets`` picks, and a process that takes an arming
stops or kills itself.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluice_dev.chaos import history
from sluice_dev.chaos.app import Control
from sluice_dev.chaos.nemesis import Fault, Nemesis
from sluice_dev.chaos.procs import process_state

pytestmark = pytest.mark.timeout(60)


class Targets:
    def __init__(self, pid: int | None) -> None:
        self.pid = pid

    def arming(self, target: str) -> str:
        return "worker"

    def pick(self, target: str) -> int | None:
        return self.pid


class NoServers:
    def restart_redis(self) -> None:
        raise AssertionError("not in this test")

    def restart_redis_shard(self, index: int) -> None:
        raise AssertionError("not in this test")

    def restart_broker(self) -> None:
        raise AssertionError("not in this test")

    def flush_registry_shard(self) -> str:
        raise AssertionError("not in this test")

    def rotate_job_id_key(self) -> str:
        raise AssertionError("not in this test")


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait(10)


def wait_for(pred: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return False


def arm(control_dir: Path, kind: str, until: float, arming_id: str = "1") -> None:
    (control_dir / "worker.json").write_text(json.dumps({"kind": kind, "until": until, "id": arming_id}))


def test_an_arming_is_taken_by_one_process_only_and_only_for_its_kind(tmp_path: Path) -> None:
    h = history.History(tmp_path / "h.jsonl")
    a, b = Control(tmp_path, "worker", h), Control(tmp_path, "worker", h)
    arm(tmp_path, "kill_worker_before_ack", time.time() + 5)
    a.strike("kill_worker_mid_job", sig=0)  # another kind: not this one's
    assert (tmp_path / "worker.json").exists()
    a.strike("kill_worker_before_ack", sig=0, job="j1")  # signal 0: delivered, harmless
    b.strike("kill_worker_before_ack", sig=0, job="j2")
    landed = [e for e in history.read(tmp_path / "h.jsonl") if e.get("phase") == "landed"]
    assert [e["job"] for e in landed] == ["j1"]
    assert [p.name for p in tmp_path.glob("landed-*")] == [f"landed-1-{os.getpid()}"]
    arm(tmp_path, "kill_worker_before_ack", time.time() - 1, "2")  # expired
    b.strike("kill_worker_before_ack", sig=0, job="j3")
    assert len([e for e in history.read(tmp_path / "h.jsonl") if e.get("phase") == "landed"]) == 1


def test_an_armed_kill_nobody_reaches_falls_back_to_a_sigkill_of_the_picked_process(
        tmp_path: Path, child: subprocess.Popen[bytes]) -> None:
    h = history.History(tmp_path / "h.jsonl")
    nem = Nemesis([], Targets(child.pid), NoServers(), h, tmp_path, arm_s=0.3)
    nem.inject(Fault(0, "kill_worker_mid_job", "w1"))
    assert child.wait(10) == -9
    events = history.read(tmp_path / "h.jsonl")
    assert [e["phase"] for e in events] == ["injected", "fallback"] and events[1]["victim"] == child.pid
    assert not (tmp_path / "worker.json").exists()
    nem.close()


def test_a_landed_kill_is_not_followed_by_a_fallback(tmp_path: Path, child: subprocess.Popen[bytes]) -> None:
    h = history.History(tmp_path / "h.jsonl")
    nem = Nemesis([], Targets(child.pid), NoServers(), h, tmp_path, arm_s=0.3)
    nem.inject(Fault(0, "kill_worker_before_ack", "w0"))
    Control(tmp_path, "worker", h).strike("kill_worker_before_ack", sig=0)
    time.sleep(0.6)
    assert child.poll() is None
    assert [e["phase"] for e in history.read(tmp_path / "h.jsonl")] == ["injected", "landed"]
    nem.close()


def test_a_pause_stops_the_picked_process_for_its_hold_then_wakes_it(
        tmp_path: Path, child: subprocess.Popen[bytes]) -> None:
    h = history.History(tmp_path / "h.jsonl")
    nem = Nemesis([], Targets(child.pid), NoServers(), h, tmp_path)
    nem.inject(Fault(0, "pause_worker", "w2", hold_s=0.5))
    assert wait_for(lambda: process_state(child.pid) == "T")
    assert wait_for(lambda: process_state(child.pid) not in ("T", ""))

    def resumed() -> list[dict[str, Any]]:  # the nemesis writes its line once SIGCONT has been sent
        return [e for e in history.read(tmp_path / "h.jsonl") if e["phase"] == "resumed"]

    assert wait_for(lambda: bool(resumed()))
    assert resumed()[0]["victim"] == child.pid
    nem.close()


SELF_STOPPER = """
import signal, sys, time
from sluice_dev.chaos import history
from sluice_dev.chaos.app import Control
control = Control(sys.argv[1], "worker", history.History(sys.argv[2]))
while True:  # a worker reaching its fault point, job after job
    control.strike("pause_worker_before_write", signal.SIGSTOP)
    time.sleep(0.02)
"""


def test_a_process_that_stops_itself_at_the_point_is_found_by_its_claim_and_woken(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    h = history.History(path)
    proc = subprocess.Popen([sys.executable, "-c", SELF_STOPPER, str(tmp_path), str(path)])
    try:
        nem = Nemesis([], Targets(None), NoServers(), h, tmp_path, arm_s=10)
        nem.inject(Fault(0, "pause_worker_before_write", "w0", hold_s=1.0))
        assert wait_for(lambda: process_state(proc.pid) == "T")
        assert wait_for(lambda: any(e["phase"] == "resumed" for e in history.read(path)))
        assert process_state(proc.pid) not in ("T", "")
        phases = [(e["phase"], e["pid"]) for e in history.read(path)]
        assert phases == [("injected", os.getpid()), ("landed", proc.pid), ("resumed", os.getpid())]
        nem.close()
    finally:
        proc.kill()
        proc.wait(10)


def test_the_lambda_runtime_aims_at_running_busy_containers_of_the_targets_function(
        tmp_path: Path, child: subprocess.Popen[bytes]) -> None:
    from types import SimpleNamespace

    from sluice_dev.chaos.runtimes import LambdaRuntime
    from sluice_dev.local.dev import RELAY_FUNCTION, WORKER_FUNCTION

    me = os.getpid()
    containers = [{"pid": me, "function": WORKER_FUNCTION, "busy": False},
                  {"pid": child.pid, "function": WORKER_FUNCTION, "busy": True},
                  {"pid": me, "function": RELAY_FUNCTION, "busy": True}]
    rt = LambdaRuntime(SimpleNamespace(lease_s=2.0, workers=3), tmp_path, history.History(tmp_path / "h"))
    rt.dev = SimpleNamespace(lambdas=SimpleNamespace(describe=lambda: containers))
    assert (rt.arming("w2"), rt.arming("r0")) == ("worker", "relay")
    assert rt.pick("w0") == rt.pick("w2") == child.pid  # the busy one, whatever the slot
    assert rt.pick("r0") == me
    os.kill(child.pid, signal.SIGSTOP)  # a container already paused is not picked again
    assert wait_for(lambda: process_state(child.pid) == "T")
    assert rt.pick("w1") == me  # only idle ones left: one of those
    os.kill(child.pid, signal.SIGCONT)
    containers.clear()
    assert rt.pick("w0") is None


class ShardServers(NoServers):
    """Records what the nemesis asked of the servers."""

    def __init__(self) -> None:
        self.restarted: list[int] = []
        self.calls: list[str] = []

    def restart_redis_shard(self, index: int) -> None:
        self.restarted.append(index)

    def flush_registry_shard(self) -> str:
        self.calls.append("flush")
        return "flushall shard 1 of 3"

    def rotate_job_id_key(self) -> str:
        self.calls.append("rotate")
        return "new key id 7"


def test_a_shard_restart_restarts_the_shard_it_names_only(tmp_path: Path) -> None:
    h = history.History(tmp_path / "h.jsonl")
    servers = ShardServers()
    nem = Nemesis([], Targets(None), servers, h, tmp_path)
    nem.inject(Fault(1.0, "restart_redis_shard", "redis-shard2"))
    nem.inject(Fault(2.0, "restart_redis_shard", "redis-shard0"))
    assert servers.restarted == [2, 0]
    assert nem.injected["restart_redis_shard"] == 2


def test_a_registry_flush_and_a_key_rotation_reach_the_servers_and_say_what_they_did(tmp_path: Path) -> None:
    servers = ShardServers()
    nem = Nemesis([], Targets(None), servers, history.History(tmp_path / "h.jsonl"), tmp_path)
    nem.inject(Fault(1.0, "flush_registry_shard", "redis-registry"))
    nem.inject(Fault(2.0, "rotate_job_id_key", "job-id-key"))
    assert servers.calls == ["flush", "rotate"]
    assert nem.injected == {"flush_registry_shard": 1, "rotate_job_id_key": 1}
    faults = [(e["kind"], e["phase"], e.get("detail")) for e in history.read(tmp_path / "h.jsonl")
              if e.get("op") == "fault"]
    assert faults == [("flush_registry_shard", "injected", None),
                      ("flush_registry_shard", "done", "flushall shard 1 of 3"),
                      ("rotate_job_id_key", "injected", None), ("rotate_job_id_key", "done", "new key id 7")]
