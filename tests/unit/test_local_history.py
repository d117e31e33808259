"""The worker history (sluice_dev.local.history): its event-bus recorder and the analysis the demo reports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sluice.core import bus as events
from sluice.core.errors import LeaseLost, StaleToken
from sluice.core.models import WriteOutcome
from sluice_dev.fakes import FakeStore
from sluice_dev.local import history


class Queue:
    def ack(self, queue: str, job_id: str, token: int) -> None:
        if token < 0:
            raise LeaseLost("gone")

    def extend(self, queue: str, job_id: str, token: int, lease_ms: int) -> Any:
        raise LeaseLost("gone")


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def recording(path: Path) -> events.EventBus:
    bus = events.EventBus()
    history.record(bus, path)
    return bus


def grant(bus: events.EventBus, store: FakeStore, job: str, owner: str) -> int:
    return events.timed(bus, lambda: store.grant(job, "q", owner), events.Granted,
                        {"job": job, "queue": "q", "owner": owner}, details=lambda t: {"token": t})


def write(bus: events.EventBus, store: FakeStore, job: str, token: int, result: Any) -> WriteOutcome:
    return events.timed(bus, lambda: store.write_result(job, token, result), events.ResultWritten,
                        {"job": job, "token": token, "result": result}, ok=str, refused=events.ResultRefused)


def test_the_recorder_writes_one_line_per_reported_call_as_it_returned_or_raised(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    bus, s, q = recording(path), FakeStore(), Queue()
    assert grant(bus, s, "j1", "w") == 1
    assert write(bus, s, "j1", 1, {"r": 1}) is WriteOutcome.WRITTEN
    redis = {"job": "j1", "queue": "q", "lease": 5}
    events.timed(bus, lambda: q.ack("q", "j1", 5), events.Acked, redis)
    with pytest.raises(LeaseLost):
        events.timed(bus, lambda: q.extend("q", "j1", 5, 1000), events.Renewed, redis)
    ops = [(e["op"], e["outcome"]) for e in lines(path)]
    assert ops == [("grant", "ok"), ("write", "written"), ("ack", "ok"), ("extend", "lost")]
    written = lines(path)[1]
    assert written["token"] == 1 and written["digest"] == history.digest({"r": 1})
    assert written["t0"] <= written["t1"]


def test_leases_are_recorded_per_job_and_one_process_shares_one_writer_per_path(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    bus = recording(path)
    for i in range(2):
        bus.emit(events.Leased(job=f"j{i}", queue="q", lease=10 + i, attempt=1))
    recorder = history.record(events.EventBus(), str(path))
    assert history.open_history(path) is history.open_history(str(path)) is recorder.history
    history.open_history(path).emit("fault", kind="k")  # another op, same file; t1 stamped
    lines_ = lines(path)
    assert [(e["op"], e.get("job"), e.get("lease")) for e in lines_] == [
        ("lease", "j0", 10), ("lease", "j1", 11), ("fault", None, None)]
    assert all(e["t1"] > 0 for e in lines_)


def test_a_stale_write_is_recorded_as_rejected_with_the_newer_token(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    bus, s = recording(path), FakeStore()
    grant(bus, s, "j1", "A")
    grant(bus, s, "j1", "B")
    with pytest.raises(StaleToken):
        write(bus, s, "j1", 1, {"r": "A"})
    rejected = lines(path)[-1]
    assert (rejected["op"], rejected["outcome"], rejected["token"], rejected["current"]) == \
        ("write", "rejected", 1, 2)


def test_a_worker_on_a_recorded_bus_writes_lease_grant_start_write_and_ack_in_order(tmp_path: Path) -> None:
    from sluice_dev.fakes import kit

    path = tmp_path / "h.jsonl"
    k = kit()
    k.app.register("q", lambda job, ctx: {"r": 1})
    k.queue.add("q", "j")
    k.worker().bind(events=recording(path)).drain(["q"], 1)
    assert [(e["op"], e.get("outcome")) for e in lines(path)] == [
        ("lease", None), ("grant", "ok"), ("start", None), ("write", "written"), ("ack", "ok")]
    assert lines(path)[3]["digest"] == history.digest({"r": 1})
    start = lines(path)[2]  # the latency benchmark's "handler start"
    assert (start["job"], start["queue"], start["token"], start["attempt"]) == ("j", "q", 1, 1)


def ev(op: str, job: str = "j", pid: int = 1, t: float = 0.0, **kw: Any) -> dict[str, Any]:
    return {"op": op, "job": job, "pid": pid, "t0": t, "t1": t + 0.01, **kw}


def test_analysis_counts_successes_retries_dead_and_losses_once_per_attempt() -> None:
    a = history.Analyser()
    a.feed([
        ev("grant", "ok1", outcome="ok", token=1, t=1), ev("write", "ok1", outcome="written", token=1, t=2,
                                                         digest="d"),
        ev("ack", "ok1", outcome="ok", t=3),
        ev("grant", "r", outcome="ok", token=1, t=1),
        ev("failure", "r", outcome="ok", token=1, status="queued"),
        ev("grant", "r", outcome="ok", token=2, t=5),
        ev("failure", "r", outcome="ok", token=2, status="dead"),
        ev("fail", "r", outcome="dead"),
        # pid 7 loses its lease: heartbeat, then its write is refused - one lost lease, one rejected write
        ev("grant", "x", pid=7, outcome="ok", token=1, t=1),
        ev("extend", "x", pid=7, outcome="lost", lease=3),
        ev("grant", "x", pid=8, outcome="ok", token=2, t=4),
        ev("write", "x", pid=7, outcome="rejected", token=1, t=6, current=2),
        ev("write", "x", pid=8, outcome="written", token=2, t=7, digest="d2"),
    ])
    r = a.finish()
    assert r.succeeded == {"ok1", "x"}
    assert r.dead == {"r"}
    assert r.retries == 1
    assert r.invocations == 5
    assert r.fenced_writes_rejected == 1
    assert r.leases_lost == 1
    assert r.stale_writes_accepted == 0


def test_a_write_accepted_after_a_newer_grant_finished_is_a_stale_write() -> None:
    a = history.Analyser()
    a.feed([
        ev("grant", outcome="ok", token=1, t=1), ev("grant", outcome="ok", token=2, t=2),
        ev("write", outcome="written", token=1, t=3, digest="a"),  # started after grant 2 ended
    ])
    assert a.finish().stale_writes_accepted == 1


def test_a_write_racing_a_newer_grant_is_not_called_stale() -> None:
    a = history.Analyser()
    a.feed([ev("grant", outcome="ok", token=1, t=1), {"op": "grant", "job": "j", "pid": 2, "outcome": "ok",
                                                     "token": 2, "t0": 2.0, "t1": 3.0},
            ev("write", outcome="written", token=1, t=2.5, digest="a")])
    assert a.finish().stale_writes_accepted == 0


def test_read_skips_a_torn_last_line_and_resumes_from_the_offset(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    path.write_text('{"op": "grant", "job": "a"}\nnot json\n{"op": "ack"')
    events, offset = history.read(path)
    assert [e["op"] for e in events] == ["grant"]
    with path.open("a") as f:
        f.write(', "job": "a"}\n')
    more, _ = history.read(path, offset)
    assert [e["op"] for e in more] == ["ack"]
    assert history.read(tmp_path / "missing.jsonl") == ([], 0)


def test_verify_accepts_final_jobs_with_their_last_written_result_and_flags_the_rest() -> None:
    from sluice_dev.local import verify
    from sluice_dev.local.workload import PlannedJob

    ok = PlannedJob(0, "echo", {"a": 1}, job_id="ok")
    dead = PlannedJob(1, "flaky", {"always_fail": True}, job_id="dead", expect_dead=True)
    stuck = PlannedJob(2, "echo", 1, job_id="stuck")
    wrong = PlannedJob(3, "echo", 2, job_id="wrong")
    never = PlannedJob(4, "echo", 3)  # never accepted: not checked
    result = {"echo": {"a": 1}}
    bad = {"echo": 99}
    a = history.Analyser()
    a.feed([ev("grant", "ok", outcome="ok", token=1, t=1),
            ev("write", "ok", outcome="written", token=1, t=2, digest=history.digest(result)),
            ev("grant", "wrong", outcome="ok", token=1, t=1),
            ev("write", "wrong", outcome="written", token=1, t=2, digest=history.digest(bad))])
    report = a.finish()
    full = history.digest(result)  # the store keeps the whole sha256; the history its first 16 digits
    items = {
        "ok": {"status": "succeeded", "result": json.dumps(result), "result_token": 1,
               "result_digest": full + "0" * 48},
        "dead": {"status": "dead"},
        "stuck": {"status": "leased", "token": 1, "lease_owner": "w", "attempts": 1},
        "wrong": {"status": "succeeded", "result": json.dumps(bad), "result_token": 1,
                  "result_digest": history.digest(bad) + "0" * 48},
    }
    v = verify.check([ok, dead, stuck, wrong, never], items, report)
    assert (v.checked, v.succeeded, v.dead) == (4, 2, 1)
    assert v.not_final == ["stuck (echo) is leased with token 1, owner w, attempts 1"]
    assert len(v.wrong_results) == 1 and v.wrong_results[0].startswith("wrong: echo returned")
    assert not v.ok and len(v.failures()) == 2


def test_record_relay_writes_the_lines_the_chaos_checker_reads(tmp_path: Path) -> None:
    """The read, push and config lines the relay's engine and source wrappers wrote before issue 16
    (field for field: ``chaos.rules`` and ``chaos.check`` read them), now from the relay's events,
    with the events' own times."""
    from sluice_dev.chaos.app import record_relay

    evented = tmp_path / "e.jsonl"
    report = record_relay(history.open_history(evented))
    report(events.Pushed(queue="q", topic="t", partition=0, owner=3, first=7, last=8, pushed=2, skipped=0,
                         jobs=("a", "b"), outcome="ok", t0=1.0, at=2.0))
    report(events.Pushed(queue="q", topic="t", partition=1, owner=4, first=9, last=9, outcome="error",
                         error="boom", t0=3.0, at=4.0))
    report(events.RecordsRead(topic="t", partition=0, first=7, last=8, n=2, at=5.0))
    report(events.ConfigRead(queue="q", paused=True, t0=6.0, at=7.0))

    def shape(path: Path) -> list[dict[str, Any]]:
        return [{k: v for k, v in e.items() if k != "pid"} for e in lines(path)]

    assert shape(evented) == [
        {"op": "push", "t0": 1.0, "t1": 2.0, "partition": 0, "owner": 3, "outcome": "ok", "first": 7,
         "last": 8, "queue": "q", "pushed": 2, "skipped": 0, "jobs": ["a", "b"]},
        {"op": "push", "t0": 3.0, "t1": 4.0, "partition": 1, "owner": 4, "outcome": "error", "first": 9,
         "last": 9, "error": "boom"},
        {"op": "read", "partition": 0, "first": 7, "last": 8, "n": 2, "t1": 5.0},
        {"op": "config", "t0": 6.0, "t1": 7.0, "queue": "q", "paused": True},
    ]


