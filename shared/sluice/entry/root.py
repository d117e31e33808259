"""The one composition root: builds adapters from Settings.

Lambda handlers, the CLI and the local stack all get their Redis queue, job
store, Kafka log and dispatcher from here. Each builder is cached per process,
so a Lambda container creates its clients once and reuses them across
invocations. Imports are inside the builders so a function only loads the
client libraries it actually uses (cold start).
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

from sluice.core.bus import EventBus
from sluice.core.config import Settings

if TYPE_CHECKING:
    from collections.abc import Callable

    from sluice.backends.aws.family_gateway import LambdaFamilyGateway
    from sluice.backends.dynamodb.jobs import DynamoJobStore
    from sluice.backends.dynamodb.parking import DynamoParkingLot
    from sluice.backends.dynamodb.schedules import SchedulerTrigger
    from sluice.backends.otel.spans import TraceObserver
    from sluice.backends.redis.connection import RedisConnection
    from sluice.core.families import FamilyStore
    from sluice.core.ids import Verifier
    from sluice.core.lazy import Lazy
    from sluice.core.ports import (
        CallerThrottle,
        DepthLog,
        Dispatcher,
        JobLog,
        JobQueue,
        JobStore,
        ParkedJobs,
        PayloadStore,
        QueueDirectory,
        ScheduleTrigger,
        TimelineLog,
    )
    from sluice.core.routes import RouteCache, TeamMapCache
    from sluice.core.script_loads import ScriptIntake
    from sluice.core.traces import EnqueueSpans
    from sluice.gateway.api import Api
    from sluice.gateway.registry import Reservations
    from sluice.gateway.schedules import Schedules
    from sluice.gateway.throttle import Throttle
    from sluice.registrar.schedules import CodeSchedules
    from sluice.relay.ports import ParkedCounter, ParkingLot, RelayEngine
    from sluice.streams.countdown import StreamCountdown


_events: EventBus | None = None


def events() -> EventBus:
    """This process's one event bus: what happens to jobs, for every subscriber in the process.

    Not forgotten by ``reset``: subscriptions (the local stack's history recorder) outlive
    the adapters they observe.
    """
    global _events
    if _events is None:
        _events = EventBus()
    return _events


@cache
def settings() -> Settings:
    return Settings.from_env()


def boto_client(service: str, s: Settings, **options: Any) -> Any:
    """A new client of ``service`` for ``s`` (``options``: boto3's, e.g. ``config``)."""
    from sluice.backends.aws.clients import boto_client as build

    return build(service, s, **options)


@cache
def dynamodb(s: Settings | None = None) -> Any:
    """The container's DynamoDB client (``store.client``): the job store, the routes, the
    schedules and the idempotency layer share it, so the first of them to need it builds it."""
    from sluice.backends.dynamodb.client import CONFIG

    return boto_client("dynamodb", s or settings(), config=CONFIG)


@cache
def redis(s: Settings | None = None) -> RedisConnection:
    """The container's Redis client, which every Redis facade built here shares; the registry's cache
    in it is loaded from the durable registry (``queue_directory``) after a Redis loss."""
    from sluice.backends.redis.connection import RedisConnection

    s = s or settings()
    conn = RedisConnection.from_settings(s)
    durable_registry(conn, None, s)
    return conn


def durable_registry(conn: RedisConnection, bus: EventBus | None, s: Settings) -> None:
    """With a queues table: ``conn`` loads a lost registry cache from it, and, on ``bus`` (the
    relay's), each queue the relay newly registered for a minted record is written through to it
    (once per queue per cache: a failure is logged, and a gateway's next reservation of the queue
    writes it through again)."""
    if not s.queues_table:
        return
    conn.registry_source = lambda: queue_directory(s).names()
    if bus is not None and bus.claim("registry write-through"):
        from sluice.core.bus import QueueRegistered

        bus.subscribe(lambda e: queue_directory(s).put(e.queue), QueueRegistered)


@cache
def queue_directory(s: Settings | None = None) -> QueueDirectory:
    """The durable registry of queues (DynamoDB's queues table, issue 28); ConfigError without one."""
    from sluice.backends.dynamodb.queues import DynamoQueueDirectory
    from sluice.core.errors import ConfigError

    s = s or settings()
    if not s.queues_table:
        raise ConfigError("no queues table: set SLUICE_QUEUES_TABLE (template.yaml's QueuesTable)")
    return DynamoQueueDirectory(dynamodb(s), s.queues_table)


def parked_counter(s: Settings | None = None) -> ParkedCounter:
    """Each queue's parked counter in the durable registry (``relay.parked_counts``), the same
    table and client as ``queue_directory``; ConfigError without a queues table."""
    from sluice.backends.dynamodb.queues import DynamoQueueDirectory

    queue_directory(s)  # its ConfigError without a queues table
    s = s or settings()
    return DynamoQueueDirectory(dynamodb(s), s.queues_table)


def reservations(held: Lazy[JobQueue], s: Settings | None = None) -> Reservations:
    """The gateway's reservation of a new queue before its first 202 (``sluice.gateway.registry``):
    Redis (the limit: ``held``, the gateway's queue, whose client its other reads share) then the
    durable registry, each built on the first reservation."""
    from typing import cast

    from sluice.core.lazy import Lazy
    from sluice.gateway.registry import RegistryCache, Reservations

    durable = Lazy(lambda: queue_directory(s)) if (s or settings()).queues_table else None
    return Reservations(cast("Lazy[RegistryCache]", held), durable)


@cache
def queue(s: Settings | None = None) -> JobQueue:
    """The workers' and the gateway's queue (``RedisJobQueue``)."""
    from sluice.backends.redis.queue import RedisJobQueue

    return RedisJobQueue(redis(s))


def worker_queue(s: Settings | None = None) -> JobQueue:
    """``queue(s)`` for a worker, whose Redis user may not SCRIPT LOAD (docs/security.md): after a
    NOSCRIPT its connection asks the internal function to load its scripts (all of them at once),
    where one is named; without one (a harness as Redis's default user) it loads them itself."""
    s = s or settings()
    conn = redis(s)
    if s.internal_function_name and conn.scripts.loader is None:
        from sluice.backends.aws.family_gateway import LambdaInvoke
        from sluice.backends.aws.script_loader import LambdaScriptLoader
        from sluice.backends.redis.acl import WORKER

        conn.scripts.use_loader(LambdaScriptLoader(LambdaInvoke.from_settings(s)), WORKER.scripts)
    return queue(s)


@cache
def script_intake(s: Settings | None = None) -> ScriptIntake:
    """The internal function's load of a worker's scripts: shipped ones only, SCRIPT LOAD as its user."""
    from sluice.backends.redis.scripts import RedisScriptLoader, worker_allow_list
    from sluice.core.script_loads import ScriptIntake

    return ScriptIntake(RedisScriptLoader(redis(s).client), worker_allow_list())


@cache
def relay_engine(s: Settings | None = None) -> RelayEngine:
    """What the relay needs of Redis (``RedisRelayEngine``)."""
    from sluice.backends.redis.relay_engine import RedisRelayEngine

    ttl_ms = (s or settings()).timeline_ttl_s * 1000  # > 0: each reaped lease is a timeline step (issue 32)
    return RedisRelayEngine(redis(s), ttl_ms)


def lazy_queue(s: Settings | None = None) -> Lazy[JobQueue]:
    """``queue(s)``, built (and redis imported) on the first ``get()`` (``sluice.core.lazy``: cold start)."""
    from sluice.core.lazy import Lazy

    return Lazy(lambda: queue(s))


def caller_throttle(s: Settings | None = None) -> Throttle | None:
    """The gateway's per-caller limit over Redis (built on its first request), or None when the
    settings give no caller any limit (issue 27, item 5)."""
    from sluice.core.lazy import Lazy
    from sluice.core.throttle import CallerLimits
    from sluice.gateway.throttle import Throttle

    s = s or settings()
    limits = CallerLimits.from_settings(s)
    if limits.off:
        return None

    def build() -> CallerThrottle:
        from sluice.backends.redis.throttle import RedisCallerThrottle

        return RedisCallerThrottle(redis(s))

    return Throttle(Lazy(build), limits)


def lazy_store(s: Settings | None = None) -> Lazy[JobStore]:
    """``store(s)``, built on the first ``get()``."""
    from sluice.core.lazy import Lazy

    return Lazy(lambda: store(s))


@cache
def dynamo_store(s: Settings | None = None) -> DynamoJobStore:
    """The jobs table's adapter, whose parts are the ports below (``store``, ``families``)."""
    from sluice.backends.dynamodb.jobs import DynamoJobStore

    s = s or settings()
    return DynamoJobStore.from_settings(s, client=dynamodb(s))


@cache
def store(s: Settings | None = None) -> JobStore:
    return dynamo_store(s)


def families(s: Settings | None = None) -> FamilyStore:
    """The jobs table's families (``sluice.core.families``): the same store as ``store(s)``, whose
    grants tell the countdown which continuation a job counts down."""
    return dynamo_store(s).families


def lazy_families(s: Settings | None = None) -> Lazy[FamilyStore]:
    """``families(s)``, built on the first ``get()``."""
    from sluice.core.lazy import Lazy

    return Lazy(lambda: families(s))


@cache
def job_log(s: Settings | None = None) -> JobLog:
    from sluice.backends.kafka.producer import KafkaJobLog

    return KafkaJobLog.from_settings(s or settings())


@cache
def job_id_key(s: Settings | None = None) -> bytes:
    """The current HMAC key of self-verifying job ids (``sluice.core.ids``), read once per container.

    ``job_id_secret`` if set, else the bare SecretString of ``job_id_secret_arn`` in Secrets
    Manager; ConfigError with neither (the gateway must not mint ids nobody can verify).
    """
    from sluice.backends.aws.secrets import secret_string
    from sluice.core.errors import ConfigError

    s = s or settings()
    if s.job_id_secret is not None:
        return _key(s.job_id_secret.get_secret_value(), "SLUICE_JOB_ID_SECRET")
    if s.job_id_secret_arn:
        return _key(secret_string(s.job_id_secret_arn, s, "job id secret"), s.job_id_secret_arn)
    raise ConfigError("no job id secret: set SLUICE_JOB_ID_SECRET or SLUICE_JOB_ID_SECRET_ARN "
                      "(the gateway signs job ids with it; docs/api.md)")


@cache
def previous_job_id_keys(s: Settings | None = None) -> tuple[bytes, ...]:
    """The key before the last rotation, still verified: empty before the first rotation.

    ``job_id_previous_secret`` if set, else the AWSPREVIOUS version of ``job_id_secret_arn``.
    """
    from sluice.backends.aws.secrets import previous_secret_string

    s = s or settings()
    if s.job_id_previous_secret is not None:
        return (_key(s.job_id_previous_secret.get_secret_value(), "SLUICE_JOB_ID_PREVIOUS_SECRET"),)
    if s.job_id_secret is None and s.job_id_secret_arn:
        previous = previous_secret_string(s.job_id_secret_arn, s, "previous job id secret")
        if previous is not None:
            return (_key(previous, f"{s.job_id_secret_arn} (AWSPREVIOUS)"),)
    return ()


def job_id_keys(s: Settings | None = None) -> tuple[bytes, tuple[bytes, ...]]:
    """(current, previous) job id keys."""
    return job_id_key(s), previous_job_id_keys(s)


def refresh_job_id_keys(s: Settings | None = None) -> tuple[bytes, tuple[bytes, ...]]:
    """Read both keys again: an id named a key this container has not seen (a rotation)."""
    job_id_key.cache_clear()
    previous_job_id_keys.cache_clear()
    return job_id_keys(s)


def job_id_verifier(s: Settings | None = None) -> Verifier | None:
    """The relay's check of record ids: the job id keys, re-read after a rotation; None if unset.

    A deployment without a job id secret has no gateway minting ids, so nothing to check.
    """
    from sluice.core.clock import wall_ms
    from sluice.core.ids import Verifier

    s = s or settings()
    if s.job_id_secret is None and not s.job_id_secret_arn:
        return None
    current, previous = job_id_keys(s)
    # cached: the keys are this container's, read at its first invocation, perhaps before a rotation
    return Verifier(current, previous, refresh=lambda: refresh_job_id_keys(s), clock=wall_ms, cached=True)


def _key(secret: str, source: str) -> bytes:
    from sluice.core.errors import ConfigError
    from sluice.core.ids import MIN_KEY_BYTES

    key = secret.encode("utf-8")
    if len(key) < MIN_KEY_BYTES:
        raise ConfigError(f"the job id secret from {source} is shorter than {MIN_KEY_BYTES} bytes")
    return key


@cache
def routes(s: Settings | None = None) -> RouteCache | None:
    """This container's cached view of the routes table; None when the deployment has none."""
    s = s or settings()
    if not s.routes_table:
        return None
    from sluice.core.lazy import Lazy
    from sluice.core.routes import RouteCache, RouteSource

    def build() -> RouteSource:  # on the first read: no boto3 at a gateway's import (cold start)
        from sluice.backends.dynamodb.routes import DynamoRouteStore

        return DynamoRouteStore.from_settings(s, client=dynamodb(s))  # the container's client

    return RouteCache(Lazy(build), ttl_s=s.route_cache_ttl_s)


def schedules(s: Settings | None = None) -> Callable[[Api], Schedules] | None:
    """The gateway's schedules (issue 17), built with its Api on first use; None without a table.

    Without the firings function's ARN and the Scheduler role (``sluice dev``), only the table is kept.
    """
    s = s or settings()
    if not s.schedules_table:
        return None

    def build(api: Api) -> Schedules:
        from sluice.backends.dynamodb.schedules import DynamoScheduleStore
        from sluice.gateway.schedules import Schedules

        return Schedules(api, DynamoScheduleStore(dynamodb(s), s.schedules_table), schedule_trigger(s))

    return build


def schedule_trigger(s: Settings) -> ScheduleTrigger | None:
    """What fires the schedules: the scheduler function, outside the VPC, where one is named (the
    operator's, issue 33), else ``scheduler_trigger``."""
    if s.scheduler_function_name:
        from sluice.backends.aws.scheduler_proxy import LambdaScheduleTrigger

        return LambdaScheduleTrigger.of(s)
    return scheduler_trigger(s)


def scheduler_trigger(s: Settings) -> SchedulerTrigger | None:
    """EventBridge Scheduler for the schedules; None without the firings function's ARN and the
    Scheduler role (``sluice dev``, whose scheduler reads the table)."""
    from sluice.backends.dynamodb.schedules import SchedulerTrigger

    if not (s.firings_function_arn and s.scheduler_role_arn):
        return None
    return SchedulerTrigger(boto_client("scheduler", s), s.firings_function_arn, s.scheduler_role_arn,
                            s.scheduler_group, s.firings_dead_letter_arn)


def code_schedules(s: Settings) -> CodeSchedules | None:
    """The schedules declared in code, as a registration writes them (issue 31); None without a
    schedules table."""
    if not s.schedules_table:
        return None
    from sluice.backends.dynamodb.schedules import DynamoScheduleStore
    from sluice.core.clock import wall_ms
    from sluice.registrar.schedules import CodeSchedules

    return CodeSchedules(DynamoScheduleStore(dynamodb(s), s.schedules_table), schedule_trigger(s), wall_ms)


def _dynamo_lot(s: Settings | None) -> DynamoParkingLot | None:
    s = s or settings()
    if not s.parked_table:
        return None
    from sluice.backends.dynamodb.parking import DynamoParkingLot

    return DynamoParkingLot(dynamodb(s), s.parked_table)


def parking_lot(s: Settings | None = None) -> ParkingLot | None:
    """The relay's parking lot (issue 28, ``ParkedTable``) on the container's DynamoDB client; None
    without a table (a held queue's records then wait in the relay's buffer)."""
    return _dynamo_lot(s)


@cache
def parked_jobs(s: Settings | None = None) -> ParkedJobs | None:
    """The same lot as the operator's listing reads it (``state=parked``), once per container; None
    without a table."""
    return _dynamo_lot(s)


@cache
def dispatcher(s: Settings | None = None) -> Dispatcher:
    from sluice.backends.aws.dispatch import LambdaDispatcher

    s = s or settings()
    cache_ = routes(s)
    if cache_ is None or not s.worker_function_name:
        return LambdaDispatcher.from_settings(s)
    from sluice.core.routes import CachedRouteLookup

    lookup = CachedRouteLookup(cache_, s.worker_function_name, teams=team_map(s), stack_name=s.stack_name)
    return LambdaDispatcher.from_settings(s, function_for=lookup)


@cache
def team_map(s: Settings | None = None) -> TeamMapCache | None:
    """The team map (SSM ``/sluice/<stack>/teams/``, issue 27), cached; None without a stack name,
    so the relay follows no route to a team's function."""
    s = s or settings()
    if not s.stack_name:
        return None
    from sluice.core.lazy import Lazy
    from sluice.core.routes import TeamMapCache, TeamMapSource

    def build() -> TeamMapSource:
        from sluice.backends.aws.team_map import LambdaTeamMap, SsmTeamMap

        if s.team_map_function_name:  # outside the VPC, which then needs no SSM endpoint (issue 33)
            return LambdaTeamMap.of(s)
        return SsmTeamMap.from_settings(s)

    return TeamMapCache(Lazy(build), ttl_s=s.team_map_ttl_s)


@cache
def completion_publisher(s: Settings | None = None) -> Any:
    """The completion events' ``Publisher`` (the events Lambda; ``sluice dev``'s stream poller)."""
    from sluice.backends.dynamodb.results import S3ResultSink
    from sluice.streams.completion.publish import EventBridgeSink, Publisher

    s = s or settings()
    return Publisher(EventBridgeSink(boto_client("events", s)), s.events_bus_name,
                     results=S3ResultSink(None, s.results_bucket, build_client=lambda: boto_client("s3", s)),
                     inline_bytes=s.event_result_inline_bytes)


@cache
def payload_store(s: Settings | None = None) -> Lazy[PayloadStore] | None:
    """Where large payloads live (``sluice.core.payloads``), its S3 client built on the first large
    payload (most containers never see one: no botocore S3 model at a cold start); None without a
    payloads bucket, so every payload stays inline."""
    from sluice.core.lazy import Lazy

    s = s or settings()
    if not s.payloads_bucket:
        return None

    def build() -> PayloadStore:
        from sluice.backends.aws.payloads import S3PayloadStore

        return S3PayloadStore(boto_client("s3", s), s.payloads_bucket)

    return Lazy(build)


@cache
def family_gateway(s: Settings | None = None) -> LambdaFamilyGateway | None:
    """The internal function's family entry (``sluice.core.families``), or None where none is named."""
    from sluice.backends.aws.family_gateway import LambdaFamilyGateway, LambdaInvoke

    s = s or settings()
    if not s.internal_function_name:
        return None
    return LambdaFamilyGateway(LambdaInvoke.from_settings(s))


@cache
def stream_countdown(s: Settings | None = None) -> StreamCountdown:
    """The countdown of the jobs table's stream (the countdown Lambda; ``sluice dev``'s poller)."""
    from sluice.backends.aws.metrics import EmfMetrics
    from sluice.core.bus import ChildAbandoned
    from sluice.core.errors import ConfigError
    from sluice.core.families import Countdown
    from sluice.streams.countdown import AbandonedMetrics, StreamCountdown

    keeper = family_gateway(s)
    if keeper is None:
        raise ConfigError("the stream's countdown releases continuations through the internal "
                          "function: SLUICE_INTERNAL_FUNCTION_NAME is not set")
    bus = EventBus()
    bus.subscribe(AbandonedMetrics(EmfMetrics()), ChildAbandoned)
    return StreamCountdown(Countdown(families(s), keeper.release), bus)


def subscribe_countdown(bus: EventBus, s: Settings | None = None) -> None:
    """Count children's endings on ``bus`` (the relay's settle), releasing continuations via the gateway."""
    from sluice.core.families import Countdown

    keeper = family_gateway(s)
    if keeper is None or not bus.claim("countdown"):
        return
    Countdown(families(s), keeper.release).subscribe(bus)




# -- traces (issue 31 item 6): built only where Settings.traces is on, so OpenTelemetry is imported
# only there; the API hands the spans to the deployer's SDK (docs/deploy.md, Traces)


def enqueue_spans(s: Settings | None = None) -> EnqueueSpans:
    """The gateway's enqueue spans; with traces off none (a caller's traceparent still goes on)."""
    from sluice.core.traces import NO_SPANS

    if not (s or settings()).traces:
        return NO_SPANS
    from sluice.backends.otel.spans import OtelEnqueueSpans

    return OtelEnqueueSpans()


_observer: list[TraceObserver] = []  # the process's one, once built


def traces(s: Settings | None = None, bus: EventBus | None = None) -> TraceObserver | None:
    """The process's span observer, subscribed (once) to ``bus`` (default: the process's bus, which
    the worker's drains and the relay's parts emit on); None with traces off."""
    if not (s or settings()).traces:
        return None
    if not _observer:
        from sluice.backends.otel.spans import TraceObserver

        _observer.append(TraceObserver())
    bus = events() if bus is None else bus
    if bus.claim("traces"):
        _observer[0].subscribe(bus)
    return _observer[0]


@cache
def timeline_log(s: Settings | None = None) -> TimelineLog:
    """A job's timeline in Redis (the workers append, the operator reads)."""
    from sluice.backends.redis.timeline import RedisTimeline

    s = s or settings()
    return RedisTimeline(redis(s), max(1, s.timeline_ttl_s) * 1000)


def timelines(s: Settings | None = None, bus: EventBus | None = None) -> None:
    """Record every job's steps on ``bus`` (default: the process's) in its timeline, once per bus;
    nothing with ``timeline_ttl_s`` 0."""
    s = s or settings()
    bus = events() if bus is None else bus
    if s.timeline_ttl_s <= 0 or not bus.claim("timeline"):
        return
    from sluice.worker.runtime.timeline import TimelineRecorder

    TimelineRecorder(lambda: timeline_log()).subscribe(bus)  # the adapter of the settings of the day


@cache
def depth_log(s: Settings | None = None) -> DepthLog:
    """A queue's last hour of depths and waits in Redis (the relay samples, the operator reads)."""
    from sluice.backends.redis.depth import RedisDepthLog

    return RedisDepthLog(redis(s))


def sample_depths(s: Settings | None = None, bus: EventBus | None = None) -> None:
    """Keep each queue's last hour of depths in Redis from the relay's measures on ``bus`` (default:
    the process's), once per bus (``sluice.relay.depth``)."""
    bus = events() if bus is None else bus
    if not bus.claim("depth samples"):
        return
    from sluice.relay.depth import DepthSampler

    DepthSampler(lambda: depth_log(s)).subscribe(bus)


def reset() -> None:
    """Forget every cached adapter (tests, and the local stack after a restart)."""
    for builder in (settings, queue, dynamo_store, store, job_log, dispatcher, job_id_key,
                    previous_job_id_keys, completion_publisher, family_gateway, routes, stream_countdown,
                    dynamodb, redis, relay_engine, payload_store, queue_directory, timeline_log, depth_log,
                    parked_jobs, script_intake):
        builder.cache_clear()
