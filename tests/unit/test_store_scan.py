"""``store.scan.scan_all``: every page of a Scan, and botocore errors translated."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from sluice.backends.dynamodb.scan import scan_all
from sluice.core.errors import BackendUnavailable, SluiceError, StoreError


class PagedClient:
    """A DynamoDB client whose Scan answers ``pages`` in order, then fails with ``error``."""

    def __init__(self, pages: list[dict[str, Any]], error: Exception | None = None) -> None:
        self.pages, self.error = pages, error
        self.calls: list[dict[str, Any]] = []

    def scan(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        if len(self.calls) > len(self.pages):
            assert self.error is not None
            raise self.error
        return self.pages[len(self.calls) - 1]


def item(n: int) -> dict[str, Any]:
    return {"k": {"S": str(n)}}


def test_every_page_is_read_in_order_each_from_the_last_key() -> None:
    client = PagedClient([{"Items": [item(1), item(2)], "LastEvaluatedKey": item(2)},
                          {"Items": [], "LastEvaluatedKey": item(2)},  # an empty page is not the end
                          {"Items": [item(3)]}])
    assert scan_all(client, "t") == [item(1), item(2), item(3)]
    assert client.calls == [{"TableName": "t", "ConsistentRead": True},
                            {"TableName": "t", "ConsistentRead": True, "ExclusiveStartKey": item(2)},
                            {"TableName": "t", "ConsistentRead": True, "ExclusiveStartKey": item(2)}]


def test_an_empty_table_is_one_call() -> None:
    client = PagedClient([{"Count": 0}])
    assert scan_all(client, "t") == []
    assert len(client.calls) == 1


@pytest.mark.parametrize(("error", "raised"), [
    (ClientError({"Error": {"Code": "ResourceNotFoundException", "Message": "gone"}}, "Scan"), StoreError),
    (ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow"}}, "Scan"), BackendUnavailable),
    (EndpointConnectionError(endpoint_url="http://127.0.0.1:1"), BackendUnavailable),
])
def test_a_failing_page_raises_a_sluice_error_naming_the_scan(error: Exception, raised: type) -> None:
    client = PagedClient([{"Items": [item(1)], "LastEvaluatedKey": item(1)}], error)
    with pytest.raises(SluiceError, match="scan t") as caught:
        scan_all(client, "t")
    assert type(caught.value) is raised
    assert caught.value.__cause__ is error
