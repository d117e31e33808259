"""Helpers shared by the engine's integration tests (no tests here).

``snapshot`` captures every key with its type, value and TTL, so a test can assert
that a refused call wrote nothing at all.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import redis

from sluice.models import JobSpec
from sluice.redis.engine import RedisQueue
from sluice.redis.keys import QueueKeys


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


def redis_now_ms(client: redis.Redis) -> int:
    sec, usec = client.time()
    return int(sec) * 1000 + int(usec) // 1000


def make_queue(url: str) -> Iterator[RedisQueue]:
    """Body of each module's ``rq`` fixture (fixtures do not import cleanly across modules)."""
    queue = RedisQueue.from_url(url)
    yield queue
    queue.close()
