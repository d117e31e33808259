"""The base of every sluice pydantic model but ``Settings``.

Each model builds its validator on first use (``defer_build``), so a function's cold start pays
only for the models its path validates (issue 30). A subclass's own ``model_config`` is merged
with this one by pydantic, so it keeps the deferral.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Model(BaseModel):
    model_config = ConfigDict(defer_build=True)
