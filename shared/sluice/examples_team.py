"""A second team's handlers, for ``sluice dev --worker words=sluice.examples_team`` and the demo.

They run in their own worker function (``sluice-worker-words``), with its own containers, and
their queue is routed to it (docs/teams.md). ``word-count`` is a typed queue (``model=Text``):
its JSON Schema is published with its route, so the gateway refuses a payload that does not
match (400 ``PAYLOAD_INVALID``) and the handler gets a validated ``Text``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from sluice.runtime.context import JobContext
from sluice.worker import Worker

app = Worker()
FUNCTION = "sluice-worker-words"  # the function the local stack runs these in (--worker words=...)


class Text(BaseModel):
    """A ``word-count`` job: the text, and the demo's index (echoed back)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    text: str = Field(max_length=100_000)
    i: int | None = None


@app.handler("word-count", model=Text, timeout_s=30)
def word_count(text: Text, ctx: JobContext) -> dict[str, Any]:
    # The function that ran it, as Lambda named it (worker ids are "<function>:<request id>").
    return {"words": len(text.text.split()), "i": text.i, "function": ctx.worker_id.split(":")[0]}


def expected_result(queue: str, payload: Any) -> Any:
    """What ``word-count`` returns, run where its route says (``...`` for any other queue): the
    demo's checker holds every word-count job to it, so a job run by another function fails it."""
    if queue != "word-count" or not isinstance(payload, dict):
        return ...
    return {"words": len(str(payload.get("text", "")).split()), "i": payload.get("i"), "function": FUNCTION}
