"""``openapi.json`` at the repository's root: the REST API's document, for clients in other languages.

``make openapi`` (``python -m sluice_dev.openapi openapi.json``) writes it; it is the document a
deployed gateway serves at ``GET /v1/openapi.json`` (``sluice.gateway.http.app.build_openapi``: the
routes' signatures and the pydantic models of ``sluice.core.wire``), with the schedule routes (a
default deploy keeps schedules) and without any typed queue's payload schema (those follow the
deployment's routes: ``x-sluice-typed-queues``). No adapter is built and nothing is read or written.
Keys sorted and indented, so that the file diffs well and regenerates byte for byte;
tests/tooling/test_openapi_file.py fails when the committed file is stale.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import NoReturn

from sluice.entry.gateway import Gateway

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PATH = ROOT / "openapi.json"


def _never(*_args: object) -> NoReturn:
    raise AssertionError("the OpenAPI document needs no adapter")


def document() -> str:
    """The document's text as committed: sorted keys, two-space indent, one newline at the end."""
    served = Gateway(_never, schedules=_never).openapi_json()
    return json.dumps(json.loads(served), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else DEFAULT_PATH
    text = document()
    if path.exists() and path.read_text(encoding="utf-8") == text:
        print(f"{path}: up to date")
        return 0
    path.write_text(text, encoding="utf-8")
    print(f"{path}: written ({len(text)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
