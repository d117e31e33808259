"""Run a Sluice worker as a real OS process, and drive it from a test.

As a script: ``python -m tests.backends.worker_procs '<json config>'`` runs a worker
on one queue against a real Redis and the moto server until it has leased
``max_jobs`` jobs (or gets SIGTERM), logging Powertools JSON lines to stdout and a
final ``{"summary": ...}`` line.

The queue's handler reads its payload: ``{"n": 7, "sleep": 1.5, "spin": 2.0, "tag": true}``
sleeps ``sleep * sleep_scale`` s, spins the CPU in pure Python for ``spin`` s, and
returns ``{"square": 49}`` (plus ``"by": <process name>`` when ``tag``); with ``"fail": true``
in the config it raises instead (a retryable error).

``hook`` places a fault exactly: ``kill-before-ack`` SIGKILLs the process after the
result was written and before the ack; ``stop-before-write`` SIGSTOPs it after the
runtime's own lease check and just before the fenced write.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


# -- the child ---------------------------------------------------------------------------------


def spin(seconds: float) -> int:
    end, n = time.perf_counter() + seconds, 0
    while time.perf_counter() < end:
        for i in range(500):
            n += i * i % 7
    return n


def build_worker(cfg: dict[str, Any]) -> Any:
    from sluice.backends.dynamodb.jobs import DynamoJobStore
    from sluice.backends.redis.engine import RedisQueue
    from sluice.core.bus import Acking, ResultWriting
    from sluice.core.config import Settings
    from sluice.worker.registry import Worker
    from sluice.worker.runtime.options import WorkerOptions
    from sluice.worker.runtime.telemetry import MemoryMetrics, Telemetry

    s = Settings(redis_url=cfg["redis_url"], aws_endpoint_url=cfg["moto_url"], jobs_table=cfg["table"],
                 results_bucket=cfg["bucket"])
    app = Worker()
    name, scale = cfg["name"], float(cfg.get("sleep_scale", 1.0))

    @app.handler(cfg["queue"], timeout_s=cfg.get("timeout_s", 30))
    def work(job: Any, ctx: Any) -> dict[str, Any]:
        p = job.payload
        if p.get("spin"):
            spin(float(p["spin"]))
        if p.get("sleep"):
            time.sleep(float(p["sleep"]) * scale)
        if cfg.get("fail"):
            raise RuntimeError(f"{name} was told to fail")
        return {"square": p["n"] ** 2, **({"by": name} if p.get("tag") else {})}

    metrics = MemoryMetrics()
    worker = app.bind(queue=RedisQueue.from_settings(s), store=DynamoJobStore.from_settings(s),
                      options=WorkerOptions(lease_ms=int(cfg["lease_ms"]), lease_batch=1),
                      telemetry=Telemetry(metrics), worker_id=f"{name}:{os.getpid()}")

    def kill_self(_e: Acking) -> None:
        worker.telemetry.logger.info("about to die before the ack")
        os.kill(os.getpid(), signal.SIGKILL)

    def stop_self(_e: ResultWriting) -> None:
        worker.telemetry.logger.info("freezing before the write")
        os.kill(os.getpid(), signal.SIGSTOP)

    if cfg.get("hook") == "kill-before-ack":
        worker.events.subscribe(kill_self, Acking)
    elif cfg.get("hook") == "stop-before-write":
        worker.events.subscribe(stop_self, ResultWriting)
    return worker, metrics


def main(argv: list[str]) -> int:
    cfg = json.loads(argv[0])
    worker, metrics = build_worker(cfg)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    total = worker.run([cfg["queue"]], stop=stop, idle_s=0.05, max_jobs=int(cfg.get("max_jobs", 1)))
    print(json.dumps({"summary": total.as_dict(), "metrics": dict(metrics.counts)}), flush=True)
    return 0


# -- the parent ---------------------------------------------------------------------------------


@dataclass
class WorkerProc:
    """A worker child process whose JSON stdout lines are collected as they arrive."""

    name: str
    proc: subprocess.Popen[str]
    lines: list[dict[str, Any]] = field(default_factory=list)
    _cond: threading.Condition = field(default_factory=threading.Condition)

    @classmethod
    def start(cls, name: str, **cfg: Any) -> WorkerProc:
        # DEBUG: the stories wait for "job started", a DEBUG line since issue 33 (one INFO line a job).
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               "POWERTOOLS_LOG_LEVEL": "DEBUG", "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen([sys.executable, "-m", "tests.backends.worker_procs",
                                 json.dumps({"name": name, **cfg})], cwd=ROOT, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        me = cls(name, proc)
        threading.Thread(target=me._read, daemon=True).start()
        return me

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                line = json.loads(raw)
            except ValueError:
                line = {"message": raw.rstrip()}
            if not isinstance(line, dict):
                line = {"message": str(line)}
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()

    def wait_for(self, text: str, timeout: float = 15.0) -> dict[str, Any]:
        """The first line whose message contains ``text``; fails with the output so far."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for line in self.lines:
                    if text in str(line.get("message", "")):
                        return line
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._cond.wait(0.2)):
                    raise AssertionError(f"{self.name} never logged {text!r}; output: {self.lines}")
                self._cond.wait(min(left, 0.2))

    def messages(self) -> list[str]:
        with self._cond:
            return [str(line.get("message", "")) for line in self.lines]

    def summary(self, timeout: float = 15.0) -> dict[str, Any]:
        self.proc.wait(timeout)
        with self._cond:
            self._cond.wait_for(lambda: any("summary" in x for x in self.lines), 2)
            found = [x for x in self.lines if "summary" in x]
        assert found, f"{self.name} exited {self.proc.returncode} without a summary: {self.lines}"
        return found[-1]

    def signal(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    def stopped(self) -> bool:
        """True while the process is stopped (SIGSTOP): state T in /proc."""
        try:
            stat = Path(f"/proc/{self.proc.pid}/stat").read_text()
        except OSError:
            return False
        return stat.rsplit(")", 1)[1].split()[0] in ("T", "t")

    def wait_stopped(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.stopped():
            assert time.monotonic() < deadline, f"{self.name} never stopped; output: {self.lines}"
            time.sleep(0.01)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


@dataclass
class Stack:
    """A real engine and store for the parent side of a test, plus the children's config."""

    queue: Any
    store: Any
    cfg: dict[str, Any]

    def start(self, name: str, **overrides: Any) -> WorkerProc:
        return WorkerProc.start(name, **{**self.cfg, **overrides})


def make_stack(redis_url: str, moto_url: str, unique: str, queue: str = "work",
               lease_ms: int = 500) -> Stack:
    from sluice.backends.dynamodb import tables
    from sluice.backends.dynamodb.jobs import DynamoJobStore
    from sluice.backends.redis.engine import RedisQueue
    from sluice.core.config import Settings

    s = Settings(redis_url=redis_url, aws_endpoint_url=moto_url, jobs_table=f"jobs-{unique}",
                 idempotency_table=f"idem-{unique}", results_bucket=f"results-{unique}")
    tables.ensure_all(s)
    cfg = {"redis_url": redis_url, "moto_url": moto_url, "table": s.jobs_table, "bucket": s.results_bucket,
           "queue": queue, "lease_ms": lease_ms}
    return Stack(RedisQueue.from_settings(s), DynamoJobStore.from_settings(s), cfg)
