"""The cost model: a month of Sluice, line by line, next to SQS + Lambda doing the same work.

Pure arithmetic on a ``PriceBook`` (prices.toml), a ``Profile`` (what the deploy creates) and a
``Workload`` (jobs a month, the handler's run time, the egress choice). Every line keeps the
arithmetic it was computed by, in words, so that docs/cost.md's tables (``sluice_dev.cost.doc``)
and ``sluice cost`` show how each figure was reached. The comparison has the same front door (API
Gateway's REST API, its access logs) and the same handler time on both sides; SQS + Lambda then needs
no Kafka, no Redis, no VPC and no NAT, and writes no fencing token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from sluice.core.errors import InvalidInput
from sluice_dev.cost.numbers import count, usd
from sluice_dev.cost.prices import PriceBook
from sluice_dev.cost.profiles import Profile

EGRESS_CHOICES = ("none", "nat-single", "nat-per-az")  # template.yaml's HandlerEgress (nat gateways)
# What a job sends and receives through the NAT gateway when egress is chosen: one call to an
# outside API, a small JSON request and response with TLS's handshake (~6 KB) around them.
DEFAULT_EGRESS_KB = 10.0
MAX_JOBS_PER_MONTH = 1e12  # 380,000 jobs a second: past any account's Lambda and API Gateway quotas
MAX_HANDLER_SECONDS = 900.0  # Lambda's longest invocation
MAX_EGRESS_KB = 1e6  # 1 GB a job
GB = 1e6  # KB in a GB, as AWS bills (decimal)
DAYS_PER_MONTH = 30  # a GB kept d days is d/30 GB-month
# The gateway's lines a job before issue 33's cut (JobShape.gateway_log_kb): Lambda's three and the handler's
# EMF count, 204 B with the service dimension the template's POWERTOOLS_SERVICE_NAME adds (bench_log_bytes;
# the 168 B this model used was measured without it).
GATEWAY_LOG_KB_BEFORE = 0.265 + 0.204
CACHE_ENGINES = {"valkey": "Valkey", "redis": "Redis OSS"}  # template.yaml's CacheEngine


@dataclass(frozen=True)
class JobShape:
    """The job costed (docs/cost.md, "The configuration costed"): a 1 KB JSON payload, a 200 B result."""

    record_kb: float = 1.5  # a Kafka record: the payload and its envelope
    # The jobs item holds no payload: its attributes and the 200 B result, 527 B measured
    # (benchmarks/bench_per_job.py, issue 33), + the 100 B DynamoDB bills per item for storage.
    item_kb: float = 0.65
    # CloudWatch Logs, per job (issue 33, benchmarks/bench_log_bytes.py): the worker's own, measured, one
    # "job succeeded" line (440 B) and EMF flushed once a drain of 10 (63 B): 820 + 63 B before issue 33
    # cut "job started" to DEBUG. Both sides write the same structured line and metrics a job.
    worker_log_kb: float = 0.503
    # Lambda's START, END and REPORT lines of one invocation (text format: 71 + 52 + 142 B with a request
    # id, formatted as Lambda writes them, not measured): both workers write them once a batch.
    platform_log_kb: float = 0.265
    # Sluice's gateway function, once a job: nothing for a request it answers 2xx (issue 33: Lambda's
    # JSON log format at system level WARN writes no START or REPORT for an invocation that succeeds, and
    # the handler counts only answers that are not 2xx; benchmarks/bench_log_bytes.py): it wrote
    # GATEWAY_LOG_KB_BEFORE.
    gateway_log_kb: float = 0.0
    access_log_kb: float = 0.7  # one access log line per request (the template's format)
    sqs_result_kb: float = 0.3  # SQS + Lambda's result item (no payload, no token)


@dataclass(frozen=True)
class SqsShape:
    """SQS + Lambda for the same work: API Gateway's direct SQS integration, a standard queue, the
    worker behind an event source mapping (batches of 10), results in DynamoDB, unfenced."""

    requests_per_job: float = 1.2  # send 1, receive 0.1 and delete 0.1 (batches of 10)
    worker_overhead_s: float = 0.010
    batch: int = 10
    result_wru: float = 1
    dedupe_wru: float = 2  # a dedupe table to match the Idempotency-Key (put + update)
    pollers: int = 5  # the event source mapping's long polls while the queue is empty
    poll_s: float = 20


@dataclass(frozen=True)
class Workload:
    jobs_per_month: float
    handler_seconds: float = 0.0
    keyed: bool = True  # each enqueue sends an Idempotency-Key
    egress: str = "none"
    egress_kb_per_job: float = DEFAULT_EGRESS_KB  # through the NAT gateway, when egress is chosen
    shape: JobShape = field(default_factory=JobShape)

    def __post_init__(self) -> None:
        bounded("jobs per month", self.jobs_per_month, MAX_JOBS_PER_MONTH)
        bounded("handler seconds", self.handler_seconds, MAX_HANDLER_SECONDS)
        bounded("egress KB per job", self.egress_kb_per_job, MAX_EGRESS_KB)
        if self.egress not in EGRESS_CHOICES:
            raise InvalidInput(f"egress {self.egress!r} is not one of {', '.join(EGRESS_CHOICES)}")


def bounded(what: str, value: float, most: float) -> None:
    """Refuse ``value`` unless it is a finite number from 0 to ``most`` (the CLI's inputs, the model's)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidInput(f"{what} must be a finite number, not {value!r}")
    if not 0 <= value <= most:
        raise InvalidInput(f"{what} must be between 0 and {count(most)}, not {count(value)}")


