"""The cost model (issue 33, item 3): its lines against figures computed by hand here, not by the model.

Each expected value below is written out from prices.toml's figures and docs/cost.md's assumptions,
so a wrong price, a wrong formula or a line that moved from fixed to variable fails one of them.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest

from sluice.core.errors import ConfigError, InvalidInput
from sluice_dev.cost import prices as price_book
from sluice_dev.cost.model import GATEWAY_LOG_KB_BEFORE, Bill, JobShape, Workload, estimate, self_hosted
from sluice_dev.cost.profiles import PROFILES, STANDARD, profile

BOOK = price_book.load()


def month(jobs: float, **kw: Any) -> tuple[Bill, Bill]:
    e = estimate(Workload(jobs, **kw), STANDARD, BOOK)
    return e.sluice, e.sqs


def test_the_fixed_lines_of_the_standard_profile() -> None:
    sluice, _ = month(1e6)
    assert sluice.line("MSK Serverless cluster").monthly == pytest.approx(0.75 * 730)  # 547.50
    assert sluice.line("MSK partitions").monthly == pytest.approx(17.52)  # (8 + 8) × 0.0015 × 730
    assert sluice.line("ElastiCache").monthly == pytest.approx(37.376)  # 2 × 0.0256 × 730
    # Lambda and Secrets Manager only (issue 33: no STS, Scheduler or SSM endpoint) × 3 AZs × 0.01 × 730
    assert sluice.line("Interface endpoints").monthly == pytest.approx(43.80)
    # 0.5 GB × 85 s × 43,800 runs = 1,861,500 GB-s × 0.0000133334 = 24.8201241, + 43,800 × $0.20 / M
    assert sluice.line("Relay Lambda").monthly == pytest.approx(24.8288841)
    # 43,800 × 0.5 s × 1 GB = 21,900 GB-s = 0.29200146, + 0.00876
    assert sluice.line("Safety net (worker)").monthly == pytest.approx(0.30076146)
    # at most 2 × 60 × 730 = 87,600 reads × 0.25 GB × 0.2 s = 4,380 GB-s × 0.0000133334 = 0.05840029,
    # + 87,600 × $0.20 / M = 0.01752
    assert sluice.line("Team map function").monthly == pytest.approx(0.07592029)
    assert sluice.fixed == pytest.approx(749.92564556 - 109.5 + 43.8 + 0.07592029)  # 684.30
    assert all(line.fixed for line in sluice.lines[:11]) and not any(line.fixed for line in sluice.lines[11:])


def test_the_variable_lines_per_million_jobs() -> None:
    sluice, _ = month(1e6)
    expected = {
        "API Gateway (enqueue)": 3.50,
        "Gateway Lambda compute": 0.266668,  # 0.5 GB × 0.04 s × 10⁶ × 0.0000133334
        "Gateway Lambda requests": 0.20,
        # 3 WRU × 0.625: the idempotency record's one put, the grant, the result (5 before issue 33 spared
        # the relay's queued write, 4 before the record was written once)
        "DynamoDB writes": 1.875,
        "DynamoDB reads": 0.125,
        "MSK data in": 0.15,  # 1.5 GB × 0.10
        "MSK data out": 0.075,
        "MSK storage": 0.07,  # 1.5 GB × 14/30 × 0.10: the 14-day retention, not 7
        "Worker Lambda compute": 0.200001,
        "Worker Lambda requests": 0.02,
        # 0.503 KB (the worker's line and EMF) + 0.265 × 0.1 (Lambda's lines, a tenth of a worker invocation)
        # + 0 (the gateway's for a 2xx answer; 0.168 EMF + 0.265 Lambda's lines before issue 33: 0.48125)
        # = 0.5295 KB × 10⁶ = 0.5295 GB × $0.50
        "CloudWatch Logs": 0.26475,
        "API access logs": 0.35,
        "DynamoDB storage": 0.0758333,  # a 0.65 KB item: 0.65 GB × 14/30 × 0.25 (1.5 KB before issue 33)
        "DynamoDB PITR": 0.0606667,  # 0.65 GB × 14/30 × 0.20
    }
    assert {line.name: line.monthly for line in sluice.lines if not line.fixed} == pytest.approx(expected)
    # 8.896669 before issue 33, 8.074419 before its logs, 7.857919 before the record's one write
    assert sluice.variable == pytest.approx(7.232919)


def test_api_gateway_is_billed_through_its_monthly_tiers() -> None:
    sluice, sqs = month(1e9)
    # 333 M × $3.50 + 667 M × $2.80
    assert sluice.line("API Gateway (enqueue)").monthly == pytest.approx(3033.1)
    assert sqs.line("API Gateway (enqueue)").monthly == pytest.approx(3033.1)  # the same front door
    sluice, _ = month(2e9)
    assert sluice.line("API Gateway (enqueue)").monthly == pytest.approx(3033.1 + 1000 * 2.38)


def test_sqs_and_lambda_for_the_same_work() -> None:
    _, sqs = month(1e6)
    assert sqs.fixed == pytest.approx(0.2628)  # 5 pollers × 2,628,000 s / 20 s = 657,000 × $0.40 / M
    # 3.50 + 0.48 + 0.133334 + 0.02 + 0.625 + 1.25 + 0.26475 (logs) + 0.35 + 0.035
    assert sqs.variable == pytest.approx(6.658084)
    _, unkeyed = month(1e6, keyed=False)
    assert unkeyed.variable == pytest.approx(6.658084 - 1.25)  # no dedupe table


def test_the_logs_line_counts_each_sides_lines() -> None:
    """The same worker line and EMF a job on both sides (0.503 KB, measured), Lambda's START/END/REPORT
    (0.265 KB) per worker invocation, a tenth of one a job. Sluice's gateway, one invocation a job, writes
    nothing for a 2xx answer since issue 33 (JSON format at system level WARN, no count of 2xx answers);
    before, Lambda's three lines and its EMF line (0.204 KB with the service dimension; 0.168 without)."""
    sluice, sqs = month(1e6)
    assert sqs.line("CloudWatch Logs").monthly == pytest.approx((0.503 + 0.0265) * 0.50)  # 0.26475
    assert sluice.line("CloudWatch Logs").monthly == pytest.approx((0.503 + 0.0265) * 0.50)  # the same
    wide = estimate(Workload(1e6), replace(STANDARD, worker_batch=20), BOOK).sluice
    assert wide.line("CloudWatch Logs").monthly == pytest.approx((0.503 + 0.265 * 0.05) * 0.50)
    logged = estimate(Workload(1e6, shape=JobShape(gateway_log_kb=GATEWAY_LOG_KB_BEFORE)), STANDARD, BOOK)
    # the worker's, a tenth of Lambda's lines, and the gateway's 0.265 KB of them and its 0.204 KB EMF line
    assert logged.sluice.line("CloudWatch Logs").monthly == pytest.approx((0.503 + 0.0265 + 0.469) * 0.50)
    assert logged.sqs.line("CloudWatch Logs").monthly == pytest.approx(0.26475)  # SQS's own, unchanged


