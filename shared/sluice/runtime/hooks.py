"""Fault-injection points for the crash/freeze tests and the chaos suite.

Production passes none. A hook runs on the job's settling thread at the named
moment, so a test process can SIGKILL or SIGSTOP itself exactly there, for example
between the fenced result write and the ack ("crash before ack").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sluice.runtime.context import JobContext

Hook = Callable[[JobContext], None]


@dataclass(frozen=True, slots=True)
class Hooks:
    after_handler: Hook | None = None  # the handler returned; nothing written yet
    before_write: Hook | None = None  # the local lease check passed; the fenced write is next
    before_ack: Hook | None = None  # the result is written; the ack is next

    def fire(self, name: str, ctx: JobContext) -> None:
        hook: Hook | None = getattr(self, name)
        if hook is not None:
            hook(ctx)


NO_HOOKS = Hooks()
