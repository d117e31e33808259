"""The hostile team's handlers module (tests/stack/test_hostile_team.py): one queue of its own."""

import sluice

app = sluice.Worker()


@app.handler("evil-jobs")
def evil(job: sluice.Job, ctx: sluice.JobContext) -> dict[str, bool]:
    return {"ran": True}
