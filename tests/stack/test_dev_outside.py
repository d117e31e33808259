"""`sluice dev --profile small` with the two paths issue 33 moved out of the VPC: the relay's team map read
(TeamMapFunction, which reads SSM on the moto server) and the operator's Scheduler calls
(SchedulerFunction, which calls the moto server's EventBridge Scheduler). Each is invoked through the local
Lambda service, which enforces the template's resource policies and the callers' own policies.

One stack: the default worker (sluice_dev.examples) and team "words" (sluice_dev.examples_team), behind the
small profile's HTTP API (payload 2.0 events).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluice_dev.local import access as iam
from sluice_dev.local.access import AccessDenied
from sluice_dev.local.api_server import LOCAL_CALLER_HEADER, LOCAL_OPERATOR
from sluice_dev.local.dev import (
    FIRINGS_FUNCTION,
    MOTO_SCHEDULE_GROUP,
    SCHEDULER_FUNCTION,
    STACK_NAME,
    TEAM_MAP_FUNCTION,
    DevOptions,
    DevStack,
)
from tests.stack.gateway_http import http
from tests.stack.test_dev_teams import started, wait_job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
INVOKED: list[tuple[str, dict[str, Any]]] = []  # (function, event) of every finished invocation
OPERATOR = {LOCAL_CALLER_HEADER: LOCAL_OPERATOR}
RELAY_ROLE = iam.role_arn(STACK_NAME, "RelayFunctionRole")  # the relay's role as the local stack names it


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DevStack, dict[str, Any]]]:
    state: Path = tmp_path_factory.mktemp("outside") / ".sluice"
    dev = DevStack(DevOptions(state_dir=state, workers=1, log_level="WARNING", safety_net_every_s=600,
                              profile="small", team_workers=(("words", "sluice_dev.examples_team"),),
                              history=False))
    yield from started(dev, INVOKED)


def test_the_functions_outside_the_vpc_run_locally_as_the_template_configures_them(
        stack: tuple[DevStack, dict[str, Any]]) -> None:
    dev, _ = stack
    assert dev.api_payload == "2.0"  # the small profile's HTTP API
    assert dev.function("RelayFunction").env["SLUICE_TEAM_MAP_FUNCTION_NAME"] == TEAM_MAP_FUNCTION
    operator = dev.function("OperatorFunction").env
    assert operator["SLUICE_SCHEDULER_FUNCTION_NAME"] == SCHEDULER_FUNCTION
    assert not {"SLUICE_SCHEDULER_ROLE_ARN", "SLUICE_FIRINGS_FUNCTION_ARN"} & set(operator)
    scheduler = dev.function("SchedulerFunction").env
    assert scheduler["SLUICE_SCHEDULER_GROUP"] == MOTO_SCHEDULE_GROUP
    assert scheduler["SLUICE_FIRINGS_FUNCTION_ARN"].endswith(f":function:{FIRINGS_FUNCTION}")


def test_the_relay_dispatches_a_teams_queue_by_the_map_the_team_map_function_reads(
        stack: tuple[DevStack, dict[str, Any]]) -> None:
    dev, endpoints = stack
    gateway = endpoints["gateway_url"]
    code, words = http("POST", f"{gateway}/v1/queues/word-count/jobs", {"payload": {"text": "one two three"}})
    assert code == 202, words
    done = wait_job(gateway, words["job_id"])
    assert done["status"] == "succeeded", done
    assert done["result"]["function"] == "sluice-worker-words"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        relayed = {(fn, q) for fn, e in list(INVOKED) if e.get("source") == "relay"
                   for q in e.get("queues", [])}
        if ("sluice-worker-words", "word-count") in relayed:
            break
        time.sleep(0.2)
    # The relay followed the team's route: only the team map lets it (routes.CachedRouteLookup), and the
    # relay read the map by invoking the team map function, which the local Lambda service admitted.
    assert ("sluice-worker-words", "word-count") in relayed, INVOKED
    asked = [e for fn, e in list(INVOKED) if fn == TEAM_MAP_FUNCTION]
    assert asked and all(e == {"sluice": "teams"} for e in asked), asked
    assert dev.lambdas is not None  # nobody but the relay may ask it (its resource policy)
    with pytest.raises(AccessDenied):
        dev.lambdas.invoke(TEAM_MAP_FUNCTION, {"sluice": "teams"}, caller=dev.scheduler_caller())
    answered = dev.lambdas.invoke(TEAM_MAP_FUNCTION, {"sluice": "teams"}, caller=iam.Caller(RELAY_ROLE))
    assert answered.done.wait(30) and answered.error is None, answered.error
    assert set(answered.result["teams"]) == {"words"}, answered.result  # the team's map entry, from SSM
    assert "word-count" in answered.result["teams"]["words"], answered.result


def test_the_operators_schedule_routes_create_pause_and_delete_through_the_scheduler_function(
        stack: tuple[DevStack, dict[str, Any]]) -> None:
    import boto3

    dev, endpoints = stack
    assert dev.settings is not None
    moto = boto3.client("scheduler", region_name="us-east-1", endpoint_url=dev.settings.aws_endpoint_url)
    base = f"{endpoints['gateway_url']}/v1/admin/queues/echo/schedules"
    code, made = http("POST", base, {"name": "hourly", "expression": "rate(1 hour)", "payload": {"hi": 1}},
                      OPERATOR)
    assert code == 201, made
    schedule = moto.get_schedule(Name="echo.hourly", GroupName=MOTO_SCHEDULE_GROUP)
    assert (schedule["State"], schedule["ScheduleExpression"]) == ("ENABLED", "rate(1 hour)")
    assert schedule["Target"]["Arn"].endswith(f":function:{FIRINGS_FUNCTION}")
    assert schedule["Target"]["RoleArn"] == dev.scheduler_caller().principal
    code, again = http("POST", base, {"name": "hourly", "expression": "rate(1 hour)", "payload": {}},
                       OPERATOR)
    assert (code, again["code"]) == (409, "SCHEDULE_EXISTS"), again
    code, paused = http("POST", f"{base}/hourly/pause", None, OPERATOR)
    assert code == 200 and paused["paused"] is True, paused
    assert moto.get_schedule(Name="echo.hourly", GroupName=MOTO_SCHEDULE_GROUP)["State"] == "DISABLED"
    code, _ = http("DELETE", f"{base}/hourly", None, OPERATOR)
    assert code == 204
    with pytest.raises(moto.exceptions.ResourceNotFoundException):
        moto.get_schedule(Name="echo.hourly", GroupName=MOTO_SCHEDULE_GROUP)
    calls = [e.get("op") for fn, e in list(INVOKED) if fn == SCHEDULER_FUNCTION]
    assert calls[:3] == ["create", "set_paused", "delete"], calls
    assert dev.lambdas is not None  # nobody but the operator may ask it: the relay's role is refused
    for caller in (iam.Caller(RELAY_ROLE), dev.scheduler_caller()):
        with pytest.raises(AccessDenied):
            dev.lambdas.invoke(SCHEDULER_FUNCTION, {"sluice": "scheduler", "op": "delete", "queue": "echo",
                                                    "name": "hourly", "expression": "", "paused": False},
                               caller=caller)
