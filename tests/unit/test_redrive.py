"""sluice.gateway.redrive: the jobs table first (a generation), then the job's record in Kafka again, then
Redis with the generation; refusals reported."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from sluice.core.errors import AlreadyFinished, BackendUnavailable, InvalidInput, JobNotFound, RedriveRaced
from sluice.core.models import JobSpec
from sluice.gateway.redrive import redrive_all, redrive_one
from sluice_dev.fakes import FakeLog, FakeQueue, FakeStore, QJob


class Calls:
    def __init__(self) -> None:
        self.log: list[tuple[Any, ...]] = []


class Store(FakeStore):
    """The jobs table, its redrives recorded in ``calls``; ``refuse`` maps a job id to its refusal."""

    def __init__(self, calls: Calls, refuse: dict[str, Exception] | None = None) -> None:
        super().__init__()
        self.calls = calls
        self.refuse_redrive.update(refuse or {})

    def redrive(self, job_id: str) -> int:
        self.calls.log.append(("store", job_id))
        return super().redrive(job_id)


class Queue(FakeQueue):
    """Redis: ``dead`` jobs of one queue, each with the payload {"n": 1}; its redrives recorded in
    ``calls``."""

    def __init__(self, calls: Calls, dead: list[str], queue: str = "q") -> None:
        super().__init__()
        self.calls, self.name = calls, queue
        for job_id in dead:  # built unvalidated: the bad-input cases hold names no spec may carry
            spec = JobSpec.model_construct(job_id=job_id, queue=queue, payload={"n": 1})
            self.jobs[(queue, job_id)] = QJob(spec, state="dead")

    @property
    def dead(self) -> list[str]:  # type: ignore[override]  # the one queue's dead ids
        return super().dead.get(self.name, [])

    def redrive(self, queue: str, job_id: str | None = None, generation: int = 0) -> int:
        self.calls.log.append(("redis", job_id, generation))
        return super().redrive(queue, job_id, generation)


class Log(FakeLog):
    """Kafka: records the specs appended; ``down`` makes the append fail as the broker would."""

    def __init__(self, calls: Calls, *, down: bool = False) -> None:
        super().__init__()
        self.calls = calls
        if down:
            self.fail = BackendUnavailable("kafka did not acknowledge")

    def append(self, specs: Sequence[JobSpec]) -> None:
        super().append(specs)
        self.calls.log.extend(("kafka", s.job_id, s.queue, s.payload) for s in specs)


def test_one_redrive_asks_the_store_first_appends_the_record_and_hands_redis_its_generation() -> None:
    calls = Calls()
    store, queue = Store(calls), Queue(calls, ["a"])
    assert redrive_one(queue, store, "q", "a", log=Log(calls)) == 1  # type: ignore[arg-type]
    assert calls.log == [("store", "a"), ("kafka", "a", "q", {"n": 1}), ("redis", "a", 1)]


def test_a_redrive_kafka_did_not_take_leaves_the_job_dead() -> None:
    """The record must be in the log before Redis moves the job: otherwise a Redis loss after the
    move could take the redrive with it (docs/redis-loss.md, "Redriven jobs")."""
    calls = Calls()
    queue = Queue(calls, ["a"])
    with pytest.raises(BackendUnavailable):
        redrive_one(queue, Store(calls), "q", "a", log=Log(calls, down=True))  # type: ignore[arg-type]
    assert calls.log == [("store", "a")] and queue.dead == ["a"]


def test_a_job_that_is_not_dead_is_refused_before_a_generation_is_minted() -> None:
    calls = Calls()
    with pytest.raises(JobNotFound):
        redrive_one(Queue(calls, []), Store(calls), "q", "a", log=Log(calls))  # type: ignore[arg-type]
    assert calls.log == []


def test_a_job_purged_between_the_append_and_the_move_is_reported_raced() -> None:
    """Its record is in Kafka already, so the relay may bring it back: not "not found"."""
    calls = Calls()
    queue = Queue(calls, ["a", "b"])

    class Purging(Log):
        def append(self, specs: Sequence[JobSpec]) -> None:
            super().append(specs)
            del queue.jobs["q", specs[0].job_id]  # an operator purges it, or a trim ends it

    with pytest.raises(RedriveRaced, match="relay brings it back"):
        redrive_one(queue, Store(calls), "q", "a", log=Purging(calls))  # type: ignore[arg-type]
    report = redrive_all(queue, Store(calls), "q", log=Purging(calls))  # type: ignore[arg-type]
    assert report.moved == 0 and "relay brings it back" in report.refused["b"]


def test_without_a_log_only_the_store_and_redis_are_told() -> None:
    calls = Calls()
    assert redrive_one(Queue(calls, ["a"]), Store(calls), "q", "a", log=None) == 1  # type: ignore[arg-type]
    assert calls.log == [("store", "a"), ("redis", "a", 1)]


def test_a_refused_redrive_never_touches_redis() -> None:
    calls = Calls()
    store = Store(calls, {"a": JobNotFound("expired")})
    queue = Queue(calls, ["a"])
    with pytest.raises(JobNotFound):
        redrive_one(queue, store, "q", "a", log=Log(calls))  # type: ignore[arg-type]
    assert calls.log == [("store", "a")] and queue.dead == ["a"]


@pytest.mark.parametrize("queue_name,job_id", [("Bad Queue", "a"), ("q", "a:b"), ("q", "")])
def test_bad_input_is_refused_before_anything_is_written(queue_name: str, job_id: str) -> None:
    calls = Calls()
    with pytest.raises(InvalidInput):
        redrive_one(Queue(calls, [job_id], queue_name), Store(calls), queue_name, job_id, log=Log(calls))  # type: ignore[arg-type]
    assert calls.log == []


def test_redrive_all_moves_what_it_may_and_reports_the_rest() -> None:
    calls = Calls()
    store = Store(calls, {"old": JobNotFound("expired"), "done": AlreadyFinished("succeeded")})
    queue = Queue(calls, ["old", "a", "done", "b"])
    report = redrive_all(queue, store, "q", log=Log(calls))  # type: ignore[arg-type]
    assert report.moved == 2 and set(report.refused) == {"old", "done"}
    assert [c[1] for c in calls.log if c[0] == "kafka"] == ["a", "b"]
    assert queue.dead == ["old", "done"]  # left dead, and the loop ended


def test_redrive_all_goes_on_past_a_dead_job_the_queues_team_wrote_by_hand() -> None:
    """Session 39: a dead job whose stored fields Sluice would not write (its team's Redis user's own:
    a 10 MB payload, a malformed meta) or an id no job has is refused its redrive with InvalidInput.
    Before, that error (a ValueError of the meta's parse) ended the whole queue's redrive there."""
    calls = Calls()

    class Stuffed(Queue):
        def dead_spec(self, queue: str, job_id: str) -> JobSpec:
            if job_id == "stuffed":
                raise InvalidInput("dead job stuffed holds fields longer than Sluice writes them")
            return super().dead_spec(queue, job_id)

    queue = Stuffed(calls, ["a", "stuffed", "b"])
    report = redrive_all(queue, Store(calls), "q", log=Log(calls))  # type: ignore[arg-type]
    assert report.moved == 2 and list(report.refused) == ["stuffed"]
    assert "longer than Sluice writes" in report.refused["stuffed"]
    assert [c[1] for c in calls.log if c[0] == "kafka"] == ["a", "b"] and queue.dead == ["stuffed"]


def test_redrive_all_moves_a_job_that_dies_again_meanwhile_once() -> None:
    """A handler that always fails, on a fast worker: the job is dead again before the call reads the
    dead list again. It was moved twice in a fresh-clone CI (``sluice dlq redrive --all`` said 3 jobs
    back for 2), and nothing stopped it going round for as long as the worker kept up."""
    calls = Calls()

    class Dies(Queue):
        def redrive(self, queue: str, job_id: str | None = None, generation: int = 0) -> int:
            moved = super().redrive(queue, job_id, generation)
            assert job_id is not None
            self.jobs[queue, job_id].state = "dead"  # leased, run and failed again at once
            return moved

    queue = Dies(calls, ["a", "b"])
    report = redrive_all(queue, Store(calls), "q", log=Log(calls))  # type: ignore[arg-type]
    assert report.moved == 2 and report.refused == {}
    assert [c[1] for c in calls.log if c[0] == "redis"] == ["a", "b"] and sorted(queue.dead) == ["a", "b"]
