"""Schedules declared in code, registered at deploy (issue 31, item 5): the registrar's side.

``CodeSchedules`` reads what an owner (a team, or ``sluice`` for Sluice's own worker) has in the
schedules table, plans the changes that make it the declared schedules (``core.declared.plan``,
which refuses to take over an operator's schedule or another owner's) and applies them through the
store and trigger the operator API uses (DynamoDB items, EventBridge Scheduler schedules). Planning
reads only; the caller checks everything, routes included, before it applies anything.

Applying is not one transaction (Scheduler is another service): deletions first, then updates,
then creations, each item written before its Scheduler schedule and a creation's item withdrawn if
its Scheduler schedule fails (``ports.create_fired``, as the operator API's create). A registration that
fails part way answers FAILED; CloudFormation's rollback then registers the previous code's
schedules, and any registration converges on its code's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from sluice.core.declared import Declared, SchedulePlan, check_targets, plan
from sluice.core.errors import RegistrationRefused, ScheduleNotFound
from sluice.core.ports import ScheduleTrigger, create_fired
from sluice.core.routes import RouteTable
from sluice.core.schedules import Schedule

log = logging.getLogger(__name__)


class DeclaredScheduleStore(Protocol):
    """The schedules table as registration uses it (``backends.dynamodb.schedules.DynamoScheduleStore``)."""

    def owned(self, owner: str) -> list[Schedule]:
        """Every schedule ``owner``'s code declared (all queues)."""

    def find(self, queue: str, name: str) -> Schedule | None: ...

    def create(self, schedule: Schedule) -> None:
        """``ScheduleExists`` if its queue has the name."""

    def replace(self, schedule: Schedule) -> None:
        """Overwrite the owner's item (``ScheduleNotFound`` unless it exists with that owner)."""

    def delete(self, queue: str, name: str) -> None:
        """``ScheduleNotFound`` if absent."""


@dataclass
class CodeSchedules:
    store: DeclaredScheduleStore
    trigger: ScheduleTrigger | None  # None: nothing to tell (sluice dev's scheduler reads the table)
    clock_ms: Callable[[], int]

    def plan(self, owner: str, declared: Sequence[Declared]) -> SchedulePlan:
        stored = {(s.queue, s.name): s for s in self.store.owned(owner)}
        for d in declared:
            if d.key not in stored:
                found = self.store.find(d.queue, d.name)
                if found is not None:
                    stored[d.key] = found
        return plan(declared, stored.values(), owner, self.clock_ms())

    def apply(self, changes: SchedulePlan) -> None:
        for s in changes.delete:
            self._delete(s.queue, s.name)
        for s in changes.update:
            self.store.replace(s)
            if self.trigger is not None:
                self.trigger.set_paused(s)  # an update restates the whole Scheduler schedule
        for s in changes.create:
            create_fired(self.store, self.trigger, s)

    def remove_all(self, owner: str) -> SchedulePlan:
        """Delete every schedule ``owner``'s code declared (the stack's Delete)."""
        gone = SchedulePlan(delete=tuple(self.store.owned(owner)))
        self.apply(gone)
        return gone

    def _delete(self, queue: str, name: str) -> None:
        if self.trigger is not None:
            self.trigger.delete(queue, name)  # first: a Scheduler schedule without its item fires nothing
        try:
            self.store.delete(queue, name)
        except ScheduleNotFound:  # an operator deleted it meanwhile: what was asked
            log.info("schedule %s/%s was already gone", queue, name)


def plan_declared(schedules: CodeSchedules | None, owner: str, allowed: Sequence[str] | None,
                  declared: Sequence[Declared], routes: RouteTable) -> SchedulePlan:
    """The schedule changes a registration makes (read only); RegistrationRefused, nothing written,
    for a schedule on a queue outside the owner's map (``allowed``; None: Sluice's own worker, which
    has no map) or this registration's ``routes``, a payload its queue's schema refuses, or an
    operator's or another owner's schedule at its name."""
    check_targets(declared, owner, allowed, routes)
    if schedules is None:
        if declared:
            raise RegistrationRefused("the worker declares schedules, but this registration has no "
                                      "schedules table (SLUICE_SCHEDULES_TABLE); nothing was written")
        return SchedulePlan()
    return schedules.plan(owner, declared)
