"""The chaos checker on hand-made histories: a clean one, and one breaking each invariant."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sluice_dev.chaos import history
from sluice_dev.chaos.checker import Report, StoreItem, check

GOOD = "d-good"
BAD = "d-bad"


def enqueue(job: str, outcome: str = "ok", expect: str = GOOD, t: float = 1.0) -> dict[str, Any]:
    return {"op": "enqueue", "job": job, "outcome": outcome, "expect": expect, "t0": t, "t1": t}


def grant(job: str, token: int, t1: float) -> dict[str, Any]:
    return {"op": "grant", "job": job, "token": token, "outcome": "ok", "t0": t1 - 0.01, "t1": t1}


def invoke(job: str, token: int, t: float) -> dict[str, Any]:
    return {"op": "invoke", "job": job, "token": token, "t0": t, "t1": t}


def write(job: str, token: int, t0: float, digest: str = GOOD, outcome: str = "written") -> dict[str, Any]:
    return {"op": "write", "job": job, "token": token, "digest": digest, "outcome": outcome,
            "t0": t0, "t1": t0 + 0.01}


def run(job: str, token: int, t: float, digest: str = GOOD) -> list[dict[str, Any]]:
    """One execution: grant, invoke, accepted write, ack."""
    return [grant(job, token, t), invoke(job, token, t + 0.1), write(job, token, t + 0.2, digest),
            {"op": "ack", "job": job, "outcome": "ok", "t0": t + 0.3, "t1": t + 0.3}]


def done(token: int = 1, digest: str = GOOD) -> StoreItem:
    return StoreItem("succeeded", token=token, result_token=token, result_digest=digest)


def invariants(r: Report) -> dict[str, int]:
    return {k: getattr(r, k) for k in ("lost", "unexpected", "duplicate_results", "wrong_results",
                                       "stale_writes_accepted", "stuck")}


CLEAN = dict.fromkeys(("lost", "unexpected", "duplicate_results", "wrong_results",
                       "stale_writes_accepted", "stuck"), 0)


def test_a_clean_history_passes_and_counts_what_happened() -> None:
    events = [enqueue("a"), *run("a", 1, 2.0), enqueue("b"), *run("b", 1, 3.0)]
    r = check(events, {"a": done(), "b": done()}, set())
    assert invariants(r) == CLEAN and r.ok
    assert (r.accepted, r.succeeded, r.executions, r.duplicate_executions) == (2, 2, 2, 0)


def test_crash_before_ack_runs_twice_writes_twice_with_equal_results_and_is_fine() -> None:
    events = [enqueue("a"), grant("a", 1, 2.0), invoke("a", 1, 2.1), write("a", 1, 2.2),
              *run("a", 2, 5.0)]
    r = check(events, {"a": done(token=2)}, set())
    assert invariants(r) == CLEAN
    assert r.duplicate_executions == 1 and r.jobs_run_more_than_once == 1


def test_an_accepted_job_that_never_finished_is_lost() -> None:
    events = [enqueue("a"), grant("a", 1, 2.0), invoke("a", 1, 2.1)]
    r = check(events, {"a": StoreItem("queued", token=1)}, set())
    assert r.lost == 1 and r.samples["lost"] == ["a"] and not r.ok


def test_a_job_missing_from_the_store_too_is_lost() -> None:
    assert check([enqueue("a")], {}, set()).lost == 1


def test_dead_jobs_are_not_lost_and_unknown_enqueues_are_not_expected() -> None:
    events = [enqueue("a"), enqueue("b", outcome="info"), enqueue("c", outcome="fail")]
    r = check(events, {"a": StoreItem("dead", token=5)}, set())
    assert invariants(r) == CLEAN and (r.dead, r.accepted, r.unknown_enqueues) == (1, 1, 1)


def test_a_result_for_a_job_never_enqueued_is_unexpected() -> None:
    r = check([*run("ghost", 1, 2.0)], {"ghost": done()}, set())
    assert r.unexpected == 1 and r.samples["unexpected"] == ["ghost"]
    failed_enqueue = check([enqueue("x", outcome="fail"), *run("x", 1, 2.0)], {}, set())
    assert failed_enqueue.unexpected == 1


def test_a_job_whose_enqueue_outcome_was_unknown_may_run() -> None:
    r = check([enqueue("a", outcome="info"), *run("a", 1, 2.0)], {"a": done()}, set())
    assert invariants(r) == CLEAN


def test_a_result_only_in_the_store_counts_as_unexpected_too() -> None:
    assert check([], {"ghost": done()}, set()).unexpected == 1


def test_two_different_results_accepted_for_one_job_are_duplicate_results() -> None:
    events = [enqueue("a"), *run("a", 1, 2.0), *run("a", 2, 5.0, digest=BAD)]
    r = check(events, {"a": done(token=2, digest=BAD)}, set())
    assert r.duplicate_results == 1 and r.wrong_results == 1


def test_the_same_token_written_twice_is_a_duplicate_result() -> None:
    events = [enqueue("a"), *run("a", 1, 2.0), write("a", 1, 3.0)]
    r = check(events, {"a": done()}, set())
    assert r.duplicate_results == 1 and r.wrong_results == 0


def test_a_retry_recognised_as_already_written_is_not_a_duplicate() -> None:
    events = [enqueue("a"), *run("a", 1, 2.0), write("a", 1, 3.0, outcome="already_written")]
    assert invariants(check(events, {"a": done()}, set())) == CLEAN


def test_a_wrong_result_in_the_history_or_in_the_store_is_counted() -> None:
    in_history = check([enqueue("a"), *run("a", 1, 2.0, digest=BAD)], {"a": done(digest=BAD)}, set())
    assert in_history.wrong_results == 1
    stored_only = check([enqueue("a"), *run("a", 1, 2.0)], {"a": done(digest=BAD)}, set())
    assert stored_only.wrong_results == 1 and stored_only.samples["wrong_results"] == ["a"]


def test_a_write_accepted_after_a_newer_token_was_granted_is_a_stale_write() -> None:
    # A holds token 1 and stalls; B is granted token 2 at t=5 and writes; A writes at t=6: accepted.
    events = [enqueue("a"), grant("a", 1, 1.0), invoke("a", 1, 1.1), *run("a", 2, 5.0),
              write("a", 1, 6.0)]
    r = check(events, {"a": StoreItem("succeeded", token=2, result_token=1, result_digest=GOOD)}, set())
    assert r.stale_writes_accepted == 1 and r.samples["stale_writes_accepted"] == ["a"]


def test_a_write_that_started_before_the_newer_grant_finished_is_not_proven_stale() -> None:
    events = [enqueue("a"), grant("a", 1, 1.0), write("a", 1, 4.995), grant("a", 2, 5.0)]
    r = check(events, {"a": StoreItem("leased", token=2)}, {"a"})
    assert r.stale_writes_accepted == 0


def test_a_rejected_stale_write_is_fine_and_counted_as_rejected() -> None:
    events = [enqueue("a"), grant("a", 1, 1.0), *run("a", 2, 5.0), write("a", 1, 6.0, outcome="rejected")]
    r = check(events, {"a": done(token=2)}, set())
    assert invariants(r) == CLEAN and r.writes_rejected == 1


def test_a_succeeded_item_holding_an_older_result_than_an_accepted_write_is_a_stale_write() -> None:
    item = StoreItem("succeeded", token=3, result_token=2, result_digest=GOOD)
    events = [enqueue("a"), grant("a", 2, 1.0), grant("a", 3, 2.0), write("a", 3, 2.1), write("a", 2, 1.1)]
    r = check(events, {"a": item}, set())
    assert r.stale_writes_accepted == 1


def test_a_rerun_of_a_succeeded_job_that_never_wrote_is_not_a_stale_write() -> None:
    """Its worker died before the ack; the re-run was granted token 3 and died too. The job
    stays succeeded with token 2's result (the store's contract), and that is correct."""
    item = StoreItem("succeeded", token=3, result_token=2, result_digest=GOOD)
    events = [enqueue("a"), *run("a", 2, 1.0), grant("a", 3, 2.0)]
    r = check(events, {"a": item}, set())
    assert r.stale_writes_accepted == 0 and r.ok


def test_leased_in_the_store_with_no_live_lease_in_redis_is_stuck() -> None:
    events = [enqueue("a"), grant("a", 1, 1.0)]
    stuck = check(events, {"a": StoreItem("leased", token=1)}, set())
    assert stuck.stuck == 1 and stuck.lost == 1
    running = check(events, {"a": StoreItem("leased", token=1)}, {"a"})
    assert running.stuck == 0


def test_faults_are_counted_per_kind_injected_and_landed() -> None:
    events = [{"op": "fault", "kind": "restart_redis", "phase": "injected"},
              {"op": "fault", "kind": "pause_worker", "phase": "injected"},
              {"op": "fault", "kind": "pause_worker", "phase": "resumed"},
              {"op": "fault", "kind": "kill_worker_before_ack", "phase": "injected"},
              {"op": "fault", "kind": "kill_worker_before_ack", "phase": "landed"}]
    r = check(events, {}, set())
    assert r.faults == {"restart_redis": 1, "pause_worker": 1, "kill_worker_before_ack": 1}
    assert r.faults_landed == {"kill_worker_before_ack": 1}


def test_the_json_report_has_the_issue_keys() -> None:
    out = check([enqueue("a")], {}, set()).as_dict()
    for key in ("accepted", "lost", "unexpected", "duplicate_executions", "duplicate_results",
                "wrong_results", "stale_writes_accepted", "stuck", "faults"):
        assert key in out
    assert out["ok"] is False


def test_history_lines_torn_by_a_kill_are_skipped(tmp_path: Path) -> None:
    h = history.History(tmp_path / "h.jsonl")
    h.emit("enqueue", job="a", outcome="ok")
    h.close()
    with open(tmp_path / "h.jsonl", "a") as f:
        f.write('{"op":"write","job":"a","tok')
    events = history.read(tmp_path / "h.jsonl")
    assert [e["op"] for e in events] == ["enqueue"] and events[0]["pid"] > 0


def test_a_tail_returns_only_complete_new_lines(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    tail = history.Tail(path)
    assert tail.read() == []
    h = history.History(path)
    h.emit("enqueue", job="a")
    with open(path, "a") as f:
        f.write('{"op":"write","job":"a"')  # a line a process is still writing
    assert [e["job"] for e in tail.read()] == ["a"]
    with open(path, "a") as f:
        f.write("}\n")
    h.emit("ack", job="a")
    h.close()
    assert [e["op"] for e in tail.read()] == ["write", "ack"] and tail.read() == []


# -- families (chaos.families) ----------------------------------------------------------------------


def family(parent: str, children: list[str], then: str, t: float = 2.05) -> dict[str, Any]:
    return {"op": "family", "job": parent, "children": children, "continuation": then,
            "expects": {**dict.fromkeys(children, GOOD), then: "d-then"}, "t0": t, "t1": t}


Family = tuple[list[dict[str, Any]], dict[str, StoreItem]]


def a_family(then_at: float = 9.0, child_digest: str = GOOD) -> Family:
    events = [enqueue("p"), grant("p", 1, 2.0), family("p", ["c0", "c1"], "t"), *run("p", 1, 2.0)[1:],
              *run("c0", 1, 4.0), *run("c1", 1, 5.0, child_digest), *run("t", 1, then_at, "d-then")]
    store = {"p": done(), "c0": done(), "c1": done(digest=child_digest), "t": done(digest="d-then")}
    return events, store


def test_a_family_whose_continuation_ran_once_after_its_children_is_clean() -> None:
    events, store = a_family()
    r = check(events, store, set())
    assert invariants(r) == CLEAN and r.ok and r.family_violations == 0
    assert (r.accepted, r.succeeded, r.families, r.family_children, r.continuation_runs) == (1, 1, 1, 2, 1)
    assert r.executions == 4  # the parent, its two children and the continuation


def test_a_continuation_that_ran_before_its_last_child_wrote_is_a_violation() -> None:
    events, store = a_family(then_at=4.5)  # c1 writes at 5.2
    r = check(events, store, set())
    assert r.family_violations == 1 and not r.ok
    assert "before its last child" in r.samples["family_violations"][0]


def test_a_childs_write_answered_late_by_a_frozen_worker_bounds_the_continuation_by_its_request() -> None:
    """test_chaos_short after the bucketed countdown (h33-fanout): a child's worker sent its result
    write at 447.15 and froze (pause_worker) before the answer; the store had applied it and counted
    the child, so another child's worker released the continuation, which started at 448.34. The
    write's answer came at 449.54. The continuation was not early: only a start before the request
    was sent proves it."""
    events, store = a_family(then_at=5.5)  # c1's write is sent at 5.2
    late = next(e for e in events if e["op"] == "write" and e["job"] == "c1")
    late["t1"] = 7.0  # its answer, after the freeze
    r = check(events, store, set())
    assert r.family_violations == 0 and r.ok
    events, store = a_family(then_at=5.1)  # before c1's request was sent: early, whatever the answer
    next(e for e in events if e["op"] == "write" and e["job"] == "c1")["t1"] = 7.0
    r = check(events, store, set())
    assert r.family_violations == 1 and "before its last child" in r.samples["family_violations"][0]


def test_a_child_that_did_not_succeed_or_a_continuation_that_never_ran_is_a_violation() -> None:
    events, store = a_family()
    store["c1"] = StoreItem("dead")
    events = [e for e in events if not (e["job"] == "c1" and e["op"] == "write")]
    r = check(events, store, set())
    assert r.family_violations == 1
    assert "c1: child of p did not succeed (dead)" in r.samples["family_violations"]
    events, store = a_family()
    events = [e for e in events if e["job"] != "t"]
    del store["t"]
    r = check(events, store, set())
    assert r.family_violations == 1
    assert "t: continuation of p did not run" in r.samples["family_violations"][0]


def test_two_runs_of_a_parent_naming_other_children_and_wrong_child_results_are_caught() -> None:
    events, store = a_family()
    r = check([*events, family("p", ["c0", "c9"], "t", t=6.0)], store, set())
    assert r.family_violations == 1 and "different families" in r.samples["family_violations"][0]
    events, store = a_family(child_digest=BAD)
    r = check(events, store, set())
    assert r.wrong_results == 1 and not r.ok  # the child's result against its named answer


def test_a_result_of_a_job_no_family_named_is_still_unexpected() -> None:
    events, store = a_family()
    r = check([*events, *run("stranger", 1, 3.0)], {**store, "stranger": done()}, set())
    assert r.unexpected == 1


def test_a_parent_cancelled_before_its_family_existed_owes_none_and_a_part_family_is_owed() -> None:
    """A 3-shard chaos run (seed 2) had three parents cancelled while their family request was in
    flight: the gateway created nothing, the parent ended cancelled, and the checker wanted the
    children anyway (15 'did not succeed (no item)')."""
    events = [enqueue("p"), grant("p", 1, 2.0), family("p", ["c0", "c1"], "t")]
    store = {"p": StoreItem("cancelled")}
    r = check(events, store, set())
    assert r.family_violations == 0 and r.families_refused == 1
    store = {"p": StoreItem("cancelled"), "c0": StoreItem("accepted")}  # created in part: stuck
    r = check(events, store, set())
    assert r.family_violations >= 1 and r.families_refused == 0
    assert "c0: child of p did not succeed (accepted)" in r.samples["family_violations"]
    store = {"p": done()}  # a parent that succeeded still owes its family
    r = check([*events, *run("p", 1, 2.0)[1:]], store, set())
    assert r.family_violations == 3 and r.families_refused == 0


def cancel(job: str, outcome: str, t0: float) -> dict[str, Any]:
    return {"op": "operator", "kind": "cancel", "outcome": outcome, "job": job, "t0": t0, "t1": t0 + 0.05}


def test_a_child_the_operator_cancelled_owes_nothing_and_frees_the_continuations_answer() -> None:
    """A short chaos run (seed 13) cancelled a running child: it ended cancelled, the continuation
    ran on the other children's results (docs/flows.md), and the checker counted a family
    violation and a wrong result. Only an operator's cancel excuses a member; the continuation
    must still succeed once, with one result."""
    events, store = a_family()
    events = [e for e in events if not (e["job"] == "c1" and e["op"] == "write")]
    events = [e if e["job"] != "t" or e["op"] != "write" else {**e, "digest": "d-fewer"} for e in events]
    store["c1"], store["t"] = StoreItem("cancelled"), done(digest="d-fewer")
    r = check(events, store, set())
    assert r.family_violations == 1 and r.wrong_results == 1  # nobody cancelled c1: still owed
    r = check([*events, cancel("c1", "cancel_requested", 5.1)], store, set())
    assert invariants(r) == CLEAN and r.ok and r.family_violations == 0, r.samples
    # the continuation's other rules still hold: two different answers are caught
    twice = [*events, cancel("c1", "cancel_requested", 5.1), *run("t", 2, 11.0, "d-other")[1:]]
    r = check(twice, store, set())
    assert r.duplicate_results == 1 or r.family_violations == 1
    # a continuation the operator cancelled is owed nothing; one nobody cancelled is
    store["t"] = StoreItem("cancelled")
    events = [e for e in events if e["job"] != "t"]  # cancelled before it ran
    r = check([*events, cancel("c1", "cancel_requested", 5.1), cancel("t", "cancelled", 8.0)], store, set())
    assert r.family_violations == 0 and r.ok, r.samples
    r = check([*events, cancel("c1", "cancel_requested", 5.1)], store, set())
    assert r.family_violations == 1
    assert "t: continuation of p did not run" in r.samples["family_violations"][0]


def test_a_child_abandoned_by_its_ended_parent_owes_nothing_and_frees_the_continuations_answer() -> None:
    """A short operator chaos run (seed 8111) cancelled a parent while its family request was in
    flight: the parent ended cancelled before the append was confirmed, the countdown function ended
    its two children still ``accepted`` ``dead`` (``abandoned_reason``), and the continuation ran on
    the other two's results. The checker counted two family violations and a wrong result. Only that
    reason, unrun, under a parent that did not succeed, excuses a child."""
    from sluice.core.families import abandoned_reason

    events, store = a_family()
    unrun = ("write", "grant", "start", "invoke")
    events = [e for e in events if not (e["job"] == "c1" and e["op"] in unrun)]
    events = [e if e["job"] != "t" or e["op"] != "write" else {**e, "digest": "d-fewer"} for e in events]
    store["t"] = done(digest="d-fewer")
    store["p"] = StoreItem("cancelled")
    store["c1"] = StoreItem("dead", last_error=abandoned_reason("p", "cancelled"))
    r = check(events, store, set())
    assert invariants(r) == CLEAN and r.ok and r.family_violations == 0, r.samples
    store["c1"] = StoreItem("dead", last_error=abandoned_reason("other", "cancelled"))  # another's reason
    r = check(events, store, set())
    assert r.family_violations == 1 and r.wrong_results == 1
    store["c1"] = StoreItem("dead", last_error=abandoned_reason("p", "cancelled"))
    store["p"] = done()  # a parent that succeeded abandons nothing: its children are owed
    r = check(events, store, set())
    assert r.family_violations == 1 and r.wrong_results == 1


# -- lost after 202 (issue 28, item 3: a 202 is binding) -------------------------------------------


def accepted_family(parent: str, children: list[str], then: str, t: float = 2.06) -> dict[str, Any]:
    return {"op": "family_accepted", "job": parent, "children": children, "continuation": then,
            "t0": t, "t1": t}


def test_a_202_job_with_neither_a_result_nor_a_visible_ending_is_lost_after_202() -> None:
    """The race before issue 28: the relay dead-lettered the loser's record, so its job had no item
    (or an item left ``accepted``) and never ran. A job that ended visibly (dead, failed, cancelled,
    with an item) or with a result is not lost after 202; an enqueue with an unknown outcome was
    never answered 202."""
    events = [enqueue("won"), *run("won", 1, 2.0), enqueue("dropped"), enqueue("stalled"),
              enqueue("dead"), enqueue("cancelled"), enqueue("unknown", outcome="info")]
    store = {"won": done(), "stalled": StoreItem("accepted"), "dead": StoreItem("dead"),
             "cancelled": StoreItem("cancelled")}
    r = check(events, store, set())
    assert r.lost_after_202 == 2 and not r.ok and r.answered_202 == 5
    assert r.samples["lost_after_202"] == ["dropped", "stalled"]
    assert r.as_dict()["lost_after_202"] == 2


def test_children_and_a_continuation_answered_202_are_owed_an_ending_too() -> None:
    """A family the gateway answered 202 for: a member that never ended is lost after 202 (``lost``
    counts only the workload's own jobs); a family only asked for (no ``family_accepted``: the parent
    was killed before the answer) owes nothing here (``family_violations`` checks it)."""
    events, store = a_family()
    events.append(accepted_family("p", ["c0", "c1"], "t"))
    r = check(events, store, set())
    assert r.lost_after_202 == 0 and r.ok and r.answered_202 == 4  # p, c0, c1, t
    del store["t"]
    events = [e for e in events if e.get("job") != "t"]
    r = check(events, store, set())
    assert r.lost_after_202 == 1 and r.samples["lost_after_202"] == ["t"] and r.lost == 0
    asked_only = [e for e in events if e["op"] != "family_accepted"]
    assert check(asked_only, store, set()).lost_after_202 == 0


def test_a_member_answered_202_with_no_history_of_its_own_is_still_counted() -> None:
    """A member nothing else ever mentions (no grant, no item): dropped in silence."""
    events = [enqueue("p"), *run("p", 1, 2.0), accepted_family("p", ["ghost"], "ghost-then")]
    r = check(events, {"p": done()}, set())
    assert r.lost_after_202 == 2 and sorted(r.samples["lost_after_202"]) == ["ghost", "ghost-then"]
