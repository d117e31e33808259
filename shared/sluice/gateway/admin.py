"""The operator API's use-cases: what ``sluice queue`` and ``sluice dlq`` do, for one queue.

Every call first checks the caller (``authorize``): API Gateway puts the IAM caller it
verified (SigV4) in ``identity.userArn``; a request without one (an API key, or no
authentication) is refused, and so is one whose ARN is not on the operator allow-list
(``SLUICE_OPERATOR_PRINCIPALS``). The list fails closed: empty (the template's default), nobody
is an operator (issue 27, item 3; docs/security.md, "The operator API fails closed"). Checks
run before any write, so a refused or invalid request changes nothing. Redrive goes through
``sluice.gateway.redrive``, the one explicit redrive path.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from sluice.core import knobs, listing, policy
from sluice.core.depth import DepthHistory
from sluice.core.errors import ConfigError, InvalidInput, NoRoute, NotOperator, SluiceError
from sluice.core.lazy import Lazy, resolve
from sluice.core.limits import Limits
from sluice.core.models import (
    DeadJob,
    QueueConfig,
    QueueStats,
    is_reserved_queue,
    validate_job_id,
    validate_public_queue,
)
from sluice.core.ports import DepthLog, JobLog, JobQueue, JobStore, ParkedJobs, ParkedState, TimelineLog
from sluice.core.routes import Route, RouteTable, unrouted_refused
from sluice.gateway.redrive import RedriveReport, Reseal, redrive_all, redrive_one

MAX_LISTED = 10_000
log = logging.getLogger("sluice.gateway.admin")


class Listing(Protocol):
    """The durable registry's queues with their parking state (``sluice.gateway.registry.Reservations``);
    None: none kept."""

    def parked(self) -> dict[str, ParkedState] | None: ...
    def parked_of(self, queue: str) -> ParkedState: ...
    def sensitive_of(self, queue: str) -> tuple[str, ...]: ...
    def set_sensitive(self, queue: str, fields: Sequence[str]) -> None: ...


class SensitiveCopy(Protocol):
    """Where a queue's sensitive fields are kept outside Redis (the durable registry)."""

    def sensitive_of(self, queue: str) -> tuple[str, ...]: ...
    def set_sensitive(self, queue: str, fields: Sequence[str]) -> None: ...


def mark_sensitive(config: knobs.ConfigEngine, durable: SensitiveCopy | None, queue: str,
                   fields: Any, *, by: str = "") -> QueueConfig:
    """``queue``'s sensitive fields, checked before any write, kept in the durable registry first
    (when there is one: a Redis loss cannot unmark them there), then in its config. A write that
    fails between the two leaves more fields redacted, never fewer: the listing redacts the union.
    The operator API and ``sluice queue sensitive`` on Redis both come here. Each change is logged
    with ``by`` (the operator's principal), the fields marked before and after, and a warning when
    it unmarks any: an operator who clears the list by mistake (``[]``, a typo replacing it) shows
    payloads in clear from the next page on, and the log is where the list that was can be read."""
    queue, checked = validate_public_queue(queue), listing.check_sensitive(fields)
    before = _marked_now(config, durable, queue)
    if durable is not None:
        durable.set_sensitive(queue, checked)
    out = knobs.set_sensitive(config, queue, checked)
    unmarked = None if before is None else [f for f in before if f not in checked]
    facts = {"queue": queue, "principal": by, "sensitive_before": before, "sensitive": checked,
             "unmarked": unmarked}
    if unmarked != []:  # some unmarked, or unknown (the list before could not be read)
        log.warning("queue %s: sensitive fields changed by %s: %s -> %s (unmarked: %s)", queue, by or "?",
                    "?" if before is None else before, checked, "?" if unmarked is None else unmarked,
                    extra=facts)
    else:
        log.info("queue %s: sensitive fields changed by %s: %s -> %s", queue, by or "?", before, checked,
                 extra=facts)
    return out


def _marked_now(config: knobs.ConfigEngine, durable: SensitiveCopy | None, queue: str) -> list[str] | None:
    """The fields ``queue`` marks now, config and durable copy together (the listing's union); None
    when either cannot be read (the change goes ahead, logged as unknown)."""
    try:
        found = list(config.get_config(queue).sensitive)
        for field in durable.sensitive_of(queue) if durable is not None else ():
            if field not in found:
                found.append(field)
    except SluiceError:
        return None
    return found


