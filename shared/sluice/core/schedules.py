"""Schedules: repeatable jobs on a cron or rate expression (issue 17). Pure: no I/O, no clock.

Expressions are EventBridge Scheduler's, because in AWS each schedule is one:

- ``rate(N minute|minutes|hour|hours|day|days)``: every N units from the schedule's start.
- ``cron(minutes hours day-of-month month day-of-week year)``, UTC. Each field takes ``*``,
  a number, a range ``a-b``, a list ``a,b`` and a step ``*/n`` or ``a-b/n``; month and
  day-of-week take names (JAN, SUN); day-of-week runs 1-7 with 1 = Sunday; exactly one of
  day-of-month and day-of-week is ``?``. ``L``, ``W`` and ``#`` are valid in EventBridge but
  not computed here, so they are refused (``UNSUPPORTED_SCHEDULE``) rather than guessed.

Nothing fires more often than once a minute (``SCHEDULE_TOO_FREQUENT``): cron's finest field is
the minute, and a rate below one minute (``rate(30 seconds)``) is refused by name.

A firing is accepted only at a time its expression produces (``firing_time``), and its job id
(``firing_id``) is derived from the schedule (queue, name) and that time alone, with the ULID's time
being the scheduled time and no key in it, so a double firing (EventBridge Scheduler delivers at
least once; ``sluice dev``'s scheduler may overlap it), even across a key rotation, makes one job:
the relay drops the repeat.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from dataclasses import dataclass
from typing import Any, Final

from sluice.core import ids
from sluice.core.errors import FiringRefused, InvalidSchedule, ScheduleTooFrequent, UnsupportedSchedule
from sluice.core.models import validate_public_queue

FIRE_KEY: Final = "sluice_schedule"  # a firing: {FIRE_KEY: name, "queue": queue, "scheduled_time": ISO 8601}
SCHEDULED_TIME: Final = "<aws.scheduler.scheduled-time>"  # EventBridge Scheduler fills it in
SCHEDULE_NAME_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
MIN_INTERVAL_MS: Final = 60_000
_RATE_RE: Final = re.compile(r"rate\(\s*(\d{1,9})\s+([a-z]+)\s*\)")
_RATE_UNITS_MS: Final = {"minute": 60_000, "hour": 3_600_000, "day": 86_400_000}
_SUBSECOND_UNITS: Final = {"second", "seconds", "sec", "secs", "s", "millisecond", "milliseconds", "ms"}
_CRON_RE: Final = re.compile(r"cron\((.*)\)", re.DOTALL)
# Scheduler's English names, whatever the locale (calendar's month_abbr follows it; importing calendar also
# loads locale: a few ms of every cold start that imports schedules).
_MONTHS: Final = {m: i for i, m in enumerate(
    ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"), start=1)}
_EPOCH: Final = dt.date(1970, 1, 1)
_DAYS: Final = {"SUN": 1, "MON": 2, "TUE": 3, "WED": 4, "THU": 5, "FRI": 6, "SAT": 7}
_SEARCH_DAYS: Final = 366 * 5  # a cron with no firing in five years (e.g. Feb 30) is refused


@dataclass(frozen=True)
class Rate:
    every_ms: int


@dataclass(frozen=True)
class Cron:
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int] | None  # None: ``?`` (day-of-week decides)
    months: frozenset[int]
    weekdays: frozenset[int] | None  # 1 = Sunday, as EventBridge; None: ``?``
    years: frozenset[int] | None  # None: ``*``


Expression = Rate | Cron


def _refuse(text: str, why: str) -> InvalidSchedule:
    return InvalidSchedule(f"invalid schedule expression {text[:80]!r}: {why}; nothing was written",
                           expression=text[:200])


def parse_rate(text: str) -> Rate:
    found = _RATE_RE.fullmatch(text.strip())
    if found is None:
        raise _refuse(text, "expected rate(<number> minute|minutes|hour|hours|day|days)")
    value, unit = int(found[1]), found[2]
    if unit in _SUBSECOND_UNITS:
        raise ScheduleTooFrequent(f"schedule {text!r} fires faster than once a minute, the most often a "
                                  "schedule may fire; nothing was written", expression=text)
    base = unit[:-1] if unit.endswith("s") else unit
    if base not in _RATE_UNITS_MS:
        raise _refuse(text, f"unknown unit {unit!r}")
    if value < 1:
        raise _refuse(text, "the rate must be at least 1")
    if (value == 1) != (unit == base):  # EventBridge: rate(1 minute), rate(5 minutes)
        raise _refuse(text, "use the singular unit for 1 and the plural otherwise")
    return Rate(value * _RATE_UNITS_MS[base])


def _value(token: str, low: int, high: int, names: dict[str, int], text: str) -> int:
    number = names.get(token.upper()) if names else None
    if number is None:
        if not token.isdigit():
            raise _refuse(text, f"{token!r} is not a number in {low}-{high}")
        number = int(token)
    if not low <= number <= high:
        raise _refuse(text, f"{number} is outside {low}-{high}")
    return number


def _field(token: str, low: int, high: int, text: str, names: dict[str, int] | None = None) -> frozenset[int]:
    bare = token.upper()
    for known in names or {}:
        bare = bare.replace(known, "")
    if any(c in bare for c in "LW#"):
        raise UnsupportedSchedule(f"schedule {text!r} uses L, W or #, which Sluice does not compute; "
                                  "use lists and ranges instead; nothing was written", expression=text)
    out: set[int] = set()
    for part in token.split(","):
        body, _, step_text = part.partition("/")
        step = _value(step_text, 1, high, {}, text) if step_text else 1
        if body == "*":
            start, end = low, high
        elif "-" in body:
            first, _, last = body.partition("-")
            lookup = names or {}
            start, end = _value(first, low, high, lookup, text), _value(last, low, high, lookup, text)
            if start > end:
                raise _refuse(text, f"range {body!r} runs backwards")
        else:
            start = _value(body, low, high, names or {}, text)
            end = high if step_text else start
        out.update(range(start, end + 1, step))
    return frozenset(out)


def parse_cron(text: str) -> Cron:
    found = _CRON_RE.fullmatch(text.strip())
    fields = found[1].split() if found else []
    if len(fields) != 6:
        raise _refuse(text, "expected cron(minutes hours day-of-month month day-of-week year), six fields")
    minute, hour, dom, month, dow, year = fields
    if (dom == "?") == (dow == "?"):
        raise _refuse(text, "exactly one of day-of-month and day-of-week must be '?'")
    return Cron(
        minutes=_field(minute, 0, 59, text), hours=_field(hour, 0, 23, text),
        days=None if dom == "?" else _field(dom, 1, 31, text),
        months=_field(month, 1, 12, text, _MONTHS),
        weekdays=None if dow == "?" else _field(dow, 1, 7, text, _DAYS),
        years=None if year == "*" else _field(year, 1970, 2199, text))


def parse(text: object) -> Expression:
    """A rate or cron expression, or ``InvalidSchedule`` (or a subclass) saying what is wrong."""
    if not isinstance(text, str) or len(text) > 256:
        raise InvalidSchedule("the schedule expression must be a string of at most 256 characters, "
                              "rate(...) or cron(...); nothing was written")
    stripped = text.strip()
    if stripped.startswith("rate("):
        return parse_rate(stripped)
    if stripped.startswith("cron("):
        expression = parse_cron(stripped)
        if next_after(expression, 0, 0) is None:
            raise _refuse(text, "it never fires")
        return expression
    raise _refuse(text, "expected rate(...) or cron(...)")


def _day_matches(cron: Cron, day: dt.date) -> bool:
    if day.month not in cron.months or (cron.years is not None and day.year not in cron.years):
        return False
    if cron.days is not None:
        return day.day in cron.days
    assert cron.weekdays is not None
    return (day.isoweekday() % 7) + 1 in cron.weekdays  # ISO Sunday = 7 -> 1


def next_after(expression: Expression, after_ms: int, start_ms: int) -> int | None:
    """The first firing strictly after ``after_ms`` (UTC ms), or None if there is none within five years.

    ``start_ms``: when a rate schedule started (its firings are ``start + k * every``); cron ignores it.
    """
    if isinstance(expression, Rate):
        if after_ms < start_ms:
            return start_ms
        return start_ms + ((after_ms - start_ms) // expression.every_ms + 1) * expression.every_ms
    cron = expression
    if cron.years is not None and max(cron.years) < 1970:
        return None
    moment = dt.datetime.fromtimestamp(max(after_ms, 0) // 1000, dt.UTC)
    day = moment.date()
    if cron.years is not None and day.year < min(cron.years):  # a far-off year: jump to it
        day = dt.date(min(cron.years), 1, 1)
    for _ in range(_SEARCH_DAYS):
        if _day_matches(cron, day):
            midnight = (day - _EPOCH).days * 86_400_000  # the day's midnight, UTC
            for hour in sorted(cron.hours):
                for minute in sorted(cron.minutes):
                    at = midnight + (hour * 60 + minute) * 60_000
                    if at > after_ms:
                        return at
        day += dt.timedelta(days=1)
    return None


def firings(expression: Expression, after_ms: int, start_ms: int, count: int) -> list[int]:
    """The next ``count`` firings strictly after ``after_ms``."""
    out: list[int] = []
    at: int | None = after_ms
    while len(out) < count and at is not None:
        at = next_after(expression, at, start_ms)
        if at is not None:
            out.append(at)
    return out


def check_name(name: object) -> str:
    if not isinstance(name, str) or SCHEDULE_NAME_RE.fullmatch(name) is None:
        shown = name[:80] if isinstance(name, str) else name
        raise InvalidSchedule(f"invalid schedule name {shown!r}: 1-64 of A-Z a-z 0-9 _ -, starting with a "
                              "letter or digit; nothing was written")
    return name


@dataclass(frozen=True)
class Schedule:
    """One stored schedule: what to enqueue, where, and when."""

    name: str
    expression: str
    queue: str
    payload: Any
    start_ms: int
    paused: bool = False
    # Who declared it in code (a team, or ``sluice`` for Sluice's own worker: ``core.declared``), whose
    # deploys update and remove it; "" for one created through the operator API, which no deploy touches.
    owner: str = ""

    @classmethod
    def create(cls, name: object, expression: object, queue: object, payload: Any, now_ms: int) -> Schedule:
        """A checked schedule: name, expression and queue (as the enqueue path checks it: reserved
        and malformed names refused). Whether a worker handles the queue is the use case's check."""
        check_name(name)
        parse(expression)
        validate_public_queue(queue)
        assert isinstance(name, str) and isinstance(expression, str) and isinstance(queue, str)
        return cls(name, expression.strip(), queue, payload, now_ms)

    def next_after(self, after_ms: int) -> int | None:
        return next_after(parse(self.expression), after_ms, self.start_ms)


