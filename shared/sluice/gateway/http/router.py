"""The gateway's router: API Gateway REST proxy events to route functions, as Powertools' resolver did.

Powertools' ``APIGatewayRestResolver`` served these routes until session 35 (issue 30, item 3). Its
package's ``__init__`` imports every resolver it has (AppSync's, with asyncio, Bedrock's, VPC
Lattice's) and thirty event sources' classes, about a fifth of the gateway's and operator's cold
start, to answer the few routes here. This router keeps what the gateway used of it, the same way:

- a route's rule (``/v1/jobs/<job_id>``) matches the path with any trailing slashes; a ``<name>``
  takes the URI characters Powertools' does; static rules are tried before dynamic ones;
- each parameter is declared ``Annotated[T, Path(...)|Query(...)|Header(...)|Body()]`` and
  validated with pydantic as Powertools' validation did (``TypeAdapter(Annotated[T, Field(...)])``,
  ``loc`` = (where, name), a header's name lowercased, one body model not embedded), and all
  failures raise one ``RequestValidationError`` before the route runs;
- a route's return value is validated and dumped against its return annotation (``Response[T]``'s
  ``T``), JSON bodies serialised compactly; the answer is the REST proxy shape
  (``multiValueHeaders``);
- exception handlers are looked up along the exception's MRO; an unmatched request raises
  ``NotFoundError`` to its handler.

The OpenAPI document is still Powertools' (``openapi.powertools_twin``): built on the first
``/v1/openapi.json`` request from these same routes. ``tests/unit/test_router_parity.py`` runs
hostile and ordinary requests through both and compares the answers.

An instance keeps the current request on itself: one request at a time, as a Lambda container
runs them (``local_server`` serialises calls).
"""

from __future__ import annotations

import base64
import inspect
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Generic, TypeVar, Union, get_args, get_origin, get_type_hints
from urllib.parse import parse_qs

T = TypeVar("T")
APPLICATION_JSON = "application/json"
OpenAPIResponse = dict[str, Any]  # a route's ``responses`` entry, as the OpenAPI document has it
_DYNAMIC = re.compile(r"(<\w+>)")
_GROUP = r"(?P\1[-._~()'!*:@,;=+&$%<> \[\]{}|^\\w]+)"  # Powertools' safe and unsafe URI characters


class Param:
    """Where a route parameter comes from, and pydantic's constraints on it (``pattern``, ``ge``...)."""

    where = ""

    def __init__(self, *, alias: str | None = None, description: str | None = None,
                 **constraints: Any) -> None:
        self.alias, self.description, self.constraints = alias, description, constraints

    def field(self) -> Any:
        from pydantic import Field

        return Field(**self.constraints)


class Path(Param):
    where = "path"


class Query(Param):
    where = "query"


class Header(Param):
    where = "header"


class Body(Param):
    where = "body"


class RequestValidationError(Exception):
    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__(errors)
        self._errors = errors

    def errors(self) -> list[dict[str, Any]]:
        return self._errors


class NotFoundError(Exception):
    """No route for the request's method and path."""


class UnsupportedContentType(Exception):
    """A body of a media type the route cannot read (neither JSON nor a form): a 500, as before."""


class Response(Generic[T]):
    def __init__(self, status_code: int, content_type: str | None = None, body: T | None = None,
                 headers: Mapping[str, str | list[str]] | None = None) -> None:
        self.status_code, self.body = status_code, body
        self.headers: dict[str, str | list[str]] = dict(headers) if headers else {}
        self.content_type = content_type
        if content_type:
            self.headers.setdefault("Content-Type", content_type)

    def is_json(self) -> bool:
        kind = self.headers.get("Content-Type", "")
        return (kind[0] if isinstance(kind, list) else kind).startswith(APPLICATION_JSON)


