"""The ``sluice`` command line: ``sluice --help``.

Commands live in small modules (``jobs``, ``ops``, ``top``, ``local``); this one
builds the group, resolves where to talk to (``target``), and turns every error into
one line on stderr (JSON with ``--json``) and a non-zero exit code (``output``: the codes).
``SLUICE_DEBUG=1`` shows tracebacks. The command modules are imported on first use.

Other packages add commands with ``register``: if ``sluice_dev.chaos.cli`` exists, its
``scenario`` and ``chaos`` commands (click commands or groups) are added to the group.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import os
import sys
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any

import click

from sluice import __version__
from sluice.core.errors import SluiceError
from sluice_dev.cli.output import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_NOT_FOUND,
    fail,
    give_json,
    json_mode,
    remember_json,
)

__all__ = ["EXIT_ERROR", "EXIT_NOT_FOUND", "fail", "main", "register"]
PLUGINS = ("sluice_dev.chaos.cli",)


class SluiceGroup(click.Group):
    """A click group that never shows a traceback for an expected failure.

    Its commands are imported when first looked up (``loader``), not with the group: so
    ``sluice --version`` and ``sluice enqueue`` do not import Redis, rich or the local stack.
    Every command added gets ``--json`` (``output.give_json``)."""

    loader: Callable[[], None] | None = None

    @property
    def commands(self) -> MutableMapping[str, click.Command]:
        if self.loader is not None:
            load, self.loader = self.loader, None
            load()
        return self._commands

    @commands.setter
    def commands(self, value: MutableMapping[str, click.Command]) -> None:
        self._commands = value

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        give_json(cmd)
        super().add_command(cmd, name)

    def invoke(self, ctx: click.Context) -> Any:
        raw = [*ctx.protected_args, *ctx.args]  # for a command line too broken to parse --json
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort, SystemExit):
            raise
        except click.ClickException as exc:
            if not (json_mode(ctx) or "--json" in raw):
                raise
            fail(exc.format_message(), exc.exit_code, "USAGE", as_json=True)
        except KeyboardInterrupt:
            fail("interrupted", EXIT_INTERRUPTED, "INTERRUPTED", as_json=json_mode(ctx))
        except BrokenPipeError as exc:
            if not _stdout_closed():
                fail(one_line(exc), exit_code(exc), error_code(exc), as_json=json_mode(ctx))
            # The reader of our output stopped (`| head`): nothing to report, and nowhere to.
            # Point stdout at /dev/null so that the interpreter's last flush does not fail too.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(EXIT_ERROR)
        except Exception as exc:
            if os.environ.get("SLUICE_DEBUG"):
                raise
            fail(one_line(exc), exit_code(exc), error_code(exc), as_json=json_mode(ctx))


def _stdout_closed() -> bool:
    """Whether stdout is a pipe nobody reads any more (poll reports POLLERR on its write end)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)
        return any(ev & select.POLLERR for _, ev in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no fd (a test's stream), or no poll
        return False


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, SluiceError):
        return text
    if _file_error(exc):  # a path the user gave, not a server: "cannot connect" would send them looking there
        return f"{exc.strerror or text}: {exc.filename}"  # type: ignore[attr-defined]
    if isinstance(exc, ConnectionError | OSError):
        return f"cannot connect: {text}"
    return f"{type(exc).__name__}: {text}"


def _file_error(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and not isinstance(exc, ConnectionError) and exc.filename is not None


def error_code(exc: BaseException) -> str:
    if isinstance(exc, SluiceError):
        return exc.code
    if _file_error(exc):
        return "FILE_ERROR"
    return "CANNOT_CONNECT" if isinstance(exc, ConnectionError | OSError) else "INTERNAL"


def exit_code(exc: BaseException) -> int:
    from sluice.core.errors import JobNotFound, WaitTimedOut
    from sluice_dev.cli.output import EXIT_WAIT_TIMEOUT

    if isinstance(exc, WaitTimedOut):
        return EXIT_WAIT_TIMEOUT
    return EXIT_NOT_FOUND if isinstance(exc, JobNotFound) else EXIT_ERROR


@click.group(cls=SluiceGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sluice")
@click.option("--json", is_flag=True, expose_value=False, is_eager=True,
              callback=remember_json,
              help="JSON output and JSON errors for the command that follows (as its own --json).")
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path), default=Path(".sluice"),
              show_default=True, envvar="SLUICE_STATE_DIR",
              help="Where the local stack keeps endpoints.json, logs and data.")
@click.option("--api-url", envvar="SLUICE_API_URL", default=None,
              help="A deployed gateway (SigV4-signed; SLUICE_API_KEY sends an API key instead). "
                   "Default: the local stack.")
@click.pass_context
def main(ctx: click.Context, state_dir: Path, api_url: str | None) -> None:
    """Sluice: an at-least-once job queue whose storage refuses stale writers.

    \b
    Start here:
      sluice dev                     run the whole pipeline on this machine
      sluice demo --jobs 2000        see it work end to end, with a summary
      sluice enqueue echo --payload '{"hi": 1}' --wait
    Commands talk to the local stack of this folder (.sluice/endpoints.json), or to a
    deployment: SLUICE_API_URL for the HTTP API, SLUICE_REDIS_URL (and the other
    SLUICE_* settings) for Redis and DynamoDB.
    """
    from sluice_dev.cli.target import Target

    # At exit, the interpreter's last collections walked every object a local stack had built
    # (clients, service models, threads): 2-3 s after `sluice dev` said "stopped" on a loaded
    # machine. Frozen, they are left to the exit; files and logs are closed before it as ever.
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)
    ctx.obj = Target(state_dir=state_dir, api_url=api_url)


def register(group: click.Group) -> None:
    """Add the commands of optional modules (the chaos suite) that are installed."""
    for module_name in PLUGINS:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and module_name.startswith(exc.name):
                continue  # not installed: nothing to add
            raise
        for name in ("scenario", "chaos"):
            command = getattr(module, name, None)
            if isinstance(command, click.Command) and name not in group.commands:
                group.add_command(command, name)


def _load() -> None:
    from sluice_dev.cli import check, console, cost, events, joblist, jobs, local, ops, routes, schedules, top

    for module in (jobs, ops, top, local, check, events, routes, console, schedules, cost, joblist):
        for command in module.COMMANDS:
            main.add_command(command)
    register(main)


assert isinstance(main, SluiceGroup)
main.loader = _load