def test_the_ratio_at_100_million_jobs() -> None:
    e = estimate(Workload(100e6), STANDARD, BOOK)
    # the fixed 684.30156585 (issue 33: 749.92564556 less 3 endpoints × 3 AZs × $0.01 × 730 = 65.70, plus
    # the team map function's 0.07592029)
    # 807.4419 before the gateway's logs, 785.7919 before the idempotency record's one write
    assert e.sluice.monthly == pytest.approx(684.30156585 + 723.2919)
    assert e.sqs.monthly == pytest.approx(0.2628 + 665.8084)
    assert e.ratio == pytest.approx(1407.59346585 / 666.0712)
    assert e.sluice.per_million == pytest.approx(14.0759346585)


def test_handler_seconds_cost_the_same_on_both_sides() -> None:
    sluice, sqs = month(100e6, handler_seconds=0.2)
    # 1 GB × 0.2 s × 10⁸ × 0.0000133334
    assert sluice.line("Handler run time").monthly == pytest.approx(266.668)
    assert sqs.line("Handler run time").monthly == pytest.approx(266.668)


def test_without_an_idempotency_key_two_writes() -> None:
    sluice, _ = month(1e6, keyed=False)
    assert sluice.line("DynamoDB writes").monthly == pytest.approx(1.25)  # the grant, the result


@pytest.mark.parametrize(("egress", "fixed", "per_month_at_100m"),
                         [("nat-single", 32.85, 45.0), ("nat-per-az", 98.55, 45.0)])
