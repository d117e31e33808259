"""``import sluice.<module>`` loads only what that module needs (cold start, issue 14)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import sluice


def _loaded_after(module: str) -> set[str]:
    code = f"import json, sys, {module}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    return set(json.loads(out.stdout))


@pytest.mark.parametrize("module", ["sluice.entry.relay", "sluice.gateway.http.app"])
def test_the_relay_and_the_gateway_do_not_load_the_worker_runtime(module: str) -> None:
    loaded = _loaded_after(module)
    assert module in loaded
    assert not {"sluice.worker.registry", "sluice.worker.runtime.execute", "sluice.client"} & loaded


def test_the_public_names_still_resolve() -> None:
    from sluice.core.errors import LeaseLost
    from sluice.worker.registry import Worker
    from sluice.worker.runtime import Retry

    assert (sluice.Worker, sluice.Retry, sluice.LeaseLost) == (Worker, Retry, LeaseLost)
    assert set(sluice.__all__) <= set(dir(sluice))
    with pytest.raises(AttributeError):
        _ = sluice.NoSuchThing  # type: ignore[attr-defined]


def test_a_handlers_module_using_fenced_writes_does_not_load_boto3_at_import() -> None:
    # The worker loads its handlers module at init; boto3 comes with the first job's store instead
    # (sluice_dev.examples imports sluice.backends.dynamodb.fenced for fencing_headers).
    loaded = _loaded_after("sluice_dev.examples")
    assert "sluice.backends.dynamodb.fenced" in loaded and "boto3" not in loaded
