"""The event bus: synchronous, ordered, typed; a failing observer never breaks the emitter."""

from __future__ import annotations

import dataclasses

import pytest

from sluice.core import bus as ev
from sluice.core.errors import JobCancelled, LeaseLost, SluiceError, StaleToken


def acked(job: str = "j") -> ev.Acked:
    return ev.Acked(job=job, queue="q", lease=1, outcome="ok", t0=0.0)


def test_delivery_is_synchronous_in_subscription_order_and_by_type() -> None:
    bus = ev.EventBus()
    seen: list[tuple[str, str]] = []
    bus.subscribe(lambda e: seen.append(("all", type(e).__name__)))
    bus.subscribe(lambda e: seen.append(("acks", e.job)), ev.Acked)
    bus.subscribe(lambda e: seen.append(("calls", type(e).__name__)), ev.CallEnded)
    bus.emit(acked("a"))
    bus.emit(ev.Leased(job="b", queue="q", lease=1, attempt=1))
    assert seen == [("all", "Acked"), ("acks", "a"), ("calls", "Acked"), ("all", "Leased")]


def test_unsubscribe_and_listening() -> None:
    bus = ev.EventBus()
    assert not bus.listening
    seen: list[ev.Event] = []
    off = bus.subscribe(seen.append)
    assert bus.listening
    off()
    bus.emit(acked())
    assert seen == [] and not bus.listening


def test_a_failing_subscriber_is_logged_and_the_others_still_run(caplog: pytest.LogCaptureFixture) -> None:
    bus = ev.EventBus()
    seen: list[ev.Event] = []

    def broken(_e: ev.Event) -> None:
        raise RuntimeError("observer bug")

    bus.subscribe(broken)
    bus.subscribe(seen.append)
    bus.emit(acked())
    assert len(seen) == 1
    assert "observer bug" in caplog.text


def test_a_base_exception_is_not_swallowed() -> None:
    bus = ev.EventBus()

    def stop(_e: ev.Event) -> None:
        raise SystemExit(3)

    bus.subscribe(stop)
    with pytest.raises(SystemExit):
        bus.emit(acked())


def test_events_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        acked().job = "other"  # type: ignore[misc]


def test_outcome_words() -> None:
    assert ev.outcome_of(StaleToken("x", mine=1, current=2)) == "rejected"
    assert ev.outcome_of(JobCancelled("x")) == "cancelled"
    assert ev.outcome_of(LeaseLost("x")) == "lost"
    assert ev.outcome_of(SluiceError("x")) == "error"


def every_event() -> list[type[ev.Event]]:
    return [cls for cls in vars(ev).values() if isinstance(cls, type) and issubclass(cls, ev.Event)]


def test_every_event_is_a_frozen_slotted_keyword_only_dataclass_without_its_own_decorator() -> None:
    assert len(every_event()) > 40
    for cls in every_event():
        params = cls.__dataclass_params__  # type: ignore[attr-defined]
        assert params.frozen and params.eq and "__slots__" in vars(cls), cls
        assert all(f.kw_only for f in dataclasses.fields(cls)), cls
    with pytest.raises(TypeError):
        ev.Leased("j", "q", 1, 1)  # type: ignore[call-arg, arg-type]


def test_a_subclass_adds_its_fields_after_its_bases_and_keeps_equality_and_pickling() -> None:
    import pickle

    class Probed(ev.LeaseCall):  # an observer's own event, declared as the catalogue's are
        probe: str = "p"

    assert [f.name for f in dataclasses.fields(Probed)] == \
        ["at", "outcome", "t0", "error", "job", "queue", "lease", "probe"]
    refused = ev.ResultRefused(job="j", token=3, current=4, outcome="rejected", t0=1.0, at=2.0)
    assert [f.name for f in dataclasses.fields(refused)] == \
        ["at", "outcome", "t0", "error", "job", "token", "current", "result"]
    assert pickle.loads(pickle.dumps(refused)) == refused and acked() != acked("k")


def test_the_calls_on_a_lease_and_under_a_token_share_their_fields() -> None:
    assert all(issubclass(c, ev.LeaseCall) for c in (ev.Acked, ev.FailReported, ev.Released, ev.Renewed))
    assert all(issubclass(c, ev.TokenCall) for c in (ev.ResultWritten, ev.ResultRefused, ev.FencedWrite,
                                                     ev.FailureRecorded, ev.GrantReleased))


def test_an_event_class_is_made_at_its_first_use_and_a_redeclared_field_keeps_its_slot() -> None:
    """Issue 30 item 3: an event class's dataclass methods are made at its first use (an import
    makes none: tests/tooling/test_cold_imports.py), its bases first; a field a subclass declares
    again with a new default is still its base's slot."""

    class Later(ev.Renewed):
        deadline_ms: int | None = 7
        note: str = ""

    class Sub(Later):
        more: int = 1

    assert Later in ev._UNMADE and Sub in ev._UNMADE
    assert [f.name for f in dataclasses.fields(Sub)][-3:] == ["deadline_ms", "note", "more"]
    assert Later not in ev._UNMADE and Sub not in ev._UNMADE
    assert Later.__slots__ == ("note",)  # type: ignore[attr-defined]
    e = Later(job="j", queue="q", lease=1, outcome="ok", t0=1.0, at=2.0)
    assert (e.deadline_ms, e.note) == (7, "") and not hasattr(e, "__dict__")
    assert [f.name for f in dataclasses.fields(Later)][-2:] == ["deadline_ms", "note"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.note = "x"  # type: ignore[misc]
