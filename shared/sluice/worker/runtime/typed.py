"""Typed payloads: a queue's pydantic model, checked once at registration, applied to every job.

``@app.handler("thumbnails", model=Thumbnail)`` hands the handler a validated
``Thumbnail`` instead of the raw payload. A payload that does not validate is the
caller's error, not a passing fault: retrying cannot fix it, so the runtime raises
``Fail`` (status ``failed`` at once, no further attempts) with the validation errors as
its reason. The queue's JSON Schema, generated from the same model, is what a team's
deployment publishes so that the gateway can refuse such payloads at the door
(``Worker.schemas()``; docs/worker.md, "Typed payloads").

Validation runs in pydantic's JSON mode: the payload *is* JSON (the gateway parsed it),
so a ``datetime`` or ``UUID`` field of a strict model accepts its JSON string form
exactly as the published schema says, rather than the Python-mode rules.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel, ValidationError

from sluice.core.errors import InvalidInput
from sluice.core.models import describe_validation, dump_json, truncate_error
from sluice.worker.runtime.outcomes import Fail


def check_model(queue: str, model: object) -> dict[str, Any]:
    """The JSON Schema of ``model`` for ``queue``, or InvalidInput saying why it cannot be one.

    Refused: anything but a pydantic ``BaseModel`` subclass (an instance, a dataclass, a
    TypedDict, ``BaseModel`` itself), and a model with no JSON Schema (an arbitrary type, a
    forward reference never resolved, a default JSON cannot hold). Checked at import time,
    so a bad model stops the worker from starting instead of failing every job.
    """
    if not isinstance(model, type) or not issubclass(model, BaseModel) or model is BaseModel:
        raise InvalidInput(f"model for queue {queue!r} must be a pydantic BaseModel subclass, "
                           f"got {model!r}")
    try:
        schema = model.model_json_schema()
        dump_json(schema)
    except Exception as exc:  # PydanticUserError, PydanticInvalidForJsonSchema, InvalidInput, ...
        raise InvalidInput(f"model {model.__name__} for queue {queue!r} has no JSON Schema, so its "
                           f"payloads cannot be published or checked at the gateway: "
                           f"{type(exc).__name__}: {exc}") from exc
    return schema


def schema_copy(schema: dict[str, Any]) -> dict[str, Any]:
    """A caller's own copy: nobody may edit the schema the worker registered."""
    return copy.deepcopy(schema)


def parse_payload(model: type[BaseModel], payload: Any) -> BaseModel:
    """``payload`` as ``model``, or ``Fail`` naming each field path and what is wrong with it."""
    try:
        return model.model_validate_json(dump_json(payload))
    except ValidationError as exc:
        n = exc.error_count()
        raise Fail(truncate_error(
            f"payload does not match {model.__name__} ({n} validation error{'s' * (n != 1)}): "
            f"{describe_validation(exc, root='payload')}")) from None
