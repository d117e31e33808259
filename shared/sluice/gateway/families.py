"""The gateway's family use cases: a leased job starts children, and a continuation is released.

Reached only by a direct invoke of the gateway function (``flows.family_event``), never through
API Gateway: the worker and the relay call it (docs/security.md, Jobs that start jobs). Every
child passes the checks a caller's enqueue passes (``sluice.gateway.pipeline``: reserved names, payload
size, priority, admission), and its id is derived, not minted, so a re-run parent gets the same
children. The order of the writes makes a crash at any point safe to repeat:

1. check everything (nothing written);
2. the parent's item gains the children, conditional on the parent being leased under ``token``,
   and lists them as pending (``pending_children``);
3. the family's record and the continuation's item are created, waiting for the children (kept
   as is on a re-run): from here on the family's set of children is fixed, and a re-run naming
   others is refused;
4. each child's item is created ``accepted`` (naming its parent, its continuation and its slot:
   its rank in that set, whatever order the request lists the children in);
5. children already final (a re-run after they ended) are counted down, not appended again;
6. the rest are appended to Kafka. A failed append is not withdrawn (the ids are the children's
   for good): the error goes back to the handler, whose re-run appends them again;
7. the children are off the parent's pending list. A parent that ends with children still on it
   (it failed, used its attempts, or swallowed the error) leaves them to the stream's countdown,
   which ends them ``dead`` with the reason, and counts them (``streams.countdown``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from sluice.core import ids
from sluice.core.errors import (
    ConfigError,
    FamilyConflict,
    InvalidInput,
    JobNotFound,
    RecordTampered,
    TooManyChildren,
)
from sluice.core.families import (
    MAX_CHILDREN,
    FamilyAccepted,
    FamilyRequest,
    FamilyStore,
    NewChild,
    family_slots,
    keys_unique,
)
from sluice.core.models import FINAL_STATES, JobSpec, is_reserved_queue, validate_job_id

if TYPE_CHECKING:
    from sluice.core.caller import Caller
    from sluice.gateway.pipeline import EnqueuePipeline

log = logging.getLogger("sluice.gateway.api")


class FamilyHost(Protocol):
    """What the family use cases need of the gateway (``api.Api`` is one): its families, its
    enqueue pipeline, the job id verifier and its clock."""

    @property
    def families(self) -> FamilyStore | None: ...
    @property
    def pipeline(self) -> EnqueuePipeline: ...
    @property
    def verifier(self) -> ids.Verifier: ...
    @property
    def clock(self) -> Callable[[], int]: ...


def families_of(api: FamilyHost) -> FamilyStore:
    store = api.families
    if store is None:
        raise ConfigError("this gateway's store keeps no families")
    return store


def _child_id(api: FamilyHost, parent_id: str, queue: str, key: str) -> str:
    """A child's id: derived with the key that signed its parent, or, for a keyless parent (a firing's
    job), keyless too (``ids.derive_keyless``): either way a re-run across a rotation gets the same."""
    if ids.is_keyless(parent_id):
        return ids.derive_keyless(parent_id, queue, key)
    return ids.derive(parent_id, queue, key, _signing_key(api, parent_id))


def _signing_key(api: FamilyHost, parent_id: str) -> bytes:
    """The key that signed the parent: a re-run across a key rotation derives the same children."""
    kid = parent_id.rsplit(".", 1)[-1][:ids.KEY_ID_LENGTH]
    for key in (api.verifier.key, *api.verifier.previous):
        if ids.key_id(key) == kid:
            return key
    return api.verifier.key


def _parent(api: FamilyHost, parent_id: str) -> str:
    """``parent_id`` if it names a job this deployment issued: a minted id, or a firing's keyless one
    (``adopt`` then checks that it is leased under the request's token, as for any parent)."""
    parent_id = validate_job_id(parent_id)
    minted = api.verifier.verify(parent_id)
    queue = minted.queue if minted is not None else (
        parent_id.split(".")[1] if ids.is_keyless(parent_id) else None)
    if queue is None or is_reserved_queue(queue):
        raise JobNotFound(f"no job {parent_id}: a parent must be a job this deployment issued",
                          job_id=parent_id)
    return parent_id


def _check_keys(request: FamilyRequest) -> None:
    if not request.jobs:
        raise InvalidInput("then= needs at least one child: a continuation waits for children"
                           if request.then is not None else "no children to start")
    if len(request.jobs) > MAX_CHILDREN:
        raise TooManyChildren(f"{len(request.jobs)} children in one request; a job may start at most "
                              f"{MAX_CHILDREN}", limit=MAX_CHILDREN)
    for index, job in enumerate(request.jobs):
        try:
            ids.check_child_key(job.key)
        except ValueError as exc:
            raise InvalidInput(f"child {index}: {exc}", index=index) from None
    if request.then is not None:
        try:
            ids.check_child_key(request.then.key)
        except ValueError as exc:
            raise InvalidInput(f"then: {exc}") from None
    duplicate = keys_unique(request.jobs)
    if duplicate is not None:
        raise InvalidInput(f"child key {duplicate!r} is used twice: each child needs its own key")


def enqueue_children(api: FamilyHost, request: FamilyRequest, caller: Caller) -> FamilyAccepted:
    """``caller``: whom the children are for, as the entry verified it (a worker's invoke)."""
    pipeline = api.pipeline
    parent_id = _parent(api, request.parent_id)
    _check_keys(request)
    for index, job in enumerate(request.jobs):
        pipeline.check(job.queue, job, caller, index=index)
    if request.then is not None:
        pipeline.check(request.then.queue, request.then, caller)
    by_queue: dict[str, list[Any]] = {}
    for job in request.jobs:
        by_queue.setdefault(job.queue, []).append(job)
    for queue, jobs in by_queue.items():
        pipeline.admit(queue, jobs)
    if request.then is not None:  # released later, but its id is answered now: its queue is reserved now
        pipeline.reserve(request.then.queue)
    now = api.clock()
    specs = [pipeline.spec(job.queue, job, now, None, job_id=_child_id(api, parent_id, job.queue, job.key))
             for job in request.jobs]
    child_ids = [s.job_id for s in specs]
    store = families_of(api)
    then_id = None
    then_spec = None
    if request.then is not None:
        then_id = _child_id(api, parent_id, request.then.queue, ids.CONTINUATION_PREFIX + request.then.key)
        then_spec = pipeline.spec(request.then.queue, request.then, now, None, job_id=then_id)
        _same_family(store, then_id, child_ids)
    known = store.children_state(child_ids)
    for child_id, state in known.items():
        if state.continuation != then_id:  # the key named a child of another family
            raise FamilyConflict(f"child {child_id} already belongs to "
                                 f"{state.continuation or 'no continuation'}: use another key",
                                 job_id=child_id)
    store.adopt(parent_id, request.token, child_ids, then_id, MAX_CHILDREN)
    if then_spec is not None and then_id is not None:
        family = store.start_family(then_id, then_spec.queue, parent_id, child_ids,
                                    then_spec.model_dump_json(), now)
        _same_children(then_id, family.waits_for, child_ids)  # a concurrent request's record won
    slots = family_slots(child_ids)
    store.record_children(parent_id, [NewChild(s.job_id, s.queue, now, slots[s.job_id]) for s in specs],
                          then_id)
    final = {j: st for j, st in known.items() if st.status in FINAL_STATES}
    fresh = [s for s in specs if s.job_id not in final]
    if fresh:
        pipeline.append(fresh)
    store.appended(parent_id, child_ids)
    if final and then_id is not None:
        _count_final(api, store, then_id, [st.slot for st in final.values()])
    return FamilyAccepted(job_ids=child_ids, continuation=then_id)


def _same_family(store: FamilyStore, then_id: str, child_ids: Sequence[str]) -> None:
    try:
        existing = store.family(then_id)
    except JobNotFound:
        return
    _same_children(then_id, existing.waits_for, child_ids)


def _same_children(then_id: str, waits_for: Sequence[str], child_ids: Sequence[str]) -> None:
    if set(waits_for) != set(child_ids):
        raise FamilyConflict(f"continuation {then_id} already waits for {len(waits_for)} other "
                             "children: a re-run must start the same children under the same keys, or "
                             "use another then key", job_id=then_id)


def _count_final(api: FamilyHost, store: FamilyStore, then_id: str, slots: Sequence[int]) -> None:
    """Children that ended before this (re-run) request: counted now, since their JobEnded may be
    long past (or never came: the process that ended them died before its countdown)."""
    for slot in slots:
        store.count_down(then_id, slot)
    if store.unreleased(then_id):  # now, or counted before and its release failed
        release_continuation(api, then_id)


def release_continuation(api: FamilyHost, continuation: str) -> bool:
    """Append the continuation whose children have all ended; False if it was appended already.

    Safe to call again (a release whose answer was lost): ``mark_released`` after the append
    means a crash in between appends the same id twice, and the relay and Redis keep one.
    """
    continuation = validate_job_id(continuation)
    store = families_of(api)
    family = store.family(continuation)
    if family.released:
        return False
    if family.remaining > 0:
        raise InvalidInput(f"continuation {continuation} still waits for {family.remaining} children")
    if family.spec_json is None:
        return False
    spec = JobSpec.model_validate_json(family.spec_json)
    # The spec sat in the jobs table, under a key a continuation team's LeadingKeys reach: only a
    # spec this gateway sealed is appended, sealed anew at its release (its life starts now).
    if not api.pipeline.sealed(spec):
        raise RecordTampered(f"continuation {continuation}: its stored record does not match its seal "
                             "(altered in the jobs table, or sealed by no key of this deployment); it is "
                             "not released", job_id=continuation)
    api.pipeline.append([api.pipeline.reseal(spec, api.clock())])
    released = store.mark_released(continuation)
    log.info("continuation %s released", continuation, extra={"job_id": continuation})
    return released
