"""Families in the job model (issue 29): what ``test_job_model.py``'s families rules drive.

A parent is a job of its own queue, granted in the jobs table and never in Redis (its own life is
the rest of the model's); it starts children and a continuation through the gateway's real use case
(``Api.enqueue_children``), whose appends go to the model's fake Kafka source, so the relay pushes
them and the model's workers lease and run them like any job. The stream's countdown reads the
moto server's real stream of the jobs table (``StreamTail``) and runs ``StreamCountdown.recount``.
Nothing here replaces a sluice adapter: a fault is a failed append (``FamilyLog.fail``) or failed
child item writes (``half_written``), raised where the adapter's own call would raise.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import boto3

from sluice.backends.dynamodb.families import bucket_key
from sluice.backends.dynamodb.jobs import DynamoJobStore
from sluice.core import ids
from sluice.core.bus import EventBus
from sluice.core.errors import BackendUnavailable
from sluice.core.families import ChildRequest, Countdown, FamilyRequest, ThenRequest
from sluice.core.models import JobSpec
from sluice.gateway.api import Api, Backends, IdMinting
from sluice.streams.countdown import StreamCountdown
from sluice_dev.fakes import FakeSource
from sluice_dev.local.streams import lambda_record

PARENT_QUEUE = "jmparent"
FAULTS = ("none", "none", "append_fails", "half_written")
MAX_FAMILIES = 2  # per example
MAX_CHILDREN = 3  # per family
BUCKET = 2  # slots per bucket of a countdown (issue 30; 128 in production): a family of 3 fills two
PARENT_ENDINGS = ("fail", "dead", "swallowed", "settled")


class FamilyLog:
    """``ports.JobLog`` of the family gateway onto the model's source: children and continuations
    become jobs the model knows (``specs``); ``fail``: Kafka is down, the append raises."""

    def __init__(self, source: FakeSource, specs: dict[str, JobSpec], offsets: dict[str, int]) -> None:
        self.source, self.specs, self.offsets = source, specs, offsets
        self.fail = False
        self.appends: dict[str, int] = {}  # job id -> records appended by the family gateway
        self.again_drained = 0  # records appended again (a job's second and later) the relay has read

    def append(self, specs: Any) -> None:
        if self.fail:
            raise BackendUnavailable("kafka down")
        for spec in specs:
            offset = self.source.append_spec(0, spec)
            self.specs.setdefault(spec.job_id, spec)
            self.offsets.setdefault(spec.job_id, offset)
            self.appends[spec.job_id] = self.appends.get(spec.job_id, 0) + 1


class StreamTail:
    """The jobs table's stream from where it stood when this was made (LATEST), in Lambda's shape."""

    def __init__(self, moto_url: str, db: Any, table: str) -> None:
        self.client = boto3.client("dynamodbstreams", endpoint_url=moto_url, region_name="us-east-1")
        self.arn = db.describe_table(TableName=table)["Table"]["LatestStreamArn"]
        shards = self.client.describe_stream(StreamArn=self.arn)["StreamDescription"]["Shards"]
        self.iterators = [self.client.get_shard_iterator(StreamArn=self.arn, ShardId=s["ShardId"],
                                                         ShardIteratorType="LATEST")["ShardIterator"]
                          for s in shards]

    def read(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for i, iterator in enumerate(self.iterators):
            while iterator:
                page = self.client.get_records(ShardIterator=iterator, Limit=1000)
                iterator = page.get("NextShardIterator") or iterator
                self.iterators[i] = iterator
                if not page["Records"]:
                    break
                out += [lambda_record(r, self.arn) for r in page["Records"]]
        return out


@dataclass
class Family:
    parent: str
    keys: list[str]
    children: dict[str, str]  # key -> child id
    then: str | None
    token: int
    ended: bool = False
    runs: int = 1


@dataclass
class FamilyWorld:
    store: DynamoJobStore
    log: FamilyLog
    api: Api
    tail: StreamTail
    families: list[Family] = field(default_factory=list)
    ever_final: set[str] = field(default_factory=set)  # children seen final (each counts once)
    caught_up: int = 0  # the step after the stream's countdown last caught up

    @classmethod
    def make(cls, store: DynamoJobStore, engine: Any, source: FakeSource, specs: dict[str, JobSpec],
             offsets: dict[str, int], moto_url: str, db: Any, table: str, key: bytes,
             queue: str) -> FamilyWorld:
        cls.clean(db, table, key, queue)
        log = FamilyLog(source, specs, offsets)
        store.families.bucket = BUCKET
        api = Api(Backends(log, store, engine, EventBus(), families=store.families), IdMinting(key))
        return cls(store, log, api, StreamTail(moto_url, db, table))

    @staticmethod
    def parent_id(index: int, key: bytes) -> str:
        """The ``index``-th parent of every example: the same ids in every example (and in each of
        hypothesis's replays of one), so their children sort the same way every time (the rules pick
        jobs by their sorted ids); ``make`` deletes what an earlier example left of them."""
        entropy = hashlib.sha256(f"job-model-parent-{index}".encode()).digest()[:10]
        return ids.mint(1_700_000_000_000, PARENT_QUEUE, key, entropy)

    @staticmethod
    def clean(db: Any, table: str, key: bytes, queue: str) -> None:
        """Delete every item an earlier example wrote under the families' fixed ids."""
        keys: list[str] = []
        for index in range(MAX_FAMILIES):
            parent = FamilyWorld.parent_id(index, key)
            then = ids.derive_keyless(parent, queue, ids.CONTINUATION_PREFIX + "then")
            keys += [parent, then, f"~family~{then}", *(ids.derive_keyless(parent, queue, f"k{i}")
                                                        for i in range(MAX_CHILDREN)),
                     *(bucket_key(then, b) for b in range(-(-MAX_CHILDREN // BUCKET)))]
        db.batch_write_item(RequestItems={table: [{"DeleteRequest": {"Key": {"job_id": {"S": k}}}}
                                                  for k in keys]})

    @contextmanager
    def faulty(self, fault: str, written: str) -> Iterator[None]:
        """``append_fails``: Kafka refuses the append; ``half_written``: the children's item writes
        fail but ``written``'s (a throttled table)."""
        items = self.store.families.items
        if fault == "append_fails":
            self.log.fail = True
        elif fault == "half_written":
            real = items.update

            def update(operation: str, request: dict[str, Any]) -> tuple[dict[str, Any] | None, bool]:
                if operation == "record_children" and request["Key"]["job_id"]["S"] != written:
                    raise BackendUnavailable("throttled")
                return real(operation, request)

            items.update = update  # type: ignore[method-assign]
        try:
            yield
        finally:
            self.log.fail = False
            items.__dict__.pop("update", None)

    def start(self, key: bytes, queue: str, n: int, then: bool) -> Family:
        parent = self.parent_id(len(self.families), key)
        keys = [f"k{i}" for i in range(n)]
        family = Family(parent=parent, keys=keys,
                        children={k: ids.derive_keyless(parent, queue, k) for k in keys},
                        then=(ids.derive_keyless(parent, queue, ids.CONTINUATION_PREFIX + "then")
                              if then else None),
                        token=self.store.grant(parent, PARENT_QUEUE, "parent-1"))
        self.families.append(family)
        return family

    def request(self, family: Family, keys: list[str], queue: str, fault: str) -> bool:
        """The parent's ``ctx.enqueue_many`` of ``keys`` (in that order): True if it went through."""
        request = FamilyRequest(parent_id=family.parent, token=family.token,
                                jobs=[ChildRequest(queue=queue, payload={}, key=k) for k in keys],
                                then=ThenRequest(queue=queue, payload={}) if family.then else None)
        try:
            with self.faulty(fault, family.children[keys[0]]):
                self.api.enqueue_children(request)
        except BackendUnavailable:
            return False
        return True

    def end_parent(self, family: Family, how: str) -> None:
        """The parent ends: its handler raised ``Fail`` (fail), its last attempt failed (dead), it
        swallowed the error and returned (swallowed), or the relay settled it dead (settled)."""
        from sluice.core.models import JobState, SettleEntry

        family.ended = True
        if how in ("fail", "dead"):
            self.store.record_failure(family.parent, family.token, "gave up",
                                      "failed" if how == "fail" else "dead")
        elif how == "swallowed":
            self.store.write_result(family.parent, family.token, {"ok": True})
        else:
            self.store.settle_ended(SettleEntry(job_id=family.parent, queue=PARENT_QUEUE,
                                                status=JobState.DEAD, ended_at_ms=1,
                                                last_error="attempts used up"))

    def catch_up(self) -> int:
        """The countdown function reads the stream until it has caught up: records read."""
        countdown = StreamCountdown(Countdown(self.store.families, self.api.release_continuation))
        read = 0
        for _ in range(5):
            records = self.tail.read()
            if not records:
                break
            read += len(records)
            assert countdown.recount(records) == [], "a count or release failed"
        return read
