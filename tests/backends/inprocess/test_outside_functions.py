"""Issue 33: the relay's team map read and the operator's Scheduler calls, made by two functions outside
the VPC (template.yaml ``TeamMapFunction``, ``SchedulerFunction``), asked over Lambda's invoke.

Each caller's adapter (``LambdaTeamMap``, ``LambdaScheduleTrigger``) talks to the function's own entry
(``sluice.entry.teams``, ``sluice.entry.scheduler``) through an invoke answered in process, and the
function calls SSM or EventBridge Scheduler on moto (in-process, no sockets): the same answers as the
direct adapters gave, the same refusals, and nothing called for an event that is not the caller's.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from sluice.backends.aws.scheduler_proxy import LambdaScheduleTrigger, trigger_event
from sluice.backends.aws.team_map import LambdaTeamMap, SsmTeamMap
from sluice.core import schedules
from sluice.core.config import Settings
from sluice.core.errors import BackendUnavailable, ScheduleExists, SluiceError, StoreError
from sluice.entry import scheduler as scheduler_function
from sluice.entry import teams as teams_function

STACK = "sluice-test"
FIRINGS = f"arn:aws:lambda:us-east-1:123456789012:function:{STACK}-firings"
ROLE = f"arn:aws:iam::123456789012:role/{STACK}-SchedulerInvokeRole-ABC"
DLQ = f"arn:aws:sqs:us-east-1:123456789012:{STACK}-firings-dlq"


class InvokedInProcess:
    """Lambda's ``invoke``, answered by the named function's handler in this process (a failure as
    Lambda reports an unhandled error: ``FunctionError`` and the error's message)."""

    def __init__(self, functions: dict[str, Callable[[Any, Any], Any]]) -> None:
        self.functions, self.events = functions, []

    def invoke(self, *, FunctionName: str, InvocationType: str, Payload: bytes) -> dict[str, Any]:
        assert InvocationType == "RequestResponse"
        event = json.loads(Payload)
        self.events.append((FunctionName, event))
        try:
            answer = self.functions[FunctionName](event, None)
        except Exception as exc:  # what Lambda does with any error of the handler
            return {"FunctionError": "Unhandled", "Payload": io.BytesIO(json.dumps(
                {"errorMessage": str(exc), "errorType": type(exc).__name__}).encode())}
        return {"Payload": io.BytesIO(json.dumps(answer).encode())}


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """moto, and a container's configuration read afresh (``root.settings`` is read once a container)."""
    from sluice.entry import root as wiring

    for key in [k for k in os.environ if k.startswith("SLUICE_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("SLUICE_AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    wiring.reset()
    with mock_aws():
        yield
    wiring.reset()


# ------------------------------------------------------------------ the team map


def put_team_map() -> None:
    ssm = boto3.client("ssm", region_name="us-east-1")
    base = f"/sluice/{STACK}/teams/"
    ssm.put_parameter(Name=base + "media", Type="StringList", Value="avatars,thumbs-*")
    ssm.put_parameter(Name=base + "pay", Type="StringList", Value="payments")
    ssm.put_parameter(Name=base + "bad", Type="StringList", Value="sluice-ops")  # never Sluice's queues
    ssm.put_parameter(Name=f"/sluice/other{STACK}/teams/x", Type="StringList", Value="x")


def test_the_relay_reads_the_same_team_map_through_the_team_map_function(
        aws: None, monkeypatch: pytest.MonkeyPatch) -> None:
    put_team_map()
    monkeypatch.setenv("SLUICE_STACK_NAME", STACK)  # the function's own configuration (template.yaml)
    lam = InvokedInProcess({f"{STACK}-teams": teams_function.handler})
    through = LambdaTeamMap(lam, f"{STACK}-teams").read_teams()
    direct = SsmTeamMap.from_settings(Settings(stack_name=STACK, aws_region="us-east-1")).read_teams()
    assert through == direct == {"media": ("avatars", "thumbs-*"), "pay": ("payments",), "bad": ()}
    assert lam.events == [(f"{STACK}-teams", {"sluice": "teams"})]


def test_the_composition_root_asks_the_function_where_one_is_named(aws: None) -> None:
    from sluice.core.lazy import resolve
    from sluice.entry import root as wiring

    named = wiring.team_map(Settings(stack_name=STACK, aws_region="us-east-1",
                                     team_map_function_name=f"{STACK}-teams"))
    direct = wiring.team_map(Settings(stack_name=STACK, aws_region="us-east-1"))
    assert named is not None and direct is not None
    source = resolve(named.source)
    assert isinstance(source, LambdaTeamMap) and source.function == f"{STACK}-teams"
    assert isinstance(resolve(direct.source), SsmTeamMap)


def test_the_team_map_function_answers_the_relays_event_alone(
        aws: None, monkeypatch: pytest.MonkeyPatch) -> None:
    put_team_map()
    monkeypatch.setenv("SLUICE_STACK_NAME", STACK)
    for event in ({"sluice": "describe"}, {"sluice": "teams", "path": "/sluice/other/teams/"}, [], None,
                  {"httpMethod": "GET", "path": "/v1/admin/queues"}):
        answer = teams_function.handler(event, None)
        assert set(answer) == {"error"} and answer["error"]["code"] == "WRONG_FUNCTION", event


@pytest.mark.parametrize(("answer", "teams"), [
    # a bad entry unmaps only its team; a name that is not a team is dropped; Sluice's queues are nobody's
    ({"teams": {"media": ["avatars"], "bad": ["sluice-ops"], "x/y": ["q"], "pay": "payments"}},
     {"media": ("avatars",), "bad": (), "pay": ()}),
    ({"teams": {"media": ["avatars", 5]}}, {"media": ()}),
])
def test_the_relay_checks_every_entry_the_function_answers(answer: Any, teams: dict[str, Any]) -> None:
    lam = InvokedInProcess({"teams": lambda _e, _c: answer})
    assert LambdaTeamMap(lam, "teams").read_teams() == teams


@pytest.mark.parametrize("answer", [{"teams": ["media"]}, {"error": {"code": "WRONG_FUNCTION"}}, {}])
def test_an_answer_that_is_no_team_map_is_a_failed_read(answer: Any) -> None:
    """A failed read raises a SluiceError, so the relay's cache keeps the last map (routes.TtlRead)."""
    with pytest.raises(StoreError):
        LambdaTeamMap(InvokedInProcess({"teams": lambda _e, _c: answer}), "teams").read_teams()


def test_a_failing_team_map_function_is_a_failed_read(aws: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_STACK_NAME", STACK)
    lam = InvokedInProcess({"teams": teams_function.handler})
    monkeypatch.setattr(SsmTeamMap, "read_teams", lambda _self: (_ for _ in ()).throw(
        StoreError("cannot read the team map")))
    with pytest.raises(BackendUnavailable, match="cannot read the team map"):
        LambdaTeamMap(lam, "teams").read_teams()


# ------------------------------------------------------------------ the operator's Scheduler calls


@pytest.fixture
def scheduler_env(aws: None, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The scheduler function's configuration (template.yaml's SchedulerFunction) and moto's Scheduler."""
    for var, value in (("SLUICE_FIRINGS_FUNCTION_ARN", FIRINGS), ("SLUICE_SCHEDULER_ROLE_ARN", ROLE),
                       ("SLUICE_SCHEDULER_GROUP", "default"), ("SLUICE_FIRINGS_DEAD_LETTER_ARN", DLQ)):
        monkeypatch.setenv(var, value)
    return boto3.client("scheduler", region_name="us-east-1")


def nightly(name: str = "nightly", paused: bool = False) -> schedules.Schedule:
    made = schedules.Schedule.create(name, "cron(0 3 * * ? *)", "reports", {"r": 1}, 1_700_000_000_000)
    return schedules.Schedule(**{**made.__dict__, "paused": paused})


def test_the_operators_schedule_calls_go_through_the_scheduler_function(scheduler_env: Any) -> None:
    lam = InvokedInProcess({f"{STACK}-scheduler": scheduler_function.handler})
    trigger = LambdaScheduleTrigger(lam, f"{STACK}-scheduler")
    trigger.create(nightly())
    made = scheduler_env.get_schedule(Name="reports.nightly", GroupName="default")
    assert (made["ScheduleExpression"], made["State"]) == ("cron(0 3 * * ? *)", "ENABLED")
    # What it targets is the function's own configuration, never the operator's.
    assert (made["Target"]["Arn"], made["Target"]["RoleArn"]) == (FIRINGS, ROLE)
    assert made["Target"]["DeadLetterConfig"] == {"Arn": DLQ}
    assert json.loads(made["Target"]["Input"]) == {"sluice_schedule": "nightly", "queue": "reports",
                                                   "scheduled_time": "<aws.scheduler.scheduled-time>"}
    with pytest.raises(SluiceError) as exists:  # refused by Scheduler: the same exception comes back
        trigger.create(nightly())
    assert not isinstance(exists.value, BackendUnavailable)
    trigger.set_paused(nightly(paused=True))
    assert scheduler_env.get_schedule(Name="reports.nightly", GroupName="default")["State"] == "DISABLED"
    trigger.delete("reports", "nightly")
    trigger.delete("reports", "nightly")  # gone already: what was asked
    with pytest.raises(scheduler_env.exceptions.ResourceNotFoundException):
        scheduler_env.get_schedule(Name="reports.nightly", GroupName="default")
    assert [e["op"] for _f, e in lam.events] == ["create", "create", "set_paused", "delete", "delete"]
    assert {f for f, _e in lam.events} == {f"{STACK}-scheduler"}


def test_a_refusal_comes_back_as_its_own_exception() -> None:
    lam = InvokedInProcess({"s": lambda _e, _c: {"error": {"code": "SCHEDULE_EXISTS", "message": "taken"}}})
    with pytest.raises(ScheduleExists, match="taken"):
        LambdaScheduleTrigger(lam, "s").create(nightly())
    for odd in ({}, {"ok": False}, {"ok": True, "also": 1}):
        with pytest.raises(StoreError):
            trigger = LambdaScheduleTrigger(InvokedInProcess({"s": lambda _e, _c, odd=odd: odd}), "s")
            trigger.delete("reports", "x")


def test_the_composition_root_gives_the_operator_the_function_and_the_function_scheduler() -> None:
    from sluice.backends.dynamodb.schedules import SchedulerTrigger
    from sluice.entry import root as wiring

    operator = Settings(aws_region="us-east-1", scheduler_function_name=f"{STACK}-scheduler")
    assert isinstance(wiring.schedule_trigger(operator), LambdaScheduleTrigger)
    itself = Settings(aws_region="us-east-1", firings_function_arn=FIRINGS, scheduler_role_arn=ROLE)
    assert isinstance(wiring.schedule_trigger(itself), SchedulerTrigger)
    assert wiring.schedule_trigger(Settings(aws_region="us-east-1")) is None  # sluice dev's table alone


HOSTILE = [
    ("not a call", {"httpMethod": "POST", "path": "/v1/admin/queues/reports/schedules"}),
    ("another target", {**trigger_event("create", "reports", "evil", "rate(1 hour)"),
                        "target": "arn:aws:lambda:us-east-1:999999999999:function:theirs"}),
    ("a role of its own", {**trigger_event("create", "reports", "evil", "rate(1 hour)"), "RoleArn": ROLE}),
    ("Sluice's queue", trigger_event("create", "sluice-ops", "evil", "rate(1 hour)")),
    ("a bad name", trigger_event("create", "reports", "../evil", "rate(1 hour)")),
    ("a bad expression", trigger_event("create", "reports", "evil", "at(2030-01-01T00:00:00)")),
    ("a rate too fast", trigger_event("create", "reports", "evil", "rate(1 second)")),
    ("paused as text", {**trigger_event("create", "reports", "evil", "rate(1 hour)"), "paused": "no"}),
    ("an unknown call", trigger_event("tag", "reports", "evil", "rate(1 hour)")),
    ("no kind", {k: v for k, v in trigger_event("create", "reports", "evil", "rate(1 hour)").items()
                 if k != "sluice"}),
]


@pytest.mark.parametrize(("what", "event"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_the_scheduler_function_refuses_what_is_not_one_schedule_call_and_calls_nothing(
        scheduler_env: Any, what: str, event: Any) -> None:
    answer = scheduler_function.handler(event, None)
    assert set(answer) == {"error"} and answer["error"]["code"] not in ("", "CONFIG_ERROR"), (what, answer)
    assert scheduler_env.list_schedules()["Schedules"] == [], what


def test_the_scheduler_function_without_its_configuration_calls_nothing(aws: None) -> None:
    """Without the firings function and the invoke role there is nothing to target: refused, said."""
    answer = scheduler_function.handler(trigger_event("create", "reports", "nightly", "rate(1 hour)"), None)
    assert answer["error"]["code"] == "CONFIG_ERROR"
    assert boto3.client("scheduler", region_name="us-east-1").list_schedules()["Schedules"] == []