def test_the_local_stacks_recorder_writes_a_relay_push_as_the_chaos_history_does(tmp_path: Path) -> None:
    """The local stack's relay container records its pushes through the one Recorder (the latency
    benchmark reads them); the line is the chaos history's push line, field for field."""
    from sluice_dev.chaos.app import record_relay

    pushed = events.Pushed(queue="q", topic="t", partition=0, owner=3, first=7, last=8, pushed=2,
                           skipped=0, jobs=("a", "b"), outcome="ok", t0=1.0, at=2.0)
    failed = events.Pushed(queue="q", topic="t", partition=1, owner=4, first=9, last=9, outcome="error",
                           error="boom", t0=3.0, at=4.0)
    local, chaos = tmp_path / "local.jsonl", tmp_path / "chaos.jsonl"
    recorder = history.Recorder(history.History(local))
    report = record_relay(history.History(chaos))
    for e in (pushed, failed):
        recorder(e)
        report(e)

    def shape(path: Path) -> list[dict[str, Any]]:
        return [{k: v for k, v in e.items() if k != "pid"} for e in lines(path)]

    assert shape(local) == shape(chaos)
    assert [e["jobs"] for e in lines(local)[:1]] == [["a", "b"]]


def test_a_real_relay_emits_the_events_record_relay_turns_into_read_push_and_config_lines(
        tmp_path: Path) -> None:
    """The relay's parts emit RecordsRead, ConfigRead and Pushed; record_relay writes from them the
    chaos history's read, config and push lines."""
    from sluice.core.models import JobSpec
    from sluice_dev.chaos.app import record_relay
    from tests.unit.test_relay import World

    evented = tmp_path / "e.jsonl"
    w = World(partitions=1)
    for job_id in ("a", "b"):
        w.source.append_spec(0, JobSpec(job_id=job_id, queue="q", payload=None))
    bus = events.EventBus()
    bus.subscribe(record_relay(history.open_history(evented)), events.RecordsRead, events.Pushed,
                  events.ConfigRead)
    relay = w.relay(events=bus)
    for _ in range(3):
        relay.step()
    token = relay.ownership.owned[0].token

    def shape(path: Path) -> list[dict[str, Any]]:
        return [{k: v for k, v in e.items() if k not in ("t0", "t1", "pid")} for e in lines(path)]

    wrote = [{"op": "read", "partition": 0, "first": 0, "last": 1, "n": 2},
             {"op": "config", "queue": "q", "paused": False},
             {"op": "push", "partition": 0, "owner": token, "outcome": "ok", "first": 0, "last": 1,
              "queue": "q", "pushed": 2, "skipped": 0, "jobs": ["a", "b"]}]
    assert shape(evented) == wrote
    assert [e["op"] for e in lines(evented)] == ["read", "config", "push"]


