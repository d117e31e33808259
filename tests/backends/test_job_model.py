"""The job model (docs/job-states.md) as a hypothesis state machine over both authorities.

A real redis-server and the moto server (over HTTP) hold the job; the machine drives the real
adapters: jobs are appended to a fake Kafka source and pushed by the real relay (with Redis-loss
recovery wrapped around it), leased from the real engine, run by the real ``JobRunner`` and
``Finisher`` with a deterministic handler, cancelled through ``Api.cancel``, redriven and purged
as the CLI does, reaped and settled by the relay's maintenance. A worker can die or freeze at
any store or queue call. Leases are long (60 s) and lapse only when the machine says so (their
deadline is moved into the past in Redis), so every example is deterministic and fast.

After every step it checks the invariants of docs/job-states.md:

I1 no stale write accepted; I2 the fencing token of a job id never decreases (grants strictly
increase); I3 a job in a final state runs again only after an explicit redrive; I4 every accepted
job is final or live in Redis; I5 no item stays ``leased`` without a live or reclaimable lease;
I6 a cancel request is honoured or answered with a clear 409 (never for a redriven job waiting for
its grant, which cancels as a queued one); I7 a record the relay re-reads costs no rate token; I8 a
reclaimed job is leased before later jobs of its band; H a grant never makes the current Redis lease
holder stale (nor does a settle write); D Redis's dead set holds only dead jobs (a job whose item is
succeeded or cancelled leaves it once its ending is settled). "Final" in I4 is final and done with:
a redriven job waiting for its grant (``failed``/``dead``, ``redrive_gen`` above ``run_gen``) is not,
so a redriven attempt that ended before its grant unrecorded fails I4.
"""

from __future__ import annotations

import itertools
import json
import os
import time
import uuid
from typing import Any

import boto3
import pytest
import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from sluice.backends.dynamodb import tables
from sluice.backends.dynamodb.jobs import DynamoJobStore
from sluice.backends.redis.engine import RedisQueue
from sluice.backends.redis.keys import EPOCH_KEY, QueueKeys
from sluice.core import ids
from sluice.core.bus import EventBus
from sluice.core.errors import AlreadyFinished, JobNotFound
from sluice.core.models import FINAL_STATES, JobSpec
from sluice.gateway.api import Api, Backends, IdMinting
from sluice.gateway.redrive import redrive_one
from sluice.relay import RELAY_QUEUE, SourceRecord
from sluice_dev.fakes import FakeSource
from tests.backends import job_model_families as fm
from tests.backends.job_model_support import (
    POINTS,
    QUEUE,
    Died,
    Event,
    RelayBox,
    WorkerRun,
    Workers,
    fault_at,
)
from tests.backends.test_engine_support import promote, replica_copy

pytestmark = [pytest.mark.integration, pytest.mark.slow]

K = QueueKeys(QUEUE)
FINAL = {s.value for s in FINAL_STATES}
LIVE_ZSETS = ("ready", "delayed", "leased")
VERDICTS = ["ok", "error", "fail", "retry"]
KEY = b"k" * 32
MAX_LOSSES = 2  # Redis data losses per example
MAX_CANCELS = 3  # per example
MAX_EXPIRIES = 2  # per example
MAX_PURGES = 1  # per example
MAX_FAILOVERS = 1  # per example (tokens, issue 29 item 6)
FOREVER = 10**9  # steps: a pause that only an explicit thaw ends (replays)


class SourceLog:
    """``ports.JobLog`` over the fake Kafka source, for a redrive's record; remembers their offsets."""

    def __init__(self, source: FakeSource) -> None:
        self.source = source
        self.offsets: list[int] = []

    def append(self, specs: Any) -> None:
        self.offsets.extend(self.source.append_spec(0, spec) for spec in specs)


def waits_redriven(item: dict[str, Any] | None) -> bool:
    """A failed/dead item redriven since it last ran: its redriven attempt waits for its grant."""
    return (item is not None and item["status"] in ("failed", "dead")
            and item.get("redrive_gen", 0) > item.get("run_gen", 0))


def redrive_job(engine: RedisQueue, store: DynamoJobStore, job_id: str, log: SourceLog) -> int:
    """What ``sluice dlq redrive <queue> <id>`` does: the store's redrive generation, the job's
    record in Kafka again, then Redis."""
    return redrive_one(engine, store, QUEUE, job_id, log=log)


