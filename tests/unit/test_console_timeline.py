"""The console's timeline page and scenario page (issue 32 items 2 and 3), with a fake API and a fake
scenario runner: what they draw, that every value is escaped, and that the scenario page keeps the
console's protections (session, CSRF), runs one at a time and shows a run only to its session."""

from __future__ import annotations

import threading
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from sluice_dev.cli.console import scenario
from sluice_dev.cli.console.backend import Watched
from sluice_dev.cli.console.server import Console
from sluice_dev.cli.console.timeline import lanes
from sluice_dev.fakes import EVIL, JOB, FakeBackend
from tests.unit.test_console import HOST, PORT, get, post


@pytest.fixture
def app() -> Console:
    return Console(FakeBackend(), "local stack", PORT, Watched({"emails"}))


def _no_script(page: str) -> None:
    assert "<script>alert" not in page
    assert "<script" not in page.replace('<script src="/static/console.js" defer></script>', "")


def test_the_timeline_page_draws_a_takeover_and_a_refused_write_escaped(app: Console) -> None:
    r = get(app, f"/jobs/timeline?id={JOB}")
    assert r.status == 200
    _no_script(r.body)
    assert "&lt;script&gt;alert" in r.body  # the hostile worker id, shown as text
    for kind in ("takeover", "expired", "write-refused", "write-accepted", "ack"):
        assert f'data-kind="{kind}"' in r.body, kind
    assert "refuses" in r.body and "token 33 is stale, the current one is 34" in r.body
    assert 'id="job-timeline"' in get(app, f"/jobs?id={JOB}").body  # the job page links to it


def test_lanes_tell_a_stale_write_accepted_when_fencing_is_off() -> None:
    steps = FakeBackend().timeline("emails", JOB)
    for s in steps:
        if s["kind"] == "write" and s["token"] == 33:
            s["outcome"] = "written"
    storage = lanes(steps)[-1]
    assert [m.kind for m in storage.marks] == ["write-accepted", "stale-accepted"]
    assert "although token 34 was granted" in storage.marks[1].text


def test_a_timeline_with_no_steps_says_so(app: Console) -> None:
    app.backend.timeline = lambda queue, job_id: []  # type: ignore[method-assign]
    assert 'id="timeline-empty"' in get(app, f"/jobs/timeline?id={JOB}").body



def test_a_step_with_a_number_no_worker_writes_is_skipped_and_the_page_still_draws(app: Console) -> None:
    """Hostile-team review (session 35): a team's Redis user may push its own job's timeline steps; a
    time or deadline past 2**53 overflowed a float and the console's timeline page was a 500."""
    from sluice.core import timeline

    huge = "9" * 400
    raw = [timeline.encode("lease", 5, lease=1, attempt=1, deadline_ms=9_000),
           timeline.encode("grant", 6, lease=1, token=2, worker="w"),
           f'{{"t":1{huge},"k":"renew","l":1}}', f'{{"t":7,"k":"renew","l":1,"d":1{huge}}}']
    steps = [s for s in map(timeline.decode, raw) if s is not None]  # as the operator API reads them
    assert [s["kind"] for s in steps] == ["lease", "grant"]
    app.backend.timeline = lambda queue, job_id: steps  # type: ignore[method-assign]
    r = get(app, f"/jobs/timeline?id={JOB}")
    assert r.status == 200 and 'id="timeline"' in r.body


class Gate:
    """A scenario runner that ends when told, with a result that carries hostile texts."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.calls: list[tuple[float, bool]] = []

    def __call__(self, freeze_for_s: float, fencing: bool) -> dict[str, Any]:
        self.calls.append((freeze_for_s, fencing))
        assert self.go.wait(10)
        return {"scenario": "gc-pause", "fencing": fencing, "verdict": EVIL,
                "stale_write_accepted": not fencing, "stored": {"result": {"by": EVIL}},
                "params": {"freeze_for": freeze_for_s},
                "steps": FakeBackend().timeline("emails", JOB)}


def wait_done(app: Console) -> str:
    for _ in range(500):
        body = get(app, "/fragment/scenario").body
        if 'data-final="yes"' in body:
            return body
        threading.Event().wait(0.01)
    raise AssertionError(body)


def test_the_scenario_page_runs_one_at_a_time_for_its_own_session_with_its_two_controls(app: Console) -> None:
    gate = Gate()
    app.scenarios = scenario.Runs(runner=gate)
    page = get(app, "/scenario").body
    assert 'id="freeze_for"' in page and 'id="fencing"' in page and app.token in page
    assert 'id="scenario-none"' in page
    # the console's protections: no CSRF token, another site, no session: refused, nothing run
    assert post(app, "/scenario/gc-pause", {"freeze_for": "12", "fencing": "on"}, token=False).status == 403
    cross = {"sec-fetch-site": "cross-site"}
    assert post(app, "/scenario/gc-pause", {"freeze_for": "12"}, **cross).status == 403
    assert app.handle("POST", "/scenario/gc-pause", HOST, b"freeze_for=1").status == 401
    assert post(app, "/scenario/gc-pause", {"freeze_for": "31"}).status == 400
    assert post(app, "/scenario/gc-pause", {"freeze_for": "<b>"}).status == 400
    assert gate.calls == []

    r = post(app, "/scenario/gc-pause", {"freeze_for": "7.5"})  # fencing unticked: off
    assert r.status == 303 and r.headers["Location"] == "/scenario?msg=started"
    assert "one%20at%20a%20time" in post(app, "/scenario/gc-pause", {"freeze_for": "1"}).headers["Location"]
    assert 'id="scenario-running"' in get(app, "/fragment/scenario").body
    gate.go.set()
    done = wait_done(app)
    assert gate.calls == [(7.5, False)]
    _no_script(done)
    assert 'class="verdict bug"' in done and 'data-kind="takeover"' in done and "&lt;script&gt;" in done
    again = get(app, "/scenario").body
    assert 'value="7.5"' in again and 'id="fencing" checked' not in again
    # another session (a cookie this console never handed out gets nothing; one it did sees no run of others)
    app.sessions.add("other")
    other = app.handle("GET", "/fragment/scenario", HOST | {"cookie": "sluice_console=other"}).body
    assert 'id="scenario-none"' in other


def test_a_console_of_a_deployment_runs_no_scenario(app: Console) -> None:
    assert app.scenarios is None
    assert 'id="scenario-local-only"' in get(app, "/scenario").body
    assert post(app, "/scenario/gc-pause", {"freeze_for": "12", "fencing": "on"}).status == 400


def test_a_lease_lost_before_its_grant_is_no_takeover() -> None:
    """A lease that lapsed before its grant (no token: nobody ran the job) gets its own lane, marked
    not granted; the takeover is the next granted lease's."""
    steps = FakeBackend().timeline("emails", JOB)
    steps[2:2] = [{"at_ms": 2100, "kind": "lease", "lease": 8, "attempt": 2, "deadline_ms": 2200},
                  {"at_ms": 2110, "kind": "lost", "lease": 8, "outcome": "lapsed before the grant"}]
    drawn = lanes(steps)
    assert [ln.label for ln in drawn[:3]] == [EVIL, "(not granted)", "B"]
    assert "takeover" not in [m.kind for m in drawn[1].marks]
    assert "takeover" in [m.kind for m in drawn[2].marks]


