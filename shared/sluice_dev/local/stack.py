"""``sluice dev``: the whole pipeline on one machine, on free ports, state under ``.sluice/``.

The servers (redis-server, the moto server for DynamoDB and S3, Tansu storing to
S3 on a second moto server) are children of this process, each in its own process
group; ``Stack.stop`` ends them all, so Ctrl-C or SIGTERM leaves no orphan.
A pid file makes a second ``sluice dev`` in the same folder report the running
one instead of starting another.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from sluice.core.config import Settings
from sluice.core.errors import SluiceError
from sluice_dev.local import motoserver, redis_users, servers
from sluice_dev.local.cluster import Cluster, start_cluster
from sluice_dev.local.redis_users import LocalRedisUser
from sluice_dev.local.servers import Server

STATE_DIR = Path(".sluice")
TANSU_BUCKET = "tansu"


class StackRunning(SluiceError):
    """Another ``sluice dev`` already runs in this folder."""


def plain_settings(settings: Settings) -> dict[str, Any]:
    """``settings`` as plain values, secrets revealed: for a child process we start, which must
    rebuild an equal ``Settings`` (``model_dump`` alone masks secrets)."""
    plain = {name: value for name, value in settings.model_dump(mode="json").items() if value is not None}
    secret = {name: value.get_secret_value() for name, value in settings if isinstance(value, SecretStr)}
    return plain | secret


def _env_text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def settings_env(settings: Settings) -> dict[str, str]:
    """``SLUICE_*`` variables that make ``Settings.from_env()`` in a child equal ``settings``."""
    return {f"SLUICE_{name.upper()}": _env_text(value)
            for name, value in plain_settings(settings).items()}


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def running_stack(state_dir: Path = STATE_DIR) -> dict[str, Any] | None:
    """The endpoints of the stack running in this folder, or None."""
    pid_file = state_dir / "dev.pid"
    endpoints = state_dir / "endpoints.json"
    if not pid_file.exists():
        return None
    try:
        pid = int(pid_file.read_text().strip())
    except ValueError:
        return None
    if not pid_alive(pid):
        return None
    if endpoints.exists():
        data: dict[str, Any] = json.loads(endpoints.read_text())
        data.setdefault("pid", pid)
        return data
    return {"pid": pid, "starting": True}


def settings_from_endpoints(data: dict[str, Any], base: Settings | None = None) -> Settings:
    """Settings that point every adapter at a running local stack."""
    overrides = {
        "redis_url": data["redis_url"],
        "kafka_bootstrap": data["kafka_bootstrap"],
        "aws_endpoint_url": data["aws_endpoint_url"],
        "kafka_security": "plaintext",
    }
    for key, name in (("routes_table", "routes_table"), ("queues_table", "queues_table"),
                      ("lambda_url", "lambda_endpoint_url")):
        if data.get(key):  # the local stack's routes table and Lambda API (sluice routes register)
            overrides[name] = data[key]
    if base is None:
        return Settings(**overrides)
    return base.model_copy(update=overrides)


@dataclass
class Stack:
    """The servers of a local stack. ``start`` is idempotent per instance."""

    state_dir: Path = STATE_DIR
    kafka_bootstrap: str | None = None  # an existing Kafka named in config; else Tansu
    redis_shards: int = 1  # above 1: a local Redis cluster of that many masters (sluice_dev.local.cluster)
    servers: dict[str, servers.Server] = field(default_factory=dict)
    cluster: Cluster | None = None
    settings: Settings | None = None
    redis_users: list[LocalRedisUser] = field(default_factory=list)  # each function's ACL user (redis_users)
    # Servers someone else started and keeps (endpoints.json's keys redis_url, kafka_bootstrap,
    # aws_endpoint_url, optionally job_id_secret): this stack starts none and stops none, and sets its
    # Redis users on that Redis. An upgrade test runs the old code's functions, then this code's, on one
    # set of servers (tests/stack/test_upgrade.py).
    attach: dict[str, str] | None = None
    _lock_fd: int | None = field(default=None, repr=False)

    def claim(self) -> None:
        """Take the folder's lock and pid file, or raise StackRunning.

        An exclusive ``flock`` on ``dev.lock``, held for the life of the process, makes two
        stacks starting at the same moment impossible; the kernel drops it when the process
        dies, however it dies, so a stale pid file never blocks a new stack.
        """
        self.state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.state_dir / "dev.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            other = running_stack(self.state_dir) or {}
            where = f"; gateway {other['gateway_url']}" if other.get("gateway_url") else " (starting)"
            raise StackRunning(f"sluice dev already runs in {self.state_dir.resolve().parent} "
                               f"(pid {other.get('pid', '?')}){where}") from None
        self._lock_fd = fd
        with contextlib.suppress(FileNotFoundError):
            (self.state_dir / "endpoints.json").unlink()
        (self.state_dir / "dev.pid").write_text(str(os.getpid()))

    def start_servers(self, base: Settings | None = None) -> Settings:
        """Start the servers, the independent ones at the same time, and return Settings for them.

        Tansu keeps its log on a moto server of its own: the broker's S3 traffic then never
        queues behind DynamoDB requests (so Kafka acknowledgements stay quick under load), and
        a broker restart touches nothing the application stores. Both moto servers run one
        request at a time (``local.motoserver``): stock moto lets concurrent conditional
        writes to one item interleave, which real DynamoDB never does.
        """
        logs = self.state_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        if self.attach is not None:
            return self._attach(base)
        starters: dict[str, Callable[[], Server]] = {
            "redis": self._start_redis,
            "moto": lambda: motoserver.start(log_path=logs / "moto.log"),
        }
        if self.kafka_bootstrap is None:
            starters["kafka-s3"] = lambda: motoserver.start(log_path=logs / "kafka-s3.log")
        with ThreadPoolExecutor(len(starters)) as pool:
            futures = {name: pool.submit(fn) for name, fn in starters.items()}
            failed: BaseException | None = None
            for name, future in futures.items():
                try:
                    self.servers[name] = future.result()
                except Exception as exc:  # stop() ends the ones that did start
                    failed = failed or exc
            if failed is not None:
                raise failed
        aws = self.servers["moto"].extra["url"]
        if self.kafka_bootstrap is None:
            self.servers["tansu"] = self._start_tansu()
            bootstrap = self.servers["tansu"].extra["bootstrap"]
        else:
            bootstrap = self.kafka_bootstrap
        self._name_shards()
        redis_url = self.cluster.url if self.cluster is not None else self.servers["redis"].extra["url"]
        settings = settings_from_endpoints(
            {"redis_url": redis_url, "kafka_bootstrap": bootstrap,
             "aws_endpoint_url": aws}, base)
        if settings.job_id_secret is None and settings.job_id_secret_arn is None:
            # One per stack, handed to every process it starts (settings_env): the gateway
            # signs job ids with it (docs/api.md, Job ids). Not written to endpoints.json.
            settings = settings.model_copy(update={"job_id_secret": SecretStr(secrets.token_urlsafe(32))})
        self.settings = settings
        return self.settings

    def _attach(self, base: Settings | None) -> Settings:
        """Settings for the servers in ``attach``; this stack's Redis users set on that Redis."""
        assert self.attach is not None
        settings = settings_from_endpoints(self.attach, base)
        secret = self.attach.get("job_id_secret") or secrets.token_urlsafe(32)
        if settings.job_id_secret is None and settings.job_id_secret_arn is None:
            settings = settings.model_copy(update={"job_id_secret": SecretStr(secret)})
        if self.redis_users:
            import redis

            client = redis.Redis.from_url(settings.redis_url)
            try:
                for user in self.redis_users:
                    client.execute_command(*user.setuser())  # ACL SETUSER ...
            finally:
                client.close()
        self.settings = settings
        return settings

    def _start_tansu(self, port: int | None = None) -> Server:
        s3 = self.servers["kafka-s3"].extra["url"]
        servers.ensure_bucket(s3, TANSU_BUCKET)
        return servers.start_tansu(port, s3_endpoint=s3, bucket=TANSU_BUCKET,
                                   log_path=self.state_dir / "logs" / "tansu.log")

    def restart_broker(self) -> None:
        """Stop and start Tansu on the same port: its S3 storage keeps every record."""
        old = self.servers["tansu"]
        old.stop(sig=signal.SIGTERM)  # the chaos fault's restart as it always was, not the quick exit
        self.servers["tansu"] = self._start_tansu(old.port)

    def _start_redis(self) -> Server:
        """redis-server, or with ``redis_shards`` above 1 a cluster (its first master returned)."""
        logs = self.state_dir / "logs"
        aclfile = self._aclfile()
        if self.redis_shards <= 1:
            return servers.start_redis(workdir=self.state_dir / "redis", log_path=logs / "redis.log",
                                       aclfile=aclfile)
        self.cluster = start_cluster(self.redis_shards, workdir=self.state_dir / "redis-cluster",
                                     log_dir=logs, aclfile=aclfile)
        return self.cluster.nodes[0]

    def _aclfile(self) -> Path | None:
        """The Redis users' aclfile (None without users: the default user alone, as before)."""
        if not self.redis_users:
            return None
        return redis_users.acl_file(self.state_dir / "redis-users.acl", self.redis_users)

    def _name_shards(self) -> None:
        """Every master of the cluster in ``servers`` (``redis``, ``redis-1``, ...): stopped with the rest."""
        if self.cluster is not None:
            for i, node in enumerate(self.cluster.nodes):
                self.servers["redis" if i == 0 else f"redis-{i}"] = node

    def restart_redis_shard(self, index: int) -> None:
        """Kill one master of the cluster and start it again on its port: its slots, no data.
        On a single node (no cluster), the node."""
        if self.cluster is None:
            self.restart_redis()
            return
        self.cluster.restart(index % len(self.cluster.nodes))
        self._name_shards()

    def flush_registry_shard(self) -> str:
        """Lose the queue registry's Redis cache (the chaos fault ``flush_registry_shard``): on a
        cluster, the master holding it loses all its data (the other shards keep theirs); on one
        node, the registry's keys only. Says what it did."""
        from sluice.backends.redis.keys import QUEUES_KEY, REGISTRY_KEYS

        if self.cluster is not None:
            index = self.cluster.owner(QUEUES_KEY)
            self.cluster.flush(index)
            return f"flushall shard {index} of {len(self.cluster.nodes)}"
        import redis

        with redis.Redis.from_url(self.servers["redis"].extra["url"], socket_timeout=5.0) as c:
            deleted = int(c.delete(*REGISTRY_KEYS))
        return f"deleted {deleted} of the registry's {len(REGISTRY_KEYS)} keys"

    def restart_redis(self) -> None:
        """Stop and start redis-server on the same port with its data lost (no persistence);
        on a cluster, every master."""
        if self.cluster is not None:
            for i in range(len(self.cluster.nodes)):
                self.restart_redis_shard(i)
            return
        old = self.servers["redis"]
        old.kill()
        self.servers["redis"] = servers.start_redis(old.port, workdir=self.state_dir / "redis",
                                                    log_path=self.state_dir / "logs" / "redis.log",
                                                    aclfile=self._aclfile())

    def write_endpoints(self, extra: dict[str, Any]) -> Path:
        assert self.settings is not None
        data = {
            "pid": os.getpid(),
            "redis_url": self.settings.redis_url,
            "kafka_bootstrap": self.settings.kafka_bootstrap,
            "aws_endpoint_url": self.settings.aws_endpoint_url,
            "dynamodb_endpoint": self.settings.aws_endpoint_url,
            "jobs_table": self.settings.jobs_table,
            "started_at": time.time(),
            "server_pids": {name: s.pid for name, s in self.servers.items()},
            **extra,
        }
        path = self.state_dir / "endpoints.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2))
        tmp.replace(path)  # readers never see a half-written file
        return path

    def stop(self) -> None:
        for server in reversed(list(self.servers.values())):
            server.stop()
        self.servers.clear()
        self.cluster = None
        for name in ("endpoints.json", "dev.pid"):
            with contextlib.suppress(FileNotFoundError):
                (self.state_dir / name).unlink()
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None
