"""Schema evolution with jobs in flight (issue 15; docs/worker.md, "Evolving a model").

A job accepted under version 1 of a queue's model waits in the queue while version 2 is
deployed; the version-2 worker validates it against its own, current model. Evolved as the
docs say (a new field optional with a default; a rename that still accepts the old name), the
old payload runs. Evolved wrongly (a new required field; a rename in one step), it ends
``failed`` after its one attempt, with the field path as its reason, and is not retried.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field, model_validator

import sluice
from sluice.worker.runtime.context import JobContext
from sluice_dev.fakes import kit


class ThumbnailV1(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str
    width: int = Field(gt=0)


OLD = {"url": "s3://img/cat.jpg", "width": 64}  # accepted at the door under ThumbnailV1


class AddedOptional(BaseModel):
    """As documented: the new field is optional, with a default that keeps the old meaning."""

    model_config = ConfigDict(extra="forbid")
    url: str
    width: int = Field(gt=0)
    format: str = "png"


class RenamedWithUpcast(BaseModel):
    """As documented: ``width`` becomes ``size``; a payload of the old shape is upgraded."""

    model_config = ConfigDict(extra="forbid")
    url: str
    size: int = Field(gt=0)

    @model_validator(mode="before")
    @classmethod
    def _from_v1(cls, data: Any) -> Any:
        if isinstance(data, dict) and "width" in data and "size" not in data:
            data = {k: v for k, v in data.items() if k != "width"} | {"size": data["width"]}
        return data


class AddedRequired(BaseModel):
    """Wrong: a required field added in one step. Every job enqueued before lacks it."""

    model_config = ConfigDict(extra="forbid")
    url: str
    width: int = Field(gt=0)
    format: str


class RenamedInOneStep(BaseModel):
    """Wrong: ``width`` renamed to ``size`` in one step."""

    model_config = ConfigDict(extra="forbid")
    url: str
    size: int = Field(gt=0)


def deploy(model: type[BaseModel]) -> tuple[Any, list[BaseModel]]:
    """A queue holding one job accepted under v1, and a worker of ``model`` to drain it."""
    k, seen = kit(), []
    k.app.register("thumbs", lambda req, ctx: seen.append(req) or req.model_dump(), model=model)
    ThumbnailV1.model_validate(OLD)  # the in-flight payload was valid when it was accepted
    k.queue.add("thumbs", "inflight", dict(OLD), max_attempts=5)
    return k, seen


@pytest.mark.parametrize(("model", "result"), [
    (AddedOptional, {"url": "s3://img/cat.jpg", "width": 64, "format": "png"}),
    (RenamedWithUpcast, {"url": "s3://img/cat.jpg", "size": 64}),
])
def test_an_inflight_job_validates_against_a_model_evolved_as_documented(
        model: type[BaseModel], result: dict[str, Any]) -> None:
    k, seen = deploy(model)
    assert k.worker().drain(["thumbs"], 1).as_dict()["succeeded"] == 1
    assert len(seen) == 1 and isinstance(seen[0], model)
    rec = k.store.get_job("inflight")
    assert rec.status == "succeeded" and rec.result == result and rec.attempts == 1
    # new callers use the new shape, and the published schema says so
    assert model.model_validate({"url": "u", "width": 1, "format": "webp"} if model is AddedOptional
                                else {"url": "u", "size": 1})


@pytest.mark.parametrize(("model", "why"), [
    (AddedRequired, "format: Field required"),
    (RenamedInOneStep, "width: Extra inputs are not permitted; size: Field required"),
])
def test_an_inflight_job_fails_once_not_retried_against_a_model_evolved_wrongly(
        model: type[BaseModel], why: str) -> None:
    k, seen = deploy(model)
    w = k.worker()
    assert w.drain(["thumbs"], 1).as_dict()["failed"] == 1
    assert seen == []
    rec = k.store.get_job("inflight")
    assert rec.status == "failed" and rec.attempts == 1
    assert rec.last_error is not None and why in rec.last_error
    assert rec.last_error.startswith(f"payload does not match {model.__name__}")
    assert k.queue.job("thumbs", "inflight").state == "dead"  # permanent: no retry is scheduled
    assert w.drain(["thumbs"], 1).leased == 0


def test_the_evolved_schema_is_what_the_worker_publishes() -> None:
    app = sluice.Worker()

    @app.handler("thumbs", model=AddedOptional)
    def h(req: AddedOptional, ctx: JobContext) -> None: ...

    schema = app.schemas()["thumbs"]
    # the door keeps accepting v1 payloads: the new field is not required
    assert schema["required"] == ["url", "width"] and schema["properties"]["format"]["default"] == "png"
    assert schema["additionalProperties"] is False
