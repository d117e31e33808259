"""A worker's ``ScriptLoader``: the internal function loads its scripts (its Redis user may not).

A synchronous invoke of the internal function (``LambdaInvoke``, as a worker's children go) with
``sluice.core.script_loads.request``; its error answer becomes the same ``SluiceError``
(ScriptNotAllowed for a text Sluice has not shipped: deploy Sluice's stack first).
"""

from __future__ import annotations

from collections.abc import Mapping

from sluice.backends.aws.family_gateway import Invoke, answer
from sluice.core.script_loads import request


class LambdaScriptLoader:
    """``ScriptLoader`` over any way of invoking the internal function (``invoke``)."""

    def __init__(self, invoke: Invoke) -> None:
        self._invoke = invoke

    def load(self, texts: Mapping[str, str]) -> None:
        answer(self._invoke(request(texts)))
