"""CloudFormation custom resources that finish the Kafka side of a deploy.

CloudFormation cannot do either step itself:

* ``bootstrap_handler`` looks up an MSK Serverless cluster's bootstrap servers. The cluster
  resource returns only its ARN (the coverage-roadmap issue for a BootstrapServers attribute
  is still open), and the MSK control-plane API has no VPC endpoint for serverless clusters,
  so this function runs outside the VPC and needs no network setup.
* ``topics_handler`` creates the job topic and its dead-letter topic. MSK Serverless does
  not auto-create topics. It runs inside the VPC with the shared layer and connects exactly
  as the gateway and relay do (``sluice.backends.kafka.auth.client_config``). It is idempotent: an
  existing topic is kept, and its partition count is raised when the stack asks for more
  (Kafka cannot lower it). Delete leaves topics alone: they hold accepted jobs, and deleting
  the cluster removes them anyway.

* ``prefix_lists_handler`` looks up the AWS-managed prefix lists of DynamoDB and S3 in the
  stack's Region (``com.amazonaws.<region>.dynamodb`` / ``.s3``), so the functions' security
  group can send HTTPS to those services' gateway endpoints instead of to 0.0.0.0/0
  (issue 19). CloudFormation has no attribute for them. Outside the VPC, boto3 only.

All of them always answer CloudFormation, success or failure, so a broken cluster fails the
deploy in minutes instead of leaving the stack waiting an hour for a reply.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

ADMIN_TIMEOUT_MS = 30_000


def bootstrap_handler(event: dict[str, Any], context: Any) -> None:
    def lookup(props: dict[str, Any]) -> dict[str, str]:
        import boto3

        kafka = boto3.client("kafka", region_name=props.get("Region"))
        brokers = kafka.get_bootstrap_brokers(ClusterArn=props["ClusterArn"])
        servers = brokers.get("BootstrapBrokerStringSaslIam")
        if not servers:
            raise RuntimeError(f"cluster {props['ClusterArn']} reports no SASL/IAM bootstrap servers")
        return {"BootstrapServers": servers}

    _run(event, lambda props: lookup(props), physical_id=event["LogicalResourceId"])


def prefix_lists_handler(event: dict[str, Any], context: Any) -> None:
    _run(event, prefix_lists, physical_id=event["LogicalResourceId"])


def prefix_lists(props: dict[str, Any], ec2: Any = None) -> dict[str, str]:
    """{"DynamoDb": pl-..., "S3": pl-...} of ``props["Region"]``."""
    if ec2 is None:
        import boto3

        ec2 = boto3.client("ec2", region_name=props.get("Region"))
    region = props["Region"]
    names = {"DynamoDb": f"com.amazonaws.{region}.dynamodb", "S3": f"com.amazonaws.{region}.s3"}
    found = ec2.describe_prefix_lists(Filters=[{"Name": "prefix-list-name", "Values": list(names.values())}])
    ids = {p["PrefixListName"]: p["PrefixListId"] for p in found["PrefixLists"]}
    missing = [name for name in names.values() if name not in ids]
    if missing:
        raise RuntimeError(f"no AWS-managed prefix list named {', '.join(missing)}")
    return {key: ids[name] for key, name in names.items()}


PROBE_ATTEMPTS = 3


def topics_handler(event: dict[str, Any], context: Any) -> None:
    props = event.get("ResourceProperties", {})
    _run(event, ensure_topics, physical_id=f"{props.get('BootstrapServers', '')}|{props.get('Topics', '')}")


def ensure_topics(props: dict[str, Any]) -> dict[str, str]:
    """Create each topic named in ``props["Topics"]`` (comma-separated) if missing."""
    from kafka.admin import KafkaAdminClient, NewPartitions, NewTopic
    from kafka.errors import IncompatibleBrokerVersion

    from sluice.backends.kafka.auth import client_config
    from sluice.core.config import Settings

    topics = [t.strip() for t in str(props["Topics"]).split(",") if t.strip()]
    partitions = int(props["Partitions"])  # CloudFormation passes every property as a string
    retention_ms = str(int(props.get("RetentionHours", 168)) * 3600 * 1000)
    settings = Settings(kafka_bootstrap=props["BootstrapServers"], kafka_security=props["Security"],
                        aws_region=props.get("Region", "us-east-1"))
    for attempt in range(PROBE_ATTEMPTS):
        admin = KafkaAdminClient(**client_config(settings), request_timeout_ms=ADMIN_TIMEOUT_MS,
                                 bootstrap_timeout_ms=ADMIN_TIMEOUT_MS)
        try:
            existing = set(admin.list_topics())
            missing = [t for t in topics if t not in existing]
            if missing:
                # replication_factor=-1: the broker's default (MSK Serverless fixes it at 3).
                admin.create_topics([NewTopic(t, partitions, -1, topic_configs={"retention.ms": retention_ms})
                                     for t in missing])
            break
        except IncompatibleBrokerVersion:
            # kafka-python picks request versions from an ApiVersions probe; a probe that timed
            # out on a busy broker leaves a guess too old for CreateTopics. A fresh client probes again.
            admin.close()
            if attempt == PROBE_ATTEMPTS - 1:
                raise
    try:
        grow = {}
        present = [t for t in topics if t in existing]
        # describe_topics([]) describes every topic in the cluster; growing those would
        # touch topics this stack does not own.
        for topic in admin.describe_topics(present) if present else []:
            if len(topic["partitions"]) < partitions:
                grow[topic.get("name") or topic["topic"]] = NewPartitions(total_count=partitions)
        if grow:
            admin.create_partitions(grow)
    finally:
        admin.close()
    return {"Created": ",".join(missing), "Grown": ",".join(sorted(grow))}


def _run(event: dict[str, Any], action: Any, physical_id: str) -> None:
    status, reason, data = "SUCCESS", "", {}
    try:
        if event["RequestType"] in ("Create", "Update"):
            data = action(event.get("ResourceProperties", {}))
    except Exception as exc:  # any failure must still reach CloudFormation
        status, reason = "FAILED", f"{type(exc).__name__}: {exc}"
    print(json.dumps({"request": event["RequestType"], "status": status, "reason": reason, "data": data}))
    # A Delete must echo the id CloudFormation knows, or it would think a new resource was made.
    if event["RequestType"] == "Delete" and event.get("PhysicalResourceId"):
        physical_id = event["PhysicalResourceId"]
    body = json.dumps({
        "Status": status,
        "Reason": (reason or "see the function's log")[:900],
        "PhysicalResourceId": physical_id[:1000],
        "StackId": event["StackId"],
        "RequestId": event["RequestId"],
        "LogicalResourceId": event["LogicalResourceId"],
        "Data": data,
    }).encode()
    # The pre-signed S3 URL was signed with an empty Content-Type.
    request = urllib.request.Request(event["ResponseURL"], data=body, method="PUT",
                                     headers={"Content-Type": ""})
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()
