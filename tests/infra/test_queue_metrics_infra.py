"""The per-queue alarm template and dashboard widgets read the metrics the code publishes
(``sluice.backends.aws.queue_metrics``): a renamed metric fails here, not silently in CloudWatch."""

from __future__ import annotations

import json
import re

from sluice.backends.aws import queue_metrics as qm
from tests.infra import cfn


def test_the_queue_alarm_watches_the_oldest_age_of_one_queue() -> None:
    t = cfn.load(cfn.NESTED["queue_alarm"])
    (alarm,) = cfn.resources(t, "AWS::CloudWatch::Alarm").values()
    p = alarm["Properties"]
    assert p["MetricName"] == qm.OLDEST_AGE
    assert t["Parameters"]["MetricsNamespace"]["Default"] == qm.NAMESPACE
    assert p["Dimensions"] == [{"Name": qm.DIMENSION, "Value": {"Ref": "QueueName"}}]
    assert (p["Period"], p["Statistic"], p["ComparisonOperator"]) == (60, "Maximum", "GreaterThanThreshold")
    assert p["Threshold"] == {"Ref": "AgeThresholdSeconds"}


def test_the_dashboard_shows_every_per_queue_metric_by_queue() -> None:
    obs = cfn.load(cfn.NESTED["observability"])
    body, _ = cfn.dashboard(obs)
    names = set(re.findall(r"\$\{([A-Za-z0-9:.]+)\}", body))
    widgets = json.loads(cfn.sub(body, {n: "x" for n in names} | {"RelayLagAlarmThreshold": 1}))["widgets"]
    expressions = [m[0]["expression"] for w in widgets for m in w["properties"]["metrics"]
                   if isinstance(m[0], dict) and "expression" in m[0]]
    for metric in qm.ALL_METRICS:
        search = f"{{{qm.NAMESPACE},{qm.DIMENSION}}} MetricName=\"{metric}\""
        assert any(search in e for e in expressions), metric
    assert any("QueueWaitTime" in e and "'p99'" in e for e in expressions)
    assert any("QueueWaitTime" in e and "'p50'" in e for e in expressions)


def test_the_bound_is_a_template_parameter_with_the_settings_defaults() -> None:
    from sluice.core.config import Settings

    t = cfn.template()
    env = t["Globals"]["Function"]["Environment"]["Variables"]
    for param, field in (("MetricsQueues", "metrics_queues"), ("MetricsQueueCap", "metrics_queue_cap")):
        assert env[f"SLUICE_{field.upper()}"] == {"Ref": param}
        assert t["Parameters"][param]["Default"] == Settings.model_fields[field].default, param
    pattern = t["Parameters"]["MetricsQueues"]["AllowedPattern"]
    assert re.fullmatch(pattern, "") and re.fullmatch(pattern, "emails,thumbs")
    assert not re.fullmatch(pattern, "Emails") and not re.fullmatch(pattern, "a,,b")
