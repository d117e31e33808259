"""The internal function's load of a worker's scripts (docs/security.md, "Who loads a worker's scripts").

A worker's Redis user may not SCRIPT LOAD (a team could load ``while true do end`` and stall the
shared Redis), so after a NOSCRIPT (a restarted or failed-over Redis) its connection asks the
internal function: ``{"sluice_internal": "load_scripts", "scripts": {"<name>.lua": "<text>", ...}}``.
The internal function loads a text only if its SHA-1 is on the allow-list of every worker script
text Sluice has shipped (``sluice/backends/redis/lua/worker_scripts.sha1``, append-only), under the
same name: a team on an older layer gets its exact scripts, one on a newer layer than Sluice's stack
is refused (ScriptNotAllowed: deploy Sluice's stack first), and no other Lua is loaded (a second
preimage of SHA-1 is not feasible). Pure: the check here, the loads behind ``ScriptLoader``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any, Final

from sluice.core.errors import InvalidInput, ScriptNotAllowed
from sluice.core.ports import ScriptLoader
from sluice.core.wire import INTERNAL

LOAD_SCRIPTS: Final = "load_scripts"  # the internal call's ``sluice_internal`` value
MAX_SCRIPTS: Final = 16  # texts per call (a worker has 7 scripts)
MAX_SCRIPT_BYTES: Final = 128 * 1024  # per text (lease.lua, the largest, is about 32 KB)
_NAME = re.compile(r"^[a-z_]{1,40}\.lua$")
_SHA1 = re.compile(r"^[0-9a-f]{40}$")


def is_load_scripts(event: Mapping[str, Any]) -> bool:
    return event.get(INTERNAL) == LOAD_SCRIPTS


def request(texts: Mapping[str, str]) -> dict[str, Any]:
    """The internal call that loads ``texts`` (by name)."""
    return {INTERNAL: LOAD_SCRIPTS, "scripts": dict(texts)}


def sha1(text: str) -> str:
    """The SHA-1 Redis names the script ``text`` by (EVALSHA's)."""
    return hashlib.sha1(text.encode("utf-8"), usedforsecurity=False).hexdigest()


def parse_allow_list(text: str) -> dict[str, str]:
    """``worker_scripts.sha1``'s lines (``<sha1> <name>``; ``#`` comments, blank lines) as sha1 -> name.

    ValueError on a malformed line or a SHA-1 listed twice: the file is ours, so that is a bug."""
    out: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2 or not _SHA1.fullmatch(parts[0]) or not _NAME.fullmatch(parts[1]):
            raise ValueError(f"worker_scripts.sha1 line {number}: want '<sha1> <name>.lua', got {line!r}")
        if parts[0] in out:
            raise ValueError(f"worker_scripts.sha1 line {number}: {parts[0]} is listed twice")
        out[parts[0]] = parts[1]
    return out


def checked(event: Mapping[str, Any], allowed: Mapping[str, str]) -> dict[str, str]:
    """The texts (by name) of a load call, each on ``allowed`` (sha1 -> name) under its name.

    InvalidInput for a malformed call (no ``scripts`` object, other keys, no texts or more than
    ``MAX_SCRIPTS``, a name no shipped worker script has, a text not a string or over
    ``MAX_SCRIPT_BYTES``); ScriptNotAllowed for a text that is not a shipped one. Every text is
    checked before any is loaded."""
    extra = sorted(str(k) for k in event if k not in (INTERNAL, "scripts"))
    if extra:
        raise InvalidInput(f"a load_scripts call has only 'scripts'; got {', '.join(extra)[:200]}")
    scripts = event.get("scripts")
    if not isinstance(scripts, Mapping) or not scripts:
        raise InvalidInput("a load_scripts call needs 'scripts': an object of script name -> Lua text")
    if len(scripts) > MAX_SCRIPTS:
        raise InvalidInput(f"a load_scripts call takes at most {MAX_SCRIPTS} scripts, got {len(scripts)}")
    names = set(allowed.values())
    out: dict[str, str] = {}
    for name, text in scripts.items():
        if not isinstance(name, str) or name not in names:
            raise InvalidInput(f"{str(name)[:60]!r} is not a worker script's name "
                               f"({', '.join(sorted(names))})")
        if not isinstance(text, str):
            raise InvalidInput(f"the text of {name} is a {type(text).__name__}, not a string")
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > MAX_SCRIPT_BYTES:
            raise InvalidInput(f"the text of {name} is {size} bytes, over {MAX_SCRIPT_BYTES}")
        if allowed.get(sha1_or_none(text) or "") != name:
            raise ScriptNotAllowed(
                f"{name} (sha1 {sha1_or_none(text)}) is not a worker script Sluice has shipped (a worker "
                "on a newer layer than Sluice's stack?): deploy Sluice's stack first (docs/deploy.md, "
                "Upgrade order)", script=name)
        out[name] = text
    return out


def sha1_or_none(text: str) -> str | None:
    """``sha1``, or None for a text that is not valid UTF-8 (a lone surrogate): never loadable."""
    try:
        return sha1(text)
    except UnicodeEncodeError:
        return None


class ScriptIntake:
    """The internal function's side: check a load call, then load its texts through ``loader``."""

    def __init__(self, loader: ScriptLoader, allowed: Mapping[str, str]) -> None:
        self.loader, self.allowed = loader, allowed

    def __call__(self, event: Mapping[str, Any]) -> list[str]:
        """The names loaded; raises (module doc) with nothing loaded."""
        texts = checked(event, self.allowed)
        self.loader.load(texts)
        return sorted(texts)
