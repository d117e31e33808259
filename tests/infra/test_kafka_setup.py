"""The Kafka custom resources (infra/kafka_setup/app.py) against a real broker and a real reply URL.

CloudFormation sends each custom resource an event and waits for an HTTP PUT to a pre-signed
URL; here a local HTTP server plays that URL, and Tansu plays MSK (plaintext instead of IAM,
the only difference being ``client_config``'s SASL settings).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import ModuleType
from typing import Any

import pytest

from sluice_dev.local import servers
from tests.infra.cfn import ROOT
from tests.loading import module_from_file

pytestmark = pytest.mark.integration


def _load_app() -> ModuleType:
    return module_from_file(ROOT / "infra/kafka_setup/app.py", "kafka_setup_app")


app = _load_app()


class Replies:
    """A stand-in for CloudFormation's pre-signed reply URL."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.content_types: list[str | None] = []
        replies = self

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                length = int(self.headers["Content-Length"])
                replies.bodies.append(json.loads(self.rfile.read(length)))
                replies.content_types.append(self.headers.get("Content-Type"))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/reply?signature=x"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def event(self, request: str, props: dict[str, Any], physical_id: str | None = None) -> dict[str, Any]:
        event = {"RequestType": request, "ResponseURL": self.url, "StackId": "arn:aws:cloudformation:stack/s",
                 "RequestId": f"req-{len(self.bodies)}", "LogicalResourceId": "KafkaTopics",
                 "ResourceType": "Custom::KafkaTopics", "ResourceProperties": props}
        if physical_id:
            event["PhysicalResourceId"] = physical_id
        return event


@pytest.fixture
def replies() -> Iterator[Replies]:
    r = Replies()
    yield r
    r.server.shutdown()


def _partitions(bootstrap: str, topics: list[str]) -> dict[str, int]:
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=[bootstrap])
    try:
        return {t.get("name") or t["topic"]: len(t["partitions"]) for t in admin.describe_topics(topics)}
    finally:
        admin.close()


@pytest.mark.timeout(90)
def test_a_first_deploy_leaves_other_topics_alone(tansu: servers.Server, unique: str,
                                                  replies: Replies) -> None:
    # describe_topics([]) means "every topic": a first deploy once tried to grow foreign topics.
    from kafka.admin import KafkaAdminClient, NewTopic

    bootstrap = tansu.extra["bootstrap"]
    foreign = f"theirs-{unique}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(foreign, 1, 1)])
    finally:
        admin.close()
    props = {"BootstrapServers": bootstrap, "Security": "plaintext", "Region": "us-east-1",
             "Topics": f"ours-{unique}", "Partitions": "3"}
    app.topics_handler(replies.event("Create", props), None)
    assert replies.bodies[-1]["Status"] == "SUCCESS", replies.bodies[-1]
    assert _partitions(bootstrap, [foreign, f"ours-{unique}"]) == {foreign: 1, f"ours-{unique}": 3}


@pytest.mark.timeout(90)
def test_topics_are_created_grown_and_kept(tansu: servers.Server, unique: str, replies: Replies) -> None:
    bootstrap = tansu.extra["bootstrap"]
    topics = [f"jobs-{unique}", f"jobs-{unique}.dlq"]
    props = {"BootstrapServers": bootstrap, "Security": "plaintext", "Region": "us-east-1",
             "Topics": ",".join(topics), "Partitions": "3", "RetentionHours": "24"}

    app.topics_handler(replies.event("Create", props), None)
    created = replies.bodies[-1]
    assert created["Status"] == "SUCCESS", created
    assert created["Data"]["Created"] == ",".join(topics)
    assert replies.content_types[-1] == ""
    assert _partitions(bootstrap, topics) == dict.fromkeys(topics, 3)

    # A second deploy with the same properties changes nothing.
    app.topics_handler(replies.event("Update", props, created["PhysicalResourceId"]), None)
    assert replies.bodies[-1]["Status"] == "SUCCESS" and replies.bodies[-1]["Data"]["Created"] == ""
    assert _partitions(bootstrap, topics) == dict.fromkeys(topics, 3)

    # More partitions: MSK grows the topics (CreatePartitions). Tansu lacks that request, so here
    # the deploy must fail with a reply that says why, and the topics must be untouched.
    more = {**props, "Partitions": "5"}
    app.topics_handler(replies.event("Update", more, created["PhysicalResourceId"]), None)
    grown = replies.bodies[-1]
    assert grown["Status"] == "FAILED" and "CreatePartitions" in grown["Reason"], grown
    assert _partitions(bootstrap, topics) == dict.fromkeys(topics, 3)

    # Delete answers with the id CloudFormation knows and leaves the jobs where they are.
    app.topics_handler(replies.event("Delete", props, created["PhysicalResourceId"]), None)
    deleted = replies.bodies[-1]
    assert deleted["Status"] == "SUCCESS" and deleted["PhysicalResourceId"] == created["PhysicalResourceId"]
    assert _partitions(bootstrap, topics) == dict.fromkeys(topics, 3)


@pytest.mark.timeout(60)
def test_an_unreachable_cluster_fails_the_deploy_with_a_reply(replies: Replies,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app, "ADMIN_TIMEOUT_MS", 2_000)  # 30 s in AWS; the test needs no such wait
    props = {"BootstrapServers": f"127.0.0.1:{servers.free_port()}", "Security": "plaintext",
             "Region": "us-east-1", "Topics": "jobs", "Partitions": "2"}
    started = time.monotonic()
    app.topics_handler(replies.event("Create", props), None)
    reply = replies.bodies[-1]
    assert reply["Status"] == "FAILED"
    assert reply["Reason"] and reply["Reason"] != "see the function's log"
    assert time.monotonic() - started < 30


def test_bad_properties_fail_with_a_reply(replies: Replies) -> None:
    app.topics_handler(replies.event("Create", {"BootstrapServers": "x:1", "Security": "plaintext",
                                                "Topics": "jobs", "Partitions": "many"}), None)
    assert replies.bodies[-1]["Status"] == "FAILED" and "ValueError" in replies.bodies[-1]["Reason"]


class _FakeKafka:
    def __init__(self, answer: dict[str, str]) -> None:
        self.answer = answer
        self.asked: list[str] = []

    def get_bootstrap_brokers(self, ClusterArn: str) -> dict[str, str]:
        self.asked.append(ClusterArn)
        return self.answer


@pytest.mark.parametrize(("answer", "status"), [
    ({"BootstrapBrokerStringSaslIam": "boot-1.kafka-serverless.us-east-1.amazonaws.com:9098"}, "SUCCESS"),
    ({}, "FAILED"),
])
def test_bootstrap_lookup_returns_the_iam_brokers(monkeypatch: pytest.MonkeyPatch, replies: Replies,
                                                  answer: dict[str, str], status: str) -> None:
    import boto3

    kafka = _FakeKafka(answer)
    monkeypatch.setattr(boto3, "client", lambda service, **kw: kafka if service == "kafka" else None)
    arn = "arn:aws:kafka:us-east-1:123456789012:cluster/sluice-jobs/abc-1"
    app.bootstrap_handler(replies.event("Create", {"ClusterArn": arn, "Region": "us-east-1"}), None)
    reply = replies.bodies[-1]
    assert kafka.asked == [arn]
    assert reply["Status"] == status
    if status == "SUCCESS":
        assert reply["Data"] == {"BootstrapServers": answer["BootstrapBrokerStringSaslIam"]}
    else:
        assert "no SASL/IAM bootstrap servers" in reply["Reason"]
