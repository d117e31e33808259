"""docs/cost.md's generated regions: every table of figures the model computes, rewritten in place.

A region sits between ``<!-- cost:NAME ... -->`` and ``<!-- /cost:NAME -->``; ``rewrite`` replaces what
is between them with ``REGIONS[NAME]()``'s text and leaves the prose around them alone. ``make cost``
(``python -m sluice_dev.cost``) writes the file; tests/unit/test_cost_doc.py fails while the committed
doc differs from what the model computes, so its arithmetic cannot drift from the prices again.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path

from sluice.core.errors import ConfigError
from sluice_dev.cost.model import (
    DEFAULT_EGRESS_KB,
    EGRESS_CHOICES,
    GATEWAY_LOG_KB_BEFORE,
    Bill,
    Estimate,
    JobShape,
    Line,
    Workload,
    estimate,
    nat_gateways,
    self_hosted,
)
from sluice_dev.cost.numbers import count, millions, money, usd
from sluice_dev.cost.prices import Price, load
from sluice_dev.cost.profiles import PROFILES, STANDARD, Profile

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "cost.md"
VOLUMES = (1e6, 10e6, 100e6, 1e9)
REGION = re.compile(r"(<!-- cost:(?P<name>[a-z-]+)\b[^>]*-->\n)(?P<body>.*?)(<!-- /cost:(?P=name) -->)", re.S)


def prose(template: str, **values: object) -> str:
    """One paragraph: ``template``'s words joined by single spaces, then its ``{names}`` filled in."""
    return " ".join(template.split()).format(**values)


def ratio(x: float) -> str:
    return f"{x:,.0f}×" if x >= 10 else f"{x:.2f}×"


def at(jobs: float, profile: Profile = STANDARD, *, handler_seconds: float = 0.0, keyed: bool = True,
       egress: str = "none") -> Estimate:
    return estimate(Workload(jobs, handler_seconds, keyed, egress), profile, load())


def per_million(bill: Bill) -> str:
    return money(bill.per_million or 0)


def _table(head: Iterable[str], rows: Iterable[Iterable[str]], right: int = 1) -> str:
    """A markdown table; the last ``right`` columns are numbers, right-aligned."""
    head = list(head)
    align = ["---"] * (len(head) - right) + ["---:"] * right
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join(align) + " |"]
    lines += [("| " + " | ".join(row) + " |").replace("|  |", "| |") for row in rows]
    return "\n".join(lines)


def _lines(lines: Iterable[Line], total: str, value: float, per: str) -> str:
    rows = [[line.name, line.arithmetic, money(line.monthly)] for line in lines]
    rows.append([f"**{total}**", "", f"**{money(value)}**"])
    return _table(["Line", "Arithmetic", per], rows)


def _price_text(price: Price) -> str:
    if price.usd is not None:
        return f"{usd(price.usd)} per {price.unit}"
    tiers = []
    for i, tier in enumerate(price.tiers):
        which = "next" if i else "first"
        width = "the rest" if tier.millions is None else f"{which} {count(tier.millions)} M"
        tiers.append(f"{usd(tier.usd)} ({width})")
    return f"{', '.join(tiers)} per million, a month"


def _source(price: Price) -> str:
    url = price.source.split(" ")[0]
    return f"[{url.split('//')[1].rstrip('/')}]({url}), {price.read.isoformat()}"


def prices() -> str:
    book = load()
    rows = [[p.service, p.dimension, _price_text(p), _source(p)] for p in book.prices.values()]
    hours = book.hours_per_month
    return (_table(["Service", "Dimension", "Price", "Source, read"], rows, right=0)
            + f"\n\nA month is {count(hours)} hours ({count(hours * 3600)} seconds).")


