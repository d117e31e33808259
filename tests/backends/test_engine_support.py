"""Helpers shared by the engine's integration tests (no tests here).

``snapshot`` captures every key with its type, value and TTL, so a test can assert
that a refused call wrote nothing at all. ``where`` tells which of the queue's
structures hold a job id.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import redis

from sluice.backends.redis.engine import RedisQueue
from sluice.backends.redis.keys import QueueKeys
from sluice.core.models import JobSpec, LeasedJob

BAND = 2**44
FRONT = 2**43  # a lapsed lease's job: ready score - FRONT, the front of its band (_lib.lua reclaim)


def snapshot(client: redis.Redis) -> dict[str, Any]:
    state: dict[str, Any] = {}
    for key in client.scan_iter("*"):
        kind = client.type(key)
        if kind == "hash":
            value: Any = client.hgetall(key)
        elif kind == "zset":
            value = client.zrange(key, 0, -1, withscores=True)
        elif kind == "set":
            value = sorted(client.smembers(key))
        elif kind == "list":  # a queue's wake list (push.lua): its TTL ticks down, so only whether it has one
            state[key] = (kind, client.lrange(key, 0, -1), client.pttl(key) > 0)
            continue
        else:
            value = client.get(key)
        state[key] = (kind, value, client.pttl(key))
    return state


def spec(job_id: str, queue: str = "q", **kw: Any) -> JobSpec:
    kw.setdefault("payload", {"id": job_id})
    return JobSpec(job_id=job_id, queue=queue, **kw)


def job(client: redis.Redis, queue: str, job_id: str) -> dict[str, str]:
    return client.hgetall(QueueKeys(queue).job(job_id))  # type: ignore[no-any-return]


def members(client: redis.Redis, queue: str, which: str) -> list[str]:
    return client.zrange(getattr(QueueKeys(queue), which), 0, -1)  # type: ignore[no-any-return]


def score(client: redis.Redis, queue: str, which: str, job_id: str) -> float | None:
    return client.zscore(getattr(QueueKeys(queue), which), job_id)  # type: ignore[no-any-return]


def where(client: redis.Redis, queue: str, job_id: str) -> set[str]:
    """Every structure of ``queue`` that mentions ``job_id`` (one, unless something is wrong)."""
    k = QueueKeys(queue)
    found = {name for name in ("ready", "delayed", "leased", "dead")
             if client.zscore(getattr(k, name), job_id) is not None}
    if client.hexists(k.tokens, job_id):
        found.add("tokens")
    return found


def redis_now_ms(client: redis.Redis) -> int:
    sec, usec = client.time()
    return int(sec) * 1000 + int(usec) // 1000


def redis_now_us(client: redis.Redis) -> int:
    sec, usec = client.time()
    return int(sec) * 1_000_000 + int(usec)


def band(client: redis.Redis, queue: str, value: float, *, reclaimed: bool = False) -> int:
    """``9 - priority`` of a ready score ``(9 - priority) * BAND + seq`` (``- FRONT`` when
    ``reclaimed``). A public queue's seq is seeded from TIME (_lib.lua take_seq), so the band
    is found next to the counter's value now: jobs in ready took their seqs less than FRONT
    steps before it."""
    top = int(client.get(QueueKeys(queue).seq) or 0)
    return (int(value) + (FRONT if reclaimed else 0) - top + FRONT) // BAND


def make_queue(url: str) -> Iterator[RedisQueue]:
    """Body of the ``rq`` fixture (tests/backends/conftest.py)."""
    queue = RedisQueue.from_url(url)
    yield queue
    queue.close()


def leased(rq: RedisQueue, job_id: str = "a", lease_ms: int = 5_000, **kw: Any) -> LeasedJob:
    """Enqueues one job on queue ``q`` and leases it (the job must be the one leased)."""
    rq.enqueue(spec(job_id, **kw))
    [j] = rq.lease("q", 1, lease_ms)
    assert j.job_id == job_id
    return j


# --- a replica that lags behind (issue 29, item 6) ------------------------------------------------
# Replication is asynchronous: a replica promoted by a failover holds the data as it was some writes
# ago. A test takes its copy with ``replica_copy`` (DUMP, with each key's TTL) and promotes it with
# ``promote``: every key matching the pattern is replaced by the copy (keys made since are gone).

Dumped = dict[bytes, tuple[bytes, int]]


def raw_client(url: str) -> Any:
    """A client of ``url`` that does not decode replies (DUMP's are binary): a cluster one on a cluster."""
    if url.startswith("redis+cluster://"):
        return redis.RedisCluster.from_url(url.replace("redis+cluster://", "redis://"))
    return redis.Redis.from_url(url)


def replica_copy(url: str, pattern: str = "*") -> Dumped:
    """Every key matching ``pattern`` as a replica would hold it now: its DUMP and its TTL (ms, 0: none)."""
    client = raw_client(url)
    try:
        out: Dumped = {}
        for key in client.scan_iter(pattern):
            blob, ttl = client.dump(key), client.pttl(key)
            if blob is not None:
                out[key] = (blob, max(int(ttl), 0))
        return out
    finally:
        client.close()


def promote(url: str, copy: Dumped, pattern: str = "*", skip: tuple[bytes, ...] = ()) -> None:
    """The failover: the keys matching ``pattern`` become ``copy`` again (but ``skip``)."""
    client = raw_client(url)
    try:
        for key in list(client.scan_iter(pattern)):
            client.delete(key)
        for key, (blob, ttl) in copy.items():
            if key not in skip:
                client.restore(key, ttl, blob)
    finally:
        client.close()
