"""The local moto server keeps a connection open between requests (``sluice_dev.local.keepalive``).

Before, every answer said ``Connection: close``, and each AWS call of the local stack paid a new
connection and a new server thread. The first two tests fail on that server (the connection is
gone after the first answer); the third checks a HEAD answer's framing, which a kept connection
depends on (a body sent after it would be read as the next answer)."""

from __future__ import annotations

import http.client
import socket
import uuid
from typing import Any

import boto3
import pytest

from sluice_dev.local import servers

pytestmark = pytest.mark.timeout(60)

AUTH = ("AWS4-HMAC-SHA256 Credential=x/20200101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, "
        "Signature=x")
LIST_TABLES = {"X-Amz-Target": "DynamoDB_20120810.ListTables", "Content-Type": "application/x-amz-json-1.0",
               "Authorization": AUTH}


def _request(body: bytes, *, chunked: bool = False, close: bool = False) -> bytes:
    head = [b"POST / HTTP/1.1", b"Host: 127.0.0.1"]
    head += [f"{k}: {v}".encode() for k, v in LIST_TABLES.items()]
    if close:
        head.append(b"Connection: close")
    if chunked:
        head.append(b"Transfer-Encoding: chunked")
        parts = [part for part in (body[:1], body[1:]) if part]
        framed = b"".join(f"{len(part):x}\r\n".encode() + part + b"\r\n" for part in parts)
        return b"\r\n".join(head) + b"\r\n\r\n" + framed + b"0\r\n\r\n"
    head.append(f"Content-Length: {len(body)}".encode())
    return b"\r\n".join(head) + b"\r\n\r\n" + body


def _answers(sock: socket.socket, n: int) -> list[tuple[int, dict[str, str], bytes]]:
    """``n`` answers read back to back from ``sock``: status, headers (lower-cased), body."""
    reader, out = sock.makefile("rb"), []
    for _ in range(n):
        status = int(reader.readline().split()[1])
        headers = {}
        while (line := reader.readline().decode("latin-1").strip()):
            name, _, value = line.partition(":")
            headers[name.lower()] = value.strip()
        out.append((status, headers, reader.read(int(headers.get("content-length", 0)))))
    return out


def test_requests_on_one_connection_are_each_answered_and_it_stays_open(moto_server: servers.Server) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", moto_server.port, timeout=10)
    sock = None
    for _ in range(3):
        conn.request("POST", "/", body=b"{}", headers=LIST_TABLES)
        answer = conn.getresponse()
        assert answer.status == 200 and b"TableNames" in answer.read()
        assert answer.getheader("Connection") is None and conn.sock is not None
        assert sock is None or conn.sock is sock  # not reconnected
        sock = conn.sock
    conn.close()


def test_pipelined_requests_with_bodies_and_chunks_end_where_each_body_ends(
        moto_server: servers.Server) -> None:
    """Three requests sent at once, before any answer: a body by its length, a chunked one, and one
    asking to close. Each is answered, in order, and then the server closes."""
    with socket.create_connection(("127.0.0.1", moto_server.port), timeout=10) as sock:
        sock.sendall(_request(b'{"Limit": 5}') + _request(b'{"Limit": 7}', chunked=True)
                     + _request(b"{}", close=True))
        answers = _answers(sock, 3)
        assert [status for status, _, _ in answers] == [200, 200, 200]
        assert all(b"TableNames" in body for _, _, body in answers)
        assert answers[2][1].get("connection") == "close" and "connection" not in answers[0][1]
        assert sock.recv(1) == b""  # closed, as asked


def test_a_head_answer_gives_the_object_s_length_and_no_body(moto_url: str) -> None:
    s3: Any = boto3.client("s3", endpoint_url=moto_url, region_name="us-east-1", aws_access_key_id="x",
                           aws_secret_access_key="x")
    bucket = f"keep-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="k", Body=b"x" * 1234)
    conn = http.client.HTTPConnection("127.0.0.1", int(moto_url.rsplit(":", 1)[1]), timeout=10)
    signed = {"Authorization": AUTH.replace("/dynamodb/", "/s3/")}
    conn.request("HEAD", f"/{bucket}/k", headers=signed)
    head = conn.getresponse()
    assert head.status == 200 and head.getheader("Content-Length") == "1234" and head.read() == b""
    conn.request("GET", f"/{bucket}/k", headers=signed)  # the next answer on the same connection is whole
    got = conn.getresponse()
    assert got.status == 200 and got.read() == b"x" * 1234
    conn.close()
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"x" * 1234


@pytest.mark.parametrize("length", ["-5", "ten", "1e3"])
def test_a_body_whose_length_is_not_a_count_is_refused_and_the_connection_closed(
        moto_server: servers.Server, length: str) -> None:
    """Where such a body ends, and so where the next request starts, is unknown: a 400, then the
    server closes, rather than read the body's bytes as a request."""
    with socket.create_connection(("127.0.0.1", moto_server.port), timeout=10) as sock:
        raw = _request(b"{}").replace(b"Content-Length: 2", f"Content-Length: {length}".encode())
        sock.sendall(raw + _request(b"{}"))
        [(status, headers, body)] = _answers(sock, 1)
        assert status == 400 and headers.get("connection") == "close" and b"Content-Length" in body
        assert sock.recv(1) == b""
