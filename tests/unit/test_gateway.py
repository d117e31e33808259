"""The gateway's behaviour over fakes of the ports: routes, statuses, idempotency, OpenAPI."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from sluice.core import ids, seal
from sluice.core.bus import EventBus, JobEnded
from sluice.core.caller import Caller
from sluice.core.errors import BackendUnavailable, StoreError
from sluice.core.models import JOB_ID_RE, JobState
from sluice.entry.gateway import Gateway
from sluice.gateway.api import DEFAULT_ID_HORIZON_MS, NOT_ACKNOWLEDGED, Api, Backends, IdMinting, new_job_id
from tests.unit.test_gateway_fakes import KEY, LambdaContext, Rig, event_for, unavailable, unpack

JOBS = "/v1/queues/emails/jobs"


@pytest.fixture
def rig() -> Rig:
    return Rig()


def relayed(rig: Rig, job_id: str, status: JobState = JobState.QUEUED, **extra: Any) -> None:
    """Play the relay's part (mark_queued creates the item), then move the job on."""
    rig.store.mark_queued([(job_id, "emails", 0)])
    rig.store.set_status(job_id, status, **extra)


def leased(rig: Rig, *, held: bool = True) -> str:
    """A job enqueued, relayed and leased: in the store and in Redis (``held``: with its lease there)."""
    job_id = str(rig.call("POST", JOBS, {"payload": 1})[2]["job_id"])
    relayed(rig, job_id, JobState.LEASED)
    rig.queue.add("emails", job_id)
    if held:
        rig.queue.hold("emails", job_id)
    return job_id


def test_enqueue_is_202_with_location_after_the_append(rig: Rig) -> None:
    body = {"payload": {"to": "ada"}, "delay_seconds": 60, "priority": 7, "max_attempts": 3,
            "lease_seconds": 90}
    code, headers, doc = rig.call("POST", JOBS, body)
    assert code == 202
    assert doc == {"job_id": doc["job_id"], "queue": "emails", "status": "accepted"}
    assert JOB_ID_RE.fullmatch(doc["job_id"]) and ids.verify(doc["job_id"], KEY) == ("emails", rig.now_ms)
    # Under the stage the caller called (requestContext.path is /live/v1/...): /v1/jobs/<id> alone is a
    # path the API does not serve on its execute-api URL (session 36's walk).
    assert headers["location"] == f"/live/v1/jobs/{doc['job_id']}"
    [spec] = rig.log.records
    assert (spec.job_id, spec.queue, spec.payload) == (doc["job_id"], "emails", {"to": "ada"})
    assert (spec.priority, spec.max_attempts, spec.lease_ms, spec.schema_version) == (7, 3, 90_000, 2)
    assert spec.run_at_ms == spec.enqueued_at_ms + 60_000
    assert json.loads(spec.model_dump_json())["schema_version"] == 2  # sealed (issue 27)
    assert seal.verify_spec(spec, [KEY])
    assert not seal.verify_spec(spec.model_copy(update={"priority": 9}), [KEY])


def test_an_accepted_job_redis_holds_reads_queued(rig: Rig) -> None:
    """The relay's status write is best effort (it drops what it cannot write at full rate), so an
    item still ``accepted``, or none at all, is ``queued`` once Redis holds the job; with Redis
    unreachable the read still answers, ``accepted``."""
    _, _, accepted = rig.call("POST", JOBS, {"payload": 1})
    job_id = accepted["job_id"]
    rig.queue.add("emails", job_id)  # pushed; its status write dropped: no item
    assert rig.call("GET", f"/v1/jobs/{job_id}")[2]["status"] == "queued"
    rig.store.mark_queued([(job_id, "emails", 0)])
    rig.store.set_status(job_id, JobState.ACCEPTED)  # an item the relay's write never moved on
    assert rig.call("GET", f"/v1/jobs/{job_id}")[2]["status"] == "queued"
    rig.queue.down = BackendUnavailable("redis down")
    code, _, doc = rig.call("GET", f"/v1/jobs/{job_id}")
    assert (code, doc["status"]) == (200, "accepted")
    rig.queue.down = None
    del rig.queue.jobs["emails", job_id]  # not yet pushed
    assert rig.call("GET", f"/v1/jobs/{job_id}")[2]["status"] == "accepted"


