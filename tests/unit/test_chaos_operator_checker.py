"""The checker's operator rules (``chaos.rules``) on hand-made histories: for each action,
the outcomes it allows pass and the ones it forbids are counted."""

from __future__ import annotations

from typing import Any

from sluice_dev.chaos.checker import Report, StoreItem, check

GOOD = "d-good"
MUST_BE_ZERO = ("lost", "unexpected", "duplicate_results", "wrong_results", "stale_writes_accepted", "stuck",
                "cancel_violations", "reruns_without_redrive", "pause_violations")


def enqueue(job: str, t: float = 1.0) -> dict[str, Any]:
    return {"op": "enqueue", "job": job, "outcome": "ok", "expect": GOOD, "t0": t, "t1": t}


def grant(job: str, token: int, t0: float) -> dict[str, Any]:
    return {"op": "grant", "job": job, "token": token, "outcome": "ok", "t0": t0, "t1": t0 + 0.01}


def write(job: str, token: int, t0: float) -> dict[str, Any]:
    return {"op": "write", "job": job, "token": token, "digest": GOOD, "outcome": "written",
            "t0": t0, "t1": t0 + 0.01}


def run(job: str, token: int, t: float) -> list[dict[str, Any]]:
    return [grant(job, token, t), {"op": "invoke", "job": job, "token": token, "t0": t + 0.1},
            write(job, token, t + 0.2),
            {"op": "ack", "job": job, "outcome": "ok", "t0": t + 0.3, "t1": t + 0.3}]


def failed(job: str, token: int, t: float, status: str = "failed") -> list[dict[str, Any]]:
    """A run whose handler failed it for good: the store's verdict, then Redis dead-letters it."""
    return [grant(job, token, t), {"op": "invoke", "job": job, "token": token, "t0": t + 0.1},
            {"op": "failure", "job": job, "token": token, "status": status, "outcome": "ok",
             "t0": t + 0.2, "t1": t + 0.21},
            {"op": "fail", "job": job, "outcome": "dead", "t0": t + 0.3, "t1": t + 0.31}]


def operator(kind: str, t0: float, outcome: str = "ok", **fields: Any) -> dict[str, Any]:
    return {"op": "operator", "kind": kind, "outcome": outcome, "t0": t0, "t1": t0 + 0.05, **fields}


def push(t0: float, pushed: int = 3, queue: str = "chaos") -> dict[str, Any]:
    return {"op": "push", "queue": queue, "partition": 0, "outcome": "ok", "pushed": pushed, "skipped": 0,
            "t0": t0, "t1": t0 + 0.01, "pid": 7}


def done(token: int = 1) -> StoreItem:
    return StoreItem("succeeded", token=token, result_token=token, result_digest=GOOD)


def violations(r: Report) -> dict[str, int]:
    return {k: v for k in MUST_BE_ZERO if (v := getattr(r, k))}


# -- cancel ---------------------------------------------------------------------------------------------


def test_a_job_cancelled_while_waiting_ends_cancelled_and_is_not_lost() -> None:
    events = [enqueue("a"), operator("cancel", 2.0, "cancelled", job="a")]
    r = check(events, {"a": StoreItem("cancelled")}, set())
    assert violations(r) == {} and r.ok
    assert (r.cancelled, r.lost, r.operator) == (1, 0, {"cancel:cancelled": 1})


def test_a_job_ending_cancelled_with_no_operator_cancel_is_still_lost() -> None:
    for outcome in ("finished", "not_found"):  # answers that cancelled nothing allow nothing
        events = [enqueue("a"), operator("cancel", 2.0, outcome, job="a")]
        r = check(events, {"a": StoreItem("cancelled")}, set())
        assert (r.lost, r.cancelled) == (1, 0), outcome
    assert check([enqueue("a")], {"a": StoreItem("cancelled")}, set()).lost == 1


def test_a_cancel_of_unknown_outcome_may_have_cancelled_the_job_or_not() -> None:
    events = [enqueue("a"), operator("cancel", 2.0, "error", job="a")]
    assert violations(check(events, {"a": StoreItem("cancelled")}, set())) == {}
    events = [enqueue("b"), operator("cancel", 2.0, "error", job="b"), *run("b", 1, 3.0)]
    assert violations(check(events, {"b": done()}, set())) == {}