def test_the_nat_choices(egress: str, fixed: float, per_month_at_100m: float) -> None:
    idle, _ = month(0, egress=egress)
    assert idle.line("NAT gateways (handler egress)").monthly == pytest.approx(fixed)  # n × 0.045 × 730
    busy, sqs = month(100e6, egress=egress)
    # 10 KB a job × 10⁸ = 1,000 GB × $0.045
    assert busy.line("NAT data processed").monthly == pytest.approx(per_month_at_100m)
    assert not [line for line in sqs.lines if "NAT" in line.name]
    big, _ = month(100e6, egress=egress, egress_kb_per_job=50)
    assert big.line("NAT data processed").monthly == pytest.approx(225.0)


def test_no_egress_no_nat_line() -> None:
    sluice, _ = month(100e6)
    assert not [line for line in sluice.lines if "NAT" in line.name]


def test_a_month_without_jobs_is_the_fixed_cost_and_has_no_price_per_million() -> None:
    sluice, sqs = month(0)
    assert sluice.monthly == pytest.approx(684.30156585) and sluice.per_million is None
    assert sqs.monthly == pytest.approx(0.2628)


def test_an_existing_kafka_drops_every_msk_line() -> None:
    e = estimate(Workload(1e6), replace(STANDARD, kafka="existing"), BOOK)
    assert not [line for line in e.sluice.lines if line.name.startswith("MSK")]
    assert e.sluice.fixed == pytest.approx(684.30156585 - 547.5 - 17.52)


def test_self_hosting_from_ec2_prices() -> None:
    bill = self_hosted(BOOK)
    assert bill.line("Kafka brokers").monthly == pytest.approx(3 * 0.0816 * 730)  # 178.704
    gateway = 2 * 0.0168 * 730 + 0.0225 * 730 + 0.008 * 730  # two t4g.small, an ALB, one LCU
    assert bill.line("Enqueue gateway").monthly == pytest.approx(gateway)
    assert bill.monthly == pytest.approx(669.033)


@pytest.mark.parametrize("bad", [{"jobs_per_month": -1}, {"jobs_per_month": math.nan},
                                 {"jobs_per_month": math.inf}, {"jobs_per_month": 1e13},
                                 {"jobs_per_month": 1e6, "handler_seconds": -0.1},
                                 {"jobs_per_month": 1e6, "handler_seconds": 901},
                                 {"jobs_per_month": 1e6, "egress": "nat-everywhere"},
                                 {"jobs_per_month": 1e6, "egress_kb_per_job": math.nan}])
def test_hostile_workloads_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput):
        Workload(**bad)


def test_an_unknown_profile_names_the_known_ones() -> None:
    assert profile("standard") is STANDARD and list(PROFILES) == ["small", "standard", "large"]
    with pytest.raises(InvalidInput, match="known profiles are small, standard, large"):
        profile("enormous")


# ------------------------------------------------------------------ the price book


def test_every_price_names_its_source_and_the_date_it_was_read() -> None:
    assert len(BOOK.prices) >= 30 and BOOK.hours_per_month == 730 and BOOK.region == "us-east-1"
    for key, price in BOOK.prices.items():
        assert price.source.startswith("https://aws.amazon.com/"), key
        assert price.read.year >= 2026, key


def _document(**changes: Any) -> dict[str, Any]:
    raw = {"service": "S", "dimension": "d", "unit": "GB", "source": "https://aws.amazon.com/x/",
           "read": "2026-12-06", "usd": 1.0}
    raw.update(changes)
    price = {k: v for k, v in raw.items() if v is not None}
    return {"meta": {"hours_per_month": 730}, "prices": {"p": price}}


@pytest.mark.parametrize(("changes", "message"), [
    ({"source": None}, "has no source"), ({"read": None}, "has no read"),
    ({"source": "somewhere"}, "not an https"), ({"read": "yesterday"}, "not a date"),
    ({"usd": -1.0}, "non-negative"), ({"usd": math.nan}, "finite"),
    ({"usd": None, "tiers": [{"millions": 1, "usd": 1.0}]}, "open tier"),
    ({"tiers": [{"usd": 1.0}]}, "either usd or tiers"),
])
def test_a_price_without_its_source_or_with_a_bad_figure_is_refused(changes: dict[str, Any], message: str,
                                                                    ) -> None:
    with pytest.raises(ConfigError, match=message):
        price_book.parse(_document(**changes))


