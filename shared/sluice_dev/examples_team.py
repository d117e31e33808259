"""A second team's handlers, for ``sluice dev --worker words=sluice_dev.examples_team`` and the demo.

They run in their own worker function (``sluice-worker-words``), with its own containers, and
their queue is routed to it (docs/teams.md). ``word-count`` is a typed queue (``model=Text``):
its JSON Schema is published with its route, so the gateway refuses a payload that does not
match (400 ``PAYLOAD_INVALID``) and the handler gets a validated ``Text``. ``new-year`` is a schedule
declared in code (``app.schedule``), on the team's own queue.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from sluice import Fail, Job, JobContext, Worker

app = Worker()
MAX_TEXTS = 100
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


# A schedule in code (issue 31), registered with the routes by the team's registrar at deploy (and
# at `sluice dev --worker words=...`): once a year, so it never fires during a test or the demo.
app.schedule("new-year", "cron(0 0 1 1 ? *)", queue="word-count", payload=Text(text="happy new year"))


@app.handler("word-batch")
def word_batch(job: Job, ctx: JobContext) -> dict[str, Any]:
    """``{"texts": [...]}``: one ``word-count`` child per text, then ``word-total`` after them all.

    A team's handler starting jobs: its function asks Sluice's gateway function for them
    (infra/worker.yaml gives it the name and the right to invoke it; docs/flows.md)."""
    texts = job.payload.get("texts") if isinstance(job.payload, dict) else None
    if not isinstance(texts, list) or not 1 <= len(texts) <= MAX_TEXTS or \
            not all(isinstance(t, str) for t in texts):
        raise Fail(f"texts must be a list of 1..{MAX_TEXTS} strings")
    family = ctx.enqueue_many([("word-count", {"text": t, "i": i}, f"text-{i}") for i, t in enumerate(texts)],
                              then=("word-total", {"texts": len(texts)}))
    return {"children": len(family.job_ids), "continuation": family.continuation}


@app.handler("word-total")
def word_total(job: Job, ctx: JobContext) -> dict[str, Any]:
    """The continuation of ``word-batch``: the words of every child that succeeded."""
    children = ctx.children()
    return {"words": sum(c.result["words"] for c in children
                         if c.status.value == "succeeded" and isinstance(c.result, dict)),
            "children": len(children)}


def expected_result(queue: str, payload: Any) -> Any:
    """What ``word-count`` returns, run where its route says (``...`` for any other queue): the
    demo's checker holds every word-count job to it, so a job run by another function fails it."""
    if queue != "word-count" or not isinstance(payload, dict):
        return ...
    return {"words": len(str(payload.get("text", "")).split()), "i": payload.get("i"), "function": FUNCTION}
