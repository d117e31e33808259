"""Typed payloads (issue 15): ``@app.handler(q, model=M)`` hands the handler a validated ``M``; a
payload that does not validate ends the job ``failed`` at once, with the errors as its reason."""

from __future__ import annotations

import dataclasses
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import pytest
from click.testing import CliRunner
from pydantic import BaseModel, ConfigDict, Field, field_validator

import sluice
from sluice.core.errors import InvalidInput
from sluice.core.models import MAX_ERROR_CHARS, Job
from sluice.worker.runtime import telemetry as t
from sluice.worker.runtime.context import JobContext
from sluice.worker.runtime.typed import parse_payload
from sluice_dev.cli import main
from sluice_dev.fakes import kit
from tests.unit.test_runtime_heartbeat import thief


class Thumbnail(BaseModel):
    url: str
    width: int = Field(gt=0, le=4096)
    format: Literal["png", "webp"] = "png"


def thumbnails(k: Any, seen: list[Any]) -> None:
    @k.app.handler("thumbs", model=Thumbnail)
    def make(req: Thumbnail, ctx: JobContext) -> dict[str, Any]:
        seen.append(req)
        return {"thumb": f"{req.url}@{req.width}.{req.format}"}


def test_a_valid_payload_reaches_the_handler_as_a_model_instance() -> None:
    k, seen = kit(), []
    thumbnails(k, seen)
    k.queue.add("thumbs", "j", {"url": "s3://a/b.jpg", "width": 128})
    assert k.worker().drain(["thumbs"], 1).as_dict()["succeeded"] == 1
    assert len(seen) == 1 and type(seen[0]) is Thumbnail
    assert seen[0] == Thumbnail(url="s3://a/b.jpg", width=128, format="png")
    rec = k.store.get_job("j")
    assert rec.status == "succeeded" and rec.result == {"thumb": "s3://a/b.jpg@128.png"}


def test_an_invalid_payload_fails_at_once_with_each_field_path_and_is_never_retried() -> None:
    k, seen = kit(), []
    thumbnails(k, seen)
    k.queue.add("thumbs", "j", {"width": 0, "format": "gif"}, max_attempts=5)
    w = k.worker()
    assert w.drain(["thumbs"], 1).as_dict()["failed"] == 1
    assert seen == []  # the handler never ran
    rec = k.store.get_job("j")
    assert rec.status == "failed" and rec.attempts == 1
    assert rec.last_error is not None
    assert rec.last_error.startswith("payload does not match Thumbnail (3 validation errors): ")
    for part in ("url: Field required", "width: Input should be greater than 0",
                 "format: Input should be 'png' or 'webp'"):
        assert part in rec.last_error
    qj = k.queue.job("thumbs", "j")
    assert qj.state == "dead" and qj.attempts == 1  # permanent in Redis: no retry scheduled
    assert k.count(t.JOBS_FAILED) == 1 and k.count(t.JOBS_RETRIED) == 0
    assert w.drain(["thumbs"], 1).leased == 0


def test_a_payload_that_is_not_an_object_names_the_payload_itself() -> None:
    for payload in (None, [1, 2], "text", 7):
        with pytest.raises(sluice.Fail) as caught:
            parse_payload(Thumbnail, payload)
        assert "payload: Input should be an object" in caught.value.reason, payload


def test_nested_field_paths_are_named_in_full() -> None:
    class Box(BaseModel):
        items: list[Thumbnail]

    with pytest.raises(sluice.Fail) as caught:
        parse_payload(Box, {"items": [{"url": "u", "width": 1}, {"url": "u", "width": "wide"}]})
    assert "items.1.width: Input should be a valid integer" in caught.value.reason


def test_the_reason_is_bounded_by_max_error_chars_through_the_worker() -> None:
    class Many(BaseModel):
        values: list[int]

    k = kit()

    @k.app.handler("many", model=Many)
    def h(req: Many, ctx: JobContext) -> int:
        return len(req.values)

    k.queue.add("many", "j", {"values": [f"not-a-number-{i}" for i in range(5000)]})
    assert k.worker().drain(["many"], 1).as_dict()["failed"] == 1
    error = k.store.get_job("j").last_error
    assert error is not None and len(error) == MAX_ERROR_CHARS and error.endswith("\u2026")
    assert error.startswith("payload does not match Many (5000 validation errors): values.0: ")
    with pytest.raises(sluice.Fail) as caught:
        parse_payload(Many, {"values": ["x"] * 5000})
    assert len(caught.value.reason) == MAX_ERROR_CHARS


