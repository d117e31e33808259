"""Listing a queue's jobs (issue 32, item 1): the states, the cursor, the checks of a request, and
the payload fields a queue marks sensitive. Pure: the Redis read is ``backends.redis.admin``'s.

A page lists one state's jobs newest first, in the order of the state's Redis zset read backwards:
delayed by when they run, leased by their lease deadline, dead by when they died, finished (the
capped recent list ``keys.recent``) by when they finished, and ready in the reverse of the order
workers take them (the lowest priority's newest first). The cursor is the last job a page
returned, ``<score>~<job id>``: the next page starts strictly after it, so a job that moves
between two pages is shown once at most, never twice on one page, and a removed cursor job is no
error. An id prefix filters; it examines at most ``SCAN_MOST`` members a page and returns a cursor
to go on from, so a prefix that matches nothing cannot make one request read the whole queue.

Sensitive fields: a typed queue's payload JSON Schema (its handler's pydantic model, published
with its route) marks a property sensitive with ``"writeOnly": true`` (pydantic's ``SecretStr``
and ``SecretBytes`` emit it) or ``"x-sluice-sensitive": true``; any queue's own setting names
fields by JSON pointer (``check_sensitive``); ``redact`` puts ``REDACTED`` in their place before a
payload leaves the operator API, so the console and the CLI never see it.

A fair group's ready jobs wait in the group's own zset: the ready listing merges them in, in Redis
(``listing.lua``). Records in the relay's parking lot (delayed beyond its horizon, or held) are the
state ``parked``, read through ``ports.ParkedJobs`` with a cursor of their own (``LotPlace``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, NamedTuple

from pydantic import Field

from sluice.core.base import Model
from sluice.core.errors import InvalidInput
from sluice.core.models import JOB_ID

STATES: Final = ("ready", "delayed", "leased", "dead", "finished", "parked")
STATE_PATTERN: Final = f"^({'|'.join(STATES)})$"
DEFAULT_PAGE: Final = 50
MAX_PAGE: Final = 1000
SCAN_MOST: Final = 10_000  # zset members one page examines at most while a prefix filters
# ...and a ready page merged across fair groups in Redis (listing.lua): a script blocks Redis while
# it runs, and a heap step and a group's refill cost more than a range read's member
# (bench_listing, 1,000 groups, a prefix that matches nothing: p50 ~150 ms at 2,500, load 5-6).
GROUPED_SCAN_MOST: Final = 1_000
RECENT_KEPT: Final = 1000  # finished jobs the recent list keeps per queue (ack.lua trims it)
# Fair groups whose ready zsets one listing.lua call merges: a page over more groups is several calls,
# their pages merged here (``merge_parts``), so no call blocks Redis for long. One call over every
# group blocked it 170 ms at 10,000 groups and 2.7 s at 100,000 (session 35's hostile review:
# a caller may enqueue into as many groups as it likes). 1,000 a call: a queue of at most that many
# is one call, as before (256 made a page at 1,000 groups 2-4 times slower, bench_listing).
GROUPS_PER_CALL: Final = 1_000
REDACTED: Final = "[redacted]"
PREFIX_PATTERN: Final = f"^{JOB_ID}$"  # a prefix of a job id is itself shaped like one
_PREFIX_RE = re.compile(PREFIX_PATTERN)
# A parked page's cursor is a place in the parking lot instead: its item's key, compact (the lot's
# adapter reads it: ``d<partition>-<run at>-<offset>``, ``o<partition>-<offset>[-<first offset>]``),
# and the record's offset.
LOT_CURSOR: Final = r"[do][0-9]{1,6}(?:-[0-9]{1,20}){1,2}~[0-9]{1,20}"
CURSOR_PATTERN: Final = rf"^(-?[0-9]{{1,17}}~{JOB_ID}|{LOT_CURSOR})$"
_CURSOR_RE = re.compile(rf"(-?[0-9]{{1,17}})~({JOB_ID})")
_LOT_CURSOR_RE = re.compile(r"([do][0-9]{1,6}(?:-[0-9]{1,20}){1,2})~([0-9]{1,20})")
_SCHEMA_DEPTH: Final = 12  # nesting followed in a payload schema ($refs may recurse)


class Cursor(NamedTuple):
    score: int
    job_id: str


def encode_cursor(score: int, job_id: str) -> str:
    return f"{int(score)}~{job_id}"


_CURSOR_MOST: Final = 10**17 - 1  # the largest score a cursor carries (CURSOR_PATTERN: 17 digits)


def cursor_score(score: float) -> int:
    """A zset score as a cursor's: scripts write scores far inside 17 digits (ready's below 2**48,
    times in ms); one beyond (``inf``, ``1e20``: a team's own key written by hand) is clamped, so the
    page still answers and its ``next`` parses, and a walk goes on past such entries."""
    return int(max(-_CURSOR_MOST, min(_CURSOR_MOST, score)))


def parse_cursor(text: object) -> Cursor | None:
    """None for no cursor (absent or empty); InvalidInput for anything but ``<score>~<job id>``
    (a parked page's cursor included: ``parse_lot_cursor``)."""
    if text is None or text == "":
        return None
    match = _CURSOR_RE.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise InvalidInput("invalid cursor: pass the `next` of the page before, unchanged")
    return Cursor(int(match.group(1)), match.group(2))


class LotPlace(NamedTuple):
    """A place in the parking lot (``state=parked``): its item's compact key, the record's offset."""

    key: str
    offset: int


def parse_lot_cursor(text: object) -> LotPlace | None:
    """A parked page's cursor: None for none; InvalidInput for anything but a lot's place."""
    if text is None or text == "":
        return None
    match = _LOT_CURSOR_RE.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise InvalidInput("invalid cursor for state parked: pass the `next` of the parked page before")
    return LotPlace(match.group(1), int(match.group(2)))


def encode_lot_cursor(place: tuple[str, int] | None) -> str | None:
    return None if place is None else f"{place[0]}~{int(place[1])}"


def parked_job(job_id: str, value: bytes, enqueued_at_ms: int, run_at_ms: int, delayed: bool) -> ListedJob:
    """A parked record as a listed job: what its Kafka record holds (it was sealed and checked when
    it was accepted, and is checked again when it leaves the lot). ``at_ms``: when it runs, for
    a record delayed beyond the relay's horizon; ``parked``: ``delay`` or ``held`` (its queue was
    held: paused, over a watermark or cap, or slower than its records came)."""
    try:
        doc = json.loads(value)
    except ValueError:
        doc = None
    doc = doc if isinstance(doc, dict) else {}
    priority, group = doc.get("priority"), doc.get("group")
    if isinstance(priority, bool) or not isinstance(priority, int):
        priority = None
    return ListedJob(job_id=job_id, state="parked", at_ms=run_at_ms if delayed else None,
                     enqueued_at_ms=enqueued_at_ms, priority=priority,
                     group=group if isinstance(group, str) else None, payload=doc.get("payload"),
                     parked="delay" if delayed else "held")


def check_state(state: object) -> str:
    if state not in STATES:
        raise InvalidInput(f"state must be one of {', '.join(STATES)}, not {state!r}")
    return str(state)


def check_limit(limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidInput(f"limit must be 1..{MAX_PAGE}, got {limit!r}")
    return limit


def check_prefix(prefix: object) -> str | None:
    """None for no filter; the prefix if it could start a job id, else InvalidInput (no glob or
    pattern character can reach Redis: the filter is a plain ``startswith``)."""
    if prefix is None or prefix == "":
        return None
    if not isinstance(prefix, str) or _PREFIX_RE.fullmatch(prefix) is None:
        raise InvalidInput(f"invalid id prefix {prefix!r}: the start of a job id ({PREFIX_PATTERN})")
    return prefix


def after(cursor: Cursor | None, score: int, member: str) -> bool:
    """Whether (score, member) comes after ``cursor`` newest first: a lower score, or the same
    score and a member lower by bytes (a reversed zset orders equal scores that way)."""
    if cursor is None:
        return True
    return score < cursor.score or (score == cursor.score and member.encode() < cursor.job_id.encode())


class ListedJob(Model):
    """One job of a page. ``at_ms``: when it runs (delayed), its lease deadline (leased), when it
    died (dead) or finished (finished); None for ready (its ``enqueued_at_ms`` says how long it
    waits). Finished jobs carry only their id and time (their hash is gone: ``GET /v1/jobs/{id}``)."""

    job_id: str
    state: str
    at_ms: int | None = None
    enqueued_at_ms: int | None = None
    priority: int | None = None
    attempts: int | None = None
    group: str | None = None
    last_error: str | None = None
    payload: Any = None
    redacted: list[str] = Field(default_factory=list)
    unread: list[str] = Field(default_factory=list, description=(
        "Fields not read: longer than Sluice writes them (written by hand), or the page's payloads "
        "past its budget (16 MiB; page smaller to see them)."))
    parked: str | None = Field(default=None, description=(
        "state parked: delay (delayed beyond the relay's horizon) or held (its queue was held)."))


class JobPage(Model):
    queue: str
    state: str
    jobs: list[ListedJob]
    next: str | None = Field(default=None, description="Cursor of the next page; null: no more.")
    scanned: int = Field(default=0, description="Zset members this page examined.")


Read = Callable[[int, int], Sequence[str]]


def paginate(read: Read, prefix: str | None, limit: int,
             chunk: int = 1000) -> tuple[list[str], str | None, int]:
    """One page of a zset read newest first: ``read(offset, count)`` gives its members strictly
    after the cursor, in order (the adapter skips the cursor's own score's members up to it).
    Members only: parsing a score costs a Redis client more than its member, and only the page's
    and the boundary's scores are needed (the adapter reads those). Returns the page's members (at
    most ``limit``), the member the next page starts after (None: no more), and how many members
    it examined (at most ``SCAN_MOST`` plus one chunk while a prefix filters: a page that spends its
    budget returns a boundary to go on from)."""
    want = limit + 1  # one more than the page, to know whether another page follows
    size = want if prefix is None else max(chunk, want)
    picked: list[str] = []
    examined, offset = 0, 0
    while True:
        entries = read(offset, size)
        for member in entries:
            examined += 1
            if prefix is None or member.startswith(prefix):
                picked.append(member)
                if len(picked) == want:
                    return picked[:limit], picked[limit - 1], examined
        if len(entries) < size:
            return picked, None, examined
        if examined >= SCAN_MOST:
            return picked, entries[-1], examined
        offset += len(entries)


Row = tuple[str, int]  # (job id, score) of a merged page (listing.lua)
Part = tuple[int, Row | None, list[Row]]  # one call's (examined, boundary or None, rows newest first)


def _newest_first(row: Row) -> tuple[int, bytes]:
    return row[1], row[0].encode()  # a higher score, then a higher id by bytes (as a zset orders ties)


def merge_parts(parts: Sequence[Part], want: int) -> Part:
    """One page from the pages of several listing.lua calls over disjoint zsets, each from the same
    cursor with the same want, prefix and budget: what one call over all of them would give, within
    its budget. A call stopped at its frontier: its budget's boundary, or its ``want``-th match; above
    the newest frontier every call examined everything, so the page is the newest ``want`` matches
    at or above it, and when fewer, the next page goes on from that frontier (a boundary then: a
    call whose ``want`` matches made the frontier gave ``want`` rows above it)."""
    frontiers = [boundary if boundary is not None else rows[-1] if len(rows) >= want else None
                 for _, boundary, rows in parts]
    known = [f for f in frontiers if f is not None]
    newest = max(known, key=_newest_first) if known else None
    rows = sorted((r for _, _, part in parts for r in part), key=_newest_first, reverse=True)
    if newest is not None:
        rows = [r for r in rows if _newest_first(r) >= _newest_first(newest)]
    rows = rows[:want]
    boundary = newest if newest is not None and len(rows) < want else None
    return sum(examined for examined, _, _ in parts), boundary, rows


# -- sensitive payload fields -----------------------------------------------------------------------


def _marked(schema: Mapping[str, Any]) -> bool:
    return schema.get("writeOnly") is True or schema.get("x-sluice-sensitive") is True


def _resolve(schema: Any, root: Mapping[str, Any]) -> Any:
    """A local ``$ref`` (``#/$defs/...``, draft-07's ``#/definitions/...``, any pointer into the
    schema) followed, with the ref's own siblings kept: pydantic puts a field's
    ``json_schema_extra`` (``x-sluice-sensitive``) beside the ``$ref`` of a model-typed field, and a
    mark there marks the whole value. A ref that names nothing here resolves to its siblings."""
    ref = schema.get("$ref") if isinstance(schema, Mapping) else None
    if not isinstance(ref, str) or not ref.startswith("#"):
        return schema
    target: Any = root
    for seg in pointer_path(ref[1:]):
        target = target.get(seg) if isinstance(target, Mapping) else None
    siblings = {k: v for k, v in schema.items() if k != "$ref"}
    if not isinstance(target, Mapping):
        return siblings
    return {**target, **siblings} if siblings else target


def _members(schema: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The subschemas of a map's members and a list's or tuple's items, each with its path segment:
    ``*`` (``_redact``: every member of an object, every item of a list) or a tuple's index. A map's
    declared properties are among its members too, so a marked ``additionalProperties`` redacts
    them as well: more, never fewer."""
    subs: list[tuple[str, Any]] = [("*", schema.get(k)) for k in (
        "additionalProperties", "unevaluatedProperties", "additionalItems", "unevaluatedItems")]
    for key in ("prefixItems", "items"):  # items: one schema, or draft-04's tuple of them
        found = schema.get(key)
        subs.extend(_enumerate_items(found) if isinstance(found, list) else [("*", found)])
    patterns = schema.get("patternProperties")
    if isinstance(patterns, Mapping):
        subs.extend(("*", sub) for sub in patterns.values())
    return subs


def _enumerate_items(schemas: list[Any]) -> list[tuple[str, Any]]:
    return [(str(i), sub) for i, sub in enumerate(schemas)]


def _walk(schema: Any, root: Mapping[str, Any], path: tuple[str, ...], out: set[tuple[str, ...]],
          depth: int) -> None:
    schema = _resolve(schema, root)
    if depth > _SCHEMA_DEPTH or not isinstance(schema, Mapping):
        return
    if path and _marked(schema):
        out.add(path)
        return
    for branch in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(branch) or ():
            _walk(sub, root, path, out, depth + 1)
    for branch in ("then", "else"):
        _walk(schema.get(branch), root, path, out, depth + 1)
    props = schema.get("properties")
    if isinstance(props, Mapping):
        for name, sub in props.items():
            _walk(sub, root, (*path, str(name)), out, depth + 1)
    for seg, sub in _members(schema):
        _walk(sub, root, (*path, seg), out, depth + 1)


def sensitive_paths(schema: Mapping[str, Any] | None) -> list[tuple[str, ...]]:
    """The payload paths a queue's JSON Schema marks sensitive (``*``: every member of an object or
    item of a list)."""
    if not schema:
        return []
    out: set[tuple[str, ...]] = set()
    _walk(schema, schema, (), out, 0)
    return sorted(out)


_INDEX = re.compile(r"0|[1-9][0-9]{0,8}")  # a JSON pointer's array index (RFC 6901)


def _redact(value: Any, path: Sequence[str]) -> tuple[Any, bool]:
    if not path:
        return REDACTED, True
    head, rest = path[0], path[1:]
    if head == "*" and isinstance(value, list):
        results = [_redact(item, rest) for item in value]
        return [v for v, _ in results], any(hit for _, hit in results)
    if head == "*" and isinstance(value, dict):
        members = {k: _redact(v, rest) for k, v in value.items()}
        return {k: v for k, (v, _) in members.items()}, any(hit for _, hit in members.values())
    if isinstance(value, list) and _INDEX.fullmatch(head) and int(head) < len(value):
        i = int(head)
        inner, hit = _redact(value[i], rest)
        return [*value[:i], inner, *value[i + 1:]], hit
    if isinstance(value, dict) and head in value:
        inner, hit = _redact(value[head], rest)
        return {**value, head: inner}, hit
    return value, False


# -- sensitive fields a queue's setting names (any queue, typed or not) -------------------------------

MAX_SENSITIVE: Final = 32  # fields one queue may mark
MAX_POINTER: Final = 256  # characters of one field's pointer
_POINTER_RE = re.compile(r"(?:/(?:[^~/]|~[01])*)*")  # RFC 6901: every ~ escaped as ~0 or ~1
_PRINTABLE_RE = re.compile(r"[ -~\u00a0-\U0010ffff]*")  # no control character, no line break


def pointer_path(pointer: str) -> tuple[str, ...]:
    """A checked pointer's path: its unescaped segments (``"/card/number"`` -> ``("card", "number")``,
    ``""`` -> ``()``, the whole payload)."""
    return tuple(seg.replace("~1", "/").replace("~0", "~") for seg in pointer.split("/")[1:])


def check_sensitive(fields: object) -> list[str]:
    """The queue's sensitive fields as stored: JSON pointers (RFC 6901). Each entry is a pointer
    (``/card/number``; a segment ``*`` is every item of a list and every member of an object, a
    number the item at that index; ``""`` is the whole payload) or a
    top-level field's name (``password``, stored as ``/password``). InvalidInput, naming the entry,
    for anything else: not a list of strings, more than ``MAX_SENSITIVE``, one longer than
    ``MAX_POINTER`` or deeper than the schema walk follows, a control character, an unescaped
    ``~``, an empty segment, or the same field twice. An empty list marks none."""
    if not isinstance(fields, list | tuple):
        raise InvalidInput(f"sensitive fields must be a list of JSON pointers or field names, not "
                           f"{type(fields).__name__}")
    if len(fields) > MAX_SENSITIVE:
        raise InvalidInput(f"at most {MAX_SENSITIVE} sensitive fields per queue, got {len(fields)}")
    out: list[str] = []
    for i, field in enumerate(fields):
        what = f"sensitive field {i}"
        if not isinstance(field, str):
            raise InvalidInput(f"{what} must be a string, not {type(field).__name__}")
        if len(field) > MAX_POINTER:
            raise InvalidInput(f"{what} is {len(field)} characters long; the limit is {MAX_POINTER}")
        if not _PRINTABLE_RE.fullmatch(field):
            raise InvalidInput(f"{what} {field[:40]!r} holds a control character")
        pointer = field if field.startswith("/") or field == "" else "/" + field.replace("~", "~0").replace(
            "/", "~1")
        if not field.startswith("/") and field and "/" in field:
            raise InvalidInput(f"{what} {field!r}: a JSON pointer starts with '/' (/a/b), a field's "
                               "name has no '/'")
        if not _POINTER_RE.fullmatch(pointer):
            raise InvalidInput(f"{what} {field!r} is no JSON pointer: write '~' as '~0' and '/' in a "
                               "name as '~1' (RFC 6901)")
        path = pointer_path(pointer)
        if any(seg == "" for seg in path):
            raise InvalidInput(f"{what} {field!r} has an empty segment")
        if len(path) > _SCHEMA_DEPTH:
            raise InvalidInput(f"{what} {field!r} is {len(path)} levels deep; the limit is {_SCHEMA_DEPTH}")
        if pointer in out:
            raise InvalidInput(f"{what} {field!r} names a field given before")
        out.append(pointer)
    return out


def setting_paths(stored: Sequence[str]) -> list[tuple[str, ...]]:
    """The paths a queue's sensitive setting names (checked pointers, as ``check_sensitive`` stored them)."""
    return [pointer_path(p) for p in stored]


def redact(payload: Any, paths: Sequence[tuple[str, ...]]) -> tuple[Any, list[str]]:
    """``payload`` with every sensitive path's value replaced by ``REDACTED`` (a copy; the input is
    not changed), and the dotted paths that were present and replaced."""
    hit: list[str] = []
    if payload is None:  # a finished job's (its hash is gone): nothing to hide
        return payload, hit
    for path in paths:
        payload, found = _redact(payload, path)
        if found:
            hit.append(".".join(path) or "(payload)")
    return payload, hit
