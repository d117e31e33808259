"""``sluice jobs list``: a queue's jobs by state, newest first, through the operator API (issue 32).

It reads ``GET /v1/admin/queues/{queue}/jobs`` (``Client.list_jobs``): against the local stack
or a deployment alike, SigV4-signed there. Payload fields the queue marks sensitive arrive
redacted from the API, so this command never holds them to print or log.
"""

from __future__ import annotations

import json
import time

import click
from rich.table import Table
from rich.text import Text

from sluice.core.listing import DEFAULT_PAGE, MAX_PAGE, STATES, ListedJob
from sluice.core.models import validate_queue_name
from sluice_dev.cli.ops import age, console
from sluice_dev.cli.target import Target


@click.group()
def jobs() -> None:
    """A queue's jobs: list them by state."""


def when_cell(job: ListedJob, now_ms: float) -> str:
    """How long ago (or until when) the job's time for its state is."""
    if job.at_ms is None:
        return "-" if job.enqueued_at_ms is None else f"waiting {age(int(now_ms - job.enqueued_at_ms))}"
    delta = int(job.at_ms - now_ms)
    return f"in {age(delta)}" if delta > 0 else f"{age(-delta)} ago"


@jobs.command("list")
@click.argument("queue", callback=lambda _c, _p, v: validate_queue_name(v))
@click.option("--state", type=click.Choice(STATES), default="ready", show_default=True)
@click.option("--prefix", default=None, help="Only job ids that start with this.")
@click.option("--limit", type=click.IntRange(1, MAX_PAGE), default=DEFAULT_PAGE, show_default=True)
@click.option("--cursor", default=None, help="The `next` a page printed: the page after it.")
@click.option("--json", "as_json", is_flag=True, help="The page as the API answered it, one JSON object.")
@click.pass_obj
def list_jobs(target: Target, queue: str, state: str, prefix: str | None, limit: int, cursor: str | None,
              as_json: bool) -> None:
    """List QUEUE's jobs in one state, newest first, a page at a time."""
    page = target.operator_client().list_jobs(queue, state, limit=limit, cursor=cursor, prefix=prefix)
    if as_json:
        click.echo(page.model_dump_json())
        return
    if not page.jobs:
        click.echo(f"{queue}: no {state} jobs" + (f" starting {prefix}" if prefix else ""))
    else:
        table = Table()
        for col in ("job id", "when", "priority", "attempts", "payload", "last error"):
            table.add_column(col)
        now = time.time() * 1000
        for job in page.jobs:
            payload = "-" if job.payload is None else json.dumps(job.payload, ensure_ascii=False)[:80]
            error = (job.last_error or "")[:80]
            # left unread by the operator function (sluice.core.read_bounds): said, not shown blank
            payload, error = ("[not read]" if "payload" in job.unread else payload,
                              "[not read]" if "last_error" in job.unread else error)
            name = job.job_id + (f" ({job.parked})" if job.parked else "")  # parked: delay or held
            cells = (name, when_cell(job, now), "-" if job.priority is None else str(job.priority),
                     "-" if job.attempts is None else str(job.attempts), payload, error)
            table.add_row(*(Text(c) for c in cells))  # Text: "[redacted]" is no rich markup
        console().print(table)
    if page.next:
        click.echo(f"more: --cursor {page.next}")


COMMANDS = [jobs]
