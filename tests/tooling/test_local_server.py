"""The local server in front of the gateway (sluice_dev.local.api_server), over real sockets."""

from __future__ import annotations

import http.client
import json

import pytest

from sluice_dev.local.api_server import MAX_REQUEST_BYTES, LocalGateway
from tests.unit.test_gateway_fakes import Rig

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("path", ["/v1/queues/echo/jobs/batch", "/v1/queues/echo/jobs"])
def test_a_body_over_10_mib_is_answered_413_to_a_client_that_sends_it_whole(path: str) -> None:
    """The server answered before reading the body and closed: the client's send then broke
    (BrokenPipeError), so a client saw a connection failure, not 413. API Gateway answers 413;
    the local server now reads the body away first."""
    rig = Rig()
    raw = b'{"jobs": [{"payload": "' + b"w" * (MAX_REQUEST_BYTES + 1) + b'"}]}'
    with LocalGateway(rig.gateway) as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        try:
            conn.request("POST", path, body=raw, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            doc = json.loads(response.read())
        finally:
            conn.close()
    assert (response.status, doc["code"]) == (413, "PAYLOAD_TOO_LARGE")
    assert response.getheader("Content-Type") == "application/problem+json"
    assert rig.log.records == []