def test_the_reason_names_fields_and_rules_but_never_echoes_the_payload() -> None:
    secret = "hunter2-credit-card-4111"
    with pytest.raises(sluice.Fail) as caught:
        parse_payload(Thumbnail, {"url": "u", "width": secret})
    assert "width: Input should be a valid integer" in caught.value.reason
    assert secret not in caught.value.reason


def test_payloads_validate_in_json_mode_as_the_published_schema_says() -> None:
    class Strict(BaseModel):
        model_config = ConfigDict(strict=True)
        at: datetime
        n: int

    got = parse_payload(Strict, {"at": "2026-12-01T10:00:00Z", "n": 3})
    assert isinstance(got, Strict) and got.at.year == 2026 and got.n == 3
    with pytest.raises(sluice.Fail, match="n: Input should be a valid integer"):
        parse_payload(Strict, {"at": "2026-12-01T10:00:00Z", "n": "3"})


def test_a_validator_that_refuses_fails_the_job_and_one_that_crashes_is_a_handler_error() -> None:
    class Checked(BaseModel):
        n: int

        @field_validator("n")
        @classmethod
        def odd(cls, v: int) -> int:
            if v == 13:
                raise RuntimeError("a bug in the model, not a bad payload")
            if v % 2 == 0:
                raise ValueError("must be odd")
            return v

    k = kit()

    @k.app.handler("odd", model=Checked)
    def h(req: Checked, ctx: JobContext) -> int:
        return req.n

    k.queue.add("odd", "even", {"n": 2})
    k.queue.add("odd", "bug", {"n": 13}, max_attempts=3)
    w = k.worker()
    w.drain(["odd"], 2)
    even = k.store.get_job("even")
    assert even.status == "failed" and even.last_error is not None
    assert "n: Value error, must be odd" in even.last_error
    # Not the caller's fault: retried like any exception a handler raises, dead at max_attempts.
    bug = k.store.get_job("bug")
    assert bug.status == "queued" and bug.last_error == "RuntimeError: a bug in the model, not a bad payload"


def test_a_batch_mixes_typed_and_plain_queues_on_concurrent_slots() -> None:
    k, seen = kit(), []
    thumbnails(k, seen)

    @k.app.handler("plain")
    def plain(job: Job, ctx: JobContext) -> Any:
        return job.payload

    for i in range(6):
        k.queue.add("thumbs", f"ok{i}", {"url": f"u{i}", "width": i + 1})
        k.queue.add("thumbs", f"bad{i}", {"url": f"u{i}", "width": -i})
        k.queue.add("plain", f"p{i}", {"width": -i})  # no model: the raw payload, as before
    summary = k.worker(concurrency=3, lease_batch=12).drain(["thumbs", "plain"], 18).as_dict()
    assert summary["succeeded"] == 12 and summary["failed"] == 6 and summary["retried"] == 0
    assert sorted(s.url for s in seen) == [f"u{i}" for i in range(6)]
    assert k.store.get_job("p3").result == {"width": -3}
    assert all(k.store.get_job(f"bad{i}").status == "failed" for i in range(6))


def test_a_typed_handler_runs_under_its_hard_timeout_and_sees_its_context() -> None:
    k = kit()
    release = threading.Event()
    ctxs: list[JobContext] = []

    @k.app.handler("slowtyped", model=Thumbnail, timeout_s=0.2)
    def h(req: Thumbnail, ctx: JobContext) -> None:
        ctxs.append(ctx)
        release.wait(5)

    try:
        k.queue.add("slowtyped", "j", {"url": "u", "width": 1}, max_attempts=3)
        assert k.worker().drain(["slowtyped"], 1).as_dict()["retried"] == 1
        rec = k.store.get_job("j")
        assert rec.status == "queued" and rec.last_error is not None
        assert rec.last_error.startswith("hard timeout")
        assert ctxs[0].job_id == "j" and ctxs[0].token == rec.token and ctxs[0].lease_lost.is_set()
    finally:
        release.set()


