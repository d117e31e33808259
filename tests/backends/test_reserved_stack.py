"""Issue 19, item 1, end to end: the issue's two hostile requests against the real gateway and relay.

Before the fix, ``POST /v1/queues/sluice-relay/jobs`` with ``{"topic": "sluice.jobs",
"partition": "x"}`` and then ``"partition": 0`` (priority 9) were both answered 202, the relay
pushed them into its own ownership queue, ``_acquire`` crashed on ``int("x")`` in every relay
run after, and no ordinary job ran again. Here the gateway refuses both with a 400; the same
two jobs are then planted where a pre-fix deployment had left them (as records in Kafka and as
jobs in the ownership queue in Redis), and the real relay (the relay Lambda's composition:
``entry.relay.scheduled_relay``, Redis-loss recovery included) dead-letters the records,
removes the jobs, owns every partition once, and an ordinary job enqueued through the gateway
runs to success.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from sluice.backends.redis.keys import QueueKeys
from sluice.core import ids
from sluice.core.config import Settings
from sluice.core.models import JobSpec
from sluice.entry import relay as relay_entry
from sluice.entry import root as wiring
from sluice.entry.gateway import Gateway, build_api
from sluice.relay import RELAY_QUEUE, partition_job_id
from sluice.worker.registry import Worker
from sluice.worker.runtime.options import WorkerOptions
from sluice_dev.local import servers
from tests.backends.test_gateway import call, get, post, recorded
from tests.backends.test_gateway_stack import stack_settings
from tests.backends.test_relay import consume_all

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

HOSTILE = [{"payload": {"topic": "sluice.jobs", "partition": "x"}, "priority": 9},
           {"payload": {"topic": "sluice.jobs", "partition": 0}, "priority": 9}]


class Context:
    aws_request_id = "reserved-test"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


class Counted:
    def __init__(self) -> None:
        self.counts: list[tuple[str, float]] = []

    def count(self, name: str, value: float = 1, **dimensions: str) -> None:
        self.counts.append((name, value))


@pytest.fixture
def settings(tansu: servers.Server, moto_server: servers.Server, redis_server: servers.Server,
             redis_url: str) -> Iterator[Settings]:  # redis_url: an empty Redis to start from
    s = stack_settings(tansu, moto_server, redis_server)
    yield s
    wiring.reset()


def test_the_issues_hostile_requests_are_refused_and_ordinary_jobs_keep_running(
        settings: Settings, redis_client: Any) -> None:
    api = build_api(settings)
    gateway = Gateway(api)

    # 1. The two requests of the issue, as a hostile but authorised caller sends them.
    for body in HOSTILE:
        code, headers, doc = call(gateway, post(RELAY_QUEUE, body))
        assert (code, headers["content-type"], doc["code"]) == (400, "application/problem+json",
                                                                "RESERVED_QUEUE"), doc
        assert "'sluice-'" in doc["detail"]
    code, _, doc = call(gateway, recorded("apigw_get_queue.json", path=f"/v1/queues/{RELAY_QUEUE}",
                                          pathParameters={"queue": RELAY_QUEUE}))
    assert (code, doc["code"]) == (400, "RESERVED_QUEUE")

    # 2. What a pre-fix deployment was left with: both jobs in Kafka, and, aimed at this
    #    deployment's topic, in the ownership queue (the relay had pushed them there).
    now = int(time.time() * 1000)
    planted = []
    for n, body in enumerate(HOSTILE):
        payload = dict(body["payload"]) | {"topic": settings.kafka_topic}
        planted.append(JobSpec(job_id=ids.mint(now + n, RELAY_QUEUE, wiring.job_id_key(settings)),
                               queue=RELAY_QUEUE, payload=payload, priority=9, enqueued_at_ms=now + n))
    api.log.append(planted)
    engine = wiring.relay_engine(settings)
    for spec in planted:
        assert engine.enqueue_internal(spec)

    # 3. An ordinary job, through the gateway.
    code, _, accepted = call(gateway, post("shout", {"payload": {"text": "still here"}}))
    assert code == 202, accepted

    # 4. The real relay: it must not crash, and it must push the ordinary job.
    metrics = Counted()
    relay, _ = relay_entry.scheduled_relay(settings, Context(), metrics=metrics, poll_ms=50,
                                           ownership_s=0.2)
    deadline = time.monotonic() + 30
    try:
        while engine.stats("shout").ready < 1 or relay.report.dead_lettered < 2:
            assert time.monotonic() < deadline, relay.report.as_dict()
            relay.step()
        relay.step()
    finally:
        relay.stop()
        relay_entry._source(settings).close()
        relay_entry._source.cache_clear()
    report = relay.report
    assert report.bad_ownership_jobs == 2 and ("RelayBadOwnershipJob", 1) in metrics.counts
    assert report.partitions_owned == {0, 1, 2} and report.errors == 0
    prefix = QueueKeys(RELAY_QUEUE).job_prefix
    ownership = sorted(k[len(prefix):] for k in redis_client.scan_iter(prefix + "*"))
    assert ownership == sorted(partition_job_id(settings.kafka_topic, p) for p in range(3))
    letters = consume_all(settings.kafka_bootstrap, settings.kafka_dead_letter_topic, 2)
    reasons = [h["sluice-reason"].decode() for _, h in letters]
    assert len(reasons) == 2 and all(r.startswith("reserved queue 'sluice-relay'") for r in reasons), reasons
    assert engine.stats(RELAY_QUEUE).ready == 3  # the three partition jobs, released at stop

    # 5. A worker runs the ordinary job to success; the gateway reports it.
    app = Worker()

    @app.handler("shout")
    def shout(job: Any, ctx: Any) -> dict[str, str]:
        return {"shouted": str(job.payload["text"]).upper()}

    worker = app.bind(queue=engine, store=wiring.store(settings), options=WorkerOptions(lease_ms=5000),
                      worker_id="reserved-test")
    assert worker.drain(["shout"], 5).leased == 1
    code, _, view = call(gateway, get(f"/v1/jobs/{accepted['job_id']}"))
    assert (code, view["status"], view["result"]) == (200, "succeeded", {"shouted": "STILL HERE"})
