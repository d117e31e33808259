"""The gateway functions' handler: one ``Gateway`` object, four kinds of caller.

Each kind of caller has its own Lambda function (template.yaml; issue 27), all running this code
with the kinds it serves: an event of another kind is refused (403 ``WRONG_FUNCTION``) before
any adapter is built, so nothing is read or written. The function's resource policy admits only
its caller; refusing the other shapes too means a caller it admits cannot reach another entry.

- ``GatewayFunction``: API requests, API Gateway REST proxy events (``sluice.entry.gateway_api``), or an
  HTTP API's payload 2.0 events, read as the REST event of the same request (``sluice.entry.http_api``);
  ``lambda_function`` here (``functions/gateway/app.py``);
- ``OperatorFunction``: proxy events for ``/v1/admin/...`` (``sluice.entry.gateway_operator``);
- ``InternalFunction``: a worker's children and continuations, the countdown's releases, a direct
  invoke from ``sluice.backends.aws.family_gateway`` (``sluice.entry.gateway_internal``);
- ``FiringsFunction``: EventBridge Scheduler's firings (``sluice.entry.gateway_scheduler``).

``Gateway(api)`` without ``serves`` answers every kind: the in-process harnesses (tests, chaos)
play all four functions with one object.

Cold start (docs/deploy.md): the HTTP surface (the gateway's router, its routes and their models) is
built at init only by the function that serves the public API, whose first request is an enqueue; the
operator function builds it on its first request (an operator's call: the admin routes' modules, the
jobs listing and the depth history, come with it), and the internal and firings functions never import
it (an event of a proxy's shape, which they refuse, imports it then).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Literal

from sluice.core.errors import ConfigError, WrongFunction
from sluice.core.version import __version__
from sluice.entry import gateway_internal, gateway_scheduler, http_api
from sluice.gateway.api import Api
from sluice.gateway.schedules import Schedules

if TYPE_CHECKING:
    from sluice.core.config import Settings
    from sluice.core.lazy import Lazy
    from sluice.core.ports import DepthLog, ParkedJobs, TimelineLog
    from sluice.core.routes import RouteCache
    from sluice.core.script_loads import ScriptIntake
    from sluice.gateway.http.app import HttpGateway
    from sluice.gateway.keyed import KeyStore

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]
Kind = Literal["api", "operator", "internal", "firing"]
EVERY_CALLER: Final[frozenset[Kind]] = frozenset({"api", "operator", "internal", "firing"})
PROXIED: Final[frozenset[Kind]] = frozenset({"api", "operator"})  # API Gateway's proxy events: HttpGateway
# Each function's one kind, by its template logical id (and its metrics' prefix).
FUNCTIONS: Final[dict[Kind, tuple[str, str]]] = {
    "api": ("GatewayFunction", "Gateway"), "operator": ("OperatorFunction", "Operator"),
    "internal": ("InternalFunction", "Internal"), "firing": ("FiringsFunction", "Firings")}


def is_proxy_event(event: Mapping[str, Any]) -> bool:
    """An API Gateway REST proxy event: a method, a path and a request context."""
    return isinstance(event.get("httpMethod"), str) and isinstance(event.get("path"), str) \
        and isinstance(event.get("requestContext"), Mapping)


def is_admin_path(path: str) -> bool:
    """``/v1/admin/...``, however spelled (case, doubled slashes): never the public function's."""
    from sluice.gateway.http import admin as admin_routes  # proxy events only (cold start, module doc)

    squeezed = "/".join(part for part in path.lower().split("/") if part)
    return f"/{squeezed}/".startswith(admin_routes.PREFIX)


def is_operator_call(event: Mapping[str, Any]) -> bool:
    """Whether an event of no known shape goes to the operator routes (``Gateway(api)``, every caller)."""
    from sluice.entry import gateway_operator

    return gateway_operator.is_operator_call(event)


def kind_of(event: object) -> Kind | None:
    """Which kind of caller sends an event of this shape; None: no kind's (refused by every function)."""
    if not isinstance(event, Mapping):
        return None
    if gateway_internal.is_internal(event):
        return "internal"
    if gateway_scheduler.is_firing(event):
        return "firing"
    if is_proxy_event(event):
        return "operator" if is_admin_path(str(event["path"])) else "api"
    return None


