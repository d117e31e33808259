"""Issue 13, bug 3: records the relay reads again cost nothing, and old jobs do not pin the checkpoint.

The relay with recovery as its hooks (as in the Lambda), over in-memory fakes.
"""

from __future__ import annotations

from typing import Any

from sluice.core.bus import EventBus
from sluice.relay import Relay, RelayConfig
from sluice.relay.recovery import Recovery
from sluice_dev.fakes import FakeCheckpoints
from tests.unit.test_relay import World


class Epochs:
    def peek(self) -> str | None:
        return "e1"

    def current(self) -> str:
        return "e1"

    def rebase(self, queue: str, topic: str, partition: int, owner: int, offset: int) -> bool:
        return False


class Offsets:
    def __init__(self, w: World) -> None:
        self.w = w

    def committed(self, partition: int) -> int | None:
        return self.w.source.committed_offsets.get(partition)

    def seek(self, partition: int, offset: int) -> None:
        self.w.source.positions[partition] = offset


class Costs:
    """What the relay spends on a queue: rate tokens granted, ids checked for finality."""

    def __init__(self, w: World) -> None:
        self.tokens = 0
        self.checked: list[str] = []
        take, final = w.engine.take_rate, w.store.final_job_ids

        def take_rate(queue: str, wanted: int) -> int:
            granted = take(queue, wanted)
            self.tokens += granted
            return granted

        def final_job_ids(job_ids: Any) -> set[str]:
            ids = list(job_ids)
            self.checked.extend(ids)
            return final(ids)

        w.engine.take_rate = take_rate  # type: ignore[method-assign]
        w.store.final_job_ids = final_job_ids  # type: ignore[method-assign]


def recovering_relay(w: World, ckpts: FakeCheckpoints, relay_id: str) -> Relay:
    recovery = Recovery(w.source.topic, Epochs(), ckpts, Offsets(w), w.store, interval_s=1.0,
                        clock=w.clock.monotonic, events=EventBus())
    return Relay(w.engine, w.store, w.source, w.dispatcher, relay_id=relay_id, clock=w.clock,  # type: ignore[arg-type]
                 hooks=recovery, config=RelayConfig(poll_ms=10, commit_s=0), events=EventBus())


def test_newer_jobs_of_a_rate_limited_queue_flow_while_2000_delayed_old_ones_are_pending() -> None:
    w = World(partitions=1)
    ckpts = FakeCheckpoints()
    old = w.add(2000, partition=0)  # delayed by a day: none becomes final during the test
    recovering_relay(w, ckpts, "r1").run_until(w.clock.now_ms() + 20_000)
    assert sorted(w.in_redis()) == sorted(old)
    ckpt = ckpts.items[0]
    # every unfinished record is listed, and the checkpoint is not held back by them
    assert ckpt.high == 2000 and len(ckpt.pending) == 2000 and ckpt.low_water == 0

    w.engine.set_config("q", rate_per_s=5.0, burst=5)  # the queue is limited to 5/s
    new = w.add(50, partition=0)
    costs = Costs(w)
    queued_before = len(w.store.queued)
    report = recovering_relay(w, ckpts, "r2").run_until(w.clock.now_ms() + 15_000)

    assert set(new) <= set(w.in_redis())  # 50 jobs at 5/s: about 10 s, not a day
    assert costs.tokens == 50  # not one token for the 2,000 old records
    assert report.pushed == 50
    assert [j for j, _, _ in w.store.queued[queued_before:]] == new  # no status write for old ones
    pushed_path = [j for j in costs.checked if j in set(old)]
    # old ids are only read by the checkpoint's scan, not by the push path: the oldest 250 (a
    # quarter of a scan: they hold the low water) at once, the rest spread over 64 intervals
    # (about 1,750 * 15 / 64 = 410 of them in the 15 s)
    assert len(pushed_path) < 250 + 550
    assert ckpts.items[0].high == 2050 and len(ckpts.items[0].pending) == 2050


def test_records_redis_already_holds_cost_no_rate_token_no_finality_read_and_no_status_write() -> None:
    """A relay that died after its push and before its Kafka commit: the next one reads the
    records again. push.lua would skip them, but they used to take rate tokens first."""
    w = World(partitions=1)
    ids = w.add(30, partition=0)
    first = w.relay("r1")
    first.step()
    first.step()
    assert sorted(w.in_redis()) == sorted(ids)
    w.source.committed_offsets.clear()  # as if it died before committing
    first.pusher.drain()  # the status writes of the first relay land first
    w.engine.set_config("q", rate_per_s=5.0, burst=5)
    for owned in list(first.ownership.owned.values()):  # it is gone: its leases lapse
        w.engine.ownership[owned.job_id][1].holder = None
    costs = Costs(w)
    queued_before = len(w.store.queued)
    newer = w.add(5, partition=0)
    second = w.relay("r2")
    for _ in range(20):
        second.step()
    second.stop()
    assert sorted(w.in_redis()) == sorted(ids + newer)
    assert costs.tokens == 5 and set(costs.checked) == set(newer)
    assert [j for j, _, _ in w.store.queued[queued_before:]] == newer
    assert second.report.reread == 30 and second.report.skipped == 30
    assert w.source.committed_offsets == {0: 35}