def test_defaults_apply_when_only_the_payload_is_given(rig: Rig) -> None:
    rig.call("POST", JOBS, {"payload": None})
    [spec] = rig.log.records
    # max_attempts absent: 0 in the record, "the handler's retry policy decides" (issue 31, item 4)
    assert (spec.payload, spec.priority, spec.max_attempts) == (None, 0, 0)
    assert (spec.lease_ms, spec.run_at_ms) == (30_000, 0)


def test_status_works_immediately_after_the_202(rig: Rig) -> None:
    _, _, accepted = rig.call("POST", JOBS, {"payload": 1})
    assert rig.store.items == {}  # the happy path writes nothing but the Kafka record
    rig.now_ms += 5
    code, _, doc = rig.call("GET", f"/v1/jobs/{accepted['job_id']}")
    assert code == 200
    assert (doc["job_id"], doc["queue"], doc["status"], doc["attempts"]) == (accepted["job_id"], "emails",
                                                                            "accepted", 0)
    assert doc["created_at_ms"] == doc["updated_at_ms"] == rig.log.records[0].enqueued_at_ms
    relayed(rig, accepted["job_id"])  # once the relay recorded it, the item answers
    assert rig.call("GET", f"/v1/jobs/{accepted['job_id']}")[2]["status"] == "queued"


def test_unrecorded_ids_only_verify_when_minted_here(rig: Rig) -> None:
    _, _, accepted = rig.call("POST", JOBS, {"payload": 1})
    stamp, queue, mac = accepted["job_id"].split(".")
    flipped = mac[:-1] + ("A" if mac[-1] != "A" else "B")
    other_key = ids.mint(rig.now_ms, "emails", b"another-deployment-key-0123456")
    for job_id in (f"{stamp}.{queue}.{flipped}",  # forged mac
                   f"{stamp}.thumbnails.{mac}",  # the mac of another queue
                   f"{new_job_id(rig.now_ms)}.{queue}.{mac}",  # another ULID
                   f"{stamp}.{queue}.{mac[:-1]}",  # truncated
                   stamp,  # a bare ULID
                   other_key):  # another deployment's secret
        code, _, doc = rig.call("GET", f"/v1/jobs/{job_id}")
        assert (code, doc["code"]) == (404, "NOT_FOUND"), job_id
        assert rig.call("DELETE", f"/v1/jobs/{job_id}")[0] == 404, job_id
    assert rig.store.items == {} and rig.store.unrecorded == []


def test_unrecorded_ids_expire_with_the_horizon(rig: Rig) -> None:
    _, _, accepted = rig.call("POST", JOBS, {"payload": 1})
    rig.now_ms += DEFAULT_ID_HORIZON_MS
    assert rig.call("GET", f"/v1/jobs/{accepted['job_id']}")[0] == 200
    rig.now_ms += 1
    assert rig.call("GET", f"/v1/jobs/{accepted['job_id']}")[0] == 404
    assert rig.call("DELETE", f"/v1/jobs/{accepted['job_id']}")[0] == 404
    relayed(rig, accepted["job_id"])  # a recorded job is answered from its item, whatever its age
    assert rig.call("GET", f"/v1/jobs/{accepted['job_id']}")[0] == 200