@dataclass(frozen=True)
class Line:
    name: str
    arithmetic: str
    monthly: float  # USD a month
    fixed: bool  # paid whether or not a job runs


@dataclass(frozen=True)
class Bill:
    name: str
    jobs_per_month: float
    lines: tuple[Line, ...]

    @property
    def fixed(self) -> float:
        return sum(line.monthly for line in self.lines if line.fixed)

    @property
    def variable(self) -> float:
        return sum(line.monthly for line in self.lines if not line.fixed)

    @property
    def monthly(self) -> float:
        return self.fixed + self.variable

    @property
    def per_million(self) -> float | None:
        """USD per million jobs, fixed share included; None for a month without jobs."""
        return self.monthly / (self.jobs_per_month / 1e6) if self.jobs_per_month else None

    def line(self, name: str) -> Line:
        (found,) = [line for line in self.lines if line.name == name]
        return found


@dataclass(frozen=True)
class Estimate:
    profile: str
    workload: Workload
    sluice: Bill
    sqs: Bill

    @property
    def ratio(self) -> float:
        """Sluice's month over SQS + Lambda's for the same work."""
        return self.sluice.monthly / self.sqs.monthly


def estimate(workload: Workload, profile: Profile, prices: PriceBook) -> Estimate:
    return Estimate(profile.name, workload, sluice(workload, profile, prices),
                    sqs_lambda(workload, prices, profile.api, profile.worker_gb))


def nat_gateways(egress: str, profile: Profile) -> int:
    return {"none": 0, "nat-single": 1, "nat-per-az": profile.azs}[egress]


def interface_endpoints(egress: str, profile: Profile) -> tuple[str, ...]:
    """The interface endpoints the deploy creates: a profile may drop some when a NAT gateway is the way
    out (template.yaml's condition ``CreateInterfaceEndpoints``)."""
    if nat_gateways(egress, profile) and profile.endpoints_with_nat is not None:
        return profile.endpoints_with_nat
    return profile.interface_endpoints


# ------------------------------------------------------------------ Sluice


def fixed(name: str, arithmetic: str, monthly: float) -> Line:
    return Line(name, arithmetic, monthly, True)


def variable(name: str, arithmetic: str, monthly: float) -> Line:
    return Line(name, arithmetic, monthly, False)


def sluice(workload: Workload, profile: Profile, prices: PriceBook) -> Bill:
    lines = [*_fixed(workload, profile, prices), *_variable(workload, profile, prices)]
    return Bill(f"Sluice ({profile.name})", workload.jobs_per_month, tuple(lines))


