"""What the chaos run puts inside workers and relays, whichever runtime carries them.

Both runtimes (``--runtime process``: long-lived agent processes, ``chaos.agents``;
``--runtime lambda``: the local Lambda service of ``sluice dev``, ``chaos.functions``)
run the same pieces:

- ``worker_app``: a ``sluice.Worker`` with one handler, whose result is a deterministic
  function of the payload (``expected_result``), and the nemesis's fault points as
  subscribers of its events (``ResultWriting``, ``Acking``);
- ``Control``: the nemesis's arming files, and the one place a process kills or stops itself;
- ``record_relay``: a subscriber of the relay's events, writing what each poll read,
  each push did and each queue-config read saw (for the checker's pause rule, and for
  diagnosing a lost job). Nothing wraps the relay's ports.

Arming: the nemesis writes ``<control_dir>/<stem>.json`` (``{"kind", "until", "id"}``),
where the stem is a process slot (``w0``, ``r0``: process runtime) or a function
(``worker``, ``relay``: Lambda runtime, where any container of the function may take it).
A process at the matching point claims the arming by renaming the file to
``landed-<id>-<pid>`` (a rename succeeds once, so one process takes it), records the
fault as landed, and sends itself the signal. The nemesis reads the pid of a
self-stopped process from that name, to wake it later.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sluice.core import bus as ev
from sluice_dev.chaos import families
from sluice_dev.chaos.families import expected_result
from sluice_dev.local.history import History, push_fields, wall

QUEUE = "chaos"
TENANT = "chaos-tenant"  # the tenant nemesis's queue (chaos.tenant)


def landed_name(arming_id: str, pid: int) -> str:
    return f"landed-{arming_id}-{pid}"


class Control:
    """The nemesis's arming file for one stem (a process slot, or a function)."""

    def __init__(self, control_dir: str | os.PathLike[str], name: str, history: History) -> None:
        self.path = Path(control_dir) / f"{name}.json"
        self.name = name
        self.history = history

    def strike(self, kind: str, sig: int = signal.SIGKILL, **fields: Any) -> None:
        """Send this process ``sig`` now if the nemesis armed ``kind`` (and the arming has not expired)."""
        try:
            armed = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return
        if armed.get("kind") != kind or float(armed.get("until", 0)) < wall():
            return
        claimed = self.path.with_name(landed_name(str(armed.get("id", "")), os.getpid()))
        try:
            os.rename(self.path, claimed)  # one process takes it; the others find no file
        except OSError:
            return
        with contextlib.suppress(OSError, ValueError):
            if json.loads(claimed.read_text()).get("id") != armed.get("id"):  # re-armed in between
                os.rename(claimed, self.path)
                return
        self.history.emit("fault", kind=kind, phase="landed", target=self.name, **fields)
        os.kill(os.getpid(), sig)


def worker_app(history: Callable[[], History], control: Callable[[], Control],
               timeout_s: float | None = None, family_key: Callable[[], bytes] | None = None) -> Any:
    """The chaos ``sluice.Worker``: its handler and its fault points.

    ``family_key``: the job id key, with which a parent names its family in the history before
    it asks the gateway for it (``chaos.families``); None: parents start no family.

    ``history`` and ``control`` are called when first needed, so a module can build the
    app at import time (the worker Lambda imports ``Settings.handlers_module``) and open
    its files only inside the container.
    """
    from sluice.worker.registry import Worker
    from sluice.worker.runtime.outcomes import Fail

    def before_write(e: ev.ResultWriting) -> None:
        control().strike("pause_worker_before_write", signal.SIGSTOP, job=e.job, token=e.token)

    def before_ack(e: ev.Acking) -> None:
        control().strike("kill_worker_before_ack", job=e.job, token=e.token)

    app = Worker()
    app.events.subscribe(before_write, ev.ResultWriting)
    app.events.subscribe(before_ack, ev.Acking)

    @app.handler(QUEUE, timeout_s=timeout_s)
    def work(job: Any, ctx: Any) -> dict[str, str]:
        history().emit("invoke", job=job.job_id, token=ctx.token, attempt=job.attempt, t0=wall())
        pause = float(job.payload.get("work_ms", 0)) / 2000
        time.sleep(pause)
        control().strike("kill_worker_mid_job", job=job.job_id, token=ctx.token)
        time.sleep(pause)
        if job.payload.get("poison"):  # the operator's dead letters (workload.POISON_SHARE)
            raise Fail("poison: this job fails by design")
        if "then" in job.payload:  # a family's continuation (chaos.families)
            return families.run_continuation(job, ctx)
        if job.payload.get("family") and family_key is not None:  # a parent (chaos.families)
            families.start(job, ctx, QUEUE, family_key, history().emit)
        return expected_result(job.payload)

    app.register(TENANT, work, timeout_s=timeout_s)  # the tenant nemesis's queue (chaos.tenant): same work
    return app


def record_relay(history: History) -> Callable[[ev.Event], None]:
    """The relay's ``RecordsRead``, ``Pushed`` and ``ConfigRead`` events as the history's ``read``,
    ``push`` and ``config`` lines (``chaos.rules`` reads them). Times are the events' own, on the
    machine's clock even in a relay whose clock the nemesis skews (``sluice.core.bus.wall``)."""

    def report(e: ev.Event) -> None:
        if isinstance(e, ev.ConfigRead):
            history.emit("config", t0=e.t0, t1=e.at, queue=e.queue, paused=e.paused)
        elif isinstance(e, ev.RecordsRead):
            history.emit("read", partition=e.partition, first=e.first, last=e.last, n=e.n, t1=e.at)
        elif isinstance(e, ev.Pushed):
            history.emit("push", **push_fields(e))

    return report


def kill_after_push(control: Control) -> Callable[[ev.Pushed], None]:
    """The relay's kill point, a ``Pushed`` subscriber: ``kill_relay_after_push`` strikes once a push
    landed in Redis (``outcome`` ok), on the pusher thread, before the Kafka commit."""

    def strike(e: ev.Pushed) -> None:
        if e.outcome == "ok":
            control.strike("kill_relay_after_push", partition=e.partition, pushed=e.pushed)

    return strike