class JobMachine(RuleBasedStateMachine):
    redis_url = ""
    moto_url = ""
    table = ""
    examples = itertools.count()
    mute: frozenset[str] = frozenset()  # invariants left out (hunting one bug at a time)
    focus: frozenset[str] = frozenset()  # rules used (empty: all)
    first_failure = ""  # "example <n>: <invariant>", reported by the hunting runs (docs/job-states.md)

    def __init__(self) -> None:
        super().__init__()
        self.r = redis.Redis.from_url(self.redis_url, decode_responses=True)
        self.r.flushall()
        self.engine = RedisQueue.from_url(self.redis_url)
        self.db = boto3.client("dynamodb", endpoint_url=self.moto_url, region_name="us-east-1")
        self.store = DynamoJobStore(self.db, self.table)
        self.n = n = next(self.examples)
        self.prefix = f"x{uuid.uuid4().hex[:6]}{n}-"
        self.source = FakeSource(topic=f"t.{self.prefix}", n_partitions=1)
        self.engine.set_config(QUEUE, rate_per_s=1000, burst=100_000)
        self.relay = RelayBox(self.engine, self.store, self.db, self.table, self.source)
        self.redrive_log = SourceLog(self.source)
        self.redrives_read = 0  # redrive records the relay has read (I7 allows them a token each)
        self.events: list[Event] = []
        self.workers = Workers(self.engine, self.store, self.events)
        self.api = Api(Backends(None, self.store, self.engine, EventBus()), IdMinting(KEY))  # type: ignore[arg-type]
        self.api.minted = self.minted_within_horizon  # type: ignore[method-assign]
        self.specs: dict[str, JobSpec] = {}
        self.offsets: dict[str, int] = {}
        self.ids = itertools.count()
        self.short: dict[str, str] = {}  # a keyed id -> the prefixed id it stands for (``path_point``)
        self.entropy = uuid.uuid4().bytes[:6]
        self.final_since: dict[str, tuple[str, int]] = {}  # final (status, token) seen, no redrive since
        self.redriven: dict[str, int] = {}  # redriven, not granted since: the item's token then
        self.max_token: dict[str, int] = {}
        self.expired: set[str] = set()
        self.reclaimed: set[str] = set()  # back in ready because their lease lapsed
        self.cancel_requested: set[str] = set()
        self.answered_404: set[str] = set()  # cancels answered 404 (expired items)
        self.checked_events = 0
        self.step_no = 0  # steps taken (counted by the invariant check that follows each)
        self.relay_frozen_until = 0  # the step from which a frozen relay may thaw
        self.appended = False  # records appended since this relay invocation started
        self.count: dict[str, int] = {"cancel": 0, "ttl_expires": 0, "purge": 0}  # drawn so far (budgets)
        self.losses = 0  # Redis data losses in this example
        # Both authorities as the last invariant check read them: the rules' preconditions look here,
        # so that a rule is drawn only when it can act (a redrive when a job is dead, a TTL expiry
        # when a final item is there to expire), and a bug deep in a sequence is not diluted by no-ops.
        self.seen_rs: dict[str, Any] = {"ready": {}, "delayed": {}, "leased": {}, "dead": {}, "settle": set()}
        self.seen_items: dict[str, dict[str, Any]] = {}
        self.seen_now_ms = 0
        self.trace: list[Any] = []

    def teardown(self) -> None:
        if TRACE:  # one line per example: the states it went through (two runs' files must match)
            with open(TRACE, "a", encoding="utf-8") as f:
                f.write(json.dumps(self.trace) + "\n")
        self.workers.close()
        self.relay.close()
        self.engine.close()
        self.r.close()

    # -- helpers ------------------------------------------------------------------------------------

    def now_ms(self) -> int:
        sec, usec = self.r.time()
        return int(sec) * 1000 + int(usec) // 1000

    def redis_state(self) -> dict[str, Any]:
        p = self.r.pipeline(transaction=False)
        for name in ("ready", "delayed", "leased", "dead"):
            p.zrange(getattr(K, name), 0, -1, withscores=True)
        p.hgetall(K.tokens)
        p.zrange(K.settle, 0, -1)
        out = p.execute()
        names = ("ready", "delayed", "leased", "dead")
        state: dict[str, Any] = {name: dict(out[i]) for i, name in enumerate(names)}
        state["ready_order"] = [m for m, _ in out[0]]
        state["tokens"] = {k: int(v) for k, v in out[4].items()}
        state["settle"] = {m.rpartition(":")[2] for m in out[5]}  # "dead:<id>", "dead:<gen>:<id>"
        return state

    def items(self) -> dict[str, dict[str, Any]]:
        ids = sorted(self.specs)
        found: dict[str, dict[str, Any]] = {}
        for start in range(0, len(ids), 100):
            resp = self.db.batch_get_item(RequestItems={self.table: {
                "Keys": [{"job_id": {"S": j}} for j in ids[start:start + 100]], "ConsistentRead": True}})
            for item in resp["Responses"].get(self.table, []):
                found[item["job_id"]["S"]] = {
                    "status": item["status"]["S"], "token": int(item.get("token", {"N": "0"})["N"]),
                    "result_token": int(item["result_token"]["N"]) if "result_token" in item else None,
                    "cancel_requested": item.get("cancel_requested", {}).get("BOOL", False),
                    "redrive_gen": int(item.get("redrive_gen", {"N": "0"})["N"]),
                    "run_gen": int(item.get("run_gen", {"N": "0"})["N"])}
        return found

    def on(self, rule: str) -> bool:
        """Whether this run uses ``rule`` (all rules unless ``focus`` names some)."""
        return not self.focus or rule in self.focus

    def pick(self, seq: list[Any], index: int) -> Any:
        return seq[index % len(seq)] if seq else None

    def live_runs(self, *states: str) -> list[WorkerRun]:
        return [w for w in self.workers.all if w.state in states]

    def expired_leases(self) -> bool:
        """A lease past its deadline, by Redis's clock when the last invariant check read it (not
        the workers' clocks, which ``run_late`` sets to expire a second later: a precondition that
        read them would change between hypothesis's runs of one example, which it reports flaky)."""
        return any(deadline <= self.seen_now_ms for deadline in self.seen_rs["leased"].values())

    def lapsed_in_redis(self, run: WorkerRun) -> bool:
        """``run``'s lease has lapsed (deadline passed) or is gone or someone else's, as last read."""
        return (self.seen_rs["leased"].get(run.job_id, 0) <= self.seen_now_ms
                or self.seen_rs.get("tokens", {}).get(run.job_id) != run.lease_token)

    def watch_reclaim(self, call: Any) -> Any:
        """Run ``call``; remember which expired leases it put back in ready (for I8)."""
        now = self.now_ms()
        expired = {j for j, deadline in self.redis_state()["leased"].items() if deadline <= now}
        out = call()
        ready = set(self.redis_state()["ready"])
        self.reclaimed |= expired & ready
        return out, expired

    # -- rules: jobs in -----------------------------------------------------------------------------

    @precondition(lambda self: self.on("enqueue_and_push") and not self.relay.frozen and len(self.specs) < 10)
    @rule(n=st.integers(1, 3), priority=st.sampled_from([0, 0, 5]), max_attempts=st.integers(0, 3),
          keyed=st.booleans())
    def enqueue_and_push(self, n: int, priority: int, max_attempts: int, keyed: bool = False) -> None:
        """The gateway appends to Kafka; the relay pushes into Redis and marks the jobs queued.
        A max_attempts of 0: its caller sent none (the handler's retry policy decides; here none).
        ``keyed``: ids the gateway minted with its key, as every caller's job has: the relay writes
        no ``queued`` item for them (issue 33), so until its grant such a job has no item and its id
        answers for it (GET, cancel: ``cancel_unrecorded``)."""
        for _ in range(n):
            now = int(time.time() * 1000)
            job_id = f"{self.prefix}{next(self.ids)}"
            if keyed:
                # the example's own entropy, then a count: keyed ids sort in the order they were made
                # (the rules pick from sorted ids), whatever the clock, as prefixed ids do
                entropy = self.entropy + len(self.short).to_bytes(4, "big")
                self.short[minted := ids.mint(now, QUEUE, self.api.verifier.key, entropy)] = job_id
                job_id = minted
            spec = JobSpec(job_id=job_id, queue=QUEUE, payload={},
                           priority=priority, max_attempts=max_attempts, enqueued_at_ms=now)
            self.specs[spec.job_id] = spec
            self.offsets[spec.job_id] = self.source.append_spec(0, spec)
        self.appended = True
        self.drain_relay()

    def drain_relay(self, replay: bool = False) -> None:
        taken, pushed, dropped = self.relay.drain()
        again = self.family_records_again(replay)  # a re-run parent's children: new records, as a redrive's
        # A redrive's record is a new record, not a re-read: it takes a token, and push.lua skips
        # it while Redis holds the job (a replay may read every one of them again).
        redrives = len(self.redrive_log.offsets) - (0 if replay else self.redrives_read)
        self.redrives_read = len(self.redrive_log.offsets)
        self.check("I7", taken <= pushed + dropped + redrives + again,
                   f"the relay took {taken} rate tokens for {pushed} new jobs "
                   f"(+{dropped} dropped as final, +{redrives} redrive records): "
                   "re-read records cost rate tokens")

    @precondition(lambda self: self.on("relay_restart") and not self.relay.frozen and self.appended)
    @rule()
    def relay_restart(self) -> None:
        """One relay invocation ends (commit, checkpoint) and the next resumes from the checkpoint.
        Drawn only once the invocation read new records (a second restart with nothing new read in
        between repeats the first). The new invocation's first step runs its maintenance (reap,
        settle): the leases that reap puts back are recorded for I8, as any reap's."""
        self.appended = False
        self.relay.restart()
        self.watch_reclaim(self.drain_relay)

    @precondition(lambda self: self.on("redis_loses_everything") and not self.relay.frozen
                  and self.losses < MAX_LOSSES)
    @rule()
    def redis_loses_everything(self) -> None:
        """FLUSHALL; the next relay invocation sees a new epoch and replays from the checkpoint.
        A rare fault, and one that ends every race in flight (holders from before a loss are not
        judged by H): at most ``MAX_LOSSES`` an example, or it would crowd out the rest (hypothesis
        favours the first rules it lists, and this is one of them)."""
        self.losses += 1
        self.appended = False
        self.r.flushall()
        for run in self.workers.all:
            run.before_loss = True
        self.engine.set_config(QUEUE, rate_per_s=1000, burst=100_000)  # queue settings must be set again
        self.reclaimed.clear()
        self.relay.restart()
        self.drain_relay(replay=True)

    # -- rules: workers -----------------------------------------------------------------------------

    def can_lease(self) -> bool:
        return bool(self.seen_rs["ready"]) or self.expired_leases()

    @precondition(lambda self: self.on("lease") and self.can_lease())
    @rule(n=st.integers(1, 2))
    def lease(self, n: int) -> None:
        """Workers lease jobs and hold them (their attempts start in ``run`` and its kin)."""
        self.lease_checked(n)

    def lease_checked(self, n: int) -> list[WorkerRun]:
        """Lease ``n``; check I8 on what came out."""
        reclaimed_before = set(self.reclaimed)
        got, expired = self.watch_reclaim(lambda: self.workers.lease(n))
        reclaimed = reclaimed_before | expired
        ready = set(self.redis_state()["ready"])
        leased = {w.job_id for w in got}
        for run in got:
            self.reclaimed.discard(run.job_id)
        for band in {self.specs[j].priority for j in leased}:
            fresh = sorted(j for j in leased - reclaimed if self.specs[j].priority == band)
            waiting = sorted(j for j in reclaimed & ready if self.specs[j].priority == band)
            self.check("I8", not (fresh and waiting),
                       f"{fresh} leased before {waiting}, whose leases lapsed earlier (band {band})")
        return got  # type: ignore[no-any-return]

    @precondition(lambda self: self.on("lease_and_run") and self.can_lease())
    @rule(verdict=st.sampled_from(VERDICTS), still_running=st.booleans())
    def lease_and_run(self, verdict: str, still_running: bool = False) -> None:
        """What a worker does when nothing goes wrong: lease one job and run it at once.
        ``still_running``: the step ends with its handler still running (``lease_and_start``)."""
        if still_running:
            self.lease_and_start(verdict)
            return
        for run in self.lease_checked(1):
            self.workers.start(run, verdict, None)

    def lease_and_start(self, verdict: str) -> None:
        """A worker leases one job and starts its attempt: it is granted its token and its handler
        is running (until ``thaw``: the handler returns). Every attempt has this window between its
        grant and its verdict; this is the state in which another actor's write can land under a
        current holder (a settle write, bug 2; a late grant, bug 6)."""
        for run in self.lease_checked(1):
            self.workers.start(run, verdict, fault_at("after_grant", "freeze"))

    @precondition(lambda self: self.on("run") and bool(self.live_runs("held")))
    @rule(index=st.integers(0, 100), verdict=st.sampled_from(VERDICTS))
    def run(self, index: int, verdict: str) -> None:
        """A worker grants, runs its leased job, writes the verdict and tells Redis."""
        run = self.pick(self.live_runs("held"), index)
        if run is not None:  # (a replay has no preconditions)
            self.workers.start(run, verdict, None)

    @precondition(lambda self: self.on("run_dies") and bool(self.live_runs("held")))
    @rule(index=st.integers(0, 100), verdict=st.sampled_from(VERDICTS), point=st.sampled_from(sorted(POINTS)))
    def run_dies(self, index: int, verdict: str, point: str) -> None:
        """A worker's attempt, and the worker dies at one point of it (it makes no further call)."""
        run = self.pick(self.live_runs("held"), index)
        if run is not None:
            self.workers.start(run, verdict, fault_at(point, "die"))

    @precondition(lambda self: self.on("run_freezes") and bool(self.live_runs("held")))
    @rule(index=st.integers(0, 100), verdict=st.sampled_from(VERDICTS), point=st.sampled_from(sorted(POINTS)))
    def run_freezes(self, index: int, verdict: str, point: str) -> None:
        """A worker's attempt, and the worker pauses at one point of it until ``thaw``."""
        run = self.pick(self.live_runs("held"), index)
        if run is not None:
            self.workers.start(run, verdict, fault_at(point, "freeze"))

    def lapsed_held(self) -> list[WorkerRun]:
        """Workers holding a lease that has lapsed in Redis (its deadline passed, or it was
        reclaimed and leased again), as the last invariant check read Redis."""
        return [w for w in self.live_runs("held") if self.lapsed_in_redis(w)]

    @precondition(lambda self: self.on("run_late") and bool(self.lapsed_held()))
    @rule(index=st.integers(0, 100))
    def run_late(self, index: int) -> None:
        """A worker starts with a sliver of its lease left by its own clock (1 s of 60), while by
        Redis's clock it has lapsed: the pause between the runtime's lease check and its grant
        (bug 6). Which is the truth depends on where the pause falls; a grant must not care.
        Drawn only for a worker whose lease lapsed in Redis (otherwise it is ``run``)."""
        run = self.pick(self.lapsed_held(), index)
        if run is None:
            return
        run.tracked.state.expires_at = time.monotonic() + 1.0
        self.workers.start(run, "ok", None)

    @precondition(lambda self: self.on("thaw") and bool(self.live_runs("frozen")))
    @rule(index=st.integers(0, 100))
    def thaw(self, index: int) -> None:
        self.workers.thaw(self.pick(self.live_runs("frozen"), index))

    def beatable(self) -> list[WorkerRun]:
        """Holders whose next beat changes something: their lease lapsed in Redis (the beat revives
        it, or finds it lost), or a cancel was requested (the beat tells them). Leases lapse only by
        ``lease_lapses``, so any other beat only moves a deadline that nothing reads."""
        return [w for w in self.live_runs("held", "frozen")
                if self.lapsed_in_redis(w) or w.job_id in self.cancel_requested]

    @precondition(lambda self: self.on("heartbeat") and bool(self.beatable()))
    @rule(index=st.integers(0, 100))
    def heartbeat(self, index: int) -> None:
        run = self.pick(self.beatable(), index)
        self.workers.heartbeat.beat(run.tracked)

    @precondition(lambda self: self.on("lease_lapses") and bool(self.seen_rs["leased"]))
    @rule(index=st.integers(0, 100), taken_over=st.booleans())
    def lease_lapses(self, index: int, taken_over: bool = False) -> None:
        """Time passes for one lease: its deadline is now in the past, by Redis's clock and the
        holder's (a worker that died, or froze, stops renewing). ``taken_over``: the queue is busy,
        so the next worker's lease call (which reclaims expired leases first) comes at once and that
        worker starts its attempt (``lease_and_start``): the demo's story in one step; with a backlog,
        the reclaimed job should be the one it gets (I8)."""
        leased = sorted(self.redis_state()["leased"])
        job_id = self.pick(leased, index)
        if job_id is None:
            return
        self.r.zadd(K.leased, {job_id: self.now_ms() - 1}, xx=True)
        for run in self.workers.all:
            if run.job_id == job_id:
                run.tracked.state.expires_at = time.monotonic() - 1
        if taken_over:
            self.lease_and_start("ok")

    # -- rules: operators and maintenance -----------------------------------------------------------

    @precondition(lambda self: self.on("reap") and self.expired_leases())
    @rule()
    def reap(self) -> None:
        """The engine's reap, drawn only when a lease has expired (delayed jobs wait an hour)."""
        self.watch_reclaim(lambda: self.engine.reap(QUEUE))

    def to_settle(self) -> bool:
        """Something for the relay's maintenance to do: an entry in the settle set, or an expired
        lease that its reap will end or put back."""
        return bool(self.seen_rs["settle"]) or self.expired_leases()

    @precondition(lambda self: self.on("relay_maintenance") and not self.relay.frozen and self.to_settle())
    @rule(pause=st.integers(0, 8))
    def relay_maintenance(self, pause: int = 0) -> None:
        """Reap and settle (drawn only when there is something to reap or settle). ``pause``: the
        relay pauses right after it read the settle set, before its DynamoDB writes, and the pause
        ends by itself after that many more steps, whatever the other actors do meanwhile
        (``relay_thaws`` is that end; a replay calls it)."""
        if pause == 0:
            self.watch_reclaim(lambda: self.relay.maintain(False))
            return
        self.relay_frozen_until = self.step_no + 1 + pause
        self.watch_reclaim(lambda: self.relay.maintain(True))

    def relay_freezes_mid_settle(self) -> None:
        """The relay frozen right after its settle read until ``relay_thaws`` (the replays)."""
        self.relay_maintenance(FOREVER)

    def relay_thaws(self) -> None:
        self.relay.thaw()

    def minted_within_horizon(self, job_id: str, *, held: bool = False) -> Any:
        """``Api.minted`` where time has passed as ``ttl_expires`` says. TTL deletes an item at least
        ``retention_days`` after its job ended, and the id horizon is capped at ``retention_days``
        (core/config.py), so an expired job's id is past the horizon: the model's clock does not move
        14 days, so it says so here (a random hunt of 250 examples found the cancel of an expired
        keyed id creating a ``cancelled`` item with token 0, which no deployment can reach)."""
        if job_id in self.expired:
            return self.api._held(job_id) if held else None
        return Api.minted(self.api, job_id, held=held)

    def cancellable(self, items: dict[str, dict[str, Any]]) -> list[str]:
        """Jobs a cancel can act on: not final in DynamoDB (an expired item is absent: its cancel
        must answer 404, once), no cancel requested yet. Any other cancel answers 409 or repeats one."""
        return sorted(j for j in self.specs if j not in self.cancel_requested and j not in self.answered_404
                      and (items.get(j) or {}).get("status") not in FINAL)

    @precondition(lambda self: self.on("cancel") and self.count["cancel"] < MAX_CANCELS
                  and bool(self.cancellable(self.seen_items)))
    @rule(index=st.integers(0, 100))
    def cancel(self, index: int) -> None:
        """``Api.cancel`` (``DELETE /v1/jobs/{id}``), at most ``MAX_CANCELS`` an example: it sorts
        first among the rules with one argument, which hypothesis favours, and each one ends a job."""
        self.count["cancel"] += 1
        job_id = self.pick(self.cancellable(self.items()), index)
        if job_id is None:
            return
        try:
            answer = self.api.cancel(job_id)
        except AlreadyFinished:
            return  # 409
        except JobNotFound:
            self.answered_404.add(job_id)
            self.check("I6", job_id in self.expired, f"cancel of accepted job {job_id} answered 404")
            return
        if answer.status == "cancel_requested":
            self.cancel_requested.add(job_id)

    @precondition(lambda self: self.on("redrive") and bool(self.seen_rs["dead"]))
    @rule(index=st.integers(0, 100), picked_up=st.booleans())
    def redrive(self, index: int, picked_up: bool = False) -> None:
        """An operator redrives a dead job (what ``sluice dead redrive <queue> <id>`` does).
        ``picked_up``: a worker is idle, polling, so its next lease call comes at once and it starts
        its attempt (``lease_and_start``); it gets the redriven job if nothing else is ready."""
        job_id = self.pick(sorted(self.redis_state()["dead"]), index)
        if job_id is None:
            return
        try:
            redrive_job(self.engine, self.store, job_id, self.redrive_log)
        except (JobNotFound, AlreadyFinished):
            return  # refused with a reason: its record expired, or it was cancelled or succeeded
        seen = self.final_since.pop(job_id, None)
        if seen is None:  # it became final while a paused relay held the checks back (I3 not recorded)
            item = self.items().get(job_id)
            seen = (item["status"], item["token"]) if item and item["status"] in FINAL else None
        if seen is not None:
            self.redriven[job_id] = seen[1]  # still final until its next grant: not a violation
        if picked_up:
            self.lease_and_start("ok")

    @precondition(lambda self: self.on("purge") and self.count["purge"] < MAX_PURGES
                  and bool(self.seen_rs["dead"]))
    @rule()
    def purge(self) -> None:
        """``sluice dead purge``: once an example (it empties the whole dead set, and it sorts first
        among the rules, which hypothesis favours)."""
        self.count["purge"] += 1
        self.engine.purge_dead(QUEUE)

    def expirable(self, items: dict[str, dict[str, Any]], rs: dict[str, Any]) -> list[str]:
        """Final items TTL may delete: 14 days on, every lease has lapsed and been reaped and every
        worker that held one is long gone, and the relay's maintenance (every few seconds) has
        settled every entry, so only a job no longer live in Redis (its dead set aside), held by no
        worker and with no settle entry left."""
        live = set().union(*(rs[z] for z in LIVE_ZSETS))
        held = {w.job_id for w in self.live_runs("held", "running", "frozen")}
        return sorted(j for j, it in items.items()
                      if it["status"] in FINAL and j not in live and j not in held and j not in rs["settle"])

    @precondition(lambda self: self.on("ttl_expires") and self.count["ttl_expires"] < MAX_EXPIRIES
                  and not (self.relay.frozen and "_families" in self.__dict__)
                  and bool(self.expirable(self.seen_items, self.seen_rs)))
    @rule(index=st.integers(0, 100))
    def ttl_expires(self, index: int) -> None:
        """DynamoDB's TTL deletes a final item (moto never does: delete it). Its Kafka records are
        gone too, every one: retention_days outlives the topic's retention (docs/store.md), and each
        was appended before the job ended (a parent's re-run appends no record of a child already
        final: gateway/families.py). At most ``MAX_EXPIRIES`` an example: 14 days is long next to
        every other step."""
        self.count["ttl_expires"] += 1
        if "_families" in self.__dict__ and self.fam.families:
            # The stream keeps a record 24 hours, and the countdown reads it as it comes: 14 days on,
            # it has read every record (a parent's end whose children it ends, the endings it counts).
            self.countdown_catches_up()
        job_id = self.pick(self.expirable(self.items(), self.redis_state()), index)
        if job_id is None:
            return
        self.db.delete_item(TableName=self.table, Key={"job_id": {"S": job_id}})
        self.expired.add(job_id)
        # Its first record, a redrive's, a firing's second delivery and a re-run parent's appends
        # again (which ``offsets`` does not hold: it keeps a job's first): a replay read them all.
        log = self.source.log[0]
        for off, record in enumerate(log):
            if record.key == job_id.encode():
                log[off] = SourceRecord(0, off, job_id.encode(), None)

    def stuck(self) -> bool:
        """No other rule can act (its budget spent, every job final, the relay paused)."""
        return not any(r.function.__name__ != "idle" and all(p(self) for p in r.preconditions)
                       for r in type(self).setup_state().rules)

    @precondition(lambda self: self.stuck())
    @rule()
    def idle(self) -> None:
        """Time passes and nothing happens: drawn only when no other rule can act (hypothesis
        stops a run with no rule to draw as an error); a paused relay's pause runs out meanwhile."""

    # -- rotation (issue 29, items 4 and 7): the job id key rotates; a firing delivered across it -----
    # The gateway's keys rotate in place (``Verifier.key``/``previous``, as a container's refresh
    # does): every later gateway call of any rule (a cancel, a sealed record, a family's request)
    # runs under the new pair, and a key two rotations old is gone. A schedule's firing is enqueued
    # by the gateway's pipeline (sealed, its keyless id), then delivered again after a rotation, as
    # Scheduler retries: R1 one id for both, and the other rules act on that one job (a second
    # record arriving after it ended must not run it again: I3).

    MAX_ROTATIONS = 3  # per example: the root's key retires at the second
    MAX_FIRINGS = 2  # per example

    @precondition(lambda self: self.on("rotate_job_id_key")
                  and self.count.get("rotations", 0) < JobMachine.MAX_ROTATIONS)
    @rule()
    def rotate_job_id_key(self) -> None:
        """JobIdSecretRotation: a new current key; the current one becomes the previous one."""
        self.count["rotations"] = n = self.count.get("rotations", 0) + 1
        verifier = self.api.verifier
        new = f"job-model-key-rotated-{n}".encode().ljust(32, b"-")
        verifier.key, verifier.previous = new, (verifier.key,)

    @precondition(lambda self: self.on("firing_across_rotation") and not self.relay.frozen
                  and len(self.specs) < 10 and self.count.get("firings", 0) < JobMachine.MAX_FIRINGS)
    @rule(rotate=st.booleans(), max_attempts=st.integers(1, 3))
    def firing_across_rotation(self, rotate: bool, max_attempts: int) -> None:
        """A firing's job is appended (sealed with the current key) and pushed; Scheduler delivers it
        again, after a key rotation if ``rotate``: the same id, sealed with the new key, appended and
        read by the relay, which keeps one job."""
        from sluice.core import schedules, seal
        from sluice.core.wire import EnqueueRequest

        self.count["firings"] = n = self.count.get("firings", 0) + 1
        at = 1_800_000_000_000 + n * 60_000  # the scheduled time: one firing per draw
        name = f"nightly-{self.prefix}"  # the table outlives the example: its ids must be its own
        job_id = schedules.firing_id(name, QUEUE, at)
        request = EnqueueRequest(payload={}, max_attempts=max_attempts)

        def delivered() -> JobSpec:  # what the firings function appends, with the keys it holds now
            spec = self.api.pipeline.spec(QUEUE, request, int(time.time() * 1000), None,
                                          job_id=schedules.firing_id(name, QUEUE, at))
            self.check("R1", spec.job_id == job_id and seal.verify_spec(spec, [self.api.verifier.key]),
                       f"a delivery of the firing at {at} named {spec.job_id}, not {job_id}, or was not "
                       "sealed with the current key")
            return spec

        first = delivered()
        self.specs[job_id] = first
        self.offsets[job_id] = self.source.append_spec(0, first)
        self.appended = True
        self.drain_relay()
        if rotate:
            self.rotate_job_id_key()
        self.redrive_log.append([delivered()])  # a second record of a known job: it may take a token (I7)
        self.drain_relay()

    # -- tokens (issue 29, item 6): a failover to a replica that lags behind ---------------------------
    # Replication is asynchronous: a replica promoted by a failover holds Redis as it was some writes
    # ago (its seq too), and the relay replays (a new replication id changes the Redis epoch). Unlike
    # a data loss, the holders of leases from before the copy are still judged by H: the promoted
    # Redis names them, and lease tokens handed out after the copy must not be handed out again.

    replica: Any = None  # (the lagging replica's copy of Redis, losses and TTL expiries then)
    replica_reclaimed: set[str] = set()  # the jobs reclaimed (I8) when the replica's copy was taken
    failovers = 0  # per example

    def lagging(self) -> bool:
        """A replica copy a failover may promote: a Redis loss since empties the replica too (it
        resyncs from the emptied primary), and a replica lags by seconds, not the 14 days after
        which TTL expires an item."""
        return self.replica is not None and self.replica[1:] == (self.losses, self.count["ttl_expires"])

    @precondition(lambda self: self.on("replica_falls_behind") and not self.lagging()
                  and self.failovers < MAX_FAILOVERS)
    @rule()
    def replica_falls_behind(self) -> None:
        """The replica stops applying the primary's writes here; ``failover_to_lagging_replica``
        promotes it as it is now, with whatever the primary wrote since lost."""
        self.replica = (replica_copy(self.redis_url), self.losses, self.count["ttl_expires"])
        self.replica_reclaimed = set(self.reclaimed)

    @precondition(lambda self: self.on("failover_to_lagging_replica") and self.lagging()
                  and not self.relay.frozen)
    @rule()
    def failover_to_lagging_replica(self) -> None:
        """The failover: Redis becomes the replica's copy. The model's one redis-server keeps its
        replication id, so the copy's epoch key is left out instead: either way the relay sees a new
        epoch and replays. A worker whose lease had lapsed or ended since the copy finds it back in
        the promoted Redis: that holder was superseded (its token too, in the jobs table) by a
        rollback no grant made, so H does not judge it (as holders from before a loss). The relay's
        partition lease from the copy lapses (a real relay waits out its lease_ms; the model's clock
        does not move)."""
        (copy, _, _), self.replica = self.replica, None
        self.failovers += 1
        self.appended = False
        before = self.redis_state()["tokens"]
        promote(self.redis_url, copy, skip=(EPOCH_KEY.encode(),))
        relay_leases = QueueKeys(RELAY_QUEUE).leased
        if held := self.r.zrange(relay_leases, 0, -1):
            self.r.zadd(relay_leases, dict.fromkeys(held, self.now_ms() - 1), xx=True)
        after = self.redis_state()["tokens"]
        for run in self.workers.all:
            if after.get(run.job_id) == run.lease_token != before.get(run.job_id):
                run.before_loss = True
        # The promoted Redis holds the reclaims of its copy's time (those still in its ready), not
        # the ones since; the new relay's first step reaps (its maintenance): recorded as any reap.
        self.reclaimed = self.replica_reclaimed & set(self.redis_state()["ready"])
        self.relay.restart()
        # The replay reads again every record not known final, and the relay cannot tell before
        # push.lua which of their jobs the promoted Redis still holds: those cost a rate token (I7
        # counts the ones a full loss left nothing of), as do redrive records.
        # Family jobs (children, continuations) are replayed as well: held ones cost a token too, and
        # a re-run parent's second records are new records (``family_records_again``, as a replay).
        fam_jobs = {j for f in (self.fam.families if "_families" in self.__dict__ else [])
                    for j in (*f.children.values(), *([f.then] if f.then else []))}
        survivors = sum(self.r.exists(K.job(j)) for j in (*self.specs, *sorted(fam_jobs)))
        (taken, pushed, dropped), _ = self.watch_reclaim(self.relay.drain)
        again = self.family_records_again(True)
        self.redrives_read = len(self.redrive_log.offsets)
        self.check("I7", taken <= pushed + dropped + self.redrives_read + survivors + again,
                   f"the replay after a failover took {taken} rate tokens for {pushed} new jobs "
                   f"(+{dropped} dropped as final, +{survivors} held by the promoted Redis, "
                   f"+{again} family records appended again)")

    # -- invariants ---------------------------------------------------------------------------------

    # -- redrive (issue 29, items 1 and 8): a redriven job's endings before its grant ----------------
    # A redrive leaves the item failed/dead until the redriven job's grant. The redriven attempt may
    # end before it: a cancel while it waits (cancelled as a queued job: I6), or a lapse on its last
    # attempt (settled dead: I4 reads a redriven-waiting item as not final). D: the dead set holds
    # only dead jobs.

    def redriven_waiting(self, items: dict[str, dict[str, Any]], rs: dict[str, Any]) -> list[str]:
        """Redriven jobs waiting for their grant (item failed/dead, an unused generation) that Redis
        holds waiting or leased (not granted)."""
        live = set(rs["ready"]) | set(rs["delayed"]) | set(rs["leased"])
        return sorted(j for j, it in items.items() if waits_redriven(it) and j in live)

    def held_redriven(self) -> list[WorkerRun]:
        """Workers holding (not granted) the lease of a redriven job waiting for its grant."""
        waiting = set(self.redriven_waiting(self.seen_items, self.seen_rs))
        return [w for w in self.live_runs("held") if w.job_id in waiting and not self.lapsed_in_redis(w)]

    @precondition(lambda self: self.on("redrive_and_hold") and bool(self.seen_rs["dead"]))
    @rule(index=st.integers(0, 100))
    def redrive_and_hold(self, index: int) -> None:
        """An operator redrives a dead job and a worker leases (it gets the redriven job if nothing
        else is ready) and holds it, not granted yet: the window in which the item still says
        failed/dead."""
        self.redrive(index)
        self.lease_checked(1)

    @precondition(lambda self: self.on("redriven_lapses") and bool(self.held_redriven()))
    @rule(index=st.integers(0, 100), settle=st.booleans())
    def redriven_lapses(self, index: int, settle: bool) -> None:
        """The worker holding a redriven job dies before its grant: its lease lapses and is reaped
        (dead on its last attempt, a settle entry of the redriven generation; else back in ready).
        ``settle``: the relay's maintenance runs right after."""
        run = self.pick(self.held_redriven(), index)
        if run is None:
            return
        run.state = "died"
        self.r.zadd(K.leased, {run.job_id: self.now_ms() - 1}, xx=True)
        run.tracked.state.expires_at = time.monotonic() - 1
        self.watch_reclaim(lambda: self.engine.reap(QUEUE))
        if settle and not self.relay.frozen:
            self.relay_maintenance(0)

    @precondition(lambda self: self.on("cancel_redriven") and self.count["cancel"] < MAX_CANCELS
                  and bool(self.redriven_waiting(self.seen_items, self.seen_rs)))
    @rule(index=st.integers(0, 100))
    def cancel_redriven(self, index: int) -> None:
        """``Api.cancel`` of a redriven job waiting for its grant (or leased, not granted): it
        cancels as a queued job would (I6: no 409), and the job never runs."""
        self.count["cancel"] += 1
        job_id = self.pick(self.redriven_waiting(self.items(), self.redis_state()), index)
        if job_id is None:
            return
        try:
            answer = self.api.cancel(job_id)
        except AlreadyFinished as exc:
            self.check("I6", False, f"cancel of redriven job {job_id}, waiting for its grant, answered 409 "
                                    f"({exc})")
            return
        item = self.items().get(job_id) or {}
        self.check("I6", (answer.status, item.get("status")) == ("cancelled", "cancelled"),
                   f"cancel of redriven job {job_id} answered {answer.status}; "
                   f"its item is {item.get('status')}")

    def dead_set_holds_dead(self, rs: dict[str, Any], items: dict[str, dict[str, Any]]) -> None:
        """D: a job in the dead set whose item is succeeded or cancelled is there only until the relay
        settles its ending (its settle entry still pending)."""
        for job_id in rs["dead"]:
            status = (items.get(job_id) or {}).get("status")
            self.check("D", status not in ("succeeded", "cancelled") or job_id in rs["settle"],
                       f"{job_id} is {status} in DynamoDB but sits in Redis's dead set, its ending settled")
    # -- families (issue 29; part: families) ----------------------------------------------------------
    # A parent (granted in the jobs table, never in Redis: tests/backends/job_model_families.py)
    # starts children and maybe a continuation on the model's queue through the gateway's use case;
    # the append may fail, or the children's item writes half-fail. It re-runs with its children in
    # another order, or ends (Fail, dead, a swallowed error, a settle). The children and the
    # continuation are the model's jobs once appended (the rules above lease, run, cancel, redrive and
    # expire them). The stream's countdown reads the real stream; once it has caught up:
    # F1 no child of an ended parent stays unrecorded (never appended, not final);
    # F2 a continuation waits for exactly the children never seen final (one slot each, whatever
    # the order of any request); F3 it was appended once if it waits for none, else never.

    @property
    def fam(self) -> fm.FamilyWorld:
        world: fm.FamilyWorld | None = self.__dict__.get("_families")
        if world is None:
            world = self.__dict__["_families"] = fm.FamilyWorld.make(
                self.store, self.engine, self.source, self.specs, self.offsets, self.moto_url, self.db,
                self.table, KEY, QUEUE)
        return world

    def family_ask(self, family: fm.Family, keys: list[str], fault: str) -> None:
        self.fam.request(family, keys, QUEUE, fault)
        self.appended = True
        self.drain_relay()

    def family_records_again(self, replay: bool) -> int:
        """Records the family gateway appended for jobs it had appended before (a re-run parent's
        children) since the relay last drained (every one, on a replay): like a redrive's record, each
        is a new record, not a re-read, and takes a rate token while push.lua skips its job."""
        if "_families" not in self.__dict__:
            return 0
        log = self.fam.log
        total = sum(n - 1 for n in log.appends.values())
        again = total - (0 if replay else log.again_drained)
        log.again_drained = total
        return again

    @precondition(lambda self: self.on("family_start") and not self.relay.frozen and len(self.specs) < 10
                  and len(self.fam.families) < fm.MAX_FAMILIES)
    @rule(n=st.integers(1, fm.MAX_CHILDREN), then=st.booleans(), fault=st.sampled_from(fm.FAULTS))
    def family_start(self, n: int, then: bool, fault: str) -> None:
        """A parent's handler starts ``n`` children (and a continuation); ``fault`` may break it."""
        family = self.fam.start(KEY, QUEUE, n, then)
        self.family_ask(family, family.keys, fault)

    def running_parents(self) -> list[fm.Family]:
        """Parents that may still run: not ended, and none of their family's items expired (TTL takes
        an item 14 days after its job ended; a parent running then is past the life bound)."""
        if "_families" not in self.__dict__:
            return []
        return [f for f in self.fam.families if not f.ended
                and not self.expired & {*f.children.values(), *([f.then] if f.then else [])}]

    @precondition(lambda self: self.on("parent_reruns") and not self.relay.frozen
                  and bool(self.running_parents()))
    @rule(index=st.integers(0, 100), rotate=st.integers(1, 2), fault=st.sampled_from(fm.FAULTS))
    def parent_reruns(self, index: int, rotate: int, fault: str) -> None:
        """The parent runs again (a new grant: its worker died, or it raised) and asks for the same
        children in another order (rotated; reversed when rotating gives the same order)."""
        family = self.pick(self.running_parents(), index)
        if family is None:
            return
        family.runs += 1
        family.token = self.store.grant(family.parent, fm.PARENT_QUEUE, f"parent-{family.runs}")
        keys = family.keys[rotate % len(family.keys):] + family.keys[:rotate % len(family.keys)]
        self.family_ask(family, keys if keys != family.keys else family.keys[::-1], fault)

    @precondition(lambda self: self.on("parent_ends") and bool(self.running_parents()))
    @rule(index=st.integers(0, 100), how=st.sampled_from(fm.PARENT_ENDINGS))
    def parent_ends(self, index: int, how: str) -> None:
        family = self.pick(self.running_parents(), index)
        if family is not None:
            self.fam.end_parent(family, how)

    @precondition(lambda self: self.on("stream_countdown") and not self.relay.frozen
                  and "_families" in self.__dict__ and bool(self.fam.families)
                  and self.step_no > self.fam.caught_up)
    @rule()
    def stream_countdown(self) -> None:
        """The countdown function reads the jobs table's stream until it has caught up (the children's
        endings, the parents' ends), and the relay pushes what it released; then F1-F3."""
        self.countdown_catches_up()

    def countdown_catches_up(self) -> None:
        self.fam.catch_up()
        self.appended = True
        self.drain_relay()
        self.fam.caught_up = self.step_no + 1  # this step's check counts it: drawn again after another
        self.family_checks()

    def family_items(self) -> dict[str, dict[str, Any]]:
        keys = sorted({j for f in self.fam.families
                       for j in (f.parent, *f.children.values(), *([f.then] if f.then else []))})
        found: dict[str, dict[str, Any]] = {}
        for start in range(0, len(keys), 100):
            resp = self.db.batch_get_item(RequestItems={self.table: {
                "Keys": [{"job_id": {"S": j}} for j in keys[start:start + 100]], "ConsistentRead": True}})
            found.update({i["job_id"]["S"]: i for i in resp["Responses"].get(self.table, [])})
        return found

    @invariant()
    def families_seen_final(self) -> None:
        """Which children have been final (each counts once on its continuation, as the stream has it)."""
        if "_families" in self.__dict__ and self.fam.families:
            items = self.family_items()
            self.fam.ever_final |= {c for f in self.fam.families for c in f.children.values()
                                    if items.get(c, {}).get("status", {}).get("S") in FINAL}

    def family_checks(self) -> None:
        items = self.family_items()
        fam = self.fam
        fam.ever_final |= {c for f in fam.families for c in f.children.values()
                           if items.get(c, {}).get("status", {}).get("S") in FINAL or c in self.expired}
        for f in fam.families:
            parent = items.get(f.parent, {}).get("status", {}).get("S")
            for child in f.children.values():
                status = items.get(child, {}).get("status", {}).get("S")
                if parent in FINAL and (status is not None or f.then is not None):
                    # (a child of no family whose item was never written is in no record: not handled)
                    self.check("F1", status in FINAL or child in self.specs or child in self.expired,
                               f"{child}, a child of {f.parent} (ended {parent}), is {status} and was "
                               "never appended: nothing will ever run or end it")
            then = items.get(f.then) if f.then else None
            count = next((n for n in ("buckets_left", "remaining") if n in (then or {})), None)
            if then is None or count is None or f.then in self.expired:
                continue
            # Counted on buckets of ``fm.BUCKET`` slots (issue 30): its buckets_left counts buckets.
            left = fam.store.families.children_left(f.then or "")
            remaining = int(then[count]["N"]) if left is None else left
            self.check("F2", (left is None) == (count == "remaining") and
                       (int(then[count]["N"]) == 0) == (remaining == 0),
                       f"continuation {f.then}: {left} children left but {then[count]['N']} {count}")
            waiting = sorted(c for c in f.children.values() if c not in fam.ever_final)
            self.check("F2", remaining == len(waiting),
                       f"continuation {f.then} waits for {remaining} children; {waiting} never ended")
            appended = fam.log.appends.get(f.then or "", 0)
            self.check("F3", appended == (1 if remaining == 0 else 0),
                       f"continuation {f.then} (remaining {remaining}) was appended {appended} times")

    def check(self, name: str, ok: bool, message: Any) -> None:
        """One invariant check; ``mute`` holds the names a run leaves out (see the tests below)."""
        if name not in self.mute and not ok:
            if not JobMachine.first_failure:  # the first example that failed, before any shrinking
                JobMachine.first_failure = f"example {self.n}: {name}"
            raise AssertionError(f"{name} violated: {message() if callable(message) else message}")

    @invariant()
    def job_invariants(self) -> None:
        self.step_no += 1
        if self.relay.frozen and self.step_no >= self.relay_frozen_until:
            self.relay_thaws()  # its pause is over: the settle writes land now, and are judged below
        self.fencing()
        rs, items = self.redis_state(), self.items()
        self.seen_rs, self.seen_items, self.seen_now_ms = rs, items, self.now_ms()
        if TRACE:
            self.trace.append(self.path_point(rs, items))
        if self.relay.frozen:
            return  # mid-maintenance: judged once the relay thaws
        self.authorities_agree(rs, items)
        self.holders_stay_current(rs, items)
        self.dead_set_holds_dead(rs, items)

    def path_point(self, rs: dict[str, Any], items: dict[str, dict[str, Any]]) -> list[Any]:
        """What this step left, without ids' random prefixes or clock values (``TRACE``)."""
        cut = len(self.prefix)

        def short(j: str) -> str:
            return self.short.get(j, j)[cut:]

        return [[sorted(short(j) for j in rs[z]) for z in (*LIVE_ZSETS, "dead")],
                sorted(short(j) for j in rs["settle"]),
                sorted((short(j), it["status"], it["token"]) for j, it in items.items()),
                sorted((w.name, w.state) for w in self.workers.all)]

    def fencing(self) -> None:
        """I1 and I2, over every store call the workers made, in the order they landed."""
        granted: dict[str, int] = dict(self.max_token)
        for e in self.events[self.checked_events:]:
            top = granted.get(e.job_id, 0)
            if e.kind == "grant":
                self.check("I2", e.token > top,
                           f"{e.worker} was granted token {e.token} for {e.job_id}, not above {top}")
                granted[e.job_id] = max(top, e.token)
            else:
                self.check("I1", e.token == top,
                           f"{e.kind} by {e.worker} with token {e.token} accepted for {e.job_id}; "
                           f"token {top} was granted")
        self.checked_events = len(self.events)
        self.max_token = granted

    def authorities_agree(self, rs: dict[str, Any], items: dict[str, dict[str, Any]]) -> None:
        live = set().union(*(rs[z] for z in LIVE_ZSETS))
        for job_id in self.specs:
            item = items.get(job_id)
            status = item["status"] if item else None
            if item:
                self.check("I2", item["token"] >= self.max_token.get(job_id, 0), f"{job_id}: token went down")
            # I3: a final state is left only through an explicit redrive.
            seen = self.final_since.get(job_id)
            if seen is not None and item is not None:
                was, token = seen
                if was == "succeeded":
                    self.check("I3", status == "succeeded", f"{job_id} was succeeded, now {status}")
                else:
                    self.check("I3", (status, item["token"]) == (was, token),
                               f"{job_id} was {was} (token {token}), now {status} (token {item['token']}) "
                               "without a redrive")
            if item is not None and self.redriven.get(job_id, item["token"]) != item["token"]:
                del self.redriven[job_id]  # the redriven job was granted again
            elif job_id in self.redriven and status in FINAL and not waits_redriven(item):
                del self.redriven[job_id]  # its redriven attempt ended before its grant (a cancel, a settle)
            if item is not None and status in FINAL and seen is None and job_id not in self.redriven:
                if waits_redriven(item):  # redriven before its ending landed (a holder's late verdict):
                    self.redriven[job_id] = item["token"]  # final, but its redrive has already come
                else:
                    self.final_since[job_id] = (status, item["token"])
            if job_id in self.expired:
                continue
            where = "live" if job_id in live else "settling" if job_id in rs["settle"] else "absent"
            if status == "leased":
                self.check("I5", where != "absent",
                           f"{job_id} is leased in DynamoDB (cancel requested: {item['cancel_requested']}) "
                           "but nothing in Redis will ever lease or end it")  # type: ignore[index]
            self.check("I4", (status in FINAL and not waits_redriven(item)) or where != "absent",
                       f"{job_id} is {status} in DynamoDB and not live in Redis"
                       + (" (its cancel was answered 202)" if job_id in self.cancel_requested else ""))

    def holders_stay_current(self, rs: dict[str, Any], items: dict[str, dict[str, Any]]) -> None:
        """H: while a worker holds the Redis lease and has its grant, its token is the job's token
        (no later grant made it stale: H-token) and nothing ended the job under it (H-status)."""
        for run in self.live_runs("running", "frozen"):
            if (run.granted is None or run.verdict_written or run.before_loss
                    or rs["tokens"].get(run.job_id) != run.lease_token):
                continue
            item = items.get(run.job_id) or {"status": None, "token": None}
            self.check("H-token", item["token"] == run.granted,
                       f"{run.name} holds the lease of {run.job_id} with token {run.granted}, "
                       f"but the item's token is {item['token']}")
            self.check("H-status", item["status"] in ("leased", "succeeded"),
                       f"{run.name} holds the lease of {run.job_id} with token {run.granted}, "
                       f"but the item is {item['status']}")


