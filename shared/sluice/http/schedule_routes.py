"""The schedule routes (issue 17): ``/v1/schedules``, one block so other route sets stay apart.

Every route goes through ``api_schedules.Schedules``; the POST body passed the gateway's body
guard (``jsonguard``) before pydantic sees it, as an enqueue's does. The Scheduler's firing event
(``fire_event``) is the gateway function's thin entry for EventBridge Scheduler's invoke.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.openapi.params import Body, Path
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse

from sluice.api_schedules import ScheduleList, ScheduleRequest, Schedules, ScheduleView
from sluice.errors import InvalidSchedule
from sluice.schedules import FIRE_KEY, SCHEDULED_TIME

NameParam = Annotated[str, Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$", description="Schedule name.")]


def add_routes(app: APIGatewayRestResolver, schedules: Callable[[], Schedules],
               problem: Callable[[str], OpenAPIResponse], ok: Callable[[str, type[Any]], OpenAPIResponse],
               common: Mapping[int, OpenAPIResponse]) -> None:
    missing = {**common, 404: problem("No such schedule (code SCHEDULE_NOT_FOUND).")}

    @app.post("/v1/schedules", status_code=201, operation_id="create_schedule", tags=["schedules"],
              summary="Create a schedule: a cron or rate expression, a queue and a payload.",
              responses={201: ok("Created.", ScheduleView), **common,
                         400: problem("Bad expression (INVALID_SCHEDULE, UNSUPPORTED_SCHEDULE), faster "
                                      "than once a minute (SCHEDULE_TOO_FREQUENT), or a queue an enqueue "
                                      "refuses."),
                         404: problem("No deployed worker handles the queue (code NO_ROUTE)."),
                         409: problem("A schedule with this name exists (code SCHEDULE_EXISTS)."),
                         413: problem("Payload over the configured limit.")})
    def create_schedule(schedule: Annotated[ScheduleRequest, Body()]) -> Response[ScheduleView]:
        view = schedules().create(schedule)
        return Response(201, content_types.APPLICATION_JSON, view,
                        headers={"Location": f"/v1/schedules/{view.name}"})

    @app.get("/v1/schedules", operation_id="list_schedules", tags=["schedules"], summary="Every schedule.",
             responses={200: ok("The schedules, by name.", ScheduleList), **common})
    def list_schedules() -> ScheduleList:
        return schedules().list()

    @app.get("/v1/schedules/<name>", operation_id="get_schedule", tags=["schedules"],
             summary="One schedule and its next firing.", responses={200: ok("The schedule.", ScheduleView),
                                                                       **missing})
    def get_schedule(name: NameParam) -> ScheduleView:
        return schedules().get(name)

    @app.post("/v1/schedules/<name>/pause", operation_id="pause_schedule", tags=["schedules"],
              summary="Stop firing until resumed.", responses={200: ok("Paused.", ScheduleView), **missing})
    def pause_schedule(name: NameParam) -> ScheduleView:
        return schedules().set_paused(name, True)

    @app.post("/v1/schedules/<name>/resume", operation_id="resume_schedule", tags=["schedules"],
              summary="Fire again.", responses={200: ok("Resumed.", ScheduleView), **missing})
    def resume_schedule(name: NameParam) -> ScheduleView:
        return schedules().set_paused(name, False)

    @app.delete("/v1/schedules/<name>", status_code=204, operation_id="delete_schedule", tags=["schedules"],
                summary="Delete a schedule; jobs it enqueued stay.",
                responses={204: {"description": "Deleted."}, **missing})
    def delete_schedule(name: NameParam) -> Response[Any]:
        schedules().delete(name)
        return Response(204, content_types.APPLICATION_JSON, "")


def is_fire_event(event: Mapping[str, Any]) -> bool:
    return FIRE_KEY in event and "httpMethod" not in event


def scheduled_ms(text: object) -> int:
    """Scheduler's ``<aws.scheduler.scheduled-time>`` (ISO 8601, UTC) as ms."""
    if not isinstance(text, str) or text == SCHEDULED_TIME:
        raise InvalidSchedule(f"invalid scheduled_time {text!r}: an ISO 8601 time is expected")
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidSchedule(f"invalid scheduled_time {text!r}: an ISO 8601 time is expected") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return int(moment.timestamp() * 1000)


def fire_event(schedules: Schedules, event: Mapping[str, Any]) -> dict[str, Any]:
    """EventBridge Scheduler's invoke: enqueue the firing's job (``Schedules.fire``'s errors propagate)."""
    name = event.get(FIRE_KEY)
    at = scheduled_ms(event.get("scheduled_time"))
    accepted = schedules.fire(name if isinstance(name, str) else "", at)
    if accepted is None:
        return {"statusCode": 200, "skipped": "paused"}
    return {"statusCode": 202, "job_id": accepted.job_id}
