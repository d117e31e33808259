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
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from sluice_dev.local import servers

StartResponse = Callable[..., Any]
Wsgi = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"})
COUNT_ENV = "SLUICE_MOTO_COUNT_WRITES"  # "1": count DynamoDB writes per item key (benchmarks)
COUNTS_PATH = "/_sluice/writes"


class WriteCounter:
    """DynamoDB write requests per item key (``GET /_sluice/writes``): a benchmark's measure of
    what a path costs the jobs table, whichever process made the write (``bench_fanout``)."""

    def __init__(self) -> None:
        self.by_key: dict[str, int] = {}
        self.by_op: dict[str, int] = {}

    def add(self, environ: dict[str, Any]) -> None:
        op = str(environ.get("HTTP_X_AMZ_TARGET", "")).rsplit(".", 1)[-1]
        if op not in WRITES:
            return
        self.by_op[op] = self.by_op.get(op, 0) + 1
        size = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(size) if size else b""
        environ["wsgi.input"] = io.BytesIO(body)
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            return
        for key in _keys(op, request):
            self.by_key[key] = self.by_key.get(key, 0) + 1

    def answer(self, start_response: StartResponse) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "application/json")])
        return [json.dumps({"by_key": self.by_key, "by_op": self.by_op}).encode()]


def _keys(op: str, request: dict[str, Any]) -> list[str]:
    def key(item: Any) -> str:
        value: Any = (item or {}).get("job_id") or next(iter((item or {}).values()), {})
        return str(value.get("S", "")) if isinstance(value, dict) else ""

    if op in ("PutItem",):
        return [key(request.get("Item"))]
    if op in ("UpdateItem", "DeleteItem"):
        return [key(request.get("Key"))]
    if op == "TransactWriteItems":
        return [key(next(iter(i.values())).get("Key") or next(iter(i.values())).get("Item"))
                for i in request.get("TransactItems", [])]
    return [key(r.get("PutRequest", {}).get("Item") or r.get("DeleteRequest", {}).get("Key"))
            for rs in request.get("RequestItems", {}).values() for r in rs]


class Serialized:
    """A WSGI app that lets one request at a time into ``app`` (and materialises its body)."""

    def __init__(self, app: Wsgi, counter: WriteCounter | None = None) -> None:
        self.app = app
        self.lock = threading.Lock()
        self.counter = counter

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
        if self.counter is not None:
            if environ.get("PATH_INFO") == COUNTS_PATH:
                with self.lock:
                    return self.counter.answer(start_response)
            with self.lock:
                self.counter.add(environ)
        if environ.get("HTTP_X_AMZ_TARGET") == RECEIVE:
            return self._long_poll(environ, start_response)
        return self._once(environ, start_response)

    def _once(self, environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
        with self.lock:
            result = self.app(environ, start_response)
            try:
                return list(result)
            finally:
                close = getattr(result, "close", None)
                if callable(close):
                    close()

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
    """The same server as ``servers.start_moto`` (kept for existing callers)."""
    port = port or servers.free_port()
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115 (the child owns it)
    proc = subprocess.Popen([sys.executable, "-m", "sluice_dev.local.motoserver", "-p", str(port)],
                            stdout=out,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env={**os.environ, **servers.DUMMY_AWS_ENV}, start_new_session=True)
    servers.wait_for_port(port, proc=proc)
    return servers.Server("moto", port, proc, log_path, {"url": f"http://127.0.0.1:{port}"})


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

    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import run_simple

    from sluice_dev.local import motosqs, mototx

    mototx.install()
    motosqs.install()

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
    counter = WriteCounter() if os.environ.get(COUNT_ENV) == "1" else None
    run_simple(args.host, args.port, Serialized(app, counter), threaded=True,
               request_handler=MotoRequestHandler)
    return 0


if __name__ == "__main__":
    sys.exit(main())
