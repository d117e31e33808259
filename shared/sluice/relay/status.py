"""The job status writer: ``store.mark_queued`` on a background thread, off the push path."""

from __future__ import annotations

import contextlib
import logging
import queue as queue_mod
import threading

from sluice.ports import JobStore, Metrics

log = logging.getLogger("sluice.relay")  # one logger for the whole relay, as before the package split


class StatusWriter:
    """``store.mark_queued`` off the push path, on one background thread.

    The status is for people (accepted -> queued); nothing depends on it, and a worker's
    grant moves the job on regardless. So a slow table must not slow pushing: batches
    queue up here, and only a long backlog (``max_batches``) makes the relay wait.
    """

    def __init__(self, store: JobStore, metrics: Metrics, max_batches: int = 200) -> None:
        self.store, self.metrics = store, metrics
        self._queue: queue_mod.Queue[list[tuple[str, str, int]] | None] = queue_mod.Queue(max_batches)
        self._thread: threading.Thread | None = None

    def submit(self, jobs: list[tuple[str, str, int]]) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="sluice-relay-status", daemon=True)
            self._thread.start()
        self._queue.put(jobs)

    def _run(self) -> None:
        while (jobs := self._queue.get()) is not None:
            try:
                self.store.mark_queued(jobs)
            except Exception as exc:  # a status update must never kill the relay
                self.metrics.count("RelayMarkQueuedFailed", len(jobs))
                log.warning("could not mark %d jobs queued: %s", len(jobs), exc)

    def close(self, timeout_s: float) -> None:
        """Finish what is queued, waiting at most ``timeout_s``; the thread dies with the process."""
        if self._thread is None:
            return
        with contextlib.suppress(queue_mod.Full):
            self._queue.put(None, timeout=timeout_s)
        self._thread.join(timeout_s)
        self._thread = None
