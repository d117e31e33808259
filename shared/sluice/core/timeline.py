"""A job's timeline (issue 32 item 2): the steps its workers took, one entry each, as the worker
recorded them (``sluice.worker.runtime.timeline``) in a capped, expiring list per job
(``timeline.lua``), and as the operator API reads them back.

Pure: one compact JSON object per step, short keys (the list is paid for in Redis memory):
``t`` the worker's wall clock (ms), ``k`` the kind, ``w`` the worker (its grant's owner), ``l`` the
Redis lease token (one per lease: the drawing's lane), ``a`` the attempt, ``f`` the fencing token,
``d`` a lease deadline (ms), ``o`` an outcome, ``c`` the current token a refused write met.
"""

from __future__ import annotations

import json
from typing import Any

# The kinds of step, in the order a worker takes them; then "reap", the relay taking back a lapsed
# lease (reap.lua writes it itself, while timelines are on: ``w`` "relay", ``l`` the lease that lapsed,
# ``a`` the attempt it used up, ``o`` where the job went: ready, dead, cancelled or gone).
KINDS = ("lease", "grant", "renew", "lost", "write", "ack", "finish", "reap")
CAP = 64  # steps kept per job: a job retried many times keeps its last ones
MAX_ENTRY = 512  # bytes per step (timeline.lua refuses longer)
MAX_NUMBER = 2**53 - 1  # a step's numbers: times, tokens, leases (Lua's exact integers)
_KEYS = {"t": "at_ms", "k": "kind", "w": "worker", "l": "lease", "a": "attempt", "f": "token",
         "d": "deadline_ms", "o": "outcome", "c": "current"}


def encode(kind: str, at_ms: int, **facts: Any) -> str:
    """One step as its stored text: ``facts`` by their long names (``_KEYS``), None left out; a
    worker id longer than fits is cut (the step still fits ``MAX_ENTRY``)."""
    if kind not in KINDS:
        raise ValueError(f"unknown timeline step {kind!r}")
    short = {v: k for k, v in _KEYS.items()}
    doc: dict[str, Any] = {"t": int(at_ms), "k": kind}
    for name, value in facts.items():
        if value is not None:
            doc[short[name]] = value[:128] if isinstance(value, str) else value
    return json.dumps(doc, separators=(",", ":"))[:MAX_ENTRY]


def decode(text: str | bytes) -> dict[str, Any] | None:
    """A stored step by its long names; None for anything that is not one (a cut or foreign
    entry is skipped, not trusted: its values are only ever shown, escaped)."""
    try:
        doc = json.loads(text)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(doc, dict) or doc.get("k") not in KINDS or not isinstance(doc.get("t"), int):
        return None
    if any(isinstance(v, int) and not -MAX_NUMBER <= v <= MAX_NUMBER for v in doc.values()):
        return None  # written by hand (no worker's clock or token is that large): a float would overflow
    return {_KEYS[k]: v for k, v in doc.items() if k in _KEYS}
