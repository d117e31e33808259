"""The payloads bucket (issue 28, item 4): large payloads live in S3, records carry a pointer.

Private, encrypted, TLS only, expiring after the job life bound; written by the functions whose
pipeline appends records, read by the workers (their own queues' prefixes for a team's worker:
tests/infra/test_team_stack.py), and the threshold's default is the code's.
"""

from __future__ import annotations

from typing import Any

from sluice.core.config import Settings
from sluice.core.limits import DAY_MS, JOB_LIFE_MS
from sluice.core.payloads import MIN_INLINE_MAX_BYTES, PREFIX
from tests.infra import cfn

T = cfn.template()


def props(name: str) -> dict[str, Any]:
    return T["Resources"][name]["Properties"]  # type: ignore[no-any-return]


def test_the_bucket_is_private_encrypted_tls_only_and_expires_past_the_job_life_bound() -> None:
    p = props("PayloadsBucket")
    sse = p["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]
    assert sse["SSEAlgorithm"] == "AES256"
    assert all(p["PublicAccessBlockConfiguration"].values()) and len(p["PublicAccessBlockConfiguration"]) == 4
    assert p["OwnershipControls"]["Rules"] == [{"ObjectOwnership": "BucketOwnerEnforced"}]
    (rule,) = p["LifecycleConfiguration"]["Rules"]
    assert rule["Prefix"] == f"{PREFIX}/" and rule["Status"] == "Enabled"
    mapping, key, field = rule["ExpirationInDays"]["Fn::FindInMap"]
    assert (mapping, key, field) == ("ResultExpiry", {"Ref": "RetentionDays"}, "Days")
    refused = ["1", "3", "7"]  # the ItemsOutliveTheJobLifeBound rule refuses these
    assert T["Rules"]["ItemsOutliveTheJobLifeBound"]["Assertions"][0]["Assert"]["Fn::Not"][0][
        "Fn::Contains"][0] == refused
    for days in T["Parameters"]["RetentionDays"]["AllowedValues"]:
        if str(days) not in refused:
            assert T["Mappings"]["ResultExpiry"][str(days)]["Days"] * DAY_MS > JOB_LIFE_MS, days
    (deny,) = props("PayloadsBucketPolicy")["PolicyDocument"]["Statement"]
    assert deny["Effect"] == "Deny" and deny["Principal"] == "*" and deny["Action"] == "s3:*"
    assert deny["Condition"]["Bool"]["aws:SecureTransport"] == "false"
    assert deny["Resource"] == [{"Fn::GetAtt": ["PayloadsBucket", "Arn"]},
                                {"Fn::Sub": "${PayloadsBucket.Arn}/*"}]


def test_every_function_is_told_the_bucket_and_the_threshold_whose_default_is_the_codes() -> None:
    env = T["Globals"]["Function"]["Environment"]["Variables"]
    assert env["SLUICE_PAYLOADS_BUCKET"] == {"Ref": "PayloadsBucket"}
    assert env["SLUICE_PAYLOAD_INLINE_MAX_BYTES"] == {"Ref": "PayloadInlineMaxBytes"}
    parameter = T["Parameters"]["PayloadInlineMaxBytes"]
    assert parameter["Default"] == Settings.model_fields["payload_inline_max_bytes"].default == 16 * 1024
    assert parameter["MinValue"] == MIN_INLINE_MAX_BYTES
    assert parameter["MaxValue"] == Settings.model_fields["max_payload_bytes"].default


def test_a_teams_worker_is_told_the_bucket_its_stack_exports() -> None:
    export = T["Outputs"]["PayloadsBucketName"]
    assert export["Value"] == {"Ref": "PayloadsBucket"}
    assert export["Export"]["Name"] == {"Fn::Sub": "${AWS::StackName}-PayloadsBucket"}
    worker = cfn.load(cfn.ROOT / "infra" / "worker.yaml")
    (fn,) = (r for r in worker["Resources"].values() if r["Type"] == "AWS::Serverless::Function")
    assert fn["Properties"]["Environment"]["Variables"]["SLUICE_PAYLOADS_BUCKET"] == {
        "Fn::ImportValue": {"Fn::Sub": "${SluiceStackName}-PayloadsBucket"}}
