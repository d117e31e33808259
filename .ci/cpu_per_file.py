#!/usr/bin/env python3
"""What each test file costs in CPU: ``.ci/cpu_per_file.py [-o out.tsv] [--whole] PATH...``.

Runs every ``test_*.py`` under each PATH (a tier's folder or a file) in a pytest of its own, one
after the other, without xdist, and prints one line per file: user and system CPU-seconds of pytest
and of ALL its descendants (redis-server, moto server, Tansu, ``sluice dev`` and its workers, Lambda
runtimes), wall seconds, and the outcome. CPU time is what two cores share; on a busy machine it is
far steadier than wall time.

Descendants are counted even when their parent never waits for them: this process makes itself the
child subreaper (Linux ``PR_SET_CHILD_SUBREAPER``), so orphans come back to it and it reaps them. A
file that leaves a process running after pytest ends is reported ("leaked N") and the process killed
and counted.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36


def _subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def _orphans() -> list[int]:
    """Our children still alive (orphans re-parented to us), by /proc."""
    me = str(os.getpid())
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()
        if fields[1] == me:  # ppid
            found.append(int(entry.name))
    return found


def _reap_all(grace: float = 3.0) -> int:
    """Reap every child; kill those still running after ``grace`` s. Returns how many were left."""
    left = 0
    deadline = time.monotonic() + grace
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return left
        if pid:
            continue
        if time.monotonic() > deadline:
            alive = _orphans()
            left += len(alive)
            for p in alive:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(p, signal.SIGKILL)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, signal.SIGKILL)
            deadline = time.monotonic() + grace
        time.sleep(0.05)


def files_of(paths: list[str]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        out += sorted(p.rglob("test_*.py")) if p.is_dir() else [p]
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("paths", nargs="+")
    parser.add_argument("-o", "--out", help="append one TSV row per file here")
    parser.add_argument("--pytest", default=str(Path(sys.executable).parent / "pytest"))
    parser.add_argument("--extra", default="", help="more pytest arguments, one string")
    parser.add_argument("--whole", action="store_true",
                        help="one pytest over all PATHs (e.g. a tier with --extra '-n 2 --dist loadfile')")
    args = parser.parse_args()
    _subreaper()
    out = open(args.out, "a") if args.out else None  # noqa: SIM115
    runs = [" ".join(args.paths)] if args.whole else [str(p) for p in files_of(args.paths)]
    for path in runs:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.monotonic()
        solo = [] if args.whole else ["-p", "no:xdist"]
        proc = subprocess.run([args.pytest, "-q", "-p", "no:cacheprovider", *solo,
                               *args.extra.split(), *path.split()],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        wall = time.monotonic() - start
        leaked = _reap_all()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        user, sys_ = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
        tail = [ln for ln in proc.stdout.splitlines() if ln.strip()][-1:] or ["?"]
        row = (f"{path}\t{user:.1f}\t{sys_:.1f}\t{user + sys_:.1f}\t{wall:.1f}\t{proc.returncode}\t"
               f"{tail[0].strip()}{f' leaked {leaked}' if leaked else ''}")
        print(row, flush=True)
        if out:
            out.write(row + "\n")
            out.flush()
        if proc.returncode not in (0, 5):
            sys.stderr.write(proc.stdout[-3000:] + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