def test_a_job_answered_cancelled_must_not_end_otherwise_nor_run_or_write_after_the_answer() -> None:
    # succeeded although the API said cancelled: the cancel did not hold
    events = [enqueue("a"), operator("cancel", 2.0, "cancelled", job="a"), *run("a", 1, 3.0)]
    r = check(events, {"a": done()}, set())
    assert r.cancel_violations == 1 and r.samples["cancel_violations"] == ["a"] and not r.ok
    # the store says cancelled, but a grant started after the answer went through
    events = [enqueue("b"), operator("cancel", 2.0, "cancelled", job="b"), grant("b", 1, 3.0)]
    assert check(events, {"b": StoreItem("cancelled", token=1)}, set()).cancel_violations == 1
    # ... or a result write started after the answer was accepted
    events = [enqueue("c"), grant("c", 1, 1.5), operator("cancel", 2.0, "cancelled", job="c"),
              write("c", 1, 3.0)]
    assert check(events, {"c": StoreItem("cancelled", token=1)}, set()).cancel_violations == 1


def test_a_grant_that_started_before_the_cancel_answer_is_no_violation() -> None:
    # The grant was on its way when the cancel landed; the store ordered them: cancel first, grant refused.
    events = [enqueue("a"), {"op": "grant", "job": "a", "outcome": "cancelled", "t0": 2.0, "t1": 2.2},
              operator("cancel", 2.01, "cancelled", job="a")]
    assert violations(check(events, {"a": StoreItem("cancelled")}, set())) == {}


def test_a_leased_job_asked_to_cancel_may_finish_fail_or_stop() -> None:
    for status, tail in (("succeeded", [write("a", 1, 2.5)]), ("cancelled", []), ("dead", [])):
        events = [enqueue("a"), grant("a", 1, 1.5), operator("cancel", 2.0, "cancel_requested", job="a"),
                  *tail]
        item = done() if status == "succeeded" else StoreItem(status, token=1)
        r = check(events, {"a": item}, set())
        assert violations(r) == {}, status
        assert r.cancelled == (status == "cancelled")


def test_a_leased_job_asked_to_cancel_is_never_granted_again() -> None:
    events = [enqueue("a"), grant("a", 1, 1.5), operator("cancel", 2.0, "cancel_requested", job="a"),
              *run("a", 2, 4.0)]
    r = check(events, {"a": done(2)}, set())
    assert r.cancel_violations == 1 and not r.ok


def test_a_redrive_after_a_cancel_request_supersedes_it() -> None:
    # store.redrive drops the request: the redriven run may be granted; one granted before the
    # redrive (or with a redrive that moved nothing) is still a violation.
    base = [enqueue("a"), grant("a", 1, 1.5), operator("cancel", 2.0, "cancel_requested", job="a"),
            {"op": "failure", "job": "a", "token": 1, "status": "dead", "outcome": "ok",
             "t0": 2.5, "t1": 2.51}]
    ok = [*base, operator("redrive", 3.0, job="a", moved=1), *run("a", 2, 4.0)]
    assert violations(check(ok, {"a": done(2)}, set())) == {}
    for redrive in (operator("redrive", 5.0, job="a", moved=1),
                    operator("redrive", 3.0, "not_found", job="a")):
        r = check([*base, redrive, *run("a", 2, 4.0)], {"a": done(2)}, set())
        assert r.cancel_violations == 1 and not r.ok


def test_a_leased_job_asked_to_cancel_and_left_leased_is_stuck_and_lost() -> None:
    # The bug 1: the request is never honoured. Nothing about the cancel excuses it.
    events = [enqueue("a"), grant("a", 1, 1.5), operator("cancel", 2.0, "cancel_requested", job="a")]
    r = check(events, {"a": StoreItem("leased", token=1)}, set())
    assert (r.stuck, r.lost) == (1, 1) and not r.ok


