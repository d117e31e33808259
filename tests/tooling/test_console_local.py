"""``sluice console`` over the local server (issue 17): the console's real ``Client`` against the
gateway's operator routes on a socket (caller from ``X-Sluice-Local-Caller``), with fake ports
behind the gateway. Queue discovery from ``GET /v1/admin/queues`` (and ``--queue`` narrowing), the
finished counts on the rows, and a schedule paused, resumed and deleted from the console."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlencode

import pytest

from sluice.client import Client
from sluice.entry.gateway import Gateway
from sluice.gateway.schedules import Schedules
from sluice_dev.cli.console.backend import Watched
from sluice_dev.cli.console.server import Console, Response
from sluice_dev.fakes import FakeScheduleStore, FakeTrigger
from sluice_dev.local.api_server import LOCAL_CALLER_HEADER, LocalGateway
from tests.unit.test_console import session
from tests.unit.test_gateway_admin import OPERATOR, WEB, Rig
from tests.unit.test_gateway_schedules import NIGHTLY

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]
PORT = 8470
HOST = {"host": f"127.0.0.1:{PORT}"}
SAME = HOST | {"sec-fetch-site": "same-origin", "origin": f"http://127.0.0.1:{PORT}"}


class World:
    def __init__(self) -> None:
        self.rig = Rig(operators=(OPERATOR,))
        self.store, self.trigger = FakeScheduleStore(), FakeTrigger()
        self.gateway = Gateway(self.rig.api, schedules=lambda api: Schedules(api, self.store, self.trigger))


@pytest.fixture
def served() -> Iterator[tuple[World, LocalGateway]]:
    world = World()
    with LocalGateway(world.gateway) as server:
        yield world, server


def console(server: LocalGateway, watched: Watched, caller: str = OPERATOR) -> Console:
    client = Client(server.url, headers={LOCAL_CALLER_HEADER: caller}, max_attempts=1)
    return Console(client, "local stack", PORT, watched)


def post(app: Console, path: str, fields: dict[str, str], headers: dict[str, str] = SAME) -> Response:
    return app.handle("POST", path, headers | session(app), urlencode(fields | {"csrf": app.token}).encode())


def test_with_no_queue_named_the_console_lists_every_queue_the_operator_api_lists(
        served: tuple[World, LocalGateway]) -> None:
    world, server = served
    world.rig.queue.set_config("reports", paused=True)  # a second queue Redis knows
    every = console(server, Watched(every=True))
    page = every.handle("GET", "/", HOST | session(every)).body
    assert 'data-queue="emails"' in page and 'data-queue="reports"' in page
    assert "sluice-relay" not in page  # a reserved queue is not listed
    # the rows carry the queue's cumulative finished counts (the fake's: 40 succeeded, 2 dead, 1 cancelled)
    assert 'title="since the counters began: 40 succeeded, 2 failed or dead, 1 cancelled"' in page
    narrowed = console(server, Watched({"emails"}))
    page = narrowed.handle("GET", "/", HOST | session(narrowed)).body
    assert 'data-queue="emails"' in page and 'data-queue="reports"' not in page


def test_a_caller_who_may_not_list_queues_sees_why(served: tuple[World, LocalGateway]) -> None:
    _, server = served
    app = console(server, Watched(every=True), caller=WEB)
    page = app.handle("GET", "/", HOST | session(app)).body
    assert "every queue (GET /v1/admin/queues)" in page and "not an operator" in page


def test_a_schedule_is_paused_resumed_and_deleted_from_the_console(
        served: tuple[World, LocalGateway]) -> None:
    world, server = served
    client = Client(server.url, headers={LOCAL_CALLER_HEADER: OPERATOR}, max_attempts=1)
    client._call("POST", "/v1/admin/queues/emails/schedules", NIGHTLY)
    app = console(server, Watched({"emails"}))
    assert 'data-schedule="emails/nightly"' in app.handle("GET", "/schedules", HOST | session(app)).body
    for verb in ("pause", "resume", "delete"):
        refused = post(app, f"/schedules/emails/nightly/{verb}", {"confirmed": "1"},
                       HOST | {"sec-fetch-site": "cross-site", "origin": "http://evil.example"})
        assert refused.status == 403
    assert world.store.writes == 1 and world.trigger.calls == [("create", "nightly")]  # only the create

    assert post(app, "/schedules/emails/nightly/pause", {}).status == 303
    assert world.store.items["emails", "nightly"].paused is True
    assert '<td class="state">paused</td>' in app.handle("GET", "/schedules", HOST | session(app)).body
    assert post(app, "/schedules/emails/nightly/resume", {}).status == 303
    assert world.store.items["emails", "nightly"].paused is False
    ask = post(app, "/schedules/emails/nightly/delete", {})
    assert ask.status == 200 and "Delete schedule nightly of emails?" in ask.body
    assert ("emails", "nightly") in world.store.items  # nothing deleted before "Yes"
    assert post(app, "/schedules/emails/nightly/delete", {"confirmed": "1"}).status == 303
    assert world.store.items == {}
    assert world.trigger.calls == [("create", "nightly"), ("pause", "nightly"), ("resume", "nightly"),
                                   ("delete", "nightly")]
    gone = post(app, "/schedules/emails/nightly/pause", {})
    assert gone.status == 400 and "nightly" in gone.body  # the API's 404 SCHEDULE_NOT_FOUND, shown
