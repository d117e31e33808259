"""In-memory fake of the gateway's own port, the idempotency store (``sluice.gateway.api.Idempotency``).

The gateway's job queue is ``sluice_dev.fakes.FakeQueue``, the one every caller of ``ports.JobQueue`` uses.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from sluice.core.errors import IdempotencyConflict, InProgress


class FakeIdempotency:
    """The three promised semantics, on a dict: replay, conflict, in progress."""

    def __init__(self) -> None:
        self.records: dict[str, tuple[str, dict[str, Any] | None]] = {}
        self.lock = threading.Lock()
        self.keys_seen: list[str] = []

    def run(self, key: str, fingerprint: Mapping[str, Any], action: Callable[[], dict[str, Any]],
            remaining_ms: Callable[[], int] | None = None) -> tuple[dict[str, Any], bool]:
        digest = json.dumps(fingerprint, sort_keys=True)
        with self.lock:
            self.keys_seen.append(key)
            if key in self.records:
                stored, result = self.records[key]
                if stored != digest:
                    raise IdempotencyConflict("different request")
                if result is None:
                    raise InProgress("in progress")
                return copy.deepcopy(result), True
            self.records[key] = (digest, None)
        try:
            result = action()
        except BaseException:
            with self.lock:
                del self.records[key]
            raise
        with self.lock:
            self.records[key] = (digest, result)
        return result, False


if TYPE_CHECKING:  # each fake is its port's: mypy --strict checks these, nothing runs them
    from sluice.gateway import api

    _IDEMPOTENCY: api.Idempotency = FakeIdempotency()
