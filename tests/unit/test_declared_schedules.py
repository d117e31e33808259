"""Schedules in code (issue 31, item 5): ``app.schedule`` next to the handlers, registered at deploy.

The declaration and its checks, the worker's describe answer and its digest, the pure plan (create,
update, delete; an operator's or another owner's schedule never taken over), and the team registrar
applying it with fakes: a hostile team's code declaring a schedule on another team's queue is
refused with the reason, and nothing is written. The same on DynamoDB (moto server) is in
tests/backends/test_declared_schedules.py, and through the local stack's registrar function in
tests/stack/test_dev_teams.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

import sluice
from sluice.core import declared as code
from sluice.core.errors import InvalidInput, InvalidSchedule, RegistrationRefused
from sluice.core.routes import Route, RouteTable
from sluice.core.schedules import Schedule
from sluice.entry import registrar as registrar_entry
from sluice.entry import worker
from sluice.registrar.register import Registrar
from sluice.registrar.schedules import CodeSchedules
from sluice_dev.fakes import FakeDescriber, FakeRouteStore, FakeScheduleStore, FakeTrigger

MEDIA = "st-worker-media"
CFN_URL = "https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/x?sig=1"
SCHEMA = {"type": "object", "properties": {"size": {"type": "integer"}}, "required": ["size"]}
NIGHTLY = {"name": "nightly", "expression": "cron(0 3 * * ? *)", "queue": "avatars", "payload": {"size": 1}}


class Report(BaseModel):
    kind: str
    days: int = 1


def app_with(*schedules: tuple[str, str, str, Any]) -> sluice.Worker:
    app = sluice.Worker()
    app.register("avatars", lambda job, ctx: None)
    for name, expression, queue, payload in schedules:
        app.schedule(name, expression, queue=queue, payload=payload)
    return app


# -- the declaration -------------------------------------------------------------------------------

def test_a_schedule_is_declared_next_to_the_handlers_and_described_with_them() -> None:
    app = app_with(("nightly", " cron(0 3 * * ? *) ", "avatars", Report(kind="daily")),
                   ("hourly", "rate(1 hour)", "avatars", None))
    assert [d.key for d in app.declared_schedules()] == [("avatars", "hourly"), ("avatars", "nightly")]
    answer = worker.describe(app)
    assert answer["schedules"] == [
        {"name": "hourly", "expression": "rate(1 hour)", "queue": "avatars", "payload": None},
        {"name": "nightly", "expression": "cron(0 3 * * ? *)", "queue": "avatars",
         "payload": {"kind": "daily", "days": 1}}]  # a pydantic model, as JSON
    assert answer["digest"] == code.digest(["avatars"], {}, app.declared_schedules())
    assert app.bind().declared_schedules() == app.declared_schedules()
    json.dumps(answer)  # the describe answer travels as JSON


@pytest.mark.parametrize(("args", "why"), [
    (("bad name", "rate(1 hour)", "avatars", None), "invalid schedule name"),
    (("n", "rate(30 seconds)", "avatars", None), "faster than once a minute"),
    (("n", "cron(0 3 * * * *)", "avatars", None), "exactly one of day-of-month"),
    (("n", "rate(1 hour)", "sluice-ops", None), "reserved"),
    (("n", "rate(1 hour)", "avatars", {1, 2}), "not JSON"),
    (("n", "rate(1 hour)", "avatars", "x" * (code.MAX_PAYLOAD_BYTES + 1)), "bytes of JSON"),
    (("n" * 60, "rate(1 hour)", "avatars", None), "at most 63 characters"),
])
def test_a_declaration_is_checked_where_it_is_written(args: tuple[str, str, str, Any], why: str) -> None:
    name, expression, queue, payload = args
    with pytest.raises(InvalidInput, match=why):
        sluice.Worker().schedule(name, expression, queue=queue, payload=payload)


def test_a_schedule_declared_twice_is_refused() -> None:
    app = app_with(("nightly", "rate(1 day)", "avatars", None))
    with pytest.raises(InvalidInput, match="already declared"):
        app.schedule("nightly", "rate(2 days)", queue="avatars")
    with pytest.raises(InvalidSchedule, match="declared twice"):
        code.from_answer([NIGHTLY, NIGHTLY])


def test_the_digest_changes_with_what_a_registration_takes_from_the_code_and_only_with_it() -> None:
    one = code.Declared.of("nightly", "cron(0 3 * * ? *)", "avatars", {"size": 1})
    other = code.Declared.of("hourly", "rate(1 hour)", "avatars")
    base = code.digest(["avatars"], {}, [one, other])
    assert code.digest(["avatars", "avatars"], {}, [other, one]) == base  # order and repeats
    assert code.digest(["avatars"], {}, [one]) != base  # a schedule removed
    assert code.digest(["avatars"], {}, [code.Declared.of("nightly", "cron(0 4 * * ? *)", "avatars",
                                                           {"size": 1}), other]) != base
    assert code.digest(["avatars"], {}, [code.Declared.of("nightly", "cron(0 3 * * ? *)", "avatars",
                                                           {"size": 2}), other]) != base
    assert code.digest(["avatars", "thumbs"], {}, [one, other]) != base  # a queue
    assert code.digest(["avatars"], {"avatars": SCHEMA}, [one, other]) != base  # a schema


# -- the plan --------------------------------------------------------------------------------------

def test_the_plan_creates_updates_and_deletes_the_owners_schedules_only() -> None:
    keep = code.Declared.of("keep", "rate(1 hour)", "avatars", {"a": 1})
    retimed = code.Declared.of("retimed", "rate(2 hours)", "avatars")
    repaid = code.Declared.of("repaid", "rate(1 hour)", "avatars", {"b": 2})
    new = code.Declared.of("new", "rate(1 day)", "avatars")
    stored = [keep.stored("media", 10), retimed.stored("media", 10),
              Schedule("repaid", "rate(1 hour)", "avatars", {"b": 1}, 10, paused=True, owner="media"),
              Schedule("gone", "rate(1 hour)", "avatars", None, 10, owner="media"),
              Schedule("ops", "rate(1 hour)", "avatars", None, 10)]  # the operator's: not the team's
    stored[1] = Schedule("retimed", "rate(1 hour)", "avatars", None, 10, owner="media")
    changes = code.plan([keep, retimed, repaid, new], stored, "media", now_ms=99)
    assert changes.create == (new.stored("media", 99),)
    assert changes.update == (retimed.stored("media", 99),  # a new expression starts its phase now
                              repaid.stored("media", 10, paused=True))  # an operator's pause stays
    assert [s.name for s in changes.delete] == ["gone"]
    assert changes.data([keep, new]) == {"Schedules": "avatars/keep,avatars/new",
                                         "SchedulesRemoved": "avatars/gone"}


@pytest.mark.parametrize(("owner", "by"), [("", "the operator API"), ("pay", "team 'pay'")])
def test_the_plan_never_takes_over_another_owners_schedule(owner: str, by: str) -> None:
    d = code.Declared.of("nightly", "rate(1 day)", "avatars")
    with pytest.raises(RegistrationRefused, match=f"created by {by}.*schedules delete avatars nightly"):
        code.plan([d], [Schedule("nightly", "rate(1 day)", "avatars", None, 1, owner=owner)], "media", 5)


def test_a_declared_schedule_must_target_a_queue_the_team_owns_and_routes() -> None:
    routes = RouteTable([Route("avatars", MEDIA, "media", {"avatars": SCHEMA}),
                         Route("thumbs-*", MEDIA, "media")])
    ok = [code.Declared.of("a", "rate(1 day)", "avatars", {"size": 3}),
          code.Declared.of("t", "rate(1 day)", "thumbs-big")]
    code.check_targets(ok, "media", ("avatars", "thumbs-*"), routes)
    with pytest.raises(RegistrationRefused, match="'payments', which the team map does not give team"):
        code.check_targets([code.Declared.of("x", "rate(1 day)", "payments")], "media", ("avatars",), routes)
    with pytest.raises(RegistrationRefused, match="no handler of this worker, and no pattern, routes"):
        code.check_targets([code.Declared.of("x", "rate(1 day)", "avatars-old")], "media", ("avatars*",),
                           routes)
    with pytest.raises(RegistrationRefused, match=r"does not match queue 'avatars'.s schema"):
        code.check_targets([code.Declared.of("x", "rate(1 day)", "avatars", {"size": "big"})], "media",
                           ("avatars",), routes)


# -- the registrar ---------------------------------------------------------------------------------

class Team:
    """Team media's registrar on fakes: its worker's describe answer can be changed between deploys."""

    def __init__(self, *schedules: dict[str, Any], queues: str = "avatars,thumbs-*") -> None:
        self.routes, self.table, self.trigger = FakeRouteStore(), FakeScheduleStore(), FakeTrigger()
        self.describer = FakeDescriber({})
        self.code(*schedules)
        self.now = 1_000
        self.registrar = self.build(queues, CodeSchedules(self.table, self.trigger, lambda: self.now))

    def build(self, queues: str, schedules: CodeSchedules) -> Registrar:
        return Registrar.of("st", "media", queues, self.routes, self.describer, schedules)

    def code(self, *schedules: dict[str, Any]) -> None:
        self.describer.answers[MEDIA] = {"queues": ["avatars"], "schemas": {"avatars": SCHEMA},
                                         "schedules": list(schedules)}

    resource: dict[str, Any] = {"LogicalResourceId": "TeamRoutes",
                                "StackId": "arn:aws:cloudformation:us-east-1:1:stack/media/1",
                                "PhysicalResourceId": "sluice-registrar:media:st-worker-media"}
    props: dict[str, Any] = {}

    def deploy(self, kind: str = "Update", **props: Any) -> dict[str, Any]:
        event: dict[str, Any] = {
            "RequestType": kind, "ResponseURL": CFN_URL, "RequestId": "r1",
            "ResourceType": "Custom::SluiceRoutes", **self.resource,
            "ResourceProperties": {"ServiceToken": "arn:aws:lambda:x", **self.props, **props}}
        return registrar_entry.respond(event, self.registrar, lambda url, data: None)

    def stored(self) -> dict[tuple[str, str], tuple[str, Any, str]]:
        return {k: (s.expression, s.payload, s.owner) for k, s in self.table.items.items()}


def test_a_deploy_creates_updates_and_removes_the_codes_schedules() -> None:
    team = Team(NIGHTLY)
    ops = Schedule("ops", "rate(1 hour)", "avatars", None, 5)  # created through the operator API
    team.table.create(ops)
    body = team.deploy("Create")
    assert body["Status"] == "SUCCESS", body
    assert body["Data"]["Schedules"] == "avatars/nightly"
    assert team.stored()[("avatars", "nightly")] == ("cron(0 3 * * ? *)", {"size": 1}, "media")
    assert team.table.items["avatars", "nightly"].start_ms == 1_000
    assert ("create", "nightly") in team.trigger.calls

    team.now = 2_000
    team.code({**NIGHTLY, "payload": {"size": 2}}, {"name": "hourly", "expression": "rate(1 hour)",
                                                   "queue": "avatars", "payload": {"size": 0}})
    assert team.deploy()["Status"] == "SUCCESS"
    assert team.stored()[("avatars", "nightly")][1] == {"size": 2}
    assert team.table.items["avatars", "nightly"].start_ms == 1_000  # the same expression: the same phase
    assert ("avatars", "hourly") in team.stored()

    team.code({"name": "hourly", "expression": "rate(1 hour)", "queue": "avatars", "payload": {"size": 0}})
    body = team.deploy()
    assert body["Data"]["SchedulesRemoved"] == "avatars/nightly"
    assert set(team.stored()) == {("avatars", "hourly"), ("avatars", "ops")}
    assert ("delete", "nightly") in team.trigger.calls

    body = team.deploy("Delete")  # the stack deleted: its schedules go, the operator's stays
    assert body["Status"] == "SUCCESS" and body["Data"]["SchedulesRemoved"] == "avatars/hourly"
    assert set(team.stored()) == {("avatars", "ops")}
    assert team.table.items["avatars", "ops"] == ops


def test_a_hostile_teams_code_scheduling_onto_another_teams_queue_is_refused_and_writes_nothing() -> None:
    team = Team(NIGHTLY)
    assert team.deploy("Create")["Status"] == "SUCCESS"
    routes, stored, writes = dict(team.routes.routes), team.stored(), team.table.writes
    team.code(NIGHTLY, {"name": "steal", "expression": "rate(1 minute)", "queue": "payments", "payload": {}})
    body = team.deploy()
    assert body["Status"] == "FAILED"
    assert "schedule payments/steal targets queue 'payments', which the team map does not give team " \
           "'media'" in body["Reason"]
    assert "nothing was written" in body["Reason"]
    assert team.routes.routes == routes and team.stored() == stored and team.table.writes == writes


def test_a_deploy_refuses_to_take_over_an_operators_schedule_and_writes_nothing() -> None:
    team = Team(NIGHTLY)
    team.table.create(Schedule("nightly", "rate(1 day)", "avatars", None, 5))
    body = team.deploy("Create")
    assert body["Status"] == "FAILED" and "created by the operator API" in body["Reason"]
    assert team.routes.routes == {}
    assert team.stored() == {("avatars", "nightly"): ("rate(1 day)", None, "")}


def test_a_failed_scheduler_create_leaves_no_item() -> None:
    team = Team(NIGHTLY)
    team.trigger.fail = RuntimeError("scheduler down")
    body = team.deploy("Create")
    assert body["Status"] == "FAILED" and "scheduler down" in body["Reason"]
    assert team.stored() == {}


def test_the_declarations_digest_must_be_the_codes() -> None:
    team = Team(NIGHTLY)
    right = code.digest(["avatars"], {"avatars": SCHEMA}, code.from_answer([NIGHTLY]))
    body = team.deploy("Create", Declarations="sha256-0000")
    assert body["Status"] == "FAILED" and f"the worker's code declares {right!r}" in body["Reason"]
    assert team.stored() == {} and team.routes.routes == {}
    assert team.deploy("Create", Declarations=right)["Status"] == "SUCCESS"


def test_a_registrar_without_a_schedules_table_refuses_declared_schedules() -> None:
    describer = FakeDescriber({MEDIA: {"queues": ["avatars"], "schemas": {}, "schedules": [NIGHTLY]}})
    reg = Registrar.of("st", "media", "avatars", FakeRouteStore(), describer)
    with pytest.raises(RegistrationRefused, match="no schedules table"):
        reg.apply({"RequestType": "Create", "ResourceProperties": {}})
    describer.answers[MEDIA] = {"queues": ["avatars"], "schemas": {}}  # none declared: routes as before
    assert reg.apply({"RequestType": "Create", "ResourceProperties": {}})[1]["Schedules"] == ""


# -- Sluice's default worker (template.yaml's DefaultWorkerRoutes, answered by the worker itself) ---

def default_event(kind: str, **props: Any) -> dict[str, Any]:
    e = {"RequestType": kind, "ResponseURL": CFN_URL, "RequestId": "r1", "LogicalResourceId": "Routes",
         "StackId": "arn:aws:cloudformation:us-east-1:1:stack/sluice/1",
         "ResourceType": "Custom::SluiceRoutes",
         "ResourceProperties": {"ServiceToken": "arn", "Owner": "sluice", **props}}
    if kind != "Create":
        e["PhysicalResourceId"] = "sluice-routes:sluice:sluice-worker"
    return e


def test_sluices_default_worker_registers_its_codes_schedules_with_its_routes() -> None:
    from sluice.entry import routes_resource

    table, trigger = FakeScheduleStore(), FakeTrigger()
    sync = CodeSchedules(table, trigger, lambda: 7)
    app = app_with(("nightly", "cron(0 3 * * ? *)", "avatars", {"size": 1}))
    routes = FakeRouteStore()
    right = worker.describe(app)["digest"]
    body = routes_resource.respond(default_event("Create", Declarations=right), "sluice-worker", app, routes,
                                   lambda url, data: None, sync)
    assert body["Status"] == "SUCCESS", body
    assert table.items["avatars", "nightly"] == Schedule("nightly", "cron(0 3 * * ? *)", "avatars",
                                                         {"size": 1}, 7, owner="sluice")
    wrong = routes_resource.respond(default_event("Update", Declarations="sha256-1"), "sluice-worker", app,
                                    routes, lambda url, data: None, sync)
    assert wrong["Status"] == "FAILED" and "Declarations is 'sha256-1'" in wrong["Reason"]
    off_route = app_with(("x", "rate(1 day)", "elsewhere", None))
    body = routes_resource.respond(default_event("Update"), "sluice-worker", off_route, routes,
                                   lambda url, data: None, sync)
    assert body["Status"] == "FAILED" and "routes queue 'elsewhere'" in body["Reason"]
    body = routes_resource.respond(default_event("Delete"), "sluice-worker", app, routes,
                                   lambda url, data: None, sync)
    assert body["Data"]["SchedulesRemoved"] == "avatars/nightly" and table.items == {}
    no_table = routes_resource.respond(default_event("Create"), "sluice-worker", app, FakeRouteStore(),
                                       lambda url, data: None)
    assert no_table["Status"] == "FAILED"
    assert "Sluice's default worker does not register" in no_table["Reason"]


def test_the_schedules_example_in_docs_worker_md_runs() -> None:
    from pathlib import Path

    from sluice.core.routes import routes_for

    text = (Path(__file__).parents[2] / "docs" / "worker.md").read_text()
    example = text.split("### Schedules in code", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    app = sluice.Worker()
    exec(compile(example, "docs/worker.md", "exec"), {"app": app, "sluice": sluice, "BaseModel": BaseModel})
    answer = worker.describe(app)
    assert answer["queues"] == ["reports"]
    assert answer["schedules"] == [
        {"name": "heartbeat", "expression": "rate(5 minutes)", "queue": "reports",
         "payload": {"kind": "ping"}},
        {"name": "nightly-report", "expression": "cron(0 3 * * ? *)", "queue": "reports",
         "payload": {"kind": "daily"}}]
    routes = RouteTable(routes_for("st-worker-media", "media", answer["queues"], {}))
    code.check_targets(code.from_answer(answer["schedules"]), "media", ("reports",), routes)


def test_sluice_routes_digest_prints_the_digest_a_deploy_passes() -> None:
    from click.testing import CliRunner

    from sluice_dev.cli import main
    from sluice_dev.examples_team import app as words

    out = CliRunner().invoke(main, ["routes", "digest", "sluice_dev.examples_team"])
    assert out.exit_code == 0, out.output
    assert out.output.strip() == worker.describe(words)["digest"]
    assert [d.name for d in words.declared_schedules()] == ["new-year"]
    shown = CliRunner().invoke(main, ["routes", "digest", "--json", "sluice_dev.examples_team"])
    assert json.loads(shown.output)["schedules"][0]["payload"] == {"text": "happy new year", "i": None}


# -- Sluice's registrar for its default worker (template.yaml's RegistrarFunction, issue 31) --------

DEFAULT_WORKER = "st-WorkerFunction-AbC123"  # a generated name: SLUICE_WORKER_FUNCTION_NAME gives it


class Default(Team):
    """Sluice's registrar on fakes, asking the default worker (which holds no Scheduler rights)."""

    def build(self, queues: str, schedules: CodeSchedules) -> Registrar:
        return Registrar.default(DEFAULT_WORKER, self.routes, self.describer, schedules)

    def code(self, *schedules: dict[str, Any]) -> None:
        self.describer.answers[DEFAULT_WORKER] = {"queues": ["avatars", "reports"],
                                                  "schemas": {"avatars": SCHEMA},
                                                  "schedules": list(schedules)}

    resource = {"LogicalResourceId": "DefaultWorkerRegistration",
                "StackId": "arn:aws:cloudformation:us-east-1:1:stack/st/1",
                "PhysicalResourceId": f"sluice-registrar:sluice:{DEFAULT_WORKER}"}
    props = {"Owner": "sluice", "Function": DEFAULT_WORKER}


