"""Issue 18: the relay decodes each record once, into a ``DecodedJob``, without a model per record.

``decode_job`` must accept exactly what the ``JobSpec`` model (``decode``) accepts, give the
same job, and give a poison record the model's own reason. Hostile values included.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.backends.redis import relay_engine as engine_mod
from sluice.core.bus import EventBus
from sluice.core.models import DecodedJob, JobSpec
from sluice.relay import SourceRecord, decode, decode_job
from sluice_dev.fakes import RELAY_CALLS, FakeClock, FakeEngine, FakeSource, FakeStore


def reference(record: SourceRecord) -> DecodedJob | str:
    spec = decode(record)
    return spec if isinstance(spec, str) else DecodedJob.of(spec)


def good(**changes: Any) -> dict[str, Any]:
    return {"schema_version": 1, "job_id": "a1", "queue": "q", "payload": {"b": [1, 2.5, None], "a": "é"},
            "priority": 3, "max_attempts": 7, "lease_ms": 45_000, "run_at_ms": 5, "enqueued_at_ms": 9,
            "idempotency_key": "k"} | changes


HOSTILE: list[tuple[bytes | None, bytes | None]] = [
    (None, None),
    (None, b""),
    (None, b"\xff\xfe not json"),
    (None, b"[1,2]"),
    (None, b"null"),
    (None, b'"a string"'),
    (None, b"[" * 100_000 + b"]" * 100_000),
    (None, b'{"payload": ' + b"[" * 5000 + b"]" * 5000 + b', "job_id": "a", "queue": "q"}'),
    (None, b'{"job_id":"a","queue":"q","payload":"\\ud800"}'),  # a lone surrogate
    (None, b'{"job_id":"a","queue":"q","payload":NaN}'),
    (None, b'{"job_id":"a","queue":"q","payload":[Infinity]}'),
    (None, b'{"job_id":"a","queue":"q","payload":1e400}'),
    (None, b'{"job_id":"a","queue":"q","job_id":"b"}'),  # a repeated key: the last one counts
    (None, b'{"job_id":"a","queue":"q","payload":123456789012345678901234567890}'),
    (None, b'\xef\xbb\xbf{"job_id":"a","queue":"q"}'),  # a byte order mark
    (None, json.dumps(good()).encode("utf-16")),
    (b"a1", json.dumps(good()).encode()),
    (b"other", json.dumps(good()).encode()),
    (None, json.dumps(good(queue="sluice-relay")).encode()),
    (None, json.dumps(good(queue="NOT A QUEUE")).encode()),
    (None, json.dumps(good(job_id="bad id")).encode()),
    (None, json.dumps(good(job_id="x" * 129)).encode()),
    (None, json.dumps(good(schema_version=2)).encode()),
    (None, json.dumps(good(schema_version=1.0)).encode()),
    (None, json.dumps(good(schema_version=True)).encode()),
    (None, json.dumps(good(schema_version="1")).encode()),
    (None, json.dumps(good(priority=10)).encode()),
    (None, json.dumps(good(priority=True)).encode()),
    (None, json.dumps(good(priority=1.0)).encode()),
    (None, json.dumps(good(priority="1")).encode()),
    (None, json.dumps(good(max_attempts=0)).encode()),
    (None, json.dumps(good(lease_ms=9)).encode()),
    (None, json.dumps(good(lease_ms=10**12)).encode()),
    (None, json.dumps(good(run_at_ms=-1)).encode()),
    (None, json.dumps(good(enqueued_at_ms=-5)).encode()),
    (None, json.dumps(good(idempotency_key=5)).encode()),
    (None, json.dumps(good(extra="field")).encode()),
    (None, json.dumps({"job_id": "a", "queue": "q"}).encode()),  # every default
    (None, json.dumps({"queue": "q"}).encode()),
    (None, json.dumps({"job_id": "a"}).encode()),
]


@pytest.mark.parametrize(("key", "value"), HOSTILE)
def test_decode_job_agrees_with_the_model_on_hostile_records(key: bytes | None, value: bytes | None) -> None:
    record = SourceRecord(0, 0, key, value)
    assert decode_job(record) == reference(record)


def test_decode_job_is_the_model_s_job_with_its_payload_canonical() -> None:
    spec = JobSpec(**good())
    job = decode_job(SourceRecord(0, 0, b"a1", spec.model_dump_json().encode()))
    assert job == DecodedJob("a1", "q", '{"a":"é","b":[1,2.5,null]}', 3, 7, 45_000, 5, 9)
    assert decode_job(SourceRecord(0, 0, None, b'{"job_id":"a","queue":"q"}')) == DecodedJob(
        "a", "q", "null", 0, 5, 30_000, 0, 0)


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                                  max_size=3), max_leaves=8)
_field_values = st.one_of(_json, st.sampled_from([0, 1, 2, 9, 10, 100, 101, 30_000, "q", "a1", "sluice-x"]))
_fields = st.sampled_from(["schema_version", "job_id", "queue", "payload", "priority", "max_attempts",
                           "lease_ms", "run_at_ms", "enqueued_at_ms", "idempotency_key", "other"])


@settings(max_examples=400, deadline=None)
@given(changes=st.dictionaries(_fields, _field_values, max_size=4), drop=st.lists(_fields, max_size=2),
       key=st.sampled_from([None, b"a1", b"q"]))
def test_decode_job_agrees_with_the_model_on_mutated_records(changes: dict[str, Any], drop: list[str],
                                                             key: bytes | None) -> None:
    doc = good(**changes)
    for name in drop:
        doc.pop(name, None)
    record = SourceRecord(0, 0, key, json.dumps(doc, allow_nan=True).encode())
    assert decode_job(record) == reference(record)


def test_the_relay_makes_canonical_json_of_a_payload_once_per_record(monkeypatch: pytest.MonkeyPatch) -> None:
    """Today's count on the relay's side: one ``dump_json`` per record, in ``decode_job``; the
    engine's push arguments take the decoded payload as it is (before: two, and a third check
    of the model's fields in the engine)."""
    from sluice.core import models
    from sluice.relay import Relay, RelayConfig

    calls = 0
    real = models.dump_json

    def counted(value: Any) -> str:
        nonlocal calls
        calls += isinstance(value, dict) and set(value) == {"n"}  # the records' payloads only
        return real(value)

    clock = FakeClock()
    source = FakeSource(n_partitions=1, clock=clock)
    for i in range(50):
        source.append_spec(0, JobSpec(job_id=f"j{i}", queue="q", payload={"n": i}))
    engine = FakeEngine(clock)
    relay = Relay(engine, FakeStore(only=RELAY_CALLS), source, None,  # type: ignore[arg-type]
                  relay_id="r", clock=clock, config=RelayConfig(poll_ms=10, commit_s=0), events=EventBus())
    monkeypatch.setattr("sluice.relay.records.dump_json", counted)
    monkeypatch.setattr("sluice.core.models.dump_json", counted)
    monkeypatch.setattr("sluice.backends.redis.checks.dump_json", counted)
    for _ in range(4):
        relay.step()
    assert len(engine.jobs["q"]) == 50
    assert calls == 50
    jobs = [(offset, job) for offset, job in enumerate(engine.jobs["q"].values())]
    [args] = engine_mod.push_args("q", 1, jobs, horizon=2**52)
    assert calls == 50  # push.lua's arguments carry the decoded payload as it is
    assert args[:2] == [1, 50] and json.loads(args[2])[:5] == ["0", "j0", '{"n":0}', "0,5,30000,0", "0"]


