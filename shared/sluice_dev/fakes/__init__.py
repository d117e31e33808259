"""In-memory fakes of Sluice's ports, one per port, with the contracts' semantics, for tests.

``worker``: the job queue (the workers' and the gateway's), the jobs table, the log, the
dispatcher, the clocks and a worker wired to them; ``relay``: the relay's engine and record
source; ``gateway``: the idempotency store. Each module checks its fakes against their
Protocols under mypy --strict.
"""

from sluice_dev.fakes.gateway import FakeIdempotency
from sluice_dev.fakes.relay import FakeEngine, FakeSource, Pushed
from sluice_dev.fakes.worker import (
    RELAY_CALLS,
    Broken,
    CaptureLog,
    FakeClock,
    FakeDispatcher,
    FakeFencedTable,
    FakeLambdaContext,
    FakeLog,
    FakeQueue,
    FakeStore,
    Kit,
    Line,
    ManualClock,
    ManualMonotonic,
    QJob,
    kit,
    real_ms,
)

__all__ = [
    "RELAY_CALLS", "Broken", "CaptureLog", "FakeClock", "FakeDispatcher", "FakeEngine", "FakeFencedTable",
    "FakeIdempotency", "FakeLambdaContext", "FakeLog", "FakeQueue", "FakeSource", "FakeStore", "Kit", "Line",
    "ManualClock", "ManualMonotonic", "Pushed", "QJob", "kit", "real_ms",
]
