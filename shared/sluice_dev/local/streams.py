"""Lambda's part for completion events where moto runs: poll the jobs table's stream, feed the
``Publisher``, and route the bus to an SQS queue that ``sluice events --follow`` reads.

Moto records DynamoDB stream records and delivers EventBridge events to SQS targets, but has no
event source mappings and invokes no Lambda from a rule. So ``StreamPoller`` does what the
mappings do in AWS: read each shard after its checkpoint, hand a batch to the same ``Publisher``
the events Lambda uses (and to the countdown function's ``StreamCountdown.recount``:
``stream_consumers``), and move the checkpoint only past records done (``batchItemFailures``
stop it at the first failure, which is read again next round).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from sluice.core.config import Settings
from sluice.streams.completion.model import SOURCE_PREFIX

log = logging.getLogger("sluice_dev.local.streams")

RULE = "sluice-completions-local"
FOLLOW_QUEUE = "sluice-events-follow"
FOLLOW_RETENTION_S = 300
Handle = Callable[[dict[str, Any]], Mapping[str, Any]]  # a Lambda event -> its answer
Consume = Callable[[Sequence[Mapping[str, Any]]], list[str]]  # records -> the sequence numbers to retry


def _boto(service: str, s: Settings) -> Any:
    from sluice.entry.root import boto_client

    return boto_client(service, s)


def ensure_jobs_stream(s: Settings) -> str:
    """The jobs table's stream ARN, enabling the stream on a table created without one."""
    db = _boto("dynamodb", s)
    table = db.describe_table(TableName=s.jobs_table)["Table"]
    if not table.get("StreamSpecification", {}).get("StreamEnabled"):
        db.update_table(TableName=s.jobs_table, StreamSpecification={
            "StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"})
        table = db.describe_table(TableName=s.jobs_table)["Table"]
    return str(table["LatestStreamArn"])


def ensure_bus(s: Settings, queue_name: str | None = FOLLOW_QUEUE) -> str:
    """The bus and, with ``queue_name``, a rule for every ``sluice`` event and its SQS target;
    returns the queue's URL ("" with no queue: the events are published and nobody receives
    them, as on a bus with no rule)."""
    events, sqs = _boto("events", s), _boto("sqs", s)
    with contextlib.suppress(events.exceptions.ResourceAlreadyExistsException):
        events.create_event_bus(Name=s.events_bus_name)
    if queue_name is None:
        return ""
    # Unread, the queue would only grow (a dev stack with nobody following): SQS deletes messages
    # past their retention, and so does our moto server (motosqs). A follower sees the last 5 min.
    retention = {"MessageRetentionPeriod": str(FOLLOW_RETENTION_S)}
    try:
        url = sqs.create_queue(QueueName=queue_name, Attributes=retention)["QueueUrl"]
    except sqs.exceptions.QueueNameExists:  # made by an older sluice without the retention
        url = sqs.get_queue_url(QueueName=queue_name)["QueueUrl"]
        sqs.set_queue_attributes(QueueUrl=url, Attributes=retention)
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.put_rule(Name=RULE, EventBusName=s.events_bus_name, State="ENABLED",
                    EventPattern=json.dumps({"source": [{"prefix": SOURCE_PREFIX}]}))
    events.put_targets(Rule=RULE, EventBusName=s.events_bus_name, Targets=[{"Id": "follow", "Arn": arn}])
    return str(url)


def _plain(value: Any) -> Any:
    return value.timestamp() if isinstance(value, datetime) else value


def lambda_record(record: Mapping[str, Any], stream_arn: str) -> dict[str, Any]:
    """A GetRecords record in the shape Lambda hands a function."""
    data = {k: _plain(v) for k, v in record["dynamodb"].items()}
    return {"eventID": record.get("eventID", ""), "eventName": record["eventName"], "eventVersion": "1.1",
            "eventSource": "aws:dynamodb", "awsRegion": record.get("awsRegion", "us-east-1"),
            "dynamodb": data, "eventSourceARN": stream_arn}


