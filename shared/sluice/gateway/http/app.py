"""The gateway's HTTP surface: the gateway's REST router behind a strict body guard.

``HttpGateway.handle(event, context, caller)`` answers one API Gateway proxy event whose caller
its entry verified (``sluice.entry.gateway_api`` for API requests, ``sluice.entry.gateway_operator``
for the operator routes). For the routes that take a body it first runs ``jsonguard``'s checks of
the raw event body (content type, size, base64, UTF-8), as it did when Powertools' resolver, whose
body handling was lenient and left no hook before it, served these routes. The router
(``sluice.gateway.http.router``, which answers as that resolver did) then parses the checked text
with ``jsonguard.strict_loads`` (depth, duplicate keys, NaN, huge integers), and pydantic validates
the value against the same models that generate ``/v1/openapi.json`` (Powertools still writes the
document, from the same routes: ``sluice.gateway.http.openapi``, on its first request).

A router instance is not thread-safe (it keeps the current event on itself); a
Lambda container runs one request at a time, and ``local_server`` serialises calls.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Any, Final

from sluice.core import traces, wire
from sluice.core.caller import Caller
from sluice.core.errors import InvalidQueueName, SluiceError
from sluice.core.lazy import Lazy
from sluice.core.models import (
    IDEMPOTENCY_KEY_PATTERN,
    JOB_ID_PATTERN,
    QUEUE_NAME_PATTERN,
)
from sluice.gateway.admin import Admin
from sluice.gateway.api import Api, Enqueued
from sluice.gateway.http import admin as admin_routes
from sluice.gateway.http import jsonguard, problems, schedule_routes
from sluice.gateway.http.router import (
    APPLICATION_JSON,
    Body,
    Header,
    NotFoundError,
    OpenAPIResponse,
    Path,
    RequestValidationError,
    Response,
    Router,
)
from sluice.gateway.schedules import Schedules

if TYPE_CHECKING:
    from sluice.core.ports import DepthLog, ParkedJobs, TimelineLog
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
    description="1..128 printable ASCII characters, no comma (two headers arrive joined by one). "
                "Same key and body: the original job (200).")]
# Any, not a checked str: a malformed, oversized or repeated traceparent is ignored (a fresh trace),
# never a 4xx; an enqueue is not lost for its trace (sluice.core.traces).
TraceHeader = Annotated[Any, Header(
    alias="traceparent",
    description="W3C Trace Context: the caller's span (00-<32 hex trace id>-<16 hex span id>-<2 hex "
                "flags>). The job's spans join that trace; an invalid value is ignored (a fresh trace).")]


def _problem_response(p: wire.Problem, headers: dict[str, str] | None = None) -> Response[Any]:
    return Response(p.status, problems.PROBLEM_JSON, p.model_dump_json(exclude_none=True),
                    headers={**problems.headers_for(p), **(headers or {})})


def _problem_spec(description: str) -> OpenAPIResponse:
    return {"description": description, "content": {problems.PROBLEM_JSON: {"model": wire.Problem}}}


def _ok_spec(description: str, model: type[Any], headers: dict[str, Any] | None = None) -> OpenAPIResponse:
    spec: OpenAPIResponse = {"description": description,
                             "content": {APPLICATION_JSON: {"model": model}}}
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
_NO_ROUTE: Final = _problem_spec("No deployed worker handles this queue (code NO_ROUTE).")
_LOCATION: Final = {"Location": {"description": "/v1/jobs/{job_id}", "schema": {"type": "string"}}}


class HttpGateway:
    """The REST API: the enqueue, job and queue routes, the operator routes and the OpenAPI document."""

    def __init__(self, api: Callable[[], Api], *, max_payload_bytes: int = 256 * 1024,
                 routes: RouteCache | None = None, schedules: Callable[[], Schedules] | None = None,
                 version: str = "", timelines: Callable[[], TimelineLog] | None = None,
                 depths: Callable[[], DepthLog] | None = None,
                 parked: Callable[[], ParkedJobs | None] | None = None) -> None:
        self._api = api  # built on the first request that needs it (cold start)
        self._timelines = timelines  # jobs' timelines, for the operator route (issue 32)
        self._depths = depths  # queues' last hour of depths and waits, for the operator route
        self._parked = parked  # the parking lot, for the listing's state=parked (issue 32's review)
        self.version = version  # Sluice's, in the OpenAPI document
        self._schedules = schedules  # None: no schedule routes (404)
        self.max_payload_bytes = max_payload_bytes
        self._openapi: str | None = None
        self._routes = routes  # the typed queues' schemas in the OpenAPI document
        self._typed: tuple[Any, str] | None = None  # (route table, document with its schemas)
        self.router = self._build()

    @property
    def api(self) -> Api:
        return self._api()

    def handle(self, event: dict[str, Any], context: Any, caller: Caller) -> dict[str, Any]:
        """One proxy event from ``caller`` (as its entry verified it): the body's checks, then the route.

        An operator call's body is parsed here too: a route that takes no body never reads it,
        and a malformed one is refused on every operator route all the same."""
        path = str(event.get("path") or "")
        admin = path.startswith(admin_routes.PREFIX)
        limit = self._body_limit(event, path, admin)
        if limit is not None:
            try:
                event = _checked_body(event, limit, parse=admin)
            except SluiceError as exc:
                return problem_event(problems.from_exception(exc, instance=path))
        self.router.context["caller"] = caller  # the request's context: resolve clears it
        return self.router.resolve(event, context)

    def _body_limit(self, event: Mapping[str, Any], path: str, admin: bool) -> int | None:
        """The most bytes the request's body may have; None: a request whose body is not checked."""
        if admin:
            if not event.get("body"):
                return None
            return ENVELOPE_BYTES + (self.max_payload_bytes if schedule_routes.CREATE_PATH.match(path) else 0)
        body_route = _BODY_ROUTES.match(path)
        if str(event.get("httpMethod", "")).upper() != "POST" or body_route is None:
            return None
        return BATCH_BODY_BYTES if body_route.group("batch") else self.max_payload_bytes + ENVELOPE_BYTES

    def _admin_use_cases(self) -> Admin:
        api, pipeline = self.api, self.api.pipeline
        return Admin(api.queue, Lazy(lambda: api.store), pipeline.log, routes=pipeline.route_table(),
                     refuse_unrouted=pipeline.refuse_unrouted, reseal=pipeline.reseal_now,
                     limits=pipeline.limits, registry=pipeline.registry,
                     timelines=self._timelines, depths=self._depths, parked=self._parked)

    def openapi_json(self) -> str:
        if self._openapi is None:
            self._openapi = build_openapi(self.router, self.version)
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

    def _build(self) -> Router:  # noqa: C901 - one closure per route reads best
        # The body's text passed ``_checked_body``: the strict parser refuses what json.loads lets through.
        app = Router(json_body_deserializer=jsonguard.strict_loads)

        def remaining_ms() -> Callable[[], int] | None:
            ctx = app.lambda_context
            fn = getattr(ctx, "get_remaining_time_in_millis", None)
            return fn if callable(fn) else None

        def caller() -> Caller:
            found: Caller = app.context["caller"]
            return found

        @app.post("/v1/queues/<queue>/jobs", status_code=202, operation_id="enqueue", tags=["jobs"],
                  summary="Enqueue one job; 202 only after Kafka acknowledged it.",
                  responses={202: _ok_spec("Accepted.", wire.Accepted, _LOCATION),
                             200: _ok_spec("Replay of an earlier request with this Idempotency-Key.",
                                           wire.Accepted, _LOCATION), **_BODY})
        def enqueue(queue: QueueParam, job: Annotated[wire.EnqueueRequest, Body()],
                    idempotency_key: KeyHeader = None,
                    traceparent: TraceHeader = None) -> Response[wire.Accepted]:
            who = caller()
            return _accepted(self.api.enqueue(queue, job, idempotency_key=who.own_key(idempotency_key),
                                              remaining_ms=remaining_ms(), caller=who,
                                              traceparent=traces.carried(traceparent)),
                             app.current_event.base_path)

        @app.post("/v1/queues/<queue>/jobs/batch", status_code=202, operation_id="enqueue_batch",
                  tags=["jobs"], summary="Enqueue 1..100 jobs, all or nothing.",
                  responses={202: _ok_spec("Accepted, one result per job in order.", wire.BatchAccepted),
                             200: _ok_spec("Replay of an earlier request with this Idempotency-Key.",
                                           wire.BatchAccepted), **_BODY})
        def enqueue_batch(queue: QueueParam, batch: Annotated[wire.BatchRequest, Body()],
                          idempotency_key: KeyHeader = None,
                          traceparent: TraceHeader = None) -> Response[wire.BatchAccepted]:
            who = caller()
            return _accepted(self.api.enqueue_batch(queue, batch, remaining_ms=remaining_ms(), caller=who,
                                                    idempotency_key=who.own_key(idempotency_key),
                                                    traceparent=traces.carried(traceparent)),
                             app.current_event.base_path)

        @app.get("/v1/jobs/<job_id>", operation_id="get_job", tags=["jobs"],
                 summary="A job's status, attempts, timestamps, and result or last error.",
                 responses={200: _ok_spec("The job.", wire.JobView), **_COMMON,
                            404: _problem_spec("No such job (or it expired).")})
        def get_job(job_id: JobIdParam) -> wire.JobView:
            return self.api.status(job_id)

        @app.delete("/v1/jobs/<job_id>", status_code=202, operation_id="cancel_job", tags=["jobs"],
                    summary="Cancel a job that has not finished.",
                    responses={202: _ok_spec("Cancellation accepted.", wire.CancelAccepted), **_COMMON,
                               404: _problem_spec("No such job."),
                               409: _problem_spec("The job already finished.")})
        def cancel_job(job_id: JobIdParam) -> Response[wire.CancelAccepted]:
            return Response(202, APPLICATION_JSON, self.api.cancel(job_id))

        @app.get("/v1/queues/<queue>", operation_id="get_queue", tags=["queues"],
                 summary="Depths, oldest ready job's age, rate limit and paused flag.",
                 responses={200: _ok_spec("The queue.", wire.QueueView), **_COMMON,
                            404: _NO_ROUTE})
        def get_queue(queue: QueueParam) -> wire.QueueView:
            return self.api.stats(queue)

        if self._schedules is not None:  # only a gateway with a schedule store serves (and documents) them
            schedule_routes.add_routes(app, self._schedules, _problem_spec, _ok_spec, _COMMON)
        admin_routes.register(app, self._admin_use_cases, {
            **_COMMON, 403: _problem_spec("The caller is not an operator (code NOT_OPERATOR)."),
            404: _NO_ROUTE,
            200: {"description": "Done."}})

        @app.get("/v1/openapi.json", include_in_schema=False)
        def openapi() -> Response[Any]:
            return Response(200, APPLICATION_JSON, self.openapi_json())

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

    Media types are case-insensitive (``APPLICATION/JSON``), but the router compares the header
    case-sensitively, as Powertools' validation did (which raised on any other spelling: a 500). The
    body was parsed by the guard, so the header only has to pass that comparison.
    """
    headers = {k: v for k, v in (event.get("headers") or {}).items() if k.lower() != "content-type"}
    return {**event, "headers": {**headers, "Content-Type": "application/json"}}


def _checked_body(event: dict[str, Any], max_bytes: int, *, parse: bool) -> dict[str, Any]:
    """The event with its body as the text ``jsonguard`` checked (media type, size, base64, UTF-8),
    for the resolver's strict parser; ``parse``: parse it now too (``HttpGateway.handle``)."""
    text = jsonguard.checked_text(event.get("body"), is_base64=bool(event.get("isBase64Encoded")),
                                  content_type=jsonguard.header(event.get("headers"), "content-type"),
                                  max_bytes=max_bytes)
    if parse:
        jsonguard.strict_loads(text)
    return {**_canonical_json(event), "body": text, "isBase64Encoded": False}


