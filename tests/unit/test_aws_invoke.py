"""The one synchronous JSON invoke the internal function's and the registrar's callers share."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from sluice.backends.aws.invoke import invoke_json
from sluice.core.errors import BackendUnavailable, InvalidInput


class Client:
    def __init__(self, body: bytes, function_error: bool = False) -> None:
        self.body, self.function_error, self.calls = body, function_error, []  # type: ignore[var-annotated]

    def invoke(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        reply: dict[str, Any] = {"Payload": io.BytesIO(self.body)}
        if self.function_error:
            reply["FunctionError"] = "Unhandled"
        return reply


def test_the_answer_is_the_functions_json_object_and_the_qualifier_is_passed() -> None:
    client = Client(json.dumps({"statusCode": 202}).encode())
    assert invoke_json(client, "fn", {"a": 1}, what="fn", qualifier="7") == {"statusCode": 202}
    (call,) = client.calls
    assert call == {"FunctionName": "fn", "InvocationType": "RequestResponse", "Payload": b'{"a": 1}',
                    "Qualifier": "7"}
    invoke_json(client, "fn", {}, what="fn")
    assert "Qualifier" not in client.calls[-1]


@pytest.mark.parametrize(("client", "error", "says"), [
    (Client(b'{"errorMessage": "boom"}', function_error=True), BackendUnavailable,
     "the internal function failed"),
    (Client(b"not json"), BackendUnavailable, "answered no JSON"),
    (Client(b"[1, 2]"), InvalidInput, "not a JSON object"),
])
def test_failures_are_translated_with_what_was_invoked(client: Client, error: type[Exception],
                                                       says: str) -> None:
    with pytest.raises(error, match=says):
        invoke_json(client, "sluice-internal", {}, what="the internal function")
