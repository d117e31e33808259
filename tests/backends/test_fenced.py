"""The seed's GC-pause timeline against the real lease engine (redis-server) and the
real store (moto server over HTTP), scaled down ten times: a 1 s lease renewed every
0.3 s, A freezing at 0.2 s for 1.2 s. Also: Redis losing its data between two grants,
and FencedTable refusing a stale worker's writes to a second table.

"Freezing" stops A's heartbeat thread exactly as SIGSTOP would stop a process (the
worker tests do it with real signals); A's code then carries on as if nothing happened.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from sluice.backends.dynamodb.jobs import DynamoJobStore
from sluice.backends.redis.engine import RedisQueue
from sluice.core.bus import EventBus
from sluice.core.errors import LeaseLost, StaleToken
from sluice.core.models import JobSpec, LeasedJob, WriteOutcome
from sluice_dev.local.servers import start_redis
from tests.backends.test_store import Env, make_env

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

LEASE_MS = 1_000
RENEW_S = 0.3
JOB = "job-1"


@pytest.fixture
def env(moto_url: str, unique: str) -> Env:
    return make_env(moto_url, unique)


@pytest.fixture
def queue(redis_url: str) -> Iterator[RedisQueue]:
    q = RedisQueue.from_url(redis_url)
    yield q
    q.close()


@dataclass
class Worker:
    """Lease, grant, heartbeat: the parts of a worker the timeline needs."""

    name: str
    queue: RedisQueue
    store: DynamoJobStore
    qname: str
    events: list[tuple[float, str]]
    t0: float
    lease: LeasedJob | None = None
    token: int = 0  # the DynamoDB fencing token
    deadline_ms: int = 0
    leased_at: float = 0.0
    lost: threading.Event = field(default_factory=threading.Event)
    granted: threading.Event = field(default_factory=threading.Event)
    written: threading.Event = field(default_factory=threading.Event)
    _stop: threading.Event = field(default_factory=threading.Event)
    _frozen_until: float = 0.0
    _thaw: threading.Event | None = None

    def log(self, what: str) -> None:
        self.events.append((round(time.monotonic() - self.t0, 2), f"{self.name} {what}"))

    def take(self, timeout: float, *, heartbeat: bool = False) -> bool:
        """Poll for the lease, as a worker Lambda would; heartbeat from the moment it is
        leased (as the worker runtime does); then mint the fencing token."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            got = self.queue.lease(self.qname, 1, LEASE_MS, self.name)
            if got:
                self.lease, self.leased_at = got[0], time.monotonic()
                self.deadline_ms = self.lease.deadline_ms
                if heartbeat:
                    threading.Thread(target=self._beat, daemon=True).start()
                self.token = self.store.grant(JOB, self.qname, self.name)
                self.log(f"takes the lease (redis token {self.lease.lease_token}) "
                         f"with fencing token {self.token}")
                self.granted.set()
                return True
            time.sleep(0.02)
        return False

    def at(self, offset: float) -> None:
        """Sleep until ``offset`` seconds after this worker's lease began."""
        time.sleep(max(0.0, self.leased_at + offset - time.monotonic()))

    def freeze(self, seconds: float, *, until: threading.Event | None = None) -> None:
        """Stop heartbeating for ``seconds`` and, if given, until ``until`` is set too: the
        seed's story pins the order of events, so a loaded machine must not reorder them."""
        self._thaw = until
        self._frozen_until = time.monotonic() + seconds
        self.log("stalls")

    def frozen(self, now: float) -> bool:
        return now < self._frozen_until or (self._thaw is not None and not self._thaw.is_set())

    def stop(self) -> None:
        self._stop.set()

    def _beat(self) -> None:
        assert self.lease is not None
        next_renew = time.monotonic() + RENEW_S
        while not self._stop.is_set():
            now = time.monotonic()
            if self.frozen(now) or now < next_renew:
                time.sleep(0.01)
                continue
            try:
                lease_token = self.lease.lease_token
                self.deadline_ms = self.queue.extend(self.qname, JOB, lease_token, LEASE_MS).deadline_ms
            except LeaseLost:
                self.log("finds its lease lost")
                self.lost.set()
                return
            next_renew = now + RENEW_S

    def write(self, result: Any) -> WriteOutcome | StaleToken:
        try:
            outcome = self.store.write_result(JOB, self.token, result)
        except StaleToken as exc:
            self.log(f"writes with token {self.token}: storage rejects (current {exc.current})")
            return exc
        self.log(f"writes with token {self.token}: storage accepts")
        self.written.set()
        return outcome