def config() -> str:
    p = STANDARD
    return "\n".join([
        prose("""- {azs} Availability Zones; interface endpoints for {endpoints} in each ({endpoint_azs}
                 endpoint-AZs); gateway endpoints for DynamoDB and S3.""",
              azs=p.azs, endpoints=", ".join(p.interface_endpoints),
              endpoint_azs=len(p.interface_endpoints) * p.azs),
        prose("""- MSK Serverless, IAM auth; job topic with {jobs} partitions plus a dead-letter topic of
                 {dead}; {days}-day retention (`KafkaRetentionHours`, {hours} h: the job life bound).""",
              jobs=p.job_partitions, dead=p.dead_letter_partitions, days=count(p.kafka_retention_days),
              hours=count(p.kafka_retention_days * 24)),
        prose("- ElastiCache Valkey, {n} × cache.{node} (primary + replica, Multi-AZ).",
              n=p.cache_nodes, node=p.cache_node.replace("_", ".")),
        prose("""- Gateway Lambda {gateway:.0f} MB; relay Lambda {relay:.0f} MB, {groups} partition group
                 (one run of {run} s starting each minute: two overlap for {overlap} s of every minute);
                 worker Lambda {worker:.0f} MB, batch {batch}; safety net every minute.""",
              gateway=p.gateway_gb * 1024, relay=p.relay_gb * 1024, groups=p.relay_groups,
              run=count(p.relay_run_s), overlap=count(p.relay_run_s - 60), worker=p.worker_gb * 1024,
              batch=p.worker_batch),
    ])


def variable() -> str:
    base, one_second = at(1e6).sluice, at(1e6, handler_seconds=1.0).sluice
    handler = one_second.line("Handler run time")
    gateway = base.line("Gateway Lambda compute").monthly + base.line("Gateway Lambda requests").monthly
    poll = [base.line("API Gateway (enqueue)").monthly, gateway,
            base.line("DynamoDB reads").monthly / STANDARD.rru, base.line("API access logs").monthly]
    variable_lines = [line for line in base.lines if not line.fixed]
    table = _lines(variable_lines, "Total", base.variable, "$ per million jobs")
    return (table + "\n\n" + prose(
        """The total adds the lines before rounding. Add **${handler} per million jobs for each second**
           your handler runs at {gb} GB ({arithmetic}; `sluice cost --handler-seconds`), and {poll} =
           ${poll_total} per million status polls (API Gateway, gateway Lambda, one read, its access log
           line).""",
              handler=money(handler.monthly), gb=count(STANDARD.worker_gb), arithmetic=handler.arithmetic,
              poll=" + ".join("$" + money(x) for x in poll), poll_total=money(sum(poll))))


def fixed() -> str:
    base = at(0).sluice
    msk = sum(line.monthly for line in base.lines if line.name.startswith("MSK"))
    existing = at(0, replace(STANDARD, kafka="existing")).sluice.fixed
    dev = at(0, replace(STANDARD, azs=2, job_partitions=4, dead_letter_partitions=4)).sluice
    dev_lines = [line for line in dev.lines if line.fixed]
    return (_lines([line for line in base.lines if line.fixed], "Total", base.fixed, "$ per month")
            + "\n\n" + prose("""MSK Serverless (cluster and partitions, ${msk}) is {share:.0%} of it. With
                                an existing Kafka cluster (`KafkaBootstrapServers`), the floor drops to
                                **${existing}** a month; a dev stack with 2 AZs (`NewVpcSubnetCount=2`,
                                {endpoint_azs} endpoint-AZs) and 4+4 partitions costs {parts} + {rest}
                                (safety net, team map function, secrets, alarms, dashboard, custom
                                metrics) = ${dev} ≈
                                **${dev_round}/month** idle. No NAT gateway is in these figures: the default
                                deploy has none ("Handler egress" below).""",
              msk=money(msk), share=msk / base.fixed, existing=money(existing),
              endpoint_azs=2 * len(STANDARD.interface_endpoints),
              parts=" + ".join(money(line.monthly) for line in dev_lines[:5]),
              rest=" + ".join(money(line.monthly) for line in dev_lines[5:]),
              dev=money(dev.fixed), dev_round=f"{dev.fixed:,.0f}"))


