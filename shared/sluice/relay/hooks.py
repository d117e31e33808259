"""Named points where other behaviour plugs into the relay, fired synchronously in order.

``RelayHooks`` does nothing at each point; ``sluice.relay.recovery.Recovery`` (getting back what
Redis lost) overrides them. The relay calls its adapters directly and the hooks beside
them, so nothing wraps a port.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from sluice.core.models import DecodedJob
from sluice.relay.ports import SourceRecord

# each taken record with its decode (or poison reason)
Decoded = Sequence[tuple[SourceRecord, DecodedJob | str]]


class RelayHooks:
    def before_lease(self, register_all: Callable[[], None]) -> None:
        """Before the relay leases ownership jobs; ``register_all`` enqueues every partition's again."""
        return None

    def on_partitions_taken(self, partitions: Sequence[int]) -> None:
        """The relay took ``partitions`` and rewound them to their committed offsets."""
        return None

    def on_assigned(self, partitions: Sequence[int]) -> None:
        """The relay now consumes exactly ``partitions`` (empty: it is stopping)."""
        return None

    def stopping(self, left_s: float) -> None:
        """The relay stops within ``left_s`` seconds: work that may be skipped should be if it would
        not fit (called before the assignment is cleared)."""
        return None

    def on_parked(self, partition: int, offsets: Sequence[int]) -> None:
        """Records of ``partition`` (by offset) were written to the parking lot."""
        return None

    def on_records(self, decoded: Decoded) -> None:
        """The records just taken from the source, each decoded once."""
        return None

    def before_push(self, queue: str, partition: int, lease_token: int) -> int:
        """Before a push (or a read of the relayed offset): the owner token to push with.
        May raise ``StaleToken``: the partition must not be pushed any more."""
        return lease_token

    def on_commit(self, offsets: Mapping[int, int]) -> Mapping[int, int]:
        """The relay's commit point per partition; returns the offsets to commit to Kafka."""
        return offsets