class Gateway:
    """The function's handler object: one per container, adapters built on first use."""

    def __init__(self, api: Api | Callable[[], Api], *, max_payload_bytes: int = 256 * 1024,
                 routes: RouteCache | None = None,
                 schedules: Schedules | Callable[[Api], Schedules] | None = None,
                 serves: frozenset[Kind] = EVERY_CALLER,
                 scripts: Callable[[], ScriptIntake] | None = None) -> None:
        self.serves = serves
        self._scripts = scripts  # the internal call that loads a worker's scripts; None: refused
        self._api_or_factory = api
        self._schedules = schedules  # None: no schedule routes (404), and a firing answers 500
        self._max_payload_bytes, self._routes = max_payload_bytes, routes
        self._http: HttpGateway | None = None
        if "api" in serves:
            _ = self.http  # built at init: the first enqueue's routes (cold start, module doc)

    @property
    def http(self) -> HttpGateway:
        """The REST surface (``sluice.gateway.http.app``), built on first use."""
        if self._http is None:
            from sluice.gateway.http.app import HttpGateway

            self._http = HttpGateway(lambda: self.api, max_payload_bytes=self._max_payload_bytes,
                                     routes=self._routes,
                                     schedules=None if self._schedules is None else lambda: self.schedules,
                                     version=__version__, timelines=_timeline_log, depths=_depth_log,
                                     parked=_parked_jobs)
        return self._http

    @property
    def api(self) -> Api:
        if not isinstance(self._api_or_factory, Api):
            self._api_or_factory = self._api_or_factory()
        return self._api_or_factory

    @property
    def schedules(self) -> Schedules:
        if self._schedules is None:
            raise ConfigError("this gateway keeps no schedules: set SLUICE_SCHEDULES_TABLE")
        if not isinstance(self._schedules, Schedules):
            self._schedules = self._schedules(self.api)
        return self._schedules

    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        if http_api.is_http_api_event(event):  # the small profile's HTTP API (payload 2.0; issue 33)
            return http_api.as_http_api_response(self(http_api.as_rest(event), context))
        kind = kind_of(event)
        if self.serves == EVERY_CALLER and kind is None:
            kind = "operator" if is_operator_call(event) else "api"  # one function's days
        if kind is None or kind not in self.serves:
            return self.refuse(event, kind)
        if kind == "internal":
            return gateway_internal.handle(lambda: self.api, event, self._scripts)
        if kind == "firing":
            return gateway_scheduler.handle(lambda: self.schedules, event)
        if kind == "operator":
            from sluice.entry import gateway_operator  # proxy events only (cold start, module doc)

            return gateway_operator.handle(self.http, lambda: self.api, event, context)
        from sluice.entry import gateway_api

        return gateway_api.handle(self.http, lambda: self.api, event, context)

    def refuse(self, event: Mapping[str, Any], kind: Kind | None) -> dict[str, Any]:
        """403 WRONG_FUNCTION in the shape the event's sender reads: a proxy response to a proxy
        event, else the internal entries' ``{"statusCode", "error"}``. Nothing is built or written."""
        serves = ", ".join(sorted(self.serves))
        exc = WrongFunction(function=_function_label(self.serves), serves=serves,
                            kind=kind or "an event of no known shape")
        if isinstance(event, Mapping) and "httpMethod" in event:
            from sluice.gateway.http import problems
            from sluice.gateway.http.app import problem_event

            return problem_event(problems.from_exception(exc, instance=str(event.get("path") or "")))
        return {"statusCode": 403, "error": {"code": exc.code, "message": str(exc), "details": {}}}

    def openapi_json(self) -> str:
        return self.http.openapi_json()


def _function_label(serves: frozenset[Kind]) -> str:
    return FUNCTIONS[next(iter(serves))][0] if len(serves) == 1 else "gateway"


# -- built from Settings ---------------------------------------------------------------------------

def check_settings(s: Settings) -> None:
    """Refuse to start (ConfigError) without a job id secret, or with malformed caller limits."""
    from sluice.core.throttle import CallerLimits

    if s.job_id_secret is None and not s.job_id_secret_arn:
        raise ConfigError("the gateway needs a job id secret: set SLUICE_JOB_ID_SECRET or "
                          "SLUICE_JOB_ID_SECRET_ARN (docs/api.md, Job ids)")
    CallerLimits.from_settings(s)  # a CallerLimits typo fails the cold start, not every request


def id_horizon_ms(s: Settings) -> int:
    """How long an unrecorded id counts as ``accepted``: Kafka's retention, at most ``retention_days``.

    A finished job's item lives ``retention_days`` after it finished, so within this horizon
    an id whose job was recorded always still has its item: GET never calls a finished job
    ``accepted`` because its item expired.
    """
    return min(s.job_id_horizon_hours * 3_600_000, s.retention_days * 86_400_000)


def idempotency(s: Settings) -> Lazy[KeyStore]:
    """Idempotency-Keys' records on the container's DynamoDB client, built on the first keyed request:
    a keyless enqueue loads neither the adapter nor boto3 (the gateway's cold start, issue 14)."""
    from sluice.core.lazy import Lazy

    def build() -> KeyStore:
        from sluice.backends.dynamodb.idempotency import DynamoKeyStore
        from sluice.entry import root as wiring

        return DynamoKeyStore.from_settings(s, client=wiring.dynamodb(s))

    return Lazy(build)


