"""The job id keys as the chaos harness holds them, across a rotation (``rotate_job_id_key``).

The harness mints the workload's ids itself (``chaos.workload``). After the nemesis rotates the key
(in the moto server's Secrets Manager, ``sluice_dev.local.job_id_secret``), its gateway use cases
must hold the keys as the deployment's gateways do: mint and seal with the current key, verify
with the current and the previous one, and read both again on an id naming a key they do not hold.
"""

from __future__ import annotations

from typing import Any


def minting(s: Any) -> Any:
    """The gateway use case's ``IdMinting`` for settings ``s``: both keys, read again on a key id
    neither has (a rotation), as the gateway function's own (``sluice.entry.gateway``)."""
    from sluice.entry import root as wiring
    from sluice.gateway.api import IdMinting

    current, previous = wiring.job_id_keys(s)
    return IdMinting(current, previous, refresh=lambda: wiring.refresh_job_id_keys(s))
