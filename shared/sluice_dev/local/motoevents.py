"""moto's EventBridge input transformers, parsed once (local stack only).

Each event moto's EventBridge delivers to a target with an ``InputTransformer`` has every path of
the transformer's ``InputPathsMap`` parsed again by ``jsonpath_ng.ext.parse``, which builds a new
PLY parser each time: 6% of the moto server's CPU in a chaos run (py-spy ``--gil``; the
completion events' rule has one). A parsed path is only read (``find``), so ``install`` keeps one
per path string.
"""

from __future__ import annotations

import functools

_INSTALLED = "_sluice_cached_parse"


def install() -> None:
    """Memoises ``jsonpath_ng.ext.parse``, which moto's ``EventTemplateParser`` imports at each call
    (idempotent)."""
    import jsonpath_ng.ext as ext

    parse = getattr(ext, "parse")  # noqa: B009 (re-exported untyped)
    if getattr(parse, _INSTALLED, False):
        return
    cached = functools.lru_cache(maxsize=512)(parse)
    setattr(cached, _INSTALLED, True)
    setattr(ext, "parse", cached)  # noqa: B010
