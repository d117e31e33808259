"""A keyed enqueue writes its Idempotency-Key's record once (issue 33), and loses nothing for it.

The use case (``sluice.gateway.keyed``) over the fakes: a first request writes one record and appends;
a repeat rebuilds the same records from the record and appends them again; a writer whose append
fails withdraws its jobs only if no repeat claimed them. Each failure case is a test: a writer that
dies between its record and its append, a repeat while the writer appends, a writer failing after a
repeat answered 200, a record of before (Powertools' layout), a key retired since.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import pytest

from sluice.core import ids
from sluice.core.bus import EventBus, KeyedJobsNamed
from sluice.core.errors import BackendUnavailable, IdempotencyConflict, InProgress, QueueFull
from sluice.core.idempotency import CLOCK_SKEW_MS, KeyRecord, Stored, entropy, fingerprint, must_claim
from sluice.core.wire import BatchRequest, EnqueueRequest
from sluice.gateway.api import Api, Backends, IdMinting, Intake
from sluice_dev.fakes import FakeKeyStore, FakeLog, FakeStore

KEY = b"unit-test-job-id-key-0123456789"
NEW_KEY = b"unit-test-job-id-key-rotated-9876"
NOW = 1_700_000_000_000


class Refusing:
    """An admission that refuses every job (a full queue)."""

    def check(self, queue: str, jobs: int, delayed: int = 0) -> None:
        raise QueueFull(f"queue {queue} is full", queue=queue)


class Rig:
    def __init__(self, keys: FakeKeyStore | None = None, minting: IdMinting | None = None,
                 admission: Any = None) -> None:
        self.log, self.store, self.keys = FakeLog(), FakeStore(), keys or FakeKeyStore()
        self.now_ms = NOW
        self.bus = EventBus()
        self.api = Api(Backends(self.log, self.store, None, events=self.bus),  # type: ignore[arg-type]
                       minting or IdMinting(KEY), intake=Intake(admission=admission), idempotency=self.keys,
                       clock=lambda: self.now_ms)

    def enqueue(self, payload: Any = 1, key: str = "k", remaining: int = 25_000) -> tuple[str, bool]:
        done = self.api.enqueue("emails", EnqueueRequest(payload=payload), idempotency_key=key,
                                remaining_ms=lambda: remaining)
        return done.body.job_id, done.replayed  # type: ignore[union-attr]


def test_a_first_request_writes_its_record_once_and_appends_once() -> None:
    rig = Rig()
    job_id, replayed = rig.enqueue()
    assert (replayed, rig.keys.writes, [r.job_id for r in rig.log.records]) == (False, 1, [job_id])
    [(record, expires)] = rig.keys.records.values()
    assert isinstance(record, KeyRecord) and expires == NOW // 1000 + 24 * 3600
    assert (record.accepted_at_ms, record.until_ms, record.claimed) == (NOW, NOW + 25_000, False)
    # The id is the record's: its time, and the 80 bits its seed gives the first job.
    assert job_id == ids.mint(NOW, "emails", KEY, entropy(record.seed, 0))
    assert ids.Verifier(KEY).verify(job_id) is not None


def test_a_repeat_after_the_writers_deadline_writes_nothing_and_appends_the_same_record() -> None:
    rig = Rig()
    job_id, _ = rig.enqueue()
    rig.now_ms += 25_000 + CLOCK_SKEW_MS + 1
    assert rig.enqueue() == (job_id, True)
    assert rig.keys.writes == 1 and rig.log.records[0] == rig.log.records[1]


def test_a_writer_that_died_between_its_record_and_its_append_loses_nothing() -> None:
    """The record is there and nothing reached Kafka: the client's retry appends the job."""
    rig = Rig()
    digest = fingerprint("enqueue", "emails", EnqueueRequest(payload=1).model_dump(mode="json"))
    dead = KeyRecord(digest, NOW - 60_000, ids.key_id(KEY), "ab" * 10, NOW - 35_000)
    assert rig.keys.take("k", dead, expires_at_s=NOW // 1000 + 3600, now_ms=NOW - 60_000) is None
    job_id, replayed = rig.enqueue()
    assert replayed and [r.job_id for r in rig.log.records] == [job_id]
    assert job_id == ids.mint(NOW - 60_000, "emails", KEY, entropy("ab" * 10, 0))
    assert rig.log.records[0].enqueued_at_ms == NOW - 60_000  # the job's life runs from its acceptance


def test_a_repeat_while_the_writer_may_run_claims_the_record() -> None:
    rig = Rig()
    job_id, _ = rig.enqueue()
    rig.now_ms += 1_000
    assert rig.enqueue() == (job_id, True)
    [(record, _)] = rig.keys.records.values()
    assert isinstance(record, KeyRecord) and record.claimed and rig.keys.writes == 2
    assert rig.enqueue() == (job_id, True) and rig.keys.writes == 2  # claimed once


def test_a_writer_whose_append_fails_withdraws_and_frees_the_key() -> None:
    rig = Rig()
    rig.log.fail = BackendUnavailable("kafka down")
    with pytest.raises(BackendUnavailable):
        rig.enqueue()
    [(withdrawn, _, _)] = rig.store.unrecorded
    assert rig.keys.records == {}
    rig.log.fail = None
    job_id, replayed = rig.enqueue()
    assert not replayed and job_id != withdrawn and [r.job_id for r in rig.log.records] == [job_id]


def test_a_writer_whose_append_fails_after_a_repeat_answered_200_leaves_the_jobs_live() -> None:
    """The repeat told its client 200 for these ids: the writer must not cancel them."""
    rig = Rig()
    repeated: list[tuple[str, bool]] = []
    rig.log.before_ack = lambda: (setattr(rig.log, "before_ack", None), repeated.append(rig.enqueue()),
                                  setattr(rig.log, "fail", BackendUnavailable("ack lost")))  # type: ignore[func-returns-value]
    with pytest.raises(BackendUnavailable):
        rig.enqueue()
    [(job_id, replayed)] = repeated
    assert replayed and rig.store.unrecorded == []
    assert [r.job_id for r in rig.log.records] == [job_id]  # the repeat's append
    [(record, _)] = rig.keys.records.values()
    assert isinstance(record, KeyRecord) and record.claimed


def test_a_repeat_of_a_record_its_writer_released_meanwhile_is_a_first_request() -> None:
    keys = FakeKeyStore()
    rig = Rig(keys)
    rig.enqueue()
    [(record, _)] = keys.records.values()
    assert isinstance(record, KeyRecord)
    real_claim = keys.claim

    def released_first(key: str, found: KeyRecord) -> bool:
        assert keys.release(key, found)  # the writer's append failed just now
        return real_claim(key, found)

    keys.claim = released_first  # type: ignore[method-assign]
    rig.now_ms += 1_000
    job_id, replayed = rig.enqueue()
    assert not replayed and job_id != rig.log.records[0].job_id
    [(mine, _)] = keys.records.values()
    assert isinstance(mine, KeyRecord) and mine.accepted_at_ms == NOW + 1_000


def test_a_refused_request_frees_its_key_and_appends_nothing() -> None:
    rig = Rig(admission=Refusing())
    with pytest.raises(QueueFull):
        rig.enqueue()
    assert rig.keys.records == {} and rig.log.records == [] and rig.log.pending == []


@pytest.mark.parametrize("payload", [2, {"a": 1}])
def test_a_different_request_under_the_same_key_is_a_conflict_and_appends_nothing(payload: Any) -> None:
    rig = Rig()
    rig.enqueue()
    with pytest.raises(IdempotencyConflict):
        rig.enqueue(payload)
    assert len(rig.log.records) == 1 and rig.keys.writes == 1


def test_keys_are_independent_and_name_different_jobs() -> None:
    rig = Rig()
    assert rig.enqueue(key="a")[0] != rig.enqueue(key="b")[0]
    assert rig.keys.writes == 2


def test_a_batch_costs_one_record_and_its_repeat_names_the_same_jobs_in_order() -> None:
    rig = Rig()
    batch = BatchRequest(jobs=[EnqueueRequest(payload=i) for i in range(100)])
    first = rig.api.enqueue_batch("emails", batch, idempotency_key="b").body
    rig.now_ms += 60_000
    again = rig.api.enqueue_batch("emails", batch, idempotency_key="b")
    assert again.replayed and again.body == first and rig.keys.writes == 1
    assert len({j.job_id for j in first.jobs}) == 100  # type: ignore[union-attr]
    assert rig.log.records[:100] == rig.log.records[100:]
    with pytest.raises(IdempotencyConflict):  # a single enqueue is not the batch
        rig.enqueue(key="b")


def test_a_repeat_after_a_rotation_names_the_jobs_with_the_key_they_were_minted_with() -> None:
    rig = Rig()
    job_id, _ = rig.enqueue()
    rotated = Rig(rig.keys, IdMinting(NEW_KEY, (KEY,)))
    rotated.now_ms = NOW + 120_000
    assert rotated.enqueue() == (job_id, True)
    retired = Rig(rig.keys, IdMinting(NEW_KEY))
    retired.now_ms = NOW + 120_000
    with pytest.raises(IdempotencyConflict, match="retired"):
        retired.enqueue()
    assert retired.log.records == []


def test_a_record_of_before_answers_its_stored_body_and_appends_nothing() -> None:
    rig = Rig()
    digest = fingerprint("enqueue", "emails", EnqueueRequest(payload=1).model_dump(mode="json"))
    answer = {"job_id": "01J0000000000000000000000A.emails.x", "queue": "emails"}
    rig.keys.records["k"] = (Stored(digest, answer, None), NOW // 1000 + 3600)
    assert rig.enqueue() == ("01J0000000000000000000000A.emails.x", True)
    with pytest.raises(IdempotencyConflict):
        rig.enqueue(2)
    rig.keys.records["p"] = (Stored(digest, None, NOW + 5_000), NOW // 1000 + 3600)
    with pytest.raises(InProgress):
        rig.enqueue(key="p")
    rig.now_ms += 6_000  # its writer's time ran out: the key is taken afresh
    assert rig.enqueue(key="p")[1] is False
    assert len(rig.log.records) == 1


def test_an_expired_record_counts_as_absent() -> None:
    rig = Rig()
    first, _ = rig.enqueue()
    rig.now_ms += 24 * 3600 * 1000 + 1_000
    again, replayed = rig.enqueue()
    assert not replayed and again != first


def test_an_unreachable_key_store_appends_nothing() -> None:
    class Down(FakeKeyStore):
        def take(self, key: str, record: KeyRecord, *, expires_at_s: int,
                 now_ms: int) -> KeyRecord | Stored | None:
            raise BackendUnavailable("dynamodb down")

    rig = Rig(Down())
    with pytest.raises(BackendUnavailable):
        rig.enqueue()
    assert rig.log.records == [] and rig.log.pending == []


def test_a_release_that_fails_leaves_the_jobs_live_for_the_retry() -> None:
    """The writer cannot delete its record: it must not cancel ids a retry will answer 200 for."""
    class Stuck(FakeKeyStore):
        def release(self, key: str, record: KeyRecord) -> bool:
            raise BackendUnavailable("dynamodb down")

    rig = Rig(Stuck())
    rig.log.fail = BackendUnavailable("kafka down")
    with pytest.raises(BackendUnavailable):
        rig.enqueue()
    assert rig.store.unrecorded == []
    rig.log.fail = None
    rig.now_ms += 60_000
    job_id, replayed = rig.enqueue()
    assert replayed and [r.job_id for r in rig.log.records] == [job_id]


def test_concurrent_repeats_of_one_key_all_answer_the_same_job() -> None:
    rig = Rig()
    answers: list[tuple[str, bool]] = []
    lock = threading.Lock()

    def send() -> None:
        got = rig.enqueue()
        with lock:
            answers.append(got)

    threads = [threading.Thread(target=send) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert len(answers) == 8 and len({a[0] for a in answers}) == 1
    assert sorted(a[1] for a in answers) == [False] + [True] * 7


def test_must_claim_until_the_writers_deadline_and_a_little_after() -> None:
    record = KeyRecord("f", NOW, "A", "00" * 10, NOW + 1_000)
    assert must_claim(record, NOW + 1_000 + CLOCK_SKEW_MS)
    assert not must_claim(record, NOW + 1_001 + CLOCK_SKEW_MS)
    assert not must_claim(dataclasses.replace(record, claimed=True), NOW)


def test_the_fingerprint_is_powertools_payload_hash() -> None:
    """A record a gateway of before wrote validates against the same request (``Stored``)."""
    import hashlib
    import json

    request = {"payload": {"b": 1, "a": [1.5, "é"]}, "priority": 0}
    expected = hashlib.sha256(json.dumps({"op": "enqueue", "queue": "q", "request": request},
                                         sort_keys=True).encode()).hexdigest()
    assert fingerprint("enqueue", "q", request) == expected


def test_each_append_names_its_jobs_on_the_bus_before_it_runs() -> None:
    """An observer learns a keyed request's ids even when its answer never comes (the chaos workload)."""
    rig = Rig()
    named: list[KeyedJobsNamed] = []
    rig.bus.subscribe(named.append, KeyedJobsNamed)
    rig.log.fail = BackendUnavailable("kafka down")
    rig.keys.release = lambda key, record: False  # type: ignore[method-assign]  # as if it had died
    with pytest.raises(BackendUnavailable):
        rig.enqueue()
    rig.log.fail = None
    job_id, replayed = rig.enqueue()
    assert replayed and [(e.queue, e.jobs, e.repeat) for e in named] == [
        ("emails", (job_id,), False), ("emails", (job_id,), True)]
    assert [r.job_id for r in rig.log.records] == [job_id]
