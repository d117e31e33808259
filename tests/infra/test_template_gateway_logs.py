"""The enqueue gateway's log lines (issue 33, docs/cost.md "Log volume"): one request a job, so Lambda's
START and REPORT lines and the handler's metric line were a per-job cost SQS + Lambda does not pay.

The gateway function logs in Lambda's JSON format with system level WARN (``GatewaySystemLogLevel``) in
every profile, its application level INFO as Powertools' is, and no alarm or dashboard reads a count of
2xx answers, which the handler no longer writes (``sluice.entry.gateway.instrumented``).
"""

from __future__ import annotations

import re

import pytest

from tests.infra import cfn
from tests.infra.test_template_profiles import EGRESS, at

T = cfn.template()
PROFILES = T["Parameters"]["Profile"]["AllowedValues"]


def logging_config(profile: str, egress: str = "none", **more: str) -> dict[str, str]:
    return at(profile, egress, **more).props("GatewayFunction")["LoggingConfig"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("egress", EGRESS)
@pytest.mark.parametrize("profile", PROFILES)
def test_every_profile_logs_the_gateway_in_json_at_system_level_warn(profile: str, egress: str) -> None:
    assert logging_config(profile, egress) == {"LogGroup": {"Ref": "GatewayLogGroup"}, "LogFormat": "JSON",
                                               "ApplicationLogLevel": "INFO", "SystemLogLevel": "WARN"}


@pytest.mark.parametrize("profile", PROFILES)
def test_an_operator_can_have_the_report_lines_back_without_a_code_change(profile: str) -> None:
    assert logging_config(profile, GatewaySystemLogLevel="INFO")["SystemLogLevel"] == "INFO"
    parameter = T["Parameters"]["GatewaySystemLogLevel"]
    assert (parameter["Default"], sorted(parameter["AllowedValues"])) == ("WARN", ["DEBUG", "INFO", "WARN"])


@pytest.mark.parametrize("profile", PROFILES)
def test_the_application_level_is_powertools_and_lets_the_metric_lines_through(profile: str) -> None:
    """Lambda reads a line without a level (an EMF line) as INFO: above INFO it would drop the 4xx and 5xx
    counts; Powertools keeps its level in step with Lambda's (ALC's wins), so the two are the same."""
    d = at(profile)
    assert logging_config(profile)["ApplicationLogLevel"] == d.env("GatewayFunction")["POWERTOOLS_LOG_LEVEL"]
    assert logging_config(profile)["ApplicationLogLevel"] in ("TRACE", "DEBUG", "INFO")


def test_the_other_functions_keep_their_format() -> None:
    """Only the gateway runs once a job; the rest keep Lambda's text format and every line."""
    for name, fn in cfn.resources(T, "AWS::Serverless::Function").items():
        if name != "GatewayFunction":
            assert "LogFormat" not in fn["Properties"].get("LoggingConfig", {}), name


def test_no_alarm_or_dashboard_reads_a_count_of_2xx_answers() -> None:
    """The handler counts only 4xx and 5xx answers: API Gateway's Count and Lambda's Invocations count the
    rest. A template that watched ``Gateway2xx`` would watch a metric nobody writes."""
    for path in (cfn.TEMPLATE, *cfn.NESTED.values()):
        assert not re.search(r"(Gateway|Operator|Internal|Firings)2xx", path.read_text()), path.name