# -- redrive --------------------------------------------------------------------------------------------


def test_a_failed_job_runs_again_after_a_redrive_of_it_and_may_end_either_way() -> None:
    events = [enqueue("a"), *failed("a", 1, 2.0), operator("redrive", 3.0, job="a", moved=1),
              *run("a", 2, 4.0)]
    assert violations(check(events, {"a": done(2)}, set())) == {}
    events = [enqueue("b"), *failed("b", 1, 2.0), operator("redrive", 3.0, job="b", moved=1),
              *failed("b", 2, 4.0)]
    assert violations(check(events, {"b": StoreItem("failed", token=2)}, set())) == {}


def test_a_redrive_of_every_dead_job_allows_each_to_run_again() -> None:
    events = [enqueue("a"), *failed("a", 1, 2.0, "dead"), operator("redrive_all", 3.0, listed=["a"], moved=1),
              *run("a", 2, 4.0)]
    assert violations(check(events, {"a": done(2)}, set())) == {}


def test_a_failed_or_dead_job_granted_again_without_a_redrive_is_a_violation() -> None:
    # The bug 4: the verdict landed, the worker died before Redis heard, the lease lapsed.
    for status in ("failed", "dead"):
        events = [enqueue("a"), *failed("a", 1, 2.0, status)[:3], *run("a", 2, 5.0)]
        r = check(events, {"a": done(2)}, set())
        assert r.reruns_without_redrive == 1 and not r.ok, status


def test_a_redrive_that_moved_nothing_or_came_before_the_verdict_allows_nothing() -> None:
    base = [enqueue("a"), *failed("a", 1, 2.0)]
    for redrive in (operator("redrive", 3.0, "not_found", job="a"),  # not dead in Redis: nothing moved
                    operator("redrive", 1.5, job="a", moved=1),  # an earlier life of the job
                    operator("redrive", 3.0, job="other", moved=1)):  # another job
        r = check([*base, redrive, *run("a", 2, 4.0)], {"a": done(2)}, set())
        assert r.reruns_without_redrive == 1, redrive


def test_a_rerun_of_a_succeeded_job_needs_no_redrive() -> None:
    # crash before ack: at-least-once, as before the operator
    events = [enqueue("a"), *run("a", 1, 2.0), *run("a", 2, 5.0)]
    assert violations(check(events, {"a": done(2)}, set())) == {}


# -- purge ----------------------------------------------------------------------------------------------


def test_a_purged_dead_job_may_end_without_a_final_state_and_is_counted() -> None:
    events = [enqueue("a"), grant("a", 1, 1.5), operator("purge", 3.0, listed=["a"], deleted=1)]
    r = check(events, {"a": StoreItem("queued", token=1)}, set())
    assert violations(r) == {} and r.purged_lost == 1 and r.samples["purged_lost"] == ["a"]


def test_a_job_dead_lettered_between_the_purge_s_listing_and_its_end_counts_as_purged() -> None:
    purge = operator("purge", 3.0, listed=[], deleted=1)
    died = {"op": "fail", "job": "a", "outcome": "dead", "t0": 3.01, "t1": 3.02}
    r = check([enqueue("a"), grant("a", 1, 1.5), purge, died], {"a": StoreItem("queued", token=1)}, set())
    assert (r.lost, r.purged_lost) == (0, 1)


def test_a_purge_excuses_only_the_jobs_it_could_have_deleted() -> None:
    # "b" was not dead at the purge: losing it is still a loss; and a purged job left leased is stuck
    events = [enqueue("a"), enqueue("b"), operator("purge", 3.0, listed=["a"], deleted=1),
              {"op": "fail", "job": "b", "outcome": "dead", "t0": 5.0, "t1": 5.01}]
    r = check(events, {"a": StoreItem("leased", token=1), "b": StoreItem("queued", token=1)}, set())
    assert (r.lost, r.purged_lost, r.stuck) == (1, 1, 1) and r.samples["lost"] == ["b"]
    # a purge that failed outright deleted nothing
    events = [enqueue("c"), operator("purge", 3.0, "none", listed=["c"])]
    assert check(events, {"c": StoreItem("queued")}, set()).lost == 1


