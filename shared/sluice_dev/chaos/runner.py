"""``sluice chaos``: the whole pipeline under a seeded nemesis, then a checker over its history.

1. Start a local stack of our own: redis-server, the moto server (DynamoDB and S3) and
   Tansu storing to S3 on a moto server, so a broker restart keeps its data; and the
   pipeline's moving parts on a runtime (``chaos.runtimes``): ``lambda``, the local
   Lambda service as ``sluice dev`` runs it (worker containers dispatched by the relay
   and the safety net, the relay on a schedule), or ``process``, long-lived worker and
   relay processes kept alive by a supervisor.
2. Enqueue N jobs through the gateway's use case (``chaos.workload``) while the nemesis
   (``chaos.nemesis``) injects its planned faults for ``duration`` seconds.
3. Stop the faults, let the queues drain until every accepted job is final (or a
   timeout), stop the workers and relays, and give the history plus the final state of
   the jobs table and of Redis to the checker (``chaos.checker``).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sluice_dev.chaos import (
    checker,
    completions,
    cpu,
    history,
    keyed,
    keys,
    nemesis,
    operator,
    runtimes,
    tenant,
)
from sluice_dev.chaos.app import QUEUE
from sluice_dev.chaos.countdown import StreamCountdownAgent
from sluice_dev.chaos.workload import Enqueuer

Say = Callable[[str], None]
ENQUEUE_SHARE = 0.9  # jobs arrive over most of the fault window, so the faults always meet work
QUIET_S = 60.0  # a drain with no job finishing and no process doing anything for this long is over


@dataclass(frozen=True)
class Options:
    jobs: int = 500
    duration_s: float = 40.0
    seed: int = 1
    workers: int = 3
    relays: int = 1
    lease_s: float = 2.0
    fault_interval_s: float = 3.5
    faults: bool = True
    drain_timeout_s: float | None = None  # default: max(120, duration)
    state_dir: Path | None = None
    partitions: int = 4
    runtime: str = "lambda"  # or "process" (chaos.runtimes)
    operator: bool = False  # an operator cancels, redrives, purges, pauses and resumes (chaos.operator)
    operator_interval_s: float = 2.5
    families: bool = True  # every 20th job starts children and a continuation (chaos.families)
    redis_shards: int = 1  # above 1: a local Redis cluster, and the nemesis restarts single shards
    tenant: tenant.TenantPlan | None = None  # the tenant nemesis (chaos.tenant): one tenant holds its queue
    relay_max_pending: int | None = None  # the relay's per-partition hold limit (Settings.relay_max_pending)
    drain_tenant: bool = True  # False: the run ends once the others drained (benchmarks/bench_tenant.py)
    extra_faults: tuple[str, ...] = ()  # nemesis.EXTRA_KINDS to plan too (--add-fault)
    only_faults: tuple[str, ...] = ()  # the plan's faults of these kinds only (--only-fault; () all)
    measure_cpu: bool = False  # CPU seconds per part from the workload's start to the drain (chaos.cpu)
    keyed: bool = False  # batches with an Idempotency-Key, and a gateway that dies now and then (chaos.keyed)


@dataclass
class RunResult:
    """What one chaos run found: the checker's report, the faults injected, the timings."""

    report: checker.Report
    plan: list[nemesis.Fault]
    state_dir: Path
    drained: bool
    seconds: dict[str, float] = field(default_factory=dict)
    diagnosis: dict[str, Any] = field(default_factory=dict)
    runtime: str = ""
    runtime_counts: dict[str, int] = field(default_factory=dict)
    tenant: dict[str, Any] = field(default_factory=dict)  # the tenant nemesis's run (chaos.tenant)
    latency: dict[str, float | int] = field(default_factory=dict)  # the ordinary workload's (tenant.latency)
    cpu: dict[str, Any] = field(default_factory=dict)  # measure_cpu: chaos.cpu's sums, the relay's moves

    def as_dict(self) -> dict[str, Any]:
        return {**self.report.as_dict(), "drained": self.drained, "seconds": self.seconds,
                "runtime": self.runtime, "runtime_counts": self.runtime_counts,
                "latency": self.latency, **({"tenant": self.tenant} if self.tenant else {}),
                **({"cpu": self.cpu} if self.cpu else {}),
                "state_dir": str(self.state_dir), **({"diagnosis": self.diagnosis} if self.diagnosis else {})}


