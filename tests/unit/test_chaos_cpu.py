"""The chaos run's CPU accounting (``sluice_dev.chaos.cpu``) and the relay's moves it is set against."""

from __future__ import annotations

import os
import threading
import time

import pytest

from sluice_dev.chaos.cpu import CpuMeter, CpuTally, read_cpu, split, thread_part
from sluice_dev.chaos.runner import relay_moves


def test_a_tally_counts_each_process_from_the_windows_start_and_a_new_one_from_zero() -> None:
    t = CpuTally()
    t.observe({(10, "relay"): 5.0, (20, "moto"): 100.0})  # the window's start: baselines
    t.observe({(10, "relay"): 6.5, (20, "moto"): 101.0, (30, "relay"): 0.25})  # 30 started since
    t.observe({(10, "relay"): 7.0, (20, "moto"): 103.0, (30, "relay"): 0.5})
    assert t.totals() == {"moto": 3.0, "relay": 2.5}


def test_a_process_that_ends_keeps_what_it_used_until_its_last_reading() -> None:
    t = CpuTally()
    t.observe({(10, "worker"): 1.0})
    t.observe({(10, "worker"): 1.75, (11, "worker"): 0.5})
    t.observe({(11, "worker"): 0.75})  # 10 is gone (a container killed at its timeout)
    assert t.totals() == {"worker": 1.5}


def test_a_reading_never_goes_back() -> None:
    t = CpuTally()
    t.observe({(10, "relay"): 2.0})
    t.observe({(10, "relay"): 3.0})
    t.observe({(10, "relay"): 2.5})  # a torn or reused reading: the highest stays
    assert t.totals() == {"relay": 1.0}


def test_the_controllers_threads_are_named_by_what_they_do() -> None:
    assert thread_part("chaos-tenant") == "flood"
    assert thread_part("chaos-workload") == "workload"
    assert thread_part("sluice-network-thread") == "kafka_client"  # kafka-python's, by our client id
    assert thread_part("MainThread") == "controller"
    assert thread_part("") == "controller"


def test_reading_this_process_sees_a_busy_thread_under_its_part() -> None:
    seen: dict[tuple[int, str], float] = {}

    def spin() -> None:  # reads while it lives: an ended thread is gone from /proc/self/task
        end = time.thread_time() + 0.3
        while time.thread_time() < end:
            sum(range(1000))
        seen.update(read_cpu({}))

    worker = threading.Thread(target=spin, name="chaos-tenant")
    worker.start()
    worker.join(10)
    assert seen and all(key[0] < 0 for key in seen)  # this process is read thread by thread, never whole
    flood = [cpu for (_tid, part), cpu in seen.items() if part == "flood"]
    assert len(flood) == 1 and flood[0] >= 0.2
    assert not any(part == "flood" for _, part in read_cpu({}))


def test_reading_names_other_processes_by_their_part_and_skips_a_gone_one() -> None:
    got = read_cpu({os.getppid(): "relay", 2**22 + 12345: "worker"})
    assert (os.getppid(), "relay") in got
    assert not any(part == "worker" for _, part in got)


def test_a_meter_samples_until_stopped_and_reports_its_window() -> None:
    meter = CpuMeter(dict, interval_s=0.05).start()
    end = time.process_time() + 0.2
    while time.process_time() < end:
        sum(range(1000))
    out = meter.stop()
    assert out["window_s"] >= 0.0 and out["parts"].get("controller", 0.0) > 0.1
    assert out["total_s"] == pytest.approx(sum(out["parts"].values()), abs=0.02)


def test_split_gives_each_parts_extra_the_relays_share_and_its_cost_per_flood_record() -> None:
    quiet = {"window_s": 30.0, "parts": {"relay": 2.0, "worker": 6.0, "moto": 10.0, "workload": 1.0}}
    loud = {"window_s": 30.0, "parts": {"relay": 4.5, "worker": 6.5, "moto": 20.0, "workload": 1.0,
                                        "flood": 4.0}}
    out = split(quiet, loud, 5_000)
    assert out["extra_s"] == {"flood": 4.0, "moto": 10.0, "relay": 2.5, "worker": 0.5, "workload": 0.0}
    assert out["extra_raw_s"] == out["extra_s"] and out["window_scale"] == 1.0
    assert out["total_extra_s"] == 17.0
    assert out["relay_extra_s"] == 2.5
    assert out["relay_share_of_extra"] == pytest.approx(2.5 / 17.0, abs=0.001)
    assert out["machine_extra_s"] == 14.0  # moto and the flood: not the relay's nor the workers'
    assert out["relay_extra_us_per_flood_record"] == 500.0


def test_split_sets_the_nemesis_against_the_quiet_runs_rate_over_its_longer_window() -> None:
    quiet = {"window_s": 30.0, "parts": {"relay": 3.0, "moto": 6.0}}
    loud = {"window_s": 45.0, "parts": {"relay": 6.5, "moto": 9.0, "flood": 1.0}}
    out = split(quiet, loud, 1_000)
    assert out["window_scale"] == 1.5
    assert out["extra_s"] == {"flood": 1.0, "moto": 0.0, "relay": 2.0}  # 6.5 - 3.0 * 1.5
    assert out["extra_raw_s"] == {"flood": 1.0, "moto": 3.0, "relay": 3.5}
    assert out["relay_share_of_extra"] == pytest.approx(2.0 / 3.0, abs=0.001)
    assert out["relay_extra_us_per_flood_record"] == 2000.0


def test_split_without_a_flood_or_an_extra_gives_no_share() -> None:
    out = split({"parts": {"relay": 2.0}}, {"parts": {"relay": 1.0}}, 0)
    assert out["relay_share_of_extra"] is None and out["relay_extra_us_per_flood_record"] is None
    assert out["window_scale"] == 1.0  # no windows: the sums as they are
    assert split({}, {}, 10)["total_extra_s"] == 0


def test_the_relays_moves_are_summed_over_the_invocations_ended_by_then() -> None:
    events = [
        {"op": "relay_run", "t1": 10.0, "pushed": 3, "parked": 500},
        {"op": "relay_run", "t1": 20.0, "pushed": 1, "parked": 200, "unparked": 7},
        {"op": "relay_run", "t1": 31.0, "pushed": 9, "parked": 9},  # ended after the window
        {"op": "push", "t1": 12.0, "pushed": 4},
    ]
    got = relay_moves(events, until=30.0)
    assert got["invocations"] == 2 and got["pushed"] == 4 and got["parked"] == 700 and got["unparked"] == 7
