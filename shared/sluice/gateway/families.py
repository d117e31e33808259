"""The gateway's family use cases: a leased job starts children, and a continuation is released.

Reached only by a direct invoke of the gateway function (``flows.family_event``), never through
API Gateway: the worker and the relay call it (docs/security.md, Jobs that start jobs). Every
child passes the checks a caller's enqueue passes (``sluice.gateway.pipeline``: reserved names, payload
size, priority, admission), and its id is derived, not minted, and keyless (issue 29), so a re-run
parent gets the same children whatever key is current, and a workflow outlives key rotations. The
order of the writes makes a crash at any point safe to repeat:

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
    ChildState,
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


def _legacy_keys(api: FamilyHost, parent_id: str) -> tuple[bytes, ...]:
    """The keys a keyed parent's children may have been derived with before issue 29 (``ids.derive``
    with the parent's own signing key): those this gateway holds under the key id the parent names;
    none for a keyless parent or a retired key. Only to find the children of a parent whose first
    run was before the upgrade."""
    kid = ids.named_key_id(parent_id)
    return tuple(k for k in (api.verifier.key, *api.verifier.previous) if ids.key_id(k) == kid)


def _derivation(api: FamilyHost, store: FamilyStore, parent_id: str,
                request: FamilyRequest) -> tuple[Callable[[str, str], str], dict[str, ChildState]]:
    """How this request's children and continuation are named, and the states of those children
    that have an item (``FamilyStore.children_state``).

    Keyless (``ids.derive_keyless``, issue 29): no job id key goes into a child's id, so a family
    lives through any number of key rotations, and a parent re-run after one gets the same children.
    A parent whose first run, before the upgrade, derived them with its key (``ids.derive``) gets
    those again: its first child or its continuation has an item under that name. The probes ride on
    the read of the children's states that every request makes (one BatchGetItem)."""
    def keyless(queue: str, key: str) -> str:
        return ids.derive_keyless(parent_id, queue, key)

    def keyed_with(signing: bytes) -> Callable[[str, str], str]:
        return lambda queue, key: ids.derive(parent_id, queue, key, signing)

    def probes(name: Callable[[str, str], str]) -> list[str]:  # the first child and the continuation
        first, then = request.jobs[0], request.then
        return [name(first.queue, first.key)] + (
            [] if then is None else [name(then.queue, ids.CONTINUATION_PREFIX + then.key)])

    legacy = {name: probes(name) for name in map(keyed_with, _legacy_keys(api, parent_id))}
    fresh = [keyless(job.queue, job.key) for job in request.jobs]
    known = store.children_state(fresh + [p for found in legacy.values() for p in found])
    for name, found in legacy.items():
        if any(p in known for p in found):
            log.info("parent %s started its children before issue 29: their keyed ids are kept", parent_id,
                     extra={"job_id": parent_id})
            return name, store.children_state([name(job.queue, job.key) for job in request.jobs])
    return keyless, {j: known[j] for j in fresh if j in known}


def _parent(api: FamilyHost, parent_id: str) -> str:
    """``parent_id`` if it has the shape of a job id of a public queue; ``adopt`` then checks that
    it is leased under the request's token, which is what proves it.

    Its id's MAC is not the proof (issue 29): a firing's id is keyless, and a job minted or derived
    with a key since retired (two rotations ago: a long workflow's later generation, a redriven old
    job) no longer verifies, yet holds its lease. Key ids are one character, so a retired key may
    share its key id with a held one: a failed MAC under a key id we hold does not prove a forgery."""
    parent_id = validate_job_id(parent_id)
    minted = api.verifier.verify(parent_id)
    queue = minted.queue if minted is not None else ids.shaped_queue(parent_id)
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


def enqueue_children(api: FamilyHost, request: FamilyRequest, caller: Caller, *,
                     traceparent: str | None = None) -> FamilyAccepted:
    """``caller``: whom the children are for, as the entry verified it (a worker's invoke);
    ``traceparent``: the trace their records carry (the continuation's too, kept until its release)."""
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
    store = families_of(api)
    name, known = _derivation(api, store, parent_id, request)
    specs = [pipeline.spec(job.queue, job, now, None, job_id=name(job.queue, job.key),
                           traceparent=traceparent) for job in request.jobs]
    child_ids = [s.job_id for s in specs]
    then_id = None
    then_spec = None
    if request.then is not None:
        then_id = name(request.then.queue, ids.CONTINUATION_PREFIX + request.then.key)
        then_spec = pipeline.spec(request.then.queue, request.then, now, None, job_id=then_id,
                                  traceparent=traceparent)
        _same_family(store, then_id, child_ids)
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
    # In slot order, not the request's: a worker's round then holds neighbouring slots, which its
    # countdown counts with one write per bucket (worker.countdown). The ids spread the children over
    # Kafka's partitions, so they never ran in the request's order.
    fresh = sorted((s for s in specs if s.job_id not in final), key=lambda s: slots[s.job_id])
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
    store.count_down_many(then_id, slots)
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
        left = store.children_left(continuation)  # ``remaining`` counts the countdown's buckets
        raise InvalidInput(f"continuation {continuation} still waits for "
                           f"{family.remaining if left is None else left} children")
    if family.spec_json is None:
        return False
    spec = JobSpec.model_validate_json(family.spec_json)
    # The spec sat in the jobs table, under a key a continuation team's LeadingKeys reach: only a
    # spec this gateway sealed is appended, sealed anew at its release (its life starts now).
    if api.pipeline.sealed_before_seals(spec, continuation):
        log.warning("continuation %s: its record is of format %s, stored before the upgrade; released "
                    "sealed anew", continuation, spec.schema_version, extra={"job_id": continuation})
    elif not api.pipeline.sealed(spec):
        raise RecordTampered(f"continuation {continuation}: its stored record does not match its seal "
                             "(altered in the jobs table, or sealed by no key of this deployment); it is "
                             "not released", job_id=continuation)
    api.pipeline.append([api.pipeline.reseal(spec, api.clock())])
    released = store.mark_released(continuation)
    log.info("continuation %s released", continuation, extra={"job_id": continuation})
    return released