def test_a_job_waiting_in_redis_past_the_horizon_still_reads_and_cancels(rig: Rig) -> None:
    """Issue 33 (cheaper per job): the relay writes no ``queued`` item for a keyed id, so a job that
    waits in its queue longer than the horizon (a queue held for weeks) has no item until its grant.
    While Redis holds it, its id still answers GET (``queued``) and DELETE (a cancelled item); one
    Redis no longer holds is 404 as before."""
    _, _, accepted = rig.call("POST", JOBS, {"payload": 1})
    job_id = accepted["job_id"]
    rig.queue.add("emails", job_id)  # pushed; no item
    rig.now_ms += DEFAULT_ID_HORIZON_MS + 1
    code, _, doc = rig.call("GET", f"/v1/jobs/{job_id}")
    assert (code, doc["status"], doc["created_at_ms"]) == (200, "queued", rig.log.records[0].enqueued_at_ms)
    code, _, doc = rig.call("DELETE", f"/v1/jobs/{job_id}")
    assert (code, doc["status"]) == (202, "cancelled")
    assert rig.queue.cancelled == [("emails", job_id)]
    assert rig.store.get_job(job_id).status is JobState.CANCELLED
    _, _, other = rig.call("POST", JOBS, {"payload": 2})
    rig.now_ms += DEFAULT_ID_HORIZON_MS + 1  # past the horizon and not in Redis: 404
    assert rig.call("GET", f"/v1/jobs/{other['job_id']}")[0] == 404
    assert rig.call("DELETE", f"/v1/jobs/{other['job_id']}")[0] == 404
    # Minted with a key long rotated away (no key verifies it), or keyless (a schedule firing's):
    # held live in the queue its id names, it is the relay's, which checked it when it pushed it.
    old_key = ids.mint(rig.now_ms - 1_000, "emails", b"a-key-two-rotations-ago-0123456789")
    firing = ids.keyless(rig.now_ms - 1_000, "emails", b"e" * 10, b"firing")
    for job_id in (old_key, firing):
        assert rig.call("GET", f"/v1/jobs/{job_id}")[0] == 404
        rig.queue.add("emails", job_id)
        code, _, doc = rig.call("GET", f"/v1/jobs/{job_id}")
        assert (code, doc["status"], doc["created_at_ms"]) == (200, "queued", rig.now_ms - 1_000)
        assert rig.call("DELETE", f"/v1/jobs/{job_id}")[2]["status"] == "cancelled"
    stray = ids.mint(rig.now_ms - 1_000, "emails", b"another-key-two-rotations-ago-0123")
    rig.queue.add("thumbnails", stray)  # held in another queue than the one its id names: not its job
    assert rig.call("GET", f"/v1/jobs/{stray}")[0] == 404
    assert rig.call("DELETE", f"/v1/jobs/{stray}")[0] == 404


def test_status_reports_result_and_last_error(rig: Rig) -> None:
    _, _, accepted = rig.call("POST", JOBS, {"payload": 1})
    relayed(rig, accepted["job_id"], JobState.SUCCEEDED, attempts=2, result={"ok": True},
            last_error="timeout on attempt 1", finished_at_ms=123)
    _, _, doc = rig.call("GET", f"/v1/jobs/{accepted['job_id']}")
    assert (doc["status"], doc["attempts"], doc["result"], doc["last_error"], doc["finished_at_ms"]) == (
        "succeeded", 2, {"ok": True}, "timeout on attempt 1", 123)


def test_unknown_job_is_404_and_malformed_id_is_400(rig: Rig) -> None:
    code, headers, doc = rig.call("GET", f"/v1/jobs/{new_job_id(0)}")
    assert (code, headers["content-type"], doc["code"]) == (404, "application/problem+json", "NOT_FOUND")
    code, _, _ = rig.call("GET", "/v1/jobs/-bad%20id")
    assert code == 400


def test_cancel_a_queued_job_removes_it_from_redis(rig: Rig) -> None:
    _, _, accepted = rig.call("POST", JOBS, {"payload": 1})
    job_id = accepted["job_id"]
    relayed(rig, job_id)
    rig.queue.add("emails", job_id)
    code, _, doc = rig.call("DELETE", f"/v1/jobs/{job_id}")
    assert (code, doc) == (202, {"job_id": job_id, "status": "cancelled"})
    assert rig.queue.cancelled == [("emails", job_id)]
    assert rig.store.get_job(job_id).status is JobState.CANCELLED


def test_cancel_an_accepted_job_still_in_kafka(rig: Rig) -> None:
    _, _, accepted = rig.call("POST", JOBS, {"payload": 1})
    job_id = accepted["job_id"]
    code, _, doc = rig.call("DELETE", f"/v1/jobs/{job_id}")
    assert (code, doc["status"]) == (202, "cancelled")
    assert [(j, q) for j, q, _ in rig.store.unrecorded] == [(job_id, "emails")]
    assert rig.queue.cancelled == []  # not in Redis yet; the relay skips final jobs
    assert rig.call("GET", f"/v1/jobs/{job_id}")[2]["status"] == "cancelled"
    relayed(rig, job_id, JobState.CANCELLED)
    assert rig.call("DELETE", f"/v1/jobs/{job_id}")[2]["code"] == "ALREADY_FINISHED"


def test_cancel_a_leased_job_asks_its_worker(rig: Rig) -> None:
    job_id = leased(rig)
    code, _, doc = rig.call("DELETE", f"/v1/jobs/{job_id}")
    assert (code, doc["status"]) == (202, "cancel_requested")
    assert rig.store.get_job(job_id).cancel_requested


