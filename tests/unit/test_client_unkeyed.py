"""Issue 14: ``sluice.Client`` enqueues without an Idempotency-Key when the caller asks (keyed=False),
and then never retries a request whose outcome is unknown (a retry could make a second job)."""

from __future__ import annotations

import pytest

from sluice.client import HttpResponse
from sluice.core.errors import BackendUnavailable, InvalidInput
from tests.unit.test_client import ACCEPTED, JOB, FakeTransport, client, ok, problem


def test_keyed_false_sends_no_idempotency_key() -> None:
    t = FakeTransport(ok(ACCEPTED, 202), ok({"queue": "emails", "jobs": [ACCEPTED]}, 202))
    c, _ = client(t)
    assert c.enqueue("emails", {"to": "ada"}, keyed=False).job_id == JOB
    c.enqueue_batch("emails", [{"payload": 1}], keyed=False)
    assert all("Idempotency-Key" not in sent[2] for sent in t.sent)


def test_a_throttled_unkeyed_request_is_retried_as_nothing_was_accepted() -> None:
    t = FakeTransport(problem(429, "THROTTLED"), ok(ACCEPTED, 202))
    c, sleeps = client(t)
    assert c.enqueue("emails", 1, keyed=False).job_id == JOB
    assert len(t.sent) == 2 and len(sleeps) == 1


@pytest.mark.parametrize("failure", [problem(503, "UNAVAILABLE"), problem(502, "BAD_GATEWAY"),
                                     problem(504, "TIMEOUT"), ConnectionResetError("reset"),
                                     TimeoutError("read timed out")])
def test_an_unkeyed_request_with_an_unknown_outcome_is_not_retried(failure: HttpResponse | OSError) -> None:
    t = FakeTransport(failure, ok(ACCEPTED, 202))
    c, sleeps = client(t)
    with pytest.raises(BackendUnavailable):
        c.enqueue("emails", 1, keyed=False)
    assert len(t.sent) == 1 and sleeps == []


def test_a_key_and_keyed_false_together_are_refused_before_sending() -> None:
    t = FakeTransport()
    c, _ = client(t)
    with pytest.raises(InvalidInput, match="keyed=False"):
        c.enqueue("emails", 1, idempotency_key="k", keyed=False)
    assert t.sent == []
