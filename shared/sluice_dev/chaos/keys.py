"""The job id keys as the chaos harness holds them, across a rotation (``rotate_job_id_key``).

The harness mints the workload's ids and derives each family's ids itself (``chaos.workload``,
``chaos.families``). After the nemesis rotates the key (in the moto server's Secrets Manager,
``sluice_dev.local.job_id_secret``), it must do both as the deployment's gateway does: mint with
the new current key, verify with the current and the previous one, and derive a parent's family
with the key that signed the parent (``sluice.gateway.families``).
"""

from __future__ import annotations

from typing import Any

from sluice.core import ids


def minting(s: Any) -> Any:
    """The gateway use case's ``IdMinting`` for settings ``s``: both keys, read again on a key id
    neither has (a rotation), as the gateway function's own (``sluice.entry.gateway``)."""
    from sluice.entry import root as wiring
    from sluice.gateway.api import IdMinting

    current, previous = wiring.job_id_keys(s)
    return IdMinting(current, previous, refresh=lambda: wiring.refresh_job_id_keys(s))


def parent_key(parent_id: str, s: Any = None) -> bytes:
    """The key that signed ``parent_id`` (its key id), among the keys of settings ``s`` (None: this
    Lambda container's), read again if neither has it; the current key if none does."""
    from sluice.entry import root as wiring

    kid = parent_id.rsplit(".", 1)[-1][:ids.KEY_ID_LENGTH]
    for read in (wiring.job_id_keys, wiring.refresh_job_id_keys):
        current, previous = read(s)
        found = [k for k in (current, *previous) if ids.key_id(k) == kid]
        if found:
            return found[0]
    return current
