"""``sluice dev`` plays infra/team.yaml for each ``--worker`` team (sluice_dev.local.teams, issue 27)."""

from __future__ import annotations

import pytest

from sluice.core.config import Settings
from sluice.core.errors import ConfigError, RegistrationRefused, RouteConflict
from sluice_dev.local.teams import load_team, raise_refusal, registrar_env


def test_the_team_stack_resolves_as_cloudformation_would() -> None:
    t = load_team("words", ["word-count", "word-batch"], "sluice")
    assert (t.map_name, t.map_value) == ("/sluice/sluice/teams/words", "word-batch,word-count")
    assert t.registrar == "sluice-registrar-words" and t.registrar_timeout_s == 120
    assert t.role_arn == "arn:aws:iam::000000000000:role/sluice/sluice-team-words"
    invoke = [s for s in t.worker_policy["Statement"] if s["Action"] == ["lambda:InvokeFunction"]]
    internal = "arn:aws:lambda:us-east-1:000000000000:function:sluice-internal"
    assert [s["Resource"] for s in invoke] == [internal]
    env = registrar_env(t, Settings(routes_table="local-routes", aws_endpoint_url="http://127.0.0.1:1",
                                    lambda_endpoint_url="http://127.0.0.1:2"))
    assert env["SLUICE_REGISTRAR_TEAM"] == "words"
    assert env["SLUICE_REGISTRAR_QUEUES"] == "word-batch,word-count"
    assert env["SLUICE_ROUTES_TABLE"] == "local-routes" and env["SLUICE_STACK_NAME"] == "sluice"
    assert env["SLUICE_LAMBDA_ENDPOINT_URL"] == "http://127.0.0.1:2"


def test_a_queue_cloudformation_would_refuse_is_refused_locally_too() -> None:
    with pytest.raises(ConfigError, match="Queues"):
        load_team("evil", ["sluice-ops"], "sluice")


def test_a_refused_registration_raises_what_the_registrar_named() -> None:
    with pytest.raises(RouteConflict, match="already routed"):
        raise_refusal("a", {"Status": "FAILED", "Reason": "RouteConflict: pattern 'x' is already routed"})
    with pytest.raises(RegistrationRefused):
        raise_refusal("a", {"Status": "FAILED", "Reason": "RegistrationRefused: no"})
    with pytest.raises(ConfigError, match="did not answer"):
        raise_refusal("a", None)
    assert raise_refusal("a", {"Status": "SUCCESS", "Data": {}})["Status"] == "SUCCESS"
