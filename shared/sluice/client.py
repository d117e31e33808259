"""``sluice.Client``: what a Python web server (and the CLI) uses to talk to the gateway.

Every enqueue carries an Idempotency-Key (one is generated per logical call when the
caller gives none) and every retry reuses it, so a retried request never creates a
second job: after a lost response, a timeout, a 429, a 502/503/504 or a 409 "in
progress", the retry gets the original job back. Retries back off exponentially with
full jitter (``policy.backoff_ms``) and honour ``Retry-After``.

``keyed=False`` sends no key: the gateway then writes no idempotency record (two DynamoDB
writes fewer per job, docs/cost.md), for a caller that already makes one job per request.
Such a request is retried only after a 429 (API Gateway refused it before the gateway ran);
after a lost response or a 5xx its outcome is unknown, and a retry could make a second job,
so the error goes to the caller.

Authentication: SigV4 for a deployed API with IAM auth (``sign_sigv4=True``, service
``execute-api``, credentials from the usual botocore chain), or an API key header.
Transport (``sluice.client_transport``): pooled keep-alive connections (urllib3), closed by
``close()`` or by leaving ``with Client(...) as client``; tests pass a fake. ``AsyncClient``
(``sluice.client_async``) has the same methods, awaitable.

Payloads (``enqueue``, ``enqueue_batch``'s jobs, ``create_schedule``) may be pydantic models: they
are sent as ``model_dump(mode="json")`` (datetimes as ISO strings, enums as values), and the
handler gets that JSON.

Traces: an enqueue sends the caller's current OpenTelemetry span as the W3C ``traceparent`` header
(or the ``traceparent`` given), so the job's spans join the caller's trace (docs/worker.md, Traces).
The client never imports OpenTelemetry itself: where the process has not imported its API, no span
can be current, and nothing is sent.
"""

from __future__ import annotations

import json
import random
import re
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote, urlencode

from pydantic import BaseModel, ValidationError

from sluice.client_transport import HttpResponse as HttpResponse
from sluice.client_transport import PooledTransport as PooledTransport
from sluice.client_transport import Transport as Transport
from sluice.client_transport import UrllibTransport as UrllibTransport
from sluice.core import wire
from sluice.core.depth import DepthHistory
from sluice.core.errors import ERROR_CODES, BackendUnavailable, InvalidInput, SluiceError, WaitTimedOut
from sluice.core.listing import JobPage, check_state
from sluice.core.models import (
    FINAL_STATES,
    DeadJob,
    QueueConfig,
    dump_json,
    validate_job_id,
    validate_queue_name,
)
from sluice.core.policy import backoff_ms
from sluice.core.version import __version__

RETRY_STATUSES = frozenset({429, 502, 503, 504})
UNKEYED_RETRY_STATUSES = frozenset({429})  # refused before the gateway ran: nothing was accepted
_REGION_IN_HOST = re.compile(r"\.execute-api\.([a-z0-9-]+)\.amazonaws\.com")


class ApiError(SluiceError):
    """The gateway answered with a problem document that maps to no Sluice error type."""


def _error(status: int, problem: Mapping[str, Any]) -> SluiceError:
    code = str(problem.get("code") or "")
    detail = str(problem.get("detail") or problem.get("title") or f"HTTP {status}")
    cls = ERROR_CODES.get(code)
    if cls is None:
        cls = InvalidInput if 400 <= status < 500 else BackendUnavailable if status in RETRY_STATUSES \
            else ApiError
    return cls(detail, status=status, problem=dict(problem))


class ClientClosed(RuntimeError):
    """A call on a client after its ``close()`` (a bug in the caller, not an answer of the API)."""


