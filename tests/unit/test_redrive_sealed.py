"""Issue 27: a redrive appends the job's record to Kafka again (so a Redis loss cannot undo it); that
record is sealed anew, as every record the relay pushes must be, its life starting at the redrive."""

from __future__ import annotations

from sluice.core import ids, seal
from sluice.core.models import JobSpec
from sluice.gateway.redrive import redrive_one
from sluice_dev.fakes import FakeLog, FakeQueue, FakeStore, QJob
from tests.unit.test_gateway_admin import Q, Rig, dead_id
from tests.unit.test_gateway_fakes import KEY


def test_the_operator_apis_redrive_appends_a_sealed_record_the_relay_accepts() -> None:
    rig = Rig()
    job = dead_id(rig, 0)
    code, _, doc = rig.call("POST", Q + "/dlq/redrive", {"job_id": job})
    assert (code, doc["moved"]) == (200, 1)
    (record,) = rig.log.pending
    assert record.job_id == job and seal.verify_spec(record, [KEY])


def test_redrive_reseals_with_the_given_sealer_and_without_one_leaves_the_record_as_redis_held_it() -> None:
    now = 1_700_000_000_000
    job = ids.mint(now - 30 * 86_400_000, "q", KEY)  # died a month ago: past the life bound unless resealed
    for reseal in (None, lambda s: seal.seal_spec(s.model_copy(update={"enqueued_at_ms": now}), KEY)):
        queue, store, log = FakeQueue(), FakeStore(), FakeLog()
        queue.jobs[("q", job)] = QJob(JobSpec(job_id=job, queue="q", payload={"n": 1},
                                              enqueued_at_ms=now - 30 * 86_400_000), state="dead")
        assert redrive_one(queue, store, "q", job, log=log, reseal=reseal) == 1
        (record,) = log.pending
        if reseal is None:
            assert record.seal is None and record.schema_version == 1
        else:
            assert seal.verify_spec(record, [KEY]) and record.enqueued_at_ms == now
            assert seal.life_refusal(record.enqueued_at_ms, record.run_at_ms, now + 1_000) is None
