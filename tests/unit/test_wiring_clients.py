"""The composition root's AWS clients (cold start, issue 14)."""

from __future__ import annotations

import pytest

from sluice.core.config import Settings
from sluice.entry import root as wiring


def test_boto_clients_share_the_process_session_and_its_models(monkeypatch: pytest.MonkeyPatch) -> None:
    # A fresh botocore session per client loads the endpoint data and each service model again:
    # the relay builds two DynamoDB clients (store, recovery) and would pay for it twice.
    import boto3

    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    s = Settings(aws_region="us-east-1")
    first, second = wiring.boto_client("dynamodb", s), wiring.boto_client("dynamodb", s)
    assert boto3.DEFAULT_SESSION is not None
    assert first._loader is second._loader
    assert boto3.client("dynamodb", region_name="us-east-1")._loader is first._loader


def test_the_store_routes_schedules_and_idempotency_share_one_dynamodb_client() -> None:
    # The gateway's route cache used to build a client of its own on the first enqueue, and the
    # idempotency layer and the schedules one more each: every client its own connection pool.
    from typing import Any

    from sluice.entry.gateway import idempotency

    s = Settings(aws_region="us-east-1", jobs_table="jobs", routes_table="routes", schedules_table="sched",
                 idempotency_table="idem")
    wiring.reset()
    try:
        client = wiring.dynamodb(s)
        cache = wiring.routes(s)
        schedules = wiring.schedules(s)
        assert cache is not None and schedules is not None
        assert not cache.source.built  # type: ignore[union-attr]  # nothing built at a gateway's import
        api: Any = object()
        assert wiring.store(s).client is client  # type: ignore[attr-defined]
        assert cache.source.get().client is client  # type: ignore[union-attr]
        assert schedules(api).store.client is client  # type: ignore[attr-defined]
        keys = idempotency(s)
        assert not keys.built and keys.get().client is client  # type: ignore[attr-defined]
        assert (client.meta.config.read_timeout, client.meta.config.max_pool_connections) == (10, 32)
        assert wiring.dynamodb(s) is client
        wiring.reset()
        assert wiring.dynamodb(s) is not client  # reset forgets it with the adapters built on it
    finally:
        wiring.reset()


def test_each_new_bus_gets_the_roots_observers_once_even_at_a_collected_buss_address() -> None:
    # A set of id(bus) skipped a new bus that CPython placed where a collected one had been:
    # its depth samples (or timeline, countdown, traces) were never subscribed.
    from sluice.core.bus import EventBus

    s = Settings(aws_region="us-east-1")
    for _ in range(50):
        bus = EventBus()
        wiring.sample_depths(s, bus)
        wiring.sample_depths(s, bus)
        assert len(bus._subs) == 1
        del bus


def test_a_role_is_claimed_once_per_bus() -> None:
    from sluice.core.bus import EventBus

    one, two = EventBus(), EventBus()
    assert one.claim("timeline") and not one.claim("timeline")
    assert one.claim("traces") and two.claim("timeline")
