"""The gateway's HTTP surface: a Powertools REST resolver behind a strict body guard.

``Gateway(event, context)`` is the Lambda handler. For the two POST routes it first
runs ``jsonguard`` on the raw event body (content type, size, base64, UTF-8, depth,
duplicate keys, NaN, huge integers), because Powertools' own body parsing happens
inside its validation middleware, before any hook of ours, and is lenient. The parsed
value is then handed to Powertools through ``json_body_deserializer``, and pydantic
validates it against the same models that generate ``/v1/openapi.json``.

A resolver instance is not thread-safe (it keeps the current event on itself); a
Lambda container runs one request at a time, and ``local_server`` serialises calls.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Any, Final

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Path
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse
from pydantic import ValidationError

from sluice import __version__
from sluice.core import families as flows
from sluice.core import schedules
from sluice.core.caller import Caller
from sluice.core.errors import ConfigError, InvalidInput, InvalidQueueName, SluiceError
from sluice.core.models import (
    IDEMPOTENCY_KEY_PATTERN,
    JOB_ID_PATTERN,
    QUEUE_NAME_PATTERN,
    describe_validation,
)
from sluice.core.wire import (
    Accepted,
    BatchAccepted,
    BatchRequest,
    CancelAccepted,
    EnqueueRequest,
    JobView,
    Problem,
    QueueView,
)
from sluice.gateway.admin import Admin, authorize
from sluice.gateway.api import Api, Enqueued
from sluice.gateway.http import admin as admin_routes
from sluice.gateway.http import jsonguard, problems, schedule_routes
from sluice.gateway.schedules import Schedules

if TYPE_CHECKING:
    from sluice.core.config import Settings
    from sluice.core.routes import RouteCache, RouteTable

log = logging.getLogger(__name__)

ENVELOPE_BYTES: Final = 64 * 1024  # room for the JSON around one maximal payload
BATCH_BODY_BYTES: Final = 10 * 1024 * 1024  # API Gateway's own request limit
_BODY_ROUTES = re.compile(r"^/v1/queues/[^/]*/jobs(?P<batch>/batch)?/?$")
_SHAPES: Final = (  # for 405 vs 404, and 400 for a malformed queue name in a known shape
    (re.compile(r"^/v1/queues/(?P<queue>[^/]*)/jobs/?$"), ("POST",)),
    (re.compile(r"^/v1/queues/(?P<queue>[^/]*)/jobs/batch/?$"), ("POST",)),
    (re.compile(r"^/v1/queues/(?P<queue>[^/]*)/?$"), ("GET",)),
    (re.compile(r"^/v1/jobs/[^/]+/?$"), ("GET", "DELETE")),
    (re.compile(r"^/v1/openapi\.json$"), ("GET",)),
    *schedule_routes.SHAPES,
    *admin_routes.SHAPES,
)

QueueParam = Annotated[str, Path(pattern=QUEUE_NAME_PATTERN, description=(
    "Queue name. Names starting with sluice- are reserved for Sluice's own queues (400)."))]
JobIdParam = Annotated[str, Path(pattern=JOB_ID_PATTERN, description="Job id from the 202 response.")]
KeyHeader = Annotated[str | None, Header(
    alias="Idempotency-Key", pattern=IDEMPOTENCY_KEY_PATTERN,
    description="1..128 printable ASCII characters. Same key and body: the original job (200).")]


def _problem_response(p: Problem, headers: dict[str, str] | None = None) -> Response[Any]:
    return Response(p.status, problems.PROBLEM_JSON, p.model_dump_json(exclude_none=True),
                    headers={**problems.headers_for(p), **(headers or {})})


def _problem_spec(description: str) -> OpenAPIResponse:
    return {"description": description, "content": {problems.PROBLEM_JSON: {"model": Problem}}}


def _ok_spec(description: str, model: type[Any], headers: dict[str, Any] | None = None) -> OpenAPIResponse:
    spec: OpenAPIResponse = {"description": description,
                             "content": {content_types.APPLICATION_JSON: {"model": model}}}
    if headers:
        spec["headers"] = headers
    return spec


_COMMON: Final[dict[int, OpenAPIResponse]] = {400: _problem_spec("Invalid path or header parameter."),
                  503: _problem_spec("A backend is unavailable; retry after Retry-After seconds.")}
_BODY: Final[dict[int, OpenAPIResponse]] = {
    **_COMMON,
    400: _problem_spec("Malformed or invalid body (errors[] names the failing fields and job index), "
                       "or a payload that does not match a typed queue's schema (code PAYLOAD_INVALID)."),
    404: _problem_spec("No deployed worker handles this queue (code NO_ROUTE): routes are registered "
                       "and none covers it."),
    409: _problem_spec("A request with the same Idempotency-Key is still in progress."),
    413: _problem_spec("Payload over the configured limit."),
    415: _problem_spec("Content-Type is not application/json."),
    422: _problem_spec("Idempotency-Key reused with a different request."),
}
_LOCATION: Final = {"Location": {"description": "/v1/jobs/{job_id}", "schema": {"type": "string"}}}


class Gateway:
    """The Lambda handler object: one per container, adapters built on first use."""

    def __init__(self, api: Api | Callable[[], Api], *, max_payload_bytes: int = 256 * 1024,
                 routes: RouteCache | None = None,
                 schedules: Schedules | Callable[[Api], Schedules] | None = None) -> None:
        self._api_or_factory = api
        self._schedules = schedules  # None: no schedule routes (404), and a firing answers 500
        self.max_payload_bytes = max_payload_bytes
        self._body: Any = None
        self._openapi: str | None = None
        self._routes = routes  # the typed queues' schemas in the OpenAPI document
        self._typed: tuple[Any, str] | None = None  # (route table, document with its schemas)
        self.resolver = self._build()

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
        if flows.INTERNAL in event and "httpMethod" not in event:
            return self.internal(event)
        if schedule_routes.is_fire_event(event):
            return self.fire(event)
        path = str(event.get("path") or "")
        if path.startswith(admin_routes.PREFIX):
            return self._admin(event, context, path)
        body_route = _BODY_ROUTES.match(path)
        if str(event.get("httpMethod", "")).upper() == "POST" and body_route:
            limit = BATCH_BODY_BYTES if body_route.group("batch") else self.max_payload_bytes + ENVELOPE_BYTES
            try:
                self._body = jsonguard.parse_body(
                    event.get("body"), is_base64=bool(event.get("isBase64Encoded")),
                    content_type=jsonguard.header(event.get("headers"), "content-type"), max_bytes=limit)
            except SluiceError as exc:
                return _problem_event(problems.from_exception(exc, instance=path))
            try:
                return self.resolver.resolve(_canonical_json(event), context)
            finally:
                self._body = None
        return self.resolver.resolve(event, context)

    def _admin(self, event: dict[str, Any], context: Any, path: str) -> dict[str, Any]:
        """The operator API: the caller is checked first, then the body, then the route."""
        try:
            authorize(_principal(event), self.api.operators)
            if event.get("body"):
                self._body = jsonguard.parse_body(
                    event.get("body"), is_base64=bool(event.get("isBase64Encoded")),
                    content_type=jsonguard.header(event.get("headers"), "content-type"),
                    max_bytes=ENVELOPE_BYTES + (
                        self.max_payload_bytes if schedule_routes.CREATE_PATH.match(path) else 0))
        except SluiceError as exc:
            return _problem_event(problems.from_exception(exc, instance=path))
        try:
            return self.resolver.resolve(_canonical_json(event) if self._body is not None else event, context)
        finally:
            self._body = None

    def _admin_use_cases(self) -> Admin:
        api = self.api
        return Admin(api.queue, api.store, api.log, routes=api.route_table(),
                     refuse_unrouted=api.refuse_unrouted)

    def internal(self, event: dict[str, Any]) -> dict[str, Any]:
        """The direct-invoke entry (worker, relay): start children, or release a continuation.

        API Gateway never sends such an event (its proxy events carry ``httpMethod``), so only a
        principal allowed ``lambda:InvokeFunction`` on this function reaches it (docs/security.md).
        Answers ``{"statusCode", "family"}`` or ``{"statusCode", "error": {"code", "message"}}``.
        """
        try:
            request = flows.family_event(event)
            if isinstance(request, flows.ReleaseRequest):
                released = self.api.release_continuation(request.continuation)
                return {"statusCode": 200, "released": released}
            assert request is not None
            accepted = self.api.enqueue_children(request)
            return {"statusCode": 202, "family": accepted.model_dump(mode="json")}
        except ValidationError as exc:
            error: SluiceError = InvalidInput(f"invalid family request ({describe_validation(exc)})")
        except SluiceError as exc:
            error = exc
        p = problems.from_exception(error)
        return {"statusCode": p.status, "error": {"code": error.code, "message": str(error),
                                                  "details": _jsonable(error.details)}}

    def fire(self, event: dict[str, Any]) -> dict[str, Any]:
        """EventBridge Scheduler's invoke: one firing's job. A refusal (4xx: a deleted schedule, a
        queue no longer routed) answers, so Scheduler does not retry it; an outage raises, so it does."""
        try:
            return schedule_routes.fire_event(self.schedules, event)
        except SluiceError as exc:
            p = problems.from_exception(exc)
            if p.status >= 500:
                raise
            log.warning("schedule firing %r refused: %s", event.get(schedules.FIRE_KEY), exc)
            return {"statusCode": p.status, "error": {"code": exc.code, "message": str(exc)}}

    def openapi_json(self) -> str:
        if self._openapi is None:
            self._openapi = build_openapi(self.resolver)
        if self._routes is None:
            return self._openapi
        try:
            table = self._routes.table()
        except SluiceError:
            table = self._routes.last()
        if self._typed is None or self._typed[0] is not table:  # rebuilt when the routes change
            self._typed = (table, with_payload_schemas(self._openapi, table))
        return self._typed[1]

    # -- routes ------------------------------------------------------------------------------

    def _build(self) -> APIGatewayRestResolver:  # noqa: C901 - one closure per route reads best
        app = APIGatewayRestResolver(enable_validation=True, json_body_deserializer=lambda _text: self._body)

        def remaining_ms() -> Callable[[], int] | None:
            ctx = app.lambda_context
            fn = getattr(ctx, "get_remaining_time_in_millis", None)
            return fn if callable(fn) else None

        def scope() -> str:
            return _caller(app.current_event)

        @app.post("/v1/queues/<queue>/jobs", status_code=202, operation_id="enqueue", tags=["jobs"],
                  summary="Enqueue one job; 202 only after Kafka acknowledged it.",
                  responses={202: _ok_spec("Accepted.", Accepted, _LOCATION),
                             200: _ok_spec("Replay of an earlier request with this Idempotency-Key.",
                                           Accepted, _LOCATION), **_BODY})
        def enqueue(queue: QueueParam, job: Annotated[EnqueueRequest, Body()],
                    idempotency_key: KeyHeader = None) -> Response[Accepted]:
            key = None if idempotency_key is None else f"{scope()}|{idempotency_key}"
            return _accepted(self.api.enqueue(queue, job, idempotency_key=key, remaining_ms=remaining_ms(),
                                              caller=_verified(app.current_event, self.api)))

        @app.post("/v1/queues/<queue>/jobs/batch", status_code=202, operation_id="enqueue_batch",
                  tags=["jobs"], summary="Enqueue 1..100 jobs, all or nothing.",
                  responses={202: _ok_spec("Accepted, one result per job in order.", BatchAccepted),
                             200: _ok_spec("Replay of an earlier request with this Idempotency-Key.",
                                           BatchAccepted), **_BODY})
        def enqueue_batch(queue: QueueParam, batch: Annotated[BatchRequest, Body()],
                          idempotency_key: KeyHeader = None) -> Response[BatchAccepted]:
            key = None if idempotency_key is None else f"{scope()}|{idempotency_key}"
            return _accepted(self.api.enqueue_batch(queue, batch, idempotency_key=key,
                                                    remaining_ms=remaining_ms(),
                                                    caller=_verified(app.current_event, self.api)))

        @app.get("/v1/jobs/<job_id>", operation_id="get_job", tags=["jobs"],
                 summary="A job's status, attempts, timestamps, and result or last error.",
                 responses={200: _ok_spec("The job.", JobView), **_COMMON,
                            404: _problem_spec("No such job (or it expired).")})
        def get_job(job_id: JobIdParam) -> JobView:
            return self.api.status(job_id)

        @app.delete("/v1/jobs/<job_id>", status_code=202, operation_id="cancel_job", tags=["jobs"],
                    summary="Cancel a job that has not finished.",
                    responses={202: _ok_spec("Cancellation accepted.", CancelAccepted), **_COMMON,
                               404: _problem_spec("No such job."),
                               409: _problem_spec("The job already finished.")})
        def cancel_job(job_id: JobIdParam) -> Response[CancelAccepted]:
            return Response(202, content_types.APPLICATION_JSON, self.api.cancel(job_id))

        @app.get("/v1/queues/<queue>", operation_id="get_queue", tags=["queues"],
                 summary="Depths, oldest ready job's age, rate limit and paused flag.",
                 responses={200: _ok_spec("The queue.", QueueView), **_COMMON,
                            404: _problem_spec("No deployed worker handles this queue (code NO_ROUTE).")})
        def get_queue(queue: QueueParam) -> QueueView:
            return self.api.stats(queue)

        if self._schedules is not None:  # only a gateway with a schedule store serves (and documents) them
            schedule_routes.add_routes(app, lambda: self.schedules, _problem_spec, _ok_spec, _COMMON)
        admin_routes.register(app, self._admin_use_cases, {
            **_COMMON, 403: _problem_spec("The caller is not an operator (code NOT_OPERATOR)."),
            404: _problem_spec("No deployed worker handles this queue (code NO_ROUTE)."),
            200: {"description": "Done."}})

        @app.get("/v1/openapi.json", include_in_schema=False)
        def openapi() -> Response[Any]:
            return Response(200, content_types.APPLICATION_JSON, self.openapi_json())

        def invalid(exc: RequestValidationError) -> Response[Any]:
            return _problem_response(problems.from_validation(exc.errors(), instance=app.current_event.path))

        def sluice_error(exc: SluiceError) -> Response[Any]:
            return _sluice_problem(exc, app.current_event.http_method, app.current_event.path)

        def unexpected(exc: Exception) -> Response[Any]:
            log.exception("unhandled error on %s %s", app.current_event.http_method, app.current_event.path)
            return _problem_response(problems.from_exception(exc, instance=app.current_event.path))

        def not_found(_exc: NotFoundError) -> Response[Any]:
            event = app.current_event
            return _problem_response(*_unrouted(event.http_method.upper(), event.path))

        app.exception_handler(RequestValidationError)(invalid)
        app.exception_handler(SluiceError)(sluice_error)
        app.exception_handler(Exception)(unexpected)
        app.not_found(not_found)

        return app


def _canonical_json(event: dict[str, Any]) -> dict[str, Any]:
    """The event with its Content-Type spelled ``application/json``, once ``jsonguard`` accepted it.

    Media types are case-insensitive (``APPLICATION/JSON``), but Powertools' validation compares
    the header case-sensitively and raised on any other spelling (a 500). The body is parsed
    by the guard, never by Powertools, so the header only has to pass that comparison.
    """
    headers = {k: v for k, v in (event.get("headers") or {}).items() if k.lower() != "content-type"}
    return {**event, "headers": {**headers, "Content-Type": "application/json"}}


def _problem_event(p: Problem) -> dict[str, Any]:
    return {"statusCode": p.status, "body": p.model_dump_json(exclude_none=True), "isBase64Encoded": False,
            "headers": {"Content-Type": problems.PROBLEM_JSON, **problems.headers_for(p)}}


def _accepted(outcome: Enqueued) -> Response[Any]:
    headers = {"Idempotent-Replayed": "true"} if outcome.replayed else {}
    if isinstance(outcome.body, Accepted):
        headers["Location"] = f"/v1/jobs/{outcome.body.job_id}"
    return Response(200 if outcome.replayed else 202, content_types.APPLICATION_JSON, outcome.body,
                    headers=headers)


def _sluice_problem(exc: SluiceError, method: str, path: str) -> Response[Any]:
    p = problems.from_exception(exc, instance=path)
    if p.status >= 500:
        log.warning("%s %s -> %s: %r", method, path, p.status, exc)
    return _problem_response(p, problems.headers_for(p, exc))


def _caller(event: Mapping[str, Any]) -> str:
    """Whom Idempotency-Keys are scoped to: two tenants may pick the same key."""
    identity = (event.get("requestContext") or {}).get("identity") or {}
    return str(identity.get("userArn") or identity.get("apiKeyId") or "")


def _principal(event: Mapping[str, Any]) -> str:
    """The caller's IAM ARN as API Gateway verified its signature; "" without SigV4 (API keys)."""
    identity = (event.get("requestContext") or {}).get("identity") or {}
    return str(identity.get("userArn") or "")


