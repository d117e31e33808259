"""The chaos run's history: one JSON line per operation, appended by every process.

The recording is ``sluice_dev.local.history``'s, the one the worker Lambda uses on the
local stack: the same ``History`` file writer and the same subscriber of the worker's
event bus (``Recorder``), in the worker Lambda containers (``--runtime lambda``) and in
the worker processes (``--runtime process``) alike. This module only adds the chaos
run's own ops to that file, and the controller's way of reading it.

Each line: ``{"op", "pid", "t0", "t1", ...}`` with ``t0``/``t1`` the wall-clock start and
end of the operation (one machine, one clock). Ops the checker reads:

- ``enqueue`` (controller): ``job``, ``i`` (workload index), ``expect`` (digest of the
  correct result), ``outcome`` ``ok`` (accepted: Kafka acknowledged), ``info`` (unknown:
  the append failed and may or may not have landed) or ``fail``;
- ``grant`` (worker): ``job``, ``token`` (the DynamoDB fencing token), ``outcome``;
- ``invoke`` (worker, from inside the handler): ``job``, ``token``: one execution;
- ``write`` (worker): ``job``, ``token``, ``digest``, ``outcome`` ``written`` |
  ``already_written`` | ``rejected`` (``current`` = the newer token) | ``cancelled`` | ``error``;
- ``fault`` (nemesis, or a process about to kill itself): ``kind``, ``target``, ``phase``;
- ``operator`` (``chaos.operator``): ``kind``, ``outcome`` and what the action touched;
- ``family`` / ``family_accepted`` (a parent's handler, ``chaos.families``): the family it asks
  for, then (once the gateway answered) the same ids again, so the checker owes each member a result
  or a visible ending (``lost_after_202``);
- ``push`` (relay): ``queue``, ``pushed``; ``config`` (relay): ``queue``, ``paused``, what
  each relay read of the queue's config (the pause rules, ``chaos.rules``).

And for diagnosis: ``lease``, ``ack`` / ``fail`` / ``release``, ``failure``,
``store_release``, ``extend`` (worker events, see ``sluice_dev.local.history``); ``push``,
``read``, ``relay_run`` (relay); ``respawn`` (process runtime), ``lambda`` (Lambda runtime:
the local Lambda service's counts).

Lines are written with one ``os.write`` on an ``O_APPEND`` file, so processes never
interleave inside a line; a line torn by SIGKILL is skipped when reading.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sluice_dev.local import history as _local
from sluice_dev.local.history import History, digest, open_history

__all__ = ["History", "Tail", "digest", "open_history", "read"]


def read(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    events, _ = _local.read(path)
    return [e for e in events if "op" in e]


class Tail:
    """Reads a history as it grows: each ``read`` returns only the complete lines added since."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.offset = 0

    def read(self) -> list[dict[str, Any]]:
        events, self.offset = _local.read(self.path, self.offset)
        return [e for e in events if "op" in e]
