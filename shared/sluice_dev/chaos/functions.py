"""The chaos run inside the local Lambda service (``sluice chaos --runtime lambda``).

The chaos run starts ``sluice dev``'s stack (``local.dev.DevStack``) with two things of
its own, both configured through Settings, as a user's deployment would be:

- **worker**: the worker function is the real one (``functions/worker/app.py`` ->
  ``runtime.lambda_entry.handle_dispatch``: the invocation's time budget, releasing
  what it will not finish; the local container adds the history recorders from
  ``Settings.history_path``).
  Only its handlers module is this one: ``Settings.handlers_module`` names it, and
  ``app`` carries the chaos handler and the fault points as event subscribers
  (``chaos.app.worker_app``). Any container of the function may take an arming
  (stem ``worker``).
- **relay**: ``relay`` below replaces the relay function's handler
  (``DevOptions.relay_handler``). It is ``entry.relay.run_scheduled`` with the
  relay's reads, pushes and config reads recorded (``chaos.app.record_relay``, a
  subscriber of the process's bus), the fault point between a push and the Kafka commit
  (``chaos.app.kill_after_push``, a ``Pushed`` subscriber too; stem ``relay``), and the
  chaos run's short partition lease, so that a killed relay's partitions are taken over
  in seconds, not 15. It runs in its own container processes, as in ``sluice dev``, so
  the nemesis can kill it; the schedule and the worker dispatch are ``sluice dev``'s own.

Files: the history is ``Settings.history_path``; the arming files are in ``control/``
next to it.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from sluice.core import bus as ev
from sluice_dev.chaos.app import Control, kill_after_push, record_relay, worker_app
from sluice_dev.chaos.skew import ClockFollower
from sluice_dev.local.history import History, open_history

# The chaos handler's hard timeout. A plain job's work takes 30 ms at most, but a parent asks the
# gateway for its family over HTTP, which on a loaded 2-core machine took over 2 s and timed out
# every retry; 5 s still leaves the 8 s worker function 3 s to write and ack.
HANDLER_TIMEOUT_S = 5.0
PARTITION_LEASE_MS = 3_000  # the relay's partition lease (15 s in the Lambda's defaults)
CHECKPOINT_S = 2.0  # Redis-loss recovery's checkpoint interval (5 s in the Lambda)


@cache
def _history() -> History:
    from sluice.entry import root as wiring

    path = wiring.settings().history_path
    if not path:
        raise RuntimeError("the chaos functions need Settings.history_path (SLUICE_HISTORY_PATH)")
    return open_history(path)


@cache
def _control(stem: str) -> Control:
    return Control(Path(_history().path).parent / "control", stem, _history())


@cache
def _recording() -> None:
    """The relay's reads and config reads as history lines: ``record_relay`` on the process's bus
    (the one ``scheduled_relay`` emits on), subscribed once per container. Its pushes are recorded
    already, by the local container's history recorder (``sluice_dev.local.history.line_of``),
    subscribed before this: the kill point after a push (``kill_after_push``) strikes once the
    push is recorded."""
    from sluice.entry import root as wiring

    bus = wiring.events()
    bus.subscribe(record_relay(_history()), ev.RecordsRead, ev.ConfigRead)
    bus.subscribe(kill_after_push(_control("relay")), ev.Pushed)


@cache
def _clock() -> ClockFollower:
    """This relay container's clock follows the nemesis's skew (started once per container)."""
    return ClockFollower(Path(_history().path).parent / "control", "relay", _history()).start()


def _job_id_key() -> bytes:
    from sluice.entry import root as wiring

    return wiring.job_id_key()


# The worker function's family_gateway (ctx.enqueue_many -> the gateway function) comes from wiring, as
# in a deployment; the key only lets the harness name each family in the history (chaos.families).
app = worker_app(_history, lambda: _control("worker"), timeout_s=HANDLER_TIMEOUT_S, family_key=_job_id_key)


def relay(event: Any, context: Any) -> dict[str, Any]:
    """The relay function's handler in the chaos run: ``run_scheduled`` plus recording and a kill point."""
    from sluice.entry import root as wiring
    from sluice.entry.relay import parse_scheduled, scheduled_relay

    parse_scheduled(event)
    settings = wiring.settings()
    history = _history()
    _clock().step()  # at once: a stepped clock is there when the invocation starts
    _recording()

    # Every record's id and seal checked with the job id keys, as production does (issue 27): the
    # workload mints its ids with the stack's key (chaos.workload.Enqueuer, mint_key), and the
    # gateway's pipeline seals every record.
    r, recovery = scheduled_relay(settings, context, recovery={"interval_s": CHECKPOINT_S},
                                  lease_ms=PARTITION_LEASE_MS, ownership_s=0.5)
    report = r.run_for_lambda(context.get_remaining_time_in_millis(), settings.relay_stop_before_ms)
    history.emit("relay_run", target=r.relay_id, replays=recovery.replays,
                 **{k: v for k, v in report.as_dict().items() if isinstance(v, int)})
    return report.as_dict()