def volume() -> str:
    rows = []
    for jobs in VOLUMES:
        e = at(jobs)
        rows.append([f"{millions(jobs)} ({jobs / 2_628_000:,.1f}/s)", money(e.sluice.fixed / (jobs / 1e6)),
                     money(e.sluice.variable / (jobs / 1e6)), f"**{per_million(e.sluice)}**",
                     per_million(e.sqs), ratio(e.ratio)])
    base = at(1e6).sluice
    head = ["Jobs per month (average rate)", "Fixed share", "Variable", "**Sluice, $ per million jobs**",
            "SQS + Lambda", "Sluice ÷ SQS"]
    return (prose("""Cost per million = ${variable} + ${fixed} / (millions of jobs a month), less API
                     Gateway's cheaper tiers above 333 M requests a month.""",
                  variable=money(base.variable), fixed=money(base.fixed))
            + "\n\n" + _table(head, rows, right=5))


# What Sluice pays that SQS + Lambda does not, at 1,000 M jobs a month: (what, Sluice's lines, SQS's lines).
_DIFFERENCE = (
    ("the DynamoDB write SQS does without (the token grant)", ("DynamoDB writes",),
     ("Result write (DynamoDB, unfenced)", "Dedupe table (to match the Idempotency-Key)")),
    ("the gateway Lambda", ("Gateway Lambda compute", "Gateway Lambda requests"), ()),
    ("Kafka", ("MSK data in", "MSK data out", "MSK storage", "Kafka cross-AZ traffic",
               "MSK broker storage above the floor"), ()),
    ("the larger stored item with its PITR", ("DynamoDB storage", "DynamoDB PITR"), ("Result storage",)),
    ("the relay's read", ("DynamoDB reads",), ()),
    ("the worker's longer run", ("Worker Lambda compute",), ("Worker Lambda compute",)),
    ("the gateway's log lines", ("CloudWatch Logs",), ("CloudWatch Logs",)),
    ("less SQS's own requests", (), ("SQS requests",)),
)


def _difference(e: Estimate) -> str:
    per = e.workload.jobs_per_month / 1e6

    def total(bill: Bill, names: tuple[str, ...]) -> float:
        return sum(line.monthly for line in bill.lines if line.name in names) / per  # a profile's own

    parts = [("the fixed floor", (e.sluice.fixed - e.sqs.fixed) / per)]
    parts += [(what, total(e.sluice, ours) - total(e.sqs, theirs)) for what, ours, theirs in _DIFFERENCE]
    parts.sort(key=lambda p: -p[1])
    return ", ".join(f"{what} (${money(abs(x))})" for what, x in parts if money(abs(x)) != "0.00")


def sqs() -> str:
    base, hundred, big = at(1e6), at(100e6), at(1e9)
    (idle,) = [line for line in base.sqs.lines if line.fixed]
    extra = (big.sluice.per_million or 0) - (big.sqs.per_million or 0)
    table = _lines([line for line in base.sqs.lines if not line.fixed], "Total", base.sqs.variable,
                   "$ per million jobs")
    return table + "\n\n" + prose(
        """SQS + Lambda's only fixed cost is the event source mapping's idle polling ({idle}: ${idle_usd} a
           month; at volume its receives are in the SQS line) and it needs no VPC. So SQS is cheaper at
           every volume: {r1} at 1 M jobs a month (${s1} against ${q1} per million), {r100} at 100 M, and
           still {rb} at 1,000 M (${sb} against ${qb}), where Sluice's extra (${extra} per million) is
           {difference}; API Gateway, its access logs, the worker's own log line and the handler's own
           time cost the same on both sides.""",
        idle=idle.arithmetic, idle_usd=money(idle.monthly), r1=ratio(base.ratio), s1=per_million(base.sluice),
        q1=per_million(base.sqs), r100=ratio(hundred.ratio), rb=ratio(big.ratio), sb=per_million(big.sluice),
        qb=per_million(big.sqs), extra=money(extra), difference=_difference(big))