@pytest.fixture(scope="module")
def jobs_table(moto_server: Any) -> str:
    name = f"jobmodel-{uuid.uuid4().hex[:8]}"
    tables.create_jobs_table(boto3.client("dynamodb", endpoint_url=moto_server.extra["url"],
                                          region_name="us-east-1"), name)
    return name


def machine(redis_url: str, moto_url: str, table: str, mute: frozenset[str] = frozenset(),
            focus: frozenset[str] = frozenset()) -> type[JobMachine]:
    class Machine(JobMachine):
        pass
    Machine.redis_url, Machine.moto_url, Machine.table = redis_url, moto_url, table
    Machine.mute, Machine.focus = mute, focus
    return Machine


EXAMPLES = int(os.environ.get("JOBMODEL_EXAMPLES", "30"))
STEPS = int(os.environ.get("JOBMODEL_STEPS", "30"))
HUNT = frozenset(filter(None, os.environ.get("JOBMODEL_MUTE", "").split(",")))
FOCUS = frozenset(filter(None, os.environ.get("JOBMODEL_FOCUS", "").split(",")))
# The suite's run draws the same examples every time, so `make test` is reproducible: a defect a
# hunting run finds is pinned by a strict-xfail replay (UNFIXED) instead of failing one CI run in a
# few. Hunting runs set JOBMODEL_RANDOM=1.
RANDOM = bool(os.environ.get("JOBMODEL_RANDOM"))
# A file to which each example appends the states it went through: two derandomized runs, one on a
# loaded machine, must write the same file (the draws may not depend on how fast the machine is).
TRACE = os.environ.get("JOBMODEL_TRACE", "")