def test_cancel_a_job_leased_in_the_store_but_waiting_in_redis_ends_it(rig: Rig) -> None:
    """Issue 13, bug 1: its holder died and the lease was reclaimed, so Redis has it waiting while
    the item says leased. Removing it must end the item (here at once, and by a settle entry
    in case the gateway dies first), not leave it leased with a request nobody will honour."""
    job_id = leased(rig, held=False)
    code, _, doc = rig.call("DELETE", f"/v1/jobs/{job_id}")
    assert (code, doc["status"]) == (202, "cancelled")
    assert rig.store.get_job(job_id).status is JobState.CANCELLED
    assert rig.queue.settle_entries == [f"cancelled:0:{job_id}"]


def test_cancel_a_job_leased_in_the_store_and_gone_from_redis_ends_it(rig: Rig) -> None:
    _, _, accepted = rig.call("POST", JOBS, {"payload": 1})
    job_id = accepted["job_id"]
    relayed(rig, job_id, JobState.LEASED)  # e.g. Redis lost it; a grant would refuse it now anyway
    code, _, doc = rig.call("DELETE", f"/v1/jobs/{job_id}")
    assert (code, doc["status"]) == (202, "cancelled")
    assert rig.store.get_job(job_id).status is JobState.CANCELLED


def test_a_cancel_that_ends_a_job_emits_one_job_ended_and_a_cancel_request_none(rig: Rig) -> None:
    ended: list[JobEnded] = []
    rig.api.events.subscribe(ended.append, JobEnded)
    ids = [rig.call("POST", JOBS, {"payload": i})[2]["job_id"] for i in range(2)]
    relayed(rig, ids[0])
    rig.queue.add("emails", ids[0])
    assert rig.call("DELETE", f"/v1/jobs/{ids[0]}")[2]["status"] == "cancelled"
    relayed(rig, ids[1], JobState.LEASED)
    rig.queue.add("emails", ids[1])
    rig.queue.hold("emails", ids[1])
    assert rig.call("DELETE", f"/v1/jobs/{ids[1]}")[2]["status"] == "cancel_requested"
    assert [(e.job, e.queue, e.state, e.source) for e in ended] == [(ids[0], "emails", "cancelled", "cancel")]
    assert ended[0].ended_at_ms > 0


def test_cancel_a_leased_job_with_redis_down_is_503_and_can_be_repeated(rig: Rig) -> None:
    job_id = leased(rig)
    rig.queue.down = BackendUnavailable("redis down")
    code, headers, _ = rig.call("DELETE", f"/v1/jobs/{job_id}")
    assert (code, headers["retry-after"]) == (503, "1")
    rig.queue.down = None
    assert rig.call("DELETE", f"/v1/jobs/{job_id}")[0] == 202


@pytest.mark.parametrize("final", [JobState.SUCCEEDED, JobState.FAILED, JobState.DEAD, JobState.CANCELLED])
def test_cancel_a_finished_job_is_409(rig: Rig, final: JobState) -> None:
    _, _, accepted = rig.call("POST", JOBS, {"payload": 1})
    relayed(rig, accepted["job_id"], final)
    code, _, doc = rig.call("DELETE", f"/v1/jobs/{accepted['job_id']}")
    assert (code, doc["code"]) == (409, "ALREADY_FINISHED")


def test_cancel_unknown_job_is_404(rig: Rig) -> None:
    assert rig.call("DELETE", f"/v1/jobs/{new_job_id(1)}")[0] == 404


def test_queue_stats_include_config(rig: Rig) -> None:
    code, _, doc = rig.call("GET", "/v1/queues/emails")
    assert code == 200
    assert doc == {"queue": "emails", "ready": 3, "delayed": 1, "leased": 2, "dead": 0,
                   "oldest_ready_age_ms": 1500, "paused": True, "rate_per_s": 200.0, "burst": 50,
                   "max_in_flight": 0, "max_in_flight_per_group": 0, "high_watermark": 0,
                   "low_watermark": 0, "max_delayed": 0, "max_dead": 0, "used_bytes": 0, "budget_bytes": 0,
                   "parked": 0, "parked_at_ms": 0, "route": None}


