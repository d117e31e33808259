"""The local stack's functions, shaped from ``template.yaml``: what differs is named.

``plan`` turns the template's function configuration (``local.template``) into the local
Lambda service's functions. It keeps no defaults of its own: Timeout, MemorySize,
environment, reserved concurrency and schedules all come from the template. Two kinds
of local difference exist, and both are explicit:

- a **binding** puts a value only a deploy knows (a table's name, the Redis endpoint, the
  Kafka bootstrap) on the local servers, or adds what only the local stack needs (the
  moto endpoint, the local Lambda API). ``BINDINGS`` names each, with its reason;
- an **override** changes what the template configures (a shorter schedule so a demo
  finishes, Kafka without IAM). Each is an ``Override`` row, and ``sluice dev`` prints
  them at start-up.

tests/integration/test_dev_template.py compares the result with the template field by
field and fails on any difference that is neither.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sluice.core.config import Settings
from sluice.core.errors import ConfigError
from sluice_dev.local.template import DeployConfig, FunctionConfig, Resource, rate_seconds

# Logical id in template.yaml -> the local function's name (and its Powertools service name).
NAMES = {"GatewayFunction": "sluice-gateway", "OperatorFunction": "sluice-operator",
         "InternalFunction": "sluice-internal", "FiringsFunction": "sluice-firings",
         "RelayFunction": "sluice-relay", "WorkerFunction": "sluice-worker",
         "RegistrarFunction": "sluice-registrar",
         # Outside the VPC (issue 33): the relay's team map read, the operator's Scheduler calls.
         "TeamMapFunction": "sluice-teams", "SchedulerFunction": "sluice-scheduler"}

# Environment variables the local stack sets or drops where the template names a stack resource,
# or that exist only locally: where the local servers are. None of them changes behaviour.
BINDINGS: dict[str, str] = {
    "SLUICE_REDIS_URL": "the local redis-server",
    "SLUICE_KAFKA_BOOTSTRAP": "the local Kafka (Tansu, or --kafka)",
    "SLUICE_JOBS_TABLE": "the jobs table on the moto server",
    "SLUICE_IDEMPOTENCY_TABLE": "the idempotency table on the moto server",
    "SLUICE_ROUTES_TABLE": "the routes table on the moto server",
    "SLUICE_QUEUES_TABLE": "the durable registry of queues on the moto server",
    "SLUICE_SCHEDULES_TABLE": "the schedules table on the moto server (sluice dev's scheduler fires them)",
    "SLUICE_SCHEDULER_GROUP": "the scheduler function's: the moto server's default group (moto stores the "
                              "schedules, sluice dev's scheduler fires the table's); dropped elsewhere",
    "SLUICE_SCHEDULER_ROLE_ARN": "the scheduler function's: the local Scheduler role, on the moto server; "
                                 "dropped elsewhere (the registrar keeps the table)",
    "SLUICE_FIRINGS_DEAD_LETTER_ARN": "dropped: no EventBridge Scheduler locally; sluice dev's scheduler "
                                      "sends a failed firing again at its next tick",
    "SLUICE_PARKED_TABLE": "the parking lot on the moto server (issue 28)",
    "SLUICE_RESULTS_BUCKET": "the results bucket on the moto server",
    "SLUICE_PAYLOADS_BUCKET": "the payloads bucket on the moto server (tables.ensure_all makes it)",
    "SLUICE_WORKER_FUNCTION_NAME": "the worker's name in the local Lambda service",
    "SLUICE_INTERNAL_FUNCTION_NAME": "the internal function's name in the local Lambda service",
    "SLUICE_TEAM_MAP_FUNCTION_NAME": "the team map function's name in the local Lambda service",
    "SLUICE_SCHEDULER_FUNCTION_NAME": "the scheduler function's name in the local Lambda service",
    "SLUICE_REDIS_AUTH_SECRET_ARN": "dropped: the function's Redis user is given as SLUICE_REDIS_USERNAME "
                                    "and SLUICE_REDIS_PASSWORD (no Secrets Manager)",
    "SLUICE_REDIS_USERNAME": "the function's own ACL user on the local redis-server (its ElastiCache user in "
                             "AWS, whose name its secret holds; sluice_dev.local.redis_users)",
    "SLUICE_REDIS_PASSWORD": "that user's password, new at every start (its secret in AWS)",
    "SLUICE_JOB_ID_SECRET_ARN": "dropped: the key is given as SLUICE_JOB_ID_SECRET; or, with "
                                "DevOptions.job_id_key_secret, the key's secret on the moto server "
                                "(sluice chaos rotates it; local.job_id_secret)",
    "SLUICE_JOB_ID_SECRET": "the stack's job id key, in place of SLUICE_JOB_ID_SECRET_ARN",
    "SLUICE_AWS_ENDPOINT_URL": "the moto server (DynamoDB, S3)",
    "SLUICE_LAMBDA_ENDPOINT_URL": "the local Lambda service's Invoke API",
    "SLUICE_HISTORY_PATH": "the local history of grants, writes and acks (sluice top, verify)",
    "SLUICE_EXAMPLES_SINK_URL": "the local fencing-aware sink of the notify example",
    "SLUICE_EXAMPLES_SERVICE_URL": "the local service running the fence middleware (the ledger's notice)",
    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "set by Lambda itself from MemorySize",
}
# A function's own bindings (``plan``'s ``own``): where the template names its Redis user's secret.
OWN = ("SLUICE_REDIS_USERNAME", "SLUICE_REDIS_PASSWORD")
# The bindings every local function gets, whatever its template environment says.
LOCAL_ONLY = ("SLUICE_AWS_ENDPOINT_URL", "SLUICE_LAMBDA_ENDPOINT_URL", "SLUICE_HISTORY_PATH",
              "SLUICE_EXAMPLES_SINK_URL", "SLUICE_EXAMPLES_SERVICE_URL", "SLUICE_JOB_ID_SECRET",
              "SLUICE_JOB_ID_SECRET_ARN")


@dataclass(frozen=True)
class Override:
    """One way the local stack differs from the template, and why."""

    function: str  # logical id, e.g. WorkerFunction
    field: str  # Timeout, MemorySize, ReservedConcurrentExecutions, Environment.NAME, Events.NAME
    template: str
    local: str
    reason: str

    def line(self) -> str:
        return f"{self.function}.{self.field}: {self.template} -> {self.local}  ({self.reason})"


@dataclass(frozen=True)
class LocalFunction:
    """One function as the local Lambda service runs it."""

    logical_id: str
    name: str
    timeout_s: float
    memory_mb: int
    max_concurrency: int | None  # None: unreserved (Lambda's account pool)
    env: Mapping[str, str]
    schedules: Mapping[str, float | None]  # event name -> period in seconds; None = disabled
    schedule_inputs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LocalChanges:
    """What a caller (``sluice dev``, the demo, the chaos runtime) changes, each with its reason."""

    timeout_s: Mapping[str, tuple[float, str]] = field(default_factory=dict)  # logical id -> value, why
    concurrency: Mapping[str, tuple[int, str]] = field(default_factory=dict)
    schedule_s: Mapping[str, tuple[float, str]] = field(default_factory=dict)  # logical id -> period
    schedule_input: Mapping[str, tuple[Any, str]] = field(default_factory=dict)
    env: Mapping[str, Mapping[str, tuple[str, str]]] = field(default_factory=dict)  # id -> var -> (v, why)


def _text(v: Any) -> str:
    return "(unset)" if v is None else f"{v:g}" if isinstance(v, float) else str(v)


def plan(deploy: DeployConfig, changes: LocalChanges, bindings: Mapping[str, str],
         own: Mapping[str, Mapping[str, str]] | None = None) -> tuple[list[LocalFunction], list[Override]]:
    """The local functions and every override. ConfigError for a template value the local stack
    cannot honour (a resource it has no binding for, a schedule it cannot run). ``own``: bindings
    of one function each (logical id -> variable -> value: its Redis user's credentials)."""
    functions, overrides = [], []
    for logical_id, name in NAMES.items():
        cfg = deploy.functions.get(logical_id)
        if cfg is None:
            raise ConfigError(f"{deploy.path} has no {logical_id}")
        fn, rows = _one(cfg, name, changes, {**bindings, **(own or {}).get(logical_id, {})})
        functions.append(fn)
        overrides += rows
    return functions, overrides


def plan_team(cfg: FunctionConfig, team: str, name: str, changes: LocalChanges,
              bindings: Mapping[str, str], own: Mapping[str, str] | None = None,
              ) -> tuple[LocalFunction, list[Override]]:
    """A team's worker function ``name`` (infra/worker.yaml, ``sluice dev --worker``), from its own
    template the same way: ``changes`` keyed by its logical id; override rows say which team's.
    ``own``: its own bindings (its team's Redis user)."""
    fn, rows = _one(cfg, name, changes, {**bindings, **(own or {})})
    return fn, [Override(f"{r.function}[{team}]", r.field, r.template, r.local, r.reason) for r in rows]


def _one(cfg: FunctionConfig, name: str, ch: LocalChanges,
         bindings: Mapping[str, str]) -> tuple[LocalFunction, list[Override]]:
    lid, rows = cfg.logical_id, []

    def change(field_: str, template: Any, value: Any, why: str) -> Any:
        if _text(template) != _text(value):
            rows.append(Override(lid, field_, _text(template), _text(value), why))
        return value

    timeout = float(cfg.timeout_s)
    if lid in ch.timeout_s:
        timeout = change("Timeout", cfg.timeout_s, *ch.timeout_s[lid])
    concurrency = cfg.reserved_concurrency
    if lid in ch.concurrency:
        concurrency = change("ReservedConcurrentExecutions", cfg.reserved_concurrency, *ch.concurrency[lid])
    env = _env(cfg, bindings)
    for var, (value, why) in ch.env.get(lid, {}).items():
        env[var] = change(f"Environment.{var}", cfg.env.get(var), value, why)
    env["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] = str(cfg.memory_mb)
    schedules: dict[str, float | None] = {}
    inputs: dict[str, Any] = {}
    for s in cfg.schedules:
        period = rate_seconds(s.expression) if s.enabled else None
        if s.enabled and lid in ch.schedule_s:
            period = change(f"Events.{s.name}", s.expression, *ch.schedule_s[lid])
        schedules[s.name] = period
        inputs[s.name] = s.input
        if s.enabled and lid in ch.schedule_input:
            value, why = ch.schedule_input[lid]
            rows.append(Override(lid, f"Events.{s.name}.Input", _text(s.input), _text(value), why))
            inputs[s.name] = value
    return LocalFunction(lid, name, timeout, cfg.memory_mb, concurrency, env, schedules, inputs), rows


def _env(cfg: FunctionConfig, bindings: Mapping[str, str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for var, value in cfg.env.items():
        if isinstance(value, Resource):
            if var not in BINDINGS:
                raise ConfigError(f"{cfg.logical_id}: {var} names a stack resource ({value}) that the "
                                  f"local stack does not bind; add it to sluice_dev.local.deployed.BINDINGS")
            if var in bindings:
                env[var] = bindings[var]
        else:
            env[var] = value
    unknown = sorted(set(bindings) - set(BINDINGS))
    if unknown:
        raise ConfigError(f"not known local bindings: {', '.join(unknown)}")
    env |= {var: bindings[var] for var in (*LOCAL_ONLY, *OWN) if var in bindings and var not in cfg.env}
    return env


def settings_of(env: Mapping[str, str], **extra: Any) -> Settings:
    """The Settings a process with this environment builds (``Settings.from_env`` in a child)."""
    fields = {k.removeprefix("SLUICE_").lower(): v for k, v in env.items() if k.startswith("SLUICE_")}
    known = {k: v for k, v in fields.items() if k in Settings.model_fields}
    return Settings(**{**known, **extra})
