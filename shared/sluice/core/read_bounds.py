"""Read bounds: how much of a job hash the operator's on-demand reads take (pure).

A team's own Redis user may write every field of its queue's job hashes by hand (docs/security.md,
"Values a team may stuff"). The operator's listing read five fields of up to 1,000 jobs whole: a
10 MB payload written into each made one page copy 10 GB out of the Redis every team shares. So a
read asks each field's length first (HSTRLEN) and takes a field only within what Sluice itself
writes there (``CAPS``), and a page's payloads only while their sum stays within a budget (a page
of ordinary payloads can be large too: 1,000 inline jobs of 256 KB). A field left unread is named
(``ListedJob.unread``), so the operator knows to page smaller or to look at that job alone. The
reads themselves are ``fields.lua``'s (in Redis: one call per 250 jobs, not six commands a job).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from sluice.core import depth, timeline
from sluice.core.errors import InvalidInput
from sluice.core.traces import LENGTH as TRACEPARENT_LENGTH

# fail.lua refuses a longer last error (a worker cuts its own to MAX_ERROR_CHARS first).
MAX_ERR_BYTES: Final = 65_536
# One job's stored payload: what any record Sluice relays may carry (Kafka's own limit is 1 MB by
# default; a deployment may raise it, not past this).
MAX_PAYLOAD_BYTES: Final = 8 * 1024 * 1024
# A listing page's payloads together: past it the later jobs' payloads are left unread.
PAGE_PAYLOAD_BUDGET: Final = 16 * 1024 * 1024

# A list the operator reads the tail of, by its whole size in Redis's memory (MEMORY USAGE, every
# node counted): a timeline holds at most 200 steps of 512 bytes (timeline.lua), the depth list
# SAMPLES_KEPT samples of MAX_SAMPLE bytes (sample.lua); twice that leaves room for Redis's overhead.
TIMELINE_MAX_BYTES: Final = 2 * 200 * timeline.MAX_ENTRY
DEPTH_MAX_BYTES: Final = 2 * depth.SAMPLES_KEPT * depth.MAX_SAMPLE

# Each job-hash field an on-demand read takes, at most as long as the scripts write it: m is
# "<priority>,<max_attempts>,<lease_ms>,<enqueued_at_ms>", a and sz are counts, grp a group name
# (models.GROUP: 64 characters), tp a W3C traceparent.
CAPS: Final[Mapping[str, int]] = {"p": MAX_PAYLOAD_BYTES, "m": 64, "a": 20, "err": MAX_ERR_BYTES,
                                  "grp": 64, "tp": TRACEPARENT_LENGTH, "sz": 20}
# The fields as the operator's answers name them (``ListedJob``).
NAMES: Final[Mapping[str, str]] = {"p": "payload", "m": "meta", "a": "attempts", "err": "last_error",
                                   "grp": "group", "tp": "traceparent", "sz": "size"}


def unread_error(length: int, cap: int) -> str:
    """What a dead job's listing says in place of a last error longer than fail.lua writes."""
    return f"[not read: {length} bytes, longer than the {cap} Sluice writes; written by hand]"


def check_list_size(what: str, used: int | None, most: int) -> None:
    """Refuses to read a list that takes more of Redis's memory than Sluice ever writes there:
    its entries were put there by hand (the queue's team), and copying them out of the Redis every
    team shares is what the bound prevents. ``used``: MEMORY USAGE (None: no such list)."""
    if used is not None and used > most:
        raise InvalidInput(f"not read: {what} holds {used} bytes of Redis's memory, more than Sluice writes "
                           f"there (at most {most}); written by hand")
