"""The moto server, with its backends serialised: ``python -m sluice_dev.local.motoserver -p PORT``.

moto's DynamoDB backend takes no locks, and its stock server runs every request on
its own thread, so two requests on one item interleave: a conditional write can
check its condition, lose the GIL, and apply its update on top of another request's
(lost updates, a token of 1 on an item still "queued", a grant landing after the
result). Real DynamoDB applies each request to an item atomically, and the fencing
token depends on it. Here connections are still accepted and read concurrently, but
only one request at a time runs inside moto. moto is CPU-bound under one GIL
anyway, so this costs no throughput.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sluice_dev.local import servers

StartResponse = Callable[..., Any]
Wsgi = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


PRELOAD = servers.MOTO_PRELOAD  # what a moto zygote imports before it forks a server

WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"})
COUNT_ENV = "SLUICE_MOTO_COUNT_WRITES"  # "1": count DynamoDB writes per item key (benchmarks)
COUNTS_PATH = "/_sluice/writes"


class WriteCounter:
    """DynamoDB writes per item key (``GET /_sluice/writes``): a benchmark's measure of what a path
    costs the jobs table, whichever process made the write (``bench_fanout``).

    ``by_key`` counts requests; ``wcu_by_key`` counts write capacity units as DynamoDB bills them:
    1 per KB of the larger of the item's size before and after the write (at least 1), a refused
    conditional write billed all the same, twice that in a transaction. moto's own
    ``ConsumedCapacity`` (``ReturnConsumedCapacity=TOTAL``) is a constant 1.0 per call whatever the
    item's size, and absent on a refused write, so the sizes are read here, from moto's backend
    (``size``: table and key -> the item's size in bytes, or None), around the request."""

    def __init__(self, size: Callable[[str, dict[str, Any]], int | None] | None = None) -> None:
        self.by_key: dict[str, int] = {}
        self.by_op: dict[str, int] = {}
        self.wcu_by_key: dict[str, int] = {}
        self._size = size

    def add(self, environ: dict[str, Any]) -> list[Written]:
        """Count a write request; what it writes (for ``billed``, once moto has run it)."""
        op = str(environ.get("HTTP_X_AMZ_TARGET", "")).rsplit(".", 1)[-1]
        if op not in WRITES:
            return []
        self.by_op[op] = self.by_op.get(op, 0) + 1
        size = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(size) if size else b""
        environ["wsgi.input"] = io.BytesIO(body)
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            return []
        written = _keys(op, request)
        for w in written:
            self.by_key[w.name] = self.by_key.get(w.name, 0) + 1
        if self._size is not None:
            for w in written:
                w.before = self._size(w.table, w.key) or 0
        return written

    def billed(self, written: list[Written]) -> None:
        """The WCUs of ``written`` (``add``'s answer) now that the request has run."""
        if self._size is None:
            return
        for w in written:
            after = self._size(w.table, w.key) or 0
            units = max(1, -(-max(w.before, after) // 1024)) * (2 if w.transaction else 1)
            self.wcu_by_key[w.name] = self.wcu_by_key.get(w.name, 0) + units

    def answer(self, start_response: StartResponse) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "application/json")])
        return [json.dumps({"by_key": self.by_key, "by_op": self.by_op,
                            "wcu_by_key": self.wcu_by_key}).encode()]


@dataclass
class Written:
    """One item a write request writes: its table, key, the key's ``job_id`` and its size before."""

    table: str
    key: dict[str, Any]
    name: str
    transaction: bool = False
    before: int = 0


def _keys(op: str, request: dict[str, Any]) -> list[Written]:
    def key(item: Any) -> str:
        value: Any = (item or {}).get("job_id") or next(iter((item or {}).values()), {})
        return str(value.get("S", "")) if isinstance(value, dict) else ""

    def one(table: str, item: Any, transaction: bool = False) -> Written:
        item = item or {}
        return Written(table, {"job_id": item["job_id"]} if "job_id" in item else dict(item), key(item),
                       transaction)

    table = str(request.get("TableName", ""))
    if op in ("PutItem",):
        return [one(table, request.get("Item"))]
    if op in ("UpdateItem", "DeleteItem"):
        return [one(table, request.get("Key"))]
    if op == "TransactWriteItems":
        parts = [next(iter(i.values())) for i in request.get("TransactItems", [])]
        return [one(str(p.get("TableName", "")), p.get("Key") or p.get("Item"), True) for p in parts]
    return [one(t, r.get("PutRequest", {}).get("Item") or r.get("DeleteRequest", {}).get("Key"))
            for t, rs in request.get("RequestItems", {}).items() for r in rs]


def moto_item_size(table: str, key: dict[str, Any]) -> int | None:
    """The size moto's backend gives the item under ``key`` in ``table`` (DynamoDB's sizing rules:
    attribute names plus values), in whichever account and region holds the table; None: no item."""
    from moto.dynamodb.models import dynamodb_backends
    from moto.dynamodb.models.dynamo_type import DynamoType

    if len(key) != 1:
        return None  # the jobs table has a hash key only; other tables are not metered
    for account in list(dynamodb_backends):
        for region in list(dynamodb_backends[account]):
            found = dynamodb_backends[account][region].tables.get(table)
            if found is not None:
                item = found.get_item(DynamoType(next(iter(key.values()))))
                return None if item is None else int(item.size())
    return None


