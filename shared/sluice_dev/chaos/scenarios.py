"""The seed's failure stories, played with real processes: ``sluice scenario gc-pause`` and
``sluice scenario crash-before-ack``.

Each scenario starts its own redis-server and moto server (or borrows a running ``sluice dev``'s:
``Borrowed``, the console's scenario page, with a queue, tables and a bucket of its own scratch
names, removed afterwards), creates the jobs table, enqueues one job, and starts two real worker
processes, A and B (``sluice_dev.chaos.scenario_worker``). A is let loose first; B starts competing once A
holds the lease. Everything on the timeline is something a process reported doing
(a lease, a grant, a renewal, a write and what storage answered, an ack) or
something the controller observed itself (the lease's deadline passing in Redis,
a process dying). Nothing is scripted except where the fault lands:

- gc-pause: A works for ``freeze_at`` seconds, passes the runtime's own lease check,
  and is frozen with SIGSTOP just before its fenced write, for ``freeze_for`` seconds.
- crash-before-ack: A writes its result and is SIGKILLed before its ack.

``time_scale`` multiplies every duration (0.1 runs the story ten times faster);
timeline times are divided by it again, so they read in the story's seconds.
"""

from __future__ import annotations

import contextlib
import json
import queue
import shutil
import signal
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sluice.core.errors import InvalidInput, JobNotFound
from sluice_dev.chaos.procs import Child
from sluice_dev.chaos.timeline import Entry, Narrator

if TYPE_CHECKING:
    from sluice.core.config import Settings

QUEUE = "scenario"
WORKER_MODULE = "sluice_dev.chaos.scenario_worker"
Echo = Callable[[Entry], None]


@dataclass(frozen=True)
class Params:
    lease_s: float = 10.0
    renew_every_s: float = 3.0
    freeze_at_s: float = 2.0
    freeze_for_s: float = 12.0
    work_s: float = 1.0  # how long B (and A, in crash-before-ack) works on the job
    fencing: bool = True
    time_scale: float = 1.0

    def __post_init__(self) -> None:
        if not 0.01 <= self.time_scale <= 10:
            raise InvalidInput("--time-scale must be between 0.01 and 10")
        if self.lease_s * self.time_scale < 0.05:
            raise InvalidInput("the scaled lease must be at least 50 ms")
        if not 0 < self.renew_every_s < self.lease_s:
            raise InvalidInput("--renew-every must be positive and shorter than --lease")
        if self.freeze_at_s < 0 or self.freeze_for_s < 0 or self.work_s < 0:
            raise InvalidInput("--freeze-at, --freeze-for and the work time must not be negative")

    def scaled(self, seconds: float) -> float:
        return seconds * self.time_scale


@dataclass
class Result:
    scenario: str
    params: Params
    timeline: list[Entry]
    runs: dict[str, int]
    final_writer: str | None
    stale_write_accepted: bool
    stored: dict[str, Any]
    verdict: str
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        p = self.params
        return {"scenario": self.scenario, "fencing": p.fencing,
                "timeline": [e.as_dict() for e in sorted(self.timeline, key=lambda e: e.t)],
                "final_writer": self.final_writer, "stale_write_accepted": self.stale_write_accepted,
                "runs": self.runs, "stored": self.stored, "verdict": self.verdict,
                "params": {"lease": p.lease_s, "renew_every": p.renew_every_s, "time_scale": p.time_scale,
                           **({"freeze_at": p.freeze_at_s, "freeze_for": p.freeze_for_s}
                              if self.scenario == "gc-pause" else {"work": p.work_s})},
                **self.extra}


@dataclass
class _Env:
    redis_url: str
    moto_url: str
    table: str
    bucket: str
    workdir: Path
    queue: Any
    store: Any
    redis: Any
    queue_name: str = QUEUE


@dataclass(frozen=True)
class Borrowed:
    """The servers of a running ``sluice dev`` (its endpoints.json's ``redis_url`` and
    ``aws_endpoint_url``) that a scenario runs on instead of starting its own."""

    redis_url: str
    moto_url: str


SCRATCH = "scenario-"  # a borrowed stack's scratch names: this, then a random suffix