def test_batch_returns_one_result_per_job_in_order(rig: Rig) -> None:
    code, _, doc = rig.call("POST", f"{JOBS}/batch", {"jobs": [{"payload": i} for i in range(100)]})
    assert code == 202
    assert [r.payload for r in rig.log.records] == list(range(100))
    assert [j["job_id"] for j in doc["jobs"]] == [r.job_id for r in rig.log.records]
    assert len({j["job_id"] for j in doc["jobs"]}) == 100
    assert rig.store.items == {}
    assert {rig.call("GET", f"/v1/jobs/{j['job_id']}")[2]["status"] for j in doc["jobs"][:3]} == {"accepted"}


@pytest.mark.parametrize("path,body", [(JOBS, {"payload": 1}),
                                       (f"{JOBS}/batch", {"jobs": [{"payload": i} for i in range(3)]})])
def test_kafka_failure_is_503_and_withdraws_every_job(rig: Rig, path: str, body: Any) -> None:
    minted: list[str] = []
    rig.log.before_ack = lambda: minted.extend(r.job_id for r in rig.log.pending)
    rig.log.fail = unavailable()
    code, headers, doc = rig.call("POST", path, body)
    assert (code, headers["retry-after"], doc["code"]) == (503, "1", "UNAVAILABLE")
    assert rig.log.records == [] and len(minted) == len(body.get("jobs", [body]))
    assert sorted(rig.store.unrecorded) == sorted((j, "emails", NOT_ACKNOWLEDGED) for j in minted)
    # Tombstones: the relay skips final jobs, a worker's grant refuses cancelled ones; GET agrees.
    assert {rig.store.get_job(j).status for j in minted} == {JobState.CANCELLED}
    assert {rig.call("GET", f"/v1/jobs/{j}")[2]["status"] for j in minted} == {"cancelled"}


@pytest.mark.parametrize("failure", [StoreError("dynamodb throttled"), RuntimeError("an untranslated bug")])
def test_a_failed_withdrawal_is_logged_and_still_503(rig: Rig, caplog: pytest.LogCaptureFixture,
                                                     failure: Exception) -> None:
    rig.log.fail = unavailable()
    rig.store.fail_cancel = failure
    assert rig.call("POST", JOBS, {"payload": 1})[0] == 503
    [(job_id, _, _)] = rig.store.unrecorded
    assert any(job_id in r.getMessage() and r.levelname == "ERROR" for r in caplog.records)


def test_unknown_route_is_404_and_wrong_method_is_405(rig: Rig) -> None:
    code, _, doc = rig.call("GET", "/v2/nothing")
    assert (code, doc["code"]) == (404, "NOT_FOUND")
    code, headers, _ = rig.call("PATCH", "/v1/jobs/abc")
    assert (code, headers["allow"]) == (405, "GET, DELETE")
    code, headers, _ = rig.call("GET", JOBS)
    assert (code, headers["allow"]) == (405, "POST")


def test_unexpected_errors_are_500_problems_without_internals(rig: Rig) -> None:
    rig.log.fail = RuntimeError("secret connection string")
    code, headers, doc = rig.call("POST", JOBS, {"payload": 1})
    assert (code, headers["content-type"]) == (500, "application/problem+json")
    assert "secret" not in json.dumps(doc)


# -- idempotency ---------------------------------------------------------------------------------

def test_same_key_same_body_returns_the_original_job_with_200(rig: Rig) -> None:
    key = {"Idempotency-Key": "order-1"}
    first = rig.call("POST", JOBS, {"payload": {"a": 1}}, headers=key)
    second = rig.call("POST", JOBS, {"payload": {"a": 1}}, headers=key)
    assert first[0] == 202 and second[0] == 200
    assert second[2] == first[2]
    assert second[1]["idempotent-replayed"] == "true"
    assert second[1]["location"] == first[1]["location"]
    # The repeat appends the same record again (its first may have died before appending it):
    # the relay and Redis keep one job per id.
    assert len(rig.log.records) == 2 and rig.log.records[0] == rig.log.records[1]
    assert rig.log.records[0].idempotency_key is not None


def test_same_key_with_explicit_defaults_is_the_same_request(rig: Rig) -> None:
    key = {"Idempotency-Key": "k"}
    rig.call("POST", JOBS, {"payload": 1}, headers=key)
    assert rig.call("POST", JOBS, {"payload": 1, "priority": 0}, headers=key)[0] == 200


@pytest.mark.parametrize("second", [{"payload": {"a": 2}}, {"payload": {"a": 1}, "priority": 1}])
def test_same_key_different_body_is_422(rig: Rig, second: dict[str, Any]) -> None:
    key = {"Idempotency-Key": "order-2"}
    rig.call("POST", JOBS, {"payload": {"a": 1}}, headers=key)
    code, _, doc = rig.call("POST", JOBS, second, headers=key)
    assert (code, doc["code"]) == (422, "IDEMPOTENCY_CONFLICT")
    assert len(rig.log.records) == 1