def _fixed(workload: Workload, p: Profile, prices: PriceBook) -> list[Line]:
    hours = prices.hours_per_month
    h = count(hours)
    out = []
    if p.kafka == "msk-serverless":
        cluster = prices.usd("msk_serverless_cluster_hour")
        out.append(fixed("MSK Serverless cluster", f"{usd(cluster)} × {h}", cluster * hours))
        per = prices.usd("msk_serverless_partition_hour")
        partitions = p.job_partitions + p.dead_letter_partitions
        split = f"{p.job_partitions} + {p.dead_letter_partitions} dead-letter"
        out.append(fixed("MSK partitions", f"{partitions} ({split}) × {usd(per)} × {h}",
                         partitions * per * hours))
    if p.kafka == "msk-provisioned":
        broker = prices.usd(f"msk_broker_{p.kafka_broker}_hour")
        kind = f"kafka.{p.kafka_broker.replace('_', '.')}"
        out.append(fixed("MSK brokers", f"{p.kafka_brokers} × {kind} × {usd(broker)} × {h}",
                         p.kafka_brokers * broker * hours))
        floor, per_gb = p.kafka_brokers * p.kafka_volume_gb, prices.usd("msk_broker_storage")
        out.append(fixed("MSK broker storage", f"{p.kafka_brokers} × {count(p.kafka_volume_gb)} GB × "
                         f"{usd(per_gb)}", floor * per_gb))
    node = prices.usd(f"cache_{p.cache_engine}_{p.cache_node}")
    kind = f"cache.{p.cache_node.replace('_', '.')}, {CACHE_ENGINES[p.cache_engine]}"
    shards = f" ({p.cache_shards} shards)" if p.cache_shards > 1 else ""
    out.append(fixed("ElastiCache", f"{p.cache_nodes}{shards} × {kind} × {usd(node)} × {h}",
                     p.cache_nodes * node * hours))
    endpoints = interface_endpoints(workload.egress, p)
    endpoint, services = prices.usd("endpoint_az_hour"), len(endpoints)
    if endpoints:
        names = ", ".join(endpoints)
        out.append(fixed("Interface endpoints",
                         f"{services} services ({names}) × {p.azs} AZs × {usd(endpoint)} × {h}",
                         services * p.azs * endpoint * hours))
    gb_s, request = prices.usd("lambda_gb_second"), prices.usd("lambda_requests")
    runs = 60 * hours * p.relay_groups
    relay_gb_s = p.relay_gb * p.relay_run_s * runs
    groups = f" × {p.relay_groups} partition groups" if p.relay_groups > 1 else ""
    out.append(fixed("Relay Lambda", f"{count(p.relay_gb)} GB × {count(p.relay_run_s)} s × 60 × {h}{groups}"
                     f" = {count(relay_gb_s)} GB-s × {usd(gb_s)}, + {count(runs)} requests × {usd(request)} "
                     "/ M (runs overlap at the hand-over)", relay_gb_s * gb_s + runs * request / 1e6))
    nets = 60 * hours
    net_gb_s = nets * p.safety_net_s * p.worker_gb
    out.append(fixed("Safety net (worker)", f"{count(nets)} × {count(p.safety_net_s)} s × "
                     f"{count(p.worker_gb)} GB = {count(net_gb_s)} GB-s × {usd(gb_s)}, + {count(nets)} "
                     "requests",
                     net_gb_s * gb_s + nets * request / 1e6))
    reads = 2 * 60 * hours * p.relay_groups  # two relay runs overlap; each container reads once a minute
    team_gb_s = reads * p.team_map_gb * p.team_map_s
    out.append(fixed("Team map function", f"at most {count(reads)} reads (2 relay runs × 60 × {h}{groups}, "
                     f"once a team's route exists) × {count(p.team_map_gb)} GB × {count(p.team_map_s)} s = "
                     f"{count(team_gb_s)} GB-s × {usd(gb_s)}, + {count(reads)} requests",
                     team_gb_s * gb_s + reads * request / 1e6))
    secret, alarm = prices.usd("secret_month"), prices.usd("alarm_metric_month")
    dashboard, metric = prices.usd("dashboard_month"), prices.usd("custom_metric_month")
    out += [
        fixed("Secrets Manager", f"{p.secrets} secrets (4 Redis users, the job id key; a team's Redis user "
              f"adds one) × {usd(secret)}", p.secrets * secret),
        fixed("Alarms", f"{p.alarm_metrics} alarm metrics × {usd(alarm)}", p.alarm_metrics * alarm),
        fixed("Dashboard", f"{p.dashboards} × {usd(dashboard)}", p.dashboards * dashboard),
        fixed("Custom metrics (EMF)", f"{p.custom_metrics} metric/dimension series × {usd(metric)}",
              p.custom_metrics * metric),
    ]
    gateways = nat_gateways(workload.egress, p)
    if gateways:
        nat = prices.usd("nat_hour")
        out.append(fixed("NAT gateways (handler egress)",
                         f"{gateways} × {usd(nat)} × {h} ({workload.egress})", gateways * nat * hours))
    return out


