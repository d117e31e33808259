"""The ``sluice`` console script: the CLI when the tooling is installed, one clear line when it is not.

One distribution carries both the client and the tooling (docs/design.md, "Distributions"), so its
``sluice`` script exists after a bare ``pip install sluice-queue`` too, which brings the client's
dependencies only. Run there, the CLI's first import (click) would end in a traceback; this says
what to install instead. Nothing here imports more than the standard library, so the happy path
costs one extra module.
"""

from __future__ import annotations

import sys

EXTRA = "tooling"
INSTALL = f"pip install 'sluice-queue[{EXTRA}]'"
EXIT_MISSING = 1  # sluice_dev.cli.output.EXIT_ERROR, which cannot be imported without the tooling


def missing_tooling(name: str) -> str:
    return (f"sluice: the sluice command is part of Sluice's tooling, which this environment lacks "
            f"(no module named {name!r}); the bare sluice-queue distribution is the client alone. "
            f"Install the tooling with: {INSTALL}")


def main() -> None:
    try:
        from sluice_dev.cli import main as cli
    except ModuleNotFoundError as exc:
        top = (exc.name or "").partition(".")[0]
        if not top or top in ("sluice", "sluice_dev"):  # our own module missing: a broken install
            raise
        print(missing_tooling(exc.name or top), file=sys.stderr)
        raise SystemExit(EXIT_MISSING) from None
    cli()