def egress() -> str:
    rows = []
    busy = 100e6
    for choice in EGRESS_CHOICES:
        idle, loaded = at(0, egress=choice), at(busy, egress=choice)
        nat_fixed = sum(line.monthly for line in idle.sluice.lines if line.name.startswith("NAT"))
        nat_busy = sum(line.monthly for line in loaded.sluice.lines if line.name.startswith("NAT"))
        rows.append([f"`{choice}`", str(nat_gateways(choice, STANDARD)), money(nat_fixed),
                     money(idle.sluice.fixed), money(nat_busy - nat_fixed), per_million(loaded.sluice),
                     ratio(loaded.ratio)])
    head = ["`HandlerEgress`", "NAT gateways", "NAT $ a month", "Idle $ a month", "NAT data at 100 M jobs",
            "$ per million at 100 M", "Sluice ÷ SQS"]
    return _table(head, rows, right=6) + "\n\n" + prose(
        """The NAT data line assumes **{kb} KB a job** through the gateway (one call to an outside API: a
           small JSON request and response and TLS's handshake), {per_gb} a GB processed in either
           direction: {gb} GB at 100 M jobs. `sluice cost --egress nat-single --egress-kb 50` prices another
           size. AWS's data transfer out to the internet is billed on the bytes a handler sends whether they
           leave through a NAT gateway or from a Lambda outside any VPC, so it is left out of both sides,
           like the handler's run time. SQS + Lambda pays no NAT: its functions need no VPC.""",
        kb=count(DEFAULT_EGRESS_KB), per_gb=usd(load().usd("nat_gb")),
        gb=count(DEFAULT_EGRESS_KB * busy / 1e6))


def selfhost() -> str:
    bill = self_hosted(load())
    big = at(1e9).sluice
    per = bill.monthly / 1000
    return _lines(bill.lines, "Total infrastructure", bill.monthly, "$ per month") + "\n\n" + prose(
        """Its variable cost is close to zero until the fleet is full (cross-AZ replication is about $0.06
           per million jobs), so at 1,000 M jobs a month it costs **${per} per million**, {times:.0f}× less
           than Sluice (${sluice}).""",
        per=money(per), times=(big.per_million or 0) / per, sluice=per_million(big))


# Issue 33's targets, each the small profile's: (what, jobs a month (0: idle), the most it may be).
TARGETS = (("Idle, $ a month (its own Kafka)", 0.0, 150.0),
           ("Sluice ÷ SQS + Lambda at 100 M jobs a month", 100e6, 1.5),
           ("Sluice ÷ SQS + Lambda at 1,000 M jobs a month", 1e9, 1.2))
TARGET_EGRESS = ("none", "nat-single")  # the small profile's results without a way out and with one NAT


def _verdict(value: float, most: float) -> str:
    return "met" if value <= most else f"**not met** (by {value - most:,.2f})"


def targets() -> str:
    """The small profile's result against each of issue 33's targets, with and without egress."""
    small = PROFILES["small"]
    rows = []
    for what, jobs, most in TARGETS:
        show = ratio if jobs else money
        for egress in TARGET_EGRESS:
            e = at(jobs, small, egress=egress)
            value = e.ratio if jobs else e.sluice.fixed
            rows.append([what, f"≤ {show(most)}", f"`{egress}`", show(value), _verdict(value, most)])
    table = _table(["Target (issue 33), `small` profile", "Goal", "`HandlerEgress`", "Model", "Result"], rows,
                   right=0)
    return table + "\n\n" + _why_not(small)