REPORT = {"name": "nightly-report", "expression": "cron(0 3 * * ? *)", "queue": "reports",
          "payload": {"kind": "daily"}}


def test_sluices_registrar_registers_updates_and_removes_the_default_workers_schedules() -> None:
    """The default worker declares; Sluice's registrar asks it (describe) and registers its routes and
    schedules, owned by ``sluice``, as a team's registrar does a team's (create, update, delete)."""
    default = Default(REPORT)
    ops = Schedule("ops", "rate(1 hour)", "reports", None, 5)  # an operator's: never touched
    default.table.create(ops)
    right = code.digest(["avatars", "reports"], {"avatars": SCHEMA}, code.from_answer([REPORT]))
    body = default.deploy("Create", Declarations=right)
    assert body["Status"] == "SUCCESS", body
    assert body["PhysicalResourceId"] == f"sluice-registrar:sluice:{DEFAULT_WORKER}"
    assert body["Data"]["Schedules"] == "reports/nightly-report"
    assert {p: (r.function, r.owner) for p, r in default.routes.routes.items()} == {
        "avatars": (DEFAULT_WORKER, "sluice"), "reports": (DEFAULT_WORKER, "sluice")}
    assert default.stored()[("reports", "nightly-report")] == ("cron(0 3 * * ? *)", {"kind": "daily"},
                                                               "sluice")
    assert ("create", "nightly-report") in default.trigger.calls
    assert default.describer.calls == [(DEFAULT_WORKER, None)]

    default.now = 2_000  # a changed expression and payload: updated, its phase from now
    default.code({**REPORT, "expression": "cron(0 4 * * ? *)", "payload": {"kind": "weekly"}})
    assert default.deploy()["Status"] == "SUCCESS"
    assert default.stored()[("reports", "nightly-report")] == ("cron(0 4 * * ? *)", {"kind": "weekly"},
                                                               "sluice")
    assert default.table.items["reports", "nightly-report"].start_ms == 2_000
    assert default.trigger.calls[-1] == ("resume", "nightly-report")  # the Scheduler schedule restated

    default.code()  # removed from the code: deleted, the operator's stays
    body = default.deploy()
    assert body["Data"]["SchedulesRemoved"] == "reports/nightly-report"
    assert set(default.stored()) == {("reports", "ops")}
    assert ("delete", "nightly-report") in default.trigger.calls

    default.code(REPORT)
    assert default.deploy()["Status"] == "SUCCESS"
    body = default.deploy("Delete")  # the stack deleted: the routes and the code's schedules go
    assert body["Status"] == "SUCCESS" and body["Data"]["SchedulesRemoved"] == "reports/nightly-report"
    assert default.routes.routes == {} and set(default.stored()) == {("reports", "ops")}


