"""The pure schedule model (issue 17, Schedules): expressions, next firings, firing ids."""

from __future__ import annotations

import calendar

import pytest

from sluice.core import ids, schedules
from sluice.core.errors import (
    InvalidQueueName,
    InvalidSchedule,
    ReservedQueue,
    ScheduleTooFrequent,
    UnsupportedSchedule,
)

KEY = b"k" * 32


def utc(y: int, mo: int, d: int, h: int = 0, mi: int = 0) -> int:
    return calendar.timegm((y, mo, d, h, mi, 0, 0, 0, 0)) * 1000


@pytest.mark.parametrize("text", [
    "cron(0 12 * * ? *)", "cron(0/15 * ? * MON-FRI *)", "cron(5,35 8-17 1 JAN,JUL ? 2027)",
    "rate(1 minute)", "rate(5 minutes)", "rate(1 hour)", "rate(2 days)", " rate(3 hours) ",
])
def test_valid_expressions_parse(text: str) -> None:
    schedules.parse(text)


@pytest.mark.parametrize("text", [
    "", "every minute", "cron(* * * * *)", "cron(0 12 * * * *)", "cron(0 12 ? * ? *)", "cron(60 * * * ? *)",
    "cron(0 24 * * ? *)", "cron(0 0 32 * ? *)", "cron(0 0 * 13 ? *)", "cron(0 0 ? * 8 *)",
    "cron(5-1 * * * ? *)", "cron(x * * * ? *)", "cron(0 0 30 2 ? *)", "rate(0 minutes)",
    "rate(1 minutes)", "rate(5 minute)",
    "rate(5 weeks)", "rate(-1 minutes)", "rate(minutes)", 5, None,
])
def test_bad_expressions_are_refused(text: object) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        schedules.parse(text)
    assert caught.value.code in {"INVALID_SCHEDULE"}


@pytest.mark.parametrize("text", ["rate(30 seconds)", "rate(1 second)", "rate(59 seconds)", "rate(100 ms)"])
def test_faster_than_once_a_minute_is_refused(text: str) -> None:
    with pytest.raises(ScheduleTooFrequent) as caught:
        schedules.parse(text)
    assert caught.value.code == "SCHEDULE_TOO_FREQUENT"


@pytest.mark.parametrize("text", ["cron(0 0 L * ? *)", "cron(0 0 15W * ? *)", "cron(0 0 ? * 6L *)",
                                  "cron(0 0 ? * 2#1 *)", "cron(0 0 ? * MON#2 *)"])
def test_unsupported_features_are_refused_by_name(text: str) -> None:
    with pytest.raises(UnsupportedSchedule) as caught:
        schedules.parse(text)
    assert caught.value.code == "UNSUPPORTED_SCHEDULE"


def test_rate_fires_every_interval_from_its_start() -> None:
    start = utc(2027, 1, 1, 10, 0) + 1234
    expr = schedules.parse("rate(5 minutes)")
    assert schedules.next_after(expr, start - 1, start) == start
    assert schedules.firings(expr, start, start, 3) == [start + 300_000, start + 600_000, start + 900_000]
    assert schedules.next_after(expr, start + 299_999, start) == start + 300_000


def test_cron_next_firings() -> None:
    expr = schedules.parse("cron(0/20 9 ? * MON-FRI *)")
    friday = utc(2027, 1, 1, 9, 30)  # 2027-01-01 is a Friday
    assert schedules.firings(expr, friday, 0, 4) == [
        utc(2027, 1, 1, 9, 40), utc(2027, 1, 4, 9, 0), utc(2027, 1, 4, 9, 20), utc(2027, 1, 4, 9, 40)]


def test_cron_day_of_week_one_is_sunday_and_names_work() -> None:
    by_number = schedules.parse("cron(0 0 ? * 1 *)")
    by_name = schedules.parse("cron(0 0 ? * SUN *)")
    saturday = utc(2027, 1, 2)
    assert schedules.next_after(by_number, saturday, 0) == utc(2027, 1, 3)
    assert schedules.next_after(by_name, saturday, 0) == utc(2027, 1, 3)


def test_cron_day_of_month_month_and_year() -> None:
    expr = schedules.parse("cron(30 6 29 FEB ? *)")
    assert schedules.next_after(expr, utc(2027, 1, 1), 0) == utc(2028, 2, 29, 6, 30)
    only_2030 = schedules.parse("cron(0 0 1 1 ? 2030)")
    assert schedules.next_after(only_2030, utc(2027, 1, 1), 0) == utc(2030, 1, 1)
    assert schedules.next_after(only_2030, utc(2030, 1, 1), 0) is None


def test_cron_next_is_strictly_after() -> None:
    expr = schedules.parse("cron(0 12 * * ? *)")
    assert schedules.next_after(expr, utc(2027, 3, 3, 12), 0) == utc(2027, 3, 4, 12)
    assert schedules.next_after(expr, utc(2027, 3, 3, 12) - 1, 0) == utc(2027, 3, 3, 12)


def test_schedule_create_checks_name_expression_and_queue() -> None:
    made = schedules.Schedule.create("nightly", "cron(0 3 * * ? *)", "reports", {"a": 1}, 7)
    assert (made.name, made.queue, made.start_ms, made.paused) == ("nightly", "reports", 7, False)
    with pytest.raises(ReservedQueue):
        schedules.Schedule.create("n", "rate(1 hour)", "sluice-internal", {}, 0)
    with pytest.raises(InvalidQueueName):
        schedules.Schedule.create("n", "rate(1 hour)", "bad.queue", {}, 0)
    for name in ["", "-x", "a" * 65, "a b", "a.b", None]:
        with pytest.raises(InvalidSchedule):
            schedules.Schedule.create(name, "rate(1 hour)", "reports", {}, 0)
    with pytest.raises(ScheduleTooFrequent):
        schedules.Schedule.create("n", "rate(10 seconds)", "reports", {}, 0)


def test_firing_id_is_deterministic_has_the_job_id_shape_and_the_scheduled_time() -> None:
    at = utc(2027, 5, 6, 7, 8)
    first = schedules.firing_id("nightly", "reports", at)
    assert first == schedules.firing_id("nightly", "reports", at)  # a double firing: one id
    # issue 27: no key goes into it (a rotation between deliveries gives the same id), so it does not
    # verify as a minted id; its record's seal is what the relay trusts
    assert ids.verify(first, KEY) is None and ids.is_keyless(first)
    assert ids.ulid_time_ms(first.split(".")[0]) == at
    assert first.split(".")[1] == "reports" and len(first.split(".")) == 3
    assert schedules.firing_id("nightly", "reports", at + 60_000) != first
    assert schedules.firing_id("hourly", "reports", at) != first
    assert schedules.firing_id("nightly", "other", at) != first
