"""Issue 19 at the gateway: reserved queue names (item 1) and 5xx problem bodies (item 7).

Driven with the API Gateway REST proxy event fixtures of tests/events (``Rig``).
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from sluice.core import ids
from sluice.core.errors import BackendUnavailable
from sluice.core.models import RESERVED_QUEUE_PREFIX, JobRecord, JobState
from tests.unit.test_gateway_fakes import KEY, Rig

RELAY_JOBS = "/v1/queues/sluice-relay/jobs"
# The issue's two requests, exactly: they were answered 202, and after them no job ever ran again.
HOSTILE = [{"payload": {"topic": "sluice.jobs", "partition": "x"}, "priority": 9},
           {"payload": {"topic": "sluice.jobs", "partition": 0}, "priority": 9}]


@pytest.fixture
def rig() -> Rig:
    return Rig()


def assert_reserved(code: int, headers: dict[str, str], doc: Any, queue: str) -> None:
    assert (code, headers["content-type"], doc["code"]) == (400, "application/problem+json", "RESERVED_QUEUE")
    assert doc["type"] == "urn:sluice:problem:reserved-queue-name"
    assert repr(RESERVED_QUEUE_PREFIX) in doc["detail"] and repr(queue) in doc["detail"]


@pytest.mark.parametrize("body", HOSTILE)
def test_the_issues_hostile_enqueues_are_400_naming_the_reserved_prefix(rig: Rig, body: Any) -> None:
    assert_reserved(*rig.call("POST", RELAY_JOBS, body), queue="sluice-relay")
    assert rig.log.records == [] and rig.log.pending == []  # nothing reached Kafka


@pytest.mark.parametrize("queue", ["sluice-relay", "sluice-", "sluice-anything_else"])
def test_every_reserved_name_is_refused_for_single_batch_and_keyed_enqueues(rig: Rig, queue: str) -> None:
    path = f"/v1/queues/{queue}/jobs"
    assert_reserved(*rig.call("POST", path, {"payload": 1}), queue=queue)
    assert_reserved(*rig.call("POST", path + "/batch", {"jobs": [{"payload": 1}]}), queue=queue)
    assert_reserved(*rig.call("POST", path, {"payload": 1}, headers={"Idempotency-Key": "k-1"}), queue=queue)
    assert rig.log.records == [] and rig.idem.keys_seen == []  # refused before the key was taken


@pytest.mark.parametrize("queue", ["sluice", "sluicer", "my-sluice-relay", "sluice_relay"])
def test_names_that_only_resemble_the_prefix_stay_public(rig: Rig, queue: str) -> None:
    code, _, doc = rig.call("POST", f"/v1/queues/{queue}/jobs", {"payload": 1})
    assert code == 202 and doc["queue"] == queue


def test_reading_a_reserved_queue_is_400(rig: Rig) -> None:
    def stats(queue: str) -> Any:
        raise AssertionError("a reserved queue's stats must not be read")

    rig.queue.stats = stats  # type: ignore[method-assign]
    assert_reserved(*rig.call("GET", "/v1/queues/sluice-relay"), queue="sluice-relay")


def test_jobs_of_a_reserved_queue_read_and_cancel_as_404(rig: Rig) -> None:
    # An id minted for the queue before the prefix was reserved, and an item a pre-fix relay recorded.
    minted = ids.mint(rig.now_ms, "sluice-relay", KEY)
    recorded = ids.mint(rig.now_ms - 1, "sluice-relay", KEY)
    rig.store.put(JobRecord(job_id=recorded, queue="sluice-relay", status=JobState.QUEUED))
    for job_id in (minted, recorded):
        rig.queue.add("sluice-relay", job_id)
    for job_id in (minted, recorded, "sluice.jobs.0"):  # "sluice.jobs.0": a partition's own job
        code, _, doc = rig.call("GET", f"/v1/jobs/{job_id}")
        assert (code, doc["code"]) == (404, "NOT_FOUND"), job_id
        code, _, doc = rig.call("DELETE", f"/v1/jobs/{job_id}")
        assert (code, doc["code"]) == (404, "NOT_FOUND"), job_id
    assert rig.queue.cancelled == []  # Redis was never touched
    assert rig.store.unrecorded == []  # and no cancelled item was made for the minted id


def test_the_worker_dispatch_event_refuses_reserved_queues() -> None:
    from sluice.core.errors import InvalidInput
    from sluice.entry.worker import parse_dispatch

    with pytest.raises(InvalidInput, match="internal"):
        parse_dispatch({"queues": ["emails", "sluice-relay"], "batch": 5, "source": "safety-net"})
    assert parse_dispatch({"queues": ["emails"]}).queues == ["emails"]


def test_a_worker_never_drains_a_reserved_queue() -> None:
    """Leasing the relay's partition jobs as work would take partitions away from the relay."""
    import threading

    from sluice.core.errors import ReservedQueue
    from sluice_dev.fakes import kit

    k = kit()
    k.queue.add("sluice-relay", "sluice.jobs.0", {"topic": "sluice.jobs", "partition": 0})
    worker = k.worker()
    with pytest.raises(ReservedQueue):
        worker.drain(["emails", "sluice-relay"], 5)
    with pytest.raises(ReservedQueue):
        worker.run(["sluice-relay"], stop=threading.Event(), max_jobs=1)
    assert k.queue.called("lease") == []


# -- item 7: a 5xx problem carries no internals -------------------------------------------------

SECRETS = ("arn:aws:secretsmanager:eu-west-1:123456789012:secret:sluice/job-id-AbCdEf",
           "master.sluice-redis.abc123.euw1.cache.amazonaws.com:6379",
           "KafkaTimeoutError: b-1.sluice.kafka.eu-west-1.amazonaws.com:9098")


def leaky() -> BackendUnavailable:
    return BackendUnavailable("backend failed: " + "; ".join(SECRETS))


def down(*_args: Any) -> Any:
    """A backend call that fails with secrets in its message."""
    raise leaky()


def assert_generic(code: int, doc: Any, caplog: pytest.LogCaptureFixture) -> None:
    assert code == 503 and doc["code"] == "UNAVAILABLE"
    text = str(doc)
    assert not any(s in text for s in SECRETS) and "amazonaws" not in text and "arn:" not in text
    assert doc["detail"] == "a backend is unavailable; retry after Retry-After seconds"
    assert any(SECRETS[0] in r.getMessage() for r in caplog.records)  # the real error is logged


def test_a_503_from_kafka_hides_the_error_and_logs_it(rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    rig.log.fail = leaky()
    code, _, doc = rig.call("POST", "/v1/queues/emails/jobs", {"payload": 1})
    assert_generic(code, doc, caplog)


def test_a_503_from_the_store_hides_the_error_and_logs_it(rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    rig.store.get_job = down  # type: ignore[method-assign]
    code, _, doc = rig.call("GET", f"/v1/jobs/{ids.mint(rig.now_ms, 'emails', KEY)}")
    assert_generic(code, doc, caplog)


def test_a_503_from_redis_hides_the_error_and_logs_it(rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    rig.queue.stats = down  # type: ignore[method-assign]
    code, _, doc = rig.call("GET", "/v1/queues/emails")
    assert_generic(code, doc, caplog)


def test_an_unexpected_500_hides_the_error_too(rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    rig.log.fail = RuntimeError("boom at " + SECRETS[1])
    code, _, doc = rig.call("POST", "/v1/queues/emails/jobs", {"payload": 1})
    assert code == 500 and SECRETS[1] not in str(doc)
    assert any(SECRETS[1] in (r.exc_text or "") + r.getMessage() for r in caplog.records)
