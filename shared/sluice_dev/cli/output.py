"""``--json`` on every command, errors in one shape, and the exit codes.

Every command of the ``sluice`` group takes ``--json`` (``sluice --json CMD`` works too): the
group gives the option to each command it is handed (``give_json``), so a new command gets it
without declaring it. A command prints its result with ``emit(data, text)``, or reads
``json_mode()`` to choose itself. With ``--json`` an error is one JSON line on stderr::

    {"error": {"code": "NO_TARGET", "message": "no local stack is running ...", "exit": 1}}

``code`` is the ``SluiceError`` code (``NOT_FOUND``, ``INVALID_INPUT``, ``WAIT_TIMEOUT``, ...),
``USAGE`` for a bad command line, ``CANNOT_CONNECT`` for a network failure, ``INTERNAL`` for
anything else; ``exit`` is the process's exit code. Without ``--json`` the same error is one
``error: ...`` line on stderr.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

# Exit codes (docs/api.md, "The CLI's exit codes").
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2  # click's own, for a bad command line
EXIT_NOT_FOUND = 3
EXIT_FAILED = 4  # --wait: the job ended failed
EXIT_DEAD = 5  # --wait: the job ended dead (dead-lettered)
EXIT_CANCELLED = 6  # --wait: the job ended cancelled
EXIT_WAIT_TIMEOUT = 7  # --wait: --timeout passed before the job ended
EXIT_INTERRUPTED = 130

# The exit code of ``--wait`` per final state.
FINAL_EXIT = {"succeeded": EXIT_OK, "failed": EXIT_FAILED, "dead": EXIT_DEAD, "cancelled": EXIT_CANCELLED}

_META_KEY = "sluice.json"  # in click's ctx.meta, which a command's context shares with the group's
JSON_HELP = "Print JSON (one object per line); errors too, as {\"error\": {...}} on stderr."


def remember_json(ctx: click.Context, _param: click.Parameter, value: Any) -> bool:
    """Record --json in ctx.meta; a command's own --json parameter is also true after `sluice --json`."""
    if value:
        ctx.meta[_META_KEY] = True
    return bool(ctx.meta.get(_META_KEY))


def json_option() -> click.Option:
    """The ``--json`` flag a command gets when it does not declare one (its value goes to ctx.meta)."""
    return click.Option(["--json"], is_flag=True, expose_value=False, is_eager=True, callback=remember_json,
                        help=JSON_HELP)


def give_json(command: click.Command) -> None:
    """Make ``--json`` switch JSON mode on for COMMAND and, for a group, every command in it.

    A command that declares its own ``--json`` keeps it (and its parameter); the flag is only
    made to record itself too, early, so that its errors are JSON as well."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            give_json(sub)
        return
    for param in command.params:
        if "--json" in param.opts:
            if param.callback is None:
                param.callback = remember_json
            param.is_eager = True
            return
    command.params.append(json_option())


def json_mode(ctx: click.Context | None = None) -> bool:
    ctx = ctx or click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.meta.get(_META_KEY))


def emit(data: Any, text: str) -> None:
    """Print a command's result: DATA as one JSON line with --json, else TEXT."""
    click.echo(json.dumps(data, separators=(",", ":"), default=str) if json_mode() else text)


def fail(message: str, exit_code: int = EXIT_ERROR, code: str = "ERROR", *,
         as_json: bool | None = None) -> None:
    """Report one error on stderr (a line of text, or the JSON error object) and exit."""
    if json_mode() if as_json is None else as_json:
        click.echo(json.dumps({"error": {"code": code, "message": message, "exit": exit_code}}), err=True)
    else:
        click.echo(f"error: {message}", err=True)
    sys.exit(exit_code)
