"""moto's answers' timestamps, converted once per value (local stack only).

moto 5.2 writes every timestamp of an answer by parsing the value it stores (S3 keeps each key's
``last_modified`` as a string) with ``dateutil`` and formatting the result again. Tansu, storing its
log on a moto server, lists its bucket over and over, and a listing converts one timestamp per
object: that parse was 14% of that server's CPU in a chaos run (py-spy ``--gil``). A stored value
converts to the same text every time, so ``install`` keeps each (value, format)'s text.
"""

from __future__ import annotations

from typing import Any

_INSTALLED = "_sluice_cached_timestamps"


def install() -> None:
    """Memoises ``TimestampSerializer._convert_timestamp_to_str`` for hashable values (idempotent)."""
    from moto.core.serialize import TimestampSerializer

    original = TimestampSerializer._convert_timestamp_to_str
    if getattr(original, _INSTALLED, False):
        return

    # The text depends on the value and the format only (the class's own constants and methods;
    # moto has no subclass of it).
    converted: dict[tuple[Any, str], str] = {}

    def _convert_timestamp_to_str(self: Any, value: Any, timestamp_format: str) -> str:
        try:
            return converted[value, timestamp_format]
        except KeyError:
            text = converted[value, timestamp_format] = original(self, value, timestamp_format)
            if len(converted) > 10_000:  # a long-lived server: bounded
                converted.clear()
            return text
        except TypeError:  # unhashable: converted as before
            return original(self, value, timestamp_format)

    setattr(_convert_timestamp_to_str, _INSTALLED, True)
    _convert_timestamp_to_str.__wrapped__ = original  # type: ignore[attr-defined]
    TimestampSerializer._convert_timestamp_to_str = _convert_timestamp_to_str  # type: ignore[method-assign]