def test_check_families_wants_every_child_once_and_one_continuation_after_them_with_the_sum() -> None:
    from sluice_dev.local import verify
    from sluice_dev.local.workload import PlannedJob

    parents = [PlannedJob(i, "fanout", {"n": 2}, job_id=f"p{i}") for i in range(4)]
    members = {p.job_id or "": ([f"{p.job_id}c0", f"{p.job_id}c1"], [f"{p.job_id}t"]) for p in parents}
    members["p3"] = (["p3c0"], ["p3t"])  # a child missing
    good = {"sum": 1, "children": 2, "states": {"succeeded": 2}}
    events, items = [], {}
    for p in ("p0", "p1", "p2"):
        for i, c in enumerate((f"{p}c0", f"{p}c1")):
            events += [ev("grant", c, outcome="ok", token=1, t=1),
                       ev("write", c, outcome="written", token=1, t=2, digest=history.digest(i * i))]
            items[c] = {"status": "succeeded", "result": json.dumps(i * i)}
        started = 1.5 if p == "p1" else 3  # p1's continuation started before its last child's write
        events += [ev("grant", f"{p}t", outcome="ok", token=1, t=started),
                   ev("write", f"{p}t", outcome="written", token=1, t=4, digest=history.digest(good))]
        items[f"{p}t"] = {"status": "succeeded", "remaining": 0,
                          "result": json.dumps(good if p != "p2" else {**good, "sum": 7})}
    v = verify.check_families(parents, members, items, _report(events))
    assert (v.parents, v.children, v.continuations, v.sums_ok) == (4, 7, 4, 1)
    assert len(v.problems) == 3
    assert any("p1t started before" in p for p in v.problems)
    assert any("p2t" in p and "expected succeeded" in p for p in v.problems)
    assert any("p3: 1 children" in p for p in v.problems)


def _report(events: list[dict[str, Any]]) -> history.HistoryReport:
    a = history.Analyser()
    a.feed(events)
    return a.finish()