def snapshot(settings: Any) -> dict[str, checker.StoreItem]:
    """Every job item in the jobs table (checkpoint items, whose keys start with "~", skipped)."""
    from sluice.entry import root as wiring

    db = wiring.boto_client("dynamodb", settings)
    items: dict[str, checker.StoreItem] = {}
    for page in db.get_paginator("scan").paginate(TableName=settings.jobs_table, ConsistentRead=True):
        for item in page.get("Items", []):
            job_id = item["job_id"]["S"]
            if job_id.startswith("~"):
                continue
            result = item.get("result", {}).get("S")
            items[job_id] = checker.StoreItem(
                status=item.get("status", {}).get("S", ""), token=int(item.get("token", {}).get("N", 0)),
                result_token=int(item["result_token"]["N"]) if "result_token" in item else None,
                result_digest=history.digest(json.loads(result)) if result is not None else None,
                redrive_gen=int(item.get("redrive_gen", {}).get("N", 0)),
                run_gen=int(item.get("run_gen", {}).get("N", 0)),
                last_error=item.get("last_error", {}).get("S", ""))
    return items


def kafka_dump(settings: Any, path: Path, quiet_s: float = 3.0) -> dict[str, tuple[int, int]]:
    """Every record of the job topic, (partition, offset) by job id, also written to ``path``."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=settings.kafka_bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest", group_id=None)
    found: dict[str, tuple[int, int]] = {}
    try:
        parts = sorted(consumer.partitions_for_topic(settings.kafka_topic) or ())
        consumer.assign([TopicPartition(settings.kafka_topic, p) for p in parts])
        consumer.seek_to_beginning()
        idle_since = time.monotonic()
        with path.open("w") as out:
            while time.monotonic() - idle_since < quiet_s:
                batches = consumer.poll(timeout_ms=500, max_records=5000)
                if batches:
                    idle_since = time.monotonic()
                for records in batches.values():
                    for r in records:
                        job = r.key.decode() if r.key else ""
                        found.setdefault(job, (r.partition, r.offset))
                        out.write(json.dumps({"p": r.partition, "o": r.offset, "job": job}) + "\n")
    finally:
        consumer.close()
    return found


def live_leases(redis_url: str) -> set[str]:
    from sluice.backends.redis.client import connect
    from sluice.backends.redis.keys import QueueKeys

    client = connect(redis_url)  # a cluster client for a redis+cluster:// URL
    try:
        secs, micros = client.time()
        now = secs * 1000 + micros // 1000
        return set(client.zrangebyscore(QueueKeys(QUEUE).leased, now, "+inf"))
    finally:
        client.close()


class Run:
    def __init__(self, o: Options, say: Say) -> None:
        self.o, self.say = o, say
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.dir = o.state_dir or Path(".sluice") / "chaos" / f"seed{o.seed}-{stamp}"
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "control").mkdir(exist_ok=True)
        (self.dir / "logs").mkdir(exist_ok=True)
        self.history_path = self.dir / "history.jsonl"
        self.history = history.History(self.history_path)
        self.tenant: tenant.Tenant | None = None
        self.tenant_result: dict[str, Any] = {}

    def execute(self) -> RunResult:
        from sluice.core.config import Settings

        o, say = self.o, self.say
        times: dict[str, float] = {}
        t_start = time.monotonic()
        runtime = runtimes.make(o.runtime, o, self.dir, self.history)
        counts: dict[str, int] = {}
        stopped = False
        streamed: StreamCountdownAgent | None = None
        try:
            held = {"relay_max_pending": o.relay_max_pending} if o.relay_max_pending else {}
            base = Settings(kafka_topic="chaos.jobs", kafka_dead_letter_topic="chaos.dlq",
                            kafka_partitions=o.partitions, kafka_consumer_group="chaos-relay", **held)
            settings = runtime.start(base, say)
            times["setup"] = time.monotonic() - t_start
            say(f"stack up in {times['setup']:.1f}s ({runtime.name} runtime): redis {settings.redis_url}, "
                f"kafka {settings.kafka_bootstrap} (Tansu on S3), aws {settings.aws_endpoint_url}; "
                f"{runtime.describe()}; history {self.history_path}")
            faults = nemesis.plan(o.seed, o.duration_s, interval_s=o.fault_interval_s, lease_s=o.lease_s,
                                  workers=o.workers, relays=o.relays,
                                  shards=o.redis_shards, extra=o.extra_faults) if o.faults else []
            faults = [f for f in faults if not o.only_faults or f.kind in o.only_faults]
            for f in faults:
                self.history.emit("plan", **f.as_dict())
            actions = (operator.plan(o.seed, o.duration_s, interval_s=o.operator_interval_s)
                       if o.operator else [])
            for a in actions:
                self.history.emit("plan", role="operator", **a.as_dict())
            meter = cpu.CpuMeter(runtime.processes).start() if o.measure_cpu else None
            # the countdown function's part: the stream counts children a killed worker's round left
            # (a runtime on sluice dev's stack polls the stream itself: counting twice is work twice)
            streamed = None if runtime.counts_down_stream else StreamCountdownAgent(settings).start()
            self._chaos(settings, runtime, faults, actions, times)
            drained = self._drain_tenant(settings, times) if self.tenant is not None else True
            if o.drain_tenant or self.tenant is None:
                drained = self._drain(settings, times) and drained
            used = meter.stop() if meter is not None else {}
            ended = time.time()
            if streamed is not None:
                streamed.stop()
                streamed = None
            counts = runtime.stop_agents()
            stopped = True
            say("publishing the completion events through the stream, EventBridge and SQS...")
            received = completions.collect(settings, self.history)
            self.history.emit("completions", received=received)
            say("checking the history against the stores...")
            report = checker.check(history.read(self.history_path), snapshot(settings),
                                   live_leases(settings.redis_url))
            diagnosis = self._diagnose(report, settings)
            events = history.read(self.history_path)
            if used:
                used["relay"] = relay_moves(events, until=ended)
        finally:
            if streamed is not None:
                with contextlib.suppress(Exception):
                    streamed.stop()
            if not stopped:
                with contextlib.suppress(Exception):
                    runtime.stop_agents()
            runtime.stop()
        times["total"] = time.monotonic() - t_start
        return RunResult(report, faults, self.dir, drained, {k: round(v, 1) for k, v in times.items()},
                         diagnosis, runtime.name, counts, self.tenant_result, tenant.latency(events), used)

    def _diagnose(self, report: checker.Report, settings: Any) -> dict[str, Any]:
        """Where the log has each lost job (None: the broker lost a record it had acknowledged)."""
        lost = report.samples.get("lost", [])
        if not lost:
            return {}
        in_kafka = kafka_dump(settings, self.dir / "kafka.jsonl")
        return {"lost_in_kafka_at": {job: in_kafka.get(job) for job in lost}}

    def _chaos(self, settings: Any, runtime: runtimes.Runtime, faults: list[nemesis.Fault],
               actions: list[operator.Action], times: dict[str, float]) -> None:
        from sluice.backends.dynamodb.jobs import DynamoJobStore
        from sluice.backends.kafka.producer import KafkaJobLog
        from sluice.backends.redis.queue import RedisJobQueue
        from sluice.core.bus import EventBus
        from sluice.entry import root as wiring
        from sluice.gateway.api import Api, Backends

        o, say = self.o, self.say
        job_log = KafkaJobLog.from_settings(settings)
        store = DynamoJobStore.from_settings(settings)

        deaths = keyed.Deaths(o.seed, self.history) if o.keyed else None

        def gateway() -> Api:  # the workload's gateway: mints (Enqueuer names the ids) and seals
            if deaths is None:
                return Api(Backends(job_log, store, RedisJobQueue.from_settings(settings), EventBus(),
                                    families=store.families), keys.minting(settings))
            from sluice.backends.dynamodb.idempotency import DynamoKeyStore

            return Api(Backends(keyed.DyingLog(job_log, deaths), store, RedisJobQueue.from_settings(settings),
                                EventBus(), families=store.families), keys.minting(settings),
                       idempotency=keyed.HeldRelease(DynamoKeyStore.from_settings(settings), deaths))

        api = gateway()
        enqueuer = Enqueuer(api, self.history, o.seed, o.jobs, window_s=o.duration_s * ENQUEUE_SHARE,
                            lease_seconds=runtime.lease_seconds, poison=o.operator,
                            mint_key=wiring.job_id_key(settings),  # the relay verifies ids and seals
                            family_key=wiring.job_id_key(settings) if o.families else None,
                            keyed=o.keyed, deaths=deaths)
        stop, abort = threading.Event(), threading.Event()
        servers = _Servers(runtime, lambda: self._rotated(settings, enqueuer, gateway))
        nem = nemesis.Nemesis(faults, runtime, servers, self.history, self.dir / "control")
        # The operator's own gateway use case and Redis client, as a person at another terminal has.
        op_engine, op_store = RedisJobQueue.from_settings(settings), DynamoJobStore.from_settings(settings)
        op_api = Api(Backends(job_log, op_store, op_engine, EventBus(), families=op_store.families),
                     keys.minting(settings))
        person = operator.Operator(actions, op_api, op_engine, op_store, QUEUE, self.history, enqueuer.recent,
                                   running=operator.Running(self.history_path), log=job_log)
        workload = threading.Thread(target=enqueuer.run, args=(abort,), name="chaos-workload", daemon=True)
        holding = self._tenant(settings, job_log, stop)
        faulting = threading.Thread(target=nem.run, args=(stop,), name="chaos-nemesis", daemon=True)
        operating = threading.Thread(target=person.run, args=(stop,), name="chaos-operator", daemon=True)
        started = time.monotonic()
        workload.start()
        faulting.start()
        operating.start()
        say(f"chaos: {o.jobs} jobs over {o.duration_s * ENQUEUE_SHARE:.0f}s, {len(faults)} faults over "
            f"{o.duration_s:.0f}s (seed {o.seed})"
            + (f", {len(actions)} operator actions" if o.operator else ""))
        next_report = started + 10
        while time.monotonic() - started < o.duration_s:
            time.sleep(0.5)
            if time.monotonic() >= next_report:
                next_report += 10
                say(f"  t={time.monotonic() - started:5.0f}s accepted={enqueuer.accepted} "
                    f"unknown={enqueuer.unknown} faults={sum(nem.injected.values())} "
                    f"{runtime.activity()}")
        stop.set()
        nem.close()
        faulting.join(30)
        operating.join(30)
        if holding is not None:
            holding.join(max(60.0, o.duration_s))
            say(f"tenant nemesis: {self.tenant_result.get('accepted', 0)} of its jobs accepted, its queue "
                f"still held")
        person.close()  # a pause still on is resumed: the drain needs the queue running
        times["chaos"] = time.monotonic() - started
        say(f"faults stopped after {times['chaos']:.0f}s: {dict(sorted(nem.injected.items()))}"
            + (f"; operator: {dict(sorted(person.done.items()))}" if o.operator else ""))
        # Faults delay the workload (a broker restart holds appends up): it still enqueues all N.
        if not enqueuer.done.wait(max(60.0, o.duration_s)):
            abort.set()
        workload.join(30)
        job_log.close()
        say(f"{enqueuer.accepted} jobs accepted ({enqueuer.unknown} enqueues of unknown outcome, retried)")

    def _rotated(self, settings: Any, enqueuer: Enqueuer, gateway: Callable[[], Any]) -> bytes:
        """The nemesis rotated the job id key: the workload goes through a gateway that read the new
        one (a container started since), which mints its ids and seals its records with it. The
        operator's gateway and the tenant's keep the keys they read at the start, as warm
        containers do until an id names a key they do not hold. Returns the new key."""
        from sluice.entry import root as wiring

        key, _previous = wiring.refresh_job_id_keys(settings)
        enqueuer.use(gateway())
        enqueuer.mint_key = key
        if enqueuer.family_key is not None:
            enqueuer.family_key = key
        return key

    def _tenant(self, settings: Any, job_log: Any, stop: threading.Event) -> threading.Thread | None:
        """The tenant nemesis (``chaos.tenant``), on its own gateway use case and Redis client."""
        from sluice.backends.dynamodb.jobs import DynamoJobStore
        from sluice.backends.redis.queue import RedisJobQueue
        from sluice.core.bus import EventBus
        from sluice.entry import root as wiring
        from sluice.gateway.api import Api, Backends

        if self.o.tenant is None:
            return None
        store, engine = DynamoJobStore.from_settings(settings), RedisJobQueue.from_settings(settings)
        api = Api(Backends(job_log, store, engine, EventBus(), families=store.families),
                  keys.minting(settings))
        self.tenant = tenant.Tenant(self.o.tenant, api, engine, self.history, self.o.seed,
                                    mint_key=wiring.job_id_key(settings), window_s=self.o.duration_s)
        result = self.tenant_result

        def run() -> None:
            assert self.tenant is not None
            try:
                self.tenant.run(stop)
            finally:
                result.update(accepted=self.tenant.accepted, far=len(self.tenant.far_ids),
                              budgets=self.tenant.budgets, flood=self.o.tenant.flood if self.o.tenant else 0)

        thread = threading.Thread(target=run, name="chaos-tenant", daemon=True)
        thread.start()
        return thread

    def _drain_tenant(self, settings: Any, times: dict[str, float]) -> bool:
        """The tenant nemesis's end: the others' jobs must all finish while the tenant still holds
        its queue (its held records in their way would keep them from it), then the tenant lets go."""
        assert self.tenant is not None
        t0 = time.monotonic()
        others = self._drain(settings, times, others_only=True)
        self.tenant_result["others_drained_while_held"] = others
        self.tenant_result["others_drain_s"] = round(time.monotonic() - t0, 1)
        self.say(f"tenant nemesis: the others {'drained' if others else 'did NOT drain'} while it held "
                 f"its queue; releasing it")
        self.tenant.release()
        return others

    def _drain(self, settings: Any, times: dict[str, float], *, others_only: bool = False) -> bool:
        """Wait until every accepted job is final in the jobs table, or the drain timeout.
        ``others_only``: every job but the tenant nemesis's (``chaos.tenant``)."""
        from sluice.backends.dynamodb.jobs import DynamoJobStore

        o, say = self.o, self.say
        store = DynamoJobStore.from_settings(settings)
        progress = _Progress(history.Tail(self.history_path))
        progress.catch_up()
        accepted, written, members = progress.accepted, progress.written, progress.members

        def left() -> set[str]:
            return progress.waiting - progress.tenant if others_only else progress.waiting

        timeout = o.drain_timeout_s if o.drain_timeout_s is not None else max(120.0, o.duration_s)
        started = time.monotonic()
        next_report = moved = started
        waiting = left()
        while waiting and time.monotonic() - started < timeout:
            # The history says which jobs have a result; the store confirms those without one, and
            # all of them once the history has nothing left: polling every job would slow moto down.
            # Only progress counts as movement: idle safety-net invocations keep writing history.
            before = len(waiting)
            if progress.catch_up():
                moved = time.monotonic()
            waiting = left()
            unsure = sorted(waiting - written or waiting)
            with contextlib.suppress(Exception):  # a slow moto answer: ask again next round
                for first in range(0, len(unsure), 5_000):  # a tenant's flood: many jobs
                    progress.waiting -= store.final_job_ids(unsure[first:first + 5_000])
            waiting = left()
            if len(waiting) < before:
                moved = time.monotonic()
            if time.monotonic() >= next_report:
                next_report += 10
                say(f"  draining{' (the others)' if others_only else ''}: {len(written & accepted)}/"
                    f"{len(accepted)} written, {len(accepted | members) - len(progress.waiting)} confirmed "
                    f"final by the store ({len(members)} of them children and continuations)")
            if waiting and time.monotonic() - moved >= QUIET_S:
                say(f"  nothing moved for {QUIET_S:.0f}s: these jobs will not finish by themselves")
                break
            if waiting:
                time.sleep(2.0)
        store.close()
        times["drain_others" if others_only else "drain"] = time.monotonic() - started
        if waiting:
            say(f"not drained after {time.monotonic() - started:.0f}s: {len(waiting)} jobs not final")
        else:
            say(f"drained: every accepted job{' of the others' if others_only else ''} is final after "
                f"{time.monotonic() - started:.0f}s")
        return not waiting


