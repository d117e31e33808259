"""moto's TransactWriteItems, rolled back per item instead of per table (local stack only).

moto backs a transaction up by deep-copying every table it touches, stream history
included, before it runs; a failed transaction then swaps the copies back in. On a
jobs table of 5,000 items with its stream on, that copy cost 1,091 ms per transaction
(216 ms without the stream), measured on this machine, and it grows with every job
the table has seen. A 10,000-job chaos run spends most of its time there and cannot
drain. Real DynamoDB's cost does not depend on the table's size.

Here the backup is what the transaction can change: a copy of each item it names (or
the fact that it was absent) and the length of each touched table's stream. moto's own
table copy is skipped; a failure of any kind puts those items and stream lengths back.
If moto stops copying through ``copy.deepcopy`` in that module, the skip does nothing
and only the speed is lost: the per-item rollback runs either way.
"""

from __future__ import annotations

import copy
import functools
import types
from collections.abc import Callable
from typing import Any

_INSTALLED = "_sluice_per_item_rollback"


class _Backup:
    """The touched items and stream lengths of one transaction, enough to undo it."""

    def __init__(self, backend: Any, transact_items: list[dict[str, Any]]) -> None:
        from moto.dynamodb.models.dynamo_type import DynamoType

        self.items: list[tuple[Any, Any, Any, Any]] = []  # (table, hash, range, item or None)
        self.streams: dict[int, tuple[Any, list[Any], int]] = {}
        for entry in transact_items:
            try:
                op = next(iter(entry.values()))
                table = backend.tables[op["TableName"]]
                attrs = op["Item"] if "Item" in op else op["Key"]
                hash_key = DynamoType(attrs[table.hash_key_attr])
                range_key = DynamoType(attrs[table.range_key_attr]) if table.range_key_attr else None
            except (KeyError, StopIteration, AttributeError, TypeError):
                continue  # moto refuses this entry itself, before it writes anything for it
            before = copy.deepcopy(table.get_item(hash_key, range_key))
            self.items.append((table, hash_key, range_key, before))
            shard = table.stream_shard
            if shard is not None and id(table) not in self.streams:
                self.streams[id(table)] = (shard, shard.items, len(shard.items))

    def restore(self) -> None:
        # Reversed, so that an item named twice ends as it was before the first entry.
        for table, hash_key, range_key, item in reversed(self.items):
            bucket = table.items[hash_key] if range_key is not None else table.items
            slot = range_key if range_key is not None else hash_key
            if item is None:
                bucket.pop(slot, None)
            else:
                bucket[slot] = item
            if range_key is not None and not table.items[hash_key]:
                del table.items[hash_key]
        for shard, records, length in self.streams.values():
            if shard.items is records:  # else moto handed the records to a Lambda and reset them
                del records[length:]


def _no_table_copy(module: types.ModuleType, run: Callable[[], None]) -> None:
    """Runs ``run`` with the module's ``copy.deepcopy`` returning tables as they are."""
    from moto.dynamodb.models.table import Table

    def deepcopy(value: Any, memo: Any = None) -> Any:
        return value if isinstance(value, Table) else copy.deepcopy(value, memo)

    real = getattr(module, "copy")  # noqa: B009 (moto's module, untyped here)
    setattr(module, "copy", types.SimpleNamespace(deepcopy=deepcopy, copy=copy.copy))  # noqa: B010
    try:
        run()
    finally:
        setattr(module, "copy", real)  # noqa: B010


def install() -> None:
    """Replaces ``DynamoDBBackend.transact_write_items`` (idempotent). The server runs one
    request at a time (``motoserver.Serialized``), so swapping the module's ``copy`` for the
    length of one call is seen by no other request."""
    import moto.dynamodb.models as models

    original = models.DynamoDBBackend.transact_write_items
    if getattr(original, _INSTALLED, False):
        return

    @functools.wraps(original)
    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        backup = _Backup(self, transact_items)
        try:
            _no_table_copy(models, lambda: original(self, transact_items))
        except BaseException:
            backup.restore()
            raise

    setattr(transact_write_items, _INSTALLED, True)
    models.DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]
