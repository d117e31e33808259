"""Redrive: the one explicit way a dead or failed job runs again (CLI, ops, operator API).

A final state may be left only through a redrive, never through a lease that lapsed
after the verdict was written. So a redrive is explicit in both authorities, and in the
log, in this order:

1. the jobs table mints the job's next redrive generation (``JobStore.redrive``). It
   refuses a job whose item is gone (its record expired, and with it the highest fencing
   token: tokens must never go backwards) and a cancelled or succeeded one;
2. the job's record is appended to Kafka again, sealed anew (``reseal``; ``JobLog.append``; its spec read from
   Redis's dead set before step 1, so that a job that is not dead is refused before any
   generation is minted), so that a Redis data loss cannot take the redrive with it: the
   relay's recovery replays only from its checkpoint, which may have passed the job's
   first record while the job was final. The relay treats the new record like any other:
   a redriven job is not final to it (``JobStore.relay_view``), and ``push.lua`` skips it
   while Redis holds the job under this generation, and makes the move of step 3 itself when
   Redis holds it under an older one (a failover rolled the move back, or step 3 never came)
   (docs/redis-loss.md, "Redriven jobs");
3. Redis moves the job from its dead set to ready and stores the generation on the job
   (``JobQueue.redrive``); the next lease hands it to the worker, whose grant leaves the
   final item only for a generation newer than the one the item last ran under.

A crash between 1 and 2 leaves a generation nobody in Redis carries: the item stays
final, the job stays dead in Redis, and redriving again works. A crash between 2 and 3
leaves the record, and the relay makes the move when it reads it (the redrive the operator
asked for). docs/store.md ("Redrive").
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from sluice.core.errors import AlreadyFinished, InvalidInput, JobNotFound, RedriveRaced
from sluice.core.models import JobSpec, validate_job_id, validate_queue_name
from sluice.core.ports import JobLog, JobQueue, JobStore

logger = logging.getLogger("sluice.gateway.redrive")

# A redriven job's record, accepted again: sealed anew with the job id key (issue 27), its life
# (``sluice.core.limits.JOB_LIFE_MS``) starting at the redrive (``EnqueuePipeline.reseal_now``).
# Without one the record goes as Redis held it, unsealed, and a relay that checks seals refuses it
# when it replays the log after a Redis loss (the job then stays dead).
Reseal = Callable[[JobSpec], JobSpec]

PAGE = 1000  # dead letters read per round of a redrive of a whole queue
MAX_LISTED = 10_000  # the engine's dead_letters limit


@dataclass
class RedriveReport:
    moved: int = 0
    refused: dict[str, str] = field(default_factory=dict)  # job id -> why (the store refused it)


def redrive_one(queue: JobQueue, store: JobStore, queue_name: str, job_id: str, *, log: JobLog | None,
                reseal: Reseal | None = None) -> int:
    """Redrive one dead job: 1 once moved. JobNotFound / AlreadyFinished say why not;
    RedriveRaced that the job left the dead set between the append and the move.

    ``log``: Kafka, where the job's record is appended again (step 2). None only where no
    relay replays the log after a Redis loss (tests over fakes): the redrive then lives in
    Redis alone.
    """
    queue_name, job_id = validate_queue_name(queue_name), validate_job_id(job_id)
    # Read first: a job that is not dead is refused before the store mints a generation for it.
    spec = queue.dead_spec(queue_name, job_id) if log is not None else None
    generation = store.redrive(job_id)
    if log is None or spec is None:
        moved = queue.redrive(queue_name, job_id, generation)
    else:
        log.append([reseal(spec) if reseal is not None else spec])
        try:
            moved = queue.redrive(queue_name, job_id, generation)
        except JobNotFound as exc:
            raise RedriveRaced(f"job {job_id} left the dead set of {queue_name} while it was redriven "
                               "(purged, trimmed or redriven meanwhile); its record is in Kafka again, so "
                               "the relay brings it back if Redis no longer holds it", job_id=job_id) from exc
    logger.info("redrove %s in %s as generation %d", job_id, queue_name, generation,
                extra={"job_id": job_id, "queue": queue_name, "redrive_gen": generation})
    return moved


def redrive_all(queue: JobQueue, store: JobStore, queue_name: str, *, log: JobLog | None,
                reseal: Reseal | None = None) -> RedriveReport:
    """Redrive every dead job of a queue, oldest first, each at most once; refused ones stay dead and
    are reported. A job that dies again while this runs (a handler that always fails, on a fast
    worker) stays dead: it was moved once, and moving it again and again could keep this call
    going for as long as the worker keeps up."""
    queue_name = validate_queue_name(queue_name)
    report = RedriveReport()
    moved: set[str] = set()
    while True:
        limit = min(MAX_LISTED, len(report.refused) + len(moved) + PAGE)
        page = [d.job_id for d in queue.dead_letters(queue_name, limit)
                if d.job_id not in report.refused and d.job_id not in moved]
        if not page:
            return report
        for job_id in page:
            try:
                report.moved += redrive_one(queue, store, queue_name, job_id, log=log, reseal=reseal)
                moved.add(job_id)
            except (JobNotFound, AlreadyFinished, RedriveRaced, InvalidInput) as exc:
                # Refused by the store (expired record, cancelled, succeeded), no longer dead in
                # Redis (redriven or purged meanwhile), or not a job Sluice wrote (an id or fields
                # the queue's team put there by hand): either way, not ours to move now.
                report.refused[job_id] = str(exc)
        if len(report.refused) + len(moved) >= MAX_LISTED:
            return report  # as many as one listing holds; the rest waits for the next run
