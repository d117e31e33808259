"""The deployed worker's default handlers module: none.

A stack deployed without ``WorkerHandlersModule`` runs no code but Sluice's own: a job on any
queue dead-letters as having no handler, instead of reaching the examples (``sluice_dev.examples``:
an HTTP caller and a table writer, issue 19). ``sluice dev`` and the demo load the examples.
"""

from __future__ import annotations

from sluice.worker.registry import Worker

app = Worker()