def _why_not(small: Profile) -> str:
    """Why the targets the model says are missed cannot be met without giving something up: the arithmetic."""
    big, hundred = at(1e9, small), at(100e6, small)
    bare = replace(small, interface_endpoints=())
    # the gateway's lines before issue 33, a request: $ per million jobs (KB × 10⁶ = GB)
    gateway_logs = GATEWAY_LOG_KB_BEFORE * load().usd("logs_ingest_gb")
    logged = estimate(Workload(1e9, shape=JobShape(gateway_log_kb=GATEWAY_LOG_KB_BEFORE)), small, load())
    grant = big.sluice.line("DynamoDB writes").monthly / 1e3 - sum(
        big.sqs.line(n).monthly for n in ("Result write (DynamoDB, unfenced)",
                                          "Dedupe table (to match the Idempotency-Key)")) / 1e3
    return prose(
        """The ratios. Without egress (the small profile's default, `HandlerEgress=none`) both are met: at
           1,000 M jobs a month SQS + Lambda costs ${q_big} per million, so 1.20× allows Sluice ${allow_big}
           more; it costs ${extra_big} more: {difference}. The last cut was the Idempotency-Key's record,
           written once since issue 33 (${record} per million keyed jobs: it was an "in progress" put and a
           "completed" update, docs/api.md, "One write a key"), so Sluice's DynamoDB writes cost
           ${sl_writes} a million (the key's record, the token grant that fences, the result) against
           SQS + Lambda's ${sq_writes} (its result and a dedupe table's put and update). What stays pays for
           a guarantee: Kafka's retention and the relay's read are replay after a Redis loss and cancels
           honoured before a job reaches Redis;
           the gateway Lambda is the front door's own code (ids minted with the stack's key, the
           Idempotency-Key, the Kafka produce), which API Gateway cannot do alone; together ${must} a
           million. The gateway's log lines (${gw_logs}: Lambda's START, END and REPORT lines and its EMF
           count of 2xx answers, a request) went in issue 33 too (Lambda's JSON log format at system level
           WARN, and no count of 2xx answers: "Log volume" above); with them the ratio would be
           {r_big_logs}. At 100 M jobs a month the fixed floor adds ${floor_hundred} per million: the ratio
           is {r_hundred} without egress ({r_bare} with no interface endpoint at all). With one NAT gateway
           neither ratio is met: the handlers' NAT data (${nat} per million, the handlers' own traffic to
           the internet, which SQS + Lambda, outside any VPC, does not pay) makes it {r_nat} at 100 M.""",
        record=money(load().usd("dynamodb_write")),
        sl_writes=money(big.sluice.line("DynamoDB writes").monthly / 1e3), sq_writes=money(sum(
            big.sqs.line(n).monthly for n in ("Result write (DynamoDB, unfenced)",
                                              "Dedupe table (to match the Idempotency-Key)")) / 1e3),
        q_big=per_million(big.sqs), allow_big=money(0.2 * (big.sqs.per_million or 0)),
        extra_big=money((big.sluice.per_million or 0) - (big.sqs.per_million or 0)),
        difference=_difference(big), grant=money(grant), must=money(grant + sum(
            line.monthly for line in big.sluice.lines if line.name in (
                "Kafka cross-AZ traffic", "MSK broker storage above the floor", "DynamoDB reads",
                "Gateway Lambda compute", "Gateway Lambda requests")) / 1e3),
        gw_logs=money(gateway_logs), r_big_logs=ratio(logged.ratio),
        floor_hundred=money(hundred.sluice.fixed / 100), r_hundred=ratio(hundred.ratio),
        r_bare=ratio(at(100e6, bare).ratio),
        nat=money(sum(line.monthly for line in at(100e6, small, egress="nat-single").sluice.lines
                      if line.name.startswith("NAT data")) / 100),
        r_nat=ratio(at(100e6, small, egress="nat-single").ratio)) + "\n\n" + _idle(small)