class Client:
    """The HTTP API's client. Thread-safe; one per process is the intended use (it pools its
    connections: ``max_connections`` kept per host). Close it (``close()``, or ``with``) to close them."""

    def __init__(self, api_url: str, *, api_key: str | None = None, sign_sigv4: bool = False,
                 region: str | None = None, timeout_s: float = 10.0, max_attempts: int = 6,
                 backoff_base_ms: int = 100, backoff_cap_ms: int = 5_000, transport: Transport | None = None,
                 sleep: Callable[[float], None] = time.sleep, rng: random.Random | None = None,
                 credentials: Any = None, headers: Mapping[str, str] | None = None,
                 max_connections: int = 10) -> None:
        self.api_url = api_url.rstrip("/")
        # Sent with every request; locally e.g. X-Sluice-Local-Caller (sluice_dev.local.api_server).
        self.headers = dict(headers or {})
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.max_attempts = max_attempts
        self.backoff_base_ms = backoff_base_ms
        self.backoff_cap_ms = backoff_cap_ms
        self.transport: Transport = transport or PooledTransport(max_connections=max_connections)
        self.closed = False
        self.sleep = sleep
        self.rng = rng or random.Random()
        self.sign_sigv4 = sign_sigv4
        match = _REGION_IN_HOST.search(self.api_url)
        self.region = region or (match.group(1) if match else "us-east-1")
        self._credentials = credentials

    # -- its life ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close the pooled connections; any later call raises ``ClientClosed``. Idempotent."""
        self.closed = True
        close = getattr(self.transport, "close", None)  # a test's fake transport may have none
        if close is not None:
            close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- the API ---------------------------------------------------------------------------

    def enqueue(self, queue: str, payload: Any, *, delay_seconds: int = 0, priority: int = 0,
                max_attempts: int | None = None, lease_seconds: int = 30,
                idempotency_key: str | None = None, keyed: bool = True,
                group: str | None = None, traceparent: str | None = None) -> wire.Accepted:
        """``max_attempts`` None (the default) sends none: the handler's ``RetryPolicy`` decides,
        else 5. A number is a ceiling: the handler's policy may lower it, never raise it.
        ``traceparent``: the trace the job joins (default: the current OpenTelemetry span's)."""
        job = self._job({"payload": payload, "delay_seconds": delay_seconds, "priority": priority,
                         "max_attempts": max_attempts, "lease_seconds": lease_seconds}
                        | ({} if group is None else {"group": group}))
        body = self._call("POST", f"/v1/queues/{self._queue(queue)}/jobs", _request_body(job),
                          idempotency_key=_key(idempotency_key, keyed), keyed=keyed,
                          traceparent=traceparent or current_traceparent())
        return wire.Accepted.model_validate(body)

    def enqueue_batch(self, queue: str, jobs: Sequence[Mapping[str, Any] | wire.EnqueueRequest], *,
                      idempotency_key: str | None = None, keyed: bool = True,
                      traceparent: str | None = None) -> wire.BatchAccepted:
        try:
            batch = wire.BatchRequest(jobs=[self._job(_fields(j)) for j in jobs])
        except ValidationError as exc:
            raise InvalidInput(f"invalid batch: {exc}") from exc
        body = self._call("POST", f"/v1/queues/{self._queue(queue)}/jobs/batch",
                          {"jobs": [_request_body(j) for j in batch.jobs]},
                          idempotency_key=_key(idempotency_key, keyed), keyed=keyed,
                          traceparent=traceparent or current_traceparent())
        return wire.BatchAccepted.model_validate(body)

    def status(self, job_id: str) -> wire.JobView:
        return wire.JobView.model_validate(self._call("GET", f"/v1/jobs/{validate_job_id(job_id)}"))

    def cancel(self, job_id: str) -> wire.CancelAccepted:
        """Raises JobNotFound, or AlreadyFinished when the job had finished."""
        return wire.CancelAccepted.model_validate(self._call("DELETE", f"/v1/jobs/{validate_job_id(job_id)}"))

    def queue_stats(self, queue: str) -> wire.QueueView:
        return wire.QueueView.model_validate(self._call("GET", f"/v1/queues/{self._queue(queue)}"))

    # -- the operator API (IAM operators only; docs/api.md, Operator API) ---------------------------

    def _admin(self, queue: str, rest: str) -> str:
        return f"/v1/admin/queues/{self._queue(queue)}/{rest}"

    def _config(self, method: str, queue: str, rest: str, body: Any = None) -> QueueConfig:
        doc = dict(self._call(method, self._admin(queue, rest), body))
        doc.pop("queue", None)  # the answer is the queue's name plus its config
        return QueueConfig.model_validate(doc)

    def pause(self, queue: str) -> QueueConfig:
        return self._config("POST", queue, "pause")

    def resume(self, queue: str) -> QueueConfig:
        return self._config("POST", queue, "resume")

    def set_rate(self, queue: str, per_second: float, burst: int | None = None) -> QueueConfig:
        body: dict[str, Any] = {"per_second": per_second} | ({} if burst is None else {"burst": burst})
        return self._config("PUT", queue, "rate", body)

    def set_max_in_flight(self, queue: str, limit: int | None = None,
                          per_group: int | None = None) -> QueueConfig:
        body = {k: v for k, v in (("max_in_flight", limit), ("max_in_flight_per_group", per_group))
                if v is not None}
        return self._config("PUT", queue, "max-in-flight", body)

    def set_watermarks(self, queue: str, high: int, low: int | None = None) -> QueueConfig:
        body: dict[str, Any] = {"high": high} | ({} if low is None else {"low": low})
        return self._config("PUT", queue, "watermarks", body)

    def set_caps(self, queue: str, max_delayed: int | None = None,
                 max_dead: int | None = None, max_bytes: int | None = None) -> QueueConfig:
        body = {k: v for k, v in (("max_delayed", max_delayed), ("max_dead", max_dead),
                                  ("max_bytes", max_bytes)) if v is not None}
        return self._config("PUT", queue, "caps", body)

    def set_sensitive(self, queue: str, fields: Sequence[str]) -> QueueConfig:
        """The payload fields the operator's listing redacts for ``queue`` (JSON pointers or top-level
        names; [] marks none): ``PUT /v1/admin/queues/{queue}/sensitive``."""
        return self._config("PUT", queue, "sensitive", {"fields": list(fields)})

    def queue_rows(self) -> list[dict[str, Any]]:
        """Every queue (``GET /v1/admin/queues``): each a QueueStats's fields plus ``overdue_leases``
        and ``route`` (``{"function", "owner", "typed"}``, or None for the default worker)."""
        return list(self._call("GET", "/v1/admin/queues")["queues"])

    def queue_row(self, queue: str) -> dict[str, Any]:
        """One queue, as ``queue_rows`` gives each."""
        return dict(self._call("GET", f"/v1/admin/queues/{self._queue(queue)}"))

    def dead_letters(self, queue: str, limit: int = 100) -> list[DeadJob]:
        doc = self._call("GET", self._admin(queue, f"dlq?limit={int(limit)}"))
        return [DeadJob.model_validate({**j, "queue": queue}) for j in doc["jobs"]]

    def list_jobs(self, queue: str, state: str = "ready", *, limit: int = 50, cursor: str | None = None,
                  prefix: str | None = None) -> JobPage:
        """One page of ``queue``'s jobs in ``state`` (ready, delayed, leased, dead, finished, parked),
        newest first (``GET /v1/admin/queues/{queue}/jobs``); pass the page's ``next`` as ``cursor``
        for the one after. Payload fields the queue marks sensitive come back redacted."""
        query = {"state": check_state(state), "limit": str(int(limit))}
        query.update({k: v for k, v in (("cursor", cursor), ("prefix", prefix)) if v})
        return JobPage.model_validate(self._call("GET", self._admin(queue, f"jobs?{urlencode(query)}")))

    def timeline(self, queue: str, job_id: str) -> list[dict[str, Any]]:
        """The job's timeline (``GET /v1/admin/queues/{queue}/jobs/{job_id}/timeline``): the steps its
        workers recorded, oldest first (``sluice.core.timeline``); [] once it expired."""
        path = f"jobs/{quote(validate_job_id(job_id), safe='')}/timeline"
        doc = self._call("GET", self._admin(queue, path))
        return list(doc["steps"])

    def depth_history(self, queue: str) -> DepthHistory:
        """The queue's depths over the last hour as the relay sampled them, with the enqueue-to-start
        wait (p50, p99) of the jobs started (``GET /v1/admin/queues/{queue}/depth``)."""
        return DepthHistory.model_validate(self._call("GET", self._admin(queue, "depth")))

    def redrive(self, queue: str, job_id: str | None = None) -> dict[str, Any]:
        """One dead job, or every one (``job_id`` None): ``{"queue", "moved", "refused"}``."""
        body = {"all": True} if job_id is None else {"job_id": validate_job_id(job_id)}
        return dict(self._call("POST", self._admin(queue, "dlq/redrive"), body, keyed=False))

    def purge_dead(self, queue: str) -> int:
        return int(self._call("DELETE", self._admin(queue, "dlq"), keyed=False)["purged"])

    def schedules(self, queue: str) -> list[dict[str, Any]] | None:
        """The queue's schedules (``GET /v1/admin/queues/{queue}/schedules``, an operator route); None
        when the gateway serves no schedules (404 ``NOT_FOUND``: no schedules table). Other errors,
        an unrouted queue's 404 ``NO_ROUTE`` among them, are raised."""
        try:
            doc = self._call("GET", self._admin(queue, "schedules"))
        except SluiceError as exc:
            if exc.details.get("status") == 404 and exc.code == "NOT_FOUND":
                return None
            raise
        return [dict(s) for s in doc["schedules"]]

    def _schedule(self, queue: str, name: str, rest: str = "") -> str:
        from sluice.core.schedules import check_name

        return self._admin(queue, f"schedules/{quote(check_name(name), safe='')}{rest}")

    def create_schedule(self, queue: str, name: str, expression: str, payload: Any) -> dict[str, Any]:
        """A new schedule of ``queue`` (``POST /v1/admin/queues/{queue}/schedules``): every firing of
        ``expression`` (``rate(...)`` or ``cron(...)``, UTC) enqueues ``payload`` (JSON, or a pydantic
        model). Returns the schedule's view (``name``, ``expression``, ``queue``, ``payload``,
        ``paused``, ``created_at_ms``, ``next_firing_ms``). ``ScheduleExists`` (409) if the queue has
        that name. Not sent twice (no idempotency key on this route): a repeat after a lost answer
        would say 409 for the schedule this call created; only a 429 is retried."""
        from sluice.core.schedules import check_name

        body = {"name": check_name(name), "expression": expression, "payload": _payload(payload)}
        dump_json(body["payload"])  # NaN, Infinity, non-JSON types: refuse here, not as a 400 later
        return dict(self._call("POST", self._admin(queue, "schedules"), body, keyed=False))

    def get_schedule(self, queue: str, name: str) -> dict[str, Any]:
        """One schedule's view (``GET .../schedules/{name}``); ``ScheduleNotFound`` if none."""
        return dict(self._call("GET", self._schedule(queue, name)))

    def pause_schedule(self, queue: str, name: str) -> dict[str, Any]:
        """Stop the schedule firing (``POST .../schedules/{name}/pause``): the schedule's view."""
        return dict(self._call("POST", self._schedule(queue, name, "/pause")))

    def resume_schedule(self, queue: str, name: str) -> dict[str, Any]:
        """Fire it again (``POST .../schedules/{name}/resume``): the schedule's view."""
        return dict(self._call("POST", self._schedule(queue, name, "/resume")))

    def delete_schedule(self, queue: str, name: str) -> None:
        """``DELETE .../schedules/{name}`` (204); jobs it enqueued stay. Not sent twice: a repeat
        after a lost answer would say 404 for a schedule this call deleted."""
        self._call("DELETE", self._schedule(queue, name), keyed=False)

    def wait(self, job_id: str, *, timeout_s: float = 30.0, poll_s: float = 0.1,
             clock: Callable[[], float] = time.monotonic) -> wire.JobView:
        """Poll until the job is final (succeeded, failed, dead, cancelled), else ``WaitTimedOut``
        (a ``TimeoutError``)."""
        poll = Poll(job_id, timeout_s, poll_s, clock)
        while True:
            view = self.status(job_id)
            if view.status in FINAL_STATES:
                return view
            self.sleep(poll.next_delay(view.status))

    # -- plumbing --------------------------------------------------------------------------

    @staticmethod
    def _job(fields: Mapping[str, Any]) -> wire.EnqueueRequest:
        fields = {**fields, "payload": _payload(fields["payload"])} if "payload" in fields else dict(fields)
        try:
            job = wire.EnqueueRequest.model_validate(fields)
        except ValidationError as exc:
            raise InvalidInput(f"invalid job: {exc}") from exc
        dump_json(job.payload)  # NaN, Infinity, non-JSON types: refuse here, not as a 400 later
        return job

    @staticmethod
    def _queue(queue: str) -> str:
        return quote(validate_queue_name(queue), safe="")

    def _call(self, method: str, path: str, body: Any = None, *, idempotency_key: str | None = None,
              keyed: bool = True, traceparent: str | None = None) -> Any:
        if self.closed:
            raise ClientClosed(f"{method} {path}: this client was closed")
        data = None if body is None else json.dumps(body, separators=(",", ":"), allow_nan=False).encode()
        headers = {**self.headers, "Accept": "application/json", "User-Agent": f"sluice-client/{__version__}"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        if traceparent is not None:
            headers["traceparent"] = traceparent
        if self.api_key:
            headers["x-api-key"] = self.api_key
        url = self.api_url + path
        attempt = 0
        while True:
            attempt += 1
            try:
                response = self.transport.send(method, url, self._signed(method, url, headers, data), data,
                                               self.timeout_s)
            except OSError as exc:  # no answer: with the same idempotency key, trying again is safe
                if attempt >= self.max_attempts or not keyed:
                    raise BackendUnavailable(f"{method} {path}: no response after {attempt} attempts: "
                                             f"{exc!r}") from exc
                self.sleep(self._backoff_s(attempt, None))
                continue
            if 200 <= response.status < 300:
                return json.loads(response.body) if response.body else None
            problem = _problem(response)
            if attempt < self.max_attempts and (self._retryable(response.status, problem) if keyed
                                                else response.status in UNKEYED_RETRY_STATUSES):
                self.sleep(self._backoff_s(attempt, response.headers.get("retry-after")))
                continue
            raise _error(response.status, problem)

    @staticmethod
    def _retryable(status: int, problem: Mapping[str, Any]) -> bool:
        return status in RETRY_STATUSES or (status == 409 and problem.get("code") == "IN_PROGRESS")

    def _backoff_s(self, attempt: int, retry_after: str | None) -> float:
        wait_ms = backoff_ms(attempt, base_ms=self.backoff_base_ms, cap_ms=self.backoff_cap_ms, rng=self.rng)
        if retry_after is not None and retry_after.strip().isdigit():
            wait_ms = max(wait_ms, min(int(retry_after) * 1000, 60_000))
        return wait_ms / 1000

    def _signed(self, method: str, url: str, headers: dict[str, str], data: bytes | None) -> dict[str, str]:
        if not self.sign_sigv4:
            return headers
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        if self._credentials is None:
            import botocore.session

            self._credentials = botocore.session.get_session().get_credentials()
            if self._credentials is None:
                raise InvalidInput("sign_sigv4=True but no AWS credentials were found: give boto3 some "
                                   "(AWS_PROFILE, AWS_ACCESS_KEY_ID, an instance or task role), or pass "
                                   "api_key= for an API_KEY deployment, or sign_sigv4=False for a local "
                                   "server")
        request = AWSRequest(method=method, url=url, data=data or b"", headers=dict(headers))
        SigV4Auth(self._credentials, "execute-api", self.region).add_auth(request)  # fresh date per attempt
        return {k: str(v) for k, v in request.headers.items()}


class Poll:
    """``wait``'s pace, for ``Client`` and ``AsyncClient``: ``poll_s`` first, then 1.5 times longer
    each time up to 2 s; ``WaitTimedOut`` (a ``TimeoutError``) when the next look would be past
    ``timeout_s``."""

    def __init__(self, job_id: str, timeout_s: float, poll_s: float, clock: Callable[[], float]) -> None:
        self.job_id, self.timeout_s, self.clock = job_id, timeout_s, clock
        self.deadline, self.delay = clock() + timeout_s, poll_s

    def next_delay(self, status: str) -> float:
        """Seconds to sleep before looking again at a job that is still ``status``."""
        delay = self.delay
        if self.clock() + delay > self.deadline:
            raise WaitTimedOut(f"gave up waiting after {self.timeout_s:g}s: job {self.job_id} is still "
                               f"{status}")
        self.delay = min(delay * 1.5, 2.0)
        return delay


def current_traceparent() -> str | None:
    """The W3C traceparent of the current OpenTelemetry span, or None: where the process never
    imported the OpenTelemetry API no span can be current, so it is not imported here (a web server
    that only enqueues pays nothing for traces)."""
    otel = sys.modules.get("opentelemetry.trace")
    if otel is None:
        return None
    context = otel.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def _fields(job: Mapping[str, Any] | wire.EnqueueRequest) -> Mapping[str, Any]:
    """A batch's job as fields (a request built by the caller is checked as a mapping is: its
    payload may be a model too)."""
    if isinstance(job, wire.EnqueueRequest):
        return {**job.model_dump(exclude={"payload"}, exclude_unset=True), "payload": job.payload}
    return job


def _payload(payload: Any) -> Any:
    """A pydantic model as the JSON it stands for; anything else as given (checked later)."""
    return payload.model_dump(mode="json") if isinstance(payload, BaseModel) else payload


def _key(given: str | None, keyed: bool) -> str | None:
    if not keyed:
        if given is not None:
            raise InvalidInput("keyed=False sends no Idempotency-Key; do not pass idempotency_key with it")
        return None
    return given or _new_key()


def _new_key() -> str:
    return f"sluice-{uuid.uuid4().hex}"


def _problem(response: HttpResponse) -> dict[str, Any]:
    try:
        parsed = json.loads(response.body) if response.body else {}
    except ValueError:
        parsed = {}
    return parsed if isinstance(parsed, dict) else {}


def _request_body(job: wire.EnqueueRequest) -> dict[str, Any]:
    """``job`` as a request body: without ``group`` when it has none (the body of before groups), and
    without ``max_attempts`` when unset (the handler's retry policy decides)."""
    body = job.model_dump()
    for optional in ("group", "max_attempts"):
        if body.get(optional) is None:
            body.pop(optional, None)
    return body
