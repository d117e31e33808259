"""The strict body parser on its own: each refusal, and that legal JSON still parses."""

from __future__ import annotations

import base64
import json
import time

import pytest

from sluice.core.errors import PayloadTooLarge
from sluice.gateway.http.jsonguard import (
    MAX_DEPTH,
    BadBody,
    UnsupportedMediaType,
    check_content_type,
    decode_body,
    parse_body,
    strict_loads,
)


def nested(depth: int, open_: str = "[", close: str = "]") -> str:
    return open_ * depth + close * depth


def test_legal_json_parses_unchanged() -> None:
    text = '{"a": [1, -2, 3.5, "x\\"[{", null, true, {"b": "\\ud83d\\ude00"}], "big": 12345678901234567890}'
    assert strict_loads(text) == json.loads(text)


@pytest.mark.parametrize("depth", [1, MAX_DEPTH])
def test_depth_up_to_the_limit_is_accepted(depth: int) -> None:
    assert strict_loads(nested(depth)) is not None


@pytest.mark.parametrize("text", [nested(MAX_DEPTH + 1), '{"a":' * 65 + "1" + "}" * 65,
                                  nested(200_000)])
def test_depth_over_the_limit_is_refused_without_recursing(text: str) -> None:
    with pytest.raises(BadBody, match="nested deeper than 64"):
        strict_loads(text)


def test_deep_nesting_is_refused_even_when_unbalanced() -> None:
    with pytest.raises(BadBody, match="nested deeper"):
        strict_loads("[" * 100_000)  # json.loads would raise RecursionError here


def test_brackets_inside_strings_do_not_count() -> None:
    inner = '"' + "[{" * 500 + '\\"]' + '"'
    assert strict_loads(f"[{inner}]") == [json.loads(inner)]


def test_depth_scan_is_linear_on_unterminated_escapes() -> None:
    hostile = '"' + '\\"' * 150_000  # a single "string" regex would backtrack quadratically
    started = time.perf_counter()
    with pytest.raises(BadBody):
        strict_loads(hostile)
    assert time.perf_counter() - started < 2.0


@pytest.mark.parametrize("text", ['{"a": NaN}', '[Infinity]', '{"x": -Infinity}'])
def test_non_finite_constants_are_refused(text: str) -> None:
    with pytest.raises(BadBody, match="finite"):
        strict_loads(text)


def test_float_overflow_is_refused() -> None:
    with pytest.raises(BadBody, match="overflows"):
        strict_loads("[1e400]")


@pytest.mark.parametrize("digits", ["9" * 38, "-" + "9" * 38])
def test_38_digit_integers_are_accepted(digits: str) -> None:
    assert strict_loads(f"[{digits}]") == [int(digits)]


@pytest.mark.parametrize("digits", ["1" + "0" * 38, "-" + "9" * 39, "7" * 5000])
def test_longer_integers_are_refused(digits: str) -> None:
    with pytest.raises(BadBody, match="38 digits"):
        strict_loads(f'{{"n": {digits}}}')


@pytest.mark.parametrize("text", ['{"a": 1, "a": 2}', '{"x": {"b": 1, "b": 1}}', '[{"k": 1, "k": null}]'])
def test_duplicate_keys_are_refused_at_any_level(text: str) -> None:
    with pytest.raises(BadBody, match="duplicate key"):
        strict_loads(text)


@pytest.mark.parametrize("text", ['"\\ud800"', '{"k": "a\\udfffb"}', '{"\\udc00": 1}', '["\\ud83d x"]'])
def test_escaped_lone_surrogates_are_refused(text: str) -> None:
    with pytest.raises(BadBody, match="surrogate"):
        strict_loads(text)


@pytest.mark.parametrize("text", ["", "   ", "{", "{'a': 1}", "[1,]", "\ufeff{}", "null null", "tru"])
def test_not_json_is_refused(text: str) -> None:
    with pytest.raises(BadBody):
        strict_loads(text)


@pytest.mark.parametrize("raw", [b"\xff\xfe{}", b'{"a": "\xc3"}', b'{"a": "\xed\xa0\x80"}', b'"\xc0\xaf"'])
def test_invalid_utf8_is_refused(raw: bytes) -> None:
    with pytest.raises(BadBody, match="UTF-8"):
        decode_body(base64.b64encode(raw).decode(), True, 1024)


def test_raw_lone_surrogate_in_a_text_body_is_refused() -> None:
    with pytest.raises(BadBody, match="surrogate"):
        decode_body('{"a": "\ud800"}', False, 1024)


def test_invalid_base64_is_refused() -> None:
    with pytest.raises(BadBody, match="base64"):
        decode_body("not base64!", True, 1024)


@pytest.mark.parametrize("body", [None, ""])
def test_empty_body_is_refused(body: str | None) -> None:
    with pytest.raises(BadBody, match="empty"):
        decode_body(body, False, 1024)


def test_size_limit_counts_utf8_bytes() -> None:
    assert decode_body("é" * 512, False, 1024) == "é" * 512  # exactly 1024 bytes
    with pytest.raises(PayloadTooLarge):
        decode_body("é" * 513, False, 1024)
    with pytest.raises(PayloadTooLarge):
        decode_body(base64.b64encode(b"x" * 1025).decode(), True, 1024)
    assert decode_body(base64.b64encode(b"x" * 1024).decode(), True, 1024) == "x" * 1024


@pytest.mark.parametrize("value", ["application/json", "application/json; charset=utf-8",
                                   "Application/JSON;charset=UTF-8", 'application/json; charset="utf8"'])
def test_json_content_types_are_accepted(value: str) -> None:
    check_content_type(value)


@pytest.mark.parametrize("value", [None, "", "text/plain", "application/x-www-form-urlencoded",
                                   "multipart/form-data; boundary=x", "application/json; charset=latin-1",
                                   "application/jsonx", "application/problem+json"])
def test_other_content_types_are_refused(value: str | None) -> None:
    with pytest.raises(UnsupportedMediaType):
        check_content_type(value)


def test_parse_body_checks_the_content_type_first() -> None:
    with pytest.raises(UnsupportedMediaType):
        parse_body("{not json", is_base64=False, content_type="text/plain", max_bytes=100)
    assert parse_body('{"a": 1}', is_base64=False, content_type="application/json", max_bytes=100) == {"a": 1}
