"""The format versions of what Sluice keeps between two deploys, and the ones today's code reads.

An upgrade replaces the functions while jobs wait in Kafka, Redis and DynamoDB in the formats the
old functions wrote (docs/deploy.md, "Upgrading"). Each carries its version, so a reader knows
which it has:

- the Kafka record: ``schema_version`` (``JobSpec``). 1: unsealed (before issue 27; c44b81f); 2: sealed
  (``seal.VERSION``, issue 27). The relay pushes only 2: a record of format 1 ends its job ``dead``
  (``unsealed: ...``), so the relay is drained before an upgrade from format 1. A continuation's record
  stored in the jobs table in format 1 is released when its id was minted before the upgrade
  (``seal.unsealed_before_upgrade``, ``Settings.unsealed_continuations_before_ms``).
- the Redis job hash: its field ``v`` (``REDIS_JOB``, written by ``lua/_lib.lua``'s create_jobs). No
  ``v`` is format 1 (p, m, g; no sz, no grp): every script reads both.
- the jobs table's item: ``format_version`` (``ITEM``), the format of the code that last wrote it,
  set by every write of the store (``backends/dynamodb/items.py``). None is format 1 (written before
  issue 29): today's code reads the items c44b81f wrote (tests/stack/test_upgrade.py).
"""

from __future__ import annotations

from typing import Final

REDIS_JOB: Final = 2  # the job hash's v; absent: 1
ITEM: Final = 2  # the jobs table item's format_version; absent: 1


def redis_job_format(fields: dict[str, str]) -> int:
    """The format of a Redis job hash read whole (``HGETALL``): its ``v``, or 1 without one."""
    return int(fields.get("v", "1"))


def item_format(item: dict[str, dict[str, str]]) -> int:
    """The format of a jobs table item as DynamoDB returns it: its ``format_version``, or 1."""
    return int(item.get("format_version", {}).get("N", "1"))
