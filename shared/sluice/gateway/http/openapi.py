"""The routes of a ``router.Router`` registered on a Powertools ``APIGatewayRestResolver``: its twin.

The twin is what generates the OpenAPI document (``app.build_openapi``), from the same route
functions, parameters and responses, so the document is the one Powertools made when it served
the routes; it is built on the first ``/v1/openapi.json`` request, never at a cold start. It can
also answer requests (``resolve``), which is how ``tests/unit/test_router_parity.py`` checks that
the router answers as Powertools' resolver did.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Annotated, Any, get_args, get_origin, get_type_hints

from aws_lambda_powertools.event_handler import APIGatewayRestResolver
from aws_lambda_powertools.event_handler import Response as PowertoolsResponse
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi import params
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError

from sluice.gateway.http import router

_MARKERS: dict[type[router.Param], Callable[..., Any]] = {
    router.Path: params.Path, router.Query: params.Query,
    router.Header: params.Header, router.Body: params.Body}
_EXCEPTIONS: dict[type[Exception], type[Exception]] = {
    router.RequestValidationError: RequestValidationError, router.NotFoundError: NotFoundError}


def twin(routes: router.Router) -> APIGatewayRestResolver:
    """A Powertools resolver with ``routes``' routes and exception handlers, in the same order."""
    app = APIGatewayRestResolver(enable_validation=True, json_body_deserializer=routes._loads)
    for route in routes.routes:
        app.route(route.rule, route.method, status_code=route.status_code, **route.openapi)(_call(route))
    for exc, handler in routes.handlers.items():
        app.exception_handler(_EXCEPTIONS.get(exc, exc))(_answer(handler))
    return app


def resolve(app: APIGatewayRestResolver, routes: router.Router, event: Mapping[str, Any], context: Any,
            request: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The twin's answer; ``routes`` sees the request as its route functions read it (``request``:
    its ``context`` for this request, as ``HttpGateway.handle`` sets the caller)."""
    routes.current_event, routes.lambda_context = router.Event(event), context
    routes.context = dict(request or {})
    try:
        return app.resolve(event, context)
    finally:
        routes.context = {}


def _marker(hint: Any) -> Any:
    if get_origin(hint) is not Annotated:
        return hint
    inner, *extra = get_args(hint)
    out = []
    for m in extra:
        if isinstance(m, router.Param):
            named = {k: v for k, v in (("alias", m.alias), ("description", m.description)) if v is not None}
            m = _MARKERS[type(m)](**named, **m.constraints)
        out.append(m)
    return Annotated[(inner, *out)]


def _call(route: router.Route) -> Callable[..., Any]:
    hints = get_type_hints(route.func, include_extras=True)
    signature = inspect.signature(route.func)
    returns = hints.get("return", inspect.Signature.empty)
    if get_origin(returns) is router.Response:
        returns = PowertoolsResponse[get_args(returns)]  # type: ignore[misc]

    def call(**kwargs: Any) -> Any:
        return _powertools(route.func(**kwargs))

    call.__name__, call.__qualname__ = route.func.__name__, route.func.__qualname__
    call.__doc__ = route.func.__doc__
    call.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[p.replace(annotation=_marker(hints[p.name])) for p in signature.parameters.values()],
        return_annotation=returns)
    return call


def _answer(handler: Callable[[Any], router.Response[Any]]) -> Callable[[Any], Any]:
    return lambda exc: _powertools(handler(exc))


def _powertools(result: Any) -> Any:
    if not isinstance(result, router.Response):
        return result
    return PowertoolsResponse(result.status_code, result.content_type, result.body, headers=result.headers)
