"""Model-based test: random sequences of engine calls against a pure Python model.

Leases are real and short (20 ms), so they do expire between steps. The model knows
every deadline and run-at time (the engine reports them, in Redis time); the only
thing it cannot know is whether a deadline falling *during* a lease or reap call was
already past when the script read TIME. For those few jobs (and only those) the
model looks at the engine to learn which way it went, then checks everything else.

Invariants, after every step: each job is in exactly one state and the same state as
in the model; a job's tokens never repeat or go down; no job is lost; max_in_flight is
never exceeded; attempts never exceed max_attempts.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from sluice.backends.redis.engine import RedisQueue
from sluice.backends.redis.keys import QueueKeys
from sluice.core.errors import AlreadyFinished, JobNotFound, LeaseLost, SluiceError, StaleToken
from tests.backends.test_engine_support import FRONT, band, redis_now_ms, spec

pytestmark = pytest.mark.integration

Q = "model"
K = QueueKeys(Q)
SHORT, LONG = 20, 5_000  # lease lengths, ms
STATE_KEYS = {"ready": {"ready"}, "delayed": {"delayed"}, "leased": {"leased", "tokens"}, "dead": {"dead"},
              "gone": set()}


@dataclass
class Job:
    priority: int
    max_attempts: int
    state: str = "ready"  # ready | delayed | leased | dead | gone
    attempts: int = 0  # attempts of ended leases
    token: int | None = None  # current lease token
    tokens: list[int] = field(default_factory=list)  # every token ever handed out
    order: int = 0  # position within its priority band while ready
    run_at: int = 0  # while delayed
    deadline: int = 0  # while leased
    cancel: bool = False


class EngineMachine(RuleBasedStateMachine):
    url = ""

    def __init__(self) -> None:
        super().__init__()
        self.client = redis.Redis.from_url(self.url, decode_responses=True)
        self.client.flushall()
        self.rq = RedisQueue.from_url(self.url)
        self.jobs: dict[str, Job] = {}
        self.counter = itertools.count()
        self.ids = itertools.count()
        self.max_in_flight = 0

    def teardown(self) -> None:
        self.rq.close()
        self.client.close()

    # --- model helpers ---------------------------------------------------------------------

    def now(self) -> int:
        return redis_now_ms(self.client)

    def to_ready(self, job_id: str, *, front: bool = False) -> None:
        """Back in ready: at the end of its band, or (a lapsed lease) at its front, FIFO among those."""
        job = self.jobs[job_id]
        job.state, job.token, job.order = "ready", None, next(self.counter) - (FRONT if front else 0)

    def in_state(self, *states: str) -> list[str]:
        return sorted(i for i, j in self.jobs.items() if j.state in states)

    def end_lease(self, job_id: str, *, count: bool) -> None:
        """A lease ended without ack: by expiry (count=True) or release (count=False)."""
        job = self.jobs[job_id]
        if count:
            job.attempts += 1
        event(f"lease ended by {'expiry' if count else 'release'}{' after cancel' if job.cancel else ''}")
        if job.cancel:
            job.state, job.token = "gone", None
        elif job.attempts >= job.max_attempts:
            job.state, job.token = "dead", None
        else:
            self.to_ready(job_id, front=count)

    def reclaim(self, t0: int, t1: int) -> None:
        """What lease/reap did first: promotions by run-at, then expiries by deadline."""
        def happened(job_id: str, when: int, still_there: bool) -> bool:
            if t0 < when <= t1:
                event("a deadline fell inside the call: resolved by looking")
            return when <= t0 or (when <= t1 and not still_there)

        due = [i for i in self.in_state("delayed")
               if happened(i, self.jobs[i].run_at, self.client.zscore(K.delayed, i) is not None)]
        expired = [i for i in self.in_state("leased")
                   if happened(i, self.jobs[i].deadline,
                               self.client.hget(K.tokens, i) == str(self.jobs[i].token))]
        for job_id in sorted(due, key=lambda i: (self.jobs[i].run_at, i)):
            self.to_ready(job_id)
        for job_id in sorted(expired, key=lambda i: (self.jobs[i].deadline, i)):
            self.end_lease(job_id, count=True)

    def expected_error(self, job_id: str, token: int) -> type[SluiceError] | None:
        job = self.jobs.get(job_id)
        if job is None or job.state == "gone":
            return JobNotFound
        if job.state != "leased":
            return LeaseLost
        if token < (job.token or 0):
            return StaleToken
        if token > (job.token or 0):
            return LeaseLost
        return None

    def holder_call(self, job_id: str, token: int, call: Any) -> Any:
        """Run an extend/ack/fail/release; returns its result, or None after an expected error."""
        expected = self.expected_error(job_id, token)
        event(f"holder call: {expected.__name__ if expected else 'ok'}")
        if expected is None:
            return call()
        with pytest.raises(expected):
            call()
        return None

    def pick(self, ids: list[str], index: int) -> str | None:
        """Choose by a drawn index: what is drawn must not depend on timing, only its meaning."""
        return ids[index % len(ids)] if ids else None

    def pick_leased_before(self, index: int, tindex: int) -> tuple[str, int] | None:
        """Mostly a leased job and its token; else any job leased before, and any of its
        tokens or one never issued."""
        leased = self.in_state("leased")
        if leased and index % 4:
            job_id = leased[index % len(leased)]
        else:
            job_id = self.pick(sorted(i for i, j in self.jobs.items() if j.tokens), index)
        if job_id is None:
            return None
        tokens = self.jobs[job_id].tokens
        choices = [tokens[-1], tokens[-1], tokens[-1], *tokens, tokens[-1] + 1000]
        return job_id, choices[tindex % len(choices)]

    # --- rules -----------------------------------------------------------------------------

    @initialize(max_in_flight=st.sampled_from([0, 0, 2, 3]))
    def configure(self, max_in_flight: int) -> None:
        self.max_in_flight = max_in_flight
        if max_in_flight:
            self.rq.set_config(Q, max_in_flight=max_in_flight)

    def enqueue(self, batch: list[tuple[int, int, bool]]) -> None:
        """One enqueue_many call; (priority, max_attempts, delayed by 30 ms) per job."""
        if len(self.jobs) >= 12:
            return
        t0 = self.now()
        specs = [spec(f"j{next(self.ids)}", Q, priority=priority, max_attempts=max_attempts,
                      run_at_ms=t0 + 30 if delayed else 0) for priority, max_attempts, delayed in batch]
        assert self.rq.enqueue_many(specs) == [True] * len(specs)
        t1 = self.now()
        for s in specs:
            job = self.jobs[s.job_id] = Job(s.priority, s.max_attempts)
            run_at = s.run_at_ms
            if run_at and (run_at > t1 or self.client.zscore(K.delayed, s.job_id) is not None):
                job.state, job.run_at = "delayed", run_at
            else:
                self.to_ready(s.job_id)

    def enqueue_again(self, index: int) -> None:
        job_id = self.pick(sorted(self.jobs), index)
        if job_id is None or self.jobs[job_id].state == "gone":
            return  # acked or cancelled: the id may be reused; not what this rule checks
        assert self.rq.enqueue(spec(job_id, Q, payload="again", priority=9)) is False

    def lease(self, n: int, lease_ms: int) -> None:
        t0 = self.now()
        got = self.rq.lease(Q, n, lease_ms, "model")
        t1 = self.now()
        self.reclaim(t0, t1)
        room = n
        if self.max_in_flight:
            room = min(n, self.max_in_flight - len(self.in_state("leased")))
        ready = sorted(self.in_state("ready"), key=lambda i: (-self.jobs[i].priority, self.jobs[i].order))
        assert [j.job_id for j in got] == ready[:max(0, room)]
        event(f"lease got {len(got)}" + (" (max_in_flight bound)" if room < min(n, len(ready)) else ""))
        for leased in got:
            job = self.jobs[leased.job_id]
            assert all(leased.lease_token > old for old in job.tokens), (leased.lease_token, job.tokens)
            assert leased.attempt == job.attempts + 1 <= job.max_attempts
            assert (leased.max_attempts, leased.priority, leased.lease_ms) == (job.max_attempts, job.priority,
                                                                               lease_ms)
            job.state, job.token, job.deadline = "leased", leased.lease_token, leased.deadline_ms
            job.tokens.append(leased.lease_token)

    def extend(self, index: int, tindex: int, lease_ms: int) -> None:
        if (picked := self.pick_leased_before(index, tindex)) is None:
            return
        job_id, token = picked
        extended = self.holder_call(job_id, token, lambda: self.rq.extend(Q, job_id, token, lease_ms))
        if extended is not None:
            assert extended.cancel_requested is self.jobs[job_id].cancel
            self.jobs[job_id].deadline = extended.deadline_ms

    def ack(self, index: int, tindex: int) -> None:
        if (picked := self.pick_leased_before(index, tindex)) is None:
            return
        job_id, token = picked
        expected = self.expected_error(job_id, token)
        [error] = self.rq.ack_many(Q, [(job_id, token)])
        event(f"ack: {expected.__name__ if expected else 'ok'}")
        assert type(error) is expected if expected else error is None, (error, expected)
        if expected is None:
            self.jobs[job_id].state, self.jobs[job_id].token = "gone", None

    def fail(self, index: int, tindex: int, retry_after: int, permanent: bool) -> None:
        if (picked := self.pick_leased_before(index, tindex)) is None:
            return
        job_id, token = picked
        outcome = self.holder_call(job_id, token,
                                   lambda: self.rq.fail(Q, job_id, token, "boom", retry_after, permanent))
        if outcome is None:
            return
        job = self.jobs[job_id]
        job.attempts += 1
        job.token = None
        if job.cancel and not permanent:  # removed, as an expiry after a cancel: never dead (issue 29)
            event("fail: cancelled")
            assert outcome == "cancelled"
            job.state = "gone"
        elif permanent or job.attempts >= job.max_attempts:
            event("fail: dead")
            assert outcome == "dead"
            job.state = "dead"
        else:
            assert outcome == "retry"
            event(f"fail: retry {'later' if retry_after else 'now'}")
            if retry_after:
                run_at = self.client.zscore(K.delayed, job_id)
                assert run_at is not None
                job.state, job.run_at = "delayed", int(run_at)
            else:
                self.to_ready(job_id)

    def release(self, index: int, tindex: int) -> None:
        if (picked := self.pick_leased_before(index, tindex)) is None:
            return
        job_id, token = picked
        if self.expected_error(job_id, token) is None:
            self.rq.release(Q, job_id, token)
            self.end_lease(job_id, count=False)
        else:
            self.holder_call(job_id, token, lambda: self.rq.release(Q, job_id, token))

    def cancel(self, index: int) -> None:
        leased = self.in_state("leased")
        job_id = self.pick(leased if leased and index % 2 else sorted(self.jobs), index)
        if job_id is None:
            return
        job = self.jobs[job_id]
        if job.state == "gone":
            with pytest.raises(JobNotFound):
                self.rq.cancel(Q, job_id)
        elif job.state == "dead":
            with pytest.raises(AlreadyFinished):
                self.rq.cancel(Q, job_id)
        elif job.state == "leased":
            assert self.rq.cancel(Q, job_id) == "requested"
            job.cancel = True
        else:
            assert self.rq.cancel(Q, job_id) == "removed"
            job.state = "gone"

    def reap(self) -> None:
        t0 = self.now()
        expired_before = set(self.in_state("leased"))
        count = self.rq.reap(Q)
        event(f"reap reclaimed {min(count, 2)}{'+' if count >= 2 else ''}")
        self.reclaim(t0, self.now())
        assert count == len(expired_before - set(self.in_state("leased")))

    def redrive(self, index: int) -> None:
        job_id = self.pick(self.in_state("dead"), index)
        if job_id is None:
            return
        assert self.rq.redrive(Q, job_id) == 1
        job = self.jobs[job_id]
        job.attempts, job.cancel = 0, False
        self.to_ready(job_id)

    def sleep(self, ms: int) -> None:
        time.sleep(ms / 1000)

    # One rule that picks the operation, rather than one rule per operation: every drawn
    # example then exercises a mix of operations (weighted by repetition in OPS).
    OPS = ("lease", "enqueue", "ack", "fail", "lease", "extend", "sleep", "release", "enqueue", "ack",
           "cancel", "lease", "reap", "fail", "redrive", "sleep", "enqueue_again")

    @rule(op=st.sampled_from(OPS), index=st.integers(0, 1000), tindex=st.integers(0, 1000),
          n=st.integers(1, 3), choice=st.integers(0, 2), flag=st.booleans(),
          batch=st.lists(st.tuples(st.sampled_from([0, 0, 5, 9]), st.integers(1, 3), st.booleans()),
                         min_size=1, max_size=3))
    def step(self, op: str, index: int, tindex: int, n: int, choice: int, flag: bool,
             batch: list[tuple[int, int, bool]]) -> None:
        lease_ms = (SHORT, SHORT, LONG)[choice]
        calls = {
            "enqueue": lambda: self.enqueue(batch),
            "enqueue_again": lambda: self.enqueue_again(index),
            "lease": lambda: self.lease(n, lease_ms),
            "extend": lambda: self.extend(index, tindex, lease_ms),
            "ack": lambda: self.ack(index, tindex),
            "fail": lambda: self.fail(index, tindex, (0, 0, 25)[choice], flag and choice == 2),
            "release": lambda: self.release(index, tindex),
            "cancel": lambda: self.cancel(index),
            "reap": self.reap,
            "redrive": lambda: self.redrive(index),
            "sleep": lambda: self.sleep((5, 30, 30)[choice]),
        }
        calls[op]()

    # --- invariants ------------------------------------------------------------------------

    def observe(self) -> dict[str, Any]:
        """The queue's whole state in one round trip (invariants run after every step)."""
        pipe = self.client.pipeline(transaction=False)
        for name in ("ready", "delayed", "leased", "dead"):
            pipe.zrange(getattr(K, name), 0, -1, withscores=True)
        pipe.hgetall(K.tokens)
        ids = sorted(self.jobs)
        for job_id in ids:
            pipe.hmget(K.job(job_id), "p", "a")
        r = pipe.execute()
        seen = {name: dict(r[i]) for i, name in enumerate(("ready", "delayed", "leased", "dead"))}
        return {"zsets": seen, "ready_order": [m for m, _ in r[0]], "tokens": r[4],
                "jobs": dict(zip(ids, r[5:], strict=True))}

    @invariant()
    def engine_matches_model(self) -> None:
        state = self.observe()
        zsets, tokens = state["zsets"], state["tokens"]
        for job_id, job in self.jobs.items():
            # Exactly one state, the model's; no job lost.
            found = {name for name, members in zsets.items() if job_id in members}
            found |= {"tokens"} if job_id in tokens else set()
            assert found == STATE_KEYS[job.state], (job_id, job, found)
            payload, attempts = state["jobs"][job_id]
            assert (payload is not None) == (job.state != "gone"), (job_id, job)
            # Attempts never exceed max_attempts, and agree with the model.
            assert job.attempts <= job.max_attempts
            if job.state != "gone":
                assert int(attempts or 0) == job.attempts, (job_id, job, attempts)
            # A job's tokens never repeat or go down.
            assert job.tokens == sorted(set(job.tokens))
            if job.state == "leased":
                assert tokens[job_id] == str(job.token)
                assert zsets["leased"][job_id] == job.deadline
            if job.state == "delayed":
                assert zsets["delayed"][job_id] == job.run_at
        # Nothing the model does not know about.
        assert set().union(*zsets.values(), tokens) <= set(self.jobs)
        # Ready is ordered by priority, then FIFO, in the right score band.
        expected = sorted(self.in_state("ready"), key=lambda i: (-self.jobs[i].priority, self.jobs[i].order))
        assert state["ready_order"] == expected
        assert all(band(self.client, Q, sc, reclaimed=self.jobs[i].order < 0) == 9 - self.jobs[i].priority
                   for i, sc in zsets["ready"].items())
        # max_in_flight is never exceeded.
        if self.max_in_flight:
            assert len(zsets["leased"]) <= self.max_in_flight

    @invariant()
    def stats_agree(self) -> None:
        stats = self.rq.stats(Q)
        counts = {s: len(self.in_state(s)) for s in ("ready", "delayed", "leased", "dead")}
        assert (stats.ready, stats.delayed, stats.leased, stats.dead) == tuple(counts.values())


@pytest.mark.timeout(120)
def test_engine_matches_the_model(redis_url: str) -> None:
    class Machine(EngineMachine):
        url = redis_url

    run_state_machine_as_test(Machine, settings=settings(
        max_examples=50, stateful_step_count=35, deadline=None, database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))
