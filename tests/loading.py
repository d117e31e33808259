"""A file loaded as a fresh module, as Lambda's init phase imports a function's ``app.py`` (or as a
tool run by its path is): a new module object each call, never the one in ``sys.modules``."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType


def module_from_file(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
