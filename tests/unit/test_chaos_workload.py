"""The chaos workload: every payload once, a deterministic answer, unknown enqueues retried under new ids."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from sluice.core.errors import BackendUnavailable
from sluice_dev.chaos import history
from sluice_dev.chaos.agents import expected_result
from sluice_dev.chaos.workload import Enqueuer, payload


class FakeApi:
    """The gateway use case's enqueue_batch, failing the first ``failures`` calls as Kafka would."""

    def __init__(self, failures: int) -> None:
        self.new_id: Any = None
        self.failures = failures
        self.ids: list[list[str]] = []

    def enqueue_batch(self, queue: str, request: Any) -> None:
        ids = [self.new_id(0) for _ in request.jobs]
        self.ids.append(ids)
        if self.failures:
            self.failures -= 1
            raise BackendUnavailable("kafka did not acknowledge")


def test_every_index_is_enqueued_once_accepted_and_unknown_outcomes_are_named(tmp_path: Path) -> None:
    api = FakeApi(failures=1)
    h = history.History(tmp_path / "h.jsonl")
    enqueuer = Enqueuer(api, h, seed=3, jobs=25, window_s=0.0, batch=10)
    enqueuer.run(threading.Event())
    events = [e for e in history.read(tmp_path / "h.jsonl") if e["op"] == "enqueue"]
    unknown = [e for e in events if e["outcome"] == "info"]
    accepted = [e for e in events if e["outcome"] == "ok"]
    assert [e["job"] for e in unknown] == [f"s3-{i:06d}-0" for i in range(10)]
    assert sorted(e["i"] for e in accepted) == list(range(25))
    assert {e["job"] for e in accepted} >= {f"s3-{i:06d}-1" for i in range(10)}  # retried, new ids
    assert (enqueuer.accepted, enqueuer.unknown) == (25, 10) and enqueuer.done.is_set()
    for e in accepted:
        assert e["expect"] == history.digest(expected_result(payload(3, e["i"])))


def test_payloads_depend_on_seed_and_index_only() -> None:
    assert payload(1, 5) == payload(1, 5) != payload(2, 5)
    assert payload(1, 5) != payload(1, 6)
    assert 0 <= payload(1, 5)["work_ms"] <= 30


def test_with_a_mint_key_the_ids_are_the_gateway_s_own_so_its_cancel_path_knows_them(tmp_path: Path) -> None:
    from sluice.core import ids

    key = b"k" * 32
    api = FakeApi(failures=0)
    enqueuer = Enqueuer(api, history.History(tmp_path / "h.jsonl"), seed=3, jobs=20, window_s=0.0, batch=10,
                        poison=True, mint_key=key)
    enqueuer.run(threading.Event())
    events = [e for e in history.read(tmp_path / "h.jsonl") if e["op"] == "enqueue"]
    assert len({e["job"] for e in events}) == 20
    for e in events:
        minted = ids.verify(e["job"], key)
        assert minted is not None and minted.queue == "chaos"
    assert enqueuer.recent() == [e["job"] for e in events][-20:]


def test_poison_jobs_are_a_seeded_few_and_only_when_asked_for() -> None:
    poisoned = [i for i in range(2000) if payload(5, i, poison=True).get("poison")]
    assert 20 <= len(poisoned) <= 110  # about 3 %
    assert poisoned == [i for i in range(2000) if payload(5, i, poison=True).get("poison")]
    assert not any(payload(5, i).get("poison") for i in range(2000))
    clean = payload(5, poisoned[0], poison=True)
    del clean["poison"]
    assert clean == payload(5, poisoned[0])  # the rest of the payload is the same job's


def test_keyed_batches_keep_their_ids_across_a_gateway_that_dies_before_or_after_its_append(
        tmp_path: Path) -> None:
    """``--keyed`` (issue 33): the real use case over fakes; a death leaves the key's record and withdraws
    nothing; the retry with the same key names the same ids, so each job is named once, and appended."""
    from sluice.core.bus import EventBus
    from sluice.gateway.api import Api, Backends, IdMinting
    from sluice_dev.chaos.keyed import Deaths, DyingLog, HeldRelease
    from sluice_dev.fakes import FakeKeyStore, FakeLog, FakeStore

    h = history.History(tmp_path / "h.jsonl")
    deaths = Deaths(seed=5, history=h)
    log, store, keys = FakeLog(), FakeStore(), FakeKeyStore()
    api = Api(Backends(DyingLog(log, deaths), store, None, events=EventBus()),  # type: ignore[arg-type]
              IdMinting(b"k" * 32), idempotency=HeldRelease(keys, deaths))
    plan = iter(["before", "after", None])

    def arm(batch: int) -> None:  # batch 0 dies before its append, batch 10 after it
        deaths.armed = next(plan)

    deaths.arm = arm  # type: ignore[method-assign]
    enqueuer = Enqueuer(api, h, seed=5, jobs=30, window_s=0.0, batch=10, keyed=True, deaths=deaths)
    enqueuer.run(threading.Event())
    events = [e for e in history.read(tmp_path / "h.jsonl") if e["op"] == "enqueue"]
    unknown = [e["job"] for e in events if e["outcome"] == "info"]
    accepted = {e["job"]: e["i"] for e in events if e["outcome"] == "ok"}
    assert len(unknown) == 20 and set(unknown) <= set(accepted)  # named before, answered the same after
    assert sorted(accepted.values()) == list(range(30)) and enqueuer.accepted == 30
    appended = [r.job_id for r in log.records]
    assert set(appended) == set(accepted) and len(appended) == 40  # batch 10's appended twice
    assert store.unrecorded == [] and deaths.count == 2
