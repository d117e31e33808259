"""A queue's depth over the last hour with its jobs' enqueue-to-start waits (issue 32's closing
review): the stored sample's format and its hostile forms, the wait histogram's percentiles, the
hour's cut, and the relay's sampler (at most every 10 s per queue, never a reserved queue, a failed
sample dropped)."""

from __future__ import annotations

import math

import pytest

from sluice.core import bus as ev
from sluice.core import depth
from sluice.core.errors import BackendUnavailable
from sluice.core.models import QueueConfig, QueueStats
from sluice.relay.depth import DepthSampler


def test_a_wait_is_known_within_nine_percent_at_its_buckets_middle() -> None:
    for wait in (1, 7, 100, 999, 12_345, 3_600_000, 86_400_000 * 7):
        got = depth.bucket_ms(depth.bucket(wait))
        assert abs(got - wait) <= max(1, 0.095 * wait), (wait, got)
    assert depth.bucket(0) == 0 and depth.bucket(-5) == 0 and depth.bucket(10**30) == depth.MAX_BUCKET
    # lease.lua's formula (natural log, 4 / ln 2), as Redis's Lua computes it
    for wait in (1, 3, 15, 100, 65_535, 10**9):
        assert depth.bucket(wait) == math.floor(math.log(wait + 1) * (4 / math.log(2)) + 1e-9)


def test_percentiles_of_a_histogram_are_by_nearest_rank() -> None:
    h = {depth.bucket(100): 98, depth.bucket(10_000): 2}
    assert depth.percentile(h, 50) == depth.bucket_ms(depth.bucket(100))
    assert depth.percentile(h, 98) == depth.bucket_ms(depth.bucket(100))
    assert depth.percentile(h, 99) == depth.bucket_ms(depth.bucket(10_000))
    assert depth.percentile({}, 50) is None and depth.percentile({3: 0}, 99) is None


def test_a_sample_round_trips_and_the_hour_merges_its_waits() -> None:
    now = 10 * depth.HOUR_MS
    stored = [depth.encode(now - depth.HOUR_MS - 1, 9, 9, 9, 9, {depth.bucket(5): 50}),  # before the hour
              depth.encode(now - 20_000, 5, 1, 2, 0),
              depth.encode(now - 10_000, 7, 1, 2, 1, {depth.bucket(100): 3}).encode(),  # bytes, as Redis
              depth.encode(now, 3, 0, 2, 1, {depth.bucket(100): 1, depth.bucket(20_000): 1})]
    hour = depth.history("q", stored, now)
    assert [s.at_ms for s in hour.samples] == [now - 20_000, now - 10_000, now]
    assert [s.started for s in hour.samples] == [0, 3, 2] and hour.started == 5
    assert hour.samples[0].wait_p50_ms is None
    assert hour.wait_p50_ms == depth.bucket_ms(depth.bucket(100))
    assert hour.wait_p99_ms == depth.bucket_ms(depth.bucket(20_000))
    assert (hour.samples[1].ready, hour.samples[2].dead) == (7, 1)


@pytest.mark.parametrize("text", [
    "", "x", "1,2,3,4", "1,2,3,4,5,6", "1,2,3,-4,5", "1,2,3,4,5;a:1", "1,2,3,4,5;3:x", "1,2,3,4,5;999:1",
    "<script>,1,2,3,4", "1,2,3,4,5;" + "1:1," * 2000, "\uff11,2,3,4,5",
])
def test_a_foreign_or_cut_sample_is_skipped(text: str) -> None:
    assert depth.decode(text) is None or depth.decode(text)[1] == {}  # type: ignore[index]
    hour = depth.history("q", [text, depth.encode(5, 1, 1, 1, 1)], 10)
    assert [s.at_ms for s in hour.samples][-1] == 5


def test_a_negative_count_in_a_bucket_is_ignored() -> None:
    found = depth.decode("5,1,1,1,1;3:-2,4:1")
    assert found is not None and found[1] == {4: 1} and found[0].started == 1



def test_a_number_no_script_writes_is_skipped_so_the_hour_and_its_chart_still_draw() -> None:
    """Hostile-team review (session 35): a team's Redis user may write its own queue's depth list and
    waits hash; a count past 2**53 overflowed a float, so the operator's depth route and the
    console's chart of that queue failed (500) instead of skipping it."""
    from sluice_dev.cli.console.pages import stacked_chart

    huge = "9" * 400
    stored = [depth.encode(900, 1, 1, 1, 1), f"1000,1,1,1,1;5:{huge},6:2", f"1{huge},1,1,1,1",
              f"1100,{huge},1,1,1", depth.encode(1200, 2, 0, 0, 0, {3: 2**53})]
    hour = depth.history("q", stored, 2_000)
    assert [(s.at_ms, s.started) for s in hour.samples] == [(900, 0), (1000, 2), (1200, 0)]
    assert hour.started == 2 and hour.wait_p99_ms == depth.bucket_ms(6)
    assert hour.model_dump_json() and '<svg class="depth"' in stacked_chart(hour.samples, 2.0)


class Log:
    def __init__(self, fail: bool = False) -> None:
        self.records: list[tuple[str, int, int, int, int]] = []
        self.fail = fail

    def record(self, queue: str, ready: int, delayed: int, leased: int, dead: int) -> bool:
        if self.fail:
            raise BackendUnavailable("redis down")
        self.records.append((queue, ready, delayed, leased, dead))
        return True

    def read(self, queue: str) -> depth.DepthHistory:
        raise AssertionError("the relay only records")


def measured(queue: str, ready: int) -> ev.QueueMeasured:
    return ev.QueueMeasured(stats=QueueStats(queue=queue, ready=ready, delayed=2, leased=3, dead=4,
                                             oldest_ready_age_ms=0, config=QueueConfig()))


def test_the_relay_samples_each_queue_at_most_every_ten_seconds() -> None:
    log, now = Log(), [100.0]
    bus = ev.EventBus()
    DepthSampler(lambda: log, clock=lambda: now[0]).subscribe(bus)
    bus.emit(measured("emails", 1))
    bus.emit(measured("reports", 7))
    now[0] += 9.9
    bus.emit(measured("emails", 2))  # too soon: the relay refreshes every second
    bus.emit(measured("sluice-relay", 5))  # the relay's own reserved queue: never
    now[0] += 0.2
    bus.emit(measured("emails", 3))
    assert log.records == [("emails", 1, 2, 3, 4), ("reports", 7, 2, 3, 4), ("emails", 3, 2, 3, 4)]


def test_a_failed_sample_is_dropped_and_the_relay_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    bus = ev.EventBus()
    DepthSampler(lambda: Log(fail=True), clock=lambda: 0.0).subscribe(bus)
    bus.emit(measured("emails", 1))
    assert "could not record a depth sample of emails" in caplog.text
