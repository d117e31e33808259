"""Issue 32 in the console: a queue's jobs page (filter by state and id prefix, a cursor), a flow as
a tree, and the depth over the last hour; every value escaped, and none of them without the
session cookie. With the fake API (``sluice_dev.fakes.FakeBackend``)."""

from __future__ import annotations

from typing import Any

import pytest

from sluice.core import depth
from sluice.core.wire import JobView
from sluice_dev.cli.console import pages
from sluice_dev.cli.console.backend import Watched
from sluice_dev.cli.console.server import Console
from sluice_dev.fakes import EVIL, JOB, FakeBackend, job_view
from tests.unit.test_console import HOST, get

CHILD = "01JB0000000000000000000000.emails.child00001"
THEN = "01JB0000000000000000000000.emails.then000001"


@pytest.fixture
def app() -> Console:
    return Console(FakeBackend(), "local stack", 8470, Watched({"emails"}))


def fake(app: Console) -> FakeBackend:
    assert isinstance(app.backend, FakeBackend)
    return app.backend


def test_the_jobs_page_filters_by_state_and_prefix_and_links_each_job(app: Console) -> None:
    r = get(app, "/queues/emails/jobs?state=dead&prefix=01JB")
    assert r.status == 200
    assert fake(app).listed_calls[-1] == ("emails", "dead", pages.DEFAULT_PAGE, None, "01JB")
    assert f'href="/jobs?id={JOB}"' in r.body and '<option value="dead" selected>' in r.body
    assert 'id="next-page"' in r.body and f"cursor=5~{JOB}" in r.body
    assert "[redacted]" in r.body
    r = get(app, "/queues/emails/jobs?state=ready&prefix=zz")
    assert 'id="jobs-empty"' in r.body and "No ready jobs starting zz" in r.body
    r = get(app, f"/queues/emails/jobs?state=dead&cursor=5~{JOB}")
    assert fake(app).listed_calls[-1][3] == f"5~{JOB}" and 'id="next-page"' not in r.body
    assert fake(app).calls == []  # reading changes nothing


def test_the_parked_state_lists_the_lot_with_its_own_cursor_and_lane(app: Console) -> None:
    listed = fake(app).list_jobs

    def parked(queue: str, state: str = "ready", **kw: Any) -> Any:
        page = listed(queue, state, **kw)
        jobs = [j.model_copy(update={"parked": "delay"}) for j in page.jobs]
        return page.model_copy(update={"jobs": jobs, "next": None if kw.get("cursor") else "o1-5~5"})

    fake(app).list_jobs = parked  # type: ignore[method-assign]
    r = get(app, "/queues/emails/jobs?state=parked")
    assert r.status == 200 and "parked (delay)" in r.body and "cursor=o1-5~5" in r.body
    assert '<option value="parked" selected>' in r.body
    r = get(app, "/queues/emails/jobs?state=parked&cursor=o1-5~5")
    assert r.status == 200 and fake(app).listed_calls[-1][1:4] == ("parked", pages.DEFAULT_PAGE, "o1-5~5")
    for bad in ("state=parked&cursor=5~" + JOB, "state=ready&cursor=o1-5~5", "state=parked&cursor=o1~5"):
        calls = len(fake(app).listed_calls)
        assert get(app, f"/queues/emails/jobs?{bad}").status == 400, bad
        assert len(fake(app).listed_calls) == calls


@pytest.mark.parametrize("query", ["state=running", "state=%3Cscript%3E", "prefix=a*", "prefix=%7Bq%7D",
                                   "cursor=nope", "cursor=1~%3Cb%3E", "prefix=" + "a" * 300])
def test_hostile_filters_are_400_and_never_reach_the_api(app: Console, query: str) -> None:
    r = get(app, f"/queues/emails/jobs?{query}")
    assert r.status == 400 and "<script" not in r.body.replace('<script src="/static/console.js" defer>', "")
    assert fake(app).listed_calls == []


def test_the_new_pages_escape_every_value(app: Console) -> None:
    fake(app).job = job_view(job_id=JOB, last_error=EVIL, children=[JOB])
    for path in ("/queues/emails/jobs?state=dead", f"/flows?id={JOB}", "/queues/emails/depth",
                 "/fragment/queues/emails/depth"):
        body = get(app, path).body
        assert "<script>alert" not in body, path
    listed = get(app, "/queues/emails/jobs?state=dead").body
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in listed


def test_without_the_cookie_the_new_pages_are_401(app: Console) -> None:
    for path in ("/queues/emails/jobs", f"/flows?id={JOB}", "/queues/emails/depth",
                 "/fragment/queues/emails/depth"):
        assert app.handle("GET", path, HOST).status == 401, path
    assert fake(app).listed_calls == []


class Family(FakeBackend):
    """A parent with two children and a continuation, the child's child failed; ``reads`` counts
    GET /v1/jobs/{id}."""

    def __init__(self, views: dict[str, JobView]) -> None:
        super().__init__()
        self.views, self.reads = views, 0

    def status(self, job_id: str) -> JobView:
        self.reads += 1
        return self.views[job_id]


