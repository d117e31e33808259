"""In-memory fake of the console's port (``sluice_dev.cli.console.backend.Backend``, the operator API
it reads and writes), with hostile texts for the pages to escape."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from sluice.core import depth
from sluice.core.errors import JobNotFound
from sluice.core.listing import JobPage, ListedJob
from sluice.core.models import DeadJob, FinishedCounts, QueueConfig, QueueStats
from sluice.core.wire import JobView

EVIL = '<script>alert("x")</script>'
JOB = "01JB0000000000000000000000.emails.abcdefghij"


def queue_row(queue: str = "emails", *, paused: bool = False, succeeded: int = 0, dead: int = 0,
              **kw: Any) -> dict[str, Any]:
    """A queue as GET /v1/admin/queues[/{queue}] answers it."""
    stats = QueueStats(queue=queue, ready=3, delayed=1, leased=2, dead=1, oldest_ready_age_ms=1500,
                       config=QueueConfig(paused=paused),
                       finished=FinishedCounts(succeeded=succeeded, dead=dead))
    return stats.model_dump(mode="json") | {"overdue_leases": 0, "route": None} | kw


def job_view(**kw: Any) -> JobView:
    """A dead job of ``emails`` as GET /v1/jobs/{id} answers it."""
    base: dict[str, Any] = dict(job_id=JOB, queue="emails", status="dead", attempts=3,
                                created_at_ms=1_700_000_000_000, updated_at_ms=1_700_000_001_000)
    return JobView(**(base | kw))


class FakeBackend:
    """The console's API: two queues listed (each poll 4 more succeeded, 1 more dead), a dead job, a job
    and a schedule whose texts are ``EVIL`` (the pages must escape them); each write recorded in ``calls``."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.paused = False
        self.dead = [DeadJob(job_id=JOB, queue="emails", attempts=3, last_error=EVIL,
                             died_at_ms=1_700_000_000_000)]
        self.job = job_view(last_error=EVIL, result={"html": EVIL}, progress=0.4, progress_detail=EVIL,
                            progress_at_ms=1_700_000_000_500, children=[JOB])
        self.listed = ["emails", "reports"]  # what GET /v1/admin/queues lists
        self.polls = 0
        self.schedule_paused = False
        self.listed_calls: list[tuple[Any, ...]] = []  # list_jobs: (queue, state, limit, cursor, prefix)
        self.depth_calls: list[str] = []
        self.now = time.time

    def queue_row(self, queue: str) -> dict[str, Any]:
        self.polls += 1  # each poll: 4 more succeeded, 1 more dead
        return queue_row(queue, paused=self.paused, succeeded=4 * self.polls, dead=self.polls)

    def queue_rows(self) -> list[dict[str, Any]]:
        return [self.queue_row(q) for q in self.listed]

    def status(self, job_id: str) -> JobView:
        if job_id != JOB:
            raise JobNotFound(f"no job {job_id}", status=404)
        return self.job

    def pause(self, queue: str) -> QueueConfig:
        self.calls.append(("pause", queue))
        self.paused = True
        return QueueConfig(paused=True)

    def resume(self, queue: str) -> QueueConfig:
        self.calls.append(("resume", queue))
        self.paused = False
        return QueueConfig()

    def set_rate(self, queue: str, per_second: float, burst: int | None = None) -> QueueConfig:
        self.calls.append(("rate", queue, per_second, burst))
        return QueueConfig(rate_per_s=per_second, burst=burst or 0)

    def dead_letters(self, queue: str, limit: int = 100) -> list[DeadJob]:
        return list(self.dead)

    def list_jobs(self, queue: str, state: str = "ready", *, limit: int = 50, cursor: str | None = None,
                  prefix: str | None = None) -> JobPage:
        """GET /v1/admin/queues/{queue}/jobs: the dead job, with ``EVIL`` in its payload and error, in
        every state asked for, and a next cursor on the first page; each read kept in ``listed_calls``."""
        self.listed_calls.append((queue, state, limit, cursor, prefix))
        job = ListedJob(job_id=JOB, state=state, at_ms=1_700_000_000_000, enqueued_at_ms=1_699_999_999_000,
                        priority=0, attempts=3, last_error=EVIL, payload={"to": EVIL, "card": "[redacted]"},
                        redacted=["card"])
        shown = [] if prefix and not JOB.startswith(prefix) else [job]
        return JobPage(queue=queue, state=state, jobs=shown, next=None if cursor else f"5~{JOB}")
    def depth_history(self, queue: str) -> depth.DepthHistory:
        """GET /v1/admin/queues/{queue}/depth: three samples 10 s apart ending now (the console's
        clock), 9 jobs started in the last two (waits of ~100 ms, and one of ~10 s)."""
        self.depth_calls.append(queue)
        now = int(self.now() * 1000)
        stored = [depth.encode(now - 20_000, 5, 1, 2, 0),
                  depth.encode(now - 10_000, 7, 1, 2, 1, {depth.bucket(100): 4}),
                  depth.encode(now, 3, 1, 2, 1, {depth.bucket(100): 4, depth.bucket(10_000): 1})]
        return depth.history(queue, stored, now)

    def timeline(self, queue: str, job_id: str) -> list[dict[str, Any]]:
        """A takeover after a freeze: A's lease lapsed, B took over and wrote, A's late write was
        refused; every text a worker id could carry is ``EVIL``."""
        return [{"at_ms": 1000, "kind": "lease", "lease": 7, "attempt": 1, "deadline_ms": 2000},
                {"at_ms": 1001, "kind": "grant", "lease": 7, "worker": EVIL, "token": 33},
                {"at_ms": 2500, "kind": "lease", "lease": 9, "attempt": 2, "deadline_ms": 4000},
                {"at_ms": 2501, "kind": "grant", "lease": 9, "worker": "B", "token": 34},
                {"at_ms": 2900, "kind": "write", "lease": 9, "token": 34, "outcome": "written"},
                {"at_ms": 2910, "kind": "ack", "lease": 9, "outcome": "ok"},
                {"at_ms": 3500, "kind": "write", "lease": 7, "token": 33, "outcome": "rejected",
                 "current": 34},
                {"at_ms": 3510, "kind": "finish", "lease": 7, "outcome": EVIL}]

    def redrive(self, queue: str, job_id: str | None = None) -> dict[str, Any]:
        self.calls.append(("redrive", queue, job_id))
        return {"queue": queue, "moved": 1, "refused": {}}

    def purge_dead(self, queue: str) -> int:
        self.calls.append(("purge", queue))
        return 1

    def schedules(self, queue: str) -> list[dict[str, Any]] | None:
        if queue != "emails":
            return []
        return [{"name": "nightly", "expression": "cron(0 3 * * ? *)", "queue": "emails",
                 "paused": self.schedule_paused, "next_firing_ms": 1_700_000_000_000, "payload": {"x": EVIL}}]

    def pause_schedule(self, queue: str, name: str) -> dict[str, Any]:
        self.calls.append(("pause_schedule", queue, name))
        self.schedule_paused = True
        return {}

    def resume_schedule(self, queue: str, name: str) -> dict[str, Any]:
        self.calls.append(("resume_schedule", queue, name))
        self.schedule_paused = False
        return {}

    def delete_schedule(self, queue: str, name: str) -> None:
        self.calls.append(("delete_schedule", queue, name))


if TYPE_CHECKING:  # each fake is its port's: mypy --strict checks these, nothing runs them
    from sluice_dev.cli.console.backend import Backend

    _BACKEND: Backend = FakeBackend()