def problem_event(p: wire.Problem, exc: BaseException | None = None) -> dict[str, Any]:
    return {"statusCode": p.status, "body": p.model_dump_json(exclude_none=True), "isBase64Encoded": False,
            "headers": {"Content-Type": problems.PROBLEM_JSON, **problems.headers_for(p, exc)}}


def _accepted(outcome: Enqueued, base_path: str) -> Response[Any]:
    headers = {"Idempotent-Replayed": "true"} if outcome.replayed else {}
    if isinstance(outcome.body, wire.Accepted):  # under the caller's stage or base path, as it called
        headers["Location"] = f"{base_path}/v1/jobs/{outcome.body.job_id}"
    return Response(200 if outcome.replayed else 202, APPLICATION_JSON, outcome.body,
                    headers=headers)


def _sluice_problem(exc: SluiceError, method: str, path: str) -> Response[Any]:
    p = problems.from_exception(exc, instance=path)
    if p.status >= 500:
        log.warning("%s %s -> %s: %r", method, path, p.status, exc)
    return _problem_response(p, problems.headers_for(p, exc))


def _unrouted(method: str, path: str) -> tuple[wire.Problem, dict[str, str]]:
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


def build_openapi(routes: Router, version: str) -> str:
    """The OpenAPI 3.1 document Powertools generates from the route signatures and models (the
    router's Powertools twin, ``sluice.gateway.http.openapi``: imported by the first call only).

    Powertools adds its own 422 schema (``HTTPValidationError``) to every operation; our
    routes declare their own 422, so the unused component schemas are dropped.
    """
    from sluice.gateway.http import openapi

    doc = json.loads(openapi.twin(routes).get_openapi_json_schema(
        title="Sluice enqueue gateway", version=version,
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