def _idle(small: Profile) -> str:
    """The small profile's idle month without egress, and what its interface endpoints are for."""
    idle, nat = at(0, small).sluice, at(0, small, egress="nat-single").sluice
    endpoints = idle.line("Interface endpoints").monthly
    outside = idle.line("Team map function").monthly
    before = endpoints / len(small.interface_endpoints) * (len(small.interface_endpoints) + 2)
    return prose(
        """Idle without egress. The small profile's {n} interface endpoints cost ${endpoints} a month ({n}
           × {azs} AZs × {hour} × {hours}): Lambda (the relay starts the workers and asks the team map
           function; a worker calls the internal function for `enqueue_many`; the operator asks the
           scheduler function) and Secrets Manager (every function in the VPC reads its Redis user's password
           and the job id key when it starts). The two rare calls that needed two more endpoints (${more}
           a month) are made outside the VPC since issue 33: the relay's team map read by the team map
           function (SSM; at most ${outside} a month, line "Team map function") and the operator's Scheduler
           calls by the scheduler function (a few invocations per schedule change: nothing the model
           shows), each invoked through the Lambda endpoint and admitting its one caller (docs/deploy.md,
           "Interface endpoints"). No function calls STS, so no profile has its endpoint. That leaves
           **${idle}** a month idle without egress, under ${goal}; with one NAT gateway (`nat-single`) the
           small profile drops both endpoints and costs ${nat}.""",
        n=len(small.interface_endpoints), endpoints=money(endpoints), azs=small.azs,
        hour=usd(load().usd("endpoint_az_hour")), hours=count(load().hours_per_month),
        more=money(before - endpoints), outside=money(outside), idle=money(idle.fixed),
        goal=money(TARGETS[0][2]), nat=money(nat.fixed))


def profiles() -> str:
    """Every profile side by side: what it creates, its idle month and its price per million jobs."""
    rows = []
    for name, p in PROFILES.items():
        kafka = {"msk-serverless": "MSK Serverless",
                 "msk-provisioned": f"{p.kafka_brokers} × kafka.{p.kafka_broker.replace('_', '.')}",
                 "existing": "existing"}[p.kafka]
        cache = f"{p.cache_nodes} × cache.{p.cache_node.replace('_', '.')}" + \
            (f" ({p.cache_shards} shards)" if p.cache_shards > 1 else "")
        idle, hundred, big = at(0, p), at(100e6, p), at(1e9, p)
        partitions = f"{p.job_partitions} + {p.dead_letter_partitions}"
        rows.append([f"`{name}`", str(p.azs), kafka, partitions, cache,
                     {"rest": "REST", "http": "HTTP"}[p.api], str(len(p.interface_endpoints)),
                     money(idle.sluice.fixed), per_million(hundred.sluice), ratio(hundred.ratio),
                     per_million(big.sluice), ratio(big.ratio)])
    head = ["Profile", "AZs", "Kafka", "Partitions", "Redis", "API", "Interface endpoints", "Idle $ a month",
            "$/M at 100 M", "÷ SQS", "$/M at 1,000 M", "÷ SQS"]
    small, standard = PROFILES["small"], PROFILES["standard"]
    no_nat, nat = at(0, small).sluice, at(0, small, egress="nat-single").sluice
    big = at(1e9, small)
    extra = (big.sluice.per_million or 0) - (big.sqs.per_million or 0)
    return _table(head, rows, right=5) + "\n\n" + prose(
        """Each row is `HandlerEgress=none`; each ratio is against SQS + Lambda behind the profile's own
           front door (the small profile's HTTP API on both sides). The small profile drops both interface
           endpoints when a NAT gateway is the way out (the functions then reach Lambda and Secrets Manager
           through it), so with `HandlerEgress=nat-single` it costs **${nat}** idle, against ${no_nat}
           without egress, and its handlers can reach the internet; on a Kafka
           cluster that already exists (`KafkaBootstrapServers`) it costs ${existing}. At volume the
           gap to SQS is the per-job lines, not the floor: at 1,000 M jobs a month the small profile costs
           ${extra} per million more than SQS + Lambda, of which {difference}. No profile setting removes
           the per-job lines ("Targets" below says why the rest stays). The standard profile's idle
           ${standard} is {share:.0%} MSK Serverless.""",
        nat=money(nat.fixed), no_nat=money(no_nat.fixed), extra=money(extra),
        existing=money(at(0, replace(small, kafka="existing")).sluice.fixed),
        difference=_difference(big), standard=money(at(0, standard).sluice.fixed),
        share=sum(line.monthly for line in at(0, standard).sluice.lines if line.name.startswith("MSK"))
        / at(0, standard).sluice.fixed)