def run_machine(redis_url: str, moto_url: str, table: str, mute: frozenset[str] = frozenset(),
                focus: frozenset[str] = frozenset(), examples: int = EXAMPLES) -> None:
    JobMachine.examples, JobMachine.first_failure = itertools.count(1), ""
    try:
        run_state_machine_as_test(machine(redis_url, moto_url, table, mute, focus), settings=settings(
            max_examples=examples, stateful_step_count=STEPS, deadline=None, database=None,
            derandomize=not RANDOM,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))
    except AssertionError as exc:
        exc.add_note(f"first failing example (before shrinking): {JobMachine.first_failure}")
        raise


@pytest.mark.timeout(900)
def test_the_job_model_holds(redis_url: str, moto_url: str, jobs_table: str) -> None:
    run_machine(redis_url, moto_url, jobs_table, HUNT, FOCUS)


__all__ = ["Died", "JobMachine"]


# -- what the machine found ---------------------------------------------------------------------------
# Each sequence is a failing example the machine printed on the unfixed code (docs/job-states.md,
# "What the machine found"), cut down by hand to the steps that matter and replayed here step by
# step, with every invariant checked after each step as the machine does.

FOUND: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "bug1-cancel-after-crash": [
        ("enqueue_and_push", {"n": 1, "priority": 0, "max_attempts": 3}), ("lease", {"n": 1}),
        ("run_dies", {"index": 0, "verdict": "ok", "point": "after_grant"}),
        ("lease_lapses", {"index": 0}),
        ("reap", {}), ("cancel", {"index": 0})],
    "bug2-settle-races-redrive": [
        ("enqueue_and_push", {"n": 1, "priority": 0, "max_attempts": 1}), ("lease", {"n": 1}),
        ("lease_lapses", {"index": 0}), ("reap", {}), ("relay_freezes_mid_settle", {}),
        ("redrive", {"index": 0}), ("lease", {"n": 1}),
        ("run_freezes", {"index": 1, "verdict": "ok", "point": "after_grant"}),
        ("relay_thaws", {})],
    "bug3-reread-costs-rate": [
        ("enqueue_and_push", {"n": 3, "priority": 0, "max_attempts": 1}), ("relay_restart", {})],
    "bug4-failed-runs-again": [
        ("enqueue_and_push", {"n": 1, "priority": 0, "max_attempts": 3}), ("lease", {"n": 1}),
        ("run_dies", {"index": 0, "verdict": "fail", "point": "after_verdict"}),
        ("lease_lapses", {"index": 0}), ("lease", {"n": 1}),
        ("run", {"index": 0, "verdict": "ok", })],
    "bug5-token-backwards": [
        ("enqueue_and_push", {"n": 1, "priority": 0, "max_attempts": 1}), ("lease", {"n": 1}),
        ("run", {"index": 0, "verdict": "fail", }), ("ttl_expires", {"index": 0}),
        ("redrive", {"index": 0}), ("lease", {"n": 1}),
        ("run", {"index": 0, "verdict": "ok", })],
    "bug6-late-grant": [
        ("enqueue_and_push", {"n": 1, "priority": 0, "max_attempts": 3}), ("lease", {"n": 1}),
        ("lease_lapses", {"index": 0}), ("lease", {"n": 1}),
        ("run_freezes", {"index": 1, "verdict": "ok", "point": "after_grant"}),
        ("run_late", {"index": 0})],
    "bug7-reclaimed-waits": [
        ("enqueue_and_push", {"n": 2, "priority": 0, "max_attempts": 3}), ("lease", {"n": 1}),
        ("lease_lapses", {"index": 0}), ("lease", {"n": 1})],
}
# Found by the search on the fixed code (300 examples, first failing at example 16; cut down by
# removing steps while I4 still fails): a redriven job whose next attempt retries was not replayed
# after a Redis data loss, so its item stayed queued with nothing in Redis. The relay's checkpoint
# scan had found it final (a redrive leaves the item failed until its grant) and passed its only
# record; fixed by the relay counting a redriven job as not done with (``JobStore.relay_view``).
FOUND["redriven-job-lost-with-redis"] = [
    ("enqueue_and_push", {"n": 1, "priority": 0, "max_attempts": 1}),
    ("enqueue_and_push", {"n": 1, "priority": 0, "max_attempts": 2}),
    ("cancel", {"index": 22}), ("lease_and_run", {"verdict": "fail"}), ("redrive", {"index": 0}),
    ("enqueue_and_push", {"n": 1, "priority": 0, "max_attempts": 1}),
    ("lease_and_run", {"verdict": "retry"}), ("redis_loses_everything", {})]