@pytest.mark.parametrize(("declared", "why"), [
    # the worker's answer is checked again: an internal queue, however the answer was made
    ({**REPORT, "queue": "sluice-relay-p0"}, "queue 'sluice-relay-p0' is reserved"),
    # a queue routed to another owner, or to nobody: not this registration's routes
    ({**REPORT, "queue": "payments"}, "schedule payments/nightly-report: no handler of this worker, and no "
                                      "pattern, routes queue 'payments'; nothing was written"),
    ({**REPORT, "queue": "avatars", "payload": {"size": "big"}}, "does not match queue 'avatars''s schema"),
])
def test_the_default_workers_schedule_off_its_own_queues_is_refused_and_writes_nothing(
        declared: dict[str, Any], why: str) -> None:
    default = Default(REPORT)
    default.routes.routes["payments"] = Route("payments", MEDIA, "media")  # team media's queue
    assert default.deploy("Create")["Status"] == "SUCCESS"
    routes, stored, writes = dict(default.routes.routes), default.stored(), default.table.writes
    default.code(REPORT, declared)
    body = default.deploy()
    assert body["Status"] == "FAILED" and why in body["Reason"], body["Reason"]
    assert default.routes.routes == routes and default.stored() == stored and default.table.writes == writes
    assert default.trigger.calls == [("create", "nightly-report")]


