"""A handlers module for a route to a function that does not exist (tests/stack/test_dev_teams.py)."""

import sluice

app = sluice.Worker()


@app.handler("ghost-queue")
def ghost(job: sluice.Job, ctx: sluice.JobContext) -> None:
    return None
