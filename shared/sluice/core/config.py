"""Settings, parsed once from the environment (prefix ``SLUICE_``).

Only ``Settings`` itself reads ``os.environ``: the composition root (``sluice.entry.root``)
builds one with ``Settings.from_env`` and hands it to everything else.

A plain pydantic model, not pydantic-settings' ``BaseSettings``: importing pydantic-settings
(its sources, dotenv, argparse, pydantic dataclasses) cost every function's cold start about
a fifth of ``import boto3`` (issue 14), for an environment of flat scalars that needs none of
it. The behaviour is ``BaseSettings``' for these fields: a ``SLUICE_<FIELD>`` variable (any
case) fills each field the caller does not pass, its string validated in pydantic's lax mode
("4" is 4); keyword arguments win; other variables are ignored; defaults are validated.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from sluice.core.payloads import MIN_INLINE_MAX_BYTES

ENV_PREFIX = "sluice_"


def _environ() -> dict[str, str]:
    """The ``SLUICE_*`` variables, by field name (case-insensitive, as pydantic-settings matched)."""
    return {k.lower().removeprefix(ENV_PREFIX): v for k, v in os.environ.items()
            if k.lower().startswith(ENV_PREFIX)}


class Settings(BaseModel):
    # defer_build: its validator is built when the first Settings is made (the first call's adapters),
    # not at import: the first validator built also loads pydantic's plugin loader (importlib.metadata),
    # 30+ ms of every function's init (issue 30, item 3).
    model_config = ConfigDict(extra="ignore", frozen=True, validate_default=True, defer_build=True)

    def __init__(self, **values: Any) -> None:
        env = _environ()
        super().__init__(**{**{k: v for k, v in env.items() if k in type(self).model_fields}, **values})

    # Redis (ElastiCache in AWS). rediss:// for TLS; the AUTH token may come from Secrets Manager.
    # redis+cluster:// or rediss+cluster:// for cluster mode (the configuration endpoint).
    redis_url: str = Field(default="redis://127.0.0.1:6379/0",
                           pattern=r"(?i)^rediss?(\+cluster)?://[^/\s]+(/\d*)?(\?\S*)?$")
    # This function's Redis user (ElastiCache RBAC; docs/security.md, "Redis users"): its secret
    # holds {"username", "password"} (a bare string: a pre-RBAC AUTH token). Locally (sluice dev)
    # the user and its password are given directly.
    redis_auth_secret_arn: str | None = None
    redis_username: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
    redis_password: SecretStr | None = None

    # Kafka (MSK in AWS). One topic holds every queue's jobs, keyed by job id.
    kafka_bootstrap: str = "127.0.0.1:9092"
    # iam: SASL/IAM over TLS (MSK; template.yaml's default, KafkaSecurity); tls: TLS without client
    # auth; plaintext: neither, an explicit opt-in in the template (the local stack's broker speaks
    # only that: sluice dev names the override). The template always sets it; the default here is
    # for processes on a developer's machine.
    kafka_security: Literal["plaintext", "tls", "iam"] = "plaintext"
    kafka_topic: str = "sluice.jobs"
    kafka_dead_letter_topic: str = "sluice.jobs.dlq"
    kafka_partitions: int = Field(default=4, ge=1)
    kafka_consumer_group: str = "sluice-relay"

    # AWS. endpoint_url points every boto3 client at the moto server locally.
    aws_region: str = "us-east-1"
    aws_endpoint_url: str | None = None
    lambda_endpoint_url: str | None = None  # local stack: its Lambda service (sluice_dev.local.lambdas)
    jobs_table: str = "sluice-jobs"
    idempotency_table: str = "sluice-idempotency"
    results_bucket: str = "sluice-results"
    large_result_bytes: int = Field(default=300_000, ge=1, le=390_000)
    retention_days: int = Field(default=14, ge=1)
    # Completion events (docs/events.md): the EventBridge bus, and the largest result carried in an
    # event (larger ones are an S3 pointer).
    events_bus_name: str = "sluice-events"
    event_result_inline_bytes: int = Field(default=16 * 1024, ge=0, le=200_000)
    # Progress (ctx.progress): at most one write per job per this many ms.
    progress_every_ms: int = Field(default=1_000, ge=0)

    # Gateway limits.
    max_payload_bytes: int = Field(default=256 * 1024, ge=1)
    # Large payloads (sluice.core.payloads, issue 28): a payload whose JSON is larger than this goes to
    # payloads_bucket and its record carries a pointer, so Redis and Kafka hold mostly small entries.
    # 16 KiB: 10,000 inline jobs of a queue stay under 160 MB of Redis, while only payloads that
    # large pay an S3 PUT at the gateway and a GET at the worker (docs/deploy.md, "Large payloads").
    # An empty bucket name keeps every payload inline (unit tests, the chaos workload).
    payloads_bucket: str = ""
    payload_inline_max_bytes: int = Field(default=16 * 1024, ge=MIN_INLINE_MAX_BYTES)
    # Job ids verify themselves (sluice.core.ids: ULID.queue.HMAC), so the gateway answers GET for a job
    # the relay has not recorded yet. The HMAC key: given directly, or read once per container from
    # Secrets Manager. The gateway refuses to start with neither. An unrecorded id older than the
    # horizon (Kafka's retention: 7 days by default; capped at retention_days) is 404.
    job_id_secret: SecretStr | None = None
    job_id_secret_arn: str | None = None
    # The key before the last rotation, still verified (sluice.core.ids key ids). With the ARN it is the
    # secret's AWSPREVIOUS version; this setting gives it directly (local stacks, tests).
    job_id_previous_secret: SecretStr | None = None
    job_id_horizon_hours: int = Field(default=7 * 24, ge=1)
    # An upgrade from a version without seals (before issue 27; docs/deploy.md, "Upgrading"): the time
    # of the upgrade, in ms. A continuation whose id was minted before it may be released from the
    # unsealed record its old gateway stored (``seal.unsealed_before_upgrade``). 0: none may.
    unsealed_continuations_before_ms: int = Field(default=0, ge=0)

    # Limits that keep callers from filling Redis (docs/deploy.md, "Sizing Redis"). 0 = no limit.
    # A queue's own max_delayed / max_dead in its Redis config override the two caps.
    max_delayed_per_queue: int = Field(default=10_000, ge=0)  # gateway 429s / relay holds back beyond
    max_dead_per_queue: int = Field(default=10_000, ge=0)  # the queue takes no more jobs at this depth
    dead_keep_per_queue: int = Field(default=1_000, ge=0)  # trim: the newest this many dead jobs stay
    dead_retention_hours: int = Field(default=72, ge=0)  # trim: dead jobs older than this go
    max_queues: int = Field(default=1_000, ge=0)  # queue names the registry accepts
    queue_allow_list: str = ""  # comma-separated queue names; empty = any name (up to max_queues)
    redis_push_memory_percent: int = Field(default=80, ge=0, le=100)  # memory guard (sluice.core.limits)
    memory_guard_depth: int = Field(default=100, ge=0)  # above the guard, deeper queues are held
    # Byte budgets in Redis (sluice.core.limits, docs/deploy.md "Byte budgets"). Per queue unless its
    # config's max_bytes says otherwise (0 = no budget); the total over every queue must fit the node
    # (``sluice check`` compares it with the node type's memory; 0 = no total).
    queue_budget_bytes: int = Field(default=32 * 1024 * 1024, ge=0)
    redis_budget_bytes: int = Field(default=512 * 1024 * 1024, ge=0)
    queue_view_ttl_ms: int = Field(default=2_000, ge=0)  # the gateway's cached view of a queue
    # Priorities above max_caller_priority are for operators only: principals (IAM user or role
    # ARNs, comma-separated) whose requests API Gateway signed (policy.priority_allowed).
    max_caller_priority: int = Field(default=9, ge=0, le=9)
    operator_principals: str = ""
    # Each caller's own limit at the gateway (sluice.gateway.throttle, issue 27 item 5): requests per
    # second and burst, body bytes per second and burst, shared by every container through Redis.
    # 0 turns a bucket off; all 0 (the local default), no throttle and no Redis call. caller_limits:
    # comma-separated "<IAM ARN or apikey:<id>>=<rate>/<burst>[/<bytes per s>[/<byte burst>]]".
    caller_rate_per_s: float = Field(default=0.0, ge=0.0, le=1_000_000.0)
    caller_burst: int = Field(default=0, ge=0, le=1_000_000)
    caller_bytes_per_s: int = Field(default=0, ge=0, le=1 << 40)
    caller_byte_burst: int = Field(default=0, ge=0, le=1 << 40)
    caller_limits: str = ""

    # Job defaults.
    default_lease_seconds: int = Field(default=30, ge=1, le=43_200)
    default_max_attempts: int = Field(default=5, ge=1, le=100)
    # Deploy-time defaults (template.yaml parameters): retry backoff for policy.backoff_ms, and the
    # relay's push rate for queues with no rate of their own in Redis (0 = unlimited).
    retry_base_ms: int = Field(default=1_000, ge=1)
    retry_cap_ms: int = Field(default=15 * 60 * 1000, ge=1)
    default_rate_per_s: float = Field(default=0.0, ge=0.0)
    default_burst: int = Field(default=0, ge=0)

    # Worker runtime.
    worker_concurrency: int = Field(default=1, ge=1, le=64)
    worker_batch: int = Field(default=10, ge=1, le=1000)
    heartbeat_fraction: float = Field(default=1 / 3, gt=0, lt=1)
    lambda_margin_ms: int = Field(default=2_000, ge=0)
    # How long a worker invocation draining one queue waits for new jobs once the queue is empty
    # (woken at once by the relay's push), so a busy queue costs no invocation per job (docs/worker.md).
    worker_linger_ms: int = Field(default=1_000, ge=0, le=60_000)
    # A job is granted its fencing token only with this much lease left (policy.grant_margin_ms).
    grant_margin_ms: int = Field(default=5_000, ge=0)
    # The worker function's Timeout, which Lambda does not expose to its code: template.yaml passes
    # it from the same parameter. Sets the invocation budget that handler timeouts must fit
    # (policy.invocation_budget_ms); None (a long-running worker process) means no budget.
    function_timeout_s: int | None = Field(default=None, ge=1, le=900)
    worker_function_name: str | None = None  # set in AWS: the relay dispatches to it
    # The internal function (template.yaml InternalFunction), which workers, the relay and the
    # countdown invoke directly to start children and release continuations (sluice.core.families);
    # None: ctx.enqueue is refused with a ConfigError. Its resource policy admits only their roles.
    internal_function_name: str | None = None
    # Deprecated: the name of the single gateway function that served internal calls before the
    # split (issue 27); read only where internal_function_name is unset.
    gateway_function_name: str | None = None
    # Routes (sluice.core.routes): the table of queue -> worker function, empty = no routing (every queue
    # goes to worker_function_name). Read at most once per route_cache_ttl_s per container.
    routes_table: str = ""
    # The durable registry of queues (issue 28; backends/dynamodb/queues.py): the gateway writes a new
    # queue through to it before its first 202, and the registry's Redis cache is loaded from it after
    # a Redis loss. Empty: Redis holds the only registry (as before issue 28).
    queues_table: str = ""
    # Schedules (sluice.core.schedules, issue 17): the table of schedules, empty = no schedule routes.
    # In AWS each is also an EventBridge Scheduler schedule in scheduler_group, invoking the firings
    # function (firings_function_arn) through scheduler_role_arn; without them only the table is kept.
    schedules_table: str = ""
    scheduler_group: str = "default"
    scheduler_role_arn: str = ""
    firings_function_arn: str = ""
    # The SQS queue Scheduler sends a firing to once its retries are spent (issue 29; template.yaml
    # FiringsDeadLetterQueue, whose depth alarms). Empty: retries alone (``sluice dev``).
    firings_dead_letter_arn: str = ""
    gateway_function_arn: str = ""  # deprecated: read only where firings_function_arn is unset
    # The scheduler function (template.yaml ``SchedulerFunction``, outside the VPC, issue 33): set in the
    # operator, which then asks it to create, pause and delete Scheduler schedules over the Lambda
    # endpoint instead of calling Scheduler itself (no Scheduler endpoint in the VPC). Empty: direct.
    scheduler_function_name: str = ""
    route_cache_ttl_s: float = Field(default=30.0, ge=0.0, le=60.0)
    # Teams (issue 27, docs/teams.md): the Sluice stack's name. Its team map is the SSM parameters
    # under /sluice/<stack_name>/teams/ (infra/team.yaml writes them), and a team's worker function is
    # <stack_name>-worker-<team>. Empty: no team map, so the relay follows no route to a team function.
    stack_name: str = ""
    team_map_ttl_s: float = Field(default=60.0, ge=0.0, le=600.0)
    # The team map function (template.yaml ``TeamMapFunction``, outside the VPC, issue 33): set in the
    # relay, which then reads the map through it over the Lambda endpoint (no SSM endpoint in the
    # VPC). Empty: the relay reads SSM itself.
    team_map_function_name: str = ""
    # A team's registrar (sluice.entry.registrar; infra/team.yaml sets these): its team and the
    # queue patterns the team map gives it, comma-separated.
    registrar_team: str = ""
    registrar_queues: str = ""
    # A queue no route covers, once routes are known: refused at the gateway (404 NO_ROUTE), or
    # sent to the default worker ("default").
    unrouted_queues: Literal["refuse", "default"] = "refuse"
    # The module whose `app` (a sluice.Worker) runs jobs. None by default: the examples (an HTTP
    # caller, a table writer) run only where asked for (`sluice dev`, the demo).
    handlers_module: str = "sluice.worker.no_handlers"
    history_path: str | None = None  # local stack / chaos only: JSONL of grants, writes, acks (local.history)
    # Spans of every job's path (issue 31 item 6; sluice.backends.otel), with the OpenTelemetry API:
    # exported by whatever SDK the deployer installs (the ADOT layer in AWS; docs/deploy.md). Off: the
    # API is never imported, and a caller's traceparent still goes on with its jobs.
    traces: bool = False
    traces_path: str | None = None  # local stack only: the spans as JSON lines (sluice_dev.local.traces)
    # A job's timeline (issue 32): its workers' steps in a capped list per job in Redis, kept this long
    # after its last step (docs/cost.md prices it); 0: not recorded.
    # Off unless asked for: two more Redis calls a job and ~845 B of Redis memory per job kept, which at
    # 1,000 jobs/s would hold a third of a small cache (docs/cost.md, Job timelines); sluice dev turns it on.
    timeline_ttl_s: int = Field(default=0, ge=0, le=604_800)

    # Relay.
    relay_batch: int = Field(default=500, ge=1)
    relay_poll_ms: int = Field(default=200, ge=1)
    # Records a relay holds in memory per partition before it stops fetching it (RelayConfig.max_pending).
    relay_max_pending: int = Field(default=5_000, ge=10, le=1_000_000)
    # The longest the broker holds the relay's fetch while its partitions have nothing new (Kafka's
    # default: 500 ms). kafka-python keeps one fetch in flight per broker, leaving out partitions
    # whose records it still holds, so the partition being worked through is fetched again only
    # after that fetch returns: at 500 ms a backlog on one partition, its broker's others idle,
    # drained at 8-10k jobs/s (15-16k at 100), and each bench_relay run ended in a 500 ms wait
    # (docs/relay.md). An idle relay sends a fetch per broker this often (MSK Serverless allows
    # 15,000 requests a second per cluster); new records end the wait at once.
    relay_fetch_max_wait_ms: int = Field(default=100, ge=1, le=10_000)
    relay_stop_before_ms: int = Field(default=5_000, ge=0)
    relay_partition_groups: int = Field(default=1, ge=1)  # relays started at once; each takes its share
    # Worker invocations one relay starts per second across all queues (token bucket; 0 = only the
    # per-queue cap of 50 a tick), so many queues with backlogs cannot exhaust Lambda concurrency.
    dispatch_budget_per_s: float = Field(default=20.0, ge=0.0)
    dispatch_budget_burst: int = Field(default=50, ge=0)
    # Parking (issue 28, docs/relay.md "Holds and parking"): the DynamoDB table held records wait in
    # (empty: no parking, a held queue waits in the relay's buffer as before); a held queue's records
    # buffered per partition beyond relay_park_threshold (0: twice relay_batch) are parked, so a
    # partition never reaches relay_max_pending (the safety net) for a held queue.
    parked_table: str = ""
    relay_park_threshold: int = Field(default=0, ge=0)
    # The delay lane (docs/relay.md, "The delay lane"): a record due more than this after the relay
    # takes it is parked by run time, apart from its queue's ordered lane, and pushed back into
    # Redis's delayed set once it is due within it (0: no delay lane).
    relay_delay_horizon_s: int = Field(default=900, ge=0)

    # Per-queue CloudWatch metrics (sluice.backends.aws.queue_metrics; 11 custom metrics a queue, $0.30 each a
    # month: docs/cost.md). metrics_queues: comma-separated names; empty = the queue allow-list,
    # else the first metrics_queue_cap queues a process sees. metrics_queue_cap 0 turns them off.
    metrics_queues: str = ""
    metrics_queue_cap: int = Field(default=50, ge=0, le=10_000)

    def metrics_queue_names(self) -> frozenset[str] | None:
        """The queues that may get per-queue metrics (still at most ``metrics_queue_cap`` of
        them, ``queue_metrics.QueueBound``), or None for any."""
        names = frozenset(n.strip() for n in self.metrics_queues.split(",") if n.strip())
        return names or self.allowed_queues()

    def allowed_queues(self) -> frozenset[str] | None:
        """The operator's allow-list, or None when any (valid) name may be used."""
        names = frozenset(n.strip() for n in self.queue_allow_list.split(",") if n.strip())
        return names or None

    @field_validator("redis_url")
    @classmethod
    def _cluster_has_database_0_only(cls, url: str) -> str:
        scheme, _, rest = url.partition("://")
        database = rest.partition("?")[0].partition("/")[2]
        if scheme.lower().endswith("+cluster") and database not in ("", "0"):
            raise ValueError(f"a Redis cluster has database 0 only, not {database} ({url})")
        return url

    @model_validator(mode="before")
    @classmethod
    def _deprecated_gateway_names(cls, data: Any) -> Any:
        """SLUICE_GATEWAY_FUNCTION_NAME/_ARN (one function for every caller) stand in for the split
        functions' names where those are unset, so a deployment configured before issue 27 still runs."""
        if not isinstance(data, dict):
            return data
        for new, old in (("internal_function_name", "gateway_function_name"),
                         ("firings_function_arn", "gateway_function_arn")):
            if not data.get(new) and data.get(old):
                data = {**data, new: data[old]}
        return data

    @classmethod
    def from_env(cls) -> Settings:
        return cls()
