"""The built-in handlers: the default ``--handlers`` module of ``sluice dev`` and the demo.

Each queue shows one thing a real handler does:

- ``echo``: returns ``{"echo": <payload>}``.
- ``hash``: CPU work, ``{"data": "...", "rounds": 1000}`` -> iterated SHA-256.
- ``notify``: calls an HTTP service with the fencing token and an idempotency key
  (``store.fenced.fencing_headers``), so the service itself can refuse a stale
  worker. ``{"url": "http://127.0.0.1:PORT/sink/x", "message": ...}``; the local
  stack serves such a service (``sluice_dev.local.sink``) and passes its URL in
  ``SLUICE_EXAMPLES_SINK_URL``. The URL is the caller's, so it is an SSRF unless held
  in: only hosts on an allow-list (``SLUICE_EXAMPLES_NOTIFY_HOSTS``, comma-separated
  ``host`` or ``host:port``; by default the sink's host) are called, and no redirect is
  followed (a 3xx fails the job).
- ``ledger``: writes an item through ``ctx.fenced_table`` (a DynamoDB transaction that
  also checks the job's token), ``{"account": "a1", "amount": 5}``; ``"sleep": s`` first
  works ``s`` seconds without looking at its lease, as a careless handler would. It
  writes to one table only, named by the deployment (``SLUICE_EXAMPLES_LEDGER_TABLE``,
  default ``sluice-examples``), never by the payload. ``"notice": true`` first tells a
  service of the entry through ``ctx.http`` (best effort: a refusal is logged), a service
  running the fence middleware whose URL the deployment gives (``SLUICE_EXAMPLES_SERVICE_URL``;
  the local stack's ``sluice_dev.local.service``): the demo's frozen worker sees both its
  notice and its write refused.

These handlers are a demonstration: the deployed worker loads ``sluice.worker.no_handlers`` unless
``WorkerHandlersModule`` says otherwise (issue 19); ``sluice dev`` and the demo load this
module.
- ``flaky``: fails now and then, predictably: ``failing_attempts(payload)`` says how
  many attempts raise before one succeeds (None: every attempt, so the job ends dead).
- ``slow``: sleeps ``{"seconds": 6}``, longer than its lease when enqueued with a short one
  (``sluice enqueue slow -p '{"seconds": 6}' --lease-seconds 2``), kept alive by heartbeats;
  its result counts how often the lease was renewed while it ran. It stops early when a cancel
  is requested (``sluice cancel``), so the job ends ``cancelled``.
- ``thumbnails``: a typed queue (``model=Thumbnail``): the handler gets a validated
  ``Thumbnail``, ``{"url": "s3://photos/cat.jpg", "width": 128, "format": "webp"}``, and
  plans its thumbnail's key; a payload that does not validate (``{"width": 0}``) ends
  ``failed`` at once, with each field's error as its reason. ``app.schemas()["thumbnails"]``
  is its JSON Schema.
- ``fanout``: ``{"n": 10}`` starts ``n`` children on ``square`` (each squares its integer
  payload) and a continuation on ``sum``, which runs once after every child has ended and
  sums their results (``ctx.children()``): jobs that start jobs (docs/flows.md).

``expected_result`` predicts the result of the deterministic queues, for the demo's
and the chaos checker's "wrong results" check.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import urllib.error
import urllib.request
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sluice import Fail, Job, JobContext, LeaseLost, Retry, Worker
from sluice.backends.dynamodb.fenced import fencing_headers
from sluice.core.errors import InvalidInput, SluiceError
from sluice.core.families import MAX_CHILDREN
from sluice.core.models import dump_json

app = Worker()

LEDGER_TABLE = "sluice-examples"
SINK_URL_ENV = "SLUICE_EXAMPLES_SINK_URL"
SERVICE_URL_ENV = "SLUICE_EXAMPLES_SERVICE_URL"
NOTIFY_HOSTS_ENV = "SLUICE_EXAMPLES_NOTIFY_HOSTS"
LEDGER_TABLE_ENV = "SLUICE_EXAMPLES_LEDGER_TABLE"
MAX_ROUNDS = 200_000
MAX_SLEEP_S = 90


def _obj(job: Job) -> dict[str, Any]:
    if not isinstance(job.payload, dict):
        raise Fail(f"payload must be a JSON object, got {type(job.payload).__name__}")
    return job.payload


def _digest(value: Any) -> int:
    return int.from_bytes(hashlib.sha256(dump_json(value).encode("utf-8")).digest()[:8], "big")


# -- echo --------------------------------------------------------------------------------------------


@app.handler("echo")
def echo(job: Job, ctx: JobContext) -> dict[str, Any]:
    return {"echo": job.payload}


# -- hash --------------------------------------------------------------------------------------------


def hash_rounds(data: str, rounds: int) -> str:
    h = data.encode("utf-8")
    for _ in range(rounds):
        h = hashlib.sha256(h).digest()
    return h.hex()


@app.handler("hash")
def hash_payload(job: Job, ctx: JobContext) -> dict[str, Any]:
    p = _obj(job)
    rounds = p.get("rounds", 1)
    if isinstance(rounds, bool) or not isinstance(rounds, int) or not 1 <= rounds <= MAX_ROUNDS:
        raise Fail(f"rounds must be an integer in 1..{MAX_ROUNDS}")
    data = p.get("data", "")
    if not isinstance(data, str):
        data = dump_json(data)
    return {"sha256": hash_rounds(data, rounds), "rounds": rounds}


# -- notify (HTTP with fencing headers) ---------------------------------------------------------------


def notify_hosts() -> set[str]:
    """The hosts ``notify`` may call: SLUICE_EXAMPLES_NOTIFY_HOSTS, else the sink's host."""
    listed = os.environ.get(NOTIFY_HOSTS_ENV)
    if listed is None:
        sink = os.environ.get(SINK_URL_ENV)
        listed = urlsplit(sink).netloc if sink else ""
    return {h.strip().lower() for h in listed.split(",") if h.strip()}