def firing_event(queue: str, name: str, scheduled_time: str) -> dict[str, str]:
    """The gateway's Scheduler event for one firing: what EventBridge Scheduler sends (with
    ``SCHEDULED_TIME`` filled in as ISO 8601) and what ``sluice dev``'s scheduler sends."""
    return {FIRE_KEY: name, "queue": queue, "scheduled_time": scheduled_time}


def iso(ms: int) -> str:
    """``ms`` as Scheduler writes a scheduled time: ``2027-01-01T03:00:00Z``."""
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def scheduler_name(queue: str, name: str) -> str:
    """The EventBridge Scheduler schedule of ``queue``'s schedule ``name`` (names are per queue, and
    Scheduler's are per group, 1-64 of ``[0-9A-Za-z_.-]``): ``queue.name``, or, when that is too long,
    shortened parts and a hash of both, so two queues' schedules never share one."""
    joined = f"{queue}.{name}"
    if len(joined) <= 64:
        return joined
    digest = hashlib.sha256(f"{queue}\x00{name}".encode()).hexdigest()[:20]
    return f"{queue[:21]}.{name[:21]}.{digest}"


def firing_entropy(queue: str, name: str, scheduled_ms: int) -> bytes:
    """The 80 random bits of a firing's ULID: a hash of the schedule (queue, name) and scheduled time."""
    return hashlib.sha256(b"sluice schedule\x00" + queue.encode("utf-8") + b"\x00" + name.encode("utf-8")
                          + b"\x00" + str(scheduled_ms).encode("ascii")).digest()[:10]