# Its neighbour, written by hand: the checkpoint passed the job while it was failed, *before* the
# redrive (relay_restart writes one), so no scan can keep it; fixed by the redrive appending the job's
# record to Kafka again, which the replay then covers (docs/redis-loss.md, "Redriven jobs").
FOUND["redriven-after-checkpoint-lost-with-redis"] = [
    ("enqueue_and_push", {"n": 1, "priority": 0, "max_attempts": 2}), ("lease_and_run", {"verdict": "fail"}),
    ("relay_restart", {}), ("redrive", {"index": 0}), ("lease_and_run", {"verdict": "retry"}),
    ("redis_loses_everything", {})]
# Written by hand while fixing the two above, once the relay pushed a redriven job with the store's
# generation: a worker frozen before its grant since before a redrive grants afterwards with its
# older generation, which set the item's run_gen back; the job then ended dead unrun (a reap, a
# settle) and after a Redis loss the replay ran it again under the redrive it had already used.
FOUND["stale-grant-lowers-run-gen"] = [
    ("enqueue_and_push", {"n": 1, "priority": 0, "max_attempts": 2}), ("lease", {"n": 1}),
    ("run_freezes", {"index": 0, "verdict": "ok", "point": "before_grant"}), ("lease_lapses", {"index": 0}),
    ("lease", {"n": 1}), ("run", {"index": 0, "verdict": "fail"}), ("redrive", {"index": 0}),
    ("lease", {"n": 1}), ("run", {"index": 0, "verdict": "error"}), ("thaw", {"index": 0}),
    ("lease", {"n": 1}), ("run_dies", {"index": 0, "verdict": "ok", "point": "before_grant"}),
    ("lease_lapses", {"index": 0}), ("reap", {}), ("relay_maintenance", {}),
    ("redis_loses_everything", {}), ("lease", {"n": 1}), ("run", {"index": 0, "verdict": "ok"})]