@dataclass(eq=False)
class _Field:
    name: str
    param: Param
    annotation: Any
    default: Any
    key: str  # the name it is read by (a header's, lowercased)
    adapter: Any = None

    @property
    def required(self) -> bool:
        return self.default is inspect.Parameter.empty

    def validate(self, value: Any, loc: tuple[Any, ...], errors: list[dict[str, Any]]) -> Any:
        from pydantic import TypeAdapter, ValidationError

        if self.adapter is None:
            self.adapter = TypeAdapter(Annotated[self.annotation, self.param.field()])
        try:
            return self.adapter.validate_python(value, from_attributes=True)
        except ValidationError as exc:
            errors.extend({**e, "loc": loc + tuple(e.get("loc", ()))} for e in exc.errors())
            return None


@dataclass(eq=False)
class Route:
    method: str
    rule: str
    func: Callable[..., Any]
    status_code: int
    openapi: dict[str, Any]  # the decorator's other arguments: the OpenAPI document's (powertools_twin)
    _pattern: re.Pattern[str] | None = None
    _fields: list[_Field] | None = None
    _returns: tuple[_Field] | None = None

    def __post_init__(self) -> None:
        self.rule = self.rule.rstrip("/")

    def match(self, path: str) -> re.Match[str] | None:
        """The rule against ``path``, compiled on its first request: an init compiles no rule (cold start)."""
        if self._pattern is None:
            self._pattern = re.compile(f"^{_DYNAMIC.sub(_GROUP, self.rule)}/*$")
        return self._pattern.match(path)

    def fields(self) -> list[_Field]:
        """The parameters, read from the signature on the route's first request (cold start)."""
        if self._fields is None:
            hints = get_type_hints(self.func, include_extras=True)
            out = []
            for name, p in inspect.signature(self.func).parameters.items():
                hint = hints[name]
                marker = next((m for m in get_args(hint)[1:] if isinstance(m, Param)), None) \
                    if get_origin(hint) is Annotated else None
                if marker is None:
                    raise TypeError(f"{self.func.__name__}: parameter {name} names no Path/Query/Header/Body")
                key = marker.alias or name
                if isinstance(marker, Header):  # as Powertools' Header: case-insensitive, "_" read as "-"
                    key = (marker.alias or name.replace("_", "-")).lower()
                out.append(_Field(name, marker, get_args(hint)[0], p.default, key))
            self._fields = out
        return self._fields

    def returns(self, body: Any) -> Any:
        """The body validated and dumped against the return annotation (``Response[T]``: ``T``)."""
        if self._returns is None:
            hint = get_type_hints(self.func).get("return", inspect.Signature.empty)
            if get_origin(hint) is Response:
                (hint,) = get_args(hint)
            if hint is inspect.Signature.empty:
                hint = Any
            self._returns = (_Field("return", Param(), hint, inspect.Parameter.empty, "return"),)
        out = self._returns[0]
        errors: list[dict[str, Any]] = []
        value = out.validate(body, ("response",), errors)
        if errors:
            raise RequestValidationError(errors)
        return out.adapter.dump_python(value, mode="json", by_alias=True)


class Event:
    """The request as the routes read it: ``path``, ``http_method``, the raw event."""

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self.raw_event = raw
        self.path: str = raw["path"]
        self.http_method: str = raw["httpMethod"]

    @property
    def base_path(self) -> str:
        """What the caller's URL has before the route's path: the stage on the execute-api domain
        (``/live``: ``requestContext.path`` is ``/live/v1/...`` where ``path`` is ``/v1/...``), a custom
        domain's base path, or nothing. API Gateway sets both; a caller cannot. A ``Location`` of
        ``/v1/jobs/<id>`` alone sent a client that follows it to a path the API does not serve (403
        Missing Authentication Token, session 36's walk)."""
        context = self.raw_event.get("requestContext")
        full = context.get("path") if isinstance(context, Mapping) else None
        if not isinstance(full, str) or not self.path or full == self.path or not full.endswith(self.path):
            return ""
        prefix = full[:-len(self.path)]
        return prefix if prefix.startswith("/") and not prefix.endswith("/") else ""


