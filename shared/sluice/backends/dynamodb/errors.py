"""botocore errors become ``sluice.core.errors`` exceptions here, and nowhere else.

Conditional-check failures are NOT translated here: each store method inspects
the item DynamoDB returns with them (``ReturnValuesOnConditionCheckFailure``) to
tell a retry that landed from a stale writer, which only the method can do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from sluice.core.errors import BackendUnavailable, SluiceError, StoreError

# Codes after which the same request may simply be sent again (botocore has already
# retried them a few times by the time we see them).
RETRYABLE_CODES = frozenset({
    "ProvisionedThroughputExceededException", "ThrottlingException", "Throttling",
    "RequestLimitExceeded", "InternalServerError", "InternalError", "ServiceUnavailable",
    "TransactionConflictException", "TransactionInProgressException", "SlowDown",
    "RequestTimeout", "RequestTimeoutException", "503",
})


class WriteConditionFailed(StoreError):
    """The caller's own condition on a FencedTable write was false (the fencing check passed)."""

    code = "CONDITION_FAILED"


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def translate(exc: Exception, operation: str) -> SluiceError:
    """The SluiceError for a botocore exception raised by ``operation``."""
    if isinstance(exc, ClientError):
        code = error_code(exc)
        message = str(exc.response.get("Error", {}).get("Message", "")) or code
        if code in RETRYABLE_CODES:
            return BackendUnavailable(f"{operation}: {code}: {message}", operation=operation, aws_code=code)
        return StoreError(f"{operation}: {code}: {message}", operation=operation, aws_code=code)
    if isinstance(exc, BotoCoreError):
        # Connection refused, read timeout, closed connection: the request may or may not
        # have landed. Callers retry through a conditional write, which tells them which.
        return BackendUnavailable(f"{operation}: {type(exc).__name__}: {exc}", operation=operation)
    return StoreError(f"{operation}: {type(exc).__name__}: {exc}", operation=operation)


@contextmanager
def translated(operation: str) -> Iterator[None]:
    """Re-raise any botocore error inside the block as a SluiceError."""
    try:
        yield
    except (ClientError, BotoCoreError) as exc:
        raise translate(exc, operation) from exc


def is_conditional_failure(exc: ClientError) -> bool:
    return error_code(exc) == "ConditionalCheckFailedException"


def conditional(operation: str, call: Callable[[], object]) -> bool:
    """Run one conditional write: True if written, False if its condition refused it; any other
    botocore error re-raised as a SluiceError."""
    try:
        call()
    except ClientError as exc:
        if is_conditional_failure(exc):
            return False
        raise translate(exc, operation) from exc
    except BotoCoreError as exc:
        raise translate(exc, operation) from exc
    return True


def old_item(exc: ClientError) -> dict[str, Any] | None:
    """The item as it was when the condition failed (ALL_OLD), or None if absent."""
    response: Any = exc.response
    item = response.get("Item")
    return dict(item) if item else None
