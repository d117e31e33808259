"""The one composition root: builds adapters from Settings.

Lambda handlers, the CLI and the local stack all get their Redis queue, job
store, Kafka log and dispatcher from here. Each builder is cached per process,
so a Lambda container creates its clients once and reuses them across
invocations. Imports are inside the builders so a function only loads the
client libraries it actually uses (cold start).
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

from sluice.config import Settings

if TYPE_CHECKING:
    from sluice.ports import Dispatcher, JobLog, JobQueue, JobStore


@cache
def settings() -> Settings:
    return Settings.from_env()


def boto_client(service: str, s: Settings) -> Any:
    import boto3

    # boto3.client is overloaded per literal service name; go through a Session's
    # untyped factory so one helper serves every service.
    factory: Any = boto3.session.Session().client
    return factory(service, region_name=s.aws_region, endpoint_url=s.aws_endpoint_url)


@cache
def queue(s: Settings | None = None) -> JobQueue:
    from sluice.redis.engine import RedisQueue

    return RedisQueue.from_settings(s or settings())


@cache
def store(s: Settings | None = None) -> JobStore:
    from sluice.store.jobs import DynamoJobStore

    return DynamoJobStore.from_settings(s or settings())


@cache
def job_log(s: Settings | None = None) -> JobLog:
    from sluice.kafka.producer import KafkaJobLog

    return KafkaJobLog.from_settings(s or settings())


@cache
def dispatcher(s: Settings | None = None) -> Dispatcher:
    from sluice.dispatch import LambdaDispatcher

    return LambdaDispatcher.from_settings(s or settings())


def reset() -> None:
    """Forget every cached adapter (tests, and the local stack after a restart)."""
    for builder in (settings, queue, store, job_log, dispatcher):
        builder.cache_clear()
