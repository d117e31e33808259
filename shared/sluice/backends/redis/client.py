"""The Redis client for a URL: one node (``redis://``, ``rediss://``) or a cluster
(``redis+cluster://``, ``rediss+cluster://``: ElastiCache's configuration endpoint).

Neither client retries on its own. A script whose reply was lost may have run already, and
running a lease or an ack again is not harmless, so retries stay the caller's, where they are
idempotent. redis-py's cluster client retries a timed-out command 10 times by default
(``cluster_error_retry_attempts``, now its ``retry`` object); here its ``retry`` allows none.
Following a MOVED or ASK redirect is not a retry (the command did not run) and stays on.

The cluster client reads the slot map when it is built: a cluster URL at a node without
cluster mode fails here, as a ``RedisTopologyError``, not at the first script.
"""

from __future__ import annotations

from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from sluice.backends.redis.scripts import REDIS_ERRORS, translate

CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
SCHEMES = ("redis", "rediss", *CLUSTER_SCHEMES)


def scheme(url: str) -> str:
    return url.partition("://")[0].lower()


def is_cluster_url(url: str) -> bool:
    return scheme(url) in CLUSTER_SCHEMES


def is_cluster(client: Any) -> bool:
    return isinstance(client, redis.cluster.RedisCluster)


def connect(url: str, **kwargs: Any) -> Any:
    """A ``redis.Redis`` for a single-node URL, a ``redis.cluster.RedisCluster`` for a cluster
    URL; both with ``decode_responses`` and short timeouts, neither retrying. ``kwargs`` win."""
    options: dict[str, Any] = {"decode_responses": True, "socket_timeout": 5.0,
                               "socket_connect_timeout": 2.0, "retry": Retry(NoBackoff(), 0)}
    name = scheme(url)
    if name not in CLUSTER_SCHEMES:
        return redis.Redis.from_url(url, **{"health_check_interval": 30, **options, **kwargs})
    plain = CLUSTER_SCHEMES[name] + url[len(name):]
    try:
        # require_full_coverage: a slot nobody serves is a broken cluster, said at connect.
        return redis.cluster.RedisCluster.from_url(plain, require_full_coverage=True, **{**options, **kwargs})
    except REDIS_ERRORS as exc:
        raise translate(exc) from exc
