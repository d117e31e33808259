"""``sluice events``: the completion events (docs/events.md), as they are delivered.

Against ``sluice dev`` it reads the SQS queue its bus rule targets (moto delivers
EventBridge events to SQS, not to Lambda). Against AWS, point ``--queue-url`` at a queue
that a rule on the stack's ``EventBusName`` targets.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import click

from sluice_dev.cli.target import NoTarget, Target


def _line(event: dict[str, Any]) -> str:
    d = event.get("detail", {})
    tail = f" result={json.dumps(d['result'])}" if "result" in d else \
        f" result_ref={d['result_ref']}" if d.get("result_ref") else \
        f" error={d['last_error']!r}" if d.get("last_error") else ""
    return (f"{event.get('detail-type', '?'):14} {d.get('job_id')}  {d.get('queue')}  "
            f"attempts={d.get('attempts')} token={d.get('token')} gen={d.get('redrive_gen')}{tail}")


@click.command()
@click.option("--follow", "-f", is_flag=True, help="Keep printing events as they happen (Ctrl-C stops).")
@click.option("--queue-url", default=None, help="An SQS queue a rule on the bus targets (default: the "
                                                "local stack's).")
@click.option("--json", "as_json", is_flag=True, help="One EventBridge event as JSON per line.")
@click.pass_obj
def events(target: Target, follow: bool, queue_url: str | None, as_json: bool) -> None:
    """Print the completion events of ended jobs (Job Succeeded, Failed, Dead, Cancelled)."""
    from sluice_dev.local.streams import follow as read

    url = queue_url or (target.local or {}).get("events_queue_url")
    if not url:
        raise NoTarget("no events queue: start `sluice dev`, or pass --queue-url")
    settings = target.settings(need="SLUICE_AWS_REGION")

    def emit(event: dict[str, Any]) -> None:
        click.echo(json.dumps(event) if as_json else _line(event))

    with contextlib.suppress(KeyboardInterrupt):
        read(settings, url, emit, until_empty=not follow)  # without --follow: what waits now


COMMANDS = [events]
