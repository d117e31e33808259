"""The CLI as a process: a reader that closes stdout early (``sluice ... | head``)."""

from __future__ import annotations

from pathlib import Path


def test_a_reader_that_stops_early_is_not_a_connection_error() -> None:
    """`sluice queues --json | head -3` printed `cannot connect: [Errno 32] Broken pipe` (code
    CANNOT_CONNECT): the closed pipe was stdout, not the network. Now it ends quietly, as `head`'s
    writers do. (A subprocess whose stdout is closed before it writes: no socket is opened.)"""
    import subprocess
    import sys

    sluice = str(Path(sys.executable).parent / "sluice")
    proc = subprocess.Popen([sluice, "check", "--json", "sluice_dev.examples"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 1
    assert err == "", err