def start(env: Env, queue: RedisQueue, unique: str) -> tuple[Worker, Worker, list[tuple[float, str]]]:
    qname = f"gc-{unique}"
    queue.enqueue(JobSpec(job_id=JOB, queue=qname, payload={"n": 1}, lease_ms=LEASE_MS))
    events: list[tuple[float, str]] = []
    t0 = time.monotonic()
    a = Worker("A", queue, env.store, qname, events, t0)
    b = Worker("B", queue, env.store, qname, events, t0)
    return a, b, events


def test_gc_pause_stale_writer_is_rejected_and_b_stands(env: Env, queue: RedisQueue, unique: str) -> None:
    a, b, events = start(env, queue, unique)
    assert a.take(timeout=2, heartbeat=True)
    a.at(0.2)
    a.freeze(1.2, until=b.written)  # seed: freezes at 2 s for 12 s, B writes at 11 s
    a_deadline = a.deadline_ms
    assert b.take(timeout=3)  # only once A's lease has expired
    assert b.lease is not None and b.lease.deadline_ms - LEASE_MS >= a_deadline - 5
    assert b.token > a.token
    time.sleep(0.1)
    assert b.write({"by": "B"}) is WriteOutcome.WRITTEN
    assert a.lost.wait(2)  # A resumes; its next heartbeat finds the lease gone...
    rejected = a.write({"by": "A"})  # ...but A's handler, still believing, writes anyway
    assert isinstance(rejected, StaleToken) and (rejected.mine, rejected.current) == (a.token, b.token)
    assert a.lease is not None and b.lease is not None
    with pytest.raises(LeaseLost):
        queue.ack(a.qname, JOB, a.lease.lease_token)
    queue.ack(b.qname, JOB, b.lease.lease_token)
    rec = env.store.get_job(JOB)
    assert (rec.result, rec.result_token, rec.attempts, rec.lease_owner) == ({"by": "B"}, b.token, 2, "B")
    assert env.metrics.names == ["FencedWriteRejected"]
    order = [what.split(" (")[0].split(" with")[0] for _, what in events]
    assert order == ["A takes the lease", "A stalls", "B takes the lease", "B writes",
                     "A finds its lease lost", "A writes"], events
    a.stop()


def test_stale_writer_rejected_even_before_the_new_holder_writes(
        env: Env, queue: RedisQueue, unique: str) -> None:
    a, b, _ = start(env, queue, unique)
    assert a.take(timeout=2, heartbeat=True)
    a.at(0.2)
    a.freeze(1.0, until=b.granted)  # resumes once B holds the newer token
    assert b.take(timeout=3)
    assert a.lost.wait(2)
    rejected = a.write({"by": "A"})  # B holds the newer token but has written nothing yet
    assert isinstance(rejected, StaleToken) and rejected.current == b.token
    assert env.store.get_job(JOB).result is None
    assert b.write({"by": "B"}) is WriteOutcome.WRITTEN
    assert env.store.get_job(JOB).result == {"by": "B"}
    a.stop()


def test_short_freeze_keeps_the_lease_and_b_never_runs(env: Env, queue: RedisQueue, unique: str) -> None:
    """The control: a freeze shorter than lease - renewal interval is survived."""
    a, b, _ = start(env, queue, unique)
    assert a.take(timeout=2, heartbeat=True)
    a.at(0.2)
    a.freeze(0.3)  # shorter than lease - renewal interval (0.7 s)
    assert not b.take(timeout=1.4)
    assert not a.lost.is_set()
    assert a.write({"by": "A"}) is WriteOutcome.WRITTEN
    a.stop()
    assert a.lease is not None
    queue.ack(a.qname, JOB, a.lease.lease_token)
    assert env.store.get_job(JOB).result_token == a.token == 1


