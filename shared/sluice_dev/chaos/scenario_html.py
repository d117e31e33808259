"""The gc-pause scenario's drawing as a page (issue 32 item 3): ``sluice scenario gc-pause --html FILE``
writes it, and the console's scenario page shows the same body (``body``).

Everything drawn comes from the run: the job's timeline as its two workers recorded it in the
scenario's Redis (``result["steps"]``, read back after the run), the verdict and the stored result.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from importlib import resources
from typing import Any

from sluice_dev.cli.console.render import esc
from sluice_dev.cli.console.timeline import drawing


def body(result: Mapping[str, Any]) -> str:
    """The verdict, the run's parameters, the drawing and the stored result: HTML, every value escaped."""
    params = result.get("params") or {}
    fencing = "on" if result.get("fencing") else "OFF"
    title = (f"gc-pause: A frozen {params.get('freeze_for', '?')} s, lease {params.get('lease', '?')} s, "
             f"fencing {fencing}")
    stored = result.get("stored") or {}
    bug = " bug" if result.get("stale_write_accepted") else ""
    return (f'<p class="verdict{bug}" id="verdict">{esc(result.get("verdict"))}</p>'
            f'<p class="hint">{esc(title)}; time scale {esc(params.get("time_scale"))} (times below are '
            f'wall seconds of the run). The stored result: '
            f'<code id="stored">{esc(json.dumps(stored.get("result")))}'
            f'</code> (token {esc(stored.get("result_token"))}).</p>'
            + drawing(result.get("steps") or [], title))


def page(result: Mapping[str, Any]) -> str:
    """A file of its own: the console's stylesheet inlined, no script."""
    css = resources.files("sluice_dev.cli.console").joinpath("static", "console.css").read_text("utf-8")
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>sluice scenario gc-pause'
            f'</title><style>{css}</style></head><body><main><h1>sluice scenario gc-pause</h1>'
            f'{body(result)}</main></body></html>\n')
