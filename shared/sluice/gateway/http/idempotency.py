"""Idempotency-Key support on Powertools' idempotency utility with its DynamoDB layer.

Powertools gives the three semantics the API promises, so we use it rather than our
own conditional put:

- same key, same request -> the stored response (its ``response_hook`` tells us it
  was a replay, so the HTTP layer answers 200 instead of 202);
- same key, different request -> ``IdempotencyValidationError`` (payload validation
  on a hash of the whole normalised request) -> 422;
- same key while the first request still runs -> ``IdempotencyAlreadyInProgressError``
  -> 409. The in-progress record expires with the Lambda invocation's remaining time,
  so a crashed request does not block its key for the whole retention.

Two gaps we close around it: a job that Kafka acknowledged must be reported accepted
even if saving the idempotency record fails afterwards (else a client retry would
create a second job), and every Powertools error becomes a ``sluice.core.errors`` type.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from sluice.core.errors import BackendUnavailable, ConfigError, IdempotencyConflict, InProgress
from sluice.core.lazy import Lazy, resolve

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.idempotency.persistence.base import BasePersistenceLayer

    from sluice.core.config import Settings

log = logging.getLogger(__name__)

KEY_PREFIX = "sluice-gateway-v1"
DEFAULT_IN_PROGRESS_MS = 30_000  # when no Lambda context says how long the request may run


class _Remaining:
    """The one method of LambdaContext that the idempotency utility reads."""

    def __init__(self, remaining_ms: Callable[[], int]) -> None:
        self._remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self._remaining_ms()


class PowertoolsIdempotency:
    def __init__(self, persistence: BasePersistenceLayer | Lazy[BasePersistenceLayer], *,
                 expires_after_seconds: int = 24 * 3600) -> None:
        """``persistence`` may be held lazily: built on the first keyed request (``sluice.core.lazy``)."""
        self._persistence = persistence
        self.expires_after_seconds = expires_after_seconds

    @property
    def persistence(self) -> BasePersistenceLayer:
        return resolve(self._persistence)

    @classmethod
    def from_settings(cls, settings: Settings, client: Any = None, *,
                      build_client: Callable[[], Any] | None = None) -> PowertoolsIdempotency:
        """On ``settings.idempotency_table``, with ``client``, or else the client ``build_client``
        builds (the container's DynamoDB client, ``sluice.entry.gateway``) on the first request that
        carries a key: a keyless enqueue needs none of the DynamoDB layer (Powertools' idempotency
        package, boto3, a client), and they cost a gateway's cold start about as much as
        ``import boto3`` (issue 14)."""
        make = build_client if client is None else lambda: client
        if make is None:
            raise ConfigError("the idempotency layer needs a DynamoDB client or a way to build one")

        def build() -> BasePersistenceLayer:
            from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer

            return DynamoDBPersistenceLayer(table_name=settings.idempotency_table, boto3_client=make())

        return cls(build() if client is not None else Lazy(build))

    def run(self, key: str, fingerprint: Mapping[str, Any], action: Callable[[], dict[str, Any]],
            remaining_ms: Callable[[], int] | None = None) -> tuple[dict[str, Any], bool]:
        from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
        from aws_lambda_powertools.utilities.idempotency.exceptions import (
            IdempotencyAlreadyInProgressError,
            IdempotencyInconsistentStateError,
            IdempotencyPersistenceLayerError,
            IdempotencyValidationError,
        )

        replayed = False
        produced: list[dict[str, Any]] = []

        def on_replay(response: Any, _record: Any) -> Any:
            nonlocal replayed
            replayed = True
            return response

        def once(request: Mapping[str, Any]) -> dict[str, Any]:
            produced.append(action())
            return produced[-1]

        fallback_deadline = _deadline_from_now(DEFAULT_IN_PROGRESS_MS)
        config = IdempotencyConfig(
            event_key_jmespath="key", payload_validation_jmespath="fingerprint",
            raise_on_no_idempotency_key=True, expires_after_seconds=self.expires_after_seconds,
            hash_function="sha256", response_hook=on_replay,  # type: ignore[arg-type]
            lambda_context=_Remaining(remaining_ms or fallback_deadline),  # type: ignore[arg-type]
        )
        guarded = idempotent_function(data_keyword_argument="request", persistence_store=self.persistence,
                                      config=config, key_prefix=KEY_PREFIX)(once)
        try:
            result = guarded(request={"key": key, "fingerprint": dict(fingerprint)})
        except IdempotencyValidationError as exc:
            raise IdempotencyConflict(
                "this Idempotency-Key was already used with a different request") from exc
        except IdempotencyAlreadyInProgressError as exc:
            raise InProgress(
                "a request with this Idempotency-Key is still in progress; retry shortly") from exc
        except (IdempotencyPersistenceLayerError, IdempotencyInconsistentStateError) as exc:
            if produced:  # the job is in Kafka: say so, even though the key was not saved
                log.error("idempotency record not saved after the job was accepted: %r", exc)
                return produced[-1], False
            raise BackendUnavailable(f"idempotency store unavailable: {exc}") from exc
        return result, replayed


def _deadline_from_now(budget_ms: int) -> Callable[[], int]:
    import time

    deadline = time.monotonic() + budget_ms / 1000

    def remaining() -> int:
        return max(0, int((deadline - time.monotonic()) * 1000))

    return remaining
