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


def test_the_http_api_payload_reaches_the_gateway_as_20_events_and_back() -> None:
    """`sluice dev --profile small` serves the API as an HTTP API: 2.0 events, the caller under
    requestContext.authorizer.iam (issue 33, item 2)."""
    from sluice_dev.local.api_server import LOCAL_CALLER_HEADER

    rig = Rig()
    seen: list[dict[str, object]] = []

    def handler(event: dict[str, object], context: object) -> dict[str, object]:
        seen.append(event)
        return rig.gateway(event, context)  # type: ignore[arg-type]

    caller = "arn:aws:sts::123456789012:assumed-role/web/1"
    with LocalGateway(handler, payload="2.0") as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        try:
            conn.request("POST", "/v1/queues/echo/jobs?x=1&x=2", body=json.dumps({"payload": {"n": 1}}),
                         headers={"Content-Type": "application/json", "Idempotency-Key": "k-1",
                                  LOCAL_CALLER_HEADER: caller})
            response = conn.getresponse()
            doc = json.loads(response.read())
        finally:
            conn.close()
    assert response.status == 202 and response.getheader("Location") == f"/v1/jobs/{doc['job_id']}"
    [event] = seen
    assert (event["version"], event["rawPath"], event["rawQueryString"]) == \
        ("2.0", "/v1/queues/echo/jobs", "x=1&x=2")
    assert event["requestContext"]["authorizer"]["iam"]["userArn"] == caller  # type: ignore[index]
    assert "identity" not in event["requestContext"]  # type: ignore[operator]
    assert [r.idempotency_key for r in rig.log.records] == [f"{caller}|k-1"]


def test_an_unknown_payload_version_is_refused() -> None:
    with pytest.raises(ValueError, match=r"3\.0"):
        LocalGateway(Rig().gateway, payload="3.0")


def test_a_web_page_cannot_send_the_local_caller_header_to_sluice_dev() -> None:
    """Hostile-caller review (session 35): any web page a developer opens may send requests to
    127.0.0.1:<port>. A cross-origin request carrying `X-Sluice-Local-Caller` needs a CORS
    preflight first, and the local server grants none (no Access-Control-Allow-*), so the browser
    never sends it; what a page may send without one (a form POST) names no caller: 403, nothing
    written."""
    from sluice_dev.local.api_server import LOCAL_CALLER_HEADER
    from tests.unit.test_gateway_admin import Q
    from tests.unit.test_gateway_admin import Rig as AdminRig

    rig = AdminRig()
    with LocalGateway(rig.gateway) as server:
        def send(method: str, path: str, headers: dict[str, str],
                 body: str | None = None) -> http.client.HTTPResponse:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
            try:
                conn.request(method, path, body=body, headers=headers)
                response = conn.getresponse()
                response.read()
                return response
            finally:
                conn.close()

        origin = {"Origin": "https://evil.example"}
        for path in (Q + "/pause", Q + "/sensitive", Q + "/jobs", "/v1/queues/emails/jobs"):
            pre = send("OPTIONS", path, {**origin, "Access-Control-Request-Method": "POST",
                                         "Access-Control-Request-Headers": LOCAL_CALLER_HEADER.lower()})
            granted = [h for h, _ in pre.getheaders() if h.lower().startswith("access-control-allow")]
            assert pre.status >= 400 and granted == [], (path, pre.status, granted)
        form = send("POST", Q + "/pause", {**origin, "Content-Type": "application/x-www-form-urlencoded"},
                    "x=1")
        assert form.status == 403
    assert rig.untouched()


@pytest.mark.parametrize("length", ["abc", "-5", "1e3", "5, 5", "0x10", "\uff15"])
def test_a_content_length_that_is_not_a_number_of_bytes_is_400_and_reaches_nothing(length: str) -> None:
    """Session 36's walk as a hostile caller: a malformed Content-Length made the local server raise
    (a traceback in sluice dev's log) and hang up with no answer; API Gateway answers 400."""
    import socket

    rig = Rig()
    request = (f"POST /v1/queues/echo/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               f"Content-Length: {length}\r\n\r\n").encode() + b'{"payload": 1}'
    with LocalGateway(rig.gateway) as server, \
            socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(request)
        raw = b""
        while chunk := sock.recv(65536):
            raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 "), raw
    assert json.loads(body)["code"] == "BAD_REQUEST"
    assert rig.log.records == []
