"""Shared by the gateway's integration tests (no tests here): settings over the real servers, reads."""

from __future__ import annotations

import time
import uuid
from typing import Any

from pydantic import SecretStr

from sluice.backends.kafka.auth import client_config
from sluice.backends.kafka.producer import ensure_topics
from sluice.core.config import Settings
from sluice_dev.local import servers


def stack_settings(tansu: servers.Server, moto: servers.Server, redis: servers.Server) -> Settings:
    """Fresh topic, tables and bucket on the session's servers, created the way the stack does."""
    from sluice.backends.dynamodb.tables import ensure_all

    u = uuid.uuid4().hex[:8]
    settings = Settings(
        kafka_bootstrap=tansu.extra["bootstrap"], kafka_topic=f"gw-{u}",
        kafka_dead_letter_topic=f"gw-{u}.dlq",
        kafka_partitions=3, aws_endpoint_url=moto.extra["url"], jobs_table=f"jobs-{u}",
        idempotency_table=f"idem-{u}", results_bucket=f"results-{u}", redis_url=redis.extra["url"],
        job_id_secret=SecretStr(f"gateway-test-secret-{u}"))
    ensure_topics(settings)
    ensure_all(settings)
    return settings


def kafka_records(settings: Settings, timeout_s: float = 10.0) -> list[tuple[str, dict[str, Any]]]:
    """Every record in the jobs topic, as (key, decoded value), read from the beginning."""
    import json

    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(**client_config(settings), enable_auto_commit=False, group_id=None)
    try:
        partitions = [TopicPartition(settings.kafka_topic, p)
                      for p in sorted(consumer.partitions_for_topic(settings.kafka_topic) or ())]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        end = consumer.end_offsets(partitions)
        out: list[tuple[str, dict[str, Any]]] = []
        deadline = time.monotonic() + timeout_s
        quiet = 0
        # Past the end offsets too, until three fetches in a row come back empty: the local broker
        # (Tansu on S3 storage) can report a partition's end one short of its last record.
        while quiet < 3 or any(consumer.position(tp) < end[tp] for tp in partitions):
            if time.monotonic() > deadline:
                raise TimeoutError("topic not read to its end")
            batches = consumer.poll(timeout_ms=200).values()
            quiet = 0 if batches else quiet + 1
            for batch in batches:
                out += [(r.key.decode(), json.loads(r.value)) for r in batch]
        return out
    finally:
        consumer.close()


def job_items(settings: Settings) -> dict[str, str]:
    """job_id -> status for every item of the jobs table."""
    import boto3

    db = boto3.client("dynamodb", endpoint_url=settings.aws_endpoint_url, region_name=settings.aws_region)
    items: dict[str, str] = {}
    for page in db.get_paginator("scan").paginate(TableName=settings.jobs_table):
        for item in page["Items"]:
            items[item["job_id"]["S"]] = item["status"]["S"]
    return items