def _allowed(url: str, hosts: set[str]) -> bool:
    try:
        parts = urlsplit(url)
        host, port = (parts.hostname or "").lower(), parts.port
    except ValueError:  # a malformed port
        return False
    if parts.scheme not in ("http", "https") or not host or parts.username or parts.password:
        return False
    return host in hosts or (port is not None and f"{host}:{port}" in hosts)


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A 3xx is answered as an HTTPError: a redirect could lead anywhere, the allow-list too."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects())


def _open(request: urllib.request.Request, timeout: float) -> Any:
    return _OPENER.open(request, timeout=timeout)


@app.handler("notify", timeout_s=30)
def notify(job: Job, ctx: JobContext) -> dict[str, Any]:
    p = _obj(job)
    url = p.get("url") or os.environ.get(SINK_URL_ENV)
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise Fail(f"no sink URL: pass payload.url or set {SINK_URL_ENV}")
    if not _allowed(url, notify_hosts()):
        raise Fail(f"{urlsplit(url).netloc!r} is not an allowed notify host ({NOTIFY_HOSTS_ENV})")
    body = json.dumps({"job_id": job.job_id, "message": p.get("message")}).encode("utf-8")
    headers = {"Content-Type": "application/json", **fencing_headers(job.job_id, ctx.token)}
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with _open(request, timeout=10) as response:
            reply = json.loads(response.read() or b"null")
            return {"status": response.status, "reply": reply}
    except urllib.error.HTTPError as exc:
        if exc.code == 409:  # the service saw a newer token for this key: we are the stale worker
            raise LeaseLost(f"{url} refused fencing token {ctx.token}: a newer worker called it") from exc
        if exc.code >= 500 or exc.code == 429:
            raise Retry(after=0.5, reason=f"{url} answered {exc.code}") from exc
        raise Fail(f"{url} answered {exc.code} (redirects are not followed)" if 300 <= exc.code < 400
                   else f"{url} answered {exc.code}") from exc
    except (urllib.error.URLError, TimeoutError) as exc:
        raise Retry(after=0.5, reason=f"{url} unreachable: {exc}") from exc


