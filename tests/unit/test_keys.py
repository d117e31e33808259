"""The key module: every key of a queue shares the {queue} hash tag, names are validated."""

from __future__ import annotations

import pytest

from sluice.backends.redis.keys import QUEUES_KEY, QueueKeys
from sluice.core.errors import InvalidInput, InvalidQueueName


def hash_tag(key: str) -> str:
    """The part of a key Redis Cluster hashes: the first {...} (non-empty)."""
    start = key.index("{")
    return key[start + 1:key.index("}", start)]


def test_every_queue_key_carries_the_queue_hash_tag() -> None:
    k = QueueKeys("emails")
    keys = [k.job("a1"), k.job_prefix, k.ready, k.delayed, k.leased, k.dead, k.tokens, k.seq, k.config,
            k.bucket, k.relayed("sluice.jobs", 3)]
    assert {hash_tag(key) for key in keys} == {"emails"}
    assert len(set(keys)) == len(keys)
    assert all(key.startswith("sluice:{emails}:") for key in keys)


def test_job_keys_are_the_prefix_plus_the_id() -> None:
    """Scripts build job keys as prefix .. id; the two ways must agree."""
    k = QueueKeys("q")
    assert k.job("abc-1.2_3") == k.job_prefix + "abc-1.2_3"


def test_queues_registry_is_global() -> None:
    assert QUEUES_KEY == "sluice:queues"
    assert "{" not in QUEUES_KEY


@pytest.mark.parametrize("name", ["", "{x}", "a}b", "a:b", "a*", "a b", "Ab", "é", "a" * 65, "-a"])
def test_bad_queue_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidQueueName):
        QueueKeys(name)


@pytest.mark.parametrize("job_id", ["", "a:b", "a b", "{a}", "x" * 129, ".a"])
def test_bad_job_ids_are_refused(job_id: str) -> None:
    with pytest.raises(InvalidInput):
        QueueKeys("q").job(job_id)


def test_relayed_key_names_topic_and_partition() -> None:
    assert QueueKeys("q").relayed("sluice.jobs", 7) == "sluice:{q}:relayed:sluice.jobs:7"
