"""The moto server, with its backends serialised: ``python -m sluice.local.motoserver -p PORT``.

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
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from sluice.local import servers

StartResponse = Callable[..., Any]
Wsgi = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


class Serialized:
    """A WSGI app that lets one request at a time into ``app`` (and materialises its body)."""

    def __init__(self, app: Wsgi) -> None:
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
        with self.lock:
            result = self.app(environ, start_response)
            try:
                return list(result)
            finally:
                close = getattr(result, "close", None)
                if callable(close):
                    close()


def start(port: int | None = None, log_path: Path | None = None) -> servers.Server:
    """The same server as ``servers.start_moto`` (kept for existing callers)."""
    port = port or servers.free_port()
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115 (the child owns it)
    proc = subprocess.Popen([sys.executable, "-m", "sluice.local.motoserver", "-p", str(port)], stdout=out,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env={**os.environ, **servers.DUMMY_AWS_ENV}, start_new_session=True)
    servers.wait_for_port(port, proc=proc)
    return servers.Server("moto", port, proc, log_path, {"url": f"http://127.0.0.1:{port}"})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sluice.local.motoserver")
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

    class Dispatch(DomainDispatcherApplication):
        """Remembers which backend serves a host: moto otherwise scans every service's URL
        patterns on every request, a sizeable share of a request's cost."""

        known: dict[str | None, Any] = {}

        def get_backend_for_host(self, host: str | None) -> Any:
            if host not in self.known:
                self.known[host] = super().get_backend_for_host(host)
            return self.known[host]

    app = Dispatch(create_backend_app)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    run_simple(args.host, args.port, Serialized(app), threaded=True,
               request_handler=MotoRequestHandler)
    return 0


if __name__ == "__main__":
    sys.exit(main())
