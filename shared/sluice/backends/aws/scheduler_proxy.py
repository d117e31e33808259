"""The operator's Scheduler calls, made by the scheduler function outside the VPC (issue 33).

``LambdaScheduleTrigger`` (``ports.ScheduleTrigger``) asks the scheduler function (template.yaml
``SchedulerFunction``, ``sluice.entry.scheduler``) to create, restate or delete one schedule's
Scheduler schedule, over the Lambda endpoint the VPC has anyway; the function holds the Scheduler
rights and the invoke role's PassRole, and calls Scheduler on its public endpoint, so the VPC needs
no Scheduler endpoint. The event names the schedule only (queue, name, expression, paused): what it
targets (the firings function, the invoke role, the group, the dead-letter queue) is the function's
own configuration, never the caller's. ``answer`` is the function's side: the event checked as a
schedule is, then the call; a refusal comes back as its stable code and becomes the same exception.
"""

from __future__ import annotations

from typing import Any, Final

from sluice.backends.aws.clients import OnLambda
from sluice.backends.aws.invoke import invoke_json
from sluice.core.config import Settings
from sluice.core.errors import InvalidInput, SluiceError, StoreError, from_code
from sluice.core.models import validate_public_queue
from sluice.core.ports import ScheduleTrigger
from sluice.core.schedules import Schedule, check_name, parse

KEY: Final = "sluice"
KIND: Final = "scheduler"
OPS: Final = ("create", "set_paused", "delete")
FIELDS: Final = frozenset({KEY, "op", "queue", "name", "expression", "paused"})


def trigger_event(op: str, queue: str, name: str, expression: str = "",
                  paused: bool = False) -> dict[str, Any]:
    return {KEY: KIND, "op": op, "queue": queue, "name": name, "expression": expression, "paused": paused}


def answer(trigger: ScheduleTrigger, event: object) -> dict[str, Any]:
    """Apply one ``trigger_event`` to ``trigger``: ``{"ok": true}``, or ``{"error": {code, message}}``
    for a refusal (an event that is not one, a bad name, queue or expression: nothing is called)."""
    try:
        if not isinstance(event, dict) or event.get(KEY) != KIND or set(event) != FIELDS:
            raise InvalidInput("the scheduler function answers the operator's schedule calls only; "
                               "nothing was called")
        op, queue, name = event["op"], validate_public_queue(event["queue"]), check_name(event["name"])
        if op == "delete":
            trigger.delete(queue, name)
        elif op in OPS:
            expression, paused = event["expression"], event["paused"]
            parse(expression)
            if not isinstance(paused, bool):
                raise InvalidInput(f"paused must be true or false, not {paused!r:.50}; nothing was called")
            schedule = Schedule(name, expression.strip(), queue, None, 0, paused=paused)
            (trigger.create if op == "create" else trigger.set_paused)(schedule)
        else:
            raise InvalidInput(f"unknown schedule call {op!r:.50}; nothing was called")
    except SluiceError as exc:
        return {"error": {"code": exc.code, "message": str(exc)}}
    return {"ok": True}


class LambdaScheduleTrigger(OnLambda):
    """``ports.ScheduleTrigger`` over a synchronous invoke of the scheduler function."""

    def __init__(self, client: Any, function: str) -> None:
        super().__init__(client)
        self.function = function

    @classmethod
    def of(cls, s: Settings, client: Any = None) -> LambdaScheduleTrigger:
        from sluice.backends.aws.clients import lambda_client

        return cls(client or lambda_client(s, read_timeout=20), s.scheduler_function_name)

    def _call(self, event: dict[str, Any]) -> None:
        what = f"{self.function} ({event['op']} {event['queue']}/{event['name']})"
        try:
            reply = invoke_json(self.client, self.function, event, what=what)
        except InvalidInput as exc:
            raise StoreError(str(exc)) from exc
        error = reply.get("error")
        if isinstance(error, dict):
            raise from_code(str(error.get("code") or ""), str(error.get("message") or ""))
        if reply != {"ok": True}:
            raise StoreError(f"{what} answered {reply!r:.200}")

    def create(self, schedule: Schedule) -> None:
        self._call(trigger_event("create", schedule.queue, schedule.name, schedule.expression,
                                 schedule.paused))

    def set_paused(self, schedule: Schedule) -> None:
        self._call(trigger_event("set_paused", schedule.queue, schedule.name, schedule.expression,
                                 schedule.paused))

    def delete(self, queue: str, name: str) -> None:
        self._call(trigger_event("delete", queue, name))
