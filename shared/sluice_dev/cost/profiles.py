"""What a deploy profile puts into the bill: the shape the cost model prices, one ``Profile`` per name.

``standard`` is template.yaml at its defaults (docs/cost.md, "The configuration costed"). Issue 33's
item 2 adds ``small`` and ``large`` here, with the kinds they need (``kafka="msk-provisioned"``,
``api="http"``, ...) and their lines in ``model``; until then ``profile("small")`` is refused by name.
"""

from __future__ import annotations

from dataclasses import dataclass

from sluice.core.errors import InvalidInput

KAFKA_KINDS = ("msk-serverless", "existing")  # item 2: "msk-provisioned"
API_KINDS = ("rest",)  # item 2: "http" (prices.toml has api_http_requests)


@dataclass(frozen=True)
class Profile:
    name: str
    azs: int = 3
    # Interface endpoints the stack creates, one per AZ each (infra/endpoints.yaml); DynamoDB and S3
    # are gateway endpoints, free.
    interface_endpoints: tuple[str, ...] = ("Lambda", "STS", "Secrets Manager", "Scheduler", "SSM")
    kafka: str = "msk-serverless"
    job_partitions: int = 8  # KafkaPartitions
    dead_letter_partitions: int = 8
    kafka_retention_days: float = 14  # KafkaRetentionHours' default, 336 h: the job life bound
    cache_engine: str = "valkey"
    cache_node: str = "t4g_small"  # prices.toml's cache_<engine>_<node>
    cache_nodes: int = 2  # primary + replica, Multi-AZ
    api: str = "rest"
    gateway_gb: float = 0.5
    gateway_s: float = 0.040  # a gateway invocation, one job a request
    relay_gb: float = 0.5
    relay_run_s: float = 85  # one run starting each minute, per partition group
    relay_groups: int = 1
    worker_gb: float = 1.0
    worker_overhead_s: float = 0.015  # Sluice's own time per job at batch 10 (lease, grant, result, ack)
    worker_batch: int = 10
    safety_net_s: float = 0.5  # one safety-net invocation a minute
    secrets: int = 5  # the relay's, gateway's, operator's and worker's Redis users, the job id key
    alarm_metrics: int = 19
    dashboards: int = 1
    custom_metrics: int = 20  # EMF metric/dimension series of the service-wide metrics
    retention_days: float = 14  # RetentionDays: finished jobs' items
    # per job with an Idempotency-Key (docs/cost.md, "Per job"): the idempotency record's 2, the grant,
    # the result; the relay writes no ``queued`` for a keyed id since issue 33 (benchmarks/bench_per_job.py)
    wru_keyed: float = 4
    wru_unkeyed: float = 2
    rru: float = 1  # the relay's relay_view read

    def __post_init__(self) -> None:
        if self.kafka not in KAFKA_KINDS or self.api not in API_KINDS:
            raise InvalidInput(f"profile {self.name}: the model prices kafka {', '.join(KAFKA_KINDS)} and "
                               f"api {', '.join(API_KINDS)}, not {self.kafka!r} and {self.api!r}")


STANDARD = Profile("standard")

PROFILES: dict[str, Profile] = {
    "standard": STANDARD,
    # "small": Profile("small", azs=2, kafka="msk-provisioned", api="http", ...),  issue 33, item 2
    # "large": Profile("large", ...),  issue 33, item 2
}


def profile(name: str) -> Profile:
    """The profile called ``name``; an unknown name is refused, naming the known ones."""
    found = PROFILES.get(name)
    if found is None:
        raise InvalidInput(f"unknown profile {name!r}: known profiles are {', '.join(sorted(PROFILES))} "
                           "(small and large are issue 33, item 2)")
    return found
