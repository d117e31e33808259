"""Issue 16: every name pattern is written once (``sluice.core.models``); the copies other tools need
(the OpenAPI document, template.yaml's AllowedPatterns) must say the same thing."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from sluice.core import listing, models
from tests.infra import cfn
from tests.unit.test_gateway_fakes import Rig

PATTERNS = {models.QUEUE_NAME_PATTERN, models.JOB_ID_PATTERN, models.IDEMPOTENCY_KEY_PATTERN,
            models.GROUP_PATTERN, listing.STATE_PATTERN, listing.CURSOR_PATTERN}  # listing: issue 32


def _patterns(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "pattern" and isinstance(value, str):
                yield value
            else:
                yield from _patterns(value)
    elif isinstance(node, list):
        for value in node:
            yield from _patterns(value)


def test_the_compiled_patterns_are_the_anchored_ones() -> None:
    anchored = (f"^{models.QUEUE_NAME_RE.pattern}$", f"^{models.JOB_ID_RE.pattern}$")
    assert anchored == (models.QUEUE_NAME_PATTERN, models.JOB_ID_PATTERN)


def test_the_openapi_document_uses_only_the_patterns_of_models() -> None:
    code, _, doc = Rig().call("GET", "/v1/openapi.json")
    found = set(_patterns(doc))
    assert code == 200 and found == PATTERNS


def test_the_template_allowed_patterns_say_what_models_says() -> None:
    params = cfn.template()["Parameters"]
    queue = models.QUEUE_NAME
    assert params["QueueAllowList"]["AllowedPattern"] == f"^({queue}(,{queue})*)?$"
    assert re.fullmatch(r"[a-z-]+", models.RESERVED_QUEUE_PREFIX)  # no metacharacters: stands as written
    assert params["SafetyNetQueues"]["AllowedPattern"] == f"^(?!{models.RESERVED_QUEUE_PREFIX}){queue}$"


def test_an_idempotency_key_is_any_printable_ascii_but_a_comma_without_spaces_at_its_ends() -> None:
    """Session 39: no comma (an HTTP API joins two headers' values with one; docs/api.md)."""
    key = re.compile(models.IDEMPOTENCY_KEY_PATTERN)
    printable = [chr(c) for c in range(0x21, 0x7F)]
    assert [c for c in printable if not key.match(c)] == [","]
    assert [c for c in printable if not key.match(f"a{c} b")] == [","]
    assert key.match("a" * 128) and not key.match("a" * 129) and not key.match(" a") and not key.match("a ")
