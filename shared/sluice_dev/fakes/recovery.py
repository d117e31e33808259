"""In-memory fakes of the relay's recovery ports (``sluice.relay.recovery.hook``): the Redis epoch,
the checkpoints table and the consumer's committed offsets."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.relay.recovery import Checkpoint


class FakeEpochs:
    def __init__(self) -> None:
        self.epoch: str | None = None
        self.created = 0
        self.rebased: list[tuple[str, int, int, int]] = []

    def peek(self) -> str | None:
        return self.epoch

    def current(self) -> str:
        if self.epoch is None:
            self.created += 1
            self.epoch = f"e{self.created}"
        return self.epoch

    def rebase(self, queue: str, topic: str, partition: int, owner: int, offset: int) -> bool:
        self.rebased.append((queue, partition, owner, offset))
        return True


class FakeCheckpoints:
    def __init__(self) -> None:
        self.items: dict[int, Checkpoint] = {}

    def load(self, topic: str, partition: int) -> Checkpoint | None:
        return self.items.get(partition)

    def save(self, ckpt: Checkpoint, expect_epoch: str | None) -> bool:
        old = self.items.get(ckpt.partition)
        if (old.epoch if old else None) != expect_epoch:
            return False
        self.items[ckpt.partition] = ckpt
        return True


class FakeOffsets:
    def __init__(self, committed: dict[int, int | None]) -> None:
        self._committed = committed
        self.seeks: list[tuple[int, int]] = []

    def committed(self, partition: int) -> int | None:
        return self._committed.get(partition)

    def seek(self, partition: int, offset: int) -> None:
        self.seeks.append((partition, offset))


if TYPE_CHECKING:  # each fake is its port's: mypy --strict checks these, nothing runs them
    from sluice.relay.recovery import hook

    _EPOCHS: hook.Epochs = FakeEpochs()
    _CHECKPOINTS: hook.Checkpoints = FakeCheckpoints()
    _OFFSETS: hook.Offsets = FakeOffsets({})
