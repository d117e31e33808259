"""Records in and out: Kafka records become pending work, pending work becomes ``push.lua`` calls.

``push.lua`` records the highest offset it enqueued per (queue, topic, partition)
in the same atomic step and skips records at or below it; Kafka offsets are
committed only after the push. A relay killed between the two therefore re-reads
records that Redis already holds, and the script skips them (docs/relay.md).
The I/O half of a push round runs on a pusher thread while the main thread polls;
only the main thread changes relay state.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from sluice.errors import LeaseLost, QueueNotAllowed, SluiceError
from sluice.ids import Verifier
from sluice.models import JobSpec
from sluice.relay.ownership import _Ownership
from sluice.relay.ports import PushOutcome, SourceRecord, decode
from sluice.relay.state import _Item

log = logging.getLogger("sluice.relay")  # one logger for the whole relay, as before the package split


def unminted(spec: JobSpec, job_ids: Verifier) -> str | None:
    """Why ``spec``'s id was not minted by a gateway holding these keys for its queue, or None.

    Kafka may be reachable by more than the gateways (a cluster named by bootstrap servers runs
    without TLS or auth): a record whose id does not verify was written by someone else.
    """
    found = job_ids.verify(spec.job_id)
    if found is None:
        return f"unminted: job id {spec.job_id!r} was not minted by this deployment's gateway"
    if found.queue != spec.queue:
        return f"unminted: job id {spec.job_id!r} is for queue {found.queue!r}, not {spec.queue!r}"
    return None


@dataclass
class _Executed:
    # per plan item, in order: the records sent (finals removed), and push's outcome,
    # the LeaseLost that refused it, an unexpected error (the records stay pending), or
    # None when nothing was sent
    results: list[tuple[list[tuple[int, JobSpec]], PushOutcome | Exception | None]] = field(
        default_factory=list)
    error: SluiceError | None = None


class _Pushing(_Ownership):
    """Ingest, push, commit and lag (a mixin of ``Relay``; a refused push loses the partition)."""

    # -- records in ---------------------------------------------------------------------------------

    def _ingest(self, records: Sequence[SourceRecord]) -> None:
        for record in records:
            owned = self._owned.get(record.partition)
            if owned is None or (owned.next_offset is not None and record.offset < owned.next_offset):
                continue  # not ours any more, or a re-delivery of something already taken
            if owned.next_offset is None:  # we started at the committed offset: nothing to commit yet
                owned.committed = record.offset
            owned.next_offset = record.offset + 1
            spec = decode(record)
            # Minted first: a record no gateway minted must not register its queue name.
            if not isinstance(spec, str) and self.job_ids is not None:
                spec = unminted(spec, self.job_ids) or spec
            if not isinstance(spec, str) and (why := self._refusal(spec.queue)) is not None:
                self.report.refused += 1
                spec = f"queue refused: {why}"
            if isinstance(spec, str):
                self.source.dead_letter(record, spec)
                owned.dead_since_commit = True
                self.report.dead_lettered += 1
                log.warning("poison record %s/%s -> dead-letter topic: %s", record.partition,
                            record.offset, spec)
                continue
            owned.pending.setdefault(spec.queue, deque()).append((record.offset, spec))
            owned.pending_count += 1

    def _skip_relayed(self) -> None:
        """Drop from the buffers the records Redis already holds: at or below push.lua's recorded
        offset (read again after a restart, or a resume from an older checkpoint). They leave
        here, before they cost a rate token, a finality read, a push or a status write."""
        for owned in list(self._owned.values()):
            for queue, q in owned.pending.items():
                if not q:
                    continue
                mark = owned.relayed.get(queue)
                if mark is None:
                    try:
                        mark = self.engine.relayed_offset(queue, self.topic, owned.number, owned.token)
                    except LeaseLost as exc:  # a newer owner, or Redis's epoch changed
                        self.report.stale_stops += 1
                        self._lose(owned.number, str(exc))
                        self.source.assign(sorted(self._owned))
                        break
                    owned.relayed[queue] = mark
                n = 0
                while q and q[0][0] <= mark:
                    q.popleft()
                    n += 1
                owned.pending_count -= n
                self.report.skipped += n
                self.report.reread += n

    def _refusal(self, queue: str) -> str | None:
        """Why the registry refuses ``queue`` (allow-list, or full), else None; asked once per queue
        (a refusal is remembered for ``maintenance_s``). Such a record goes to the dead-letter
        topic: held back it would stop its partition's commits for good. Any other error admits
        the record: its push registers the queue again, and fails and retries as pushes do."""
        if queue in self._admitted or self._register_queue is None:
            return None
        now = self.clock.monotonic()
        refused = self._refused.get(queue)
        if refused is not None and now < refused[0]:
            return refused[1]
        try:
            self._register_queue(queue)
        except QueueNotAllowed as exc:
            if len(self._refused) > 10_000:  # random names must not grow a relay without bound
                self._refused.clear()
            self._refused[queue] = (now + self.maintenance_s, str(exc))
            return str(exc)
        except SluiceError as exc:
            log.warning("could not register queue %s before pushing: %s", queue, exc)
            return None
        self._admitted.add(queue)
        return None

    def _pusher(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sluice-relay-push")
        return self._executor

    # -- records out --------------------------------------------------------------------------------

    def _execute(self, plan: list[_Item]) -> _Executed:
        """The I/O half of a push round, on the pusher thread: final jobs out, then push.lua.

        Reads relay state but changes none of it; ``_apply`` does that on the main thread.
        """
        done = _Executed()
        try:
            final = self.store.final_job_ids([s.job_id for _, _, take in plan for _, s in take])
            stale: set[int] = set()
            for owned, queue, take in plan:
                records = [(off, spec) for off, spec in take if spec.job_id not in final]
                if owned.number in stale or not records:
                    done.results.append((records, None))
                    continue
                try:
                    outcome = self.engine.push(queue, self.topic, owned.number, owned.token, records)
                except LeaseLost as exc:  # StaleToken: a newer relay owns this partition now
                    stale.add(owned.number)
                    done.results.append((records, exc))
                    continue
                except SluiceError:
                    raise
                except Exception as exc:  # a bug or unforeseen input: this item only
                    done.results.append((records, exc))
                    continue
                done.results.append((records, outcome))
                if self.after_push is not None:
                    self.after_push(owned.number, queue, outcome)
        except SluiceError as exc:  # the rest of the plan stays pending and is tried again
            done.error = exc
        return done

    def _apply(self, plan: list[_Item], done: _Executed) -> int:
        pushed = 0
        queued: list[tuple[str, str, int]] = []
        for (owned, queue, take), (records, outcome) in zip(plan, done.results, strict=False):
            if self._owned.get(owned.number) is not owned:
                continue  # lost earlier in this round: its records are the new owner's now
            if isinstance(outcome, LeaseLost):
                self.report.stale_stops += 1
                self._lose(owned.number, str(outcome))
                self.source.assign(sorted(self._owned))
                continue
            if isinstance(outcome, Exception):  # the other partitions and queues still flow
                self.report.unexpected_errors += 1
                self.metrics.count("RelayUnexpectedErrors")
                log.error("pushing partition %s into %s failed unexpectedly; its records stay pending",
                          owned.number, queue, exc_info=outcome)
                continue
            if outcome is not None:
                if records:  # push.lua raised the recorded offset to at least the last one sent
                    owned.relayed[queue] = max(owned.relayed.get(queue, -1), records[-1][0])
                pushed += outcome.pushed
                self.report.pushed += outcome.pushed
                self.report.skipped += outcome.skipped
                queued.extend((spec.job_id, queue, spec.enqueued_at_ms) for _, spec in records)
                state = self._queues[queue]
                state.pushed_since_refresh += outcome.pushed
                state.pushed_since_dispatch += outcome.pushed
            self.report.final_dropped += len(take) - len(records)
            pending = owned.pending[queue]
            for _ in take:
                pending.popleft()
            owned.pending_count -= len(take)
        self._mark_queued(queued)
        if done.error is not None:
            raise done.error
        return pushed

    def _mark_queued(self, jobs: list[tuple[str, str, int]]) -> None:
        if jobs:
            self._status.submit(jobs)

    def _commit(self, force: bool = False) -> None:
        """Tell Kafka how far Redis has got; at most every ``commit_s`` (exactly-once needs no hurry)."""
        now = self.clock.monotonic()
        if not force and now - self._last_commit < self.commit_s:
            return
        self._last_commit = now
        offsets: dict[int, int] = {}
        flush = False
        for owned in self._owned.values():
            point = owned.commit_point()
            if point is not None and (owned.committed is None or point > owned.committed):
                offsets[owned.number] = point
                flush |= owned.dead_since_commit
        if not offsets:
            return
        if flush:  # a poison record's offset is committed only once its dead letter is safe
            self.source.flush_dead_letters()
        self.source.commit(offsets)
        for p, offset in offsets.items():
            self._owned[p].committed = offset
            self._owned[p].dead_since_commit = False

    def _report_lag(self) -> None:
        """``RelayLag``: records in Kafka not yet in Redis, the worst of the owned partitions."""
        self._next_lag = self.clock.monotonic() + self.lag_every_s
        if self._highwater is None:
            return
        lags = []
        for owned in self._owned.values():
            start = owned.commit_point()
            try:
                end = self._highwater(owned.number)
            except SluiceError:
                continue
            if start is not None and end is not None:
                lags.append(max(0, end - start))
        if lags:
            self.report.lag = max(lags)
            self.metrics.count("RelayLag", self.report.lag)