def family() -> dict[str, JobView]:
    grandchild = CHILD[:-1] + "2"
    return {JOB: job_view(job_id=JOB, status="succeeded", children=[CHILD, grandchild[:-1] + "3"],
                          continuations=[THEN]),
            CHILD: job_view(job_id=CHILD, status="succeeded", parent_id=JOB, children=[grandchild]),
            grandchild: job_view(job_id=grandchild, status="failed", parent_id=CHILD),
            grandchild[:-1] + "3": job_view(job_id=grandchild[:-1] + "3", status="leased", parent_id=JOB),
            THEN: job_view(job_id=THEN, status="queued", parent_id=JOB, waits_for=[CHILD], remaining=1)}


def test_a_flow_is_drawn_from_its_root_as_a_tree_coloured_by_state_each_node_a_link() -> None:
    views = family()
    app = Console(Family(views), "local stack", 8470, Watched({"emails"}))
    grandchild = CHILD[:-1] + "2"
    body = get(app, f"/flows?id={grandchild}").body  # opened at a leaf: drawn from the root
    assert body.index(f'data-job="{JOB}"') < body.index(f'data-job="{CHILD}"') < body.index(
        f'data-job="{grandchild}"')
    for job_id, view in views.items():
        assert f'href="/jobs?id={job_id}" class="node status {view.status}"' in body
    assert '<li class="focus"><a' in body and "then<ul>" in body
    page = get(app, f"/jobs?id={JOB}").body
    assert f'id="flow-link" href="/flows?id={JOB}"' in page


def test_a_flow_that_loops_or_is_huge_is_drawn_within_its_read_budget(app: Console) -> None:
    body = get(app, f"/flows?id={JOB}").body  # the fake job is its own child
    assert body.count(f'data-job="{JOB}"') == 1 and "(above)" in body
    many = {f"j{i}": job_view(job_id=f"j{i}", status="queued", children=[f"j{i + 1}"]) for i in range(500)}
    big = Family(many)
    app2 = Console(big, "local stack", 8470, Watched({"emails"}))
    body = get(app2, "/flows?id=j0").body
    assert big.reads == pages.FLOW_NODES and f"first {pages.FLOW_NODES} jobs" in body


def test_the_depth_page_draws_the_relays_hour_from_the_operator_route(app: Console) -> None:
    """The chart and the waits come from GET /v1/admin/queues/{queue}/depth (the relay's samples in
    Redis, the same for every console), not from this console's memory or a listing of ready jobs."""
    body = get(app, "/queues/emails/depth").body
    assert fake(app).depth_calls == ["emails"] and fake(app).listed_calls == []
    assert 'data-refresh="/fragment/queues/emails/depth"' in body
    assert [body.count(f'class="layer {name}"') for name, _ in pages.LAYERS] == [1, 1, 1, 1]
    assert "style=" not in body.split('<div class="depth-chart">')[1]  # the CSP allows no inline style
    assert '<td id="wait-started">9</td>' in body  # the jobs started over the hour
    assert f'<td id="wait-p50">{depth.bucket_ms(depth.bucket(100))} ms</td>' in body
    assert f'<td id="wait-p99">{depth.bucket_ms(depth.bucket(10_000)) / 1000:.1f} s</td>' in body
    assert get(app, "/fragment/queues/emails/depth").body.count('class="layer ') == 4
    assert fake(app).depth_calls == ["emails", "emails"]


def test_a_depth_page_with_no_samples_yet_says_so(app: Console) -> None:
    fake(app).depth_history = lambda queue: depth.history(queue, [], 0)  # type: ignore[method-assign]
    body = get(app, "/queues/emails/depth").body
    assert "no samples yet" in body and '<td id="wait-p50">-</td>' in body


def test_the_chart_spans_the_hour_or_what_the_relay_sampled_of_it() -> None:
    now_ms = 100 * depth.HOUR_MS
    stored = [depth.encode(now_ms - i * 10_000, i % 7, 1, 2, i % 3) for i in range(400, -1, -1)]
    hour = depth.history("emails", stored, now_ms)
    assert 360 <= len(hour.samples) <= 361 and hour.samples[0].at_ms >= now_ms - depth.HOUR_MS
    svg = pages.stacked_chart(hour.samples, now_ms / 1000)
    assert [svg.count(f'class="layer {name}"') for name, _ in pages.LAYERS] == [1, 1, 1, 1]
    assert "-60 min" in svg
    assert "-20 s" in pages.stacked_chart(hour.samples[-3:], now_ms / 1000)


def test_the_queue_rows_link_to_their_jobs_and_depth_pages(app: Console) -> None:
    body: Any = get(app, "/").body
    assert 'class="jobs-link" href="/queues/emails/jobs"' in body
    assert 'class="depth-link" href="/queues/emails/depth"' in body


def test_fields_the_operator_function_left_unread_are_said_not_shown_blank(
        app: Console, monkeypatch: pytest.MonkeyPatch) -> None:
    """Session 39 (``sluice.core.read_bounds``): a payload or error larger than Sluice writes comes back
    null and named in ``unread``; the page says so rather than show "-" as for a job with none."""
    from sluice.core.listing import JobPage, ListedJob

    page = JobPage(queue="emails", state="dead", jobs=[
        ListedJob(job_id=JOB, state="dead", unread=["payload", "last_error"]),
        ListedJob(job_id=CHILD, state="dead", payload={"n": 1}, last_error="boom")])
    monkeypatch.setattr(FakeBackend, "list_jobs", lambda *_a, **_k: page)
    body = get(app, "/queues/emails/jobs?state=dead").body
    assert body.count("[not read: larger than Sluice writes, or past the page budget]") == 2
    assert "boom" in body and "&quot;n&quot;: 1" in body