def api_requests(jobs: float, prices: PriceBook, api: str) -> Line:
    """The front door: one API Gateway request per job (``api``: a profile's REST or HTTP API), through the
    price's monthly tiers."""
    price = prices[f"api_{api}_requests"]
    parts = price.split(jobs / 1e6)
    if len(parts) == 1:
        text = f"{count(jobs)} × {usd(parts[0][1])} / M"
    else:
        text = " + ".join(f"{count(m)} M × {usd(u)}" for m, u in parts) + " (monthly tiers)"
    return variable("API Gateway (enqueue)", text, price.for_millions(jobs / 1e6))


def _variable(workload: Workload, p: Profile, prices: PriceBook) -> list[Line]:
    jobs, shape = workload.jobs_per_month, workload.shape
    n = count(jobs)
    gb_s, request = prices.usd("lambda_gb_second"), prices.usd("lambda_requests")
    wru, rru = prices.usd("dynamodb_write"), prices.usd("dynamodb_read")
    writes = p.wru_keyed if workload.keyed else p.wru_unkeyed
    key = "with" if workload.keyed else "without"
    gateway = f"{count(p.gateway_gb)} GB × {count(p.gateway_s)} s × {n} × {usd(gb_s)}"
    out = [
        api_requests(jobs, prices, p.api),
        variable("Gateway Lambda compute", gateway, p.gateway_gb * p.gateway_s * jobs * gb_s),
        variable("Gateway Lambda requests", f"{n} × {usd(request)} / M", jobs * request / 1e6),
        variable("DynamoDB writes", f"{count(writes)} WRU ({key} an Idempotency-Key) × {n} × {usd(wru)} / M",
                 writes * jobs * wru / 1e6),
        variable("DynamoDB reads", f"{count(p.rru)} RRU × {n} × {usd(rru)} / M", p.rru * jobs * rru / 1e6),
    ]
    if p.kafka == "msk-serverless":
        out += _msk(workload, p, prices)
    if p.kafka == "msk-provisioned":
        out += _msk_provisioned(workload, p, prices)
    work = f"{count(p.worker_gb)} GB × {count(p.worker_overhead_s)} s × {n} × {usd(gb_s)}"
    out.append(variable("Worker Lambda compute", work, p.worker_gb * p.worker_overhead_s * jobs * gb_s))
    out += _handler_time(workload, p.worker_gb, prices)
    invocations = jobs / p.worker_batch
    out.append(variable("Worker Lambda requests", f"1 invocation per {p.worker_batch} jobs: "
                        f"{count(invocations)} × {usd(request)} / M", invocations * request / 1e6))
    out += _logs(workload, prices, p.worker_batch, gateway=True)
    gb = shape.item_kb * jobs / GB
    gb_month = gb * p.retention_days / DAYS_PER_MONTH
    storage, pitr = prices.usd("dynamodb_storage"), prices.usd("dynamodb_pitr")
    kept = f"{count(p.retention_days)}/{DAYS_PER_MONTH} GB-month"
    out += [
        variable("DynamoDB storage", f"jobs item ~{count(shape.item_kb)} KB kept {count(p.retention_days)} "
                 f"days: {count(gb)} GB × {kept} × {usd(storage)}", gb_month * storage),
        variable("DynamoDB PITR", f"the same {count(round(gb_month, 4))} GB-month × {usd(pitr)}",
                 gb_month * pitr),
    ]
    if nat_gateways(workload.egress, p):
        kb, per = workload.egress_kb_per_job, prices.usd("nat_gb")
        out.append(variable("NAT data processed",
                            f"{count(kb)} KB a job × {n} = {count(kb * jobs / GB)} GB × {usd(per)}",
                            kb * jobs / GB * per))
        dropped = len(p.interface_endpoints) - len(interface_endpoints(workload.egress, p))
        if dropped:
            kb = p.aws_via_nat_kb
            out.append(variable("NAT data processed (AWS APIs, no endpoints)",
                                f"~{count(kb)} KB a job (the relay's worker invocations) × {n} = "
                                f"{count(kb * jobs / GB)} GB × {usd(per)}", kb * jobs / GB * per))
    return out


