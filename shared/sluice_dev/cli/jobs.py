"""``sluice enqueue``, ``sluice status``, ``sluice cancel``: jobs through the HTTP API.

With ``--wait`` the exit code says how the job ended (``output.FINAL_EXIT``: 0 succeeded,
4 failed, 5 dead, 6 cancelled) and 7 if ``--timeout`` passed first (docs/api.md).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from sluice.core.errors import InvalidInput
from sluice.core.models import validate_queue_name
from sluice_dev.cli.output import FINAL_EXIT, emit
from sluice_dev.cli.target import Target


def parse_payload(text: str) -> Any:
    if text.startswith("@"):
        try:
            with open(text[1:], encoding="utf-8") as f:
                text = f.read()
        except OSError as exc:
            raise InvalidInput(f"cannot read the payload file {text[1:]!r}: {exc.strerror}") from exc
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InvalidInput(f"--payload is not JSON: {exc}") from exc


def _ended(view: Any, as_json: bool) -> None:
    """Print a job --wait saw end, and exit with the code of its final state."""
    _echo_job(view, as_json)
    sys.exit(FINAL_EXIT.get(str(view.status), 0))


def _echo_job(view: Any, as_json: bool) -> None:
    data = view.model_dump(mode="json")
    if as_json:
        click.echo(json.dumps(data))
        return
    click.echo(f"{data['job_id']}  {data['queue']}  {data['status']}  attempts={data['attempts']}")
    if (line := progress_line(data)) is not None:
        click.echo(line)
    if data.get("result") is not None:
        click.echo(f"result: {json.dumps(data['result'])}")
    if data.get("result_ref"):
        click.echo(f"result: {data['result_ref']}")
    if data.get("last_error"):
        click.echo(f"last error: {data['last_error']}")
    _echo_family(data)


def _echo_family(data: dict[str, Any]) -> None:
    """Parent, children and continuations (docs/flows.md): one line each, only where there are any."""
    if data.get("parent_id"):
        click.echo(f"parent: {data['parent_id']}")
    if data.get("children"):
        shown = data["children"][:5]
        more = f" (+{len(data['children']) - len(shown)} more)" if len(data["children"]) > len(shown) else ""
        click.echo(f"children: {len(data['children'])}: {' '.join(shown)}{more}")
    for then in data.get("continuations") or []:
        click.echo(f"continuation: {then}")
    if data.get("continuation"):
        click.echo(f"counts down: {data['continuation']}")
    if data.get("waits_for"):
        click.echo(f"waits for: {len(data['waits_for'])} children, {data.get('remaining')} not ended yet")


@click.command()
@click.argument("queue")
@click.option("--payload", "-p", required=True, help='The job\'s payload as JSON, or @file.json.')
@click.option("--delay", type=click.IntRange(0, 7 * 24 * 3600), default=0, show_default=True,
              help="Seconds before the job may run.")
@click.option("--priority", type=click.IntRange(0, 9), default=0, show_default=True,
              help="0..9; higher runs first.")
@click.option("--max-attempts", type=click.IntRange(1, 100), default=None,
              help="Attempts before it is dead-lettered, at most the handler's RetryPolicy's. "
                   "Absent: the handler's policy decides, else 5.")
@click.option("--lease-seconds", type=click.IntRange(1, 43_200), default=30, show_default=True)
@click.option("--idempotency-key", "-k", default=None,
              help="The same key and body return the original job instead of a new one.")
@click.option("--group", "-g", default=None,
              help="Its fair-share group (a tenant id): groups are leased in turn.")
@click.option("--wait", is_flag=True, help="Wait until the job has finished and print it.")
@click.option("--timeout", type=float, default=60.0, show_default=True, help="With --wait: give up after.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def enqueue(target: Target, queue: str, payload: str, delay: int, priority: int, max_attempts: int | None,
            lease_seconds: int, idempotency_key: str | None, group: str | None, wait: bool, timeout: float,
            as_json: bool) -> None:
    """Enqueue one job on QUEUE; prints its id once Kafka has acknowledged it.

    With --wait, exits 0 if the job succeeded, 4 failed, 5 dead, 6 cancelled, 7 timed out."""
    body = parse_payload(payload)  # the arguments first: a bad one is reported before any connection
    validate_queue_name(queue)
    client = target.client()
    accepted = client.enqueue(queue, body, delay_seconds=delay, priority=priority,
                              max_attempts=max_attempts, lease_seconds=lease_seconds,
                              idempotency_key=idempotency_key, group=group)
    if wait:
        _ended(client.wait(accepted.job_id, timeout_s=timeout), as_json)
    elif as_json:
        click.echo(accepted.model_dump_json())
    else:
        click.echo(f"{accepted.job_id}  {accepted.queue}  {accepted.status}")


@click.command()
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--wait", is_flag=True, help="Wait until the job has finished.")
@click.option("--timeout", type=float, default=60.0, show_default=True, help="With --wait: give up after.")
@click.pass_obj
def status(target: Target, job_id: str, as_json: bool, wait: bool, timeout: float) -> None:
    """Show a job's status, attempts, and result or last error.

    With --wait, exits 0 if the job succeeded, 4 failed, 5 dead, 6 cancelled, 7 timed out."""
    if target.has_api():
        client = target.client()
        if wait:
            _ended(client.wait(job_id, timeout_s=timeout), as_json)
        _echo_job(client.status(job_id), as_json)
        return
    record = target.store().get_job(job_id)  # an operator with AWS credentials and no API
    data = record.model_dump(mode="json")
    if as_json:
        click.echo(json.dumps(data))
    else:
        click.echo(f"{record.job_id}  {record.queue}  {record.status.value}  attempts={record.attempts}")
        _echo_family(data)
        if (line := progress_line(data)) is not None:
            click.echo(line)


def progress_line(data: dict[str, Any]) -> str | None:
    """``progress: 40% resized 4 of 10`` for a job whose handler reported progress."""
    if data.get("progress") is None:
        return None
    detail = data.get("progress_detail") or ""
    return f"progress: {data['progress'] * 100:.0f}%" + (f" {detail}" if detail else "")


@click.command()
@click.argument("job_id")
@click.pass_obj
def cancel(target: Target, job_id: str) -> None:
    """Cancel a job that has not finished (a running one is told on its next heartbeat)."""
    result = target.client().cancel(job_id)
    emit(result.model_dump(mode="json"), f"{result.job_id}  {result.status}")


COMMANDS = [enqueue, status, cancel]