def test_same_key_on_another_queue_is_422(rig: Rig) -> None:
    key = {"Idempotency-Key": "k"}
    rig.call("POST", JOBS, {"payload": 1}, headers=key)
    assert rig.call("POST", "/v1/queues/other/jobs", {"payload": 1}, headers=key)[0] == 422


@pytest.mark.parametrize(("path", "body"), [(JOBS, {"payload": 1}),
                                            (f"{JOBS}/batch", {"jobs": [{"payload": 1}]})])
def test_keys_are_scoped_per_caller(rig: Rig, path: str, body: dict[str, Any]) -> None:
    event = event_for("POST", path, body, headers={"Idempotency-Key": "k"})
    assert unpack(rig.gateway(event, None))[0] == 202
    event["requestContext"]["identity"]["userArn"] = "arn:aws:sts::123456789012:assumed-role/other/x"
    assert unpack(rig.gateway(event, None))[0] == 202
    assert len(rig.log.records) == 2


def test_a_callers_idempotency_key_is_its_own() -> None:
    tenant, other = Caller(idempotency_scope="key-1"), Caller(idempotency_scope="key-2")
    assert tenant.own_key("k") == "key-1|k" != other.own_key("k")
    assert tenant.own_key(None) is None


@pytest.mark.parametrize(("scope_a", "key_a", "scope_b", "key_b"), [
    ("garbage", "x|k1", "garbage|x", "k1"),  # session 36's hostile walk: the second replayed the first's job
    ("a\\", "|k", "a|", "k"),  # both "a\\||k" were the scope's backslash not escaped
    ("a\\|b", "k", "a\\", "b|k"),
])
def test_a_scope_holding_the_separator_cannot_name_another_callers_key(scope_a: str, key_a: str,
                                                                         scope_b: str, key_b: str) -> None:
    a, b = Caller(idempotency_scope=scope_a), Caller(idempotency_scope=scope_b)
    assert a.own_key(key_a) != b.own_key(key_b)


def test_an_arns_scoped_key_is_stored_as_before_the_escape() -> None:
    arn = "arn:aws:sts::123456789012:assumed-role/web/i-0abc"
    assert Caller(idempotency_scope=arn).own_key("order-7") == f"{arn}|order-7"


def test_batch_replay_returns_the_same_ids(rig: Rig) -> None:
    key = {"Idempotency-Key": "batch-1"}
    body = {"jobs": [{"payload": i} for i in range(3)]}
    first = rig.call("POST", f"{JOBS}/batch", body, headers=key)
    second = rig.call("POST", f"{JOBS}/batch", body, headers=key)
    assert (first[0], second[0], first[2]) == (202, 200, second[2])
    assert rig.log.records[:3] == rig.log.records[3:] and len(rig.log.records) == 6


def test_a_failed_request_releases_its_key(rig: Rig) -> None:
    key = {"Idempotency-Key": "retry-me"}
    rig.log.fail = unavailable()
    assert rig.call("POST", JOBS, {"payload": 1}, headers=key)[0] == 503
    rig.log.fail = None
    code, _, doc = rig.call("POST", JOBS, {"payload": 1}, headers=key)
    assert code == 202 and [r.job_id for r in rig.log.records] == [doc["job_id"]]


def test_concurrent_identical_requests_make_one_job(rig: Rig) -> None:
    """Two containers (two resolvers) receive the same keyed request at the same moment: the second,
    while the first appends, claims the first's record and answers its job (issue 33: it was 409)."""
    other = Gateway(rig.api)
    key = {"Idempotency-Key": "same-moment"}
    in_append, release = threading.Event(), threading.Event()
    seen: list[tuple[int, dict[str, Any]]] = []

    def slow_ack() -> None:
        in_append.set()
        assert release.wait(5)

    rig.log.before_ack = slow_ack
    def call() -> None:
        code, _, doc = rig.call("POST", JOBS, {"payload": 1}, headers=key)
        seen.append((code, doc))

    first = threading.Thread(target=call)
    first.start()
    assert in_append.wait(5)
    rig.log.before_ack = None
    code, _, doc = unpack(other(event_for("POST", JOBS, {"payload": 1}, headers=key), None))
    release.set()
    first.join(5)
    [(first_code, first_doc)] = seen
    assert (first_code, code, doc["job_id"]) == (202, 200, first_doc["job_id"])
    code, _, replay = unpack(other(event_for("POST", JOBS, {"payload": 1}, headers=key), None))
    assert (code, replay["job_id"]) == (200, first_doc["job_id"])
    assert {r.job_id for r in rig.log.records} == {first_doc["job_id"]}