# -- ledger (FencedTable) -------------------------------------------------------------------------------


def _notice(ctx: JobContext, account: str, amount: int) -> None:
    """Tell the ledger's service of the entry, best effort, as handlers often notify: a failure is
    logged and the entry is written anyway. The service's fence refuses a stale holder's notice
    (StaleToken) as the fenced table refuses its write: the demo's frozen worker shows both."""
    url = os.environ.get(SERVICE_URL_ENV)
    if not url:
        raise Fail(f"a notice needs the service's URL ({SERVICE_URL_ENV})")
    try:
        ctx.http.request("POST", url.rstrip("/") + "/ledger", json={"account": account, "amount": amount},
                         resource="ledger-notice", timeout=10)
    except SluiceError as exc:
        ctx.logger.warning("ledger notice not sent: %s", exc)


@app.handler("ledger")
def ledger(job: Job, ctx: JobContext) -> dict[str, Any]:
    p = _obj(job)
    account = str(p.get("account", "default"))[:64]
    amount = p.get("amount", 0)
    if isinstance(amount, bool) or not isinstance(amount, int):
        raise Fail("amount must be an integer")
    pause = p.get("sleep", 0)
    if isinstance(pause, int | float) and not isinstance(pause, bool) and 0 < pause <= MAX_SLEEP_S:
        # Work that ignores ctx.lease_lost, as careless handlers do: if this worker froze
        # meanwhile and another took the job over, the write below is refused anyway.
        time.sleep(float(pause))
    name = os.environ.get(LEDGER_TABLE_ENV) or LEDGER_TABLE
    if "table" in p and p["table"] != name:
        raise Fail(f"ledger writes only to its configured table ({LEDGER_TABLE_ENV}), "
                   "not to one named in the payload")
    if p.get("notice") is True:
        _notice(ctx, account, amount)
    table = ctx.fenced_table(name)
    # Keyed by job: a redelivered job overwrites its own entry, never adds a second one.
    table.put_item({"pk": f"{account}#{job.job_id}", "account": account, "amount": amount,
                    "job_id": job.job_id, "token": ctx.token})
    return {"account": account, "amount": amount, "entry": f"{account}#{job.job_id}"}


# -- flaky ---------------------------------------------------------------------------------------------


def failing_attempts(payload: Any) -> int | None:
    """How many attempts of this payload fail before one succeeds; None: all of them.

    ``{"fail_attempts": k}`` says it outright, ``{"always_fail": true}`` never
    succeeds; otherwise one payload in five fails once, chosen by its hash.
    """
    if isinstance(payload, dict):
        if payload.get("always_fail") is True:
            return None
        k = payload.get("fail_attempts")
        if isinstance(k, int) and not isinstance(k, bool) and k >= 0:
            return k
    return 1 if _digest(payload) % 5 == 0 else 0


@app.handler("flaky")
def flaky(job: Job, ctx: JobContext) -> dict[str, Any]:
    failing = failing_attempts(job.payload)
    if failing is None or job.attempt <= failing:
        raise RuntimeError(f"flaky: attempt {job.attempt} fails on purpose "
                           f"({'always' if failing is None else f'first {failing}'})")
    # Independent of the attempt number: a redelivered job must write an equal result.
    return {"ok": True, "failed_attempts": failing, "payload": job.payload}


# -- slow (longer than its lease) ------------------------------------------------------------------------


@app.handler("slow", timeout_s=MAX_SLEEP_S + 10)
def slow(job: Job, ctx: JobContext) -> dict[str, Any]:
    p = _obj(job)
    seconds = p.get("seconds", 5)
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 <= seconds <= MAX_SLEEP_S:
        raise Fail(f"seconds must be a number in 0..{MAX_SLEEP_S}")
    deadlines = {ctx.lease_deadline_ms}
    end = time.monotonic() + float(seconds)
    while (left := end - time.monotonic()) > 0:
        if ctx.lease_lost.wait(min(0.1, left)):
            raise LeaseLost("slow: the lease was lost while sleeping; stopping early")
        if ctx.cancel_requested.is_set():  # a request: stopping is the handler's part (raising: cancelled)
            raise RuntimeError("slow: a cancel was requested; stopping early")
        deadlines.add(ctx.lease_deadline_ms)
    return {"slept": seconds, "renewals": len(deadlines) - 1}


