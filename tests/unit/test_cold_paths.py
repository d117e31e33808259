"""What the functions defer past their import still loads, and loads right (issue 30, item 3).

A cold start imports the client libraries, the REST surface and pydantic's validators on first
use (``tests/tooling/test_cold_imports.py`` checks they are not loaded at import). Deferred is not
hidden: every function-local import in ``sluice`` resolves, and every model builds its validator,
here, not in the middle of a request.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import sluice
from sluice.core.errors import SluiceError
from sluice.entry.gateway import Gateway

PACKAGE = Path(sluice.__file__).parent


def deferred_imports() -> list[tuple[str, str, str | None]]:
    """(module, imported module, name or None) for each import inside a function body in ``sluice``,
    but those inside a ``try`` that catches ImportError (a library's old and new locations)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(("sluice", *path.relative_to(PACKAGE).with_suffix("").parts))
        tree = ast.parse(path.read_text())
        guarded = {id(n) for t in ast.walk(tree) if isinstance(t, ast.Try)
                   and any("ImportError" in ast.dump(h) for h in t.handlers) for n in ast.walk(t)}
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                if id(node) in guarded:
                    continue
                if isinstance(node, ast.Import):
                    found += [(module, alias.name, None) for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    found += [(module, node.module, alias.name) for alias in node.names]
    return found


def test_every_deferred_import_in_sluice_resolves() -> None:
    imports = deferred_imports()
    deferred = {m for _, m, _ in imports} | {f"{m}.{name}" for _, m, name in imports if name}
    assert {"sluice.backends.redis.connection", "sluice.backends.kafka.producer", "jsonschema",
            "sluice.gateway.http.app", "sluice.entry.gateway_api"} <= deferred
    broken = []
    for where, module, name in imports:
        try:
            loaded = importlib.import_module(module)
            if name is not None and not hasattr(loaded, name):
                importlib.import_module(f"{module}.{name}")  # a submodule: ``from pkg import mod``
        except ImportError as exc:
            broken.append(f"{where}: {module}{'' if name is None else '.' + name}: {exc}")
    assert not broken


def sluice_models() -> list[type[BaseModel]]:
    for info in pkgutil.walk_packages([str(PACKAGE)], "sluice."):
        importlib.import_module(info.name)
    seen: dict[str, type[BaseModel]] = {}
    stack: list[type[Any]] = [BaseModel]
    while stack:
        for cls in stack.pop().__subclasses__():
            stack.append(cls)
            if cls.__module__.startswith("sluice.") and inspect.getmodule(cls) is not None:
                seen[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return [seen[k] for k in sorted(seen)]


def test_every_model_builds_its_validator() -> None:
    # defer_build: a model's validator is built on its first use, so a cold start builds only the
    # validators of what it validates; building each here is what import time used to check.
    models = sluice_models()
    assert len(models) >= 30
    deferred = [m for m in models if m.model_config.get("defer_build")]
    assert len(deferred) >= len(models) - 1  # all but Settings, which every function validates at init
    for model in models:
        model.model_rebuild(force=True)
        assert model.__pydantic_complete__, model


def test_a_function_serving_no_proxy_events_builds_no_rest_surface() -> None:
    def no_api() -> Any:
        raise AssertionError("a refusal builds no adapter")

    for kind in ("internal", "firing"):
        gateway = Gateway(no_api, serves=frozenset({kind}))  # type: ignore[arg-type]
        assert gateway._http is None
        refused = gateway({"httpMethod": "GET", "path": "/v1/jobs/x", "requestContext": {}}, None)
        assert refused["statusCode"] == 403 and "WRONG_FUNCTION" in refused["body"]
    assert Gateway(no_api, serves=frozenset({"api"}))._http is not None  # type: ignore[arg-type]
    # the operator's on its first request (session 36: tests/unit/test_gateway_split.py)
    assert Gateway(no_api, serves=frozenset({"operator"}))._http is None  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["internal", "firing"])
def test_a_refused_event_of_no_known_shape_needs_no_rest_surface(kind: str) -> None:
    gateway = Gateway(lambda: None, serves=frozenset({kind}))  # type: ignore[arg-type,return-value]
    answer = gateway({"what": "no shape"}, None)
    assert answer["statusCode"] == 403 and answer["error"]["code"] == "WRONG_FUNCTION"
    assert gateway._http is None and issubclass(SluiceError, Exception)
