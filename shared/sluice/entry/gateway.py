"""The gateway function (template.yaml ``GatewayFunction``): one Lambda, four kinds of caller.

The function tells them apart by the event's shape and hands each to its own entry, which
verifies its caller and builds the ``Caller`` (``sluice.core.caller``) the enqueue pipeline reads:

- API requests, API Gateway REST proxy events: ``sluice.entry.gateway_api``;
- operator calls, proxy events for ``/v1/admin/...``: ``sluice.entry.gateway_operator``;
- internal calls (a worker's children and continuations, the countdown's releases), a direct
  invoke from ``sluice.backends.aws.family_gateway``: ``sluice.entry.gateway_internal``;
- schedule firings, EventBridge Scheduler's invoke: ``sluice.entry.gateway_scheduler``.

``lambda_function`` builds the function's handler from Settings (``functions/gateway/app.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sluice.core.errors import ConfigError
from sluice.core.version import __version__
from sluice.entry import gateway_api, gateway_internal, gateway_operator, gateway_scheduler
from sluice.gateway.api import Api
from sluice.gateway.http.app import HttpGateway
from sluice.gateway.schedules import Schedules

if TYPE_CHECKING:
    from sluice.core.config import Settings
    from sluice.core.routes import RouteCache
    from sluice.gateway.http.idempotency import PowertoolsIdempotency

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]


class Gateway:
    """The function's handler object: one per container, adapters built on first use."""

    def __init__(self, api: Api | Callable[[], Api], *, max_payload_bytes: int = 256 * 1024,
                 routes: RouteCache | None = None,
                 schedules: Schedules | Callable[[Api], Schedules] | None = None) -> None:
        self._api_or_factory = api
        self._schedules = schedules  # None: no schedule routes (404), and a firing answers 500
        self.http = HttpGateway(lambda: self.api, max_payload_bytes=max_payload_bytes, routes=routes,
                                schedules=None if schedules is None else lambda: self.schedules,
                                version=__version__)

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
        if gateway_internal.is_internal(event):
            return gateway_internal.handle(lambda: self.api, event)
        if gateway_scheduler.is_firing(event):
            return gateway_scheduler.handle(lambda: self.schedules, event)
        if gateway_operator.is_operator_call(event):
            return gateway_operator.handle(self.http, lambda: self.api, event, context)
        return gateway_api.handle(self.http, lambda: self.api, event, context)

    def openapi_json(self) -> str:
        return self.http.openapi_json()


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


def idempotency(s: Settings) -> PowertoolsIdempotency:
    """Idempotency-Keys on the container's DynamoDB client, built on the first keyed request."""
    from sluice.entry import root as wiring
    from sluice.gateway.http.idempotency import PowertoolsIdempotency

    return PowertoolsIdempotency.from_settings(s, build_client=lambda: wiring.dynamodb(s))


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
                        families=wiring.lazy_families(settings)),
               IdMinting(wiring.job_id_key(settings), wiring.previous_job_id_keys(settings),
                         refresh=lambda: wiring.refresh_job_id_keys(settings), horizon_ms=id_horizon_ms(s)),
               intake=Intake(s.max_payload_bytes,
                             Admission(queue, limits, ttl_ms=s.queue_view_ttl_ms),  # type: ignore[arg-type]
                             limits, wiring.routes(settings), refuse_unrouted=s.unrouted_queues == "refuse"),
               policy=Policy([a.strip() for a in s.operator_principals.split(",") if a.strip()],
                             s.max_caller_priority, throttle=wiring.caller_throttle(settings)),
               idempotency=idempotency(s))


def gateway_from_settings(settings: Settings | None = None) -> Gateway:
    """A Gateway whose adapters are built on the first request (cold start stays cheap).

    The configuration is checked now, so a gateway without a job id secret fails its
    cold start instead of answering 500 to every request.
    """
    from sluice.entry import root as wiring

    s = settings or wiring.settings()
    check_settings(s)
    return Gateway(lambda: build_api(settings), max_payload_bytes=s.max_payload_bytes,
                   routes=wiring.routes(settings), schedules=wiring.schedules(s))


def lambda_function(settings: Settings | None = None) -> tuple[Gateway, Handler]:
    """The function's Gateway and its Lambda handler, with Powertools' logging and metrics
    (one ``Gateway{2,4,5}xx`` count per answer); called once per container, at init."""
    from aws_lambda_powertools import Logger, Metrics
    from aws_lambda_powertools.logging import correlation_paths
    from aws_lambda_powertools.metrics import MetricUnit

    logger = Logger()
    metrics = Metrics(namespace="Sluice")
    gateway = gateway_from_settings(settings)  # adapters (Kafka producer, clients) built on first use

    @logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST)
    @metrics.log_metrics
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        response = gateway(event, context)
        metrics.add_metric(name=f"Gateway{response['statusCode'] // 100}xx", unit=MetricUnit.Count, value=1)
        return response

    return gateway, handler
