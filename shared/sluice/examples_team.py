"""A second team's handlers, for ``sluice dev --worker words=sluice.examples_team`` and the demo.

They run in their own worker function (``sluice-worker-words``), with its own containers, and
their queue is routed to it (docs/teams.md). ``word-count`` checks its payload with a pydantic
model: a payload that does not validate fails at once, not retried.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sluice.runtime.context import JobContext
from sluice.runtime.outcomes import Fail
from sluice.worker import Worker

app = Worker()
FUNCTION = "sluice-worker-words"  # the function the local stack runs these in (--worker words=...)


class Text(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(max_length=100_000)
    i: int | None = None  # the demo's index, echoed back


@app.handler("word-count", timeout_s=30)
def word_count(job: Any, ctx: JobContext) -> dict[str, Any]:
    try:
        text = Text.model_validate(job.payload)
    except ValidationError as exc:
        raise Fail(f"invalid payload: {exc.errors(include_url=False)}") from None
    # The function that ran it, as Lambda named it (worker ids are "<function>:<request id>").
    return {"words": len(text.text.split()), "i": text.i, "function": ctx.worker_id.split(":")[0]}


def expected_result(queue: str, payload: Any) -> Any:
    """What ``word-count`` returns, run where its route says (``...`` for any other queue): the
    demo's checker holds every word-count job to it, so a job run by another function fails it."""
    if queue != "word-count" or not isinstance(payload, dict):
        return ...
    return {"words": len(str(payload.get("text", "")).split()), "i": payload.get("i"), "function": FUNCTION}
