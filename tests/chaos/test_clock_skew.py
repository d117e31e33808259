"""The skew_relay_clock fault: the nemesis writes the clock file, a relay process follows it,
its wall clock (and every wall-clock read of the relay's code) moves, its history does not."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.relay.ports import SystemClock
from sluice_dev.chaos import history, skew
from sluice_dev.chaos.nemesis import Fault, Nemesis, plan
from sluice_dev.local.history import wall

pytestmark = pytest.mark.timeout(30)


class RelayTargets:
    def arming(self, target: str) -> str:
        return "relay"

    def pick(self, target: str) -> int | None:
        return None


class NoServers:
    def restart_redis(self) -> None:
        raise AssertionError("not in this test")

    def restart_broker(self) -> None:
        raise AssertionError("not in this test")


@pytest.fixture
def unskewed() -> Iterator[None]:
    yield
    skew.set_offset(0)
    assert time.time is wall


def test_a_relay_process_follows_the_nemesis_s_skew_and_steps_back_after_the_hold(
        tmp_path: Path, unskewed: None) -> None:
    h = history.History(tmp_path / "history.jsonl")
    nem = Nemesis([], RelayTargets(), NoServers(), h, tmp_path)
    nem.inject(Fault(0.0, "skew_relay_clock", "r0", hold_s=0.5, offset_s=-6.0))
    follower = skew.ClockFollower(tmp_path, "relay", h)
    follower.step()
    machine = wall()
    # the process's wall clock, as the relay's Clock port and the engine's push checks read it
    assert time.time() == pytest.approx(machine - 6.0, abs=0.5)
    assert SystemClock().now_ms() / 1000 == pytest.approx(machine - 6.0, abs=0.5)
    from sluice.core.clock import wall_ms  # the engine's push checks read it
    assert wall_ms() / 1000 == pytest.approx(machine - 6.0, abs=0.5)
    h.emit("probe")  # the history stays on the machine's clock
    follower.step()  # nothing changed: nothing recorded
    time.sleep(0.6)
    follower.step()  # the hold is over: back to the machine's clock
    assert time.time() == pytest.approx(wall(), abs=0.1) and skew.offset_s() == 0
    events = history.read(tmp_path / "history.jsonl")
    probe = next(e for e in events if e["op"] == "probe")
    assert probe["t1"] == pytest.approx(machine, abs=0.5)
    faults = [(e["kind"], e["phase"], e.get("offset_s")) for e in events if e["op"] == "fault"]
    assert faults == [("skew_relay_clock", "injected", -6.0), ("skew_relay_clock", "landed", -6.0),
                      ("skew_relay_clock", "resumed", None)]


def test_a_missing_or_torn_clock_file_means_no_skew(tmp_path: Path, unskewed: None) -> None:
    follower = skew.ClockFollower(tmp_path, "relay", history.History(tmp_path / "h.jsonl"))
    assert follower.wanted() == ("", 0.0)
    skew.clock_file(tmp_path, "relay").write_text('{"offset_s": 3')
    assert follower.wanted() == ("", 0.0)
    follower.step()
    assert time.time is wall and not history.read(tmp_path / "h.jsonl")


def test_the_plan_skews_a_relay_for_a_while_by_a_few_seconds_either_way() -> None:
    skews = [f for seed in range(40) for f in plan(seed, 45, interval_s=3.5, lease_s=2, workers=3, relays=1)
             if f.kind == "skew_relay_clock"]
    assert len(skews) >= 40  # every plan has one
    assert all(f.target == "r0" and 5.0 <= f.hold_s <= 15.0 and 0.5 <= abs(f.offset_s) <= 8.0 for f in skews)
    assert {f.offset_s > 0 for f in skews} == {True, False}
