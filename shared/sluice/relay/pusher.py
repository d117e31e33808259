"""The pusher: a planned round of records goes into Redis through ``push.lua``.

``push.lua`` records the highest offset it enqueued per (queue, topic, partition) in the
same atomic step and skips records at or below it (docs/relay.md). The I/O half of a
round (``start``: drop the jobs already final, push) runs on a pusher thread while the
main thread polls; ``finish`` applies the outcome on the main thread, the only one that
changes relay state. A push refused because a newer owner pushed loses the partition, unless
the relay's own lease on it is still current (``Ownership.still_ours``): then no relay holds that
owner, its queue's team wrote it by hand, and that queue alone is held (``forged_suspect``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from sluice.core import bus as ev
from sluice.core.bus import EventBus
from sluice.core.errors import LeaseLost, SluiceError, StaleToken
from sluice.core.models import DecodedJob
from sluice.core.ports import JobStore
from sluice.relay.config import RelayConfig
from sluice.relay.hooks import RelayHooks
from sluice.relay.ownership import Ownership
from sluice.relay.ports import PushItem, PushOutcome, RelayEngine
from sluice.relay.queues import hold_for_budget
from sluice.relay.state import Item, OwnedPartition, QueueState, RelayReport
from sluice.relay.status import StatusWriter

log = logging.getLogger("sluice.relay")  # one logger for the whole relay, as before the package split


Records = list[tuple[int, DecodedJob]]


def own_keys(error: SluiceError) -> bool:
    """Whether a push's error is the queue's own keys' (a Redis reply no code maps, such as WRONGTYPE:
    its team's Redis user may write every key of its queue by hand, session 36), not Redis failing:
    the queue is then held alone (``QueueState.unreadable``, cleared by its next successful re-read)
    rather than the round failing, which backed off every queue of the relay at every step."""
    return type(error) is SluiceError


def forged_suspect(refusal: LeaseLost, fenced: bool) -> bool:
    """Whether a refused push may name a forged owner: ``push.lua`` refused it for a newer owner in
    the queue's relayed key (``StaleToken``), which its team's Redis user may write by hand (session
    36: an owner of 2**53-1 refused every push into that queue, each relay taking the partition
    dropped it again at its first push there, and the partition's other queues moved only between
    take-overs). Not so when the relay's hooks refused the partition before the push (``fenced``:
    Redis's epoch changed): nothing was asked of the queue's key. The caller holds the queue only
    if the partition's lease is still its own (``Ownership.still_ours``), else drops it."""
    return isinstance(refusal, StaleToken) and not fenced


@dataclass
class Executed:
    # per plan item, in order: the records sent (finals removed), and push's outcome,
    # the LeaseLost that refused it, another error (the records stay pending), or
    # None when nothing was sent
    results: list[tuple[Records, PushOutcome | Exception | None]] = field(default_factory=list)
    error: SluiceError | None = None
    fenced: set[int] = field(default_factory=set)  # partitions the hooks refused before their push


