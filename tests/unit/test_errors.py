"""``sluice.core.errors``: every error the gateway answers with a status of its own comes back to the
client as the same type (``ERROR_CODES``), codes are unique, and messages built from details."""

from __future__ import annotations

import pytest

import sluice.client  # its errors are among the subclasses walked
import sluice.gateway.http.app  # noqa: F401  (loads every module whose errors the gateway can answer with)
from sluice.core import errors
from sluice.gateway.http import problems


def subclasses(cls: type[errors.SluiceError]) -> list[type[errors.SluiceError]]:
    found = []
    for sub in cls.__subclasses__():
        found += [sub, *subclasses(sub)]
    return found


def answered(cls: type[errors.SluiceError]) -> bool:
    """Whether the gateway answers this error with a status of its own (not a 500)."""
    return problems.kind_of(cls.__new__(cls)) is not problems.INTERNAL


def test_every_error_with_a_status_of_its_own_maps_back_by_its_code() -> None:
    reachable = [cls for cls in subclasses(errors.SluiceError) if answered(cls)]
    assert errors.NotOperator in reachable and errors.BadBody in reachable  # the walk reaches them
    missing = sorted(f"{cls.__module__}.{cls.__name__} ({cls.code})" for cls in reachable
                     if errors.ERROR_CODES.get(cls.code) is not cls)
    assert missing == []


def test_codes_are_unique() -> None:
    mine = [errors.SluiceError,
            *(c for c in subclasses(errors.SluiceError) if c.__module__ == errors.__name__)]
    codes = [cls.code for cls in mine]
    assert len(codes) == len(set(codes)), sorted(c for c in codes if codes.count(c) > 1)


def test_from_code_builds_the_type_and_an_unknown_code_the_base() -> None:
    err = errors.from_code("NOT_OPERATOR", "arn:aws:iam::1:user/x is not an operator", principal="x")
    assert type(err) is errors.NotOperator and err.details == {"principal": "x"}
    assert type(errors.from_code("NO_SUCH_CODE")) is errors.SluiceError


# The codes a caller can get back (Lua error replies, problem documents), as they are on the wire:
# most are their class's name (``SluiceError.code``), so renaming a class must not pass unseen.
WIRE_CODES = {
    "ALREADY_FINISHED", "BAD_BODY", "CALLER_THROTTLED", "CANCELLED", "FAMILY_CONFLICT",
    "FIRING_REFUSED", "IDEMPOTENCY_CONFLICT", "INVALID_INPUT", "INVALID_QUEUE", "INVALID_SCHEDULE",
    "INVALID_SCHEMA", "IN_PROGRESS", "JOB_EXISTS", "LEASE_LOST", "NOT_FOUND", "NOT_OPERATOR",
    "NO_HANDLER", "NO_ROUTE", "PAUSED", "PAYLOAD_INVALID", "PAYLOAD_TOO_LARGE", "PRIORITY_NOT_ALLOWED",
    "QUEUE_FULL", "QUEUE_NOT_ALLOWED", "REGISTRATION_REFUSED", "REGISTRY_COLD", "RESERVED_QUEUE",
    "ROUTE_CONFLICT", "ROUTE_REFUSED", "SCHEDULE_EXISTS", "SCHEDULE_NOT_FOUND", "SCHEDULE_TOO_FREQUENT",
    "SCRIPT_NOT_ALLOWED", "SLUICE_ERROR", "STALE_TOKEN", "STORE_ERROR", "TOO_MANY_CHILDREN", "UNAVAILABLE",
    "UNKNOWN_FUNCTION", "UNSUPPORTED_MEDIA_TYPE", "UNSUPPORTED_SCHEDULE", "WRONG_FUNCTION",
}


def test_the_codes_a_caller_gets_back_stay_as_they_are() -> None:
    assert set(errors.ERROR_CODES) == WIRE_CODES
    assert all(cls.code == code for code, cls in errors.ERROR_CODES.items())


def test_a_code_is_the_class_name_in_upper_snake_case_unless_the_class_sets_one() -> None:
    # (subclasses the gateway answers with a 500, so the walk above may meet them unharmed)
    class MissingTeamSecret(errors.ConfigError):
        """A made-up error of a team's own."""

    class Renamed(errors.StoreError):
        code = "GONE"

    assert (MissingTeamSecret.code, Renamed.code) == ("MISSING_TEAM_SECRET", "GONE")
    assert (errors.QueueFull.code, errors.JobNotFound.code, errors.InProgress.code) == \
        ("QUEUE_FULL", "NOT_FOUND", "IN_PROGRESS")


@pytest.mark.parametrize(("error", "message"), [
    (errors.ScheduleNotFound(name="nightly"), "no schedule named 'nightly'"),
    (errors.ScheduleExists(name="nightly"), "a schedule named 'nightly' exists; delete it first"),
    (errors.StaleToken(mine=3, current=4), "stale fencing token 3 (current is 4)"),
    (errors.ScheduleNotFound(), "No schedule with that name."),  # no detail to fill it: the docstring
    (errors.ScheduleNotFound("gone", name="x"), "gone"),  # a message given wins
    (errors.QueuePaused(queue="q"), "The queue is paused."),  # no template: the docstring
])
def test_a_message_is_the_template_filled_from_the_details(error: errors.SluiceError, message: str) -> None:
    assert str(error) == message
