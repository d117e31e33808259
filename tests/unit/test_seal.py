"""Whole-record seals, the life bound and the key window (issue 27, items 4 and 7)."""

from __future__ import annotations

from typing import Any

import pytest

from sluice.core import ids, limits, seal
from sluice.core.models import MAX_DELAY_MS, JobSpec
from sluice.core.seal import life_refusal
from sluice.relay.intake import refusal, unminted
from sluice.relay.ports import SourceRecord
from sluice.relay.records import Sealing, decode_sealed

KEY, OLD, OTHER = b"k" * 32, b"o" * 32, b"x" * 32
NOW = 1_700_000_000_000


def sealed(key: bytes = KEY, **fields: object) -> JobSpec:
    base: dict[str, object] = {"job_id": ids.mint(NOW, "q", key), "queue": "q", "payload": {"a": [1, 2.5]},
                               "priority": 3, "max_attempts": 4, "lease_ms": 30_000,
                               "run_at_ms": NOW + 60_000, "enqueued_at_ms": NOW, "idempotency_key": "k-1"}
    return seal.seal_spec(JobSpec.model_validate({**base, **fields}), key)


def check(spec: JobSpec, now: int = NOW, verifier: ids.Verifier | None = None) -> Any:
    found = decode_sealed(SourceRecord(0, 0, spec.job_id.encode(), spec.model_dump_json().encode()))
    assert not isinstance(found, str)
    job, sealing = found
    keys = verifier or ids.Verifier(KEY, [OLD])
    return unminted(job, keys) or refusal(job, sealing, keys, now)



def test_a_sealed_record_verifies_with_its_key_only() -> None:
    spec = sealed()
    assert spec.schema_version == seal.VERSION and spec.seal is not None
    assert len(spec.seal) == seal.SEAL_LENGTH
    assert seal.verify_spec(spec, [KEY]) and not seal.verify_spec(spec, [OTHER])
    assert check(spec) is None
    assert check(sealed(OLD), verifier=ids.Verifier(KEY, [OLD])) is None  # the previous key still verifies


@pytest.mark.parametrize("change", [
    {"payload": {"a": [1, 2.5], "evil": True}}, {"priority": 9}, {"max_attempts": 100},
    {"lease_ms": 43_200_000},
    {"run_at_ms": 0}, {"enqueued_at_ms": NOW + 1}, {"idempotency_key": None}, {"queue": "other"},
])
def test_a_record_with_a_valid_id_but_any_field_altered_is_refused(change: dict[str, object]) -> None:
    tampered = sealed().model_copy(update=change)
    why = check(tampered)
    assert why is not None
    if "queue" in change:  # the id names another queue: not ours for this record
        assert isinstance(why, str) and why.startswith("unminted")
    else:
        assert not isinstance(why, str) and why.reason.startswith("seal:") and why.record_dead


def test_a_record_of_the_previous_format_is_refused_and_its_job_ends_dead() -> None:
    old = JobSpec(job_id=ids.mint(NOW, "q", KEY), queue="q", payload=1, enqueued_at_ms=NOW)
    why = check(old)
    assert not isinstance(why, str) and why is not None
    assert why.reason.startswith("unsealed") and why.record_dead


def test_a_seal_is_not_an_id_mac_and_a_forged_seal_fails() -> None:
    spec = sealed()
    assert spec.seal is not None
    forged = spec.model_copy(update={"seal": spec.seal[:-1] + ("A" if spec.seal[-1] != "A" else "B")})
    assert not seal.verify_spec(forged, [KEY])
    assert not seal.verify_spec(spec.model_copy(update={"seal": "\u00e9" * seal.SEAL_LENGTH}), [KEY])
    assert not seal.verify_spec(spec.model_copy(update={"seal": None}), [KEY])
    assert seal.record_key(KEY) != KEY


def test_keyless_ids_are_trusted_through_the_seal_only_and_never_end_a_job_when_it_fails() -> None:
    firing = ids.keyless(NOW, "q", b"\x01" * 10, b"q\x00nightly\x00" + str(NOW).encode())
    assert ids.is_keyless(firing) and ids.verify(firing, KEY) is None
    assert check(sealed(job_id=firing)) is None
    why = check(sealed(job_id=firing).model_copy(update={"priority": 9}))
    assert why is not None and not isinstance(why, str) and not why.record_dead  # anyone can name one
    assert isinstance(check(sealed(OTHER, job_id=firing)), type(why))
    wrong_queue = ids.keyless(NOW, "other", b"\x01" * 10, b"x")
    assert str(check(sealed(job_id=wrong_queue))).startswith("unminted")


def test_the_life_bound_is_one_constant_and_the_relay_refuses_past_it() -> None:
    assert limits.JOB_LIFE_MS == MAX_DELAY_MS + limits.MAX_HOLD_MS + limits.LIFE_MARGIN_MS == 14 * 86_400_000
    hold = limits.MAX_HOLD_MS + limits.LIFE_MARGIN_MS
    assert life_refusal(NOW, 0, NOW + hold) is None
    assert str(life_refusal(NOW, 0, NOW + hold + 1)).startswith("expired")
    week = MAX_DELAY_MS
    assert life_refusal(NOW, NOW + week, NOW + week + hold) is None  # a week's delay, then the hold
    assert life_refusal(NOW, NOW + week, NOW + week + hold + 1) is not None
    assert life_refusal(NOW, NOW + week + limits.CLOCK_MARGIN_MS + 1, NOW) is not None  # a longer delay
    assert life_refusal(NOW + limits.CLOCK_MARGIN_MS + 1, 0, NOW) is not None  # sealed in the future
    why = check(sealed(run_at_ms=0), now=NOW + limits.JOB_LIFE_MS)
    assert why is not None and not isinstance(why, str)
    assert why.reason.startswith("expired") and why.record_dead


