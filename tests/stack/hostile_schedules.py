"""A hostile team's handlers module whose code schedules jobs onto another team's queue (issue 31):
its registrar refuses the registration (tests/stack/test_hostile_team.py)."""

import sluice

app = sluice.Worker()
app.schedule("drain-them", "rate(1 minute)", queue="word-count", payload={"text": "spam"})


@app.handler("evil-jobs")
def evil(job: sluice.Job, ctx: sluice.JobContext) -> dict[str, bool]:
    return {"ran": True}