# -- thumbnails (a typed queue) ---------------------------------------------------------------------------


class Thumbnail(BaseModel):
    """A ``thumbnails`` job: the image, and the box its thumbnail fits in."""

    model_config = ConfigDict(extra="forbid", frozen=True)  # a misspelt field is refused, not ignored

    url: str = Field(min_length=1, max_length=1024, pattern=r"^(s3|https?)://")
    width: int = Field(gt=0, le=4096)
    format: Literal["png", "webp"] = "png"


def thumbnail_of(req: Thumbnail) -> dict[str, Any]:
    digest = hashlib.sha256(f"{req.url}|{req.width}".encode()).hexdigest()[:16]
    return {"thumbnail": f"thumbs/{digest}-{req.width}.{req.format}", "width": req.width,
            "format": req.format}


@app.handler("thumbnails", model=Thumbnail)
def thumbnails(req: Thumbnail, ctx: JobContext) -> dict[str, Any]:
    return thumbnail_of(req)


# -- fanout (jobs that start jobs) --------------------------------------------------------------------------


@app.handler("fanout")
def fanout(job: Job, ctx: JobContext) -> dict[str, Any]:
    """``{"n": 10}``: ``n`` children on ``square`` (payloads 0..n-1), then one ``sum`` after them all.

    The keys name the children, so a re-run of this job starts the same ``n`` children again
    (nothing new) and the same continuation."""
    n = _obj(job).get("n", 10)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_CHILDREN:
        raise Fail(f"n must be an integer in 1..{MAX_CHILDREN}")
    family = ctx.enqueue_many([("square", i, f"square-{i}") for i in range(n)], then=("sum", {"n": n}))
    return {"children": len(family.job_ids), "continuation": family.continuation}


@app.handler("square")
def square(job: Job, ctx: JobContext) -> int:
    if isinstance(job.payload, bool) or not isinstance(job.payload, int):
        raise Fail("square takes an integer")
    return int(job.payload) ** 2


@app.handler("sum")
def sum_children(job: Job, ctx: JobContext) -> dict[str, Any]:
    """The continuation of ``fanout``: the sum of its children's results, and how they ended."""
    children = ctx.children()
    states: dict[str, int] = {}
    for child in children:
        states[child.status.value] = states.get(child.status.value, 0) + 1
    total = sum(c.result for c in children if c.status.value == "succeeded" and isinstance(c.result, int))
    return {"sum": total, "children": len(children), "states": states}


# -- prediction ------------------------------------------------------------------------------------------


def expected_result(queue: str, payload: Any) -> Any:
    """The result a deterministic queue's handler returns for ``payload`` (``...`` if unknown)."""
    if queue == "echo":
        return {"echo": payload}
    if queue == "hash" and isinstance(payload, dict):
        data = payload.get("data", "")
        return {"sha256": hash_rounds(data if isinstance(data, str) else dump_json(data),
                                      int(payload.get("rounds", 1))), "rounds": int(payload.get("rounds", 1))}
    if queue == "square" and isinstance(payload, int) and not isinstance(payload, bool):
        return payload ** 2
    if queue == "sum" and isinstance(payload, dict) and isinstance(payload.get("n"), int):
        n = payload["n"]
        return {"sum": sum(i * i for i in range(n)), "children": n, "states": {"succeeded": n}}
    if queue == "flaky":
        failing = failing_attempts(payload)
        return ... if failing is None else {"ok": True, "failed_attempts": failing, "payload": payload}
    if queue == "thumbnails":
        try:
            return thumbnail_of(Thumbnail.model_validate_json(dump_json(payload)))
        except (ValidationError, InvalidInput):
            return ...  # it ends failed, with no result
    return ...
