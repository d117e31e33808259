"""Operating the relay: the runtime knobs it obeys (``sluice pause``, ``sluice rate``, ...).

The knobs are defined in ``sluice.core.knobs`` (checks, then one write to the queue's config
hash in Redis), where the gateway's operator API calls them too; a running relay re-reads them
within about a second. The relay's scheduled Lambda run is composed in ``sluice.entry.relay``.
"""

from sluice.core.knobs import (
    ConfigEngine,
    pause,
    resume,
    set_caps,
    set_max_in_flight,
    set_rate,
    set_watermarks,
)

__all__ = ["ConfigEngine", "pause", "resume", "set_caps", "set_max_in_flight", "set_rate", "set_watermarks"]
