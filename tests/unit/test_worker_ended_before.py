"""A job the store says ended before this attempt (its worker died before telling Redis): the
worker tells Redis the stored verdict, and says why when Redis refuses (``Finisher.finished_before``
and ``succeeded_before``).

- dead in the store: the grant refuses it, so it is not run again; Redis dead-letters it (``fail``);
- succeeded in the store: a re-run (its worker died before the ack) fails, the failure is not
  recorded over the result, and Redis acks it.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from sluice.core.errors import LeaseLost, SluiceError
from sluice.core.models import Job
from sluice.worker.runtime.context import JobContext
from sluice_dev.fakes import kit


@dataclass(frozen=True)
class Case:
    status: str  # in the store before the attempt
    call: str  # what tells Redis
    ran: list[str]
    outcome: str  # when Redis takes it
    state: str  # in Redis then
    said: str
    what: str  # named in the log line when Redis refuses


DEAD = Case("dead", "fail", [], "dead", "dead", "job already dead in the store: not run again",
            "dead-lettering an already finished job")
SUCCEEDED = Case("succeeded", "ack", ["j1"], "succeeded", "done",
                 "re-run of an already succeeded job ended; its failure is not recorded",
                 "ack of an already succeeded job")


@pytest.mark.parametrize("case", [DEAD, SUCCEEDED], ids=["dead", "succeeded"])
@pytest.mark.parametrize(("refusal", "outcome", "line"), [
    (None, "", ""),
    (LeaseLost("taken over"), "lease_lost", "lease lost: {what} rejected (taken over)"),
    (SluiceError("confused"), "unsettled", "{what} failed (confused); the lease will lapse"),
], ids=["taken", "lease-lost", "unsettled"])
def test_the_stored_verdict_reaches_redis_or_the_log_says_why_not(
        case: Case, refusal: Exception | None, outcome: str, line: str) -> None:
    k = kit()
    ran: list[str] = []

    @k.app.handler("thumbs")
    def thumbs(job: Job, ctx: JobContext) -> None:
        ran.append(job.job_id)
        raise RuntimeError("this re-run fails")

    k.store.items["j1"] = {"queue": "thumbs", "status": case.status, "token": 3, "attempts": 3,
                           "cancel_requested": False, "result_json": "1", "result_token": 3}
    k.queue.add("thumbs", "j1", {"w": 1})
    if refusal is not None:
        k.queue.broken.add(case.call, refusal)
    summary = k.worker().drain(["thumbs"], 1).as_dict()
    assert ran == case.ran and k.store.items["j1"]["status"] == case.status
    if refusal is None:
        assert summary[case.outcome] == 1 and k.queue.job("thumbs", "j1").state == case.state
        assert k.log.having(case.said)
    else:
        assert summary[outcome] == 1 and k.queue.job("thumbs", "j1").state == "leased"
        assert k.log.having(line.format(what=case.what)) and not k.log.having(case.said)
