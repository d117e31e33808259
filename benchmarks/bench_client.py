"""The client (issue 31, item 2): 1,000 sequential GETs the old way (urllib, a new connection per
request) against the pooled client (urllib3 keep-alive), over HTTP and over TLS.

Prints one JSON object per scheme:
  {"bench": "client", "scheme": "https", "gets": 1000, "rounds": 3,
   "urllib_rps", "urllib_rps_min", "urllib_cpu_us", "urllib_connections",
   "pooled_rps", "pooled_rps_min", "pooled_cpu_us", "pooled_connections",
   "async_rps", "async_rps_min", "async_cpu_us", "async_connections", "speedup"}

Each side is ``sluice.client.Client.status`` (request building, the JSON answer parsed into a
``JobView``), so the difference is the transport alone:

- urllib (``urllib_*``): the transport the client had before issue 31, ``UrllibTransport``, kept
  as an option (its code as it was, plus ``context`` to trust the run's certificate);
- pooled (``pooled_*``): the client's default, ``PooledTransport``;
- async (``async_*``, same pool): ``AsyncClient.status`` awaited one after the other, each hop
  through its thread pool (the cost of not having an async HTTP library, see sluice.client_async).

The server is a stub on 127.0.0.1 (the local stack's HTTP/1.1 handler base, ``QuietHandler``) that
answers every GET with the same job view and counts the TCP connections it accepts
(``*_connections``: per 1,000 GETs, so 1,000 for urllib and 1 for the pool); over TLS it holds a
self-signed certificate made for the run, which both sides verify. No gateway runs behind it: a
deployed API adds its own latency to both sides alike, and the handshakes this saves are
round trips to a region, not to localhost, so the speedup there is larger than here.

Each side has its own server process; a round runs every side's 1,000 GETs in blocks of BLOCK,
taking turns, so a burst of load from elsewhere on this shared machine hits every side alike; the
order of the turns rotates (whichever side followed urllib's block, whose server process was still
ending its 50 connections' threads, ran slower).
Rates are the best of ROUNDS (``*_rps``) and the worst (``*_rps_min``): the spread. ``*_cpu_us``
is the client process's CPU time per GET (median of the rounds), which the machine's load
disturbs less than the rates: the work a handshake costs the caller.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import emit, log
from sluice.client import Client, PooledTransport, UrllibTransport
from sluice.client_async import AsyncClient
from sluice_dev.local.httpd import QuietHandler

COUNT_PATH = "/connections"
GETS = 1_000
BLOCK = 50
ROUNDS = 3
JOB = "01HZX5Q3W7K2M9N4P6R8S0T1V2"
VIEW = json.dumps({"job_id": JOB, "queue": "emails", "status": "succeeded", "attempts": 1,
                   "created_at_ms": 1, "updated_at_ms": 2, "finished_at_ms": 2,
                   "result": {"echo": {"to": "ada"}}}).encode()


class Handler(QuietHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the local gateway and API Gateway
    server: CountingServer

    def do_GET(self) -> None:
        if self.path == COUNT_PATH:  # asked on a connection of its own, which is not counted
            self.server.accepted -= 1
            self.answer(200, str(self.server.accepted).encode())
            return
        self.answer(200, VIEW, [("Content-Type", "application/json")])


class CountingServer(ThreadingHTTPServer):
    """Counts the connections it accepts; with ``tls``, wraps each in TLS first."""

    daemon_threads = True
    tls: ssl.SSLContext | None = None
    accepted = 0

    def get_request(self) -> tuple[Any, Any]:
        sock, address = super().get_request()
        self.accepted += 1
        if self.tls is not None:
            sock = self.tls.wrap_socket(sock, server_side=True)
        return sock, address


def serve(cert: str | None, key: str | None) -> None:
    """The stub server, in a process of its own (in the benchmark's, it took the GIL from the
    client it measured): prints its port, serves until killed."""
    httpd = CountingServer(("127.0.0.1", 0), Handler)
    if cert is not None and key is not None:
        httpd.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        httpd.tls.load_cert_chain(cert, key)
    print(httpd.server_address[1], flush=True)
    httpd.serve_forever()


class Server:
    """A stub server process; ``accepted()``: the connections it accepted so far."""

    def __init__(self, tls: tuple[Path, Path] | None) -> None:
        argv = [sys.executable, __file__, "--serve", *(str(p) for p in tls or ())]
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        port = int(self.process.stdout.readline())
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
        self.context = None if tls is None else ssl.create_default_context(cafile=str(tls[0]))

    def accepted(self) -> int:
        with urllib.request.urlopen(self.url + COUNT_PATH, timeout=10, context=self.context) as response:
            return int(response.read())

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)
        if self.process.stdout is not None:
            self.process.stdout.close()


@contextmanager
def servers(n: int, tls: tuple[Path, Path] | None) -> Iterator[list[Server]]:
    started: list[Server] = []
    try:
        for _ in range(n):
            started.append(Server(tls))
        yield started
    finally:
        for server in started:
            server.stop()


def certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (its own CA) and its key, as PEM files."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sluice-bench")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


class Side:
    """One way of sending: a client made per round, its GETs timed block by block."""

    def __init__(self, name: str, url: str, make: Callable[[str], Any], is_async: bool = False) -> None:
        self.name, self.url, self.make, self.is_async = name, url, make, is_async
        self.rates: list[float] = []
        self.cpu_us: list[float] = []
        self.client: Any = None
        self.elapsed = self.cpu = 0.0
        self.loop = asyncio.new_event_loop() if is_async else None

    def start_round(self) -> None:
        self.client, self.elapsed, self.cpu = self.make(self.url), 0.0, 0.0

    def block(self, n: int) -> None:
        started, cpu = time.perf_counter(), time.process_time()
        if self.loop is not None:
            self.loop.run_until_complete(self._async_block(n))
        else:
            for _ in range(n):
                self.client.status(JOB)
        self.elapsed += time.perf_counter() - started
        self.cpu += time.process_time() - cpu

    async def _async_block(self, n: int) -> None:
        for _ in range(n):
            await self.client.status(JOB)

    def end_round(self) -> None:
        self.rates.append(GETS / self.elapsed)
        self.cpu_us.append(self.cpu / GETS * 1e6)
        if self.loop is not None:
            self.loop.run_until_complete(self.client.aclose())
        else:
            self.client.close()


def measure(scheme: str, tls: tuple[Path, Path] | None) -> dict[str, Any]:
    ca = None if tls is None else str(tls[0])
    with servers(3, tls) as (old, new, other):
        sides = [Side("urllib", old.url, lambda u: Client(u, transport=UrllibTransport(old.context))),
                 Side("pooled", new.url, lambda u: Client(u, transport=PooledTransport(ca_certs=ca))),
                 Side("async", other.url,
                      lambda u: AsyncClient.over(Client(u, transport=PooledTransport(ca_certs=ca))), True)]
        for round_no in range(ROUNDS):
            for side in sides:
                side.start_round()
            for block in range(GETS // BLOCK):
                for side in sides[block % 3:] + sides[:block % 3]:  # each goes first, second, last in turn
                    side.block(BLOCK)
            for side in sides:
                side.end_round()
            log(f"client {scheme} round {round_no + 1}: "
                + ", ".join(f"{s.name} {s.rates[-1]:,.0f}/s" for s in sides))
        figures: dict[str, Any] = {"scheme": scheme, "gets": GETS, "rounds": ROUNDS}
        for side, server in zip(sides, (old, new, other), strict=True):
            figures[f"{side.name}_rps"] = round(max(side.rates))
            figures[f"{side.name}_rps_min"] = round(min(side.rates))
            figures[f"{side.name}_cpu_us"] = round(statistics.median(side.cpu_us))
            figures[f"{side.name}_connections"] = round(server.accepted() / ROUNDS)
            if side.loop is not None:
                side.loop.close()
        figures["speedup"] = round(figures["pooled_rps"] / figures["urllib_rps"], 2)
        return figures


def main() -> None:
    emit("client", **measure("http", None))
    with tempfile.TemporaryDirectory(prefix="sluice-bench-client-") as tmp:
        emit("client", **measure("https", certificate(Path(tmp))))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(*(sys.argv[2:4] or (None, None)))
    else:
        main()
