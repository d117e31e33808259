"""Issue 14: a handler without ``timeout_s`` runs in every worker configuration the template
allows, and one whose timeout cannot fit the worker function is refused at start-up."""

from __future__ import annotations

import itertools
import sys
import types
from typing import Any

import pytest

import sluice
from sluice.core.config import Settings
from sluice.core.errors import HandlerDoesNotFit
from sluice.core.models import Job
from sluice.core.policy import invocation_budget_ms
from sluice.entry import root as wiring
from sluice.entry import worker as lambda_entry
from sluice.worker.runtime.budget import TimeBudget
from sluice.worker.runtime.context import JobContext
from sluice.worker.runtime.options import WorkerOptions
from sluice_dev.fakes import FakeLambdaContext, FakeQueue, FakeStore
from tests.infra import cfn
from tests.unit.test_worker_lambda import load_function

PARAMS = cfn.template()["Parameters"]
STARTUP_MS = 500  # what an invocation may have spent (settings, clients) before its first lease


def _range(name: str) -> list[int]:
    p = PARAMS[name]
    return sorted({int(p["MinValue"]), int(p["Default"]), int(p["MaxValue"])})


app = sluice.Worker()
ran: list[str] = []


@app.handler("plain")  # no timeout_s: as in the README and four of the examples
def plain(job: Job, ctx: JobContext) -> str:
    ran.append(job.job_id)
    return "ok"


def _settings(**kw: Any) -> Settings:
    return Settings(handlers_module=__name__, **kw)


def test_template_defaults_lease_a_job_of_a_handler_without_timeout() -> None:
    """The bug: 10 leases (300 s) equalled the 300 s function timeout, so fit() leased nothing."""
    timeout_s = int(PARAMS["WorkerTimeoutSeconds"]["Default"])
    lease_s = int(PARAMS["DefaultLeaseSeconds"]["Default"])
    s = _settings(function_timeout_s=timeout_s, default_lease_seconds=lease_s)
    queue, store = FakeQueue(), FakeStore()
    queue.add("plain", "j1", None)
    ran.clear()
    worker = app.bind(queue=queue, store=store, options=WorkerOptions.from_settings(s))
    context = FakeLambdaContext(timeout_s * 1000 - STARTUP_MS)
    summary = worker.drain(["plain"], 10, context.get_remaining_time_in_millis)
    assert summary.leased == 1 and ran == ["j1"], summary.as_dict()
    assert summary.skipped_for_time == []


CONFIGS = list(itertools.product(_range("WorkerTimeoutSeconds"), _range("DefaultLeaseSeconds")))


@pytest.mark.parametrize(("timeout_s", "lease_s"), CONFIGS)
def test_default_timeout_fits_every_configuration_the_template_allows(timeout_s: int, lease_s: int) -> None:
    s = _settings(function_timeout_s=timeout_s, default_lease_seconds=lease_s)
    options = WorkerOptions.from_settings(s)
    default = options.default_timeout_ms()
    assert 0 < default <= lease_s * 10_000
    budget = TimeBudget(lambda: timeout_s * 1000 - STARTUP_MS, options.margin_ms)
    assert budget.fit(default, 1, 10) >= 1
    options.check_fits(app.handlers.values())  # the default never trips the start-up check


def test_without_a_function_timeout_the_default_stays_ten_leases() -> None:
    assert WorkerOptions.from_settings(_settings(default_lease_seconds=30)).default_timeout_ms() == 300_000


def test_a_handler_too_long_for_the_function_is_refused_naming_it_and_the_budget() -> None:
    w = sluice.Worker()
    w.register("fits", plain, timeout_s=60)
    w.register("reports", plain, timeout_s=299)
    options = WorkerOptions.from_settings(_settings(function_timeout_s=300))
    budget = invocation_budget_ms(300_000, 2_000)
    with pytest.raises(HandlerDoesNotFit) as caught:
        options.check_fits(w.handlers.values())
    message = str(caught.value)
    assert "'reports' (timeout_s=299)" in message and f"{budget / 1000:g} s" in message
    assert "'fits'" not in message


broken = sluice.Worker()
broken.register("reports", plain, timeout_s=600)


def test_the_worker_function_refuses_at_start_up_once_per_container(monkeypatch: pytest.MonkeyPatch) -> None:
    s = Settings(handlers_module=__name__, function_timeout_s=300)
    monkeypatch.setattr(lambda_entry, "_prepared", {})
    module_app = "tests.unit.broken_handlers_for_budget"
    mod = types.ModuleType(module_app)
    mod.app = broken  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module_app, mod)
    bad = s.model_copy(update={"handlers_module": module_app})
    monkeypatch.setattr(wiring, "settings", lambda: bad)
    with pytest.raises(HandlerDoesNotFit, match=r"'reports' \(timeout_s=600\)"):
        load_function()  # the function module's import: Lambda's init phase
    # A module that fits loads once; later invocations reuse it without importing again.
    monkeypatch.setattr(wiring, "settings", lambda: s)
    loads: list[str] = []
    real = lambda_entry.load_app
    monkeypatch.setattr(lambda_entry, "load_app", lambda name: loads.append(name) or real(name))
    fn = load_function()
    for _ in range(3):
        lambda_entry.prepare()
    assert loads == [__name__] and fn.handler is not None


def test_the_template_passes_the_worker_timeout_from_the_timeouts_own_parameter() -> None:
    worker = cfn.template()["Resources"]["WorkerFunction"]["Properties"]
    assert worker["Timeout"] == {"Ref": "WorkerTimeoutSeconds"}
    assert worker["Environment"]["Variables"]["SLUICE_FUNCTION_TIMEOUT_S"] == worker["Timeout"]