# Bug 6's own words, "a worker that pauses between the two" (its lease check and its grant), with a
# pause longer than the grant margin: the worker checked its lease with plenty left, froze inside
# the grant call, its lease lapsed and was taken over, and its grant then landed on the new holder's
# item. The margin (docs/worker.md) bounds a grant's latency, not a pause; written from the rules
# of the improved search (run_freezes at before_grant, lease_lapses with taken_over, thaw). Fixed by
# fencing the grant on the Redis lease: the item keeps the lease token of its latest grant, and a
# grant from an older lease is refused (docs/store.md).
FOUND["grant-after-long-pause"] = [
    ("enqueue_and_push", {"n": 1, "priority": 0, "max_attempts": 3}), ("lease", {"n": 1}),
    ("run_freezes", {"index": 0, "verdict": "ok", "point": "before_grant"}),
    ("lease_lapses", {"index": 0, "taken_over": True}), ("thaw", {"index": 0})]
# Found by the derandomized run in the first CI run after a change had moved its draws: a worker leased
# before a Redis loss grants after the job's new holder, whose lease token it shares (lease tokens
# restarted with the queue's seq). Fixed by seeding a lost seq from Redis TIME (_lib.lua take_seq):
# the new holder's lease token is then the larger, and the fenced grant refuses the older one.
FOUND["preloss-worker-grants"] = [
    ("redis_loses_everything", {}), ("enqueue_and_push", {"max_attempts": 1, "n": 1, "priority": 0}),
    ("enqueue_and_push", {"max_attempts": 1, "n": 1, "priority": 0}), ("cancel", {"index": 0}),
    ("enqueue_and_push", {"max_attempts": 1, "n": 3, "priority": 0}), ("lease", {"n": 1}),
    ("redis_loses_everything", {}), ("cancel", {"index": 63}),
    ("lease_and_run", {"still_running": True, "verdict": "ok"}), ("run", {"index": 0, "verdict": "ok"})]
