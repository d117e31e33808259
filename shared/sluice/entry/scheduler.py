"""The scheduler function (template.yaml ``SchedulerFunction``, ``functions/scheduler/app.py``; issue 33).

It makes the operator's EventBridge Scheduler calls: create, restate (pause, resume) and delete one
Sluice schedule's Scheduler schedule (``backends.aws.scheduler_proxy``). It runs outside the VPC, so
it reaches Scheduler's public endpoint and the VPC needs no Scheduler endpoint; the operator asks it
over the Lambda endpoint. Its role alone holds Scheduler's rights on the stack's group and PassRole
of the invoke role; its resource policy admits the operator's role alone (docs/security.md, One
function per caller). What a schedule targets is its own configuration (``SLUICE_FIRINGS_FUNCTION_ARN``,
``SLUICE_SCHEDULER_ROLE_ARN``, ``SLUICE_SCHEDULER_GROUP``, ``SLUICE_FIRINGS_DEAD_LETTER_ARN``).
"""

from __future__ import annotations

from typing import Any


def handler(event: Any, context: Any) -> dict[str, Any]:
    from sluice.backends.aws.scheduler_proxy import answer
    from sluice.entry import root as wiring

    s = wiring.settings()
    trigger = wiring.scheduler_trigger(s)
    if trigger is None:
        return {"error": {"code": "CONFIG_ERROR", "message": "the scheduler function has no firings function "
                                                             "and Scheduler role; nothing was called"}}
    return answer(trigger, event)
