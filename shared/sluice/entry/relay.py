"""The relay Lambda's composition: the real adapters from Settings, and its scheduled run.

``functions/relay/app.py`` calls ``run_scheduled``; the chaos run and a few tests build the
same relay with ``scheduled_relay`` (their own bus, knobs and recovery intervals). The relay
itself (``sluice.relay``) talks only to ports and is handed everything here: its adapters
(``sluice.entry.root``), its Redis-loss recovery hooks (``for_relay``) and the process's bus.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Mapping
from functools import cache
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import ConfigDict, Field, ValidationError

from sluice.core.base import Model
from sluice.core.errors import InvalidInput
from sluice.core.models import describe_validation

if TYPE_CHECKING:
    from sluice.backends.kafka.source import KafkaSource
    from sluice.core.bus import EventBus
    from sluice.core.config import Settings
    from sluice.core.ids import Verifier
    from sluice.relay.loop import Relay
    from sluice.relay.recovery.hook import Recovery

log = logging.getLogger(__name__)


class ScheduledEvent(Model):
    """The EventBridge "Scheduled Event" that starts a relay invocation every minute."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    detail_type: str = Field(alias="detail-type", pattern="^Scheduled Event$")
    source: str = Field(pattern="^aws\\.events$")
    time: str = ""
    resources: list[str] = Field(default_factory=list)


def parse_scheduled(event: object) -> ScheduledEvent:
    try:
        return ScheduledEvent.model_validate(event)
    except ValidationError as exc:
        raise InvalidInput(f"not an EventBridge scheduled event ({describe_validation(exc)})") from exc


class LambdaContextLike(Protocol):
    @property
    def aws_request_id(self) -> str: ...
    def get_remaining_time_in_millis(self) -> int: ...


@cache
def _source(settings: Settings) -> KafkaSource:
    """One consumer per container, reused by every invocation (it rewinds on each take-over)."""
    from sluice.backends.kafka.source import KafkaSource

    return KafkaSource.from_settings(settings)


def for_relay(settings: Settings, engine: Any, store: Any, source: Any, *, events: EventBus,
              **knobs: Any) -> Recovery:
    """The relay's Redis-loss recovery hooks (``sluice.relay.recovery``), from Settings.

    ``engine`` is a ``RedisRelayEngine``, ``source`` a ``KafkaSource``, ``store`` the job store
    (its ``relay_view``); ``events``: the relay's bus, for its incidents. ``knobs``:
    ``interval_s``, ``scan_limit``.
    """
    from sluice.entry import root as wiring
    from sluice.relay.recovery import Recovery
    from sluice.relay.recovery.adapters import KafkaOffsets, RedisEpochs
    from sluice.relay.recovery.checkpoints import DynamoCheckpoints

    # The container's one DynamoDB client, the store's too: a second costs a cold start its own set-up.
    return Recovery(source.topic, RedisEpochs(engine.client),
                    DynamoCheckpoints(wiring.dynamodb(settings), settings.jobs_table),
                    KafkaOffsets(source), store, events=events, **knobs)


def scheduled_relay(settings: Settings, context: LambdaContextLike, *, metrics: Any = None,
                    events: EventBus | None = None,
                    recovery: Mapping[str, Any] | None = None,
                    job_ids: Verifier | Literal["settings"] | None = "settings",
                    **options: Any) -> tuple[Relay, Recovery]:
    """The relay one scheduled invocation runs, and its recovery hooks (for their replay count).

    The real adapters, with Redis-loss recovery as the relay's hooks (docs/redis-loss.md),
    checking each record's job id with the job id keys (``job_ids=None``: unsigned ids), and
    emitting on ``events`` (default: the process's bus, ``wiring.events``, to which the chaos run
    subscribes its recorder of reads, pushes and config reads, and its kill point after a push).
    A harness may hand in its own bus, pass recovery knobs and override ``RelayConfig`` fields
    (``options``).
    """
    from sluice.backends.redis.relay_engine import RedisRelayEngine
    from sluice.entry import root as wiring
    from sluice.relay.config import RelayConfig
    from sluice.relay.loop import Relay

    dispatcher = wiring.dispatcher(settings) if settings.worker_function_name else None
    if job_ids == "settings":  # each record must carry an id a gateway of this deployment minted
        job_ids = wiring.job_id_verifier(settings)
    relay_id = f"relay-{context.aws_request_id or socket.gethostname()}-{os.getpid()}"
    engine, source = RedisRelayEngine.from_settings(settings), _source(settings)
    bus = wiring.events() if events is None else events
    wiring.durable_registry(engine.conn, bus, settings)
    recovery_hooks = for_relay(settings, engine, wiring.store(settings), source, events=bus,
                               **(recovery or {}))
    wiring.subscribe_countdown(bus, settings)  # a settled child counts down its continuation (core.families)
    wiring.traces(settings, bus)  # its push spans, where traces are on
    wiring.sample_depths(settings, bus)  # each queue's last hour of depths and waits, in Redis (console)
    relay = Relay(engine, wiring.store(settings), source, dispatcher, relay_id=relay_id,
                  config=RelayConfig.from_settings(settings, **options), metrics=metrics,
                  hooks=recovery_hooks, job_ids=job_ids, events=bus, parking=wiring.parking_lot(settings))
    return relay, recovery_hooks


def run_scheduled(event: object, context: LambdaContextLike) -> dict[str, Any]:
    """Relay until shortly before this invocation's timeout; the relay Lambda's one call."""
    from sluice.backends.aws.metrics import EmfMetrics
    from sluice.backends.aws.queue_metrics import QueueBound, QueueDepthMetrics
    from sluice.core import bus as ev
    from sluice.entry import root as wiring
    from sluice.relay.loop import STOP_SAFETY_MS
    from sluice.relay.parked_counts import observe as parked_counts

    scheduled = parse_scheduled(event)
    settings = wiring.settings()
    metrics = EmfMetrics()
    relay, _ = scheduled_relay(settings, context, metrics=metrics)
    # Per-queue depths and ages, one EMF line a queue a minute (docs/relay.md, "Per-queue metrics").
    depths = QueueDepthMetrics(QueueBound.from_settings(settings))
    unobserve = relay.events.subscribe(depths, ev.QueueMeasured)
    # Each queue's parked counter in the registry (relay/parked_counts.py), what `sluice queues` shows.
    unpark = (parked_counts(relay.events, wiring.parked_counter(settings), metrics, background=True)
              if settings.queues_table else None)
    log.info("relay %s starting for the schedule at %s", relay.relay_id, scheduled.time)
    try:
        report = relay.run_for_lambda(context.get_remaining_time_in_millis(), settings.relay_stop_before_ms)
    finally:
        unobserve()
        depths.flush()
        if unpark is not None:  # within the time the invocation has left, as the relay's own stop
            unpark(max(0, context.get_remaining_time_in_millis() - STOP_SAFETY_MS) / 1000)
    report.publish(metrics)
    return report.as_dict()


def lambda_handler() -> Callable[[dict[str, Any], LambdaContextLike], dict[str, Any]]:
    """The relay function's handler, with Powertools' logger (its configuration copied to
    sluice's loggers, so every part's lines carry the invocation's context); called at init."""
    from aws_lambda_powertools import Logger
    from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers

    logger = Logger(service="sluice-relay")
    copy_config_to_registered_loggers(source_logger=logger, include={"sluice"})

    @logger.inject_lambda_context
    def handler(event: dict[str, Any], context: LambdaContextLike) -> dict[str, Any]:
        return run_scheduled(event, context)

    return handler
