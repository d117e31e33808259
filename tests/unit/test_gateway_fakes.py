"""A gateway over the in-memory fakes of its ports (``sluice_dev.fakes``), plus an API Gateway event builder.

The fakes follow the contracts in the brief (ports.py docstrings), not the real adapters'
code, so the use-case tests check our orchestration rather than an adapter. This
module holds no tests itself.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from sluice.core.bus import EventBus
from sluice.core.errors import BackendUnavailable
from sluice.core.models import QueueConfig
from sluice.entry.gateway import Gateway
from sluice.gateway.api import Api, Backends, IdMinting, Intake
from sluice_dev.fakes import FakeKeyStore, FakeLog, FakeQueue, FakeStore, real_ms

EVENTS = Path(__file__).parent.parent / "events"
KEY = b"unit-test-job-id-key-0123456789"


def gateway_queue(now_ms: Callable[[], int] = real_ms) -> FakeQueue:
    """The one fake queue, holding what the gateway's tests read of "emails": 3 ready jobs (the
    oldest enqueued 1.5 s ago), 1 delayed, 2 leased, none dead; paused, 200 a second, burst 50."""
    queue = FakeQueue(now_ms)
    for state, n in (("ready", 3), ("delayed", 1), ("leased", 2)):
        queue.seed("emails", state, n)
    queue.configs["emails"] = QueueConfig(rate_per_s=200.0, burst=50, paused=True)
    return queue


class Rig:
    """A gateway over fakes, driven with real-shape API Gateway REST proxy events."""

    def __init__(self, max_payload_bytes: int = 256 * 1024) -> None:
        self.log = FakeLog()
        self.store = FakeStore()
        self.now_ms = 1_700_000_000_000
        self.queue = gateway_queue(lambda: self.now_ms)
        self.idem = FakeKeyStore()
        self.api = Api(Backends(self.log, self.store, self.queue, events=EventBus()), IdMinting(KEY),  # type: ignore[arg-type]
                       intake=Intake(max_payload_bytes), idempotency=self.idem, clock=lambda: self.now_ms)
        self.gateway = Gateway(self.api, max_payload_bytes=max_payload_bytes)

    def call(self, method: str, path: str, body: Any = None, *, raw: str | bytes | None = None,
             headers: dict[str, str] | None = None, b64: bool = False,
             content_type: str | None = "application/json") -> tuple[int, dict[str, str], Any]:
        event = event_for(method, path, body, raw=raw, headers=headers, b64=b64, content_type=content_type)
        response = self.gateway(event, LambdaContext())
        return unpack(response)


class LambdaContext:
    function_name = "sluice-gateway"
    aws_request_id = "c6af9ac6-7b61-11e6-9a41-93e812345678"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:sluice-gateway"
    memory_limit_in_mb = 512

    def get_remaining_time_in_millis(self) -> int:
        return 25_000


_SHAPES = [  # (method, path regex) -> the event fixture of that route, and its resource
    ("POST", re.compile(r"^/v1/queues/(?P<queue>[^/]*)/jobs/batch$"), "apigw_enqueue_batch.json"),
    ("POST", re.compile(r"^/v1/queues/(?P<queue>[^/]*)/jobs$"), "apigw_enqueue.json"),
    ("GET", re.compile(r"^/v1/jobs/(?P<job_id>[^/]+)$"), "apigw_get_job.json"),
    ("DELETE", re.compile(r"^/v1/jobs/(?P<job_id>[^/]+)$"), "apigw_cancel_job.json"),
    ("GET", re.compile(r"^/v1/queues/(?P<queue>[^/]*)$"), "apigw_get_queue.json"),
]


def event_for(method: str, path: str, body: Any = None, *, raw: str | bytes | None = None,
              headers: dict[str, str] | None = None, b64: bool = False,
              content_type: str | None = "application/json") -> dict[str, Any]:
    """A REST proxy event: the event fixture of the matching route, with this request in it."""
    name, params = "apigw_openapi.json", None
    for m, shape, file in _SHAPES:
        if (match := shape.match(path)) and m == method:
            name, params = file, {k: unquote(v) for k, v in match.groupdict().items()}
            break
    event: dict[str, Any] = json.loads((EVENTS / name).read_text())
    text: str | bytes | None = raw if raw is not None else (None if body is None else json.dumps(body))
    hdrs = {k: v for k, v in event["headers"].items() if k.lower() not in ("content-type", "idempotency-key")}
    if content_type is not None and (text is not None or method == "POST"):
        hdrs["Content-Type"] = content_type
    hdrs.update(headers or {})
    event.update(httpMethod=method, path=path, headers=hdrs,
                 multiValueHeaders={k: [v] for k, v in hdrs.items()}, isBase64Encoded=b64,
                 pathParameters=params)
    event["requestContext"] = {**event["requestContext"], "httpMethod": method, "path": "/live" + path}
    if text is None:
        event["body"] = None
    elif b64:
        data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
        event["body"] = base64.b64encode(data).decode("ascii")
    else:
        assert isinstance(text, str)
        event["body"] = text
    return event


def unpack(response: Mapping[str, Any]) -> tuple[int, dict[str, str], Any]:
    headers = {k.lower(): v for k, v in (response.get("headers") or {}).items()}
    for k, values in (response.get("multiValueHeaders") or {}).items():
        headers[k.lower()] = values[-1]
    body = response.get("body")
    parsed = json.loads(body) if body else None
    return int(response["statusCode"]), headers, parsed


def unavailable() -> BackendUnavailable:
    return BackendUnavailable("kafka: no broker acknowledged within 5 s")
