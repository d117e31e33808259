"""A synchronous Lambda invoke whose answer is a JSON object (the internal function's, a team
worker's describe): the reply read, its errors translated into ``BackendUnavailable``."""

from __future__ import annotations

import json
from typing import Any

from sluice.core.errors import BackendUnavailable, InvalidInput


def invoke_json(client: Any, function: str, payload: dict[str, Any], *, what: str,
                qualifier: str | None = None) -> dict[str, Any]:
    """``RequestResponse`` invoke of ``function`` with ``payload``; ``what`` names it in errors.

    BackendUnavailable when the call, the function or its JSON fails (the caller may retry);
    InvalidInput when it answers JSON that is not an object."""
    import botocore.exceptions

    kwargs: dict[str, Any] = {"FunctionName": function, "InvocationType": "RequestResponse",
                              "Payload": json.dumps(payload).encode()}
    if qualifier:
        kwargs["Qualifier"] = qualifier
    try:
        reply = client.invoke(**kwargs)
        body = reply["Payload"].read()
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
        raise BackendUnavailable(f"cannot invoke {what}: {exc}") from exc
    if reply.get("FunctionError"):
        raise BackendUnavailable(f"{what} failed: {body[:300]!r}")
    try:
        answer = json.loads(body)
    except ValueError as exc:
        raise BackendUnavailable(f"{what} answered no JSON: {body[:300]!r}") from exc
    if not isinstance(answer, dict):
        raise InvalidInput(f"{what} answered {answer!r}, not a JSON object")
    return answer
