"""The job status writer: ``store.mark_queued`` on a background thread, off the push path."""

from __future__ import annotations

import contextlib
import logging
import queue as queue_mod
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from sluice import events as ev
from sluice.events import EventBus
from sluice.models import DecodedJob
from sluice.ports import JobStore

log = logging.getLogger("sluice.relay")  # one logger for the whole relay, as before the package split

Round = Sequence[tuple[str, Sequence[tuple[int, DecodedJob]]]]  # per pushed item: its queue, its records


@dataclass
class Backlog:
    """How the writer keeps up: jobs handed over and written, the most ever waiting, and how
    long the relay waited for room (only when ``max_batches`` rounds are waiting)."""

    submitted: int = 0
    written: int = 0  # handed to ``mark_queued`` (whether it succeeded or not)
    max_waiting: int = 0
    waited_s: float = 0.0

    @property
    def waiting(self) -> int:
        return self.submitted - self.written


class StatusWriter:
    """``store.mark_queued`` off the push path, on one background thread.

    The status is for people (accepted -> queued); nothing depends on it, and a worker's
    grant moves the job on regardless. So a slow table must not slow pushing: rounds
    queue up here, and only a long backlog (``max_batches``) makes the relay wait. The
    relay hands over its pushed records as they are; this thread builds the store's tuples,
    and writes whatever has queued up in one ``mark_queued`` call (at most ``max_jobs``).
    """

    def __init__(self, store: JobStore, events: EventBus, max_batches: int = 200,
                 max_jobs: int = 5_000) -> None:
        self.store, self.events, self.max_jobs = store, events, max_jobs
        self._queue: queue_mod.Queue[tuple[Round, int] | None] = queue_mod.Queue(max_batches)
        self._thread: threading.Thread | None = None
        self.backlog = Backlog()

    def submit(self, pushed: Round) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="sluice-relay-status", daemon=True)
            self._thread.start()
        n = sum(len(records) for _, records in pushed)
        b = self.backlog
        b.submitted += n
        b.max_waiting = max(b.max_waiting, b.waiting)
        try:
            self._queue.put_nowait((pushed, n))
        except queue_mod.Full:
            t0 = time.monotonic()
            self._queue.put((pushed, n))
            b.waited_s += time.monotonic() - t0

    def _run(self) -> None:
        stop = False
        while not stop:
            first = self._queue.get()
            if first is None:
                return
            rounds, n = [first[0]], first[1]
            while n < self.max_jobs:  # what queued up meanwhile goes in the same call
                try:
                    more = self._queue.get_nowait()
                except queue_mod.Empty:
                    break
                if more is None:
                    stop = True
                    break
                rounds.append(more[0])
                n += more[1]
            self._write([(job.job_id, q, job.enqueued_at_ms) for pushed in rounds
                         for q, records in pushed for _, job in records])

    def _write(self, jobs: list[tuple[str, str, int]]) -> None:
        try:
            self.store.mark_queued(jobs)
        except Exception as exc:  # a status update must never kill the relay
            self.events.emit(ev.StatusWriteFailed(jobs=len(jobs), error=ev.error_text(exc)))
            log.warning("could not mark %d jobs queued: %s", len(jobs), exc)
        finally:
            self.backlog.written += len(jobs)

    def close(self, timeout_s: float) -> None:
        """Finish what is queued, waiting at most ``timeout_s``; the thread dies with the process."""
        if self._thread is None:
            return
        with contextlib.suppress(queue_mod.Full):
            self._queue.put(None, timeout=timeout_s)
        self._thread.join(timeout_s)
        self._thread = None
