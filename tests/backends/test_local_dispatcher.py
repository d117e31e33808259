"""The relay's ``LocalProcessDispatcher``: real worker processes, started and stopped."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from sluice.backends.aws.dispatch import LocalProcessDispatcher
from sluice.core.errors import InvalidInput
from sluice.core.models import DispatchEvent

WRITE_EVENT = "import sys, pathlib, os; pathlib.Path(sys.argv[1], str(os.getpid())).write_text(sys.argv[2])"


def test_local_dispatcher_starts_processes_with_the_event_and_caps_them(tmp_path: Path) -> None:
    dispatcher = LocalProcessDispatcher([sys.executable, "-c", WRITE_EVENT, str(tmp_path), "{event}"],
                                        max_processes=2)
    assert dispatcher.dispatch("emails", 5, 7) == 2
    deadline = time.monotonic() + 20
    while dispatcher.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    events = [DispatchEvent.model_validate_json(p.read_text()) for p in tmp_path.iterdir()]
    assert [(e.queues, e.batch) for e in events] == [(["emails"], 7)] * 2
    dispatcher.close()


def test_local_dispatcher_appends_the_event_and_close_stops_its_workers(tmp_path: Path) -> None:
    sleeper = LocalProcessDispatcher([sys.executable, "-c", "import time; time.sleep(60)"], max_processes=3)
    assert sleeper._argv("E")[-1] == "E"
    assert sleeper.dispatch("q", 3, 1) == 3
    assert sleeper.dispatch("q", 3, 1) == 0  # all three slots busy
    procs = list(sleeper.procs)
    sleeper.close(timeout=5)
    assert all(p.poll() is not None for p in procs)
    with pytest.raises(InvalidInput):
        LocalProcessDispatcher([])
