"""Issue 18: the relay's pushes of one round go to Redis in one pipelined round trip.

``RedisQueue.push_many`` on a real redis-server: per item its result or the error that
refused it alone (nothing of a refused item written), the registry first, NOSCRIPT after a
script flush, and a failed round trip raised as ``BackendUnavailable``.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

from sluice.backends.redis.engine import RedisQueue
from sluice.backends.redis.keys import QUEUES_KEY, QueueKeys
from sluice.backends.redis.scripts import PushResult
from sluice.core import formats
from sluice.core.errors import BackendUnavailable, InvalidInput, QueueNotAllowed, StaleToken
from sluice.core.limits import Limits, job_bytes
from sluice.core.models import DecodedJob
from tests.backends.test_engine_support import job, snapshot

pytestmark = pytest.mark.integration
TOPIC = "sluice.jobs"




def jobs(queue: str, *offsets: int, prefix: str = "j") -> list[tuple[int, DecodedJob]]:
    return [(o, DecodedJob(f"{prefix}{o}", queue, f'{{"n":{o}}}', 0, 5, 30_000, 0, 1_700_000_000_000))
            for o in offsets]


class Counting:
    """Counts the round trips a client makes: pipelines executed and single commands."""

    def __init__(self, client: Any) -> None:
        self.client, self.pipelines, self.commands = client, 0, 0
        self._pipeline, self._execute = client.pipeline, client.execute_command
        client.pipeline, client.execute_command = self.pipeline, self.execute_command

    def pipeline(self, *args: Any, **kw: Any) -> Any:
        pipe = self._pipeline(*args, **kw)
        execute = pipe.execute

        def counted(*a: Any, **k: Any) -> Any:
            self.pipelines += 1
            return execute(*a, **k)

        pipe.execute = counted
        return pipe

    def execute_command(self, *args: Any, **kw: Any) -> Any:
        self.commands += 1
        return self._execute(*args, **kw)


def test_every_item_of_a_round_goes_in_one_round_trip_after_the_registry(rq: RedisQueue,
                                                                        redis_client: redis.Redis) -> None:
    rq.push_many(TOPIC, [("q", 0, 1, jobs("q", 0))])  # scripts loaded, registry written
    counting = Counting(rq.client)
    items = [("q", p, 1, jobs("q", *range(10 * p + 1, 10 * p + 11), prefix=f"p{p}-")) for p in range(4)]
    items.append(("r", 0, 1, jobs("r", 0, 1)))
    results = rq.push_many(TOPIC, items)
    assert results == [PushResult(10, 0, 10 * p + 10) for p in range(4)] + [PushResult(2, 0, 1)]
    assert (counting.pipelines, counting.commands) == (2, 0)  # the registry, then every push.lua
    assert redis_client.zcard(QueueKeys("q").ready) == 41 and redis_client.zcard(QueueKeys("r").ready) == 2
    assert job(redis_client, "q", "p2-25") == {
        "p": '{"n":25}', "m": "0,5,30000,1700000000000",
        "sz": str(job_bytes("p2-25", '{"n":25}', "0,5,30000,1700000000000", len(QueueKeys("q").job_prefix))),
        "v": str(formats.REDIS_JOB)}
    assert redis_client.hget(QueueKeys("q").relayed(TOPIC, 3), "offset") == "40"
    assert redis_client.smembers(QUEUES_KEY) == {"q", "r"}
    again = rq.push_many(TOPIC, items)  # a re-read: every record at or below the recorded offset
    assert again == [PushResult(0, 10, 10 * p + 10) for p in range(4)] + [PushResult(0, 2, 1)]


def test_redriven_jobs_are_pushed_with_their_generation(rq: RedisQueue, redis_client: redis.Redis) -> None:
    """``gens`` (the jobs table's redrive generations, ``JobStore.relay_view``) go onto the jobs
    created, for their grant; a bad one refuses its item alone."""
    results = rq.push_many(TOPIC, [("q", 0, 1, jobs("q", 0, 1)), ("r", 0, 1, jobs("r", 5))],
                           gens={"j1": 4, "j5": -1})
    assert results[0] == PushResult(2, 0, 1) and isinstance(results[1], InvalidInput)
    assert job(redis_client, "q", "j1")["g"] == "4" and "g" not in job(redis_client, "q", "j0")
    assert not redis_client.exists(QueueKeys("r").job("j5"))
    assert {j.job_id: j.redrive_gen for j in rq.lease("q", 2, 5_000)} == {"j0": 0, "j1": 4}


def test_a_refused_item_writes_nothing_and_the_others_land(rq: RedisQueue, redis_client: redis.Redis) -> None:
    rq.push_many(TOPIC, [("q", 0, 9, jobs("q", 0))])  # partition 0 of q is owned under token 9
    before = job(redis_client, "q", "j0")
    results = rq.push_many(TOPIC, [
        ("q", 0, 8, jobs("q", 1, 2)),  # an older owner: StaleToken
        ("q", 1, 8, jobs("q", 3)),
        ("q", 2, 8, jobs("r", 4)),  # a job of another queue: refused before anything is sent
        ("sluice-relay", 0, 8, jobs("sluice-relay", 5)),
    ])
    assert isinstance(results[0], StaleToken) and results[1] == PushResult(1, 0, 3)
    assert isinstance(results[2], InvalidInput) and isinstance(results[3], InvalidInput)
    assert job(redis_client, "q", "j0") == before
    assert not job(redis_client, "q", "j1") and not job(redis_client, "q", "j4")
    assert redis_client.hget(QueueKeys("q").relayed(TOPIC, 0), "offset") == "0"


def test_a_queue_the_registry_refuses_is_not_pushed(redis_url: str, redis_client: redis.Redis) -> None:
    rq = RedisQueue.from_url(redis_url, Limits(allow=frozenset({"q"})))
    try:
        results = rq.push_many(TOPIC, [("q", 0, 1, jobs("q", 0)), ("other", 0, 1, jobs("other", 1))])
    finally:
        rq.close()
    assert results[0] == PushResult(1, 0, 0) and isinstance(results[1], QueueNotAllowed)
    assert not redis_client.exists(QueueKeys("other").ready)


def test_scripts_flushed_by_a_restart_are_loaded_again(rq: RedisQueue, redis_client: redis.Redis) -> None:
    rq.push_many(TOPIC, [("q", 0, 1, jobs("q", 0))])
    redis_client.script_flush()
    assert rq.push_many(TOPIC, [("q", 0, 1, jobs("q", 1)), ("q", 1, 1, jobs("q", 2))]) == [
        PushResult(1, 0, 1), PushResult(1, 0, 2)]
    assert redis_client.zcard(QueueKeys("q").ready) == 3


def test_more_than_a_script_call_of_records_goes_in_offset_ordered_chunks(rq: RedisQueue,
                                                                        redis_client: redis.Redis) -> None:
    records = jobs("q", *range(2500))
    assert rq.push_many(TOPIC, [("q", 0, 1, list(reversed(records)))]) == [PushResult(2500, 0, 2499)]
    assert redis_client.zcard(QueueKeys("q").ready) == 2500


def test_redis_unreachable_raises_and_a_bad_topic_is_refused(rq: RedisQueue,
                                                              redis_client: redis.Redis) -> None:
    with pytest.raises(InvalidInput):
        rq.push_many("bad topic", [("q", 0, 1, jobs("q", 0))])
    before = snapshot(redis_client)
    down = RedisQueue.from_url("redis://127.0.0.1:1/0")
    with pytest.raises(BackendUnavailable):
        down.push_many(TOPIC, [("q", 0, 1, jobs("q", 0))])
    assert snapshot(redis_client) == before