def firing_id(name: str, queue: str, scheduled_ms: int) -> str:
    """The job id of ``queue``'s schedule ``name`` firing at ``scheduled_ms``: the same inputs always
    give the same id, whatever job id key is current (issue 27).

    Keyless (``ids.keyless``): a key rotation between two deliveries of one firing must not give it
    two ids, so no key may go into it. The ULID's time is the scheduled time (not the delivery
    time). Such an id proves nothing by itself; the gateway accepts a firing only at a time its
    schedule produces (``firing_time``), and the relay trusts the record through its seal.
    """
    check_name(name)
    return ids.keyless(scheduled_ms, queue, firing_entropy(queue, name, scheduled_ms),
                       f"{queue}\x00{name}\x00{scheduled_ms}".encode())


# How far a delivered scheduled time may be from a time the expression produces: Scheduler's
# scheduled-time has whole seconds, and a rate schedule's phase in AWS is its creation there, a
# moment after the item's start. Half the shortest interval, so one delivery names one firing.
FIRING_TOLERANCE_MS: Final = MIN_INTERVAL_MS // 2
# A firing is accepted from a little before its time (clocks) to a day after it (Scheduler retries
# a failed delivery for up to 24 h by default), and never from before its schedule existed.
FIRING_EARLY_MS: Final = 5 * 60_000
FIRING_LATE_MS: Final = 24 * 3_600_000 + FIRING_EARLY_MS
# The retry policy of every Scheduler schedule's target (issue 29): Scheduler retries a delivery the
# firings function failed (an outage, or a refusal that may pass: ``entry.gateway_scheduler.RETRIED``)
# for as long as a firing is accepted, as often as it allows (185, its maximum), then sends it to the
# firings dead-letter queue, whose depth alarms: a firing refused for a day is never lost silently.
RETRY_MAX_EVENT_AGE_S: Final = 24 * 3600
RETRY_MAX_ATTEMPTS: Final = 185


