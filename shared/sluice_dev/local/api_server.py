"""Serve a Lambda handler over real HTTP on 127.0.0.1 by building API Gateway REST proxy events
(or, with ``payload="2.0"``, the HTTP API's payload 2.0 events the small profile's API sends).

What API Gateway does in front of the gateway Lambda, done locally: the request line,
headers and body become a REST proxy event (``path`` still percent-encoded, as REST
APIs deliver it; a body that is not UTF-8 is passed base64-encoded), the handler runs
with a Lambda-like context, and its proxy response becomes the HTTP response. The
local stack (``sluice dev``), the schemathesis run and the benchmark all use it.

Each handler instance serves one request at a time, as a Lambda container does; pass
several instances (``handlers=[...]``) to serve requests concurrently.

There is no IAM here, so the caller's identity (``requestContext.identity.userArn``, what API
Gateway sets from a verified SigV4 signature) comes from the ``X-Sluice-Local-Caller`` header,
which only this server honours: it is taken out of the headers, and in AWS API Gateway sets
the identity itself, so the header means nothing there. The operator API
(``/v1/admin/...``) then checks that ARN against the gateway's operator allow-list, which
``sluice dev`` sets to ``LOCAL_OPERATOR`` when the template names none (a printed override).
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import queue
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote

from sluice_dev.local.httpd import QuietHandler, ThreadedServer

log = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]
MAX_REQUEST_BYTES = 10 * 1024 * 1024  # API Gateway's limit; larger requests never reach Lambda
DRAIN_BYTES = 4 * MAX_REQUEST_BYTES  # read away before a 413; a larger upload is cut off
LOCAL_CALLER_HEADER = "X-Sluice-Local-Caller"  # the IAM caller, locally (module docstring)
# The local tooling's operator (`sluice console`, tests): with the template's OperatorPrincipalArns
# empty nobody is an operator, so `sluice dev` names this one instead, as an override it prints.
LOCAL_OPERATOR = "arn:aws:iam::000000000000:role/sluice-local-operator"
# The events API Gateway sends: a REST API's (1.0), an HTTP API's (2.0, the small profile's; issue 33).
PAYLOAD_VERSIONS = ("1.0", "2.0")


class LocalContext:
    """The attributes of a Lambda context that handlers and Powertools read."""

    function_version = "$LATEST"
    memory_limit_in_mb = 512
    log_group_name = "/local/sluice-gateway"
    log_stream_name = "local"

    def __init__(self, function_name: str, timeout_ms: int) -> None:
        self.function_name = function_name
        self.invoked_function_arn = f"arn:aws:lambda:us-east-1:000000000000:function:{function_name}"
        self.aws_request_id = str(uuid.uuid4())
        self._deadline = time.monotonic() + timeout_ms / 1000

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def build_event(method: str, target: str, headers: Sequence[tuple[str, str]], body: bytes | None, *,
                source_ip: str = "127.0.0.1", stage: str = "local") -> dict[str, Any]:
    """A REST API (v1) Lambda proxy event for one HTTP request."""
    path, _, query = target.partition("?")
    single: dict[str, str] = {}
    multi: dict[str, list[str]] = {}
    caller = next((v.strip() for k, v in headers if k.lower() == LOCAL_CALLER_HEADER.lower()), None) or None
    headers = [(k, v) for k, v in headers if k.lower() != LOCAL_CALLER_HEADER.lower()]
    for name, value in headers:
        single[name] = value
        multi.setdefault(name, []).append(value)
    qs = parse_qs(query, keep_blank_values=True) if query else {}
    text: str | None = None
    is_b64 = False
    if body:
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            text, is_b64 = base64.b64encode(body).decode("ascii"), True
    user_agent = next((v for k, v in headers if k.lower() == "user-agent"), None)
    return {
        "resource": "/{proxy+}",
        "path": path,
        "httpMethod": method,
        "headers": single or None,
        "multiValueHeaders": multi or None,
        "queryStringParameters": {k: v[-1] for k, v in qs.items()} or None,
        "multiValueQueryStringParameters": qs or None,
        "pathParameters": {"proxy": unquote(path.lstrip("/"))},
        "stageVariables": None,
        "requestContext": {
            # The URL's path as the caller sent it: this server serves the API at its root, as a custom
            # domain mapped at its root does (no stage before /v1), so Location headers carry none.
            "resourcePath": "/{proxy+}", "httpMethod": method, "path": path, "stage": stage,
            "requestId": str(uuid.uuid4()), "requestTimeEpoch": int(time.time() * 1000),
            "accountId": "000000000000", "apiId": "local", "protocol": "HTTP/1.1",
            "identity": {"sourceIp": source_ip, "userAgent": user_agent, "userArn": caller, "apiKeyId": None},
        },
        "body": text,
        "isBase64Encoded": is_b64,
    }


def build_http_api_event(method: str, target: str, headers: Sequence[tuple[str, str]], body: bytes | None, *,
                         source_ip: str = "127.0.0.1") -> dict[str, Any]:
    """An HTTP API (payload 2.0) Lambda proxy event for one HTTP request, as the small profile's API sends
    (issue 33): lower-case headers with repeats joined by commas, cookies apart, the caller under
    ``requestContext.authorizer.iam``, the ``$default`` stage (no prefix on ``rawPath``)."""
    rest = build_event(method, target, headers, body, source_ip=source_ip)
    path, _, query = target.partition("?")
    joined: dict[str, str] = {}
    cookies: list[str] = []
    for name, value in headers:
        if name.lower() == LOCAL_CALLER_HEADER.lower():
            continue
        if name.lower() == "cookie":
            cookies += [c.strip() for c in value.split(";") if c.strip()]
            continue
        key = name.lower()
        joined[key] = f"{joined[key]},{value}" if key in joined else value
    identity = rest["requestContext"]["identity"]
    caller = identity["userArn"]
    context: dict[str, Any] = {
        "accountId": "000000000000", "apiId": "local", "domainName": "127.0.0.1", "domainPrefix": "local",
        "http": {"method": method, "path": path, "protocol": "HTTP/1.1", "sourceIp": source_ip,
                 "userAgent": identity["userAgent"]},
        "requestId": rest["requestContext"]["requestId"], "routeKey": "$default", "stage": "$default",
        "timeEpoch": rest["requestContext"]["requestTimeEpoch"],
    }
    if caller:
        context["authorizer"] = {"iam": {"userArn": caller, "accountId": caller.split(":")[4] or None,
                                         "callerId": None, "userId": None, "accessKey": None}}
    event: dict[str, Any] = {
        "version": "2.0", "routeKey": "$default", "rawPath": path, "rawQueryString": query,
        "headers": joined, "requestContext": context, "isBase64Encoded": rest["isBase64Encoded"],
    }
    if cookies:
        event["cookies"] = cookies
    if rest["queryStringParameters"]:
        multi = rest["multiValueQueryStringParameters"]
        event["queryStringParameters"] = {k: ",".join(v) for k, v in multi.items()}
    if rest["body"] is not None:
        event["body"] = rest["body"]
    return event


def _response_parts(response: dict[str, Any]) -> tuple[int, list[tuple[str, str]], bytes]:
    headers: dict[str, list[str]] = {k: [str(v)] for k, v in (response.get("headers") or {}).items()}
    for name, values in (response.get("multiValueHeaders") or {}).items():
        headers[name] = [str(v) for v in values]
    body = response.get("body") or ""
    raw = base64.b64decode(body) if response.get("isBase64Encoded") else str(body).encode("utf-8")
    pairs = [(k, v) for k, values in headers.items() for v in values if k.lower() != "content-length"]
    pairs += [("Set-Cookie", str(c)) for c in response.get("cookies") or ()]  # a 2.0 response's
    return int(response.get("statusCode", 502)), pairs, raw


def _content_length(values: Sequence[str]) -> int | None:
    """The body's length from the request's Content-Length headers (none: no body); None when they are
    not one run of digits (RFC 9110's ``1*DIGIT``): ``abc``, ``-5``, ``1e3``, ``5, 5``, two headers."""
    if not values:
        return 0
    text = values[0].strip()
    if len(values) > 1 or not (text.isascii() and text.isdigit()):
        return None
    return int(text)


def _discard(rfile: Any, remaining: int) -> None:
    while remaining > 0:
        chunk = rfile.read(min(remaining, 1 << 16))
        if not chunk:
            return
        remaining -= len(chunk)


class _QuietServer(ThreadingHTTPServer):
    """A client that hangs up before its answer is not an error worth a traceback."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class LocalGateway(ThreadedServer):
    def __init__(self, handlers: Handler | Sequence[Handler], *, host: str = "127.0.0.1", port: int = 0,
                 function_name: str = "sluice-gateway", timeout_ms: int = 29_000,
                 payload: str = "1.0") -> None:
        pool = [handlers] if callable(handlers) else list(handlers)
        self._idle: queue.Queue[Handler] = queue.Queue()
        for handler in pool:
            self._idle.put(handler)
        self.function_name = function_name
        self.timeout_ms = timeout_ms
        if payload not in PAYLOAD_VERSIONS:
            raise ValueError(f"payload {payload!r} is not one of {', '.join(PAYLOAD_VERSIONS)}")
        self.build = build_http_api_event if payload == "2.0" else build_event
        super().__init__(self._request_handler(), host, port, thread_name="sluice-local-gateway",
                         server_class=_QuietServer)

    def invoke(self, event: dict[str, Any]) -> dict[str, Any]:
        handler = self._idle.get()
        try:
            return handler(event, LocalContext(self.function_name, self.timeout_ms))
        finally:
            self._idle.put(handler)

    def _request_handler(self) -> type[BaseHTTPRequestHandler]:
        gateway = self

        class _Handler(QuietHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: clients reuse connections

            def _serve(self) -> None:
                length = _content_length(self.headers.get_all("Content-Length") or [])
                if length is None:
                    # Where the body ends is unknown: answered, as API Gateway does, and the
                    # connection closed (it was a traceback in the log and a hang-up, no answer).
                    bad = {"type": "urn:sluice:problem:bad-request", "title": "Bad Request", "status": 400,
                           "detail": "Content-Length is not one number of bytes", "code": "BAD_REQUEST"}
                    self.answer(400, json.dumps(bad).encode(), [("Content-Type", "application/problem+json")])
                    self.close_connection = True
                    return
                if length > MAX_REQUEST_BYTES:
                    # Read the body away first (up to a bound), as API Gateway does: a server that
                    # answers and closes mid-upload breaks the client's send, and the client then
                    # sees a connection failure (and retries) instead of this 413.
                    _discard(self.rfile, min(length, DRAIN_BYTES))
                    too_large = {"type": "urn:sluice:problem:payload-too-large", "title": "Payload Too Large",
                                 "status": 413, "detail": "request over 10 MiB", "code": "PAYLOAD_TOO_LARGE"}
                    self.answer(413, json.dumps(too_large).encode(),
                                [("Content-Type", "application/problem+json")])
                    self.close_connection = True
                    return
                body = self.rfile.read(length) if length else None
                event = gateway.build(self.command, self.path, list(self.headers.items()), body,
                                      source_ip=self.client_address[0])
                try:
                    status, headers, raw = _response_parts(gateway.invoke(event))
                except Exception:  # API Gateway answers 502 when the integration fails
                    log.exception("handler failed for %s %s", self.command, self.path)
                    status, headers, raw = 502, [("Content-Type", "application/problem+json")], json.dumps({
                        "type": "urn:sluice:problem:bad-gateway", "title": "Bad Gateway", "status": 502,
                        "detail": "the gateway function failed", "code": "BAD_GATEWAY"}).encode()
                self.answer(status, raw, headers)

            def __getattr__(self, name: str) -> Any:
                # Every method reaches the handler (TRACE, QUERY, ...), which answers 405 itself.
                if name.startswith("do_"):
                    return self._serve
                raise AttributeError(name)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("local gateway: " + format, *args)

        return _Handler


@contextlib.contextmanager
def serving(handlers: Handler | Sequence[Handler], **kwargs: Any) -> Iterator[LocalGateway]:
    with LocalGateway(handlers, **kwargs) as server:
        yield server
