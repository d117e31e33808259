"""Retry policy in code (issue 31, item 4): ``@app.handler(q, retry=RetryPolicy(...))`` is the
default of its jobs; a caller's max_attempts may lower it, never raise it; ``fail_on`` and errors
outside ``retry_on`` end the job at once; the policy's backoff feeds the retry decision."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import sluice
from sluice.core.errors import InvalidInput
from sluice.core.models import DEFAULT_MAX_ATTEMPTS, MAX_ATTEMPTS_UNSET, Job
from sluice.core.policy import RetryPolicy, attempts_allowed
from sluice.worker.runtime.context import JobContext
from sluice_dev.fakes import FakeQueue, ManualClock, kit

pytestmark = pytest.mark.timeout(20)


@pytest.mark.parametrize(("requested", "policy_max", "allowed"), [
    (MAX_ATTEMPTS_UNSET, None, DEFAULT_MAX_ATTEMPTS),  # no caller, no policy: as before, 5
    (MAX_ATTEMPTS_UNSET, 8, 8),  # no caller: the policy decides, above the default too
    (MAX_ATTEMPTS_UNSET, 1, 1),
    (3, None, 3),  # no policy: the caller's, as before
    (2, 8, 2),  # a caller may lower the policy
    (50, 3, 3),  # ... never raise it
    (100, 100, 100),
])
def test_attempts_allowed_is_the_lower_of_what_says(requested: int, policy_max: int | None,
                                                    allowed: int) -> None:
    assert attempts_allowed(requested, policy_max) == allowed
    assert sluice.RetryPolicy is RetryPolicy


@pytest.mark.parametrize("bad", [
    {"fail_on": ("ValueError",)}, {"fail_on": (ValueError(),)}, {"fail_on": (int,)}, {"fail_on": object},
    {"retry_on": ("TimeoutError",)}, {"retry_on": (None,)}, {"fail_on": (ValueError, 3)},
    {"max_attempts": 0}, {"max_attempts": -1}, {"max_attempts": 101}, {"max_attempts": True},
    {"max_attempts": 2.0}, {"backoff": -1}, {"backoff": float("nan")}, {"backoff": (5, 1)},
    {"backoff": (1, 8 * 86400)}, {"backoff": "1s"}, {"backoff": (1, 2, 3)}, {"backoff": True},
])
def test_a_bad_policy_is_refused_when_it_is_made_at_import_time(bad: dict[str, Any]) -> None:
    app = sluice.Worker()
    with pytest.raises(InvalidInput, match=r"RetryPolicy\("):
        @app.handler("q", retry=RetryPolicy(**bad))
        def h(job: Job, ctx: JobContext) -> None: ...
    assert app.handlers == {}


def test_a_fail_on_that_is_not_an_exception_type_names_what_is_wrong() -> None:
    with pytest.raises(InvalidInput, match=r"exception types only .* not 'ValueError'"):
        RetryPolicy(fail_on=("ValueError",))  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match=r"must be a sluice\.RetryPolicy"):
        sluice.Worker().register("q", lambda job, ctx: None, retry={"max_attempts": 3})  # type: ignore[arg-type]


def test_one_type_or_a_list_stands_for_a_tuple() -> None:
    p = RetryPolicy(fail_on=ValueError, retry_on=[TimeoutError, ConnectionError])  # type: ignore[arg-type]
    assert p.fail_on == (ValueError,) and p.retry_on == (TimeoutError, ConnectionError)
    assert p.ends_at_once(UnicodeError()) and not p.ends_at_once(ConnectionResetError())
    assert p.ends_at_once(KeyError()) and not RetryPolicy().ends_at_once(KeyError())
    assert RetryPolicy(backoff=2).backoff_window_ms() == (2_000, 900_000)
    assert RetryPolicy(backoff=(0.5, 60)).backoff_window_ms() == (500, 60_000)


def run_until_it_ends(k: Any, clock: ManualClock, queue: str, job_id: str, limit: int = 20) -> list[int]:
    """Drain ``queue`` until ``job_id`` ends; the attempts it ran."""
    attempts: list[int] = []
    w = k.worker()
    for _ in range(limit):
        if w.drain([queue], 1).leased:
            attempts.append(k.store.get_job(job_id).attempts)
        if k.queue.job(queue, job_id).state in ("dead", "done"):
            return attempts
        clock.advance(3_600_000)
    raise AssertionError(f"{job_id} did not end in {limit} drains")


def failing_app(retry: RetryPolicy | None, seen: list[tuple[int, int]],
                error: type[BaseException] = KeyError) -> Any:
    clock = ManualClock()
    k = kit(FakeQueue(clock))

    @k.app.handler("q", retry=retry)
    def h(job: Job, ctx: JobContext) -> None:
        seen.append((job.max_attempts, ctx.max_attempts))
        raise error("boom")

    return k, clock


@pytest.mark.parametrize(("sent", "policy_max", "runs"), [
    (None, None, 5),  # nobody says: 5, as before
    (None, 8, 8),  # the policy decides, past the old default
    (3, None, 3),
    (2, 8, 2),  # the caller lowers it
    (50, 3, 3),  # the caller cannot raise it: lowered to the policy's
])
def test_the_attempts_a_job_gets_combine_its_caller_and_its_handlers_policy(
        sent: int | None, policy_max: int | None, runs: int) -> None:
    seen: list[tuple[int, int]] = []
    k, clock = failing_app(None if policy_max is None else RetryPolicy(max_attempts=policy_max), seen)
    k.queue.add("q", "j", max_attempts=MAX_ATTEMPTS_UNSET if sent is None else sent)
    assert run_until_it_ends(k, clock, "q", "j") == list(range(1, runs + 1))
    rec = k.store.get_job("j")
    assert (rec.status, rec.attempts, k.queue.job("q", "j").state) == ("dead", runs, "dead")
    assert set(seen) == {(runs, runs)}  # the job and the context show the combined number


@pytest.mark.parametrize("error", [ValueError, UnicodeError])  # UnicodeError: a ValueError too
def test_an_error_in_fail_on_ends_the_job_failed_on_its_first_attempt(error: type[BaseException]) -> None:
    seen: list[tuple[int, int]] = []
    k, clock = failing_app(RetryPolicy(max_attempts=8, fail_on=(ValueError,)), seen, error)
    k.queue.add("q", "j", max_attempts=MAX_ATTEMPTS_UNSET)
    assert run_until_it_ends(k, clock, "q", "j") == [1]
    rec = k.store.get_job("j")
    assert rec.status == "failed" and rec.attempts == 1
    assert rec.last_error == f"{error.__name__}: boom (not retried: the handler's RetryPolicy)"
    assert k.queue.job("q", "j").state == "dead"


def test_retry_on_retries_only_what_it_names() -> None:
    policy = RetryPolicy(max_attempts=3, retry_on=(TimeoutError,))
    seen: list[tuple[int, int]] = []
    k, clock = failing_app(policy, seen, TimeoutError)
    k.queue.add("q", "j", max_attempts=MAX_ATTEMPTS_UNSET)
    assert run_until_it_ends(k, clock, "q", "j") == [1, 2, 3]
    assert k.store.get_job("j").status == "dead"
    k, clock = failing_app(policy, seen, KeyError)
    k.queue.add("q", "j", max_attempts=MAX_ATTEMPTS_UNSET)
    assert run_until_it_ends(k, clock, "q", "j") == [1]
    assert k.store.get_job("j").status == "failed"


def test_retry_and_fail_raised_by_the_handler_keep_their_meaning_under_a_policy() -> None:
    clock = ManualClock()
    k = kit(FakeQueue(clock))
    policy = RetryPolicy(max_attempts=2, retry_on=(TimeoutError,), fail_on=(Exception,))

    @k.app.handler("r", retry=policy)
    def r(job: Job, ctx: JobContext) -> None:
        raise sluice.Retry(after=0)

    @k.app.handler("f", retry=RetryPolicy(max_attempts=9))
    def f(job: Job, ctx: JobContext) -> None:
        raise sluice.Fail("no")

    k.queue.add("r", "r", max_attempts=MAX_ATTEMPTS_UNSET)
    k.queue.add("f", "f", max_attempts=MAX_ATTEMPTS_UNSET)
    assert run_until_it_ends(k, clock, "r", "r") == [1, 2]  # retried (policy's 2), not failed by fail_on
    assert run_until_it_ends(k, clock, "f", "f") == [1]
    assert (k.store.get_job("r").status, k.store.get_job("f").status) == ("dead", "failed")


def test_the_policys_backoff_is_the_retry_delay() -> None:
    clock = ManualClock()
    k = kit(FakeQueue(clock))

    @k.app.handler("now", retry=RetryPolicy(backoff=0))
    def now(job: Job, ctx: JobContext) -> None:
        raise KeyError("x")

    @k.app.handler("later", retry=RetryPolicy(backoff=(3_600, 3_600)))
    def later(job: Job, ctx: JobContext) -> None:
        raise KeyError("x")

    for q in ("now", "later"):
        for i in range(20):
            k.queue.add(q, f"{q}{i}", max_attempts=3)
    w = k.worker()
    w.drain(["now", "later"], 40)
    assert {k.queue.job("now", f"now{i}").state for i in range(20)} == {"ready"}  # no delay at all
    delays = [k.queue.job("later", f"later{i}").run_at_ms - clock.ms for i in range(20)]
    assert all(0 <= d <= 3_600_000 for d in delays) and max(delays) > 15 * 60_000  # past the default cap


def test_the_retry_policy_example_in_docs_worker_md_runs() -> None:
    text = (Path(__file__).parents[2] / "docs" / "worker.md").read_text()
    example = text.split("### Retry policy in code", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    clock = ManualClock()
    k = kit(FakeQueue(clock))
    namespace: dict[str, Any] = {"app": k.app, "sluice": sluice}
    exec(compile(example, "docs/worker.md", "exec"), namespace)
    k.queue.add("charge", "ok", {}, max_attempts=MAX_ATTEMPTS_UNSET)
    assert run_until_it_ends(k, clock, "charge", "ok") == [1, 2, 3]
    assert k.store.get_job("ok").result == {"charged": True, "attempt": 3}
    k.queue.add("charge", "declined", {"declined": True}, max_attempts=MAX_ATTEMPTS_UNSET)
    assert run_until_it_ends(k, clock, "charge", "declined") == [1]
    assert k.store.get_job("declined").status == "failed"
    assert k.app.handlers["charge"].retry == RetryPolicy(8, (2, 300), (ConnectionError, TimeoutError),
                                                         (namespace["CardDeclined"],))


@pytest.mark.parametrize(("sent", "policy_max", "lapses"), [
    (None, 2, 2),  # up to 5 lapsed attempts before the worker told Redis its policy
    (None, 8, 8),  # cut at 5 before
    (50, 3, 3),
    (None, None, 5),
])
def test_a_lapsed_lease_ends_the_job_by_the_policy_the_worker_told_its_queue(
        sent: int | None, policy_max: int | None, lapses: int) -> None:
    """The worker's lease tells the queue its handler's policy (lease.lua ARGV[4]; the fake keeps it
    as lease.lua does), so leases that lapse (the worker died) end the job where failures would."""
    clock = ManualClock()
    k = kit(FakeQueue(clock))
    k.app.register("q", lambda job, ctx: None,
                   retry=None if policy_max is None else RetryPolicy(max_attempts=policy_max))
    k.worker().drain(["q"], 1)  # an empty queue: the lease tells the policy all the same
    assert k.queue.policies.get("q") == policy_max
    k.queue.add("q", "j", max_attempts=MAX_ATTEMPTS_UNSET if sent is None else sent)
    for n in range(1, lapses + 1):
        [j] = k.queue.lease("q", 1, 1_000, "dying")  # a worker that dies holding it
        assert j.attempt == n
        clock.advance(2_000)
        k.queue.reap("q", 100)
    assert k.queue.job("q", "j").state == "dead"