class Pusher:
    """Runs push rounds and applies their outcome to the buffers, the report and the queue states."""

    def __init__(self, engine: RelayEngine, store: JobStore, config: RelayConfig, ownership: Ownership, *,
                 topic: str, report: RelayReport, hooks: RelayHooks, events: EventBus) -> None:
        self.engine, self.store, self.config, self.ownership = engine, store, config, ownership
        self.topic, self.report, self.hooks = topic, report, hooks
        self.events = events
        self._status = StatusWriter(store, self.events, max_waiting=config.status_max_waiting,
                                    max_per_s=config.status_max_per_s)
        self._executor: ThreadPoolExecutor | None = None
        self._forged: set[tuple[str, str, int]] = set()  # (topic, queue, partition): a forged owner

    @property
    def status(self) -> StatusWriter:
        return self._status

    def start(self, plan: list[Item]) -> Future[Executed]:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sluice-relay-push")
        return self._executor.submit(self._execute, plan)

    def _execute(self, plan: list[Item]) -> Executed:
        """The I/O half of a push round, on the pusher thread: final jobs out, then every item's
        push.lua in one round trip (``push_many``).

        Reads relay state but changes none of it; ``finish`` does that on the main thread.
        """
        done = Executed()
        try:
            # Redriven jobs are not final, and are pushed with their redrive generation (a replayed
            # record of one carries none): docs/redis-loss.md, "Redriven jobs".
            final, gens = self.store.relay_view([job.job_id for _, _, take in plan for _, job in take])
            stale = done.fenced
            sending: list[int] = []  # indexes into plan, and into done.results
            items: list[PushItem] = []
            for owned, queue, take in plan:
                records = [(off, job) for off, job in take if job.job_id not in final] if final else take
                if owned.number in stale or not records:
                    done.results.append((records, None))
                    continue
                try:
                    token = self.hooks.before_push(queue, owned.number, owned.token)
                except LeaseLost as exc:  # the hooks refuse this partition (recovery: Redis's epoch changed)
                    stale.add(owned.number)
                    done.results.append((records, exc))
                    continue
                except SluiceError:
                    raise
                except Exception as exc:  # a bug or unforeseen input: this item only
                    done.results.append((records, exc))
                    continue
                sending.append(len(done.results))
                done.results.append((records, None))
                items.append((queue, owned.number, token, records))
            if items:
                self._push(items, sending, done, gens)
        except SluiceError as exc:  # the rest of the plan stays pending and is tried again
            done.error = exc
        return done

    def _push(self, items: list[PushItem], sending: list[int], done: Executed, gens: dict[str, int]) -> None:
        """``push_many``, then a ``Pushed`` event per item, on this thread, before the outcome is
        applied: a subscriber that stops the process there (the chaos run's kill point) stops it
        after the push and before the Kafka commit."""
        t0 = ev.wall()  # the machine's clock, as the event's ``at`` (a chaos run skews time.time)
        outcomes: Sequence[PushOutcome | Exception]
        try:
            outcomes = self.engine.push_many(self.topic, items, gens)
        except SluiceError as exc:  # no reply: these items stay pending (a retry is safe)
            self.announce(items, [exc] * len(items), t0, self.topic)
            for i in sending:
                done.results[i] = (done.results[i][0], exc)
            raise
        except Exception as exc:  # a bug or unforeseen input: these items stay pending
            outcomes = [exc] * len(items)
        self.announce(items, outcomes, t0, self.topic)
        for i, outcome in zip(sending, outcomes, strict=True):
            done.results[i] = (done.results[i][0], outcome)
            if isinstance(outcome, SluiceError) and not isinstance(outcome, LeaseLost) \
                    and not own_keys(outcome):  # (an error of the queue's own keys holds it: finish)
                done.error = done.error or outcome  # raised once the others are applied

    def announce(self, items: list[PushItem], outcomes: Sequence[PushOutcome | Exception], t0: float,
                 topic: str) -> None:
        """A ``Pushed`` per item, as pushed under ``topic`` (the delay lanes push under their own)."""
        if not self.events.listening:
            return
        for (queue, partition, token, records), outcome in zip(items, outcomes, strict=True):
            if not isinstance(outcome, Exception) and outcome.left:  # only what push.lua took was pushed
                records = records[:len(records) - outcome.left]
                if not records:
                    continue
            common: dict[str, Any] = {"queue": queue, "topic": topic, "partition": partition, "t0": t0,
                                      "owner": token, "first": records[0][0], "last": records[-1][0]}
            if isinstance(outcome, Exception):
                self.events.emit(ev.Pushed(outcome="error", error=ev.error_text(outcome), **common))
            else:
                self.events.emit(ev.Pushed(outcome="ok", pushed=outcome.pushed, skipped=outcome.skipped,
                                           jobs=tuple(job.job_id for _, job in records),
                                           traced=tuple((job.job_id, job.traceparent) for _, job in records
                                                        if job.traceparent), **common))

    def finish(self, plan: list[Item], done: Executed, states: dict[str, QueueState]) -> int:
        """Apply a round's outcome; returns how many jobs it pushed. Raises the round's error."""
        pushed = 0
        queued: list[tuple[str, Records]] = []  # for the status writer, which builds its tuples itself
        owned_by = self.ownership.owned
        ours: dict[int, bool] = {}  # partitions whose lease was asked for this round: still ours?
        for (owned, queue, take), (records, outcome) in zip(plan, done.results, strict=False):
            # strict=False: a round that failed before its push holds fewer results than items
            if owned_by.get(owned.number) is not owned:
                continue  # lost earlier in this round: its records are the new owner's now
            if isinstance(outcome, LeaseLost):
                self._refused(owned, queue, outcome, owned.number in done.fenced, ours, states.get(queue))
                continue
            if isinstance(outcome, SluiceError):  # the round's error, raised below: tried again
                self._hold_if_own_keys(owned.number, queue, outcome, states.get(queue))  # (or held alone)
                continue
            if isinstance(outcome, Exception):  # the other partitions and queues still flow
                self.report.unexpected_errors += 1
                self.events.emit(ev.PushFailed(partition=owned.number, queue=queue,
                                               error=ev.error_text(outcome)))
                log.error("pushing partition %s into %s failed unexpectedly; its records stay pending",
                          owned.number, queue, exc_info=outcome)
                continue
            done_with = len(take)  # records of take that leave the buffer
            if outcome is not None:
                if self._forged:
                    self.forged_gone(queue, owned.number, self.topic)
                records, done_with = self._taken(queue, take, records, outcome, states)
                if records:  # push.lua raised the recorded offset to at least the last one taken
                    owned.relayed[queue] = max(owned.relayed.get(queue, -1), records[-1][0])
                    queued.append((queue, records))
                pushed += outcome.pushed
                self.report.pushed += outcome.pushed
                self.report.skipped += outcome.skipped
                state = states[queue]
                state.pushed_since_refresh += outcome.pushed
                state.pushed_since_dispatch += outcome.pushed
            self.report.final_dropped += done_with - len(records)
            pending = owned.pending[queue]
            for _ in range(done_with):
                pending.popleft()
            owned.pending_count -= done_with
        if queued:
            self._status.submit(queued)
            self.report.status_dropped = self._status.backlog.dropped
        if done.error is not None:
            raise done.error
        return pushed

    def _hold_if_own_keys(self, partition: int, queue: str, error: SluiceError,
                          state: QueueState | None) -> None:
        """A push that failed on the queue's own keys (``own_keys``) holds the queue alone until its
        next successful re-read; the round does not fail for it (``_push``)."""
        if not own_keys(error) or state is None:
            return
        if not state.unreadable:
            log.error("pushing into %s failed on its own keys; it is held until a re-read: %s", queue, error)
            self.events.emit(ev.PushFailed(partition=partition, queue=queue, error=ev.error_text(error)))
        state.unreadable = True

    def _refused(self, owned: OwnedPartition, queue: str, refusal: LeaseLost, fenced: bool,
                 ours: dict[int, bool], state: QueueState | None) -> None:
        """A refused push: the queue alone is held for a forged owner (``forged``), else the
        partition is lost (a newer owner, or the hooks' fence)."""
        if state is not None and self.forged(owned, queue, refusal, fenced, ours, self.topic):
            state.unreadable = True  # held as a queue whose own keys fail: see forged
            return
        self.report.stale_stops += 1
        self.ownership.lose(owned.number, str(refusal))
        self.ownership.assign()

    def forged(self, owned: OwnedPartition, queue: str, refusal: LeaseLost, fenced: bool,
               ours: dict[int, bool], topic: str) -> bool:
        """Whether ``refusal`` of a push of ``owned`` into ``queue`` (under ``topic``) names an owner no
        relay holds (``forged_suspect``, and the lease asked once per round and partition, kept in
        ``ours``: ``Ownership.still_ours``); an ``OwnerForged`` incident when it first does. The
        caller then holds that queue (or delay lane) alone and keeps the partition; the pusher holds
        the queue as one whose own keys fail (``QueueState.unreadable``): its records park as a
        paused queue's, so the partition's commit passes them, and its next re-read (every
        ``refresh_s``) lets the next round push into it again, which checks again.

        Safe if a newer relay takes the partition right after the check: it can lease it only once
        our lease lapses (just extended), and from then on every key it pushes fences this relay as
        before. Nothing of the held queue's records was written; they wait in the buffer or the
        parking lot, which a new owner reads from each marked lane's start."""
        if not forged_suspect(refusal, fenced):
            return False
        if owned.number not in ours:
            ours[owned.number] = self.ownership.still_ours(owned)
        if not ours[owned.number]:
            return False
        if (topic, queue, owned.number) not in self._forged:
            self._forged.add((topic, queue, owned.number))
            owner = str(refusal.current if isinstance(refusal, StaleToken) else None)[:32]
            log.error("queue %s's relayed key for partition %s (%s) names owner %s, which no relay holds "
                      "(this relay's lease is current): held until its key is fixed", queue, owned.number,
                      topic, owner)
            self.events.emit(ev.OwnerForged(queue=queue, partition=owned.number, owner=owner, held=True))
        return True

    def forged_gone(self, queue: str, partition: int, topic: str) -> None:
        """A push into a queue (or delay lane) held for a forged owner went through: its key was fixed."""
        if (topic, queue, partition) in self._forged:
            self._forged.discard((topic, queue, partition))
            log.warning("queue %s takes partition %s's records (%s) again: its relayed owner is fixed",
                        queue, partition, topic)
            self.events.emit(ev.OwnerForged(queue=queue, partition=partition, owner="", held=False))

    def _taken(self, queue: str, take: Records, records: Records, outcome: PushOutcome,
               states: dict[str, QueueState]) -> tuple[Records, int]:
        """The ``records`` push.lua took, and how many of ``take`` (finals dropped before the push
        included) leave the buffer. It took all but the last ``outcome.left``: those stay buffered
        (parked with a held queue's overflow) and the queue is held, for its byte budget or, when
        push.lua found it paused, as paused until the next read of its config."""
        left = outcome.left
        if not left:
            return records, len(take)
        first_left = records[len(records) - left][0]
        state = states[queue]
        if outcome.paused:
            state.config = state.config.model_copy(update={"paused": True})
        else:
            hold_for_budget(self.events, queue, state, True)
        return records[:len(records) - left], next(i for i, (off, _) in enumerate(take) if off == first_left)

    def close(self) -> None:
        """Wait for a round in flight (``stop``); the status writer drains in ``drain``."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    def drain(self, left_s: float | None = None) -> None:
        """Let the status writer finish, for ``status_drain_s`` at most (and ``left_s``, the time the
        invocation has left, if given)."""
        self._status.close(self.config.status_drain_s if left_s is None else min(self.config.status_drain_s,
                                                                                  left_s))
