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
Transport is urllib from the standard library; tests pass a fake.
"""

from __future__ import annotations

import json
import random
import re
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

from pydantic import ValidationError

from sluice.core import wire
from sluice.core.errors import ERROR_CODES, BackendUnavailable, InvalidInput, SluiceError, WaitTimedOut
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


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int
    headers: Mapping[str, str]  # lower-case names
    body: bytes


class Transport(Protocol):
    def send(self, method: str, url: str, headers: Mapping[str, str], body: bytes | None,
             timeout: float) -> HttpResponse:
        """Raise OSError (ConnectionError, TimeoutError, ...) when no response arrived."""
        ...


class UrllibTransport:
    def send(self, method: str, url: str, headers: Mapping[str, str], body: bytes | None,
             timeout: float) -> HttpResponse:
        request = urllib.request.Request(url, data=body, method=method, headers=dict(headers))
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return HttpResponse(response.status, {k.lower(): v for k, v in response.headers.items()},
                                    response.read())
        except urllib.error.HTTPError as exc:
            with exc:
                return HttpResponse(exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read())
        except urllib.error.URLError as exc:
            reason = exc.reason
            raise reason if isinstance(reason, OSError) else ConnectionError(str(reason)) from exc


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


class Client:
    def __init__(self, api_url: str, *, api_key: str | None = None, sign_sigv4: bool = False,
                 region: str | None = None, timeout_s: float = 10.0, max_attempts: int = 6,
                 backoff_base_ms: int = 100, backoff_cap_ms: int = 5_000, transport: Transport | None = None,
                 sleep: Callable[[float], None] = time.sleep, rng: random.Random | None = None,
                 credentials: Any = None, headers: Mapping[str, str] | None = None) -> None:
        self.api_url = api_url.rstrip("/")
        # Sent with every request; locally e.g. X-Sluice-Local-Caller (sluice_dev.local.api_server).
        self.headers = dict(headers or {})
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.max_attempts = max_attempts
        self.backoff_base_ms = backoff_base_ms
        self.backoff_cap_ms = backoff_cap_ms
        self.transport = transport or UrllibTransport()
        self.sleep = sleep
        self.rng = rng or random.Random()
        self.sign_sigv4 = sign_sigv4
        match = _REGION_IN_HOST.search(self.api_url)
        self.region = region or (match.group(1) if match else "us-east-1")
        self._credentials = credentials

    # -- the API ---------------------------------------------------------------------------

    def enqueue(self, queue: str, payload: Any, *, delay_seconds: int = 0, priority: int = 0,
                max_attempts: int | None = None, lease_seconds: int = 30,
                idempotency_key: str | None = None, keyed: bool = True,
                group: str | None = None) -> wire.Accepted:
        """``max_attempts`` None (the default) sends none: the handler's ``RetryPolicy`` decides,
        else 5. A number is a ceiling: the handler's policy may lower it, never raise it."""
        job = self._job({"payload": payload, "delay_seconds": delay_seconds, "priority": priority,
                         "max_attempts": max_attempts, "lease_seconds": lease_seconds}
                        | ({} if group is None else {"group": group}))
        body = self._call("POST", f"/v1/queues/{self._queue(queue)}/jobs", _request_body(job),
                          idempotency_key=_key(idempotency_key, keyed), keyed=keyed)
        return wire.Accepted.model_validate(body)

    def enqueue_batch(self, queue: str, jobs: Sequence[Mapping[str, Any] | wire.EnqueueRequest], *,
                      idempotency_key: str | None = None, keyed: bool = True) -> wire.BatchAccepted:
        try:
            batch = wire.BatchRequest(jobs=[j if isinstance(j, wire.EnqueueRequest) else self._job(j)
                                            for j in jobs])
        except ValidationError as exc:
            raise InvalidInput(f"invalid batch: {exc}") from exc
        body = self._call("POST", f"/v1/queues/{self._queue(queue)}/jobs/batch",
                          {"jobs": [_request_body(j) for j in batch.jobs]},
                          idempotency_key=_key(idempotency_key, keyed), keyed=keyed)
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
        deadline = clock() + timeout_s
        delay = poll_s
        while True:
            view = self.status(job_id)
            if view.status in FINAL_STATES:
                return view
            if clock() + delay > deadline:
                raise WaitTimedOut(f"gave up waiting after {timeout_s:g}s: job {job_id} is still "
                                   f"{view.status}")
            self.sleep(delay)
            delay = min(delay * 1.5, 2.0)

    # -- plumbing --------------------------------------------------------------------------

    @staticmethod
    def _job(fields: Mapping[str, Any]) -> wire.EnqueueRequest:
        try:
            job = wire.EnqueueRequest.model_validate(dict(fields))
        except ValidationError as exc:
            raise InvalidInput(f"invalid job: {exc}") from exc
        dump_json(job.payload)  # NaN, Infinity, non-JSON types: refuse here, not as a 400 later
        return job

    @staticmethod
    def _queue(queue: str) -> str:
        return quote(validate_queue_name(queue), safe="")

    def _call(self, method: str, path: str, body: Any = None, *, idempotency_key: str | None = None,
              keyed: bool = True) -> Any:
        data = None if body is None else json.dumps(body, separators=(",", ":"), allow_nan=False).encode()
        headers = {**self.headers, "Accept": "application/json", "User-Agent": f"sluice-client/{__version__}"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
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
                raise InvalidInput("sign_sigv4=True but no AWS credentials were found")
        request = AWSRequest(method=method, url=url, data=data or b"", headers=dict(headers))
        SigV4Auth(self._credentials, "execute-api", self.region).add_auth(request)  # fresh date per attempt
        return {k: str(v) for k, v in request.headers.items()}


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
