"""The jobs table's stream on the moto server, polled as ``sluice dev`` polls it: the settings
(each test its own tables and bus), the poller, and what reached the bus's SQS target. Shared by
the completion-events and continuations tests."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import boto3

from sluice.backends.dynamodb import tables
from sluice.core.config import Settings
from sluice.streams.completion.publish import batch_failures
from sluice_dev.local.streams import StreamPoller, ensure_jobs_stream, follow


def stream_settings(moto_url: str, unique: str) -> Settings:
    settings = Settings(aws_endpoint_url=moto_url, jobs_table=f"jobs-{unique}",
                        idempotency_table=f"idem-{unique}", results_bucket=f"results-{unique}",
                        events_bus_name=f"bus-{unique}")
    tables.ensure_all(settings)
    return settings


def received(s: Settings, url: str) -> list[dict[str, Any]]:
    """Every event the bus delivered to the queue at ``url`` so far."""
    out: list[dict[str, Any]] = []
    follow(s, url, out.append, wait_s=0, until_empty=True)
    return out


Consume = Callable[[Sequence[Mapping[str, Any]]], Sequence[str]]


def stream_poller(s: Settings, consume: Consume) -> StreamPoller:
    """A poller of the jobs table's stream handing each batch to ``consume``, which returns the
    sequence numbers to hand again (``batchItemFailures``)."""
    client = boto3.client("dynamodbstreams", region_name=s.aws_region, endpoint_url=s.aws_endpoint_url)
    return StreamPoller(client, ensure_jobs_stream(s),
                        lambda event: batch_failures(consume(event["Records"])))