def test_the_relays_reap_of_a_lapsed_lease_is_drawn_on_that_leases_lane(app: Console) -> None:
    """reap.lua's step (timelines on): on the lane of the lease that lapsed, with its token and
    where the job went; an unknown outcome is shown escaped."""
    steps = FakeBackend().timeline("emails", JOB)
    steps.insert(2, {"at_ms": 2050, "kind": "reap", "worker": "relay", "lease": 7, "attempt": 1,
                     "outcome": "ready"})
    first, second = lanes(steps)[:2]
    [reaped] = [m for m in first.marks if m.kind == "reaped"]
    assert reaped.at_ms == 2050 and "lapsed lease 7 (attempt 1): the job goes back to ready" in reaped.text
    assert first.label == EVIL and "reaped" not in [m.kind for m in second.marks]  # not relabelled "relay"
    steps[2]["outcome"] = EVIL
    app.backend.timeline = lambda queue, job_id: steps  # type: ignore[method-assign]
    page = get(app, f"/jobs/timeline?id={JOB}").body
    _no_script(page)
    assert 'data-kind="reaped"' in page and "the relay takes back lapsed lease 7" in page


def test_the_scenario_page_runs_on_the_running_stacks_servers_and_not_against_a_deployment(
        tmp_path: Path) -> None:
    """Inside ``sluice dev`` (a running local stack in the folder) the runs borrow its redis-server and
    moto server (``scenarios.Borrowed``); a console pointed at a deployment, or at a stack still
    starting, has no runs: the page says it is unavailable, and a POST starts nothing."""
    from sluice_dev.chaos.scenarios import Borrowed
    from sluice_dev.cli.console import build
    from sluice_dev.cli.target import Target

    stack = {"gateway_url": "http://127.0.0.1:9", "redis_url": "redis://127.0.0.1:7/0",
             "aws_endpoint_url": "http://127.0.0.1:8"}
    local = Target(tmp_path, env={})
    local.__dict__["local"] = stack  # what running_stack() reads from .sluice/endpoints.json
    runs = build(local, None, 0, ()).scenarios
    assert runs is not None and isinstance(runs.runner, partial)
    assert runs.runner.args == (Borrowed("redis://127.0.0.1:7/0", "http://127.0.0.1:8"),)
    assert scenario.on_stack(None) is None and scenario.on_stack({"pid": 1, "starting": True}) is None

    deployed = Target(tmp_path, env={})
    deployed.__dict__["local"] = stack  # even in a stack's folder, --api means the deployment
    app = build(deployed, "https://abc.execute-api.us-east-1.amazonaws.com/live", PORT, ())
    assert app.scenarios is None
    assert "unavailable" in get(app, "/scenario").body
    assert post(app, "/scenario/gc-pause", {"freeze_for": "12", "fencing": "on"}).status == 400


@pytest.mark.parametrize("raw", ["nan", "NaN", "inf", "-inf", "1e400", "-0.1", "30.0001", "", " ", "0x10"])
def test_the_scenarios_freeze_refuses_what_is_no_time_within_its_bound(raw: str) -> None:
    """Careless-operator review (session 35): `nan` passes a check written as `value < 0 or value >
    most`, and a frozen worker for nan (or inf) seconds would never be woken."""
    from sluice.core.errors import InvalidInput

    with pytest.raises(InvalidInput):
        scenario.freeze_of(raw)
    assert scenario.freeze_of("0") == 0 and scenario.freeze_of("30") == 30