def stream_consumers(records: Sequence[Mapping[str, Any]], *consumers: Consume) -> list[str]:
    """Hand one batch to each consumer (the functions that share the stream in AWS: the events
    ``Publisher`` and the ``Countdown``); the records any of them wants again, in stream order."""
    failed: set[str] = set()
    for consume in consumers:
        failed.update(consume(records))
    seqs = [str((r.get("dynamodb") or {}).get("SequenceNumber", "")) for r in records]
    return [seq for seq in seqs if seq in failed]


class StreamPoller:
    """Reads each shard as an event source mapping does: GetRecords with the iterator the last one
    returned (``NextShardIterator``), a new iterator only after its checkpoint (at start, and after a
    batch with failures, whose first failed record is read again), and the stream's shards described
    again every ``describe_every_s``. Describing the stream and asking a new iterator before every
    GetRecords made three requests of each poll where one does: on the moto server, every idle local
    stack's main cost."""

    def __init__(self, client: Any, stream_arn: str, handle: Handle, *, batch: int = 100,
                 describe_every_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.client, self.stream_arn, self.handle, self.batch = client, stream_arn, handle, batch
        self.checkpoints: dict[str, str] = {}  # shard id -> last sequence number done
        self.iterators: dict[str, str] = {}  # shard id -> where the next GetRecords reads from
        self.describe_every_s, self._clock = describe_every_s, clock
        self._shards: list[str] = []
        self._described = float("-inf")

    def poll_once(self) -> int:
        """One round over every shard; returns the records handed to the publisher."""
        if self._clock() - self._described >= self.describe_every_s:
            description = self.client.describe_stream(StreamArn=self.stream_arn)["StreamDescription"]
            self._shards = [shard["ShardId"] for shard in description["Shards"]]
            self._described = self._clock()
        return sum(self._shard(shard_id) for shard_id in self._shards)

    def _iterator(self, shard_id: str) -> str:
        after = self.checkpoints.get(shard_id)
        kwargs: dict[str, Any] = ({"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": after}
                                  if after else {"ShardIteratorType": "TRIM_HORIZON"})
        return str(self.client.get_shard_iterator(StreamArn=self.stream_arn, ShardId=shard_id,
                                                  **kwargs)["ShardIterator"])

    def _shard(self, shard_id: str) -> int:
        iterator = self.iterators.pop(shard_id, None) or self._iterator(shard_id)
        try:
            page = self.client.get_records(ShardIterator=iterator, Limit=self.batch)
        except Exception:  # an expired iterator, a shard gone: start again from the checkpoints
            self._described = float("-inf")
            raise
        records, following = page["Records"], page.get("NextShardIterator")
        if not records:
            if following:
                self.iterators[shard_id] = following
            return 0
        batch = [lambda_record(r, self.stream_arn) for r in records]
        answer = self.handle({"Records": batch})
        failed = {f["itemIdentifier"] for f in answer.get("batchItemFailures", [])}
        done = None
        for r in batch:
            seq = str(r["dynamodb"]["SequenceNumber"])
            if seq in failed:
                break
            done = seq
        if done is not None:
            self.checkpoints[shard_id] = done
        if not failed and following:  # all done: read on from there (else again after the checkpoint)
            self.iterators[shard_id] = following
        return len(batch)

    def run(self, stop: threading.Event, every_s: float = 0.5) -> None:
        while not stop.is_set():
            try:
                self.poll_once()
            except Exception as exc:  # a hiccup (moto busy) must not stop the events
                log.warning("stream poll: %s", exc)
            stop.wait(every_s)


def follow(s: Settings, queue_url: str, emit: Callable[[dict[str, Any]], None], *,
           stop: threading.Event | None = None, wait_s: int = 1, until_empty: bool = False) -> None:
    """Hand (``emit``) each event delivered to the queue as it arrives, until ``stop`` (or, with
    ``until_empty``, until a receive finds nothing)."""
    sqs = _boto("sqs", s)
    stop = stop or threading.Event()
    while not stop.is_set():
        messages = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10,
                                       WaitTimeSeconds=wait_s).get("Messages", [])
        if not messages and until_empty:
            return
        for m in messages:
            emit(json.loads(m["Body"]))
        if messages:
            sqs.delete_message_batch(QueueUrl=queue_url, Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)])
