"""API Gateway HTTP API (payload format 2.0) events, read as the REST proxy events the gateway serves.

The small profile (template.yaml's ``Profile``; issue 33, item 2) fronts the gateway with an HTTP API,
which sends version 2.0 events: the method under ``requestContext.http``, the path as ``rawPath``,
duplicate headers and query values joined by commas, cookies apart, and the caller's verified IAM
identity under ``requestContext.authorizer.iam`` (not ``requestContext.identity``). ``as_rest`` builds
the REST (1.0) event of the same request, so every profile runs the same routes, checks and caller
rules; ``as_http_api_response`` turns the answer into the 2.0 response shape (no
``multiValueHeaders``: an HTTP API drops them).

The identity is taken from ``authorizer.iam`` only: a 2.0 event that carries a
``requestContext.identity`` of its own (which API Gateway never sends in 2.0) does not name its
caller with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import parse_qs

VERSION: Final = "2.0"


def is_http_api_event(event: object) -> bool:
    """A payload 2.0 proxy event: its version, a request context with an ``http`` method, a ``rawPath``."""
    if not isinstance(event, Mapping) or event.get("version") != VERSION:
        return False
    context = event.get("requestContext")
    http = context.get("http") if isinstance(context, Mapping) else None
    return isinstance(http, Mapping) and isinstance(http.get("method"), str) \
        and isinstance(event.get("rawPath"), str)


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def path_of(event: Mapping[str, Any]) -> str:
    """The request's path without a named stage's prefix (``$default`` has none)."""
    raw = str(event["rawPath"])
    stage = str(_mapping(event.get("requestContext")).get("stage") or "$default")
    prefix = f"/{stage}"
    if stage != "$default" and (raw == prefix or raw.startswith(prefix + "/")):
        return raw[len(prefix):] or "/"
    return raw


def _identity(context: Mapping[str, Any]) -> dict[str, Any]:
    """The REST event's ``identity`` from the 2.0 event's IAM authorizer and its ``http`` block."""
    iam = _mapping(_mapping(context.get("authorizer")).get("iam"))
    http = _mapping(context.get("http"))
    arn = iam.get("userArn")
    return {
        "userArn": arn if isinstance(arn, str) and arn else None,
        "accountId": iam.get("accountId"), "caller": iam.get("callerId"), "user": iam.get("userId"),
        "accessKey": iam.get("accessKey"), "principalOrgId": iam.get("principalOrgId"),
        "sourceIp": http.get("sourceIp"), "userAgent": http.get("userAgent"),
        "apiKey": None, "apiKeyId": None,  # an HTTP API has no API keys
    }


def as_rest(event: Mapping[str, Any]) -> dict[str, Any]:
    """The REST (1.0) proxy event of the request a 2.0 ``event`` carries (pure)."""
    context = _mapping(event.get("requestContext"))
    method = str(_mapping(context.get("http"))["method"]).upper()
    path = path_of(event)
    headers = {str(k): str(v) for k, v in _mapping(event.get("headers")).items()}
    cookies = [str(c) for c in event.get("cookies") or () if isinstance(c, str)]
    if cookies:
        headers["cookie"] = "; ".join(cookies)
    raw_query = event.get("rawQueryString")
    multi_query = parse_qs(raw_query, keep_blank_values=True) if isinstance(raw_query, str) and raw_query \
        else {}
    query = {str(k): str(v) for k, v in _mapping(event.get("queryStringParameters")).items()}
    stage = str(context.get("stage") or "$default")
    return {
        "resource": "/{proxy+}",
        "path": path,
        "httpMethod": method,
        "headers": headers or None,
        "multiValueHeaders": {k: [v] for k, v in headers.items()} or None,
        "queryStringParameters": query or None,
        "multiValueQueryStringParameters": multi_query or None,
        "pathParameters": {"proxy": path.lstrip("/")},
        "stageVariables": event.get("stageVariables"),
        "requestContext": {
            "resourcePath": "/{proxy+}", "httpMethod": method, "path": str(event["rawPath"]), "stage": stage,
            "requestId": context.get("requestId"), "requestTimeEpoch": context.get("timeEpoch"),
            "accountId": context.get("accountId"), "apiId": context.get("apiId"),
            "domainName": context.get("domainName"),
            "protocol": _mapping(context.get("http")).get("protocol"),
            "identity": _identity(context),
        },
        "body": event.get("body"),
        "isBase64Encoded": bool(event.get("isBase64Encoded")),
    }


def as_http_api_response(response: Mapping[str, Any]) -> dict[str, Any]:
    """A REST proxy response in the 2.0 shape: multi-value headers joined (Set-Cookie as ``cookies``)."""
    headers: dict[str, str] = {str(k): str(v) for k, v in _mapping(response.get("headers")).items()}
    cookies: list[str] = []
    for name, values in _mapping(response.get("multiValueHeaders")).items():
        strings = [str(v) for v in values or ()]
        if str(name).lower() == "set-cookie":
            cookies += strings
        elif strings:
            headers[str(name)] = ", ".join(strings)
    cookies += [headers.pop(k) for k in [k for k in headers if k.lower() == "set-cookie"]]
    out: dict[str, Any] = {"statusCode": response.get("statusCode", 502), "headers": headers,
                           "body": response.get("body") or "",
                           "isBase64Encoded": bool(response.get("isBase64Encoded"))}
    if cookies:
        out["cookies"] = cookies
    return out
