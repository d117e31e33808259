"""A handlers module that declares a schedule, for Sluice's default worker (issue 31, item 5): Sluice's
registrar registers it (template.yaml's RegistrarFunction; the worker holds no Scheduler rights)."""

from __future__ import annotations

from typing import Any

from sluice import Job, JobContext, Worker

app = Worker()
app.schedule("hourly", "rate(1 hour)", queue="ticks", payload={"n": 1})


@app.handler("ticks")
def tick(job: Job, ctx: JobContext) -> Any:
    return job.payload
