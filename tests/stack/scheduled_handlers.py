"""A handlers module that declares a schedule, for Sluice's default worker: refused (issue 31, item 5),
as the default worker's DefaultWorkerRoutes refuses it in AWS (it holds no Scheduler rights)."""

from __future__ import annotations

from typing import Any

from sluice import Job, JobContext, Worker

app = Worker()
app.schedule("hourly", "rate(1 hour)", queue="ticks", payload={"n": 1})


@app.handler("ticks")
def tick(job: Job, ctx: JobContext) -> Any:
    return job.payload