def _msk_provisioned(workload: Workload, p: Profile, prices: PriceBook) -> list[Line]:
    """Provisioned brokers bill no bytes and no replication, but a client's bytes to a broker in another AZ
    cross it (half of them with 2 AZs, evenly spread), and the retention needs disk above the floor."""
    kb, days, jobs = workload.shape.record_kb, p.kafka_retention_days, workload.jobs_per_month
    gb = kb * jobs / GB
    cross, stored = prices.usd("data_cross_az_gb"), prices.usd("msk_broker_storage")
    share = (p.azs - 1) / p.azs
    crossing = gb * 2 * share  # written once by the gateway, read once by the relay
    kept = gb * days / DAYS_PER_MONTH * p.kafka_replication
    floor = p.kafka_brokers * p.kafka_volume_gb
    return [
        variable("Kafka cross-AZ traffic", f"{count(gb)} GB in + {count(gb)} GB out, "
                 f"{count(p.azs - 1)}/{p.azs} of it to another AZ = {count(crossing)} GB × 2 directions × "
                 f"{usd(cross)}", crossing * 2 * cross),
        variable("MSK broker storage above the floor", f"{count(gb)} GB × {count(days)}/{DAYS_PER_MONTH} × "
                 f"{p.kafka_replication} copies = {count(kept)} GB, less the {count(floor)} GB provisioned, "
                 f"× {usd(stored)}", max(0.0, kept - floor) * stored),
    ]


def _msk(workload: Workload, p: Profile, prices: PriceBook) -> list[Line]:
    """MSK Serverless's bytes: each record in once, read once by the relay, kept for the retention."""
    kb, days = workload.shape.record_kb, p.kafka_retention_days
    gb = kb * workload.jobs_per_month / GB
    into, out_of = prices.usd("msk_serverless_in_gb"), prices.usd("msk_serverless_out_gb")
    stored = prices.usd("msk_serverless_storage")
    return [
        variable("MSK data in", f"{count(kb)} KB a record (payload + envelope) × "
                 f"{count(workload.jobs_per_month)} = {count(gb)} GB × {usd(into)}", gb * into),
        variable("MSK data out", f"{count(gb)} GB (the relay reads each record once) × {usd(out_of)}",
                 gb * out_of),
        variable("MSK storage", f"{count(gb)} GB kept {count(days)} days = {count(gb)} × {count(days)}/"
                 f"{DAYS_PER_MONTH} GB-month × {usd(stored)}", gb * days / DAYS_PER_MONTH * stored),
    ]


def _handler_time(workload: Workload, worker_gb: float, prices: PriceBook) -> list[Line]:
    """Your handler's own run time: the same on any Lambda-based queue (none for a no-op handler)."""
    if not workload.handler_seconds:
        return []
    gb_s = prices.usd("lambda_gb_second")
    seconds = workload.handler_seconds * workload.jobs_per_month
    return [variable("Handler run time", f"{count(worker_gb)} GB × {count(workload.handler_seconds)} s × "
                     f"{count(workload.jobs_per_month)} × {usd(gb_s)}", worker_gb * seconds * gb_s)]


def _logs(workload: Workload, prices: PriceBook, batch: int, gateway: bool) -> list[Line]:
    """Logs both sides write: the functions' own (the worker's line and EMF a job, Lambda's platform lines
    once a worker invocation, a ``batch``; with ``gateway``, Sluice's gateway function's, a job), and the
    front door's access log."""
    jobs, shape, per = workload.jobs_per_month, workload.shape, prices.usd("logs_ingest_gb")
    kb = shape.worker_log_kb + shape.platform_log_kb / batch + (shape.gateway_log_kb if gateway else 0)
    logs, access = kb * jobs / GB, shape.access_log_kb * jobs / GB
    ours = ""
    if gateway:
        why = "" if shape.gateway_log_kb else ": none for a 2xx answer"
        ours = f" + {count(shape.gateway_log_kb)} KB (the gateway's{why})"
    return [
        variable("CloudWatch Logs", f"{count(shape.worker_log_kb)} KB (the worker's line and EMF) + "
                 f"{count(shape.platform_log_kb)} KB (Lambda's lines) × 1/{batch} worker invocation{ours} = "
                 f"{count(round(kb, 4))} KB a job = {count(round(logs, 4))} GB × {usd(per)}", logs * per),
        variable("API access logs", f"one ~{count(shape.access_log_kb)} KB JSON line a request = "
                 f"{count(access)} GB × {usd(per)}", access * per),
    ]


