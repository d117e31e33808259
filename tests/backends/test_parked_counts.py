"""Each queue's parked counter in the queues table's ``state`` map, on a real (moto) DynamoDB
(issue 28: the registry keeps the parking state; ``DynamoQueueDirectory.add_parked``)."""

from __future__ import annotations

import boto3
import pytest

from sluice.backends.dynamodb import tables
from sluice.backends.dynamodb.queues import DynamoQueueDirectory, ParkedState
from sluice.core.bus import EventBus, Parked, Unparked
from sluice.core.errors import SluiceError
from sluice.relay.parked_counts import observe

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


@pytest.fixture
def directory(moto_url: str, unique: str) -> DynamoQueueDirectory:
    client = boto3.client("dynamodb", endpoint_url=moto_url, region_name="us-east-1")
    tables.create_queues_table(client, f"queues-{unique}")
    return DynamoQueueDirectory(client, f"queues-{unique}")


def test_the_counter_adds_in_the_state_map_and_keeps_what_the_registry_wrote(
        directory: DynamoQueueDirectory) -> None:
    directory.put("a")
    directory.put("b")
    directory.client.update_item(  # another owner's field of the state map (say, the budget)
        TableName=directory.table_name, Key={"queue": {"S": "a"}}, UpdateExpression="SET #s.#b = :b",
        ExpressionAttributeNames={"#s": "state", "#b": "max_bytes"},
        ExpressionAttributeValues={":b": {"N": "9"}})
    assert directory.add_parked({"a": 7}, {"a": 1_000}) == {"a": 7}
    assert directory.add_parked({"a": -3, "b": 2}, {"b": 2_000}) == {"a": 4, "b": 2}
    directory.put("a")  # a gateway's write-through again: the state stays
    assert directory.parked_of("a") == ParkedState(4, 1_000)
    assert directory.parked() == {"a": ParkedState(4, 1_000), "b": ParkedState(2, 2_000)}
    item = directory.client.get_item(TableName=directory.table_name, Key={"queue": {"S": "a"}})["Item"]
    assert item["state"]["M"]["max_bytes"] == {"N": "9"}
    directory.add_parked({"b": -5}, {})  # released more than it counted (a re-park): shown as 0
    assert directory.parked_of("b") == ParkedState(0, 2_000)
    assert directory.parked_of("nobody") == ParkedState()


def test_a_queue_without_an_item_keeps_no_counter_and_no_item_is_made(
        directory: DynamoQueueDirectory) -> None:
    assert directory.add_parked({"sluice-internal": 3}, {"sluice-internal": 5}) == {}
    assert directory.client.scan(TableName=directory.table_name)["Items"] == []


def test_the_relay_observer_writes_each_step_and_a_lost_table_is_a_sluice_error(
        directory: DynamoQueueDirectory) -> None:
    directory.put("a")
    bus = EventBus()
    undo = observe(bus, directory)
    bus.emit(Parked(queue="a", partition=0, n=5))
    bus.emit(Parked(queue="a", partition=1, n=2))
    bus.emit(Unparked(queue="a", partition=0, n=5, released=1))
    undo()  # the last step's sums are written
    assert directory.parked_of("a").parked == 6
    with pytest.raises(SluiceError):
        DynamoQueueDirectory(directory.client, "no-such-table").add_parked({"a": 1}, {})


def test_a_queues_sensitive_fields_live_in_the_state_map_beside_the_counters(
        directory: DynamoQueueDirectory) -> None:
    """Issue 32's review: the durable copy of a queue's sensitive setting, ``state.sensitive``."""
    assert directory.sensitive_of("a") == ()
    directory.set_sensitive("a", ["/to", "/card/number"])  # a queue with no item yet: recorded first
    assert directory.names() == ["a"] and directory.sensitive_of("a") == ("/to", "/card/number")
    assert directory.add_parked({"a": 2}, {"a": 5}) == {"a": 2}  # the relay's fields stay apart
    directory.put("a")
    directory.set_sensitive("a", [])
    assert directory.sensitive_of("a") == () and directory.parked_of("a") == ParkedState(2, 5)
    directory.client.update_item(  # what set_sensitive never writes: the whole payload is hidden
        TableName=directory.table_name, Key={"queue": {"S": "a"}}, UpdateExpression="SET #s.#k = :v",
        ExpressionAttributeNames={"#s": "state", "#k": "sensitive"},
        ExpressionAttributeValues={":v": {"L": [{"N": "1"}]}})
    assert directory.sensitive_of("a") == ("",)
    with pytest.raises(SluiceError):
        DynamoQueueDirectory(directory.client, "no-such-table").sensitive_of("a")