# Found by the derandomized run in the first CI run after a change had moved its draws: a model
# hole, not a defect. TTL expired a cancelled job's item while the relay still had its settle
# entry, and the settle then created the item again as dead (I3). 14 days on, maintenance (every
# few seconds) has settled every entry, so TTL expires only items with none left.
FOUND["ttl-before-settle"] = [
    ("redis_loses_everything", {}), ("redis_loses_everything", {}),
    ("enqueue_and_push", {"max_attempts": 1, "n": 1, "priority": 0}), ("relay_restart", {}),
    ("cancel", {"index": 0}), ("ttl_expires", {"index": 0}),
    ("enqueue_and_push", {"max_attempts": 1, "n": 1, "priority": 0}), ("lease", {"n": 1}),
    ("cancel", {"index": 0}), ("lease_lapses", {"index": 0, "taken_over": False}), ("reap", {}),
    ("cancel", {"index": 0}), ("run_late", {"index": 0}), ("ttl_expires", {"index": 0}),
    ("relay_restart", {})]
# Found by a random hunt (JOBMODEL_RANDOM=1, 300 examples) once the pre-loss grants were judged again:
# a hole in the model, not in Sluice. While a paused relay holds the invariant checks back, a job
# became failed and was redriven; the machine had not recorded it final, so its redrive was not
# counted and, the relay thawed, the redriven job's grant read as leaving a final state without a
# redrive (I3). The redrive rule now reads the item when it has no record of the job being final.
FOUND["redrive-while-relay-paused"] = [
    ("enqueue_and_push", {"n": 2, "priority": 0, "max_attempts": 1}), ("lease", {"n": 1}),
    ("lease_lapses", {"index": 0}), ("reap", {}), ("relay_maintenance", {"pause": 2}),
    ("lease_and_run", {"verdict": "fail"}), ("redrive", {"index": 1}),
    ("lease_and_run", {"verdict": "ok"})]
# Issue 29, item 6 (tokens), written from the issue: a replica that lagged behind is promoted, and
# its seq hands out again the lease token of a lease taken after its copy. Both holders pass
# extend.lua; the old holder's grant (before the failover, or an equal-token one after) makes the
# new holder stale, or leaves the old one believing it still holds the job (H-token). Fixed by
# drawing seq as max(counter + n, TIME in µs + n) (_lib.lua take_seq).
FOUND["failover-holders-share-a-token"] = [
    ("enqueue_and_push", {"n": 1, "priority": 0, "max_attempts": 3}), ("replica_falls_behind", {}),
    ("lease_and_run", {"verdict": "ok", "still_running": True}), ("failover_to_lagging_replica", {}),
    ("lease_and_run", {"verdict": "ok", "still_running": True})]
FOUND["failover-old-holder-grants"] = [
    ("enqueue_and_push", {"n": 1, "priority": 0, "max_attempts": 3}), ("replica_falls_behind", {}),
    ("lease", {"n": 1}), ("failover_to_lagging_replica", {}),
    ("lease_and_run", {"verdict": "ok", "still_running": True}),
    ("run_freezes", {"index": 0, "verdict": "ok", "point": "after_grant"})]

# Issue 29, item 1, written from the redrive rules: a redriven job's attempt ended before its grant.
# (ii) it lapsed on its last attempt: the settle write was refused (the item said dead), so the item
# kept its old ending, no expires_at, no event, and relay_view called it unfinished for ever (I4).
FOUND["redriven-lapses-before-grant"] = [
    ("enqueue_and_push", {"n": 1, "priority": 0, "max_attempts": 1}), ("lease", {"n": 1}),
    ("lease_lapses", {"index": 0}), ("reap", {}), ("relay_maintenance", {}),
    ("redrive_and_hold", {"index": 0}), ("redriven_lapses", {"index": 0, "settle": True})]
# (i) cancelled while it waits: answered 409 "already dead", and the job then ran anyway (I6).
FOUND["cancel-of-a-waiting-redriven-job"] = [
    ("enqueue_and_push", {"n": 1, "priority": 0, "max_attempts": 1}), ("lease", {"n": 1}),
    ("lease_lapses", {"index": 0}), ("reap", {}), ("relay_maintenance", {}),
    ("redrive", {"index": 0}), ("cancel_redriven", {"index": 0}), ("lease_and_run", {"verdict": "ok"})]
# Item 8: a job that succeeded, its worker dead before the ack of its last attempt, stayed in the
# dead set once the relay had settled its lapse (D).
FOUND["succeeded-job-left-in-the-dead-set"] = [
    ("enqueue_and_push", {"n": 1, "priority": 0, "max_attempts": 1}), ("lease", {"n": 1}),
    ("run_dies", {"index": 0, "verdict": "ok", "point": "before_queue"}), ("lease_lapses", {"index": 0}),
    ("reap", {}), ("relay_maintenance", {})]
# Issue 29 (families), written by hand from the issue and found again by the machine's families
# rules on the code before its fix (F1 in a 30-example run focused on them): the first run's child
# writes half-fail and the re-run lists the children in another order, so two share a slot and the
# continuation waits for good (F2, F3); the children's append fails and the parent swallows the error,
# so they stay accepted, never appended (F1).
FOUND["family-rerun-reordered"] = [
    ("family_start", {"n": 2, "then": True, "fault": "half_written"}),
    ("parent_reruns", {"index": 0, "rotate": 1, "fault": "none"}),
    ("lease_and_run", {"verdict": "ok"}), ("lease_and_run", {"verdict": "fail"}), ("stream_countdown", {})]
FOUND["family-append-failed-parent-ended"] = [
    ("family_start", {"n": 2, "then": True, "fault": "append_fails"}),
    ("parent_ends", {"index": 0, "how": "swallowed"}), ("stream_countdown", {}),
    ("lease_and_run", {"verdict": "ok"}), ("stream_countdown", {})]
# Found by the machine on the families branch (I4, its tail replica_falls_behind, stream_countdown,
# redrive(picked_up), failover_to_lagging_replica), cut down by hand: a failover to a replica that
# lagged behind a redrive rolled the redrive's Redis move back. The job was dead in the promoted Redis
# again (or leased under a lease from before the redrive, once granted), the jobs table said redriven,
# and the replay's push skipped the redrive's record because Redis held the job. Fixed in push.lua:
# a job Redis holds under an older redrive generation than the record's is redriven by the push.
FOUND["redrive-lost-in-a-failover"] = [
    ("enqueue_and_push", {"n": 1, "priority": 0, "max_attempts": 1}), ("lease_and_run", {"verdict": "fail"}),
    ("replica_falls_behind", {}), ("redrive", {"index": 0}), ("failover_to_lagging_replica", {})]
FOUND["redrive-granted-then-lost-in-a-failover"] = [
    ("enqueue_and_push", {"n": 1, "priority": 0, "max_attempts": 1}), ("lease_and_run", {"verdict": "fail"}),
    ("replica_falls_behind", {}), ("redrive", {"index": 0, "picked_up": True}),
    ("failover_to_lagging_replica", {}), ("lease_and_run", {"verdict": "ok"})]
# Holes in the model, not in Sluice (I8 in a 150-example run, on main too). A relay invocation's first
# step runs its maintenance, whose reap puts lapsed leases back at the front of ready (loop.py: the
# first maintenance is due at once). relay_restart and the failover start one without recording those
# reclaims, and the failover forgot the reclaims its promoted copy still held: the job reclaimed first
# (unrecorded) was leased before one reclaimed after it (recorded), FIFO among reclaimed jobs as
# docs/engine.md has it, which I8 read as a fresh job leased first. The rules now record them.
FOUND["restart-reaps-unrecorded"] = [
    ("enqueue_and_push", {"n": 3, "priority": 0, "max_attempts": 3}), ("lease", {"n": 2}),
    ("lease_lapses", {"index": 0}), ("relay_restart", {}), ("lease_lapses", {"index": 0}), ("reap", {}),
    ("lease", {"n": 1})]
FOUND["failover-reaps-unrecorded"] = [
    ("enqueue_and_push", {"n": 3, "priority": 0, "max_attempts": 3}), ("lease", {"n": 2}),
    ("lease_lapses", {"index": 0}), ("replica_falls_behind", {}), ("failover_to_lagging_replica", {}),
    ("lease_lapses", {"index": 0}), ("reap", {}), ("lease", {"n": 1})]
FOUND["failover-forgets-reclaimed"] = [
    ("enqueue_and_push", {"n": 3, "priority": 0, "max_attempts": 3}), ("lease", {"n": 2}),
    ("lease_lapses", {"index": 0}), ("reap", {}), ("replica_falls_behind", {}),
    ("failover_to_lagging_replica", {}), ("lease_lapses", {"index": 0}), ("reap", {}), ("lease", {"n": 1})]
