"""The stream images the completion unit tests read (``tests/events/dynamodb_stream_family.json``) are
the ones the real store writes (issue 29, item 5: a hand-built image named the parent ``parent``
while the store writes ``parent_id``, so every child's event said ``parent: null`` and the unit
test passed).

The jobs table and its stream are in-process moto (no sockets); the writes are the store's own
(``DynamoJobStore``, the gateway's family use case, ``StreamCountdown``), on a fixed clock and
fixed ids, so the records are the same on every run. This test records them again and compares:
a store that changes what it writes fails here until the file is recorded again
(``SLUICE_RECORD_IMAGES=1`` writes it).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from sluice.backends.dynamodb import tables
from sluice.backends.dynamodb.jobs import DynamoJobStore
from sluice.core import ids
from sluice.core.bus import EventBus
from sluice.core.errors import BackendUnavailable
from sluice.core.families import ChildRequest, Countdown, FamilyRequest, ThenRequest
from sluice.gateway.api import Api, Backends, IdMinting
from sluice.streams.completion.model import final_image
from sluice.streams.countdown import StreamCountdown
from sluice_dev.fakes import FakeLog, FakeQueue
from tests.backends.inprocess.test_flows_stream import stream
from tests.unit.test_gateway_fakes import KEY

IMAGES = Path(__file__).parents[2] / "events" / "dynamodb_stream_family.json"
NOW_MS = 1_764_547_200_000
# What a stream record keeps that differs from run to run (moto's sequence, times, table name).
_VOLATILE = ("eventID", "eventSourceARN")
_VOLATILE_DATA = ("SequenceNumber", "ApproximateCreationDateTime", "SizeBytes")


@pytest.fixture
def store() -> Iterator[DynamoJobStore]:
    with mock_aws():
        db = boto3.client("dynamodb", region_name="us-east-1")
        name = f"jobs-{uuid.uuid4().hex[:8]}"
        tables.create_jobs_table(db, name)
        yield DynamoJobStore(db, name, now_ms=lambda: NOW_MS)


def _stable(record: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in record.items() if k not in _VOLATILE}
    out["dynamodb"] = {k: v for k, v in record["dynamodb"].items() if k not in _VOLATILE_DATA}
    return out


def record_images(store: DynamoJobStore) -> dict[str, dict[str, Any]]:
    """A parent starts a child and a continuation's family whose append fails; the child succeeds,
    the parent succeeds (it swallowed the error), and the stream's countdown ends the pending
    children dead. Each final transition's record, by name."""
    log = FakeLog()
    api = Api(Backends(log, store, FakeQueue(), EventBus(), families=store.families), IdMinting(KEY),
              clock=lambda: NOW_MS)
    parent = ids.mint(NOW_MS - 1_000, "fanout", KEY, entropy=b"\x01" * 10)
    token = store.grant(parent, "fanout", "w1")
    (child,) = api.enqueue_children(FamilyRequest(
        parent_id=parent, token=token, jobs=[ChildRequest(queue="work", payload=1, key="one")])).job_ids
    log.fail = BackendUnavailable("kafka down")
    with pytest.raises(BackendUnavailable):
        api.enqueue_children(FamilyRequest(
            parent_id=parent, token=token, jobs=[ChildRequest(queue="work", payload=2, key="lost")],
            then=ThenRequest(queue="report", payload=0)))
    store.write_result(child, store.grant(child, "work", "w2"), {"pages": 4})
    store.write_result(parent, token, {"children": 2})
    StreamCountdown(Countdown(store.families, api.release_continuation)).recount(stream_of(store))
    lost = ids.derive_keyless(parent, "work", "lost")
    names = {child: "child_succeeded", parent: "parent_succeeded", lost: "child_abandoned"}
    out: dict[str, dict[str, Any]] = {}
    for record in stream_of(store):
        job = record["dynamodb"]["Keys"]["job_id"]["S"]
        if final_image(record) is not None and job in names:
            out[names[job]] = _stable(record)
    return out


def stream_of(store: DynamoJobStore) -> list[dict[str, Any]]:
    class _Rig:  # what ``test_flows_stream.stream`` reads of its rig
        def __init__(self, jobs: DynamoJobStore) -> None:
            self.store = jobs

    return stream(_Rig(store))  # type: ignore[arg-type]


def test_the_unit_tests_images_are_what_the_store_writes(store: DynamoJobStore) -> None:
    got = record_images(store)
    assert set(got) == {"child_succeeded", "parent_succeeded", "child_abandoned"}
    if os.environ.get("SLUICE_RECORD_IMAGES") == "1":
        IMAGES.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    assert got == json.loads(IMAGES.read_text()), \
        f"the store writes other images than {IMAGES.name}: record it again (SLUICE_RECORD_IMAGES=1)"
    assert got["child_succeeded"]["dynamodb"]["NewImage"]["parent_id"]["S"] == \
        got["parent_succeeded"]["dynamodb"]["Keys"]["job_id"]["S"]
