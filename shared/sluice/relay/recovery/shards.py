"""The epoch of a Redis cluster: one epoch per primary, read together (pure; no I/O).

On one node the epoch is ``<key>/<replid>`` (``RedisEpochs``). On a cluster, every primary
keeps its own epoch key, on a key hashed into its own slots, and its own replication id, so
a loss on any one shard (a restart without persistence, a FLUSHALL, a failover) changes that
shard's part. The cluster's epoch lists every part with the slots it covers::

    0-5460=<key>/<replid>;5461-10921=<key>/<replid>;10922-16383=<key>/<replid>

in slot order. Any part changing changes the whole, so every relay session notices as
before; ``shard_lost`` then tells, per queue (its ``{queue}`` slot), whether the part that
holds it now is the part that held it under the old epoch. Only queues whose shard changed
are rebased and pushed again (docs/redis-loss.md, "Many shards").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

Ranges = tuple[tuple[int, int], ...]
SLOTS = 16384


def compose(parts: Iterable[tuple[Ranges, str]]) -> str:
    """The cluster's epoch from (slot ranges, ``<key>/<replid>``) per primary."""
    ordered = sorted(parts, key=lambda p: p[0][0][0])
    return ";".join(",".join(f"{a}-{b}" for a, b in ranges) + "=" + ident for ranges, ident in ordered)


def parse(epoch: str) -> list[tuple[Ranges, str]] | None:
    """The parts of a cluster epoch; None for anything else (a single node's epoch)."""
    out: list[tuple[Ranges, str]] = []
    for part in epoch.split(";"):
        spans, eq, ident = part.partition("=")
        if not eq or not ident:
            return None
        ranges = []
        for span in spans.split(","):
            first, dash, last = span.partition("-")
            if not dash or not first.isdigit() or not last.isdigit():
                return None
            ranges.append((int(first), int(last)))
        out.append((tuple(ranges), ident))
    return out


def holder(parts: Sequence[tuple[Ranges, str]], slot: int) -> str | None:
    """The ``<key>/<replid>`` of the part whose ranges hold ``slot``."""
    for ranges, ident in parts:
        if any(a <= slot <= b for a, b in ranges):
            return ident
    return None


def shard_lost(old: str | None, new: str, slot: int) -> bool:
    """Whether the data in ``slot`` may have been lost between epochs ``old`` and ``new``:
    True unless both are cluster epochs and the same shard identity holds ``slot`` in both.
    A slot that moved to another shard (a resharding, no loss) also reads True: one harmless
    replay of its queues, where a missed loss would lose jobs."""
    if old is None:
        return True
    before, after = parse(old), parse(new)
    if before is None or after is None:
        return True
    now = holder(after, slot)
    return now is None or holder(before, slot) != now


def ranges_of(slot_owner: Sequence[str]) -> dict[str, Ranges]:
    """Each owner's slot ranges, from the owner of every slot in order (``slot_owner[slot]``)."""
    out: dict[str, list[tuple[int, int]]] = {}
    start = 0
    for slot in range(1, len(slot_owner) + 1):
        if slot == len(slot_owner) or slot_owner[slot] != slot_owner[start]:
            out.setdefault(slot_owner[start], []).append((start, slot - 1))
            start = slot
    return {owner: tuple(r) for owner, r in out.items()}


def tag_in(ranges: Ranges, key_slot: Callable[[bytes], int]) -> str:
    """The first hash tag ``e0``, ``e1``, ... whose slot lies in ``ranges`` (``key_slot``:
    redis-py's). Every relay picks the same one for the same slot map."""
    for i in range(1_000_000):
        tag = f"e{i}"
        slot = key_slot(tag.encode())
        if any(a <= slot <= b for a, b in ranges):
            return tag
    raise ValueError(f"no hash tag falls in the slots {ranges}")
