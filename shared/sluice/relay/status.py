"""The job status writer: ``store.mark_queued`` on a background thread, off the push path.

It never makes the relay wait. Per job the status write is one conditional ``UpdateItem``
(DynamoDB conditions only single-item writes; ``BatchWriteItem`` cannot), a few hundred
microseconds of botocore's CPU each, while a relay pushes thousands of jobs a second: at full
rate no pool of requests in flight keeps up on a relay's own CPU (docs/relay.md, "The status
writer"). So when more than ``max_waiting`` jobs wait, the oldest waiting rounds are dropped
and counted (``Backlog.dropped``, the ``RelayStatusDropped`` metric). Dropping is safe: the
status is for people, nothing decides on ``queued`` (docs/job-states.md: every transition that
reads ``queued`` reads an absent or ``accepted`` item the same way), a dropped write is a
failed one, which was always tolerated, and the oldest are the jobs most likely leased
already, whose write the condition would refuse anyway. ``GET`` answers ``accepted`` for such
a job until its grant.

A job whose id a gateway minted with a key (``ids.named_key_id``) is not written at all (issue 33,
cheaper per job): its id is the proof ``GET`` and ``DELETE`` need without an item, ``GET`` asks
Redis whether it is ``queued`` (``Api._accepted_or_queued``), a cancel creates its item
(``cancel_unrecorded``) and its grant creates it with the id's acceptance time. So the write
bought nothing for it but one WRU (``Backlog.spared``). A keyless id (a schedule's firing) proves
nothing by itself, so its ``queued`` item is still what ``GET`` and ``DELETE`` find.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from sluice.core import bus as ev
from sluice.core.bus import EventBus
from sluice.core.ids import named_key_id
from sluice.core.models import DecodedJob
from sluice.core.ports import JobStore

log = logging.getLogger("sluice.relay")  # one logger for the whole relay, as before the package split

Round = Sequence[tuple[str, Sequence[tuple[int, DecodedJob]]]]  # per pushed item: its queue, its records


@dataclass
class Backlog:
    """How the writer keeps up: jobs handed over, written and dropped, and the most ever waiting."""

    submitted: int = 0
    written: int = 0  # handed to ``mark_queued`` (whether it succeeded or not)
    dropped: int = 0  # never written: more than ``max_waiting`` waited (the oldest go)
    spared: int = 0  # never written: the id answers for the job (``needs_item``)
    max_waiting: int = 0

    @property
    def waiting(self) -> int:
        return self.submitted - self.written - self.dropped - self.spared


def needs_item(job_id: str) -> bool:
    """Whether a pushed job's ``queued`` item is worth its write: not for an id a gateway minted with
    a key, which answers ``GET`` and ``DELETE`` by itself until the grant writes the item."""
    return named_key_id(job_id) is None


class StatusWriter:
    """``store.mark_queued`` off the push path, on one background thread.

    The status is for people (accepted -> queued); nothing depends on it, and a worker's
    grant moves the job on regardless. So a slow table must not slow pushing: rounds
    queue up here, at most ``max_waiting`` jobs of them (the oldest rounds beyond are
    dropped, and counted). The relay hands over its pushed records as they are; this
    thread builds the store's tuples, and writes whatever has queued up in one
    ``mark_queued`` call (at most ``max_jobs``).
    """

    def __init__(self, store: JobStore, events: EventBus, max_waiting: int = 1_000,
                 max_jobs: int = 5_000, max_per_s: float = 0.0) -> None:
        """``max_per_s``: the most jobs a second it writes (0: no limit), so that its botocore
        CPU stays a bounded share of the relay's; each call then carries a second's worth."""
        self.store, self.events = store, events
        self.max_waiting, self.max_per_s = max_waiting, max_per_s
        self.max_jobs = min(max_jobs, max(1, int(max_per_s))) if max_per_s > 0 else max_jobs
        self._rounds: deque[tuple[Round, int]] = deque()
        self._queued = 0  # jobs in ``_rounds``
        self._ready = threading.Condition()
        self._closing = False
        self._closed = threading.Event()  # ends a pause (``max_per_s``) at close
        self._thread: threading.Thread | None = None
        self.backlog = Backlog()

    def submit(self, pushed: Round) -> None:
        if self._thread is None:
            self._closing = False
            self._closed.clear()
            self._thread = threading.Thread(target=self._run, name="sluice-relay-status", daemon=True)
            self._thread.start()
        n = sum(len(records) for _, records in pushed)
        b = self.backlog
        with self._ready:
            b.submitted += n
            self._rounds.append((pushed, n))
            self._queued += n
            while self._queued > self.max_waiting and len(self._rounds) > 1:
                _, old = self._rounds.popleft()
                self._queued -= old
                b.dropped += old
            b.max_waiting = max(b.max_waiting, b.waiting)
            self._ready.notify()

    def _next(self) -> list[Round] | None:
        """What queued up, oldest first, up to ``max_jobs`` (at least one round); None: closed."""
        with self._ready:
            while not self._rounds and not self._closing:
                self._ready.wait()
            rounds: list[Round] = []
            n = 0
            while self._rounds and (not rounds or n + self._rounds[0][1] <= self.max_jobs):
                pushed, k = self._rounds.popleft()
                self._queued -= k
                rounds.append(pushed)
                n += k
            return rounds or None

    def _run(self) -> None:
        while (rounds := self._next()) is not None:
            every = [(job.job_id, q, job.enqueued_at_ms) for pushed in rounds for q, records in pushed
                     for _, job in records]
            jobs = [job for job in every if needs_item(job[0])]
            with self._ready:
                self.backlog.spared += len(every) - len(jobs)
            for i in range(0, len(jobs), self.max_jobs):  # a round may be larger than a call
                start = time.monotonic()
                chunk = jobs[i:i + self.max_jobs]
                self._write(chunk)
                if self.max_per_s > 0:  # keep to the rate: what waits meanwhile may be dropped
                    pause = len(chunk) / self.max_per_s - (time.monotonic() - start)
                    if pause > 0:
                        self._closed.wait(pause)

    def _write(self, jobs: list[tuple[str, str, int]]) -> None:
        try:
            self.store.mark_queued(jobs)
        except Exception as exc:  # a status update must never kill the relay
            self.events.emit(ev.StatusWriteFailed(jobs=len(jobs), error=ev.error_text(exc)))
            log.warning("could not mark %d jobs queued: %s", len(jobs), exc)
        finally:
            with self._ready:
                self.backlog.written += len(jobs)

    def close(self, timeout_s: float) -> None:
        """Finish what is queued, waiting at most ``timeout_s``; the thread dies with the process."""
        if self._thread is None:
            return
        with self._ready:
            self._closing = True
            self._ready.notify()
        self._closed.set()
        self._thread.join(timeout_s)
        self._thread = None
