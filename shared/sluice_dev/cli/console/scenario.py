"""The console's scenario page (issue 32 item 3): the seed's gc-pause story, run for real and drawn.

``/scenario`` shows two controls, how long worker A stays frozen and whether storage checks
fencing tokens; its form (a POST with the console's CSRF token, like every other change) starts
``sluice_dev.chaos.scenarios.gc_pause`` in a thread on the running ``sluice dev``'s redis-server
and moto server (``scenarios.Borrowed``), under scratch names of its own (a queue ``scenario-<hex>``
that is never registered, so the stack's relay and workers never see it; its own jobs and
idempotency tables and results bucket), all removed after the run; two real worker processes, A
frozen with SIGSTOP before its write. One run at a time in the console, and each session sees only
the runs it started. The drawing is the job's timeline as the two workers recorded it in that
Redis (``scenario_html.body``), the same as ``sluice scenario gc-pause --html``.

Only inside ``sluice dev`` (``sluice console`` with no ``--api`` in the folder of a running local
stack): a console of a deployment starts no server and no process for it and touches nothing; the
page says it is unavailable.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from sluice.core.errors import InvalidInput, SluiceError
from sluice_dev.cli.console.render import esc, flash

if TYPE_CHECKING:
    from sluice_dev.chaos.scenarios import Borrowed

TIME_SCALE = 0.3  # the story's 10 s lease is 3 s; a run takes about 10 s with its servers
MAX_FREEZE_S = 30.0
PATHS = frozenset({"/scenario", "/fragment/scenario", "/scenario/gc-pause"})
Runner = Callable[[float, bool], dict[str, Any]]


def run_gc_pause(on: Borrowed, freeze_for_s: float, fencing: bool) -> dict[str, Any]:
    from sluice_dev.chaos import scenarios

    return scenarios.gc_pause(scenarios.Params(freeze_for_s=freeze_for_s, fencing=fencing,
                                               time_scale=TIME_SCALE), on=on).as_dict()


def on_stack(local: dict[str, Any] | None) -> Runs | None:
    """The runs of a console inside ``sluice dev`` (``local``: its endpoints.json), on that stack's
    servers; None without one (a deployment's console, or a stack still starting)."""
    from sluice_dev.chaos.scenarios import Borrowed

    if not local or not local.get("redis_url") or not local.get("aws_endpoint_url"):
        return None
    stack = Borrowed(str(local["redis_url"]), str(local["aws_endpoint_url"]))
    return Runs(runner=partial(run_gc_pause, stack))


@dataclass
class Run:
    freeze_for_s: float
    fencing: bool
    result: dict[str, Any] | None = None
    error: str | None = None

    @property
    def done(self) -> bool:
        return self.result is not None or self.error is not None


@dataclass
class Runs:
    """The runs of this console: at most one going, the last of each session kept."""

    runner: Runner
    last: dict[str, Run] = field(default_factory=dict)  # by session
    busy: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def start(self, session: str, freeze_for_s: float, fencing: bool) -> bool:
        """False while another run goes (one at a time: each starts two servers and two workers)."""
        with self._lock:
            if self.busy:
                return False
            self.busy = True
            run = self.last[session] = Run(freeze_for_s, fencing)
        threading.Thread(target=self._play, args=(run,), name="console-scenario", daemon=True).start()
        return True

    def _play(self, run: Run) -> None:
        try:
            run.result = self.runner(run.freeze_for_s, run.fencing)
        except (SluiceError, TimeoutError, RuntimeError, OSError) as exc:
            run.error = str(exc)
        finally:
            with self._lock:
                self.busy = False

    def of(self, session: str) -> Run | None:
        with self._lock:
            return self.last.get(session)


LOCAL_ONLY = ("The scenario page is unavailable here: it runs only in a console of a running `sluice dev` "
              "(sluice console without --api, in the stack's folder), on that stack's redis-server and moto "
              "server under scratch names. This console is not one, so it starts nothing and touches "
              "nothing.")


def freeze_of(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise InvalidInput(f"freeze_for must be a number of seconds, not {raw[:40]!r}") from None
    if not 0 <= value <= MAX_FREEZE_S:
        raise InvalidInput(f"freeze_for must be 0..{MAX_FREEZE_S:g} seconds")
    return value


def page(runs: Runs | None, token: str, session: str, message: str | None) -> str:
    if runs is None:
        return f'<p class="error" id="scenario-local-only">{esc(LOCAL_ONLY)}</p>'
    run = runs.of(session)
    freeze = 12.0 if run is None else run.freeze_for_s
    fencing = True if run is None else run.fencing
    controls = (f'<form method="post" action="/scenario/gc-pause" id="scenario-form">'
                f'<input type="hidden" name="csrf" value="{esc(token)}">'
                f'<label>Worker A frozen for <input name="freeze_for" id="freeze_for" size="4" '
                f'value="{freeze:g}"> s</label> '
                f'<label><input type="checkbox" name="fencing" id="fencing"{" checked" if fencing else ""}> '
                f'storage checks fencing tokens</label> '
                f'<button type="submit" id="scenario-run">Run</button></form>')
    intro = ('<p class="hint">Worker A takes the job\'s lease (10 s, renewed every 3 s), works 2 s, passes '
             'its own lease check and is frozen (SIGSTOP, a GC pause) just before writing its result. '
             'Worker B competes from the start. Everything below is what the two real worker processes '
             f'recorded in the job\'s timeline in Redis; the run goes at {TIME_SCALE:g} of the story\'s '
             'speed, on this sluice dev\'s redis-server and moto server, under scratch names of its own '
             '(a queue, two tables and a bucket no real one has, removed after the run).</p>')
    return (f'{flash(message)}{intro}{controls}'
            f'<div id="scenario" data-refresh="/fragment/scenario" data-until-final="yes">'
            f'{fragment(run)}</div>')


def fragment(run: Run | None) -> str:
    from sluice_dev.chaos.scenario_html import body

    if run is None:
        return '<p class="empty" id="scenario-none" data-final="yes">No run yet in this session.</p>'
    if run.error is not None:
        return f'<p class="error" id="scenario-error" data-final="yes">{esc(run.error)}</p>'
    if run.result is None:
        return (f'<p id="scenario-running">Running: A frozen for {run.freeze_for_s:g} s, fencing '
                f'{"on" if run.fencing else "off"}...</p>')
    return f'<div data-final="yes" id="scenario-done">{body(run.result)}</div>'
