"""Strict JSON body parsing for the gateway: refuse hostile bodies before they reach a model.

Python's ``json`` module is lenient in ways that hurt a queue whose records are read
later by other languages: it accepts ``NaN`` and ``Infinity``, keeps the last of two
duplicate keys, turns a 5,000-digit integer into a bignum, lets lone surrogates
through, and on deep nesting raises ``RecursionError`` (not ``ValueError``), which
would surface as a 500. Every refusal here is an ``InvalidInput`` subclass carrying
the HTTP status the problem document should have, and nothing has been written yet.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Mapping
from typing import Any

from sluice.core.errors import BadBody, PayloadTooLarge, UnsupportedMediaType

MAX_DEPTH = 64
MAX_INT_DIGITS = 38  # DynamoDB numbers carry 38 significant digits; beyond that they are not numbers

# The depth scan jumps between the few characters that matter, so it stays linear even
# on hostile input (a single regex for "a whole string" backtracks quadratically on
# '"\\"\\"\\"...' without a closing quote).
_OUTSIDE = re.compile(r'["\[\]{}]')
_INSIDE = re.compile(r'["\\]')


def header(headers: Mapping[str, str] | None, name: str) -> str | None:
    """Case-insensitive header lookup (API Gateway passes headers as the client sent them)."""
    if not headers:
        return None
    wanted = name.lower()
    for key, value in headers.items():
        if key.lower() == wanted:
            return value
    return None


def check_content_type(value: str | None) -> None:
    """Only ``application/json``, optionally with ``charset=utf-8``; anything else is 415."""
    if value is None:
        raise UnsupportedMediaType("missing Content-Type: send application/json")
    media, _, params = value.partition(";")
    if media.strip().lower() != "application/json":
        raise UnsupportedMediaType(f"unsupported Content-Type {value!r}: send application/json")
    for param in filter(None, (p.strip() for p in params.split(";"))):
        name, _, arg = param.partition("=")
        if name.strip().lower() == "charset" and arg.strip().strip('"').lower() not in ("utf-8", "utf8"):
            raise UnsupportedMediaType(f"unsupported charset in {value!r}: JSON bodies are UTF-8")


def decode_body(body: str | None, is_base64: bool, max_bytes: int) -> str:
    """The event body as text, refusing invalid UTF-8, lone surrogates and oversize bodies."""
    if body is None or body == "":
        raise BadBody("empty body: send a JSON object")
    if is_base64:
        # base64 is 4/3 of the raw size; refuse before decoding a huge string.
        if len(body) > (max_bytes + 2) // 3 * 4 + 4:
            raise PayloadTooLarge(f"request body exceeds {max_bytes} bytes")
        try:
            raw = base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise BadBody("body is marked base64 but is not valid base64") from exc
        if len(raw) > max_bytes:
            raise PayloadTooLarge(f"request body exceeds {max_bytes} bytes")
        try:
            return raw.decode("utf-8")  # strict: rejects encoded surrogates and overlongs too
        except UnicodeDecodeError as exc:
            raise BadBody(f"body is not valid UTF-8 (byte offset {exc.start})") from exc
    if len(body) > max_bytes:  # characters <= bytes, so this is a cheap first cut
        raise PayloadTooLarge(f"request body exceeds {max_bytes} bytes")
    try:
        size = len(body.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise BadBody(f"body contains a lone surrogate at offset {exc.start}") from exc
    if size > max_bytes:
        raise PayloadTooLarge(f"request body exceeds {max_bytes} bytes")
    return body


def check_depth(text: str, max_depth: int = MAX_DEPTH) -> None:
    """Refuse nesting deeper than ``max_depth`` without recursing, before the parser does."""
    depth = 0
    pos = 0
    while (match := _OUTSIDE.search(text, pos)) is not None:
        token, pos = match.group(), match.end()
        if token == '"':
            while (inner := _INSIDE.search(text, pos)) is not None:
                pos = inner.end() + (1 if inner.group() == "\\" else 0)
                if inner.group() == '"':
                    break
            else:
                return  # unterminated string: the parser will refuse it
        elif token in "[{":
            depth += 1
            if depth > max_depth:
                raise BadBody(f"JSON nested deeper than {max_depth} levels (at offset {match.start()})")
        else:
            depth -= 1


def _no_constants(name: str) -> Any:
    raise BadBody(f"{name} is not JSON: numbers must be finite")


def _bounded_int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise BadBody(f"integer with more than {MAX_INT_DIGITS} digits")
    return int(digits)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise BadBody(f"number {text[:40]} overflows a double")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise BadBody(f"duplicate key {key[:64]!r} in a JSON object")
        result[key] = value
    return result


def _has_lone_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def strict_loads(text: str, *, max_depth: int = MAX_DEPTH) -> Any:
    """Parse one JSON document, refusing everything the module docstring lists."""
    check_depth(text, max_depth)
    try:
        value = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constants,
                           parse_int=_bounded_int, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise BadBody(f"body is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from exc
    except RecursionError as exc:  # belt and braces: check_depth should make this unreachable
        raise BadBody("JSON nested too deeply") from exc
    # Escaped lone surrogates ("\ud800") decode to str that cannot be encoded as UTF-8 again.
    if "\\u" in text and _has_lone_surrogate(json.dumps(value, ensure_ascii=False)):
        raise BadBody("JSON string contains a lone surrogate (\\uD800-\\uDFFF without its pair)")
    return value


def checked_text(body: str | None, *, is_base64: bool, content_type: str | None, max_bytes: int) -> str:
    """The checks of a request body that need the request (media type, size, base64, UTF-8): the
    text then goes to ``strict_loads`` (the gateway's resolver parses with it)."""
    check_content_type(content_type)
    text = decode_body(body, is_base64, max_bytes)
    if text.lstrip(" \t\n\r").startswith("["):
        # Every body the gateway takes is one object. The router, as Powertools' resolver did, read an
        # array as its first element: `[job, job, job]` was 202 for the first job and the rest were
        # dropped unanswered (session 36's walk as a hostile caller).
        raise BadBody("body is a JSON array: send one JSON object (many jobs go to .../jobs/batch as "
                      '{"jobs": [...]})')
    return text


def parse_body(body: str | None, *, is_base64: bool, content_type: str | None, max_bytes: int,
               max_depth: int = MAX_DEPTH) -> Any:
    """Everything the gateway does to a request body before model validation."""
    text = checked_text(body, is_base64=is_base64, content_type=content_type, max_bytes=max_bytes)
    return strict_loads(text, max_depth=max_depth)