def reading() -> str:
    base, unkeyed = at(1e6).sluice, at(1e6, keyed=False).sluice
    existing = at(0).sluice.fixed - at(0, replace(STANDARD, kafka="existing")).sluice.fixed
    front = sum(base.line(name).monthly for name in
                ("API Gateway (enqueue)", "Gateway Lambda compute", "Gateway Lambda requests"))
    return "\n".join([
        prose("""- Below about 10 M jobs a month, the fixed floor dominates and SQS is the economical choice
                 unless you need what fencing, priorities, rate limits or long delays give you."""),
        prose("""- Between 10 M and about 1,000 M jobs a month, Sluice costs ${low} to ${high} per million
                 and needs nobody to run servers: this is the range it is built for.""",
              low=per_million(at(1e9).sluice), high=per_million(at(10e6).sluice)),
        prose("""- At Slack's scale (1.4 B jobs a *day*, about 42,000 M a month), the variable cost alone
                 would be about ${slack:,.0f} a month, against tens of thousands for a self-run fleet with a
                 team to run it. Self-hosting wins there, which is why Slack runs its own.""",
              slack=at(42e9).sluice.variable),
        prose("""- The biggest levers: use an existing Kafka cluster (less ${existing} a month), skip the
                 Idempotency-Key when the caller already has one job per request
                 (`sluice.Client.enqueue(..., keyed=False)`: less ${keyed} per million; such a request is
                 then retried only after a 429), batch enqueues (100 jobs per request cuts API Gateway and
                 the gateway Lambda to ${batched} per million), and keep results under 1 KB.""",
              existing=money(existing), batched=money(front / 100),
              keyed=money(base.line("DynamoDB writes").monthly - unkeyed.line("DynamoDB writes").monthly)),
    ])


REGIONS: dict[str, Callable[[], str]] = {
    "prices": prices, "config": config, "variable": variable, "fixed": fixed, "volume": volume, "sqs": sqs,
    "egress": egress, "selfhost": selfhost, "targets": targets, "profiles": profiles, "reading": reading,
}


def rewrite(text: str) -> str:
    """``text`` with every region's body regenerated; every region of ``REGIONS`` must be there once."""
    seen: list[str] = []

    def fill(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in REGIONS:
            raise ConfigError(f"docs/cost.md has a region {name!r} the model does not generate")
        seen.append(name)
        return f"{match[1]}{REGIONS[name]()}\n{match[4]}"

    out = REGION.sub(fill, text)
    missing = sorted(set(REGIONS) - set(seen))
    twice = sorted({n for n in seen if seen.count(n) > 1})
    if missing or twice:
        raise ConfigError(f"docs/cost.md's generated regions: missing {missing}, repeated {twice}")
    return out


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else DOC
    old = path.read_text(encoding="utf-8")
    new = rewrite(old)
    if new == old:
        print(f"{path}: up to date")
        return 0
    path.write_text(new, encoding="utf-8")
    print(f"{path}: regenerated from the cost model (shared/sluice_dev/cost)")
    return 0
