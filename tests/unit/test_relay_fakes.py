"""Tests of the fakes the relay's tests run on (``sluice_dev.fakes``)."""

from __future__ import annotations

import pytest


def test_the_one_fake_store_refuses_calls_outside_its_callers_set() -> None:
    from sluice_dev.fakes import RELAY_CALLS, FakeStore

    store = FakeStore(only=RELAY_CALLS)
    store.mark_queued([("j", "q", 0)])
    assert store.final_job_ids(["j"]) == set() and store.queued == [("j", "q", 0)]
    with pytest.raises(AssertionError, match=r"should not call store\.grant"):
        store.grant("j", "q", "w")