def _verified(event: Mapping[str, Any], api: Api) -> Caller:
    return Caller.verified(_principal(event), _caller(event), operators=api.operators,
                           max_caller_priority=api.max_caller_priority)


def _unrouted(method: str, path: str) -> tuple[Problem, dict[str, str]]:
    """404, or 405 with Allow for a known path, or 400 for a known shape with a bad queue name."""
    for shape, allowed in _SHAPES:
        match = shape.match(path)
        if match is None:
            continue
        queue = match.groupdict().get("queue")
        if queue is not None and re.fullmatch(QUEUE_NAME_PATTERN, queue) is None:
            exc = InvalidQueueName(f"invalid queue name {queue!r}: must match {QUEUE_NAME_PATTERN}")
            return problems.from_exception(exc, instance=path), {}
        if method not in allowed:
            detail = f"{method} is not allowed here; use {', '.join(allowed)}"
            return (problems.problem(problems.METHOD_NOT_ALLOWED, detail, code="METHOD_NOT_ALLOWED",
                                     instance=path), {"Allow": ", ".join(allowed)})
    return problems.problem(problems.NOT_FOUND, f"no route for {method} {path}", code="NOT_FOUND",
                            instance=path), {}


def build_openapi(resolver: APIGatewayRestResolver) -> str:
    """The OpenAPI 3.1 document Powertools generates from the route signatures and models.

    Powertools adds its own 422 schema (``HTTPValidationError``) to every operation; our
    routes declare their own 422, so the unused component schemas are dropped.
    """
    doc = json.loads(resolver.get_openapi_json_schema(
        title="Sluice enqueue gateway", version=__version__,
        description="Enqueue jobs durably (Kafka-acknowledged) and query or cancel them. "
                    "Errors are RFC 9457 problem documents (application/problem+json)."))
    for operation in (op for item in doc["paths"].values() for op in item.values()):
        default_422 = operation["responses"].get("422", {}).get("content", {}).get("application/json", {})
        if "HTTPValidationError" in json.dumps(default_422):
            del operation["responses"]["422"]  # this operation never answers 422
        for param in operation.get("parameters", []):
            options = param["schema"].get("anyOf", [])
            if not param["required"] and len(options) == 2 and {"type": "null"} in options:
                # An optional header is absent, never null: describe the value when present.
                present = next(o for o in options if o != {"type": "null"})
                param["schema"] = {**{k: v for k, v in param["schema"].items() if k != "anyOf"}, **present}
    schemas = doc.get("components", {}).get("schemas", {})
    text = json.dumps(doc["paths"])
    for unused in ("HTTPValidationError", "ValidationError", "ResponseValidationError"):
        if f"#/components/schemas/{unused}" not in text:
            schemas.pop(unused, None)
    return json.dumps(doc, separators=(",", ":"))