def test_schemas_maps_each_typed_queue_to_its_models_json_schema() -> None:
    class Other(BaseModel):
        n: int

    app = sluice.Worker()

    @app.handler("thumbs", model=Thumbnail)
    def a(req: Thumbnail, ctx: JobContext) -> None: ...

    @app.handler("plain")
    def b(job: Job, ctx: JobContext) -> None: ...

    @app.handler("other", model=Other, timeout_s=3)
    def c(req: Other, ctx: JobContext) -> None: ...

    got = app.schemas()
    assert got == {"thumbs": Thumbnail.model_json_schema(), "other": Other.model_json_schema()}
    assert got["thumbs"]["required"] == ["url", "width"]
    got["thumbs"]["required"].append("tampered")
    assert app.schemas()["thumbs"] == Thumbnail.model_json_schema()  # each call a fresh copy
    assert app.bind(worker_id="w2").schemas() == app.schemas()
    assert app.handlers["thumbs"].model is Thumbnail and app.handlers["plain"].model is None
    assert app.handlers["thumbs"].fn is a  # the decorator returns the function itself
    assert sluice.Worker().schemas() == {}


def test_a_model_with_no_json_schema_is_refused_at_registration() -> None:
    class Opaque:
        pass

    class Arbitrary(BaseModel):
        model_config = ConfigDict(arbitrary_types_allowed=True)
        thing: Opaque

    class Unresolved(BaseModel):
        later: NotDefinedAnywhere  # type: ignore[name-defined]  # noqa: F821

    app = sluice.Worker()
    with pytest.raises(InvalidInput, match=r"model Arbitrary for queue 'thumbs' has no JSON Schema.*"
                                           r"PydanticInvalidForJsonSchema"):
        @app.handler("thumbs", model=Arbitrary)
        def a(req: Arbitrary, ctx: JobContext) -> None: ...

    with pytest.raises(InvalidInput, match=r"model Unresolved for queue 'thumbs' has no JSON Schema.*"
                                           r"not fully defined"):
        app.register("thumbs", lambda req, ctx: None, model=Unresolved)
    assert app.handlers == {} and app.schemas() == {}


def test_model_must_be_a_basemodel_subclass() -> None:
    @dataclasses.dataclass
    class Plain:
        url: str

    app = sluice.Worker()
    for bad in (Thumbnail(url="u", width=1), Plain, dict, BaseModel, "Thumbnail", 3):
        with pytest.raises(InvalidInput, match="must be a pydantic BaseModel subclass"):
            app.register("thumbs", lambda req, ctx: None, model=bad)  # type: ignore[arg-type]
    assert app.handlers == {}


def test_a_typed_handler_outliving_its_lease_keeps_it_by_heartbeats_and_writes_with_its_token() -> None:
    k = kit()
    lease_ms = 250  # 120 lapsed between two renewals on a loaded machine (a CI's unit tier), stolen
    armed = threading.Event()

    @k.app.handler("long", model=Thumbnail, timeout_s=10)
    def long(req: Thumbnail, ctx: JobContext) -> dict[str, Any]:
        armed.set()
        time.sleep(5 * lease_ms / 1000)
        return {"width": req.width, "lost": ctx.lease_lost.is_set(), "token": ctx.token}

    k.queue.add("long", "j", {"url": "u", "width": 3})
    with thief(k.queue, "long", armed) as stolen:
        assert k.worker(lease_ms=lease_ms).drain(["long"], 1).as_dict()["succeeded"] == 1
    assert stolen == []
    rec = k.store.get_job("j")
    assert rec.result == {"width": 3, "lost": False, "token": 1}
    assert rec.result_token == 1 and rec.attempts == 1
    assert len(k.queue.called("extend")) >= 4


def test_sluice_check_reports_a_model_without_a_schema_before_any_deploy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "badtyped_handlers.py").write_text(
        "import sluice\n"
        "from pydantic import BaseModel, ConfigDict\n"
        "class Opaque: ...\n"
        "class Bad(BaseModel):\n"
        "    model_config = ConfigDict(arbitrary_types_allowed=True)\n"
        "    thing: Opaque\n"
        "app = sluice.Worker()\n"
        "@app.handler('thumbs', model=Bad)\n"
        "def h(req, ctx): ...\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = CliRunner(mix_stderr=False).invoke(main, ["check", "badtyped_handlers"])
    assert out.exit_code == 1
    assert "model Bad for queue 'thumbs' has no JSON Schema" in out.stderr
    assert "Traceback" not in out.stderr
