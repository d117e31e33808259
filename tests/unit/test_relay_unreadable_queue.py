"""A queue whose keys its team broke by hand (session 36: its worker's Redis user may DEL a key of its
queue and SET a string in its place, and every script touching it fails with WRONGTYPE; or write a
config no script writes) holds that queue alone. Before, its stats read raised in the relay's plan of
every queue: each step failed, and no queue of that relay was pushed; and in the maintenance, which
then skipped every queue after it (docs/security.md, "Values a team may stuff")."""

from __future__ import annotations

from typing import Any

import pytest

from sluice.core.bus import EventBus
from sluice.core.errors import BackendUnavailable, SluiceError
from sluice.core.models import JobSpec, QueueStats
from sluice.relay import Relay, RelayConfig
from sluice_dev.fakes import RELAY_CALLS, FakeClock, FakeDispatcher, FakeEngine, FakeSource, FakeStore

pytestmark = pytest.mark.timeout(30)

TOPIC = "sluice.jobs"
BROKEN = "a-broken"  # sorts before "q": the maintenance reached it first


class BrokenEngine(FakeEngine):
    """A FakeEngine whose reads of one queue fail as Redis's do when the team broke its keys."""

    def __init__(self, clock: FakeClock, error: Exception, push_only: bool = False) -> None:
        super().__init__(clock)
        self.error, self.push_only = error, push_only

    def stats(self, queue: str) -> QueueStats:
        if queue == BROKEN and not self.push_only:
            raise self.error
        return super().stats(queue)

    def push(self, queue: str, *args: Any, **kwargs: Any) -> Any:
        if queue == BROKEN:
            raise self.error
        return super().push(queue, *args, **kwargs)

    def reap(self, queue: str, limit: int) -> int:
        if queue == BROKEN:
            raise self.error
        return super().reap(queue, limit)


def world(error: Exception, push_only: bool = False) -> tuple[BrokenEngine, FakeSource, Relay]:
    clock = FakeClock()
    engine = BrokenEngine(clock, error, push_only)
    source = FakeSource(topic=TOPIC, n_partitions=1, clock=clock)
    for n in range(10):
        queue = BROKEN if n % 2 else "q"
        source.append_spec(0, JobSpec(job_id=f"job-{n}", queue=queue, payload={"n": n},
                                      enqueued_at_ms=1_700_000_000_000 + n))
    relay = Relay(engine, FakeStore(only=RELAY_CALLS), source, FakeDispatcher(),  # type: ignore[arg-type]
                  relay_id="r1", clock=clock, events=EventBus(), config=RelayConfig(poll_ms=10, commit_s=0))
    return engine, source, relay


ERRORS: dict[str, Any] = {
    "a key of the wrong type": SluiceError("Error: running script: WRONGTYPE Operation against a key"),
    "a config no script writes": ValueError("invalid literal for int() with base 10: 'abc'"),
}


@pytest.mark.parametrize("how", list(ERRORS))
def test_a_queue_whose_reads_fail_is_held_alone_and_the_others_are_pushed(how: str) -> None:
    engine, _, relay = world(ERRORS[how])
    for _ in range(4):
        relay.step()
    assert sorted(engine.jobs.get("q", {})) == [f"job-{n}" for n in (0, 2, 4, 6, 8)]
    assert not engine.jobs.get(BROKEN)
    assert relay.queues.states[BROKEN].blocked


def test_the_maintenance_goes_on_past_a_queue_whose_reads_fail() -> None:
    engine, _, relay = world(ERRORS["a key of the wrong type"])
    engine.jobs.setdefault(BROKEN, {})
    engine.jobs.setdefault("q", {})
    relay.maintenance.run(relay.clock.monotonic())
    assert "q" in engine.reaped


def test_redis_down_still_fails_the_step_as_before() -> None:
    """Every queue's read failing is Redis, not a queue: the step fails and backs off, as before."""
    _, _, relay = world(BackendUnavailable("redis is down"))
    with pytest.raises(BackendUnavailable):
        for _ in range(4):
            relay.step()


def test_a_queue_whose_push_alone_fails_on_its_keys_is_held_and_the_step_goes_on() -> None:
    """A key only push.lua touches (the relayed hash, the wake list, a group's zset) of the wrong type:
    the queue's re-read works and its push fails. Before, that error was raised as the round's, after
    the other queues' pushes: every step failed and backed off (up to 2 s), slowing every queue."""
    engine, _, relay = world(ERRORS["a key of the wrong type"], push_only=True)
    for _ in range(4):
        relay.step()  # raised before
    assert sorted(engine.jobs.get("q", {})) == [f"job-{n}" for n in (0, 2, 4, 6, 8)]
    assert relay.queues.states[BROKEN].blocked and relay.report.errors == 0