@contextlib.contextmanager
def _servers(on: Borrowed | None = None) -> Iterator[_Env]:
    """A redis-server and a moto server of the scenario's own, with a fresh jobs table; or, ``on`` a
    running stack, that stack's, with a queue, two tables and a bucket of scratch names that no real
    one has (a random suffix; the queue is never registered, so the stack's relay and workers never
    see it), all removed afterwards."""
    from sluice.backends.dynamodb import tables
    from sluice.backends.dynamodb.jobs import DynamoJobStore
    from sluice.backends.redis.engine import RedisQueue
    from sluice.core.config import Settings
    from sluice_dev.local import motoserver, servers

    workdir = Path(tempfile.mkdtemp(prefix="sluice-scenario-"))
    started: list[servers.Server] = []
    suffix = uuid.uuid4().hex[:8]
    scratch = "" if on is None else SCRATCH
    s: Settings | None = None
    try:
        if on is None:
            started.append(servers.start_redis(workdir=workdir / "redis", log_path=workdir / "redis.log"))
            started.append(motoserver.start(log_path=workdir / "moto.log"))  # one request at a time
            redis_url, moto_url = started[0].extra["url"], started[1].extra["url"]
        else:
            redis_url, moto_url = on.redis_url, on.moto_url
        # Only these names: no routes, schedules, parked or queues table, no payloads bucket, whatever
        # the environment says (ensure_all would create those too).
        s = Settings(redis_url=redis_url, aws_endpoint_url=moto_url, jobs_table=f"{scratch}jobs-{suffix}",
                     idempotency_table=f"{scratch}idem-{suffix}", results_bucket=f"{scratch}results-{suffix}",
                     routes_table="", schedules_table="", parked_table="", queues_table="",
                     payloads_bucket="")
        with _dummy_aws():
            tables.ensure_all(s)
            queue = RedisQueue.from_settings(s)
            yield _Env(redis_url, moto_url, s.jobs_table, s.results_bucket, workdir, queue,
                       DynamoJobStore.from_settings(s), queue.client,
                       QUEUE if on is None else f"{SCRATCH}{suffix}")
    finally:
        if on is not None and s is not None:
            with _dummy_aws():
                _scrub(s, f"{SCRATCH}{suffix}")
        for server in reversed(started):
            server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _scrub(s: Settings, queue: str) -> None:
    """Remove what a run on a borrowed stack made (``s``: its scratch Settings): its queue's Redis keys
    (all under the queue's ``{queue}`` hash tag), its two tables and its bucket. Best effort: a
    leftover has a scratch name no real queue, table or bucket has."""
    import boto3
    import botocore.exceptions
    import redis

    from sluice.backends.redis.engine import RedisQueue

    if not queue.startswith(SCRATCH):  # never anything but a scratch queue's keys
        raise ValueError(f"not a scratch queue: {queue!r}")
    with contextlib.suppress(redis.RedisError):
        client = RedisQueue.from_url(s.redis_url).client
        for key in list(client.scan_iter(match=f"sluice:{{{queue}}}:*", count=1000)):
            client.delete(key)  # one by one: a cluster client deletes one slot's keys a call
    dynamodb = boto3.client("dynamodb", region_name=s.aws_region, endpoint_url=s.aws_endpoint_url)
    for table in (s.jobs_table, s.idempotency_table):
        with contextlib.suppress(botocore.exceptions.ClientError):
            dynamodb.delete_table(TableName=table)
    with contextlib.suppress(botocore.exceptions.ClientError):
        s3 = boto3.resource("s3", region_name=s.aws_region, endpoint_url=s.aws_endpoint_url)
        bucket = s3.Bucket(s.results_bucket)
        bucket.objects.all().delete()
        bucket.delete()