class Router:
    """Routes, exception handlers and the current request's ``context`` (cleared after each)."""

    def __init__(self, json_body_deserializer: Callable[[str], Any] = json.loads) -> None:
        self.routes: list[Route] = []
        self._order: list[Route] = []
        self.handlers: dict[type[Exception], Callable[[Any], Response[Any]]] = {}
        self.context: dict[str, Any] = {}
        self.current_event: Event
        self.lambda_context: Any = None
        self._loads = json_body_deserializer

    # -- registration --------------------------------------------------------------------------------

    def route(self, method: str, rule: str, status_code: int = 200,
              **openapi: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def register(func: Callable[..., Any]) -> Callable[..., Any]:
            self.routes.append(Route(method, rule, func, status_code, openapi))
            return func

        return register

    def get(self, rule: str, **kw: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        return self.route("GET", rule, **kw)

    def post(self, rule: str, **kw: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        return self.route("POST", rule, **kw)

    def put(self, rule: str, **kw: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        return self.route("PUT", rule, **kw)

    def delete(self, rule: str, **kw: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        return self.route("DELETE", rule, **kw)

    def exception_handler(self, exc: type[Exception]) -> Callable[[Callable[[Any], Response[Any]]], Any]:
        def register(func: Callable[[Any], Response[Any]]) -> Callable[[Any], Response[Any]]:
            self.handlers[exc] = func
            return func

        return register

    def not_found(self, func: Callable[[Any], Response[Any]]) -> Callable[[Any], Response[Any]]:
        self.handlers[NotFoundError] = func
        return func

    # -- requests ------------------------------------------------------------------------------------

    def resolve(self, event: Mapping[str, Any], context: Any) -> dict[str, Any]:
        self.current_event, self.lambda_context = Event(event), context
        try:
            return _proxy_response(self._answer(event))
        finally:
            self.context = {}

    def _answer(self, event: Mapping[str, Any]) -> Response[Any]:
        method, path = str(event["httpMethod"]).upper(), str(event["path"])
        try:
            for route in self._ordered():
                match = route.match(path) if route.method == method else None
                if match is not None:
                    values = self._arguments(route, match.groupdict(), event)
                    result = route.func(**values)
                    response = result if isinstance(result, Response) else \
                        Response(route.status_code, APPLICATION_JSON, result)
                    response.body = route.returns(response.body)
                    return response
            raise NotFoundError()
        except Exception as exc:
            handler = next((self.handlers[c] for c in type(exc).__mro__ if c in self.handlers), None)
            if handler is None:
                raise
            return handler(exc)

    def _ordered(self) -> list[Route]:
        """Static rules before dynamic ones, each in the order registered (as Powertools tries them)."""
        if len(self._order) != len(self.routes):
            self._order = sorted(self.routes, key=lambda r: "<" in r.rule)
        return self._order

    def _arguments(self, route: Route, path: dict[str, str], event: Mapping[str, Any]) -> dict[str, Any]:
        values: dict[str, Any] = {}
        errors: list[dict[str, Any]] = []
        fields = route.fields()
        sources = {"path": path, "query": _query(event, fields), "header": _headers(event, fields)}
        for f in fields:
            if isinstance(f.param, Body):
                continue
            loc = (f.param.where, f.key)
            _take(f, sources[f.param.where].get(f.key), loc, values, errors)
        bodies = [f for f in fields if isinstance(f.param, Body)]
        if bodies:  # one body parameter, not embedded: the body itself (all Sluice's routes)
            (f,) = bodies
            _take(f, self._body(event), ("body",), values, errors)
        if errors:
            raise RequestValidationError(errors)
        return values

    def _body(self, event: Mapping[str, Any]) -> Any:
        kind = str(_lower(event.get("headers")).get("content-type", "")).strip()
        text = event.get("body")
        if text and event.get("isBase64Encoded"):
            text = base64.b64decode(str(text).encode()).decode()
        if not kind or kind.startswith(APPLICATION_JSON):
            if not text:
                return None
            try:
                return self._loads(text)
            except json.JSONDecodeError as exc:
                raise RequestValidationError([{"type": "json_invalid", "loc": ("body", exc.pos),
                                               "msg": "JSON decode error", "input": {},
                                               "ctx": {"error": exc.msg}}]) from exc
        if kind.startswith("application/x-www-form-urlencoded"):
            return parse_qs(text or "", keep_blank_values=True)
        if kind.startswith("multipart/form-data") and _boundary(kind) and not text:
            return {}  # no parts; a body of parts never gets here (``jsonguard`` refuses it: 415)
        raise UnsupportedContentType(f"Unsupported content type: {kind}")


def _boundary(kind: str) -> str:
    """A multipart media type's boundary, as Powertools read it ("": none)."""
    for segment in kind.split(";"):
        if segment.strip().startswith("boundary="):
            value = segment.strip()[len("boundary="):]
            return value[1:-1] if value.startswith('"') and value.endswith('"') else value
    return ""


def _take(f: _Field, value: Any, loc: tuple[Any, ...], values: dict[str, Any],
          errors: list[dict[str, Any]]) -> None:
    if value is None:
        if f.required:
            errors.append({"type": "missing", "loc": loc, "msg": "Field required", "input": None})
        else:
            values[f.name] = f.default
        return
    if isinstance(f.param, Body) and isinstance(value, list) and value and not _is_sequence(f.annotation):
        value = value[0]  # as Powertools normalised a body field
    values[f.name] = f.validate(value, loc, errors)


def _lower(mapping: Any) -> dict[str, Any]:
    return {str(k).lower(): v for k, v in mapping.items()} if isinstance(mapping, Mapping) else {}


def _scalars(found: dict[str, Any], fields: list[_Field], where: str, multi: set[str]) -> dict[str, Any]:
    """A scalar parameter's value: one item unwrapped, split items of one value joined again."""
    for f in fields:
        if f.param.where != where or _is_sequence(f.annotation) or f.key not in found:
            continue
        value = found[f.key]
        if isinstance(value, list) and len(value) > 1 and f.key not in multi \
                and all(isinstance(v, str) for v in value):
            value = ",".join(value)
        if isinstance(value, list) and len(value) == 1:
            value = value[0]
        found[f.key] = value
    return found


def _query(event: Mapping[str, Any], fields: list[_Field]) -> dict[str, Any]:
    multi = event.get("multiValueQueryStringParameters") or {}
    single = {k: str(v).split(",") for k, v in (event.get("queryStringParameters") or {}).items()}
    return _scalars({**single, **multi} if multi else single, fields, "query", set(multi))


def _headers(event: Mapping[str, Any], fields: list[_Field]) -> dict[str, Any]:
    multi = _lower(event.get("multiValueHeaders"))
    return _scalars(dict(multi or _lower(event.get("headers"))), fields, "header", set(multi))


def _is_sequence(annotation: Any) -> bool:
    origin = get_origin(annotation)
    if origin is Union or str(origin) == "<class 'types.UnionType'>":
        return any(_is_sequence(a) for a in get_args(annotation))
    kind = origin or annotation
    return isinstance(kind, type) and issubclass(kind, (list, tuple, set, frozenset))


def _proxy_response(response: Response[Any]) -> dict[str, Any]:
    """The REST proxy answer (``multiValueHeaders``), a JSON body serialised compactly."""
    body = response.body
    if response.is_json() and not isinstance(body, str):
        body = json.dumps(body, separators=(",", ":"))
    encoded = isinstance(body, bytes)
    if isinstance(body, bytes):
        body = base64.b64encode(body).decode()
    headers: dict[str, list[str]] = {}
    for name, values in response.headers.items():
        if values is not None:
            headers.setdefault(name, []).extend([values] if isinstance(values, str) else values)
    return {"statusCode": response.status_code, "body": body, "isBase64Encoded": encoded,
            "multiValueHeaders": headers}