class Serialized:
    """A WSGI app that lets one request at a time into ``app`` (and materialises its body)."""

    def __init__(self, app: Wsgi, counter: WriteCounter | None = None) -> None:
        self.app = app
        self.lock = threading.Lock()
        self.counter = counter

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
        if self.counter is not None and environ.get("PATH_INFO") == COUNTS_PATH:
            with self.lock:
                return self.counter.answer(start_response)
        if environ.get("HTTP_X_AMZ_TARGET") == RECEIVE:
            return self._long_poll(environ, start_response)
        return self._once(environ, start_response)

    def _once(self, environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
        with self.lock:  # the counter reads the items' sizes before and after, with nothing between
            written = self.counter.add(environ) if self.counter is not None else []
            result = self.app(environ, start_response)
            try:
                return list(result)
            finally:
                close = getattr(result, "close", None)
                if callable(close):
                    close()
                if self.counter is not None and written:
                    self.counter.billed(written)

    def _long_poll(self, environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
        """An SQS long poll, waited out here and not inside moto: moto sleeps on an empty queue
        for the whole WaitTimeSeconds, and would sleep holding the lock, so a `sluice events
        --follow` stalled every DynamoDB call of the stack for a second per empty poll. Each try
        is a short poll (WaitTimeSeconds 0), which moto answers exactly."""
        size = int(environ.get("CONTENT_LENGTH") or 0)
        raw = environ["wsgi.input"].read(size) if size else b""
        environ["wsgi.input"] = io.BytesIO(raw)
        try:
            request = json.loads(raw or b"{}")
            wait_s = float(request.get("WaitTimeSeconds") or 0)
        except (ValueError, TypeError, AttributeError):
            wait_s = 0.0
        if not 0 < wait_s <= MAX_WAIT_S:  # a short poll, or one moto refuses itself
            return self._once(environ, start_response)
        body = json.dumps({**request, "WaitTimeSeconds": 0}).encode()
        deadline = time.monotonic() + wait_s
        while True:
            answer: list[Any] = []
            attempt = {**environ, "wsgi.input": io.BytesIO(body), "CONTENT_LENGTH": str(len(body))}
            chunks = self._once(attempt, lambda *args, keep=answer: keep.append(args))
            if not _empty_receive(answer, chunks) or time.monotonic() >= deadline:
                start_response(*answer[0])
                return chunks
            time.sleep(POLL_S)


RECEIVE = "AmazonSQS.ReceiveMessage"
MAX_WAIT_S = 20  # SQS's own bound; moto refuses more
POLL_S = 0.05


def _empty_receive(answer: list[Any], chunks: list[bytes]) -> bool:
    """A 200 answer to ReceiveMessage with no messages (an error is returned as it is)."""
    if not answer or not str(answer[0][0]).startswith("200"):
        return False
    try:
        return not json.loads(b"".join(chunks) or b"{}").get("Messages")
    except ValueError:
        return False


def start(port: int | None = None, log_path: Path | None = None) -> servers.Server:
    """``servers.start_moto`` (kept for existing callers)."""
    return servers.start_moto(port, log_path)


def _exit_now() -> None:
    """SIGTERM's end: at once, without tearing down the interpreter (moto's thousands of modules
    took it most of a second, which every stop of a stack waited for). The server keeps nothing
    to save; its log is flushed first."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sluice_dev.local.motoserver")
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, required=True)
    args = parser.parse_args(argv)
    os.environ.setdefault("MOTO_PORT", str(args.port))
    from moto.moto_api._internal import mock_random

    # moto draws its ids from a generator of its own, which a fork would share with its zygote's
    # every other fork (the random module's reseeds itself in a fork; this one does not).
    mock_random.seed()

    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import run_simple

    from sluice_dev.local import motoddb, motoevents, motoexpr, motos3list, motosqs, mototime, mototx
    from sluice_dev.local.keepalive import KeepAlive

    mototx.install()
    motoddb.install()
    motoexpr.install()
    motoevents.install()
    mototime.install()
    motosqs.install()
    motos3list.install()

    class Dispatch(DomainDispatcherApplication):
        """Remembers which backend serves a host: moto otherwise scans every service's URL
        patterns on every request, a sizeable share of a request's cost."""

        known: dict[str | None, Any] = {}

        def get_backend_for_host(self, host: str | None) -> Any:
            if host not in self.known:
                self.known[host] = super().get_backend_for_host(host)
            return self.known[host]

    app = Dispatch(create_backend_app)
    # werkzeug logs a line per request under a lock every thread contends for: 11% of the
    # server's samples in a chaos run (py-spy), for a log nobody reads. Errors still log.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    signal.signal(signal.SIGTERM, lambda *_: _exit_now())
    counter = WriteCounter(moto_item_size) if os.environ.get(COUNT_ENV) == "1" else None

    class Handler(KeepAlive, MotoRequestHandler):
        """moto's handler, its connections kept open (``keepalive``)."""

    run_simple(args.host, args.port, Serialized(app, counter), threaded=True, request_handler=Handler)
    return 0


if __name__ == "__main__":
    sys.exit(main())
