"""ctx.progress: validated, throttled to one write a second per job (latest wins), fenced."""

from __future__ import annotations

from typing import Any

import pytest

from sluice.core.errors import InvalidInput, StaleToken
from sluice.core.models import MAX_PROGRESS_DETAIL_BYTES, Job
from sluice.worker.runtime.context import JobContext
from sluice.worker.runtime.progress import Progress
from sluice_dev.fakes import Kit, ManualClock, kit


class Writes:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int, float, str]] = []

    def __call__(self, job_id: str, token: int, fraction: float, detail: str) -> None:
        self.calls.append((job_id, token, fraction, detail))


@pytest.mark.parametrize("bad", [-0.1, 1.0001, float("nan"), float("inf"), True, "0.5", None])
def test_a_bad_fraction_is_refused_and_writes_nothing(bad: Any) -> None:
    writes = Writes()
    with pytest.raises(InvalidInput, match="from 0 to 1"):
        Progress(writes, "j", 1).report(bad, "x")
    assert writes.calls == []


def test_an_oversized_detail_is_refused_with_a_clear_error() -> None:
    writes = Writes()
    p = Progress(writes, "j", 1)
    with pytest.raises(InvalidInput, match=f"over the {MAX_PROGRESS_DETAIL_BYTES}-byte limit"):
        p.report(0.5, "é" * (MAX_PROGRESS_DETAIL_BYTES // 2 + 1))  # counted in UTF-8 bytes
    with pytest.raises(InvalidInput, match="must be a string"):
        p.report(0.5, 42)  # type: ignore[arg-type]
    p.report(0.5, "x" * MAX_PROGRESS_DETAIL_BYTES)  # at the limit: fine
    assert len(writes.calls) == 1


def test_throttled_to_one_write_a_second_and_the_latest_wins() -> None:
    clock, writes = ManualClock(0), Writes()
    p = Progress(writes, "j", 3, every_ms=1000, now_ms=clock)
    p.report(0.1, "a")
    clock.advance(300)
    p.report(0.2, "b")
    clock.advance(300)
    p.report(0.3, "c")  # kept: still inside the second
    assert writes.calls == [("j", 3, 0.1, "a")]
    clock.advance(500)
    p.report(0.4, "d")  # the next allowed write carries the latest value
    assert writes.calls[-1] == ("j", 3, 0.4, "d")
    clock.advance(10)
    p.report(0.9, "e")
    p.flush()  # the end: what the throttle kept is written
    p.flush()  # once
    assert writes.calls[-1] == ("j", 3, 0.9, "e") and len(writes.calls) == 3


def _progress_job(k: Kit, handler: Any) -> None:
    k.app.register("q", handler)
    k.queue.add("q", "j")
    k.worker().drain(["q"], 1)


def test_a_handler_reports_progress_and_the_store_keeps_the_latest() -> None:
    k = kit()

    def handler(job: Job, ctx: JobContext) -> str:
        for i in range(1, 11):
            ctx.progress(i / 10, f"resized {i} of 10")
        return "done"

    _progress_job(k, handler)
    it = k.store.item("j")
    assert it["status"] == "succeeded"
    assert (it["progress"], it["progress_detail"]) == (1.0, "resized 10 of 10")  # flushed at the end
    assert 1 <= len(k.store.called("write_progress")) <= 3  # throttled: not ten writes


def test_a_stale_workers_progress_is_refused() -> None:
    k = kit()
    seen: list[Exception] = []

    def handler(job: Job, ctx: JobContext) -> str:
        ctx.progress(0.2, "mine")
        k.store.items["j"]["token"] += 1  # another worker was granted the job meanwhile
        k.store.items["j"]["progress"], k.store.items["j"]["progress_detail"] = 0.7, "theirs"
        try:
            ctx._progress.every_ms = 0  # no throttle: the next report is a write
            ctx.progress(0.3, "stale")
        except StaleToken as exc:
            seen.append(exc)
            raise
        return "x"

    _progress_job(k, handler)
    assert len(seen) == 1 and seen[0].current == 2 and seen[0].mine == 1
    it = k.store.item("j")
    assert (it["progress"], it["progress_detail"]) == (0.7, "theirs")
