"""README.md's code blocks and the command lines in them, for the tests that hold it to its word.

tests/tooling/test_readme.py checks them without a stack (the commands and options exist, the Python
compiles and the first handler runs, the docs it names resolve); tests/stack/test_readme_stack.py runs
the first handler's commands as written on `sluice dev`.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


@dataclass(frozen=True)
class Block:
    lang: str
    text: str
    section: str  # the "## " heading it sits under


def blocks(text: str | None = None) -> list[Block]:
    text = README.read_text(encoding="utf-8") if text is None else text
    found = []
    for match in _FENCE.finditer(text):
        headings = re.findall(r"^## (.+)$", text[:match.start()], re.M)
        found.append(Block(match.group(1), match.group(2), headings[-1] if headings else ""))
    return found


def shell_lines(block: Block) -> list[str]:
    """A bash block's commands as written, one a line, without their comments or blank lines."""
    return [line for line in (_uncommented(raw) for raw in block.text.splitlines()) if line]


def _uncommented(raw: str) -> str:
    """``raw`` up to its comment: a ``#`` outside quotes, at the start or after a space."""
    quote = ""
    for i, ch in enumerate(raw):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or raw[i - 1].isspace()):
            return raw[:i].strip()
    return raw.strip()


def sluice_argv(line: str) -> list[str] | None:
    """The arguments after ``sluice`` on a command line (``VAR=value`` prefixes skipped); None: another
    program's line."""
    words = shlex.split(line)
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        words = words[1:]
    if not words or words[0] != "sluice":
        return None
    return words[1:]


def python_block(marker: str) -> str:
    """The one Python block that contains ``marker``."""
    found = [b.text for b in blocks() if b.lang == "python" and marker in b.text]
    assert len(found) == 1, f"README.md has {len(found)} python blocks with {marker!r}"
    return found[0]


def shell_line(section: str, start: str) -> str:
    """The one command line of section ``section``'s bash blocks that starts with ``start``."""
    found = [line for b in blocks() if b.lang == "bash" and b.section == section
             for line in shell_lines(b) if line.startswith(start)]
    assert len(found) == 1, f"README.md's {section!r} has {len(found)} lines starting {start!r}"
    return found[0]
