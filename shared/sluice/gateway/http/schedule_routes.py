"""The schedule routes (issue 17): ``/v1/admin/queues/{queue}/schedules[/{name}]``, operator routes.

The queue is in every path and a schedule's name is its queue's, so an IAM policy on
``execute-api:Invoke`` for one queue's paths scopes a caller to that queue's schedules.

Every route goes through ``api_schedules.Schedules``; the POST body passed the gateway's body
guard (``jsonguard``) before pydantic sees it, as an enqueue's does. EventBridge Scheduler's firing
event is the gateway function's own entry (``sluice.entry.gateway_scheduler``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Final

from sluice.core.models import QUEUE_NAME_PATTERN
from sluice.gateway.http.router import APPLICATION_JSON, Body, OpenAPIResponse, Path, Response, Router
from sluice.gateway.schedules import ScheduleList, ScheduleRequest, Schedules, ScheduleView

NameParam = Annotated[str, Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$", description="Schedule name.")]
QueueParam = Annotated[str, Path(pattern=QUEUE_NAME_PATTERN, description="The schedule's queue.")]
BASE: Final = "/v1/admin/queues/<queue>/schedules"
SHAPES: Final = (  # for 405 vs 404 (app._unrouted)
    (re.compile(r"^/v1/admin/queues/(?P<queue>[^/]*)/schedules/?$"), ("GET", "POST")),
    (re.compile(r"^/v1/admin/queues/(?P<queue>[^/]*)/schedules/[^/]+/?$"), ("GET", "DELETE")),
    (re.compile(r"^/v1/admin/queues/(?P<queue>[^/]*)/schedules/[^/]+/(?:pause|resume)/?$"), ("POST",)),
)
CREATE_PATH: Final = re.compile(r"^/v1/admin/queues/[^/]*/schedules/?$")  # the body may hold a whole payload


def add_routes(app: Router, schedules: Callable[[], Schedules],
               problem: Callable[[str], OpenAPIResponse], ok: Callable[[str, type[Any]], OpenAPIResponse],
               common: Mapping[int, OpenAPIResponse]) -> None:
    """Operator routes (``/v1/admin/...``: the gateway checks the caller first), the queue in each path."""
    common = {**common, 403: problem("The caller is not an operator (code NOT_OPERATOR)."),
              404: problem("No deployed worker handles the queue (code NO_ROUTE).")}
    missing = {**common, 404: problem("No such schedule in this queue (SCHEDULE_NOT_FOUND), or no deployed "
                                      "worker handles the queue (NO_ROUTE).")}
    tags = ["schedules"]

    @app.post(BASE, status_code=201, operation_id="create_schedule", tags=tags,
              summary="Create a schedule of the queue: a cron or rate expression and a payload.",
              responses={201: ok("Created.", ScheduleView), **common,
                         400: problem("Bad expression (INVALID_SCHEDULE, UNSUPPORTED_SCHEDULE), faster "
                                      "than once a minute (SCHEDULE_TOO_FREQUENT), or a queue an enqueue "
                                      "refuses."),
                         409: problem("The queue has a schedule with this name (code SCHEDULE_EXISTS)."),
                         413: problem("Payload over the configured limit.")})
    def create_schedule(queue: QueueParam,
                        schedule: Annotated[ScheduleRequest, Body()]) -> Response[ScheduleView]:
        view = schedules().create(queue, schedule)
        return Response(201, APPLICATION_JSON, view,
                        headers={"Location": f"{app.current_event.base_path}/v1/admin/queues/{queue}"
                                                 f"/schedules/{view.name}"})

    @app.get(BASE, operation_id="list_schedules", tags=tags, summary="The queue's schedules.",
             responses={200: ok("The schedules, by name.", ScheduleList), **common})
    def list_schedules(queue: QueueParam) -> ScheduleList:
        return schedules().list(queue)

    @app.get(f"{BASE}/<name>", operation_id="get_schedule", tags=tags,
             summary="One schedule and its next firing.", responses={200: ok("The schedule.", ScheduleView),
                                                                       **missing})
    def get_schedule(queue: QueueParam, name: NameParam) -> ScheduleView:
        return schedules().get(queue, name)

    @app.post(f"{BASE}/<name>/pause", operation_id="pause_schedule", tags=tags,
              summary="Stop firing until resumed.", responses={200: ok("Paused.", ScheduleView), **missing})
    def pause_schedule(queue: QueueParam, name: NameParam) -> ScheduleView:
        return schedules().set_paused(queue, name, True)

    @app.post(f"{BASE}/<name>/resume", operation_id="resume_schedule", tags=tags,
              summary="Fire again.", responses={200: ok("Resumed.", ScheduleView), **missing})
    def resume_schedule(queue: QueueParam, name: NameParam) -> ScheduleView:
        return schedules().set_paused(queue, name, False)

    @app.delete(f"{BASE}/<name>", status_code=204, operation_id="delete_schedule", tags=tags,
                summary="Delete a schedule; jobs it enqueued stay.",
                responses={204: {"description": "Deleted."}, **missing})
    def delete_schedule(queue: QueueParam, name: NameParam) -> Response[Any]:
        schedules().delete(queue, name)
        return Response(204, APPLICATION_JSON, "")
