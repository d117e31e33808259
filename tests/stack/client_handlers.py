"""The handlers of the client's stack test (tests/stack/test_client_stack.py) and of the example in
docs/api.md ("Connections, close(), AsyncClient, models as payloads"): an ``emails`` queue."""

from typing import Any

import sluice

app = sluice.Worker()


@app.handler("emails")
def send(job: sluice.Job, ctx: sluice.JobContext) -> dict[str, Any]:
    return {"sent": job.payload}
