"""What each function's handler module loads at import, in a fresh interpreter (issue 30, item 3).

Load-independent: the modules a cold start must not import are named, not timed (the timings
are ``benchmarks/bench_cold_start.py``'s). Every function of ``functions/`` is checked; a new one
fails ``test_every_function_is_checked`` until it is listed here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS = ROOT / "functions"

# Loaded on the paths that use them, never at a handler's import: Redis and Kafka by the first
# call that reads or writes them, jsonschema by the first typed route, boto3 by the first AWS client.
NEVER_AT_IMPORT = frozenset({"redis", "kafka", "jsonschema", "boto3", "sluice.worker.runtime.execute"})
# Powertools' event handler: its package imports every resolver (AppSync's with asyncio, Bedrock's)
# and its event source classes; the gateway's own router (sluice.gateway.http.router) serves the
# routes, and Powertools' resolver comes only with the first OpenAPI document (sluice.gateway.http.openapi).
NO_RESOLVER = frozenset({"aws_lambda_powertools.event_handler", "asyncio",
                         "aws_lambda_powertools.utilities.data_classes", "sluice.gateway.http.openapi"})
# The REST surface (the router, its routes and their models): only the two functions
# that answer API Gateway's proxy events build it at init.
HTTP = NO_RESOLVER | {"sluice.gateway.http.app", "sluice.gateway.http.admin", "sluice.gateway.http.router"}
# Children and continuations (their models and use cases): by the internal function's first call only;
# the gateway and operator functions refuse its events, and a continuation's GET loads them then.
FAMILIES = frozenset({"sluice.core.families", "sluice.gateway.families"})
# The operator routes' use cases and models (the jobs listing, the depth history): with the operator
# function's first request, which builds the HTTP surface (issue 30, item 3; sluice.core.ports names them
# for annotations only).
ADMIN = frozenset({"sluice.gateway.admin", "sluice.core.listing", "sluice.core.depth"})
EXPECTED: dict[str, frozenset[str]] = {
    "gateway": NEVER_AT_IMPORT | NO_RESOLVER | FAMILIES,
    "operator": NEVER_AT_IMPORT | HTTP | FAMILIES | ADMIN,
    "internal": NEVER_AT_IMPORT | HTTP | ADMIN,
    "firings": NEVER_AT_IMPORT | HTTP | ADMIN,
    "relay": NEVER_AT_IMPORT | HTTP,
    # asyncio: by the first async handler's job (sluice.worker.runtime.aio), 25+ ms of a cold start
    "worker": (NEVER_AT_IMPORT - {"sluice.worker.runtime.execute"}) | HTTP | {"asyncio"},
    "events": NEVER_AT_IMPORT | HTTP,
    "countdown": NEVER_AT_IMPORT | HTTP,
    "registrar": NEVER_AT_IMPORT | HTTP,  # Sluice's registrar (issue 31): boto3 by its first request
    # Outside the VPC (issue 33): boto3 by the first team map read, or the first schedule call.
    "teams": NEVER_AT_IMPORT | HTTP,
    "scheduler": NEVER_AT_IMPORT | HTTP,
}
# Every optional table named, so each lazy builder the import reaches is on its lazy path.
ENV = {"SLUICE_JOB_ID_SECRET": "cold-imports-secret-0123456789abcdef", "AWS_DEFAULT_REGION": "us-east-1",
       "SLUICE_ROUTES_TABLE": "routes", "SLUICE_SCHEDULES_TABLE": "schedules",
       "SLUICE_QUEUES_TABLE": "queues",
       "SLUICE_PAYLOADS_BUCKET": "payloads", "SLUICE_STACK_NAME": "sluice-test",
       "SLUICE_INTERNAL_FUNCTION_NAME": "sluice-internal", "POWERTOOLS_METRICS_NAMESPACE": "Sluice"}
CODE = """
import json, sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
import app
print(json.dumps(sorted(sys.modules)))
"""


def after_import(code: str, function: str, **extra: str) -> Any:
    """What ``code`` prints (its last line, JSON) in a fresh interpreter that imported the function."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("SLUICE_", "PYTHON"))}, **ENV, **extra}
    out = subprocess.run([sys.executable, "-I", "-c", code, str(FUNCTIONS / function), str(ROOT / "shared")],
                         env=env, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def loaded_by_import(function: str, **extra: str) -> set[str]:
    return set(after_import(CODE, function, **extra))


def test_every_function_is_checked() -> None:
    assert {p.parent.name for p in FUNCTIONS.glob("*/app.py")} == set(EXPECTED)


@pytest.mark.parametrize("function", sorted(EXPECTED))
def test_a_handler_import_loads_only_what_its_init_needs(function: str) -> None:
    loaded = loaded_by_import(function)
    assert "sluice" in loaded  # the handler module did import, through the layer's package
    early = sorted(EXPECTED[function] & loaded)
    assert not early, f"{function} loads {early} at import"


@pytest.mark.parametrize("function", sorted(EXPECTED))
def test_traces_load_no_client_library_at_import_and_off_no_opentelemetry(function: str) -> None:
    """Issue 31 item 6: traces on, a handler's import still loads none of its heavy libraries (the
    OpenTelemetry API comes with the first call that emits a span: bench_cold_start.py --traces
    times it); traces off (the default), no function imports OpenTelemetry at all."""
    traced = loaded_by_import(function, SLUICE_TRACES="true")
    assert not sorted(EXPECTED[function] & traced), f"{function} with traces on loads them at import"
    assert not {m for m in loaded_by_import(function) if m.split(".")[0] == "opentelemetry"}


BUILT_AT_IMPORT = """
import json, sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
import app
from sluice.core import bus, models
events = [c for c in vars(bus).values() if isinstance(c, type) and issubclass(c, bus.Event)]
made = [c for c in events if isinstance(vars(c)["__dataclass_fields__"], dict)]
print(json.dumps({"events_made": len(made),
                  "models_built": sorted(n for n in ("QueueConfig", "FinishedCounts", "QueueStats")
                                         if getattr(models, n).__pydantic_complete__)}))
"""


@pytest.mark.parametrize("function", sorted(EXPECTED))
def test_a_handler_import_makes_no_event_class_and_builds_no_queue_model(function: str) -> None:
    """Issue 30 item 3: the event catalogue's fifty dataclasses (six generated methods each, ~40 ms)
    are made each at its first use, and QueueStats' defaults are factories (an instance as a
    default built QueueConfig's validator, and with it pydantic's plugin loader, at import)."""
    built = after_import(BUILT_AT_IMPORT, function)
    assert built == {"events_made": 0, "models_built": []}, f"{function} at import: {built}"