@contextlib.contextmanager
def _dummy_aws() -> Iterator[None]:
    import os

    from sluice_dev.local.servers import DUMMY_AWS_ENV

    saved = {k: os.environ.get(k) for k in DUMMY_AWS_ENV}
    os.environ.update(DUMMY_AWS_ENV)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class _Play:
    """One run: the two workers, the event queue, and the narrator."""

    def __init__(self, env: _Env, p: Params, echo: Echo | None) -> None:
        self.env, self.p, self.echo = env, p, echo
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.narrator = Narrator(time_scale=p.time_scale, freeze_for_s=p.freeze_for_s)
        self.children: dict[str, Child] = {}
        self.job_id = f"job-{uuid.uuid4().hex[:12]}"
        self.lease_holder: tuple[str, int] | None = None  # (worker, Redis lease token)
        self.deadline_ms: dict[str, int] = {}
        self.lease_ms = max(10, round(p.scaled(p.lease_s) * 1000))

    def start(self, name: str, **cfg: Any) -> Child:
        env, p = self.env, self.p
        config = {"name": name, "redis_url": env.redis_url, "moto_url": env.moto_url, "table": env.table,
                  "bucket": env.bucket, "queue": env.queue_name, "lease_ms": self.lease_ms,
                  "heartbeat_fraction": p.renew_every_s / p.lease_s, "gate": True, **cfg}
        child = Child(name, WORKER_MODULE, [json.dumps(config)], events=self.events, stdin=True,
                      log_path=env.workdir / f"worker-{name}.log")
        self.children[name] = child
        return child

    def enqueue(self) -> None:
        from sluice.core.models import JobSpec

        spec = JobSpec(job_id=self.job_id, queue=self.env.queue_name, payload={"numbers": [3, 4, 5]},
                       lease_ms=self.lease_ms, max_attempts=5)
        self.env.store.record_accepted(spec)
        # enqueue.lua alone, not ``enqueue`` (which registers the queue first): an unregistered queue
        # is one the relay's maintenance never visits, so on a borrowed stack (the console's scenario
        # page inside sluice dev) its relay and workers never see the scratch queue.
        from sluice.backends.redis.checks import job_fields
        from sluice.core.clock import wall_ms

        conn, name = self.env.queue.conn, self.env.queue_name
        conn.scripts.enqueue(conn.keys(name), [job_fields(spec, name, wall_ms())], internal=False)

    def wait_ready(self, timeout: float = 60.0) -> None:
        ready: set[str] = set()
        deadline = time.monotonic() + timeout
        while ready != set(self.children):
            try:
                e = self.events.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"workers not ready after {timeout}s (logs: {self.env.workdir})") from None
            if e["event"] == "ready":
                ready.add(e["who"])

    def observe(self, e: dict[str, Any]) -> None:
        """Track the Redis lease holder from what workers report, then narrate."""
        who, kind = e.get("who", ""), e["event"]
        if kind == "leased":
            if self.lease_holder is not None and self.lease_holder[0] != who:
                # Redis hands the job to another worker only once the holder's lease has expired:
                # it expired at the deadline Redis gave the holder, if no poll saw it pass first.
                self._expired(self.lease_holder[0])
            self.lease_holder = (who, int(e["lease"]))
            self.deadline_ms[who] = int(e["deadline_ms"])
        elif kind == "renewed":
            self.deadline_ms[who] = int(e["deadline_ms"])
        for entry in self.narrator.feed(e):
            if self.echo is not None:
                self.echo(entry)

    def check_expiry(self) -> None:
        """Report the holder's lease expiring once Redis's own clock passes its deadline."""
        if self.lease_holder is None:
            return
        who, _ = self.lease_holder
        if who in self.narrator.expired:
            return
        from sluice.backends.redis.keys import QueueKeys

        score = self.env.redis.zscore(QueueKeys(self.env.queue_name).leased, self.job_id)
        if score is None:
            return
        secs, micros = self.env.redis.time()
        if secs * 1000 + micros // 1000 >= int(score):
            self._expired(who)

    def _expired(self, holder: str) -> None:
        if holder in self.narrator.expired or holder not in self.deadline_ms:
            return
        self.observe({"event": "lease_expired", "who": "lock", "holder": holder,
                      "t": self.deadline_ms[holder] / 1000})

    def pump(self, until: Callable[[], bool], timeout: float,
             on_event: Callable[[dict[str, Any]], None] = lambda e: None) -> None:
        deadline = time.monotonic() + timeout
        poll = max(0.002, min(0.02, self.p.scaled(0.05)))
        while not until():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the scenario did not end in {timeout:.0f}s (logs: {self.env.workdir})")
            try:
                e = self.events.get(timeout=poll)
            except queue.Empty:
                self.check_expiry()
                continue
            self.observe(e)
            on_event(e)
            self.check_expiry()
        while True:  # whatever is still in the pipe
            try:
                self.observe(self.events.get_nowait())
            except queue.Empty:
                break

    def stored(self) -> dict[str, Any]:
        try:
            rec = self.env.store.get_job(self.job_id)
        except JobNotFound:
            return {}
        return {"status": str(rec.status), "attempts": rec.attempts, "token": rec.token,
                "result_token": rec.result_token, "result": rec.result}

    def steps(self) -> list[dict[str, Any]]:
        """The job's timeline as the workers recorded it in Redis (issue 32): what the drawing shows."""
        from sluice.backends.redis.connection import RedisConnection
        from sluice.backends.redis.timeline import RedisTimeline

        conn = RedisConnection.from_url(self.env.redis_url)
        try:
            return RedisTimeline(conn, ttl_ms=600_000).read(self.env.queue_name, self.job_id)
        finally:
            conn.close()

    def close(self) -> None:
        for child in self.children.values():
            child.stop()