def test_a_changed_price_changes_its_lines() -> None:
    raw = {key: _raw(price) for key, price in BOOK.prices.items()}
    raw["msk_serverless_cluster_hour"]["usd"] = 0.5
    book = price_book.parse({"meta": {"hours_per_month": 730}, "prices": raw})
    e = estimate(Workload(1e6), STANDARD, book)
    assert e.sluice.line("MSK Serverless cluster").monthly == pytest.approx(365.0)  # 0.5 × 730


def _raw(price: price_book.Price, **changes: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {"service": price.service, "dimension": price.dimension, "unit": price.unit,
                           "source": price.source, "read": price.read.isoformat()}
    if price.usd is not None:
        raw["usd"] = price.usd
    else:
        raw["tiers"] = [{"usd": t.usd} if t.millions is None else {"millions": t.millions, "usd": t.usd}
                        for t in price.tiers]
    raw.update(changes)
    return raw


def test_a_profile_the_model_cannot_price_is_refused() -> None:
    with pytest.raises(InvalidInput, match="the model prices kafka"):
        replace(STANDARD, kafka="confluent-cloud")
    with pytest.raises(InvalidInput, match="the model prices kafka"):
        replace(STANDARD, api="websocket")


def test_the_front_door_is_the_profiles_on_both_sides(monkeypatch: pytest.MonkeyPatch) -> None:
    """An HTTP API profile (item 2's small) pays HTTP API prices, and SQS + Lambda the same front door."""
    from sluice_dev.cost import profiles

    monkeypatch.setattr(profiles, "API_KINDS", ("rest", "http"))  # item 2 adds "http"; priced already
    e = estimate(Workload(1e9), replace(STANDARD, name="http", api="http"), BOOK)
    # 300 M × $1.00 + 700 M × $0.90
    assert e.sluice.line("API Gateway (enqueue)").monthly == pytest.approx(930.0)
    assert e.sqs.line("API Gateway (enqueue)").monthly == pytest.approx(930.0)


# ------------------------------------------------------------------ the small and large profiles (item 2)


def small(jobs: float, **kw: Any) -> tuple[Bill, Bill]:
    e = estimate(Workload(jobs, **kw), profile("small"), BOOK)
    return e.sluice, e.sqs


def test_the_fixed_lines_of_the_small_profile() -> None:
    sluice, _ = small(0)
    assert sluice.line("MSK brokers").monthly == pytest.approx(66.576)  # 2 × kafka.t3.small × 0.0456 × 730
    assert sluice.line("MSK broker storage").monthly == pytest.approx(2.0)  # 2 × 10 GB × $0.10
    assert sluice.line("ElastiCache").monthly == pytest.approx(9.344)  # 1 × t4g.micro Valkey × 0.0128 × 730
    # Lambda, Secrets Manager (issue 33: Scheduler and SSM from outside the VPC, no STS) × 2 AZs × 0.01 × 730
    assert sluice.line("Interface endpoints").monthly == pytest.approx(29.2)
    # one cache node, and the HTTP API's 5xx rate read from two metrics (5xx / Count): 19 alarm metrics
    assert sluice.line("Alarms").monthly == pytest.approx(1.9)
    assert not [line for line in sluice.lines if line.name.startswith("MSK Serverless")]
    # 66.576 + 2 + 9.344 + 29.2 + 24.8288841 (relay) + 0.30076146 (safety net) + 0.07592029 (team map
    # function) + 2 + 1.9 + 3 + 6: the idle target ($150) met without egress
    assert sluice.fixed == pytest.approx(145.22556585)
    assert sluice.fixed <= 150


def test_with_a_nat_the_small_profile_drops_its_endpoints_and_meets_the_idle_target() -> None:
    sluice, _ = small(0, egress="nat-single")
    assert not [line for line in sluice.lines if line.name == "Interface endpoints"]
    assert sluice.line("NAT gateways (handler egress)").monthly == pytest.approx(32.85)  # 0.045 × 730
    assert sluice.fixed == pytest.approx(145.22556585 - 29.2 + 32.85)  # 148.88
    assert sluice.fixed <= 150
    busy, _ = small(100e6, egress="nat-single")
    # the relay's worker invocations through the NAT: 0.5 KB × 10⁸ = 50 GB × $0.045
    assert busy.line("NAT data processed (AWS APIs, no endpoints)").monthly == pytest.approx(2.25)
    standard = estimate(Workload(0, egress="nat-single"), STANDARD, BOOK).sluice
    assert standard.line("Interface endpoints").monthly == pytest.approx(43.8)  # standard keeps its two


def test_the_variable_lines_of_the_small_profile() -> None:
    sluice, sqs = small(100e6)
    assert sluice.line("API Gateway (enqueue)").monthly == pytest.approx(100.0)  # HTTP API, 100 M × $1.00
    assert sqs.line("API Gateway (enqueue)").monthly == pytest.approx(100.0)  # the same front door
    # 150 GB in + 150 GB out, half of it to the other AZ = 150 GB, × 2 directions × $0.01
    assert sluice.line("Kafka cross-AZ traffic").monthly == pytest.approx(3.0)
    # 150 GB × 14/30 × 2 copies = 140 GB, less the 20 GB provisioned = 120 GB × $0.10
    assert sluice.line("MSK broker storage above the floor").monthly == pytest.approx(12.0)
    assert not [line for line in sluice.lines if line.name in ("MSK data in", "MSK data out", "MSK storage")]
    assert small(1e6)[0].line("MSK broker storage above the floor").monthly == 0  # 1.4 GB, under the floor


def test_the_small_profiles_targets_as_the_model_computes_them() -> None:
    """Issue 33's targets: idle is met (with or without egress); the ratios since the idempotency record
    is written once (1.6019 and 1.2979 before)."""
    sluice, sqs = small(100e6)
    # SQS + Lambda behind an HTTP API: 100 + 48 (1.2 requests × $0.40) + 13.3334 (worker) + 2 + 62.5 + 125
    # + 26.475 + 35 (logs: 0.5295 KB a job; access) + 3.5 (storage: 30 GB × 14/30 × 0.25) + 0.2628 (polling)
    assert sqs.monthly == pytest.approx(416.0712, abs=1e-3)
    # Sluice: 145.2256 idle + 100 (HTTP API) + 26.6668 + 20 (gateway Lambda) + 187.50 (3 WRU × 10⁸ ×
    # $0.625/M: the record's one put, the grant, the result; 4 WRU, 250, while Powertools wrote the record
    # twice) + 12.5 (reads) + 3 (cross-AZ) + 12 (storage above the floor) + 20.0001 + 2 (worker) + 26.475
    # + 35 (logs: 0.5295 KB a job, 0.9625 before the gateway's went; access) + 7.5833 + 6.0667 (0.65 KB
    # items, PITR) = 604.0175 (666.5175 with the record's second write, 688.1675 with the gateway's logs too)
    assert sluice.monthly == pytest.approx(604.0175, abs=1e-3)
    assert sluice.monthly / sqs.monthly == pytest.approx(1.4517, abs=1e-3)  # target 1.5 (1.6019, 1.6540)
    big, big_sqs = small(1e9)
    # 5,522.6446 with the gateway's logs (1.3508×), less 0.433 KB × 10⁹ = 433 GB × $0.50 = 216.50, less
    # the record's second write, 10⁹ × $0.625 / M = 625 (1.2979× with it)
    assert big.monthly == pytest.approx(4681.1446, abs=1e-3)
    assert big.monthly / big_sqs.monthly == pytest.approx(1.1450, abs=1e-3)  # target 1.2


def test_the_large_profile() -> None:
    sluice = estimate(Workload(0), profile("large"), BOOK).sluice
    assert sluice.line("ElastiCache").monthly == pytest.approx(6 * 0.1752 * 730)  # 3 shards × 2 r7g.large
    assert sluice.line("MSK partitions").monthly == pytest.approx(40 * 0.0015 * 730)  # 32 + 8 = 43.80
    assert sluice.line("Relay Lambda").monthly == pytest.approx(4 * 24.8288841)  # 4 partition groups
    assert sluice.line("Alarms").monthly == pytest.approx(2.3)  # 19 - 2 one-shard + 3 × 2 per node