# -- OpenAPI ---------------------------------------------------------------------------------------

def test_openapi_document_describes_every_route_from_the_models(rig: Rig) -> None:
    code, headers, doc = rig.call("GET", "/v1/openapi.json")
    assert code == 200 and headers["content-type"] == "application/json"
    assert doc["openapi"].startswith("3.")
    assert {(p, m) for p, ops in doc["paths"].items() for m in ops} == {
        ("/v1/queues/{queue}/jobs", "post"), ("/v1/queues/{queue}/jobs/batch", "post"),
        ("/v1/jobs/{job_id}", "get"), ("/v1/jobs/{job_id}", "delete"), ("/v1/queues/{queue}", "get"),
        # the operator API (issue 17): IAM only, operators only
        ("/v1/admin/queues/{queue}/pause", "post"), ("/v1/admin/queues/{queue}/resume", "post"),
        ("/v1/admin/queues/{queue}/rate", "put"), ("/v1/admin/queues/{queue}/max-in-flight", "put"),
        ("/v1/admin/queues/{queue}/watermarks", "put"), ("/v1/admin/queues/{queue}/dlq", "get"),
        ("/v1/admin/queues/{queue}/dlq", "delete"), ("/v1/admin/queues/{queue}/dlq/redrive", "post"),
        ("/v1/admin/queues", "get"), ("/v1/admin/queues/{queue}", "get"),
        ("/v1/admin/queues/{queue}/caps", "put"), ("/v1/admin/queues/{queue}/jobs", "get"),
        ("/v1/admin/queues/{queue}/jobs/{job_id}/timeline", "get"),  # issue 32
        ("/v1/admin/queues/{queue}/depth", "get"), ("/v1/admin/queues/{queue}/sensitive", "put")}
    request = doc["components"]["schemas"]["EnqueueRequest"]
    assert request["additionalProperties"] is False and request["required"] == ["payload"]
    lease = request["properties"]["lease_seconds"]
    assert (lease["minimum"], lease["maximum"]) == (1, 43200)
    post = doc["paths"]["/v1/queues/{queue}/jobs"]["post"]
    assert set(post["responses"]) == {"200", "202", "400", "404", "409", "413", "415", "422", "503"}
    assert "application/problem+json" in post["responses"]["422"]["content"]
    assert "HTTPValidationError" not in json.dumps(doc)


# ------------------------------------------------------------------ job id key rotation (issue 19, item 8)

NEW_KEY = b"the-rotated-in-job-id-key-0123456789"


def test_after_a_rotation_ids_of_the_previous_key_still_answer(rig: Rig) -> None:
    _, _, accepted = rig.call("POST", JOBS, {"payload": 1})
    rotated = Api(Backends(rig.log, rig.store, rig.queue, events=EventBus()), IdMinting(NEW_KEY, [KEY]),  # type: ignore[arg-type]
                  clock=lambda: rig.now_ms)
    assert rotated.status(accepted["job_id"]).status is JobState.ACCEPTED
    fresh = rotated.minted(ids.mint(rig.now_ms, "emails", NEW_KEY))
    assert fresh == ("emails", rig.now_ms)
    without_previous = Api(Backends(rig.log, rig.store, rig.queue, events=EventBus()), IdMinting(NEW_KEY),  # type: ignore[arg-type]
                           clock=lambda: rig.now_ms)
    assert without_previous.minted(accepted["job_id"]) is None


