"""Scheduler's firings are never lost silently (issue 29, item 4): every schedule's target retries
for the day a firing is accepted, then sends it to the firings dead-letter queue, whose depth alarms.

The schedules are created in code (the operator function's ``SchedulerTrigger``), so the template
holds the queue, the Scheduler role's right to send to it, the operator's setting naming it, and the
alarm; the target's policy itself is ``sluice.core.schedules.target_retry`` (checked here against
Scheduler's limits and the firing's acceptance window).
"""

from __future__ import annotations

from typing import Any

from sluice.core import schedules
from sluice.core.config import Settings
from tests.infra import cfn

T = cfn.template()
OBS = cfn.load(cfn.NESTED["observability"])
QUEUE_ARN = {"Fn::GetAtt": ["FiringsDeadLetterQueue", "Arn"]}


def props(name: str) -> dict[str, Any]:
    return T["Resources"][name]["Properties"]  # type: ignore[no-any-return]


def test_the_firings_dead_letter_queue_is_a_standard_encrypted_queue_kept_14_days() -> None:
    assert T["Resources"]["FiringsDeadLetterQueue"]["Type"] == "AWS::SQS::Queue"
    p = props("FiringsDeadLetterQueue")
    assert p == {"MessageRetentionPeriod": 1_209_600, "SqsManagedSseEnabled": True}  # no FifoQueue:
    # Scheduler takes a standard queue only


def test_the_scheduler_role_may_invoke_the_firings_function_and_send_to_its_queue_only() -> None:
    (role_policy,) = [r for r in T["Resources"].values() if r["Type"] == "AWS::IAM::RolePolicy"
                      and r["Properties"]["RoleName"] == {"Ref": "SchedulerInvokeRole"}]
    by_action = {s["Action"]: s["Resource"] for s in role_policy["Properties"]["PolicyDocument"]["Statement"]
                 if s["Effect"] == "Allow"}
    assert by_action == {"lambda:InvokeFunction": {"Fn::GetAtt": ["FiringsFunction", "Arn"]},
                         "sqs:SendMessage": QUEUE_ARN}


def test_the_scheduler_function_names_the_queue_in_the_setting_the_trigger_reads() -> None:
    """The operator's Scheduler calls are the scheduler function's since issue 33: its trigger reads it."""
    env = props("SchedulerFunction")["Environment"]["Variables"]
    assert env["SLUICE_FIRINGS_DEAD_LETTER_ARN"] == QUEUE_ARN
    assert "firings_dead_letter_arn" in Settings.model_fields
    assert Settings(firings_dead_letter_arn="arn:x").firings_dead_letter_arn == "arn:x"


def test_an_alarm_watches_the_queues_depth() -> None:
    passed = props("Observability")["Parameters"]
    assert passed["FiringsDeadLetterQueueName"] == {"Fn::GetAtt": ["FiringsDeadLetterQueue", "QueueName"]}
    assert "FiringsDeadLetterQueueName" in OBS["Parameters"]
    alarm = OBS["Resources"]["FiringsDlqDepthAlarm"]["Properties"]
    assert (alarm["Namespace"], alarm["MetricName"]) == ("AWS/SQS", "ApproximateNumberOfMessagesVisible")
    assert alarm["Dimensions"] == [{"Name": "QueueName", "Value": {"Ref": "FiringsDeadLetterQueueName"}}]
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (0, "GreaterThanThreshold")
    assert alarm["AlarmActions"] == [{"Ref": "AlarmTopic"}]


def test_the_targets_retry_policy_spans_the_firings_acceptance_within_schedulers_limits() -> None:
    made = schedules.target_retry("arn:aws:sqs:us-east-1:123456789012:firings-dlq")
    policy = made["RetryPolicy"]
    assert 60 <= policy["MaximumEventAgeInSeconds"] <= 86_400  # Scheduler's bounds
    assert 0 <= policy["MaximumRetryAttempts"] <= 185
    assert policy["MaximumRetryAttempts"] == 185  # as long and as often as Scheduler allows
    # every retry Scheduler makes is still a firing the gateway accepts (not refused as too late)
    assert policy["MaximumEventAgeInSeconds"] * 1000 <= schedules.FIRING_LATE_MS
    assert made["DeadLetterConfig"] == {"Arn": "arn:aws:sqs:us-east-1:123456789012:firings-dlq"}
    assert "DeadLetterConfig" not in schedules.target_retry("")
