"""Issue 27, items 3, 5 and 8 in the template: the operator list fails closed, the per-caller
throttle's parameters reach the gateway, and the network and endpoint policies are narrow.

The template read as CloudFormation reads it (``tests.infra.cfn``); each test fails on the
template (or the gateway) before the issue.
"""

from __future__ import annotations

from typing import Any

from tests.infra import cfn
from tests.infra.test_template import T
from tests.unit.test_gateway_admin import EVERY, OPERATOR, OPERATOR_SESSION, WEB, Rig, dead_id


def _functions_with(var: str) -> dict[str, dict[str, Any]]:
    return {lid: r["Properties"] for lid, r in cfn.resources(T, "AWS::Serverless::Function").items()
            if var in (r["Properties"].get("Environment") or {}).get("Variables", {})}


# ------------------------------------------------------------------ item 3: operators fail closed


def test_at_the_templates_default_nobody_is_an_operator() -> None:
    """OperatorPrincipalArns' default is empty, and a gateway configured from the template's default
    refuses every signed caller on every admin route, writing nothing (it left them to IAM alone)."""
    from sluice_dev.local.deployed import settings_of
    from sluice_dev.local.template import TEMPLATE, load

    assert T["Parameters"]["OperatorPrincipalArns"]["Default"] == ""
    assert "nobody is an operator" in T["Parameters"]["OperatorPrincipalArns"]["Description"]
    deploy = load(TEMPLATE)
    holders = [lid for lid, f in deploy.functions.items() if "SLUICE_OPERATOR_PRINCIPALS" in f.env]
    assert holders  # the function that serves /v1/admin
    for lid in holders:
        s = settings_of(deploy.functions[lid].concrete_env())
        operators = tuple(a.strip() for a in s.operator_principals.split(",") if a.strip())
        assert operators == ()
        for caller in (WEB, OPERATOR, OPERATOR_SESSION):
            rig = Rig(operators=operators)
            dead_id(rig)
            for method, path, body in EVERY:
                code, _, doc = rig.call(method, path, body, caller=caller)
                assert (code, doc["code"]) == (403, "NOT_OPERATOR"), (lid, caller, method, path)
            assert rig.untouched()
