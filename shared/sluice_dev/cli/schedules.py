"""``sluice schedules create|list|show|pause|resume|delete``: a queue's schedules (issue 31, item 5).

Schedules live behind the operator API only (``/v1/admin/queues/{queue}/schedules``, docs/api.md,
Schedules), so these commands always go through it (``Target.operator_client``): the local stack's
gateway as its operator, or a deployed API SigV4-signed with the usual AWS credentials. A name is
unique within its queue, so every command names the queue first.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import click

from sluice.client import Client
from sluice.core.declared import SLUICE_OWNER
from sluice.core.errors import SluiceError
from sluice.core.models import validate_queue_name
from sluice.core.schedules import check_name
from sluice_dev.cli.jobs import parse_payload
from sluice_dev.cli.output import emit, json_mode
from sluice_dev.cli.target import Target

QUEUE = click.argument("queue", callback=lambda _c, _p, value: validate_queue_name(value))
NAME = click.argument("name", callback=lambda _c, _p, value: check_name(value))


def _when(ms: int | None) -> str:
    if ms is None:
        return "-"
    import datetime as dt

    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def line(view: Mapping[str, Any]) -> str:
    """One schedule as a line: name, expression, active or paused, next firing, payload, and the team
    whose code declares it (issue 31)."""
    state = "paused" if view.get("paused") else "active"
    by = view.get("declared_by")
    owner = ("  declared by the default worker's code" if by == SLUICE_OWNER
             else f"  declared by team {by}" if by else "")
    return (f"{view['name']}  {view['expression']}  {state}  next {_when(view.get('next_firing_ms'))}  "
            f"payload {json.dumps(view.get('payload'), separators=(',', ':'))}{owner}")


def _show(view: Mapping[str, Any], text: str) -> None:
    emit(dict(view), f"{text}\n{line(view)}" if text else line(view))


@click.group()
def schedules() -> None:
    """A queue's schedules: each firing of a cron or rate expression enqueues its payload."""


@schedules.command("create")
@QUEUE
@NAME
@click.argument("expression")
@click.option("--payload", "-p", default="null", show_default=True,
              help="Every firing's job payload as JSON, or @file.json.")
@click.pass_obj
def create(target: Target, queue: str, name: str, expression: str, payload: str) -> None:
    """Create schedule NAME of QUEUE firing at EXPRESSION (UTC), e.g. 'cron(0 3 * * ? *)' or
    'rate(5 minutes)'."""
    body = parse_payload(payload)  # a bad one is reported before any connection
    with target.operator_client() as api:
        view = api.create_schedule(queue, name, expression, body)
    _show(view, f"created schedule {name} of {queue}")


@schedules.command("list")
@QUEUE
@click.pass_obj
def list_cmd(target: Target, queue: str) -> None:
    """QUEUE's schedules, by name (with --json: one JSON object per schedule, one per line)."""
    with target.operator_client() as api:
        found = api.schedules(queue)
    if found is None:
        raise SluiceError("this gateway serves no schedules (it has no schedules table)")
    if json_mode():
        for view in found:
            click.echo(json.dumps(view, separators=(",", ":")))
        return
    click.echo("\n".join(line(v) for v in found) if found else f"{queue} has no schedules")


def _one(verb: str, call: Callable[[Client, str, str], dict[str, Any]], said: str, doc: str) -> None:
    """``sluice schedules VERB QUEUE NAME``: ``call`` on the operator API, then the schedule it answers."""

    @schedules.command(verb, help=doc)
    @QUEUE
    @NAME
    @click.pass_obj
    def command(target: Target, queue: str, name: str) -> None:
        with target.operator_client() as api:
            _show(call(api, queue, name), said and f"{said} schedule {name} of {queue}")


_one("show", Client.get_schedule, "", "One schedule and its next firing.")
_one("pause", Client.pause_schedule, "paused",
     "Stop the schedule firing until resumed (firings missed meanwhile are not sent later).")
_one("resume", Client.resume_schedule, "resumed", "Fire the schedule again.")


@schedules.command("delete")
@QUEUE
@NAME
@click.pass_obj
def delete(target: Target, queue: str, name: str) -> None:
    """Delete the schedule; the jobs it enqueued stay."""
    with target.operator_client() as api:
        api.delete_schedule(queue, name)
    emit({"queue": queue, "name": name, "deleted": True}, f"deleted schedule {name} of {queue}")


COMMANDS = [schedules]