# -- pause ----------------------------------------------------------------------------------------------


def test_pushes_before_the_pause_took_hold_and_after_the_resume_are_fine() -> None:
    events = [operator("pause", 10.0, queue="chaos"), push(10.5), push(12.9),
              operator("resume", 20.0, queue="chaos"), push(20.1)]
    r = check(events, {}, set())
    assert violations(r) == {} and r.operator == {"pause:ok": 1, "resume:ok": 1}


def test_a_push_into_a_paused_queue_is_a_violation() -> None:
    events = [operator("pause", 10.0, queue="chaos"), push(15.0), push(16.0, pushed=0),
              push(17.0, queue="other"), operator("resume", 20.0, queue="chaos")]
    r = check(events, {}, set())
    assert r.pause_violations == 1 and not r.ok
    assert r.samples["pause_violations"] == ["pid 7 partition 0 at 15.0"]


def test_a_pause_that_failed_or_was_forgotten_by_a_redis_restart_holds_nothing_back() -> None:
    assert check([operator("pause", 10.0, "error", queue="chaos"), push(15.0),
                  operator("resume", 20.0, queue="chaos")], {}, set()).pause_violations == 0
    restart = {"op": "fault", "kind": "restart_redis", "target": "redis", "phase": "injected", "t1": 14.0}
    events = [operator("pause", 10.0, queue="chaos"), push(13.5), restart, push(15.0),
              operator("resume", 20.0, queue="chaos")]
    assert check(events, {}, set()).pause_violations == 1  # 13.5 was inside, 15.0 after the restart


def config(t1: float, paused: bool, pid: int = 7, queue: str = "chaos") -> dict[str, Any]:
    return {"op": "config", "queue": queue, "paused": paused, "t0": t1 - 0.01, "t1": t1, "pid": pid}


def test_a_relay_that_read_paused_must_not_push_even_inside_the_grace() -> None:
    # 10.5 is inside the 3 s grace after the pause, but relay 7 had already read "paused" at 10.2
    events = [operator("pause", 10.0, queue="chaos"), config(10.2, True), push(10.5),
              config(10.7, True, pid=8), config(11.0, False, pid=8)]
    r = check(events, {}, set())
    assert r.pause_violations == 1 and r.samples["pause_violations"] == ["pid 7 partition 0 at 10.5"]
    # what another relay read, or what relay 7 read of another queue, or after the push, does not count
    for read in (config(10.2, True, pid=8), config(10.2, True, queue="other"), config(10.6, True)):
        events = [operator("pause", 10.0, queue="chaos"), read, push(10.5)]
        assert check(events, {}, set()).pause_violations == 0
    # a relay that read "running" again (resumed) may push
    events = [config(10.2, True), config(20.2, False), push(20.5)]
    assert check(events, {}, set()).pause_violations == 0


def test_a_pause_never_resumed_holds_until_the_end() -> None:
    assert check([operator("pause", 10.0, queue="chaos"), push(100.0)], {}, set()).pause_violations == 1


def test_a_run_without_the_operator_reports_no_operator_counts() -> None:
    r = check([enqueue("a"), *run("a", 1, 2.0)], {"a": done()}, set())
    d = r.as_dict()
    assert d["operator"] == {} and d["cancelled"] == 0 and d["purged_lost"] == 0 and r.ok
    assert {"cancel_violations", "reruns_without_redrive", "pause_violations"} <= set(d)


def test_reruns_are_checked_on_the_workload_s_jobs_only() -> None:
    # the relay's partition-ownership jobs ("<topic>.<partition>", queue sluice-relay) are not chaos jobs
    events = [*failed("chaos.jobs.0", 1, 2.0, "dead"), *failed("chaos.jobs.0", 2, 5.0, "dead")]
    assert check(events, {"chaos.jobs.0": StoreItem("dead", token=2)}, set()).reruns_without_redrive == 0
    assert check([enqueue("chaos.jobs.0"), *events], {"chaos.jobs.0": StoreItem("dead", token=2)},
                 set()).reruns_without_redrive == 1