def test_redis_data_loss_between_grants_never_repeats_a_fencing_token(
        env: Env, unique: str, tmp_path: Path) -> None:
    server = start_redis(workdir=tmp_path / "redis")
    try:
        qname = f"loss-{unique}"
        spec = JobSpec(job_id=JOB, queue=qname, payload={"n": 1}, lease_ms=LEASE_MS)
        first = RedisQueue.from_url(server.extra["url"])
        first.enqueue(spec)
        lease_a = first.lease(qname, 1, LEASE_MS, "A")[0]
        token_a = env.store.grant(JOB, qname, "A", lease_token=lease_a.lease_token)
        first.close()

        port = server.port
        server.stop()  # no RDB, no AOF: everything Redis held is gone
        server = start_redis(port=port, workdir=tmp_path / "redis")
        second = RedisQueue.from_url(server.extra["url"])
        assert second.lease(qname, 1, LEASE_MS, "B") == []  # the job is gone with the data
        second.enqueue(spec)  # replayed from Kafka, as the relay's recovery does
        lease_b = second.lease(qname, 1, LEASE_MS, "B")[0]
        token_b = env.store.grant(JOB, qname, "B", lease_token=lease_b.lease_token)
        # Redis's lease tokens no longer repeat: the lost seq started again from TIME (µs), not
        # from 0 (before, B got A's lease token again, and A's late grant made B stale: the job
        # model's preloss-worker-grants). The fencing token never relied on it: it still grows.
        assert lease_b.lease_token > lease_a.lease_token
        assert token_b > token_a
        with pytest.raises(LeaseLost, match="granted to a newer lease"):  # A's grant, fenced on its lease
            env.store.grant(JOB, qname, "A", lease_token=lease_a.lease_token)
        with pytest.raises(StaleToken):
            env.store.write_result(JOB, token_a, {"by": "A"})
        assert env.store.write_result(JOB, token_b, {"by": "B"}) is WriteOutcome.WRITTEN
        assert env.store.get_job(JOB).result == {"by": "B"}
        second.close()
    finally:
        server.stop()


def test_fenced_table_rejects_stale_put_update_delete_on_a_second_table(env: Env, unique: str) -> None:
    side = f"ledger-{unique}"
    env.db.create_table(TableName=side, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                        BillingMode="PAY_PER_REQUEST")
    store = env.store
    a = store.grant(JOB, "q", "A")
    fa = store.fenced_table(side, JOB, a, events=EventBus())
    fa.put_item({"pk": "balance", "amount": 10})
    fa.put_item({"pk": "temp"})
    b = store.grant(JOB, "q", "B")  # A's lease expired; B holds the job now
    attempts = {
        "put": lambda: fa.put_item({"pk": "balance", "amount": 0}),
        "update": lambda: fa.update_item({"pk": "balance"}, "SET amount = amount - :d", values={":d": 10}),
        "delete": lambda: fa.delete_item({"pk": "temp"}),
    }
    for name, attempt in attempts.items():
        with pytest.raises(StaleToken) as info:
            attempt()
        assert (info.value.mine, info.value.current) == (a, b), name
    items = {i["pk"]["S"]: i for i in env.db.scan(TableName=side, ConsistentRead=True)["Items"]}
    assert set(items) == {"balance", "temp"} and items["balance"]["amount"] == {"N": "10"}
    assert env.metrics.names == ["FencedWriteRejected"] * 3
    fb = store.fenced_table(side, JOB, b, events=EventBus())
    fb.update_item({"pk": "balance"}, "SET amount = amount + :d", values={":d": 5})
    fb.delete_item({"pk": "temp"})
    items = {i["pk"]["S"]: i for i in env.db.scan(TableName=side, ConsistentRead=True)["Items"]}
    assert set(items) == {"balance"} and items["balance"]["amount"] == {"N": "15"}
