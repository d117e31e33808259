"""What a deploy profile puts into the bill: the shape the cost model prices, one ``Profile`` per name.

Each is template.yaml at ``Profile=<name>`` (its ``Profiles`` mapping; issue 33, item 2): ``standard`` is
the template at its defaults (docs/cost.md, "The configuration costed"); ``small`` is a team's first
production queue (2 AZs, 2 provisioned kafka.t3.small brokers, one cache.t4g.micro node, an HTTP API,
no interface endpoint when a NAT gateway is the way out); ``large`` has 3 Redis shards,
32 job partitions and 4 relay partition groups. tests/infra/test_template_profiles.py checks that the
template creates what these say.
"""

from __future__ import annotations

from dataclasses import dataclass

from sluice.core.errors import InvalidInput

KAFKA_KINDS = ("msk-serverless", "msk-provisioned", "existing")
API_KINDS = ("rest", "http")


@dataclass(frozen=True)
class Profile:
    name: str
    azs: int = 3
    # Interface endpoints the stack creates, one per AZ each (infra/endpoints.yaml); DynamoDB and S3
    # are gateway endpoints, free. Only the services a function in the VPC calls (issue 33): Scheduler
    # and SSM are called from outside it (SchedulerFunction, TeamMapFunction), STS by no function.
    interface_endpoints: tuple[str, ...] = ("Lambda", "Secrets Manager")
    # With a NAT gateway (HandlerEgress), the interface endpoints still created: the small profile drops
    # them all (the functions reach those APIs through the NAT); None: the same as without one.
    endpoints_with_nat: tuple[str, ...] | None = None
    # Bytes a job sends to AWS APIs through the NAT when it replaces the endpoints: the relay's worker
    # invocation (~3 KB with TLS and headers, one per batch of 10) and the odd Secrets Manager read.
    aws_via_nat_kb: float = 0.5
    kafka: str = "msk-serverless"
    kafka_brokers: int = 0  # msk-provisioned: brokers, one per AZ or a multiple
    kafka_broker: str = "t3_small"  # prices.toml's msk_broker_<type>_hour
    kafka_volume_gb: float = 10  # msk-provisioned: each broker's EBS volume (KafkaBrokerVolumeGB)
    kafka_replication: int = 2  # msk-provisioned: copies of each record (the topics' replication factor)
    job_partitions: int = 8  # KafkaPartitions
    dead_letter_partitions: int = 8
    kafka_retention_days: float = 14  # KafkaRetentionHours' default, 336 h: the job life bound
    cache_engine: str = "valkey"
    cache_node: str = "t4g_small"  # prices.toml's cache_<engine>_<node>
    cache_nodes: int = 2  # primary + replica, Multi-AZ (every shard's nodes)
    cache_shards: int = 1  # RedisShards
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
    # The team map function (outside the VPC, issue 33): the relay asks it at most once a minute a
    # container (SLUICE_TEAM_MAP_TTL_S), and only once a route names a team's function.
    team_map_gb: float = 0.25
    team_map_s: float = 0.2
    secrets: int = 5  # the relay's, gateway's, operator's and worker's Redis users, the job id key
    alarm_metrics: int = 19
    dashboards: int = 1
    custom_metrics: int = 20  # EMF metric/dimension series of the service-wide metrics
    retention_days: float = 14  # RetentionDays: finished jobs' items
    # per job with an Idempotency-Key (docs/cost.md, "Per job"): the idempotency record's 1 (one put since
    # issue 33, benchmarks/bench_keyed.py; Powertools wrote it twice), the grant, the result; the relay
    # writes no ``queued`` for a keyed id since issue 33 (benchmarks/bench_per_job.py)
    wru_keyed: float = 3
    wru_unkeyed: float = 2
    rru: float = 1  # the relay's relay_view read

    def __post_init__(self) -> None:
        if self.kafka not in KAFKA_KINDS or self.api not in API_KINDS:
            raise InvalidInput(f"profile {self.name}: the model prices kafka {', '.join(KAFKA_KINDS)} and "
                               f"api {', '.join(API_KINDS)}, not {self.kafka!r} and {self.api!r}")


STANDARD = Profile("standard")
SMALL = Profile("small", azs=2, endpoints_with_nat=(), kafka="msk-provisioned", kafka_brokers=2,
                cache_node="t4g_micro", cache_nodes=1, api="http", alarm_metrics=19)
LARGE = Profile("large", job_partitions=32, cache_node="r7g_large", cache_nodes=6, cache_shards=3,
                relay_groups=4, alarm_metrics=23)

PROFILES: dict[str, Profile] = {"small": SMALL, "standard": STANDARD, "large": LARGE}


def profile(name: str) -> Profile:
    """The profile called ``name``; an unknown name is refused, naming the known ones."""
    found = PROFILES.get(name)
    if found is None:
        raise InvalidInput(f"unknown profile {name!r}: known profiles are {', '.join(PROFILES)}")
    return found