def gc_pause(p: Params, echo: Echo | None = None, on: Borrowed | None = None) -> Result:
    """Worker A freezes (SIGSTOP) just before its write; B may take over; who wins? ``on``: a running
    stack's servers, with scratch names (else its own servers)."""
    with _servers(on) as env:
        play = _Play(env, p, echo)
        try:
            a = play.start("A", work_s=p.scaled(p.freeze_at_s), work_from_lease=True,
                           freeze_before_write=True, tag_result=True, fencing=p.fencing)
            b = play.start("B", work_s=p.scaled(p.work_s), tag_result=True, fencing=p.fencing)
            play.wait_ready()
            play.enqueue()
            a.send_line()
            resume_at: list[float] = []

            def drive(e: dict[str, Any]) -> None:
                if e["event"] == "granted" and e["who"] == "A":
                    b.send_line()  # B competes from now on
                elif e["event"] == "stall" and e["who"] == "A":
                    resume_at.append(float(e["t"]) + p.scaled(p.freeze_for_s))

            def done() -> bool:
                if resume_at and time.time() >= resume_at[0] and a.stopped():
                    resume_at.clear()
                    a.signal(signal.SIGCONT)
                if a.alive():
                    return False
                if b.alive() and play.stored().get("status") in ("succeeded", "failed", "dead") \
                        and not _in_redis(play):
                    b.stop()  # the job is finished and gone: B has nothing left to run
                return not b.alive()

            budget = 60 + p.scaled(p.freeze_at_s + p.freeze_for_s + 2 * p.lease_s + p.work_s)
            play.pump(done, budget, drive)
            result = _verdict_gc(play, p)
            result.extra["steps"] = play.steps()
            return result
        finally:
            play.close()


def crash_before_ack(p: Params, echo: Echo | None = None) -> Result:
    """Worker A writes its result and dies before the ack; B runs the job again."""
    with _servers() as env:
        play = _Play(env, p, echo)
        try:
            a = play.start("A", work_s=p.scaled(p.work_s), die_before_ack=True)
            b = play.start("B", work_s=p.scaled(p.work_s))
            play.wait_ready()
            play.enqueue()
            a.send_line()
            died: list[float] = []

            def drive(e: dict[str, Any]) -> None:
                if e["event"] == "granted" and e["who"] == "A":
                    b.send_line()

            def done() -> bool:
                if not a.alive() and not died:
                    died.append(time.time())
                return not a.alive() and not b.alive()

            play.pump(done, 60 + p.scaled(2 * p.lease_s + 2 * p.work_s), drive)
            return _verdict_crash(play, p, a.proc.returncode)
        finally:
            play.close()


def _in_redis(play: _Play) -> bool:
    from sluice.backends.redis.keys import QueueKeys

    return bool(play.env.redis.exists(QueueKeys(play.env.queue_name).job(play.job_id)))


def _verdict_gc(play: _Play, p: Params) -> Result:
    n = play.narrator
    stored = play.stored()
    writer = n.writer_of(stored.get("result_token"))
    ta, tb = n.tokens.get("A"), n.tokens.get("B")
    if n.stale_write_accepted:
        verdict = (f"BUG: two workers acted as the owner. A's lease expired during the pause, B took over "
                   f"with token {tb}, and storage accepted A's late write (token {ta}) anyway. The job's "
                   f"result is now whatever A wrote last. Fencing tokens exist to refuse exactly this write.")
    elif n.runs.get("B", 0) and writer == "B":
        verdict = (f"Two workers acted as the owner, but storage checks fencing tokens: A's late write "
                   f"(token {ta}) was rejected and B's result (token {tb}) stands.")
    elif not n.runs.get("B", 0) and writer == "A":
        verdict = (f"A's pause ({p.freeze_for_s:g} s) ended before its lease ran out (lease {p.lease_s:g} s, "
                   f"renewed every {p.renew_every_s:g} s): A kept its lease and wrote; B never ran.")
    else:
        verdict = f"The job ended {stored.get('status')} with the result of {writer or 'nobody'}."
    return Result("gc-pause", p, n.entries, dict(n.runs), writer, n.stale_write_accepted, stored, verdict)


def _verdict_crash(play: _Play, p: Params, a_exit: int | None) -> Result:
    n = play.narrator
    stored = play.stored()
    writer = n.writer_of(stored.get("result_token"))
    equal = len(n.accepted_writes) >= 2 and stored.get("result") == {"sum": 12}
    extra = {"attempts": stored.get("attempts"), "tokens": sorted(n.tokens.values()),
             "results_equal": equal, "a_killed": a_exit == -signal.SIGKILL}
    if equal and stored.get("attempts") == 2 and writer == "B":
        verdict = (f"A wrote its result (token {n.tokens.get('A')}) and died before acking, so the job came "
                   f"back when A's lease expired. B ran it again and wrote again with a newer token "
                   f"({n.tokens.get('B')}); the stored result is equal and attempts is 2. "
                   f"At-least-once means this: handlers must be idempotent.")
    else:
        verdict = f"Unexpected ending: {stored}"
    return Result("crash-before-ack", p, n.entries, dict(n.runs), writer, n.stale_write_accepted, stored,
                  verdict, extra)