def with_payload_schemas(document: str, table: RouteTable) -> str:
    """The document plus each typed queue's payload schema: ``components.schemas`` gets
    ``Payload_<queue>``, and ``x-sluice-typed-queues`` maps each queue to it (its enqueue routes
    accept only payloads that match; 400 PAYLOAD_INVALID otherwise)."""
    typed = {q: s for r in table.routes for q, s in sorted(r.schemas.items())}
    if not typed:
        return document
    doc = json.loads(document)
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    listing = {}
    for queue, schema in typed.items():
        name = f"Payload_{queue}"
        schemas[name] = _rebase_refs(schema, f"#/components/schemas/{name}")
        listing[queue] = {"$ref": f"#/components/schemas/{name}"}
    doc["x-sluice-typed-queues"] = listing
    return json.dumps(doc, separators=(",", ":"))


def _rebase_refs(value: Any, base: str) -> Any:
    """A schema's own ``#/...`` references (pydantic's ``#/$defs/X``), made to point inside it
    once it sits at ``base`` in another document."""
    if isinstance(value, dict):
        return {k: (base + v[1:] if k == "$ref" and isinstance(v, str) and v.startswith("#/") else
                    _rebase_refs(v, base)) for k, v in value.items()}
    if isinstance(value, list):
        return [_rebase_refs(v, base) for v in value]
    return value