def test_the_key_window_and_retentions_honour_the_life_bound() -> None:
    assert limits.life_bound_problems(336, 14) == []
    assert limits.life_bound_problems(720, 365) == []
    assert any("KafkaRetentionHours 168" in p for p in limits.life_bound_problems(168, 14))
    assert any("beyond the job id key window" in p for p in limits.life_bound_problems(8760, 14))
    assert any("RetentionDays 7" in p for p in limits.life_bound_problems(336, 7))
    assert any("key window" in p for p in limits.life_bound_problems(336, 14, rotation_days=7))
    assert limits.KEY_WINDOW_MS >= limits.JOB_LIFE_MS


def test_a_seal_names_its_key_and_an_unknown_key_id_rereads_the_keys_once() -> None:
    reads: list[int] = []
    now = [0]

    def refresh() -> tuple[bytes, list[bytes]]:
        reads.append(1)
        return OTHER, [KEY]

    verifier = ids.Verifier(KEY, [], refresh=refresh, clock=lambda: now[0])
    now[0] = 120_000
    assert verifier.keys_for(ids.key_id(OTHER)) == (OTHER,) and len(reads) == 1
    assert verifier.keys_for(ids.KEYLESS_TAG) == () and len(reads) == 1  # never a key id: no re-read


def test_sealing_fields_come_from_the_record() -> None:
    spec = sealed()
    found = decode_sealed(SourceRecord(0, 0, None, spec.model_dump_json().encode()))
    assert not isinstance(found, str)
    assert found[1] == Sealing(2, spec.seal, "k-1")


def test_check_record_takes_the_seal_first_and_asks_the_id_only_to_decide_a_refusal() -> None:
    from sluice.relay.intake import check_record

    verifier = ids.Verifier(KEY, [OLD])

    def run(spec: JobSpec, now: int = NOW) -> Any:
        found = decode_sealed(SourceRecord(0, 0, None, spec.model_dump_json().encode()))
        assert not isinstance(found, str)
        return check_record(*found, verifier, now)

    assert run(sealed()) is None and run(sealed(OLD)) is None
    altered = run(sealed().model_copy(update={"priority": 9}))
    assert altered.reason.startswith("seal:") and altered.record_dead and not altered.genuine
    stranger = run(sealed(OTHER, job_id=ids.mint(NOW, "q", OTHER)))  # not our id, not our seal
    assert stranger.reason.startswith("unminted") and not stranger.record_dead
    firing = ids.keyless(NOW, "q", b"\x02" * 10, b"x")
    assert run(sealed(job_id=firing)) is None
    forged_firing = run(sealed(OTHER, job_id=firing))
    assert forged_firing.reason.startswith("seal:") and not forged_firing.record_dead
    old = run(sealed(run_at_ms=0), now=NOW + limits.JOB_LIFE_MS)
    assert old.reason.startswith("expired") and old.record_dead and old.genuine


def test_an_unsealed_record_is_trusted_only_as_its_own_id_minted_before_the_upgrade() -> None:
    """A continuation's record stored by a gateway from before seals (format 1; issue 29 item 9)."""
    job_id = ids.mint(NOW - 1_000, "q", KEY)
    old = JobSpec(job_id=job_id, queue="q", payload=1)  # schema_version 1, no seal
    minted = ids.verify(job_id, KEY)
    assert old.schema_version == 1 and seal.unsealed_before_upgrade(old, job_id, minted, NOW)
    assert not seal.unsealed_before_upgrade(old, job_id, minted, 0)  # no upgrade named: none
    assert not seal.unsealed_before_upgrade(old, job_id, minted, NOW - 1_000)  # minted at the upgrade
    assert not seal.unsealed_before_upgrade(old, job_id, None, NOW)  # an id this deployment never minted
    assert not seal.unsealed_before_upgrade(old, ids.mint(NOW - 1_000, "q", KEY), minted, NOW)  # another id
    assert not seal.unsealed_before_upgrade(old.model_copy(update={"queue": "r"}), job_id, minted, NOW)
    assert not seal.unsealed_before_upgrade(old.model_copy(update={"schema_version": seal.VERSION}), job_id,
                                            minted, NOW)  # today's format must carry its seal


def test_a_seal_is_the_documented_hmac_whatever_key_sealed_before() -> None:
    """Session 35: ``_mac`` copies an HMAC keyed once per key instead of keying one per record. A
    seal is still HMAC-SHA256 of the message with the derived record key, its first 128 bits in
    hex, so records sealed by a gateway of before (in Kafka, or stored for a continuation) verify;
    and each key keeps its own keyed state, in any order of use."""
    import hashlib
    import hmac

    for key in (KEY, OLD, OTHER, KEY, OTHER):
        spec = sealed(key)
        record_key = hmac.new(key, b"sluice record seal key\x00", hashlib.sha256).digest()
        signed = seal.spec_message(spec)
        assert spec.seal == ids.key_id(key) + hmac.new(record_key, signed, hashlib.sha256).hexdigest()[:32]
        assert seal.verify(spec.seal, signed, [key])
        assert not seal.verify(spec.seal, signed + b"x", [key])
