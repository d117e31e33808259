"""Two engines on one redis-server in one run: this tree's and a base commit's (``BASE``).

Shared by ``engine_groups`` (lease cost with fair groups) and ``engine_cost`` (Redis's cost per
script over a pipeline run). The base commit's ``shared`` directory is exported with ``git
archive`` into a temporary directory (no worktree is made); each side runs in a child process
whose ``sluice`` is its own tree's (``PYTHONPATH``), so each side calls its scripts exactly as its
own Python did (the KEYS and ARGV layout of that commit), whatever the modules are called there.
The parent talks to each child one line at a time (``Child.ask``) and reads Redis's own accounting
around each call: INFO commandstats (the time in each command, scripts with the commands they call
included) and INFO cpu (the server's CPU time, user + system).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

BASE = "c44b81f"  # issue 28 and issue 30 measure against the engine at this commit


def engine() -> tuple[Any, Any]:
    """(RedisQueue, JobSpec) of whichever ``sluice`` is on the path: this layout or the base's."""
    try:
        from sluice.backends.redis.engine import RedisQueue
        from sluice.core.models import JobSpec
    except ImportError:  # the base commit's layout
        from sluice.models import JobSpec  # type: ignore[import-not-found,no-redef]
        from sluice.redis.engine import RedisQueue  # type: ignore[import-not-found,no-redef]
    return RedisQueue, JobSpec


def script_usec(client: Any) -> float:
    """Redis's own time in scripts so far (EVALSHA, the commands each script calls included), from
    INFO commandstats, in microseconds."""
    stats = client.info("commandstats")
    return sum(float(stats[name]["usec"]) for name in ("cmdstat_evalsha", "cmdstat_eval") if name in stats)


class Reading:
    """Redis's accounting at one moment: its CPU seconds (INFO cpu) and the microseconds spent in
    scripts and in every other command but INFO (INFO commandstats), in one round trip."""

    __slots__ = ("cpu_s", "other_usec", "script_usec")

    def __init__(self, client: Any) -> None:
        pipe = client.pipeline(transaction=False)
        pipe.info("cpu")
        pipe.info("commandstats")
        cpu, stats = pipe.execute()
        self.cpu_s = float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])
        scripts = ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_fcall")
        self.script_usec = sum(float(stats[name]["usec"]) for name in scripts if name in stats)
        self.other_usec = sum(float(v["usec"]) for name, v in stats.items()
                              if name not in scripts and name != "cmdstat_info")


def server(client: Any) -> dict[str, Any]:
    """Which redis-server runs: INFO server's version, allocator and binary."""
    info, memory = client.info("server"), client.info("memory")
    return {"redis_version": info.get("redis_version"), "mem_allocator": memory.get("mem_allocator"),
            "executable": info.get("executable")}


def load() -> list[float]:
    """The machine's load averages (1, 5, 15 minutes), rounded."""
    return [round(x, 2) for x in os.getloadavg()]


def this_tree() -> Path:
    import sluice

    return Path(sluice.__file__).resolve().parents[1]


def export_tree(into: Path, commit: str = BASE) -> Path:
    """``commit``'s ``shared`` directory, exported from this repository into ``into``."""
    repo = Path(__file__).resolve().parent.parent
    archive = subprocess.run(["git", "-C", str(repo), "archive", commit, "shared"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "shared"


class Child:
    """``python <script> --serve <args>`` with ``shared`` as its ``sluice``: it prints "ready" once
    set up, then answers each line it reads with one line."""

    def __init__(self, script: str, shared: Path, *args: str) -> None:
        argv = [sys.executable, script, "--serve", *args]
        self.proc = subprocess.Popen(argv, env={**os.environ, "PYTHONPATH": str(shared)}, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def ready(self) -> None:
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"

    def ask(self, line: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("quit\n")
        self.proc.stdin.close()
        assert self.proc.wait(timeout=60) == 0
