"""Cluster URLs in Settings, and the translation of redis-py's cluster errors (no sockets)."""

from __future__ import annotations

import pytest
import redis
from pydantic import ValidationError

from sluice.backends.redis.client import CLUSTER_SCHEMES, is_cluster_url
from sluice.backends.redis.scripts import translate
from sluice.core.config import Settings
from sluice.core.errors import BackendUnavailable, RedisTopologyError


def reply(text: str) -> Exception:
    """The exception redis-py raises for the error reply ``text`` (its parser strips known codes)."""
    from redis._parsers.base import BaseParser

    return BaseParser.parse_error(text)  # type: ignore[no-any-return]


@pytest.mark.parametrize("url", ["redis://127.0.0.1:6379/0", "rediss://h:6379", "redis+cluster://h:6379/0",
                                 "rediss+cluster://clustercfg.x.cache.amazonaws.com:6379",
                                 "redis://:pw@h:1/0?ssl_cert_reqs=none"])
def test_redis_urls_accepted(url: str) -> None:
    assert Settings(redis_url=url).redis_url == url


@pytest.mark.parametrize("url", ["http://h:6379", "redis+sentinel://h:1", "redis://", "h:6379",
                                 "redis+cluster://h:6379/1", "rediss+cluster://h:6379/2?ssl_cert_reqs=none"])
def test_other_redis_urls_refused(url: str) -> None:
    with pytest.raises(ValidationError):
        Settings(redis_url=url)


def test_cluster_schemes() -> None:
    assert is_cluster_url("redis+cluster://h:1") and is_cluster_url("REDISS+CLUSTER://h:1")
    assert not is_cluster_url("rediss://h:1")
    assert CLUSTER_SCHEMES == {"redis+cluster": "redis", "rediss+cluster": "rediss"}


@pytest.mark.parametrize(("exc", "kind", "words"), [
    (reply("MOVED 7290 127.0.0.1:7001"), RedisTopologyError, "redis+cluster://"),
    (reply("ASK 7290 127.0.0.1:7001"), RedisTopologyError, "redis+cluster://"),
    (redis.exceptions.RedisClusterException("EVALSHA - all keys must map to the same key slot"),
     RedisTopologyError, "different cluster slots"),
    (reply("CROSSSLOT Keys in request don't hash to the same slot"),
     RedisTopologyError, "different cluster slots"),
    (redis.exceptions.RedisClusterException("ERR This instance has cluster support disabled"),
     RedisTopologyError, "without cluster mode"),
    (redis.exceptions.RedisClusterException("All slots are not covered after query all startup_nodes."),
     RedisTopologyError, "unassigned"),
    (redis.exceptions.RedisClusterException("Redis Cluster cannot be connected."), BackendUnavailable,
     "cluster unavailable"),
    (reply("CLUSTERDOWN Hash slot not served"), BackendUnavailable, "CLUSTERDOWN Hash slot not served"),
    (reply("TRYAGAIN Multiple keys request during rehashing of slot"), BackendUnavailable, "TRYAGAIN"),
    (reply("READONLY You can't write against a read only replica."), BackendUnavailable, "READONLY"),
    (reply("MASTERDOWN Link with MASTER is down"), BackendUnavailable, "MASTERDOWN"),
])
def test_cluster_errors_translated(exc: Exception, kind: type[Exception], words: str) -> None:
    out = translate(exc)
    assert type(out) is kind
    assert words in str(out)
