"""How the local moto server frames an answer on a kept-open connection (``keepalive.answer_bytes``)."""

from __future__ import annotations

from sluice_dev.local.keepalive import answer_bytes


def _split(raw: bytes) -> tuple[list[str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    return head.decode("latin-1").split("\r\n"), body


def test_an_answer_is_framed_by_its_length_whatever_the_app_said() -> None:
    lines, body = _split(answer_bytes("200 OK", [("Content-Type", "text/xml"), ("Content-Length", "99"),
                                                 ("Transfer-Encoding", "chunked"), ("Connection", "close")],
                                      b"<a/>", head=False, close=False))
    assert lines == ["HTTP/1.1 200 OK", "Content-Type: text/xml", "Content-Length: 4"] and body == b"<a/>"


def test_a_head_answer_keeps_the_app_s_length_and_sends_no_body() -> None:
    lines, body = _split(answer_bytes("200 OK", [("Content-Length", "1234"), ("ETag", '"e"')], b"ignored",
                                      head=True, close=False))
    assert lines == ["HTTP/1.1 200 OK", 'ETag: "e"', "Content-Length: 1234"] and body == b""


def test_no_body_and_no_length_for_204_and_304() -> None:
    for status in ("204 No Content", "304 Not Modified"):
        lines, body = _split(answer_bytes(status, [], b"", head=False, close=False))
        assert lines == [f"HTTP/1.1 {status}"] and body == b""


def test_a_closing_answer_says_so() -> None:
    lines, _ = _split(answer_bytes("500 Internal Server Error", [], b"x", head=False, close=True))
    assert lines[-1] == "Connection: close" and "Content-Length: 1" in lines