# Found by a random hunt (JOBMODEL_RANDOM=1, 100 examples, example 17) on this branch, cut down by hand:
# a hole in the model. A holder frozen before its verdict lost its lease, which was reaped dead; the
# job was redriven while its item still said leased, and the holder's verdict (its token still the
# item's: no grant since) then made the item dead, its redrive already minted: a redriven job waiting
# for its grant (docs/store.md). The machine recorded it final, unredriven, and read the cancel of
# that waiting job as leaving a final state without a redrive (I3). Such an item is now recorded as
# redriven (what the redrive rule does for an item final when it redrives it).
FOUND["verdict-lands-after-redrive"] = [
    ("enqueue_and_push", {"n": 1, "priority": 0, "max_attempts": 1}), ("lease", {"n": 1}),
    ("run_freezes", {"index": 0, "verdict": "error", "point": "before_verdict"}),
    ("lease_lapses", {"index": 0}), ("reap", {}), ("redrive", {"index": 0}), ("thaw", {"index": 0}),
    ("cancel_redriven", {"index": 0})]
# Found by a random hunt (JOBMODEL_RANDOM=1, 200 examples, example 294 of the run) on this branch: a
# hole in the model. TTL deleted the item of a child cancelled long before (``ttl_expires``), before
# the countdown had read the end of its parent, which had left it pending (a re-run whose append
# failed); the countdown then ended the child, its item gone, dead, creating it again (I3: cancelled,
# now dead). The stream keeps records 24 hours and TTL comes 14 days after an ending, so the countdown
# reads every record before: ``ttl_expires`` now lets it catch up first. (Left as the machine printed
# it, not cut down: 23 steps.)
FOUND["ttl-before-the-countdown-read"] = [
    ("redis_loses_everything", {}), ("firing_across_rotation", {"max_attempts": 1, "rotate": False}),
    ("replica_falls_behind", {}), ("family_start", {"fault": "none", "n": 3, "then": True}),
    ("failover_to_lagging_replica", {}), ("redis_loses_everything", {}), ("cancel", {"index": 86}),
    ("parent_reruns", {"fault": "append_fails", "index": 88, "rotate": 1}),
    ("family_start", {"fault": "append_fails", "n": 3, "then": False}),
    ("firing_across_rotation", {"max_attempts": 2, "rotate": True}),
    ("enqueue_and_push", {"max_attempts": 3, "n": 3, "priority": 0}),
    ("enqueue_and_push", {"max_attempts": 1, "n": 3, "priority": 5}), ("relay_restart", {}),
    ("cancel", {"index": 96}), ("parent_ends", {"how": "dead", "index": 18}),
    ("parent_reruns", {"fault": "none", "index": 19, "rotate": 2}),
    ("parent_ends", {"how": "swallowed", "index": 81}), ("ttl_expires", {"index": 61}),
    ("lease_and_run", {"still_running": True, "verdict": "error"}), ("thaw", {"index": 46}),
    ("ttl_expires", {"index": 84}), ("cancel", {"index": 82}), ("stream_countdown", {})]
# Found by a random hunt (JOBMODEL_RANDOM=1, 500 examples, example 351: I2, "token went down", its
# tail ttl_expires ... failover_to_lagging_replica; 29 steps, shrinking stopped), cut down by hand: a
# hole in the model. A parent's re-run appends its children's records again; ``ttl_expires`` blanked
# a job's first record and redrive records, not those, so the replay after a Redis loss or failover
# read a child's re-run record 14 days after the child ended and, its item gone, created it again
# (queued, token 0: I2 once it had been granted, I3 otherwise). Every record of a job is appended
# before it ends (a re-run appends none for a child already final) and Kafka's retention is shorter
# than the item's: every one is gone by then, and ``ttl_expires`` now blanks them all.
FOUND["ttl-leaves-a-rerun-record"] = [
    ("family_start", {"n": 2, "then": False, "fault": "none"}),
    ("parent_reruns", {"index": 0, "rotate": 1, "fault": "none"}),
    ("lease_and_run", {"verdict": "retry"}), ("cancel", {"index": 0}), ("ttl_expires", {"index": 0}),
    ("redis_loses_everything", {})]
FOUND["ttl-leaves-a-rerun-record-failover"] = [
    ("family_start", {"n": 2, "then": False, "fault": "none"}),
    ("parent_reruns", {"index": 0, "rotate": 1, "fault": "none"}),
    ("lease_and_run", {"verdict": "retry"}), ("cancel", {"index": 0}), ("ttl_expires", {"index": 0}),
    ("replica_falls_behind", {}), ("failover_to_lagging_replica", {})]
# The same hole through I3, found by a second 500-example hunt (hypothesis gave up shrinking at 13
# steps), cut down by hand to five: one child, the parent re-runs (appending the child's record
# again), the child is cancelled, TTL deletes its item, Redis loses its data; the replay pushed the
# re-run's copy and re-created the item queued. Besides retention: every job ends within the life
# bound, so 14 days after the ending recovery's low_water has passed each of its records.
FOUND["replay-after-ttl-reads-a-rerun-record"] = [
    ("family_start", {"n": 1, "then": False, "fault": "none"}),
    ("parent_reruns", {"index": 0, "rotate": 1, "fault": "none"}), ("cancel", {"index": 0}),
    ("ttl_expires", {"index": 0}), ("redis_loses_everything", {})]
# Issue 33 (cheaper per job), found by the suite's run on the change's first version: a keyed job has
# no item until its grant, and two key rotations later its id no longer verifies, so its cancel
# answered 404 (I6) while Redis still held it. The gateway now answers for an id its queue holds live
# (``Api._held``), whatever the keys and the horizon.
FOUND["keyed-job-cancelled-past-two-rotations"] = [
    ("enqueue_and_push", {"n": 1, "priority": 0, "max_attempts": 0, "keyed": True}),
    ("rotate_job_id_key", {}), ("rotate_job_id_key", {}), ("cancel", {"index": 0})]
# Found by a random hunt (JOBMODEL_RANDOM=1, 250 examples, example 382: I2): a hole in the model, whose
# ttl_expires left an expired keyed id within the horizon (``minted_within_horizon``).
FOUND["keyed-job-expired-then-cancelled"] = [
    ("enqueue_and_push", {"keyed": True, "max_attempts": 0, "n": 2, "priority": 0}),
    ("replica_falls_behind", {}), ("failover_to_lagging_replica", {}),
    ("lease_and_run", {"still_running": False, "verdict": "ok"}), ("cancel", {"index": 0}),
    ("family_start", {"fault": "none", "n": 1, "then": False}), ("ttl_expires", {"index": 0}),
    ("redis_loses_everything", {}), ("redis_loses_everything", {}), ("cancel", {"index": 97})]
# The same hole, found by a second 250-example hunt (example 247) through schedule firings and key
# rotations: the cancel of a keyed job whose item TTL had deleted.
FOUND["keyed-job-expired-then-cancelled-after-firings"] = [
    ("firing_across_rotation", {"max_attempts": 2, "rotate": False}),
    ("firing_across_rotation", {"max_attempts": 1, "rotate": True}), ("relay_restart", {}),
    ("lease_and_run", {"still_running": False, "verdict": "ok"}), ("cancel", {"index": 19}),
    ("ttl_expires", {"index": 16}), ("cancel", {"index": 50}), ("redis_loses_everything", {}),
    ("rotate_job_id_key", {}),
    ("enqueue_and_push", {"keyed": True, "max_attempts": 0, "n": 2, "priority": 0}),
    ("rotate_job_id_key", {}),
    ("enqueue_and_push", {"keyed": True, "max_attempts": 0, "n": 3, "priority": 0}),
    ("lease", {"n": 1}), ("enqueue_and_push", {"keyed": True, "max_attempts": 0, "n": 2, "priority": 0}),
    ("lease", {"n": 1}), ("relay_restart", {}), ("run", {"index": 69, "verdict": "ok"}),
    ("redis_loses_everything", {}), ("ttl_expires", {"index": 54}), ("replica_falls_behind", {}),
    ("failover_to_lagging_replica", {}), ("run_late", {"index": 7}), ("cancel", {"index": 1})]
# Sequences whose fix is not merged yet (reason: the fix missing).
UNFIXED: dict[str, str] = {}


def replay(cls: type[JobMachine], steps: list[tuple[str, dict[str, Any]]]) -> None:
    m = cls()
    try:
        m.job_invariants()
        for name, kwargs in steps:
            getattr(m, name)(**kwargs)
            m.job_invariants()
    finally:
        m.teardown()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("found", [
    pytest.param(name, marks=pytest.mark.xfail(reason=UNFIXED[name], strict=True, raises=AssertionError))
    if name in UNFIXED else name for name in FOUND])
def test_what_the_machine_found_stays_fixed(found: str, redis_url: str, moto_url: str,
                                            jobs_table: str) -> None:
    replay(machine(redis_url, moto_url, jobs_table), FOUND[found])


@pytest.mark.timeout(120)
def test_keyed_jobs_run_without_a_queued_item_and_their_ids_answer(redis_url: str, moto_url: str,
                                                                  jobs_table: str) -> None:
    """Issue 33 (cheaper per job): the relay writes no ``queued`` item for a keyed id. Until its grant
    such a job has no item; GET answers ``queued`` from the id and Redis, a cancel ends it (I6), a
    Redis loss replays it (I4), and its grant creates the item with the id's acceptance time. Every
    invariant is checked after each step, as the machine does."""
    m = machine(redis_url, moto_url, jobs_table)()
    try:
        m.enqueue_and_push(n=3, priority=0, max_attempts=2, keyed=True)
        m.job_invariants()
        keyed = sorted(m.short)
        assert not any(j in m.items() for j in keyed)  # no queued write for a keyed id
        first = m.api.status(keyed[0])
        assert (first.status, first.created_at_ms) == ("queued", m.specs[keyed[0]].enqueued_at_ms)
        assert m.api.cancel(keyed[1]).status == "cancelled"  # the 1st cancellable: keyed[1] after a sort
        m.job_invariants()
        m.redis_loses_everything()
        m.job_invariants()
        m.lease_and_run("ok")
        m.job_invariants()
        m.lease_and_run("ok")
        m.job_invariants()
        items = m.items()
        assert {j: items[j]["status"] for j in keyed} == {
            keyed[0]: "succeeded", keyed[1]: "cancelled", keyed[2]: "succeeded"}
        for ran in (keyed[0], keyed[2]):  # created by the grant, with the id's acceptance time
            assert m.store.get_job(ran).created_at_ms == m.specs[ran].enqueued_at_ms
    finally:
        m.teardown()