def build_api(settings: Settings | None = None) -> Api:
    """The use-cases over the real adapters from the composition root."""
    from sluice.core.limits import Limits
    from sluice.entry import root as wiring
    from sluice.gateway.admission import Admission
    from sluice.gateway.api import Backends, IdMinting, Intake, Policy

    s = settings or wiring.settings()
    check_settings(s)
    # Lazy: the first admission view builds the Redis client, so importing the gateway and
    # an enqueue whose queue view is cached load no redis (cold start, docs/deploy.md).
    queue = wiring.lazy_queue(settings)
    limits = Limits.from_settings(s)
    # The routes are read on the first enqueue (not at import), at most every route_cache_ttl_s.
    return Api(Backends(wiring.job_log(settings), wiring.lazy_store(settings), queue, events=wiring.events(),
                        families=wiring.lazy_families(settings), spans=wiring.enqueue_spans(s)),
               IdMinting(wiring.job_id_key(settings), wiring.previous_job_id_keys(settings),
                         refresh=lambda: wiring.refresh_job_id_keys(settings), horizon_ms=id_horizon_ms(s),
                         unsealed_before_ms=s.unsealed_continuations_before_ms),
               intake=Intake(s.max_payload_bytes,
                             Admission(queue, limits, ttl_ms=s.queue_view_ttl_ms),  # type: ignore[arg-type]
                             limits, wiring.routes(settings), refuse_unrouted=s.unrouted_queues == "refuse",
                             payloads=wiring.payload_store(s), inline_max_bytes=s.payload_inline_max_bytes,
                             delay_horizon_s=s.relay_delay_horizon_s,
                             registry=wiring.reservations(queue, settings)),
               policy=Policy([a.strip() for a in s.operator_principals.split(",") if a.strip()],
                             s.max_caller_priority, throttle=wiring.caller_throttle(settings)),
               idempotency=idempotency(s))


def gateway_from_settings(settings: Settings | None = None, *,
                          serves: frozenset[Kind] = EVERY_CALLER) -> Gateway:
    """A Gateway whose adapters are built on the first request (cold start stays cheap).

    The configuration is checked now, so a gateway without a job id secret fails its
    cold start instead of answering 500 to every request.
    """
    from sluice.entry import root as wiring

    s = settings or wiring.settings()
    check_settings(s)
    return Gateway(lambda: build_api(settings), max_payload_bytes=s.max_payload_bytes,
                   routes=wiring.routes(settings), schedules=wiring.schedules(s), serves=serves,
                   scripts=lambda: wiring.script_intake(settings))


def lambda_function(settings: Settings | None = None, *,
                    kind: Kind = "api") -> tuple[Gateway, Handler]:
    """The function serving ``kind`` (the public API by default: ``functions/gateway/app.py``): its
    Gateway and its Lambda handler (``instrumented``); called once per container, at init."""
    # Adapters (Kafka producer, clients) built on first use.
    gateway = gateway_from_settings(settings, serves=frozenset({kind}))
    return gateway, instrumented(gateway, kind)


def instrumented(gateway: Handler, kind: Kind) -> Handler:
    """``gateway`` as a Lambda handler, with Powertools' logger (a proxy request's correlation id) and one
    EMF count per answer that is not 2xx (``<Function>4xx``, ``<Function>5xx``; ``Gateway5xx`` for the
    public API).

    A 2xx answer writes no line (issue 33, docs/cost.md "Log volume"): API Gateway's ``Count`` less its
    4XX/5XX, and Lambda's ``Invocations`` for the direct callers, count those for nothing, and no alarm or
    dashboard reads a 2xx count. Its EMF line was 168 B a request, with Lambda's START/END/REPORT
    (template.yaml's ``GatewaySystemLogLevel`` drops those) $0.22 per million jobs."""
    from aws_lambda_powertools import Logger, Metrics
    from aws_lambda_powertools.logging import correlation_paths
    from aws_lambda_powertools.metrics import MetricUnit

    logger = Logger()
    metrics = Metrics(namespace="Sluice")
    prefix = FUNCTIONS[kind][1]
    proxied = kind in PROXIED

    @logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST if proxied else None)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        response = gateway(event, context)
        family = response["statusCode"] // 100
        if family != 2:
            metrics.add_metric(name=f"{prefix}{family}xx", unit=MetricUnit.Count, value=1)
            metrics.flush_metrics()
        return response

    return handler


def _parked_jobs() -> ParkedJobs | None:
    from sluice.entry import root as wiring

    return wiring.parked_jobs()


def _depth_log() -> DepthLog:
    from sluice.entry import root as wiring

    return wiring.depth_log()


def _timeline_log() -> TimelineLog:
    from sluice.entry import root as wiring

    return wiring.timeline_log()
