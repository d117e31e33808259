"""``sluice check`` warns when handlers import an HTTP client and the deploy has no egress (issue 33)."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from sluice_dev.cli import egress, main
from tests.infra import cfn

TEAM = str(cfn.ROOT / "infra" / "worker.yaml")
LAYER = "SluiceLayerArn=arn:aws:lambda:us-east-1:123456789012:layer:sluice:7"


@pytest.mark.parametrize(("source", "package", "expected"), [
    ("import requests", "", [("requests", 1)]),
    ("import httpx as h\nimport json", "", [("httpx", 1)]),
    ("from urllib import request", "", [("urllib.request", 1)]),
    ("import urllib.request", "", [("urllib.request", 1)]),
    ("from http import client", "", [("http.client", 1)]),
    ("from aiohttp import ClientSession", "", [("aiohttp", 1)]),
    ("import urllib3.util", "", [("urllib3", 1)]),
    ("def f():\n    import requests\n", "", [("requests", 2)]),
    ("from urllib.parse import urlsplit\nimport http\nimport boto3\nimport botocore", "", []),
    ("from . import requests", "team", []),  # the team's own module named requests, not the client
    ("from .. import x", "a.b", []),
])
def test_the_clients_a_source_imports(source: str, package: str, expected: list[tuple[str, int]]) -> None:
    assert egress.clients(egress.imported(source, package)) == expected


def test_relative_imports_resolve_against_the_package() -> None:
    assert ("a.b.util", 1) in egress.imported("from .util import x", "a.b")
    assert ("a.util", 1) in egress.imported("from ..util import x", "a.b")
    assert ("a.b.x", 1) in egress.imported("from . import x", "a.b")


@pytest.mark.parametrize(("parameters", "out"), [
    ({"HandlerEgress": "none"}, False),
    ({"HandlerEgress": "nat-single"}, True),
    ({"HandlerEgress": "nat-per-az"}, True),
    ({"HandlerEgress": "existing-nat", "VpcId": "vpc-1"}, True),
    ({"HandlerEgress": "none", "VpcId": "vpc-1", "CreateVpcEndpoints": "true"}, False),
    ({"HandlerEgress": "none", "VpcId": "vpc-1", "CreateVpcEndpoints": "false"}, None),  # the VPC's routes
    ({"Egress": "none"}, False),
    ({"Egress": "internet"}, True),
    ({}, None),
])
def test_whether_a_deploy_has_a_way_out(parameters: dict[str, str], out: bool | None) -> None:
    assert egress.has_egress(parameters) is out
    found = [egress.Finding("jobs.py", 3, "requests")]
    said = egress.warning(parameters, found)
    assert (said is not None) == (out is False)
    assert egress.warning(parameters, []) is None


@pytest.fixture
def team_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A handlers module whose own package imports requests (lazily) and http.client; its name is unique,
    so no other test's import of it is reused."""
    name = f"egress_jobs_{uuid.uuid4().hex[:8]}"
    lib = f"{name}_lib"
    (tmp_path / f"{name}.py").write_text(f"import sluice\nfrom {lib} import mail\n\napp = sluice.Worker()\n\n"
                                         "\n@app.handler('greet')\ndef greet(job, ctx):\n"
                                         "    return mail.send()\n")
    (tmp_path / lib).mkdir()
    (tmp_path / lib / "__init__.py").write_text("")
    (tmp_path / lib / "mail.py").write_text("from . import util\n\n\ndef send():\n    import requests\n"
                                            "    return requests.__name__\n")
    (tmp_path / lib / "util.py").write_text("from http import client\n")
    monkeypatch.chdir(tmp_path)
    yield name
    for module in [m for m in sys.modules if m.startswith(name)]:
        del sys.modules[module]


def check(*args: str) -> tuple[int, str, str]:
    out = CliRunner(mix_stderr=False).invoke(main, ["check", *args])
    return out.exit_code, out.stdout, out.stderr


def test_a_default_deploy_warns_naming_each_import(team_code: str) -> None:
    code, out, err = check(team_code)
    assert code == 0 and "greet" in out
    (said,) = [line for line in err.splitlines() if "HTTP client" in line]
    lib = f"{team_code}_lib"
    assert f"{lib}/mail.py:5 imports requests" in said and f"{lib}/util.py:1 imports http.client" in said
    assert "(HandlerEgress=none)" in said and "HandlerEgress=nat-single or nat-per-az" in said


def test_a_deploy_with_egress_does_not_warn(team_code: str) -> None:
    code, _, err = check("--parameter", "HandlerEgress=nat-single", team_code)  # the others: has_egress
    assert code == 0 and "HTTP client" not in err, err


def test_a_teams_worker_is_told_to_set_its_own_egress(team_code: str) -> None:
    code, _, err = check("--template", TEAM, "--parameter", LAYER, team_code)
    assert code == 0 and "(Egress=none)" in err and "set Egress=internet" in err
    code, _, err = check("--template", TEAM, "--parameter", LAYER, "--parameter", "Egress=internet",
                         team_code)
    assert code == 0 and "HTTP client" not in err


def test_json_carries_the_imports_and_the_warning(team_code: str) -> None:
    code, out, _ = check("--json", team_code)
    doc = json.loads(out)
    assert code == 0 and doc["egress"] is False
    assert [c.split(" imports ")[1] for c in doc["http_clients"]] == ["requests", "http.client"]
    assert any("HTTP client" in w for w in doc["warnings"])


def test_handlers_without_a_client_get_no_warning() -> None:
    code, _, err = check("sluice_dev.examples_team")
    assert code == 0 and "HTTP client" not in err


def test_sluices_own_modules_are_not_followed() -> None:
    """sluice_dev.examples imports urllib.request itself (the notify example's webhook): that is found;
    what it imports of sluice (ctx.http's pool, boto3's) is not the handlers' own code."""
    found = egress.http_client_imports("sluice_dev.examples")
    assert {f.client for f in found} == {"urllib.request"}
    assert all(f.path.endswith("examples.py") for f in found)
