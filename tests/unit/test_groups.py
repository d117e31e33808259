"""Fair groups (issue 28, item 5) above Redis: the gateway's ``group`` (and its refusals), the
record's seal with and without a group, the relay's decoding and push arguments, the knob."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

import pytest
from pydantic import ValidationError

from sluice.core import ids, knobs, seal
from sluice.core.errors import InvalidInput
from sluice.core.models import DecodedJob, JobSpec, QueueConfig, validate_group
from sluice.relay.intake import check_record
from sluice.relay.ports import SourceRecord
from sluice.relay.records import decode_sealed
from tests.unit.test_gateway_fakes import KEY, Rig

JOBS = "/v1/queues/emails/jobs"
NOW = 1_700_000_000_000
BAD_GROUPS = ["", " ", "-lead", ".lead", "a b", "a/b", "a{b}", "x" * 65, "é", "a\nb", "ab\n", 7, True, ["a"],
              {"a": 1}]


@pytest.fixture
def rig() -> Rig:
    return Rig()


# --- the gateway ----------------------------------------------------------------------------

def test_a_group_is_carried_in_the_record_and_sealed(rig: Rig) -> None:
    code, _, _ = rig.call("POST", JOBS, {"payload": 1, "group": "org:42"})
    assert code == 202
    [spec] = rig.log.records
    assert spec.group == "org:42"
    assert seal.verify_spec(spec, [KEY])
    assert not seal.verify_spec(spec.model_copy(update={"group": "org:43"}), [KEY])  # the seal covers it
    assert not seal.verify_spec(spec.model_copy(update={"group": None}), [KEY])


def test_a_job_without_a_group_has_none(rig: Rig) -> None:
    rig.call("POST", JOBS, {"payload": 1})
    [spec] = rig.log.records
    assert spec.group is None and seal.verify_spec(spec, [KEY])
    assert "group" not in json.loads(spec.model_dump_json(exclude_none=True))


@pytest.mark.parametrize("group", BAD_GROUPS)
def test_a_bad_group_is_400_and_nothing_is_written(rig: Rig, group: Any) -> None:
    code, _, doc = rig.call("POST", JOBS, {"payload": 1, "group": group})
    assert code == 400, doc
    assert any(e["pointer"] == "/group" for e in doc["errors"]), doc
    assert rig.log.records == [] and rig.store.items == {}


def test_a_batch_with_one_bad_group_writes_nothing(rig: Rig) -> None:
    code, _, doc = rig.call("POST", JOBS + "/batch", {"jobs": [{"payload": 1, "group": "good"},
                                                              {"payload": 2, "group": "bad group"}]})
    assert code == 400
    assert any(e["pointer"] == "/jobs/1/group" for e in doc["errors"]), doc
    assert rig.log.records == [] and rig.store.items == {}


def test_group_names_follow_the_pattern() -> None:
    for good in ["a", "A", "0", "org:42", "t.e_n-a:n", "x" * 64]:
        assert validate_group(good) == good
        assert JobSpec(job_id="j", queue="q", group=good).group == good
    for bad in BAD_GROUPS:
        with pytest.raises(InvalidInput):
            validate_group(bad)
        with pytest.raises(ValidationError):
            JobSpec(job_id="j", queue="q", group=bad)


# --- the seal ---------------------------------------------------------------------------------

def _message_before_groups(spec: JobSpec) -> bytes:
    """``seal.message`` as it was before groups (c44b81f), written out again."""
    key = "-" if spec.idempotency_key is None else "+" + spec.idempotency_key
    digest = hashlib.sha256(spec.payload_json().encode()).hexdigest()
    return (f"sluice record 2\n{spec.job_id}\n{spec.queue}\n{digest}\n{spec.priority}\n{spec.max_attempts}\n"
            f"{spec.lease_ms}\n{spec.run_at_ms}\n{spec.enqueued_at_ms}\n{key}").encode()


def _seal_before_groups(spec: JobSpec, key: bytes) -> str:
    mac = hmac.new(seal.record_key(key), _message_before_groups(spec), "sha256").digest()[:16].hex()
    return ids.key_id(key) + mac


@pytest.mark.parametrize("idempotency_key", [None, "k-1"])
def test_a_seal_made_before_groups_still_verifies(idempotency_key: str | None) -> None:
    spec = JobSpec(schema_version=2, job_id=ids.mint(NOW, "q", KEY), queue="q", payload={"a": [1, 2.5]},
                   priority=3, max_attempts=4, lease_ms=30_000, run_at_ms=NOW + 60_000, enqueued_at_ms=NOW,
                   idempotency_key=idempotency_key)
    assert seal.spec_message(spec) == _message_before_groups(spec)
    old = spec.model_copy(update={"seal": _seal_before_groups(spec, KEY)})
    assert seal.verify_spec(old, [KEY])
    assert seal.seal_spec(spec, KEY).seal == old.seal


def test_a_group_adds_one_line_to_the_sealed_message() -> None:
    spec = JobSpec(schema_version=2, job_id=ids.mint(NOW, "q", KEY), queue="q", enqueued_at_ms=NOW)
    grouped = spec.model_copy(update={"group": "t1"})
    assert seal.spec_message(grouped) == seal.spec_message(spec) + b"\ngt1"
    sealed = seal.seal_spec(grouped, KEY)
    assert seal.verify_spec(sealed, [KEY])
    # A grouped record's seal does not verify the same record without its group, nor the other way.
    assert not seal.verify_spec(sealed.model_copy(update={"group": None}), [KEY])
    assert not seal.verify_spec(seal.seal_spec(spec, KEY).model_copy(update={"group": "t1"}), [KEY])


# --- the relay --------------------------------------------------------------------------------

def _record(spec: JobSpec) -> SourceRecord:
    return SourceRecord(0, 0, spec.job_id.encode(), spec.model_dump_json().encode())


def test_the_relay_decodes_the_group_and_checks_it_against_the_seal() -> None:
    spec = seal.seal_spec(JobSpec(job_id=ids.mint(NOW, "q", KEY), queue="q", payload=1, enqueued_at_ms=NOW,
                                  group="org:42"), KEY)
    found = decode_sealed(_record(spec))
    assert not isinstance(found, str)
    job, sealing = found
    assert job.group == "org:42" and job == DecodedJob.of(spec)
    verifier = ids.Verifier(KEY, [])
    assert check_record(job, sealing, verifier, NOW) is None
    tampered = decode_sealed(_record(spec.model_copy(update={"group": "org:43"})))
    assert not isinstance(tampered, str)
    refused = check_record(*tampered, verifier, NOW)
    assert refused is not None and refused.reason.startswith("seal:")


def test_a_record_with_a_bad_group_is_poison() -> None:
    spec = JobSpec(job_id=ids.mint(NOW, "q", KEY), queue="q", enqueued_at_ms=NOW)
    value = json.loads(spec.model_dump_json())
    value["group"] = "a b"
    found = decode_sealed(SourceRecord(0, 0, spec.job_id.encode(), json.dumps(value).encode()))
    assert isinstance(found, str) and "group" in found


def test_push_args_carry_the_group() -> None:
    from sluice.backends.redis.relay_engine import push_args

    records = [(0, DecodedJob("a", "q", "1", 0, 5, 30_000, 0, 0, "t1")),
               (1, DecodedJob("b", "q", "2", 0, 5, 30_000, 0, 0))]
    [args] = push_args("q", 1, records, horizon=2**52)
    flat = json.loads(args[2])
    assert flat == ["0", "a", "1", "0,5,30000,0", "0", "0", "t1", "",  # then its traceparent ("": none)
                    "1", "b", "2", "0,5,30000,0", "0", "0", "", ""]


# --- the knob ---------------------------------------------------------------------------------

class _Engine:
    def __init__(self) -> None:
        self.changes: list[dict[str, Any]] = []

    def set_config(self, queue: str, **changes: Any) -> QueueConfig:
        self.changes.append(changes)
        return QueueConfig(**changes)

    def get_config(self, queue: str) -> QueueConfig:
        return QueueConfig()


def test_max_in_flight_per_group_is_a_knob() -> None:
    engine = _Engine()
    assert knobs.set_max_in_flight(engine, "q", per_group=3).max_in_flight_per_group == 3
    knobs.set_max_in_flight(engine, "q", 10, 2)
    knobs.set_max_in_flight(engine, "q", 5)
    assert engine.changes == [{"max_in_flight_per_group": 3},
                              {"max_in_flight": 10, "max_in_flight_per_group": 2}, {"max_in_flight": 5}]
    for bad in [(None, None), (None, -1), (None, 1.5), (None, True)]:
        with pytest.raises(InvalidInput):
            knobs.set_max_in_flight(engine, "q", *bad)


def test_the_operator_api_sets_max_in_flight_per_group() -> None:
    from tests.unit.test_gateway_admin import Q
    from tests.unit.test_gateway_admin import Rig as AdminRig

    rig = AdminRig()
    code, _, doc = rig.call("PUT", Q + "/max-in-flight", {"max_in_flight_per_group": 2})
    assert (code, doc["max_in_flight_per_group"], doc["max_in_flight"]) == (200, 2, 0)
    code, _, doc = rig.call("PUT", Q + "/max-in-flight", {"max_in_flight": 9, "max_in_flight_per_group": 3})
    assert (code, doc["max_in_flight_per_group"], doc["max_in_flight"]) == (200, 3, 9)
    assert rig.queue.config["emails"].max_in_flight_per_group == 3
    for bad in [{}, {"max_in_flight_per_group": -1}, {"max_in_flight_per_group": "2"},
                {"max_in_flight_per_group": 2.5}]:
        fresh = AdminRig()
        assert fresh.call("PUT", Q + "/max-in-flight", bad)[0] == 400, bad
        assert fresh.untouched()
