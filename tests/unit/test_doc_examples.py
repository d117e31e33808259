"""The handler examples of docs/worker.md and docs/flows.md that no other test runs, run as written
(issue 31: every example in the docs runs in a test). The others: the async, retry, schedules and
fencing examples (tests/unit/test_worker_async.py, test_retry_policy.py, test_declared_schedules.py,
tests/backends/test_fence_service.py) and docs/api.md's client example (tests/stack/test_client_stack.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import sluice
from sluice.core.models import Job
from sluice.worker.runtime.context import JobContext
from sluice_dev.fakes import kit
from tests.unit.test_worker_async import Gateway

pytestmark = pytest.mark.timeout(20)

DOCS = Path(__file__).parents[2] / "docs"


def block(doc: str, after: str) -> str:
    """The first python block of ``doc`` after the text ``after``."""
    text = (DOCS / doc).read_text(encoding="utf-8")
    return (text.split(after, 1)[-1] if after else text).split("```python\n", 1)[1].split("```", 1)[0]


def run(source: str, doc: str, namespace: dict[str, Any]) -> None:
    """As a reader's module would: without this file's ``from __future__`` (its string annotations
    would leave a pydantic model of the example unresolved)."""
    exec(compile(source, doc, "exec", dont_inherit=True), namespace)


def test_the_first_handler_of_docs_worker_md_runs_and_fails_retries_or_writes_as_it_says() -> None:
    k = kit()
    images: dict[str, Any] = {"https://x/ok.png": b"png", "https://x/throttled.png": b"png"}
    throttled = {"now": False}
    namespace: dict[str, Any] = {"fetch": images.get, "upstream_is_throttling": lambda: throttled["now"]}
    run(block("worker.md", "## The handler API"), "docs/worker.md", namespace)
    app = namespace["app"]
    assert isinstance(app, sluice.Worker)
    tables: list[Any] = []
    fenced = k.store.fenced_table
    k.store.fenced_table = lambda *a, **kw: tables.append(fenced(*a, **kw)) or tables[-1]  # type: ignore[method-assign]
    k.queue.add("thumbnails", "ok", {"url": "https://x/ok.png"})
    k.queue.add("thumbnails", "gone", {"url": "https://x/missing.png"})
    w = app.bind(queue=k.queue, store=k.store, options=k.worker().options, telemetry=k.worker().telemetry)
    assert w.drain(["thumbnails"], 2).as_dict()["succeeded"] == 1
    assert k.store.get_job("ok").result == {"thumbnail": "s3://thumbs/ok.png"}
    gone = k.store.get_job("gone")
    assert gone.status == "failed" and "no such image" in (gone.last_error or "")
    assert [(t.table_name, t.rows) for t in tables] == [("thumbnails", {"ok": {"id": "ok", "size": 128}})]
    throttled["now"] = True
    k.queue.add("thumbnails", "later", {"url": "https://x/throttled.png"})
    assert w.drain(["thumbnails"], 1).as_dict()["retried"] == 1
    assert k.store.get_job("later").status != "succeeded"


def test_the_typed_payload_example_of_docs_worker_md_validates_before_the_handler_runs() -> None:
    k = kit()
    namespace: dict[str, Any] = {"app": k.app, "sluice": sluice,
                                 "render": lambda url, width, fmt: f"{url}@{width}.{fmt}"}
    run(block("worker.md", "## Typed payloads"), "docs/worker.md", namespace)
    k.queue.add("thumbnails", "good", {"url": "u", "width": 64})
    k.queue.add("thumbnails", "bad", {"url": "u", "width": 0, "colour": "red"})
    assert k.worker().drain(["thumbnails"], 2).as_dict()["succeeded"] == 1
    assert k.store.get_job("good").result == {"thumbnail": "u@64.png"}
    bad = k.store.get_job("bad")
    error = bad.last_error or ""
    assert bad.status == "failed" and "width" in error and "red" not in error


def test_the_flows_example_of_docs_flows_md_enqueues_its_family_and_sums_its_children() -> None:
    k = kit()
    gw = Gateway()
    namespace: dict[str, Any] = {"app": k.app, "Job": Job, "JobContext": JobContext}
    run(block("flows.md", ""), "docs/flows.md", namespace)
    k.queue.add("fanout", "p", {})
    w = k.app.bind(queue=k.queue, store=k.store, family_gateway=gw,
                   options=k.worker().options, telemetry=k.worker().telemetry)
    assert w.drain(["fanout"], 1).as_dict()["succeeded"] == 1
    assert k.store.get_job("p").result == {"continuation": "then"}
    single, family = gw.requests
    assert [(c.queue, c.payload, c.key) for c in single.jobs] == [("thumbnails", {"size": 64}, "thumb-64")]
    assert [c.payload for c in family.jobs] == list(range(10)) and family.then is not None
    children = [SimpleNamespace(status="succeeded", result=i * i) for i in range(10)]
    children.append(SimpleNamespace(status="failed", result=None))
    ctx = SimpleNamespace(children=lambda: children)
    assert namespace["total"](None, ctx) == {"sum": sum(i * i for i in range(10))}
