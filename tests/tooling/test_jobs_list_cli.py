"""Issue 32: ``sluice jobs list`` through the operator API on the local server (the gateway with fake
ports behind it): a state's jobs newest first, a prefix, the next page's cursor, the sensitive
field of a typed queue redacted in the table and the JSON, and a bad state or cursor refused."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from sluice.core.routes import Route, RouteTable
from sluice_dev.cli import main
from sluice_dev.local.api_server import LocalGateway
from tests.tooling.test_admin_local import cli_env as cli_env  # the fixture
from tests.unit.test_gateway_admin import OPERATOR, Rig
from tests.unit.test_job_listing import Order

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def served(cli_env: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    routes = RouteTable([Route("emails", "fn-emails", "team", {"emails": Order.model_json_schema()}, 1)])
    rig = Rig(operators=(OPERATOR,), routes=routes)
    rig.queue.seed("emails", "ready", 0)
    for i in range(5):
        card = {"number": "4111-secret", "exp": "1/30"}
        rig.queue.add("emails", f"job-{i}", {"to": f"u{i}@x", "card": card})
    with LocalGateway(rig.gateway) as server:
        monkeypatch.setenv("SLUICE_API_URL", server.url)
        monkeypatch.setenv("SLUICE_LOCAL_CALLER", OPERATOR)
        yield rig


def test_sluice_jobs_list_pages_filters_and_redacts(served: Rig) -> None:
    runner = CliRunner(mix_stderr=False)
    shown = runner.invoke(main, ["jobs", "list", "emails", "--limit", "2"])
    assert shown.exit_code == 0, shown.output + shown.stderr
    assert "job-4" in shown.stdout and "job-3" in shown.stdout and "job-2" not in shown.stdout
    assert "[redacted]" in shown.stdout and "4111-secret" not in shown.stdout
    cursor = shown.stdout.split("more: --cursor ", 1)[1].split()[0]
    rest = runner.invoke(main, ["jobs", "list", "emails", "--json", "--cursor", cursor])
    page = json.loads(rest.stdout)
    assert [j["job_id"] for j in page["jobs"]] == ["job-2", "job-1", "job-0"] and page["next"] is None
    assert all(j["payload"]["card"]["number"] == "[redacted]" for j in page["jobs"])
    one = runner.invoke(main, ["jobs", "list", "emails", "--prefix", "job-1", "--json"])
    assert [j["job_id"] for j in json.loads(one.stdout)["jobs"]] == ["job-1"]
    none = runner.invoke(main, ["jobs", "list", "emails", "--state", "dead"])
    assert none.exit_code == 0 and "emails: no dead jobs" in none.stdout


@pytest.mark.parametrize("args", [["--state", "running"], ["--cursor", "x~"], ["--prefix", "a*"],
                                  ["--limit", "100000"]])
def test_sluice_jobs_list_refuses_bad_options(served: Rig, args: list[str]) -> None:
    result = CliRunner(mix_stderr=False).invoke(main, ["jobs", "list", "emails", *args])
    assert result.exit_code != 0 and served.untouched()


def test_sluice_queue_sensitive_marks_fields_the_listing_then_redacts(served: Rig,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    runner = CliRunner(mix_stderr=False)
    marked = runner.invoke(main, ["queue", "sensitive", "emails", "to", "/card/exp"])
    assert marked.exit_code == 0, marked.output + marked.stderr
    assert "emails: sensitive /to, /card/exp" in marked.stdout
    assert served.queue.get_config("emails").sensitive == ("/to", "/card/exp")
    with caplog.at_level("DEBUG"):
        shown = runner.invoke(main, ["jobs", "list", "emails", "--json"])
    page = json.loads(shown.stdout)
    for job in page["jobs"]:
        assert job["payload"] == {"to": "[redacted]", "card": {"number": "[redacted]", "exp": "[redacted]"}}
    everything = shown.stdout + shown.stderr + caplog.text
    assert "4111-secret" not in everything and "u1@x" not in everything and "1/30" not in everything
    cleared = runner.invoke(main, ["queue", "sensitive", "emails", "--clear"])
    assert cleared.exit_code == 0 and served.queue.get_config("emails").sensitive == ()


@pytest.mark.parametrize("args", [[], ["a", "--clear"], ["/a~2"], ["a/b"], ["/" + "a" * 300]])
def test_sluice_queue_sensitive_refuses_bad_fields_and_writes_nothing(served: Rig, args: list[str]) -> None:
    result = CliRunner(mix_stderr=False).invoke(main, ["queue", "sensitive", "emails", *args])
    assert result.exit_code != 0 and served.untouched()
