"""Handlers for the head-of-line stack test (tests/stack/test_parking_stack.py): each job appends
its id and the time it ran to the file its payload names (one short line: an atomic append)."""

import json
import time

import sluice

app = sluice.Worker()


def _ran(job: sluice.Job) -> None:
    with open(job.payload["log"], "a", encoding="utf-8") as f:
        f.write(json.dumps({"id": job.job_id, "t": time.time()}) + "\n")


@app.handler("park-a")
def held(job: sluice.Job, ctx: sluice.JobContext) -> None:
    _ran(job)


@app.handler("park-b")
def flowing(job: sluice.Job, ctx: sluice.JobContext) -> None:
    _ran(job)