@pytest.mark.parametrize(("claim", "why"), [
    ({"Owner": "media"}, "registers Sluice's default worker (owner 'sluice')'s routes; the request names "
                         "owner 'media'"),
    ({"Function": MEDIA}, f"routes queues to {DEFAULT_WORKER} only"),
    ({"Schedules": [REPORT]}, "schedules are not taken from the request"),
])
def test_sluices_registrar_takes_its_owner_and_function_from_its_configuration(
        claim: dict[str, Any], why: str) -> None:
    default = Default(REPORT)
    body = default.deploy("Create", **claim)
    assert body["Status"] == "FAILED" and why in body["Reason"], body["Reason"]
    assert default.routes.routes == {} and default.stored() == {}


def test_the_registrar_function_is_sluices_or_a_teams_by_its_configuration() -> None:
    from sluice.core.config import Settings
    from sluice.core.errors import ConfigError

    tables = {"routes_table": "routes", "schedules_table": "schedules", "aws_region": "us-east-1"}
    default = registrar_entry.build(Settings(worker_function_name=DEFAULT_WORKER, **tables))
    assert (default.team, default.allowed, default.function) == ("sluice", None, DEFAULT_WORKER)
    assert default.schedules is not None
    team = registrar_entry.build(Settings(stack_name="st", registrar_team="media",
                                          registrar_queues="avatars", **tables))
    assert (team.team, team.allowed, team.function) == ("media", ("avatars",), MEDIA)
    with pytest.raises(ConfigError, match="not both"):
        registrar_entry.build(Settings(stack_name="st", registrar_team="media", registrar_queues="avatars",
                                       worker_function_name=DEFAULT_WORKER, **tables))
    with pytest.raises(InvalidInput, match="SLUICE_WORKER_FUNCTION_NAME"):
        Registrar.default("arn:aws:lambda:us-east-1:1:function:x", FakeRouteStore(), FakeDescriber({}))