def target_retry(dead_letter_arn: str) -> dict[str, Any]:
    """The ``RetryPolicy`` and ``DeadLetterConfig`` of a Scheduler target (``dead_letter_arn`` empty:
    the retry policy alone, as ``sluice dev`` has no dead-letter queue)."""
    out: dict[str, Any] = {"RetryPolicy": {"MaximumEventAgeInSeconds": RETRY_MAX_EVENT_AGE_S,
                                           "MaximumRetryAttempts": RETRY_MAX_ATTEMPTS}}
    if dead_letter_arn:
        out["DeadLetterConfig"] = {"Arn": dead_letter_arn}
    return out


def firing_time(schedule: Schedule, delivered_ms: int, now_ms: int) -> int:
    """The time ``schedule``'s expression produces that a delivery for ``delivered_ms`` stands for,
    or ``FiringRefused``: no produced time within ``FIRING_TOLERANCE_MS``, one before the schedule's
    start, or one too far from now (``FIRING_EARLY_MS``, ``FIRING_LATE_MS``). The job id is derived
    from the produced time, so every delivery of one firing names one job."""
    expression = parse(schedule.expression)
    produced = next_after(expression, delivered_ms - FIRING_TOLERANCE_MS - 1, schedule.start_ms)
    shown = f"{schedule.queue}/{schedule.name} at {iso(delivered_ms)}"
    if produced is None or abs(produced - delivered_ms) > FIRING_TOLERANCE_MS:
        raise FiringRefused(f"schedule {shown}: {schedule.expression} produces no firing at that time; "
                            "nothing was enqueued", schedule=schedule.name, queue=schedule.queue)
    if produced < schedule.start_ms:
        raise FiringRefused(f"schedule {shown}: that is before the schedule was created; nothing was "
                            "enqueued", schedule=schedule.name, queue=schedule.queue)
    if produced > now_ms + FIRING_EARLY_MS or produced < now_ms - FIRING_LATE_MS:
        raise FiringRefused(f"schedule {shown}: a firing is accepted from {FIRING_EARLY_MS // 60_000} min "
                            f"before its time to {FIRING_LATE_MS // 3_600_000} h after it; nothing was "
                            "enqueued", schedule=schedule.name, queue=schedule.queue)
    return produced
