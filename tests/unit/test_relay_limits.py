"""The relay enforces the limits (sluice.core.limits) on what the gateway accepted: it holds records back
in Kafka at a cap (never drops them), trims dead jobs only after settling, and dead-letters records
of queues the registry refuses. In-memory fakes, no sockets."""

from __future__ import annotations

from typing import Any

from sluice.core.bus import EventBus
from sluice.core.errors import QueueNotAllowed
from sluice.core.limits import Limits
from sluice.core.models import JobSpec, QueueStats
from sluice.relay import Relay, RelayConfig
from sluice_dev.fakes import RELAY_CALLS, FakeClock, FakeDispatcher, FakeEngine, FakeSource, FakeStore
from tests.unit.test_relay import TOPIC


class LimitedEngine(FakeEngine):
    """The fake engine plus what RedisQueue answers for the limits: delayed and dead depths,
    memory, trim_dead, and a registry that refuses some names."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.dead: dict[str, int] = {}
        self.memory: float | None = None
        self.refuse: set[str] = set()
        self.trims: list[tuple[str, int, int]] = []

    def _waiting(self, queue: str) -> tuple[int, int]:
        now = self.clock.now_ms()
        specs = list(self.jobs.get(queue, {}).values())
        delayed = sum(1 for s in specs if s.run_at_ms > now)
        return len(specs) - delayed - self.consumed.get(queue, 0), delayed

    def stats(self, queue: str) -> QueueStats:
        self._call("stats")
        ready, delayed = self._waiting(queue)
        return QueueStats(queue=queue, ready=ready, delayed=delayed, leased=0, dead=self.dead.get(queue, 0),
                          oldest_ready_age_ms=None, config=self.get_config(queue))

    def memory_percent(self) -> float | None:
        return self.memory

    def register(self, queue: str) -> None:
        self._call("register")
        if queue in self.refuse:
            raise QueueNotAllowed(f"queue {queue!r} is not on the operator's allow-list")

    def trim_dead(self, queue: str, keep: int, max_age_ms: int, limit: int = 1000) -> tuple[int, int]:
        self._call("trim_dead")
        self.trims.append((queue, keep, max_age_ms))
        n = max(0, self.dead.get(queue, 0) - keep)
        self.dead[queue] = self.dead.get(queue, 0) - n
        return n, 0


class World:
    def __init__(self, limits: Limits) -> None:
        self.clock = FakeClock()
        self.engine = LimitedEngine(self.clock)
        self.store = FakeStore(only=RELAY_CALLS)
        self.source = FakeSource(topic=TOPIC, n_partitions=1, clock=self.clock)
        self.limits = limits
        self.seq = 0

    def relay(self, **kw: Any) -> Relay:
        kw = {"poll_ms": 10, "commit_s": 0, "refresh_s": 0.1, "batch": 10, **kw}
        return Relay(self.engine, self.store, self.source, FakeDispatcher(),  # type: ignore[arg-type]
                     relay_id="r1", clock=self.clock, config=RelayConfig(limits=self.limits, **kw),
                     events=EventBus())

    def add(self, n: int, queue: str = "q", delay_s: int = 0) -> list[str]:
        ids = []
        for _ in range(n):
            self.seq += 1
            run_at = self.clock.now_ms() + delay_s * 1000 if delay_s else 0
            spec = JobSpec(job_id=f"job-{self.seq}", queue=queue, payload=self.seq, run_at_ms=run_at)
            self.source.append_spec(0, spec)
            ids.append(spec.job_id)
        return ids

    def in_redis(self, queue: str = "q") -> list[str]:
        return list(self.engine.jobs.get(queue, {}))

    def run(self, relay: Relay, steps: int) -> None:
        for _ in range(steps):
            relay.step()
            self.clock.t += 0.05


def test_delayed_records_over_the_cap_wait_in_kafka_and_ready_ones_before_them_go() -> None:
    w = World(Limits(max_delayed=5))
    first = w.add(3)
    later = w.add(8, delay_s=3600)
    after = w.add(2)
    relay = w.relay()
    w.run(relay, 20)
    assert w.in_redis() == first + later[:5]  # the 6th delayed record stops the queue there
    assert w.source.committed_offsets == {0: 8}  # not past the first held record: nothing lost
    w.clock.t += 3601  # the delayed jobs come due: room again
    w.run(relay, 20)
    assert w.in_redis() == first + later + after
    assert w.source.committed_offsets == {0: 13}


def test_a_queue_at_its_dead_cap_is_held_and_other_queues_flow() -> None:
    w = World(Limits(max_dead=1_000))
    w.engine.set_config("q", max_dead=10)  # its own cap beats the deployment's
    w.engine.dead["q"] = 10
    held = w.add(4)
    flowing = w.add(3, queue="other")
    relay = w.relay()
    w.run(relay, 10)
    assert w.in_redis() == [] and w.in_redis("other") == flowing
    assert w.source.committed_offsets.get(0, 0) == 0
    w.engine.dead["q"] = 3  # an operator purged them
    w.run(relay, 10)
    assert w.in_redis() == held
    assert w.source.committed_offsets == {0: 7}


def test_above_the_memory_guard_deep_queues_are_held_then_every_queue() -> None:
    w = World(Limits(push_memory_percent=80, memory_guard_depth=5))
    w.engine.memory = 85.0
    deep = w.add(12, queue="deep")
    shallow = w.add(3, queue="shallow")
    relay = w.relay()
    w.run(relay, 20)
    assert w.in_redis("shallow") == shallow  # a queue its workers keep up with still flows
    assert 5 <= len(w.in_redis("deep")) < len(deep)  # pushed until the guard saw its depth
    w.engine.memory = 95.0  # halfway to full: nothing at all
    more = w.add(1, queue="shallow")
    w.run(relay, 10)
    assert w.in_redis("shallow") == shallow
    w.engine.memory = 50.0
    w.run(relay, 20)
    assert w.in_redis("deep") == deep and w.in_redis("shallow") == shallow + more


def test_maintenance_trims_dead_jobs_after_settling_them() -> None:
    w = World(Limits(dead_keep=50, dead_retention_ms=3_600_000))
    w.engine.jobs["q"] = {}
    w.engine.dead["q"] = 80
    relay = w.relay(maintenance_s=5)
    relay.step()
    assert w.engine.trims == [("q", 50, 3_600_000)]
    assert relay.report.trimmed == 30
    calls = w.engine.calls
    assert calls.index("unsettled") < calls.index("trim_dead")


def test_records_of_a_queue_the_registry_refuses_go_to_the_dead_letter_topic() -> None:
    w = World(Limits())
    w.engine.refuse = {"random-name"}
    ok = w.add(2)
    refused = w.add(3, queue="random-name")
    rest = w.add(2)
    relay = w.relay()
    w.run(relay, 5)
    assert w.in_redis() == ok + rest and w.in_redis("random-name") == []
    assert [(r.offset, why.startswith("queue refused")) for r, why in w.source.dead] == [(2, True), (3, True),
                                                                                        (4, True)]
    assert [r.key for r, _ in w.source.dead] == [i.encode() for i in refused]
    assert w.source.committed_offsets == {0: 7}
    assert relay.report.refused == 3
    assert w.engine.calls.count("register") == 2  # once per queue, not per record


def test_a_queue_held_at_its_delayed_cap_spends_no_rate_tokens() -> None:
    """The bucket is shared by every relay: tokens taken for records that then wait are lost."""
    w = World(Limits(max_delayed=2))
    w.engine.set_config("q", rate_per_s=1000.0, burst=1000)
    w.add(4, delay_s=3600)
    relay = w.relay()
    w.run(relay, 5)
    assert len(w.in_redis()) == 2
    asked = w.engine.calls.count("take_rate")
    w.run(relay, 20)
    assert w.engine.calls.count("take_rate") == asked