# ------------------------------------------------------------------ SQS + Lambda

SQS = SqsShape()


def sqs_lambda(workload: Workload, prices: PriceBook, api: str = "rest", worker_gb: float = 1.0,
               sqs: SqsShape = SQS) -> Bill:
    """SQS + Lambda for the same work behind the same front door (``api``, the profile's)."""
    jobs, shape = workload.jobs_per_month, workload.shape
    n = count(jobs)
    per_request, gb_s = prices.usd("sqs_requests"), prices.usd("lambda_gb_second")
    request, wru = prices.usd("lambda_requests"), prices.usd("dynamodb_write")
    polls = sqs.pollers * prices.hours_per_month * 3600 / sqs.poll_s
    invocations = jobs / sqs.batch
    gb = shape.sqs_result_kb * jobs / GB
    storage = prices.usd("dynamodb_storage")
    lines = [
        fixed("Idle polling (event source mapping)", f"{sqs.pollers} long polls of {count(sqs.poll_s)} s "
              f"around the clock = {count(polls)} requests × {usd(per_request)} / M",
              polls * per_request / 1e6),
        api_requests(jobs, prices, api),
        variable("SQS requests", f"send 1 + receive 0.1 + delete 0.1 (batches of {sqs.batch}) = "
                 f"{count(sqs.requests_per_job)} × {n} × {usd(per_request)} / M",
                 sqs.requests_per_job * jobs * per_request / 1e6),
        variable("Worker Lambda compute", f"{count(worker_gb)} GB × {count(sqs.worker_overhead_s)} s × {n} × "
                 f"{usd(gb_s)}", worker_gb * sqs.worker_overhead_s * jobs * gb_s),
        *_handler_time(workload, worker_gb, prices),
        variable("Worker Lambda requests", f"{count(invocations)} × {usd(request)} / M",
                 invocations * request / 1e6),
        variable("Result write (DynamoDB, unfenced)", f"{count(sqs.result_wru)} WRU × {n} × {usd(wru)} / M",
                 sqs.result_wru * jobs * wru / 1e6),
    ]
    if workload.keyed:
        lines.append(variable("Dedupe table (to match the Idempotency-Key)",
                              f"{count(sqs.dedupe_wru)} WRU × {n} × {usd(wru)} / M",
                              sqs.dedupe_wru * jobs * wru / 1e6))
    lines += _logs(workload, prices, sqs.batch, gateway=False)
    lines.append(variable("Result storage", f"a {count(shape.sqs_result_kb)} KB item kept 14 days, no PITR: "
                          f"{count(gb)} GB × 14/{DAYS_PER_MONTH} × {usd(storage)}",
                          gb * 14 / DAYS_PER_MONTH * storage))
    return Bill("SQS + Lambda", jobs, tuple(lines))


# ------------------------------------------------------------------ self-hosting


def self_hosted(prices: PriceBook) -> Bill:
    """Slack's design (Kafka in front, a relay into Redis, a worker fleet) run by hand on EC2 across 3 AZs,
    with the headroom of docs/cost.md's 1,000 M jobs a month: its machines, all fixed."""
    h = prices.hours_per_month

    def hosts(n: int, kind: str) -> tuple[str, float]:
        price = prices.usd(f"ec2_{kind.replace('.', '_')}")
        return f"{n} × {kind} × {usd(price)} × {count(h)}", n * price * h

    alb, lcu, gp3 = prices.usd("alb_hour"), prices.usd("alb_lcu_hour"), prices.usd("ebs_gp3")
    gateway_text, gateway = hosts(2, "t4g.small")
    balancer = f"ALB ({usd(alb)} × {count(h)} + ~1 LCU × {usd(lcu)} × {count(h)})"
    rows = [
        ("Kafka brokers", *hosts(3, "m7g.large")),
        ("Kafka storage", f"3 × 500 GB gp3 × {usd(gp3)}", 3 * 500 * gp3),
        ("KRaft controllers", *hosts(3, "t4g.small")),
        ("Redis (primary + replica)", *hosts(2, "r7g.large")),
        ("Relay", *hosts(2, "t4g.small")),
        ("Enqueue gateway", f"{gateway_text} + {balancer}", gateway + alb * h + lcu * h),
        ("Workers", *hosts(2, "c7g.large")),
    ]
    return Bill("Self-hosted (EC2)", 0, tuple(fixed(name, text, monthly) for name, text, monthly in rows))
