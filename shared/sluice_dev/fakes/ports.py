"""In-memory fakes of the small ports: the clock, the log (Kafka), the dispatcher, the payload store
(``ports.Clock``, ``ports.JobLog``, ``ports.Dispatcher``, ``ports.PayloadStore``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from sluice.core.errors import BackendUnavailable, PayloadUnavailable
from sluice.core.models import JobSpec


class FakeClock:
    """``ports.Clock`` on a manual time: ``sleep`` moves it, nothing waits."""

    def __init__(self) -> None:
        self.t = 1000.0

    def now_ms(self) -> int:
        return int(self.t * 1000)

    def monotonic(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += max(seconds, 0.001)


class FakeLog:
    """``ports.JobLog``: ``records`` acknowledged; ``fail`` or ``before_ack`` to break an append."""

    def __init__(self) -> None:
        self.records: list[JobSpec] = []
        self.pending: list[JobSpec] = []  # the append in flight
        self.fail: Exception | None = None
        self.before_ack: Callable[[], None] | None = None

    def append(self, specs: Sequence[JobSpec]) -> None:
        self.pending = list(specs)
        if self.before_ack is not None:
            self.before_ack()
        if self.fail is not None:
            raise self.fail
        self.records.extend(specs)


class FakeDispatcher:
    """``ports.Dispatcher`` that records each call and starts what it was asked to."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int]] = []

    def dispatch(self, queue: str, invocations: int, batch: int) -> int:
        self.calls.append((queue, invocations, batch))
        return invocations


class FakePayloadStore:
    """``ports.PayloadStore`` in a dict: ``objects`` by key, ``puts`` and ``gets`` in order;
    ``down`` makes every call BackendUnavailable (S3 unreachable)."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.puts: list[str] = []
        self.gets: list[str] = []
        self.down = False

    def put(self, key: str, body: bytes) -> None:
        if self.down:
            raise BackendUnavailable(f"s3.put_object {key}: unreachable")
        self.puts.append(key)
        self.objects[key] = body

    def get(self, key: str) -> bytes:
        if self.down:
            raise BackendUnavailable(f"s3.get_object {key}: unreachable")
        self.gets.append(key)
        if key not in self.objects:
            raise PayloadUnavailable(f"the payload object {key} is missing", key=key)
        return self.objects[key]


if TYPE_CHECKING:  # each fake is its port's: mypy --strict checks these, nothing runs them
    from sluice.core import ports

    _CLOCK: ports.Clock = FakeClock()
    _LOG: ports.JobLog = FakeLog()
    _DISPATCHER: ports.Dispatcher = FakeDispatcher()
    _PAYLOADS: ports.PayloadStore = FakePayloadStore()