class _Servers:
    """The runtime's servers for the nemesis; a key rotation also tells the run (``rotated``)."""

    def __init__(self, runtime: runtimes.Runtime, rotated: Callable[[], bytes]) -> None:
        self.runtime, self.rotated = runtime, rotated

    def restart_redis(self) -> None:
        self.runtime.restart_redis()

    def restart_redis_shard(self, index: int) -> None:
        self.runtime.restart_redis_shard(index)

    def restart_broker(self) -> None:
        self.runtime.restart_broker()

    def flush_registry_shard(self) -> str:
        return self.runtime.flush_registry_shard()

    def rotate_job_id_key(self) -> str:
        from sluice.core.ids import key_id

        key = self.runtime.rotate_job_id_key()
        if self.rotated() != key:
            raise RuntimeError("the run read another key than the one the rotation wrote")
        return f"new key id {key_id(key)}"


class _Progress:
    """What the history says so far: accepted jobs, jobs with a result, and family members
    (children and continuations the parents named, ``chaos.families``), which the drain waits for."""

    def __init__(self, tail: history.Tail) -> None:
        self.tail = tail
        self.accepted: set[str] = set()
        self.written: set[str] = set()
        self.members: set[str] = set()
        self.waiting: set[str] = set()
        self.tenant: set[str] = set()  # the tenant nemesis's jobs (chaos.tenant)

    def catch_up(self) -> bool:
        """Read new history; True if a job got its first accepted result, or the relay moved records
        (pushed, parked, read back or dropped some). After a Redis loss near the end of a run, the
        relay replays its partitions and reads its parked lanes back for a minute or more before its
        first push, while no job finishes: a drain that waited on results alone gave up there."""
        before = len(self.written)
        relayed = False
        for e in self.tail.read():
            op = e.get("op")
            if op == "relay_run" and any(int(e.get(k) or 0) > 0 for k in RELAY_MOVES):
                relayed = True
            if op == "enqueue" and e.get("outcome") == "ok":
                self.accepted.add(str(e["job"]))
                self.waiting.add(str(e["job"]))
                if e.get("queue") == tenant.TENANT:
                    self.tenant.add(str(e["job"]))
            elif op == "write" and e.get("outcome") in checker.ACCEPTED_WRITES:
                self.written.add(str(e["job"]))
            elif op == "family":
                new = {*map(str, e.get("children", ())), str(e.get("continuation"))} - self.members
                self.members.update(new)
                self.waiting.update(new)
        return relayed or len(self.written) > before


RELAY_MOVES = ("pushed", "parked", "unparked", "final_dropped", "parked_released", "replays")


def relay_moves(events: list[dict[str, Any]], *, until: float) -> dict[str, int]:
    """What the relay's invocations that ended by ``until`` (wall clock) moved, summed: the work the
    CPU measured up to then paid for (an invocation still running then is not counted)."""
    out = dict.fromkeys(("invocations", *RELAY_MOVES), 0)
    for e in events:
        if e.get("op") == "relay_run" and float(e.get("t1") or 0) <= until:
            out["invocations"] += 1
            for k in RELAY_MOVES:
                out[k] += int(e.get(k) or 0)
    return out


def run(o: Options, say: Say = print) -> RunResult:
    import os

    from sluice_dev.local.servers import DUMMY_AWS_ENV

    for key, value in DUMMY_AWS_ENV.items():  # every AWS client here talks to the local moto server
        os.environ.setdefault(key, value)
    return Run(o, say).execute()
