"""``sluice routes register|list|delete|digest``: which worker function drains which queues.

``register`` loads a handlers module, as the worker function will, and routes each of its
queues (and any ``--pattern`` prefix) to ``--function``, publishing each typed queue's JSON
Schema (``app.schemas()``) next to its route. It refuses, writing nothing: a function that does
not exist, a queue another owner routes, a schema that is not valid JSON Schema. In AWS the
team's stack does the same at deploy time (infra/worker.yaml's ``Routes`` custom resource).
``digest`` prints what that deploy's ``Declarations`` parameter should be for a handlers module.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from sluice.core.errors import InvalidInput
from sluice_dev.cli.target import Target

if TYPE_CHECKING:
    from sluice.backends.dynamodb.routes import DynamoRouteStore


def _store(target: Target) -> DynamoRouteStore:
    store = target.routes()
    if store is None:
        raise InvalidInput("no routes table: set SLUICE_ROUTES_TABLE (the stack's RoutesTableName output) "
                           "or start `sluice dev`")
    return store


@click.group()
def routes() -> None:
    """Route queues to worker functions (one function per team; docs/teams.md)."""


@routes.command("register")
@click.option("--function", "function", required=True, help="The worker function's name.")
@click.option("--handlers", "module", required=True, help="Its handlers module (a sluice.Worker named app).")
@click.option("--owner", default=None, help="The team that owns these routes (default: the function).")
@click.option("--pattern", "patterns", multiple=True,
              help="Also route a queue prefix, e.g. 'thumbs-*' (repeatable).")
@click.option("--no-check", is_flag=True, help="Do not ask Lambda whether the function exists.")
@click.pass_obj
def register(target: Target, function: str, module: str, owner: str | None, patterns: tuple[str, ...],
             no_check: bool) -> None:
    """Route every queue of MODULE's handlers (and each --pattern) to FUNCTION."""
    from sluice.backends.dynamodb import routes as store_routes
    from sluice.core.routes import app_schemas, routes_for
    from sluice.entry.worker import load_app

    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # the user's own module, as `sluice dev` finds it
    app = load_app(module)
    who = owner or function
    wanted = routes_for(function, who, app.handlers, app_schemas(app), patterns)
    store = _store(target)
    stale = store_routes.register(store, None if no_check else target.functions(), wanted, owner=who,
                                  function=function)
    for r in wanted:
        typed = f" (typed: {', '.join(sorted(r.schemas))})" if r.schemas else ""
        click.echo(f"{r.pattern} -> {function}{typed}")
    for r in stale:
        click.echo(f"removed {r.pattern} (no longer handled by {function})")


@routes.command("digest")
@click.argument("module")
@click.option("--code", "code", type=click.Path(file_okay=False, path_type=Path), default=Path("worker"),
              show_default=True,
              help="The folder that holds MODULE, the worker function's CodeUri (infra/worker.yaml's is "
                   "worker/); MODULE is looked for there, then in this folder.")
@click.option("--json", "as_json", is_flag=True, help="The describe answer the digest is of, as JSON.")
def digest(module: str, code: Path, as_json: bool) -> None:
    """The digest of MODULE's queues, schemas and declared schedules (issue 31): pass it to the deploy
    (infra/worker.yaml's Declarations, template.yaml's WorkerDeclarations), so that a change to any of
    them re-registers them: CloudFormation re-runs the registration only when a property changes."""
    from sluice.entry.worker import describe, load_app

    # The user's own module, where the deploy puts it (the CodeUri, as `sluice check` looks), else in
    # this folder, as `sluice dev` finds it. docs/teams.md's layout keeps jobs.py in worker/: from the
    # team's folder, `sluice routes digest jobs` failed with "No module named 'jobs'", and the deploy
    # line's `Declarations=$(...)` went on with an empty digest.
    for folder in (os.getcwd(), *([str(code.resolve())] if code.is_dir() else [])):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    answer = describe(load_app(module))
    click.echo(json.dumps(answer, sort_keys=True) if as_json else answer["digest"])


@routes.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per route.")
@click.pass_obj
def list_routes(target: Target, as_json: bool) -> None:
    """Every route: pattern, function, owner and typed queues."""
    found = _store(target).list_routes()
    if as_json:
        for r in found:
            click.echo(json.dumps(r.as_dict()))
        return
    if not found:
        click.echo("no routes: every queue goes to the default worker")
        return
    for r in found:
        typed = f"  typed: {', '.join(sorted(r.schemas))}" if r.schemas else ""
        click.echo(f"{r.pattern:<24} -> {r.function}  ({r.owner}){typed}")


@routes.command("delete")
@click.argument("pattern")
@click.option("--owner", default=None, help="Delete only if this owner holds the route.")
@click.pass_obj
def delete(target: Target, pattern: str, owner: str | None) -> None:
    """Delete one route; its queues go to the default worker (or are refused at the gateway)."""
    gone = _store(target).delete_route(pattern, owner)
    click.echo(f"deleted {gone.pattern} -> {gone.function} ({gone.owner})")


COMMANDS = [routes]