def authorize(principal: str, operators: Sequence[str]) -> None:
    """NotOperator unless ``principal`` is an IAM caller on ``operators``; an empty list admits nobody.

    IAM alone is not enough: a caller whose policy allows ``execute-api:Invoke`` on ``*`` would
    reach every admin route, so the deployment must name its operators (``sluice check`` warns
    while it names none)."""
    if not principal:
        raise NotOperator("the operator API takes IAM-signed (SigV4) requests only; this request "
                          "has no IAM caller (docs/security.md, Operator API)")
    if not operators:
        raise NotOperator("this deployment names no operator (OperatorPrincipalArns is empty), so the "
                          "operator API refuses everyone (docs/security.md, The operator API fails closed)",
                          principal=principal)
    if not policy.is_operator(principal, operators):
        raise NotOperator(f"{principal} is not an operator (OperatorPrincipalArns, "
                          "SLUICE_OPERATOR_PRINCIPALS)", principal=principal)


class Admin:
    def __init__(self, queue: JobQueue, store: JobStore | Lazy[JobStore], log: JobLog | None, *,
                 routes: RouteTable | None = None, refuse_unrouted: bool = True,
                 reseal: Reseal | None = None, limits: Limits | None = None,
                 registry: Listing | None = None,
                 timelines: Callable[[], TimelineLog] | None = None,
                 depths: Callable[[], DepthLog] | None = None,
                 parked: Callable[[], ParkedJobs | None] | None = None) -> None:
        # The jobs table: only a redrive writes it, so the operator function's first call (a queue's
        # stats, say) builds no DynamoDB client for it (cold start).
        self._store = store
        self.queue, self.log, self.reseal = queue, log, reseal
        self.parked = parked  # the parking lot, read for state=parked; None (or it gives None): no lot
        self.timelines = timelines  # a job's timeline (issue 32), built on use; None: this gateway reads none
        self.depths = depths  # a queue's last hour of depths and waits, built on use; None: none read
        self.limits = limits or Limits()  # the deployment's default byte budget, for budget_bytes
        self.registry = registry
        self.routes, self.refuse_unrouted = routes, refuse_unrouted

    @property
    def store(self) -> JobStore:
        return resolve(self._store)

    def check_queue(self, name: str) -> str:
        """The queue's name, public (400 otherwise) and covered by a route when routes exist (404)."""
        queue = validate_public_queue(name)
        if unrouted_refused(self.routes, self._resolve(queue), self.refuse_unrouted):
            raise NoRoute(f"no deployed worker handles queue {queue!r}; nothing was changed", queue=queue)
        return queue

    def pause(self, name: str) -> QueueConfig:
        return knobs.pause(self.queue, self.check_queue(name))

    def resume(self, name: str) -> QueueConfig:
        return knobs.resume(self.queue, self.check_queue(name))

    def set_rate(self, name: str, per_second: Any, burst: Any = None) -> QueueConfig:
        return knobs.set_rate(self.queue, self.check_queue(name), per_second, burst)

    def set_max_in_flight(self, name: str, limit: Any = None, per_group: Any = None) -> QueueConfig:
        return knobs.set_max_in_flight(self.queue, self.check_queue(name), limit, per_group)

    def set_watermarks(self, name: str, high: Any, low: Any = None) -> QueueConfig:
        return knobs.set_watermarks(self.queue, self.check_queue(name), high, low)

    def set_caps(self, name: str, max_delayed: Any = None, max_dead: Any = None,
                 max_bytes: Any = None) -> QueueConfig:
        return knobs.set_caps(self.queue, self.check_queue(name), max_delayed, max_dead, max_bytes)

    def set_sensitive(self, name: str, fields: Any, by: str = "") -> QueueConfig:
        """``mark_sensitive`` for a queue a route covers, logged as changed ``by`` this principal."""
        return mark_sensitive(self.queue, self.registry, self.check_queue(name), fields, by=by)

    def route(self, queue: str) -> dict[str, Any] | None:
        """Where the queue's jobs go: its route's function and owner, or None (the default worker).
        A queue no route covers while routes are known and unrouted queues are refused (one
        registered before its route went, say) goes nowhere: ``refused``, no function."""
        route = self._resolve(queue)
        if route is None:
            return {"function": None, "owner": None, "typed": False, "refused": True} \
                if unrouted_refused(self.routes, route, self.refuse_unrouted) else None
        return {"function": route.function, "owner": route.owner, "typed": queue in route.schemas}

    def _resolve(self, queue: str) -> Route | None:
        return None if self.routes is None else self.routes.resolve(queue)

    def queue_row(self, stats: QueueStats, parked: ParkedState | None = None) -> dict[str, Any]:
        """One queue for ``sluice queues`` and ``sluice top``: its stats (with its byte budget and
        its parking state from the registry), overdue leases and route."""
        if parked is not None:
            stats = stats.model_copy(update={"parked": parked.parked, "parked_at_ms": parked.parked_at_ms})
        return {**self.limits.with_budget(stats).model_dump(mode="json"),
                "overdue_leases": self.queue.overdue_leases(stats.queue), "route": self.route(stats.queue)}

    def queue_stats(self, name: str) -> dict[str, Any]:
        queue = self.check_queue(name)
        parked = self.registry.parked_of(queue) if self.registry is not None else None
        return self.queue_row(self.queue.stats(queue), parked)

    def all_queues(self) -> list[dict[str, Any]]:
        """Every public queue of the durable registry (issue 28: it survives a Redis loss) and of
        Redis's (the cache: it also holds queues registered before the durable one existed), by name."""
        durable = (self.registry.parked() if self.registry is not None else None) or {}
        names = sorted(set(self.queue.queues()) | set(durable))
        return [self.queue_row(self.queue.stats(q), durable.get(q))
                for q in names if not is_reserved_queue(q)]

    def dead_letters(self, name: str, limit: int) -> list[DeadJob]:
        if isinstance(limit, bool) or not 1 <= limit <= MAX_LISTED:
            raise InvalidInput(f"limit must be 1..{MAX_LISTED}, got {limit!r}")
        return self.queue.dead_letters(self.check_queue(name), limit)

    def list_jobs(self, name: str, state: str, limit: int = listing.DEFAULT_PAGE, cursor: str | None = None,
                  prefix: str | None = None) -> listing.JobPage:
        """One page of the queue's jobs in ``state``, newest first, with the payload fields its
        route's schema or its own setting (``set_sensitive``) marks sensitive redacted here, before
        any of it leaves the operator API (so the console, the CLI and their logs never hold them)."""
        queue = self.check_queue(name)
        if listing.check_state(state) == "parked":
            return self.redacted(self.parked_jobs(queue, limit, cursor, prefix))
        page = self.queue.list_jobs(queue, state, limit, cursor, prefix)
        return self.redacted(page)

    def parked_jobs(self, queue: str, limit: int, cursor: str | None, prefix: str | None) -> listing.JobPage:
        """``state=parked``: the queue's records in the relay's parking lot (a DynamoDB table, not
        Redis): those delayed beyond the relay's horizon and those of a held queue. Without a lot
        (a stack that keeps none) nothing is parked: an empty page."""
        limit, prefix = listing.check_limit(limit), listing.check_prefix(prefix)
        place = listing.parse_lot_cursor(cursor)
        lot = self.parked() if self.parked is not None else None
        if lot is None:
            return listing.JobPage(queue=queue, state="parked", jobs=[])
        page = lot.newest(queue, place, limit, prefix)
        jobs = [listing.parked_job(r.job_id, r.value, r.enqueued_at_ms, r.run_at_ms, delayed)
                for r, delayed in page.records]
        return listing.JobPage(queue=queue, state="parked", jobs=jobs, scanned=page.examined,
                               next=listing.encode_lot_cursor(page.next))

    def sensitive(self, queue: str) -> list[tuple[str, ...]]:
        """Every payload path ``queue`` marks sensitive: its schema's and its setting's."""
        marked = set(listing.sensitive_paths(None if self.routes is None else self.routes.schema(queue)))
        marked.update(listing.setting_paths(self.queue.get_config(queue).sensitive))
        if self.registry is not None:
            marked.update(listing.setting_paths(self.registry.sensitive_of(queue)))
        return sorted(marked)

    def redacted(self, page: listing.JobPage) -> listing.JobPage:
        if not page.jobs:
            return page
        paths = self.sensitive(page.queue)
        if not paths:
            return page
        jobs = []
        for job in page.jobs:
            payload, hit = listing.redact(job.payload, paths)
            jobs.append(job.model_copy(update={"payload": payload, "redacted": hit}))
        return page.model_copy(update={"jobs": jobs})

    def timeline(self, name: str, job_id: str) -> list[dict[str, Any]]:
        """The steps the job's workers recorded (``sluice.core.timeline``), oldest first; [] once
        the timeline expired, or when nothing recorded it."""
        queue = self.check_queue(name)
        if self.timelines is None:
            raise ConfigError("this gateway reads no job timelines")
        return self.timelines().read(queue, validate_job_id(job_id))

    def redrive(self, name: str, job_id: str | None, everything: bool) -> RedriveReport:
        queue = self.check_queue(name)
        if (job_id is None) == (not everything):
            raise InvalidInput("give either job_id or all: true")
        if job_id is not None:
            return RedriveReport(moved=redrive_one(self.queue, self.store, queue, validate_job_id(job_id),
                                                   log=self.log, reseal=self.reseal))
        return redrive_all(self.queue, self.store, queue, log=self.log, reseal=self.reseal)

    def purge(self, name: str) -> int:
        return self.queue.purge_dead(self.check_queue(name))

    def depth(self, name: str) -> DepthHistory:
        """The queue's depth samples of the last hour and its jobs' enqueue-to-start waits
        (``sluice.core.depth``: the relay samples); no samples when the relay took none yet."""
        queue = self.check_queue(name)
        if self.depths is None:
            raise ConfigError("this gateway reads no depth history")
        return self.depths().read(queue)
