"""Schedules declared in code (issue 31, item 5) on the moto server: the registrar writing the real
schedules table. Two teams' registrars and an operator's schedule share one table: each registration
creates, updates and removes its own team's schedules only, and a hostile team's code declaring a
schedule on another team's queue is refused, writing nothing."""

from __future__ import annotations

from typing import Any

import pytest

from sluice.backends.dynamodb import tables
from sluice.backends.dynamodb.routes import DynamoRouteStore
from sluice.backends.dynamodb.schedules import DynamoScheduleStore
from sluice.core.config import Settings
from sluice.core.errors import RegistrationRefused, ScheduleNotFound
from sluice.core.schedules import Schedule
from sluice.registrar.register import Registrar
from sluice.registrar.schedules import CodeSchedules
from sluice_dev.fakes import FakeDescriber

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]
CREATE: dict[str, Any] = {"RequestType": "Create", "ResourceProperties": {}}
UPDATE: dict[str, Any] = {"RequestType": "Update", "ResourceProperties": {}}


@pytest.fixture
def settings(moto_url: str, unique: str) -> Settings:
    s = Settings(aws_endpoint_url=moto_url, jobs_table=f"jobs-{unique}", idempotency_table=f"idem-{unique}",
                 routes_table=f"routes-{unique}", schedules_table=f"schedules-{unique}",
                 stack_name=f"st{unique}")
    tables.ensure_all(s)
    return s


class Team:
    def __init__(self, s: Settings, team: str, queues: str, handles: list[str]) -> None:
        self.function = f"{s.stack_name}-worker-{team}"
        self.handles = handles
        self.describer = FakeDescriber({})
        self.code()
        self.now = 1_000
        self.registrar = Registrar.of(
            s.stack_name, team, queues, DynamoRouteStore.from_settings(s), self.describer,
            CodeSchedules(DynamoScheduleStore.from_settings(s), None, lambda: self.now))

    def code(self, *schedules: tuple[str, str, str, Any]) -> None:
        self.describer.answers[self.function] = {
            "queues": self.handles, "schemas": {},
            "schedules": [{"name": n, "expression": e, "queue": q, "payload": p} for n, e, q, p in schedules]}


def table(s: Settings) -> dict[tuple[str, str], tuple[str, Any, str]]:
    return {(x.queue, x.name): (x.expression, x.payload, x.owner)
            for x in DynamoScheduleStore.from_settings(s).every()}


def test_registrations_keep_each_teams_schedules_and_never_touch_anothers(settings: Settings) -> None:
    store = DynamoScheduleStore.from_settings(settings)
    store.create(Schedule("ops", "rate(1 hour)", "payments", {"by": "operator"}, 5))
    pay = Team(settings, "pay", "payments", ["payments"])
    pay.code(("settle", "cron(0 3 * * ? *)", "payments", {"day": 1}))
    pay.registrar.apply(CREATE)
    media = Team(settings, "media", "avatars,thumbs-*", ["avatars", "thumbs-big"])
    media.code(("nightly", "cron(0 2 * * ? *)", "avatars", None),
               ("weekly", "rate(7 days)", "thumbs-big", {}))
    data = media.registrar.apply(CREATE)[1]
    assert data["Schedules"] == "avatars/nightly,thumbs-big/weekly"
    assert table(settings) == {
        ("payments", "ops"): ("rate(1 hour)", {"by": "operator"}, ""),
        ("payments", "settle"): ("cron(0 3 * * ? *)", {"day": 1}, "pay"),
        ("avatars", "nightly"): ("cron(0 2 * * ? *)", None, "media"),
        ("thumbs-big", "weekly"): ("rate(7 days)", {}, "media")}

    media.now = 2_000  # the code changes: nightly moves, weekly goes, a new one comes
    media.code(("nightly", "cron(0 4 * * ? *)", "avatars", None), ("hourly", "rate(1 hour)", "avatars", 1))
    data = media.registrar.apply(UPDATE)[1]
    assert data["SchedulesRemoved"] == "thumbs-big/weekly"
    assert store.get("avatars", "nightly").start_ms == 2_000  # a new expression, a new phase
    assert {k: v for k, v in table(settings).items() if v[2] == "media"} == {
        ("avatars", "nightly"): ("cron(0 4 * * ? *)", None, "media"),
        ("avatars", "hourly"): ("rate(1 hour)", 1, "media")}

    media.registrar.apply({"RequestType": "Delete", "PhysicalResourceId": "x", "ResourceProperties": {}})
    assert set(table(settings)) == {("payments", "ops"), ("payments", "settle")}


def test_a_hostile_teams_code_scheduling_onto_another_teams_queue_is_refused(settings: Settings) -> None:
    pay = Team(settings, "pay", "payments", ["payments"])
    pay.code(("settle", "cron(0 3 * * ? *)", "payments", {"day": 1}))
    pay.registrar.apply(CREATE)
    routes, before = DynamoRouteStore.from_settings(settings).list_routes(), table(settings)
    evil = Team(settings, "evil", "evil-*", ["evil-a"])
    evil.code(("ok", "rate(1 day)", "evil-a", None), ("drain", "rate(1 minute)", "payments", {"all": True}))
    with pytest.raises(RegistrationRefused, match="schedule payments/drain targets queue 'payments', "
                                                  "which the team map does not give team 'evil'"):
        evil.registrar.apply(CREATE)
    evil.code(("settle", "rate(1 minute)", "evil-a", None))  # a name pay uses, on its own queue: fine
    evil.registrar.apply(CREATE)
    assert table(settings)[("evil-a", "settle")][2] == "evil"
    assert table(settings)[("payments", "settle")] == before[("payments", "settle")]
    assert {r.pattern for r in DynamoRouteStore.from_settings(settings).list_routes()} == \
           {r.pattern for r in routes} | {"evil-a"}


def test_the_store_overwrites_a_declared_item_only_for_its_owner(settings: Settings) -> None:
    store = DynamoScheduleStore.from_settings(settings)
    store.create(Schedule("n", "rate(1 hour)", "avatars", None, 5, owner="media"))
    store.create(Schedule("m", "rate(1 hour)", "avatars", None, 5))  # the operator's
    store.replace(Schedule("n", "rate(2 hours)", "avatars", None, 6, owner="media"))
    assert store.get("avatars", "n").expression == "rate(2 hours)"
    for stolen in (Schedule("n", "rate(1 day)", "avatars", None, 7, owner="evil"),
                   Schedule("m", "rate(1 day)", "avatars", None, 7, owner="media"),
                   Schedule("absent", "rate(1 day)", "avatars", None, 7, owner="media")):
        with pytest.raises(ScheduleNotFound):
            store.replace(stolen)
    assert [s.name for s in store.owned("media")] == ["n"]
    assert store.find("avatars", "m") == Schedule("m", "rate(1 hour)", "avatars", None, 5)
    assert store.find("avatars", "absent") is None