def test_an_id_of_a_key_rotated_in_elsewhere_rereads_the_keys_at_most_once_a_minute(rig: Rig) -> None:
    reads: list[int] = []

    def refresh() -> tuple[bytes, tuple[bytes, ...]]:
        reads.append(rig.now_ms)
        return NEW_KEY, (KEY,)

    api = Api(Backends(rig.log, rig.store, rig.queue, events=EventBus()), IdMinting(KEY, refresh=refresh),  # type: ignore[arg-type]
              clock=lambda: rig.now_ms)
    newer = ids.mint(rig.now_ms, "emails", NEW_KEY)
    assert api.minted(newer) is None and reads == []  # just read: no second read yet
    rig.now_ms += 61_000
    assert api.minted(ids.mint(rig.now_ms, "emails", KEY)) is not None and reads == []  # a known key id
    assert api.minted(newer) == ("emails", rig.now_ms - 61_000) and reads == [rig.now_ms]
    assert api.job_id_key == NEW_KEY  # now mints with the rotated-in key
    forged = newer[:-1] + ("A" if newer[-1] != "A" else "B")
    rig.now_ms += 1_000
    assert api.minted(forged) is None and len(reads) == 1  # known key id: no read


# ------------------------------------------------------------------ operators' priorities (issue 19, item 5)

OPERATOR_ROLE = "arn:aws:iam::123456789012:role/ops/sluice-operators"


def _priority_rig(operators: list[str]) -> Rig:
    rig = Rig()
    rig.api.max_caller_priority, rig.api.operators = 5, tuple(operators)
    return rig


def _as(principal: str) -> Any:
    def event(method: str, path: str, body: Any) -> dict[str, Any]:
        e = event_for(method, path, body)
        e["requestContext"]["identity"]["userArn"] = principal
        return e
    return event


def test_a_caller_may_not_use_the_top_priorities() -> None:
    rig = _priority_rig([OPERATOR_ROLE])
    code, _, doc = rig.call("POST", JOBS, {"payload": 1, "priority": 9})  # the recorded web-servers role
    assert (code, doc["code"], doc["status"]) == (403, "PRIORITY_NOT_ALLOWED", 403)
    assert "above 5" in doc["detail"]
    batch = {"jobs": [{"payload": 1}, {"payload": 2, "priority": 6}]}
    code, _, doc = rig.call("POST", f"{JOBS}/batch", batch)
    assert (code, doc["code"]) == (403, "PRIORITY_NOT_ALLOWED") and "job 1" in doc["detail"]
    assert rig.log.records == []  # nothing accepted, not even the batch's first job
    assert rig.call("POST", JOBS, {"payload": 1, "priority": 5})[0] == 202


def test_an_operator_role_session_may_use_them() -> None:
    rig = _priority_rig([OPERATOR_ROLE])
    session = "arn:aws:sts::123456789012:assumed-role/sluice-operators/alice"
    response = rig.gateway(_as(session)("POST", JOBS, {"payload": 1, "priority": 9}), LambdaContext())
    assert unpack(response)[0] == 202 and rig.log.records[0].priority == 9
    other_account = "arn:aws:sts::999999999999:assumed-role/sluice-operators/mallory"
    response = rig.gateway(_as(other_account)("POST", JOBS, {"payload": 1, "priority": 9}), LambdaContext())
    assert unpack(response)[0] == 403


def test_without_a_principal_api_key_callers_get_the_caller_limit() -> None:
    rig = _priority_rig([OPERATOR_ROLE])
    response = rig.gateway(_as("")("POST", JOBS, {"payload": 1, "priority": 6}), LambdaContext())
    assert unpack(response)[0] == 403


def test_a_payload_becomes_canonical_json_once_on_the_gateway(rig: Rig,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 16: the size check serialises it; the record's validation does not do it again."""
    import sluice.core.models

    payload = {"to": "ada", "n": [1, 2.5, "é"]}
    encoded: list[Any] = []
    real = sluice.core.models.dump_json

    def counting(value: Any) -> str:
        if value == payload:
            encoded.append(value)
        return real(value)

    monkeypatch.setattr(sluice.core.models, "dump_json", counting)
    monkeypatch.setattr("sluice.gateway.pipeline.dump_json", counting)
    assert rig.call("POST", JOBS, {"payload": payload})[0] == 202
    assert len(encoded) == 1 and rig.log.records[0].payload == payload
    encoded.clear()
    assert rig.call("POST", f"{JOBS}/batch", {"jobs": [{"payload": payload}] * 3})[0] == 202
    assert len(encoded) == 3


def test_a_record_built_elsewhere_still_refuses_a_payload_json_cannot_hold() -> None:
    from pydantic import ValidationError

    from sluice.core.models import JobSpec

    with pytest.raises(ValidationError, match="not JSON-serialisable"):
        JobSpec(job_id="01J0000000000000000000000A", queue="q", payload={"x": float("nan")})
