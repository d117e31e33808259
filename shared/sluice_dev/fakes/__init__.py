"""In-memory fakes of Sluice's ports, one per port, with the contracts' semantics, for tests.

``queue``: the job queue (the workers' and the gateway's); ``store``: the jobs table;
``ports``: the clock, the log, the dispatcher, the payload store; ``teams``: the team map, the routes table, a
team worker's description; ``relay``: the relay's engine and record
source; ``recovery``: the relay's epochs, checkpoints and offsets; ``gateway``: the idempotency
store, the schedules' store and trigger; ``console``: the console's API; ``worker``: a worker
wired to them. Each module checks its fakes against their Protocols under mypy --strict.
"""

from sluice_dev.fakes.console import EVIL, JOB, FakeBackend, job_view, queue_row
from sluice_dev.fakes.gateway import FakeCallerThrottle, FakeKeyStore, FakeScheduleStore, FakeTrigger
from sluice_dev.fakes.ports import FakeClock, FakeDispatcher, FakeLog, FakePayloadStore
from sluice_dev.fakes.queue import Broken, FakeQueue, ManualClock, ManualMonotonic, QJob, real_ms
from sluice_dev.fakes.recovery import FakeCheckpoints, FakeEpochs, FakeOffsets
from sluice_dev.fakes.relay import FakeEngine, FakeParkingLot, FakeSource, Pushed
from sluice_dev.fakes.store import RELAY_CALLS, FakeFencedTable, FakeStore
from sluice_dev.fakes.teams import FakeDescriber, FakeRouteStore, FakeTeamMap
from sluice_dev.fakes.worker import CaptureLog, FakeLambdaContext, Kit, Line, kit

__all__ = [
    "EVIL", "JOB", "RELAY_CALLS", "Broken", "CaptureLog", "FakeBackend", "FakeCallerThrottle",
    "FakeCheckpoints", "FakeClock", "FakeDescriber", "FakeDispatcher", "FakeEngine", "FakeEpochs",
    "FakeFencedTable", "FakeKeyStore", "FakeLambdaContext", "FakeLog", "FakeOffsets", "FakeParkingLot",
    "FakePayloadStore", "FakeQueue", "FakeRouteStore", "FakeScheduleStore", "FakeSource", "FakeStore",
    "FakeTeamMap", "FakeTrigger", "Kit", "Line", "ManualClock", "ManualMonotonic", "Pushed", "QJob",
    "job_view", "kit", "queue_row", "real_ms",
]