def check_settings(s: Settings) -> None:
    """Refuse to start (ConfigError) without a job id secret."""
    if s.job_id_secret is None and not s.job_id_secret_arn:
        raise ConfigError("the gateway needs a job id secret: set SLUICE_JOB_ID_SECRET or "
                          "SLUICE_JOB_ID_SECRET_ARN (docs/api.md, Job ids)")


def id_horizon_ms(s: Settings) -> int:
    """How long an unrecorded id counts as ``accepted``: Kafka's retention, at most ``retention_days``.

    A finished job's item lives ``retention_days`` after it finished, so within this horizon
    an id whose job was recorded always still has its item: GET never calls a finished job
    ``accepted`` because its item expired.
    """
    return min(s.job_id_horizon_hours * 3_600_000, s.retention_days * 86_400_000)


def build_api(settings: Settings | None = None) -> Api:
    """The use-cases over the real adapters from the composition root."""
    from sluice.entry import root as wiring
    from sluice.gateway.http.idempotency import PowertoolsIdempotency

    s = settings or wiring.settings()
    check_settings(s)
    from sluice.core.limits import Limits
    from sluice.gateway.admission import Admission
    from sluice.gateway.api import Backends, IdMinting, Intake, Policy

    # Lazy: the first admission view builds the Redis client, so importing the gateway and
    # an enqueue whose queue view is cached load no redis (cold start, docs/deploy.md).
    queue = wiring.lazy_queue(settings)
    limits = Limits.from_settings(s)
    # The routes are read on the first enqueue (not at import), at most every route_cache_ttl_s.
    return Api(Backends(wiring.job_log(settings), wiring.lazy_store(settings), queue, events=wiring.events()),
               IdMinting(wiring.job_id_key(settings), wiring.previous_job_id_keys(settings),
                         refresh=lambda: wiring.refresh_job_id_keys(settings), horizon_ms=id_horizon_ms(s)),
               intake=Intake(s.max_payload_bytes,
                             Admission(queue, limits, ttl_ms=s.queue_view_ttl_ms),  # type: ignore[arg-type]
                             limits, wiring.routes(settings), refuse_unrouted=s.unrouted_queues == "refuse"),
               policy=Policy([a.strip() for a in s.operator_principals.split(",") if a.strip()],
                             s.max_caller_priority),
               idempotency=PowertoolsIdempotency.from_settings(s))


def _jsonable(details: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in details.items() if isinstance(v, str | int | float | bool) or v is None}


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
