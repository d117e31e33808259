"""Operating the relay: its scheduled Lambda run, and the runtime knobs it obeys.

The one home of both: ``functions/relay/app.py`` calls ``run_scheduled``; the CLI
(``sluice pause``, ``sluice rate``, ...) calls the knob setters.

The knobs live in each queue's config hash in Redis (``engine.set_config``). A running
relay re-reads them every half second and ``rate.lua`` reads the rate on every call,
so a change made here (or through the CLI, which calls these) applies within about a
second on every relay instance, with no redeploy.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping
from functools import cache
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sluice.core.errors import InvalidInput
from sluice.core.models import QueueConfig, describe_validation
from sluice.relay.state import AfterPush

if TYPE_CHECKING:
    from sluice.backends.kafka.source import KafkaSource
    from sluice.core.bus import EventBus
    from sluice.core.config import Settings
    from sluice.core.ids import Verifier
    from sluice.relay.loop import Relay
    from sluice.relay.recovery.hook import Recovery

log = logging.getLogger(__name__)


class ConfigEngine(Protocol):
    def set_config(self, queue: str, **changes: Any) -> QueueConfig: ...
    def get_config(self, queue: str) -> QueueConfig: ...


def _number(value: object, what: str, *, integer: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value or value < 0:
        raise InvalidInput(f"{what} must be a number >= 0, got {value!r}")
    if integer and not isinstance(value, int):
        raise InvalidInput(f"{what} must be an integer, got {value!r}")
    if value > 10_000_000:
        raise InvalidInput(f"{what} is absurdly large: {value!r}")
    return float(value)


def set_rate(engine: ConfigEngine, queue: str, per_second: float, burst: int | None = None) -> QueueConfig:
    """Limit pushing into ``queue`` to ``per_second`` jobs/s (0 = unlimited), ``burst`` at once.

    The burst defaults to one second's worth, so a relay that polls every 200 ms is not
    starved between polls.
    """
    rate = _number(per_second, "rate per second")
    size = int(_number(burst, "burst", integer=True)) if burst is not None else max(1, int(rate))
    return engine.set_config(queue, rate_per_s=rate, burst=size)


def set_watermarks(engine: ConfigEngine, queue: str, high: int, low: int | None = None) -> QueueConfig:
    """Pause pushing while the ready depth is above ``high``; resume below ``low`` (default high/2).

    ``high`` = 0 turns the watermark off.
    """
    hi = int(_number(high, "high watermark", integer=True))
    lo = int(_number(low, "low watermark", integer=True)) if low is not None else hi // 2
    if hi and lo > hi:
        raise InvalidInput(f"the low watermark ({lo}) must not be above the high one ({hi})")
    return engine.set_config(queue, high_watermark=hi, low_watermark=lo)


def set_max_in_flight(engine: ConfigEngine, queue: str, limit: int) -> QueueConfig:
    return engine.set_config(queue, max_in_flight=int(_number(limit, "max in flight", integer=True)))


def set_caps(engine: ConfigEngine, queue: str, max_delayed: int | None = None,
             max_dead: int | None = None) -> QueueConfig:
    """The queue's own caps on delayed and dead jobs (0 = the deployment's default; sluice.core.limits)."""
    changes = {name: int(_number(value, name.replace("_", " "), integer=True))
               for name, value in (("max_delayed", max_delayed), ("max_dead", max_dead)) if value is not None}
    if not changes:
        raise InvalidInput("give --max-delayed, --max-dead or both")
    return engine.set_config(queue, **changes)


def pause(engine: ConfigEngine, queue: str) -> QueueConfig:
    """Stop pushing into ``queue``; Kafka holds its backlog. Leasing is not affected."""
    return engine.set_config(queue, paused=True)


def resume(engine: ConfigEngine, queue: str) -> QueueConfig:
    return engine.set_config(queue, paused=False)


# -- the scheduled Lambda run ---------------------------------------------------------------------


class ScheduledEvent(BaseModel):
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


def scheduled_relay(settings: Settings, context: LambdaContextLike, *, metrics: Any = None,
                    events: EventBus | None = None,
                    recovery: Mapping[str, Any] | None = None,
                    after_push: AfterPush | None = None,
                    job_ids: Verifier | Literal["settings"] | None = "settings",
                    **options: Any) -> tuple[Relay, Recovery]:
    """The relay one scheduled invocation runs, and its recovery hooks (for their replay count).

    The real adapters, with Redis-loss recovery as the relay's hooks (docs/redis-loss.md),
    checking each record's job id with the job id keys (``job_ids=None``: unsigned ids), and
    emitting on ``events`` (default: the process's bus, ``wiring.events``, to which the chaos run
    subscribes its recorder of reads, pushes and config reads). A harness may hand in its own
    bus, pass recovery knobs, a push callback, and override ``RelayConfig`` fields (``options``).
    """
    from sluice.entry import root as wiring
    from sluice.relay.config import RelayConfig
    from sluice.relay.loop import Relay
    from sluice.relay.recovery import for_relay

    dispatcher = wiring.dispatcher(settings) if settings.worker_function_name else None
    if job_ids == "settings":  # each record must carry an id a gateway of this deployment minted
        job_ids = wiring.job_id_verifier(settings)
    relay_id = f"relay-{context.aws_request_id or socket.gethostname()}-{os.getpid()}"
    from sluice.backends.redis.relay_engine import RedisRelayEngine

    engine, source = RedisRelayEngine.from_settings(settings), _source(settings)
    bus = wiring.events() if events is None else events
    recovery_hooks = for_relay(settings, engine, wiring.store(settings), source, events=bus,
                               **(recovery or {}))
    wiring.subscribe_countdown(bus, settings)  # a settled child counts down its continuation (core.families)
    relay = Relay(engine, wiring.store(settings), source, dispatcher, relay_id=relay_id,
                  config=RelayConfig.from_settings(settings, **options), metrics=metrics,
                  hooks=recovery_hooks, after_push=after_push, job_ids=job_ids,
                  events=bus)
    return relay, recovery_hooks


def run_scheduled(event: object, context: LambdaContextLike) -> dict[str, Any]:
    """Relay until shortly before this invocation's timeout; the relay Lambda's one call."""
    from sluice.backends.aws.metrics import EmfMetrics
    from sluice.entry import root as wiring

    scheduled = parse_scheduled(event)
    settings = wiring.settings()
    metrics = EmfMetrics()
    from sluice.backends.aws.queue_metrics import QueueBound, QueueDepthMetrics
    from sluice.core import bus as ev

    relay, _ = scheduled_relay(settings, context, metrics=metrics)
    # Per-queue depths and ages, one EMF line a queue a minute (docs/relay.md, "Per-queue metrics").
    depths = QueueDepthMetrics(QueueBound.from_settings(settings))
    unobserve = relay.events.subscribe(depths, ev.QueueMeasured)
    log.info("relay %s starting for the schedule at %s", relay.relay_id, scheduled.time)
    try:
        report = relay.run_for_lambda(context.get_remaining_time_in_millis(), settings.relay_stop_before_ms)
    finally:
        unobserve()
        depths.flush()
    report.publish(metrics)
    return report.as_dict()
