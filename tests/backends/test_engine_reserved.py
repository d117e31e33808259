"""Issue 19, item 1, in the engine on a real redis-server: reserved queues refuse enqueue and push.

Both layers refuse: ``RedisQueue`` before anything is sent, and the scripts themselves
(``enqueue.lua``, ``push.lua``) when called directly. The relay's partition ownership jobs
go in through ``enqueue_internal`` (``enqueue_internal.lua``), which takes reserved queues
only. Every refusal leaves the whole database as it was.
"""

from __future__ import annotations

import pytest
import redis

from sluice.backends.redis.checks import job_fields
from sluice.backends.redis.engine import RedisQueue
from sluice.backends.redis.keys import QUEUES_KEY, QueueKeys
from sluice.core.errors import InvalidQueueName, ReservedQueue
from sluice.core.models import RESERVED_QUEUE_PREFIX
from sluice.relay import RELAY_QUEUE, partition_job
from tests.backends.test_engine_hostile import refused
from tests.backends.test_engine_support import job, members, spec

pytestmark = pytest.mark.integration

RESERVED = [RELAY_QUEUE, RESERVED_QUEUE_PREFIX, "sluice-other"]
# The issue's two jobs, as the gateway turned them into specs before the prefix was reserved.
HOSTILE = [spec("01JD6Z8Q4YQ8N5V6R1K2M3N4P5.sluice-relay.ABCDEFGHJKMNPQRS", RELAY_QUEUE,
                payload={"topic": "sluice.jobs", "partition": "x"}, priority=9),
           spec("01JD6Z8Q4YQ8N5V6R1K2M3N4P6.sluice-relay.ABCDEFGHJKMNPQRT", RELAY_QUEUE,
                payload={"topic": "sluice.jobs", "partition": 0}, priority=9)]




@pytest.mark.parametrize("queue", RESERVED)
def test_enqueue_into_a_reserved_queue_is_refused_before_any_write(rq: RedisQueue, redis_client: redis.Redis,
                                                                    queue: str) -> None:
    rq.enqueue(spec("ordinary"))
    refused(redis_client, lambda: rq.enqueue(spec("a", queue)), ReservedQueue)
    refused(redis_client, lambda: rq.enqueue_many([spec("b"), spec("c", queue)]), ReservedQueue)
    assert queue not in redis_client.smembers(QUEUES_KEY)


def test_the_issues_hostile_jobs_are_refused(rq: RedisQueue, redis_client: redis.Redis) -> None:
    for hostile in HOSTILE:
        refused(redis_client, lambda h=hostile: rq.enqueue(h), ReservedQueue)  # type: ignore[misc]
    assert members(redis_client, RELAY_QUEUE, "ready") == []


@pytest.mark.parametrize("queue", RESERVED)
def test_push_into_a_reserved_queue_is_refused_before_any_write(rq: RedisQueue, redis_client: redis.Redis,
                                                                 queue: str) -> None:
    refused(redis_client, lambda: rq.push(queue, "sluice.jobs", 0, 1, [(0, spec("a", queue))]), ReservedQueue)


@pytest.mark.parametrize("queue", RESERVED)
def test_the_scripts_refuse_reserved_queues_themselves(rq: RedisQueue, redis_client: redis.Redis,
                                                       queue: str) -> None:
    """Called past RedisQueue's checks, enqueue.lua and push.lua still write nothing."""
    k = QueueKeys(queue)
    fields = job_fields(spec("a", queue), queue, 0)
    refused(redis_client, lambda: rq.scripts.enqueue(k, [fields]), ReservedQueue)
    refused(redis_client, lambda: rq.scripts.push(k, "sluice.jobs", 0, 1, [(0, fields, 0)]), ReservedQueue)
    with pytest.raises(ReservedQueue) as raised:
        rq.scripts.enqueue(k, [fields])
    assert raised.value.details == {"queue": queue, "prefix": RESERVED_QUEUE_PREFIX}


def test_public_queues_that_resemble_the_prefix_still_enqueue_and_push(rq: RedisQueue,
                                                                      redis_client: redis.Redis) -> None:
    for queue in ("sluice", "sluicer", "my-sluice-relay", "sluice_relay"):
        assert rq.enqueue(spec("a", queue))
        assert rq.push(queue, "sluice.jobs", 0, 1, [(0, spec("b", queue))]).pushed == 1


def test_the_relays_ownership_jobs_go_in_through_the_internal_path_only(rq: RedisQueue,
                                                                       redis_client: redis.Redis) -> None:
    own = partition_job("sluice.jobs", 0, 15_000)
    assert rq.enqueue_internal(own) is True
    assert rq.enqueue_internal(own) is False  # idempotent, as before
    assert job(redis_client, RELAY_QUEUE, own.job_id)["p"] == '{"partition":0,"topic":"sluice.jobs"}'
    [leased] = rq.lease(RELAY_QUEUE, 1, 15_000, "relay-1")
    assert leased.job_id == "sluice.jobs.0"
    # ... and the internal path is no way into a public queue, neither in Python nor in Lua.
    refused(redis_client, lambda: rq.enqueue_internal(spec("x", "q")), InvalidQueueName)
    fields = job_fields(spec("x", "q"), "q", 0)
    refused(redis_client, lambda: rq.scripts.enqueue(QueueKeys("q"), [fields], internal=True),
            InvalidQueueName)