@settings(max_examples=300, deadline=None)
@given(value=_json)
def test_dump_json_is_the_canonical_encoder_s_text(value: Any) -> None:
    """``dump_json`` reuses one C encoder (issue 18: half of a small payload's cost was building
    one per call); its text and its refusals are ``json.dumps``'s with the canonical options."""
    from sluice.core.errors import InvalidInput
    from sluice.core.models import dump_json

    try:
        expected = json.dumps(value, separators=(",", ":"), sort_keys=True, allow_nan=False,
                              ensure_ascii=False)
    except ValueError:  # NaN or Infinity somewhere
        with pytest.raises(InvalidInput, match="not JSON-serialisable"):
            dump_json(value)
        return
    assert dump_json(value) == expected


def test_dump_json_refuses_what_is_not_json_with_invalid_input() -> None:
    from sluice.core.errors import InvalidInput
    from sluice.core.models import dump_json

    circular: list[Any] = []
    circular.append(circular)
    for bad in (float("nan"), {"a": object()}, {(1,): 2}, circular, {"a": -float("inf")}, {1: 2, "x": 1}):
        with pytest.raises(InvalidInput, match="not JSON-serialisable"):
            dump_json(bad)
    assert dump_json("x\n") == '"x\\n"' and dump_json({"b": 1, "a": "é"}) == '{"a":"é","b":1}'


def test_intake_takes_records_of_interleaved_partitions_and_skips_redeliveries() -> None:
    """``Intake.take`` reads a partition's state once per run of its records (issue 18); records
    in any order, a re-delivery, a partition it does not own and a poison record still land
    where they did record by record."""
    import time

    from sluice.relay.config import RelayConfig
    from sluice.relay.hooks import RelayHooks
    from sluice.relay.intake import Intake
    from sluice.relay.state import OwnedPartition, RelayReport

    class Owned:
        owned = {p: OwnedPartition(p, f"j{p}", 1, 0.0) for p in (0, 1)}

    class Source:
        topic = "t"
        letters: list[tuple[int, int, str]] = []

        def dead_letter(self, record: SourceRecord, reason: str) -> None:
            self.letters.append((record.partition, record.offset, reason))

    def rec(p: int, off: int, q: str = "q") -> SourceRecord:
        return SourceRecord(p, off, None, JobSpec(job_id=f"p{p}o{off}", queue=q).model_dump_json().encode())

    seen: list[int] = []

    class Hooks(RelayHooks):
        def on_records(self, decoded: Any) -> None:
            seen.extend(r.offset for r, _ in decoded)

    owned, source = Owned(), Source()
    intake = Intake(None, source, RelayConfig(), owned, report=RelayReport(),  # type: ignore[arg-type]
                    hooks=Hooks(), monotonic=time.monotonic, events=EventBus())
    intake._admitted.update({"q", "r"})
    intake.take([rec(0, 5), rec(1, 7), rec(0, 6, "r"), rec(2, 1), SourceRecord(1, 8, None, b"junk"),
                 rec(1, 9), rec(0, 6)])  # the last one re-delivered
    intake.take([rec(0, 6), rec(0, 7), rec(1, 9), rec(1, 10)])
    p0, p1 = Owned.owned[0], Owned.owned[1]
    assert (p0.committed, p0.next_offset, p0.pending_count) == (5, 8, 3)
    assert (p1.committed, p1.next_offset, p1.pending_count) == (7, 11, 3)
    assert [o for o, _ in p0.pending["q"]] == [5, 7] and [o for o, _ in p0.pending["r"]] == [6]
    assert [o for o, _ in p1.pending["q"]] == [7, 9, 10]
    assert [(p, o) for p, o, _ in source.letters] == [(1, 8)] and p1.dead_since_commit
    assert seen == [5, 7, 6, 8, 9, 7, 10]
