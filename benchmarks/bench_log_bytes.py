"""What one plain job writes to CloudWatch Logs from the worker, before and after issue 33's cut.

Prints one JSON object:
  {"bench": "log_bytes", "jobs", "rounds", "batch",
   "before": {"log_bytes_per_job", "log_lines_per_job", "emf_bytes_per_job", "lines"},
   "after": {...}, "gateway_bytes_per_invocation": {"before": {"202", "503"}, "after": {...}},
   "platform_bytes_per_invocation", "saved_bytes_per_job", "usd_per_million_saved", "spread"}

The worker's real path in this process (``sluice.Worker`` bound to the real ``RedisQueue`` and
``DynamoJobStore``, on a redis-server and the moto server started here): jobs with ids a gateway
minted, a no-op handler returning docs/cost.md's 200-byte result, drains of ``BATCH`` jobs (one
Lambda invocation at the template's ``WorkerBatch``: EMF is flushed once a drain, so this is its
largest share per job). Its logs go through Powertools' ``Logger(service="sluice-worker")`` as in
Lambda (``_X_AMZN_TRACE_ID`` set, as Lambda sets it on every invocation, so each line carries its
``xray_trace_id``; ``worker_id`` as ``sluice.entry.worker`` names it), its metrics through
``PowertoolsMetrics`` (EMF on stdout); each byte written is counted, newline included.

``before`` logs as the worker did before issue 33 ("job started" at INFO, then "job succeeded"),
``after`` as it does now ("job started" at DEBUG, "job succeeded" with ``duration_ms``; "job running"
only for a handler still running at its first renewal, which a no-op never is), alternating in one
run, ``ROUNDS`` times each; the figures are medians. Per invocation, beside the worker's: what the
gateway handler writes for an answer of 202 and of 503, before issue 33's cut of its count of 2xx answers
and after (measured: Powertools writing what the handler writes), and Lambda's platform lines (START, END,
REPORT in the text format; formatted, not measured), which the cost model adds per worker invocation; the
gateway, at system level WARN in the JSON format, gets none for an invocation that succeeds (docs/cost.md,
"CloudWatch Logs").
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import emit, log, redis_server
from sluice_dev.local import servers

JOBS = int(os.environ.get("SLUICE_BENCH_LOG_JOBS", "200"))
ROUNDS = int(os.environ.get("SLUICE_BENCH_LOG_ROUNDS", "3"))
BATCH = 10  # template.yaml's WorkerBatch default
QUEUE = "bench-logs"
KEY = b"bench-log-bytes-key-0123456789ab"
RESULT = {"text": "x" * 180}  # ~200 bytes of JSON, docs/cost.md's result
LOGS_USD_PER_GB = 0.50
TRACE_ID = "Root=1-6574b2c1-3f9e1a2b4c5d6e7f80912345;Parent=53995c3f42cd8ad8;Sampled=0;Lineage=1:a1b2c3d4:0"


class Counting(io.TextIOBase):
    """A text stream that keeps only how much was written: bytes (UTF-8) and lines."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.bytes = 0
        self.lines = 0
        self.messages: dict[str, int] = {}

    def write(self, s: str) -> int:
        self.bytes += len(s.encode())
        self.lines += s.count("\n")
        for line in s.splitlines():
            with contextlib.suppress(ValueError):
                message = str(json.loads(line).get("message", "(EMF)" if "_aws" in line else "?"))
                self.messages[message] = self.messages.get(message, 0) + 1
        return len(s)


def before_observer() -> type:
    """The log observer as it was before issue 33: "job started" at INFO for every job."""
    from sluice.core import bus as ev
    from sluice.worker.runtime.observers import LogObserver

    class Before(LogObserver):
        def __call__(self, e: ev.Event) -> None:
            if isinstance(e, ev.HandlerStarted):
                self.logger.info("job started", extra=self._keys(e.job, e.queue, e.attempt, e.lease, e.token))
            elif isinstance(e, ev.LeaseGone):
                self.logger.warning("lease lost: %s", e.why,
                                    extra=self._keys(e.job, e.queue, e.attempt, e.lease, e.token))
            elif isinstance(e, ev.Finished):
                keys = self._keys(e.job, e.queue, e.attempt, e.lease, e.token)
                if e.outcome == "succeeded":
                    self.logger.info("job succeeded", extra={**keys, "write": e.detail})
                else:
                    raise AssertionError(f"a no-op job ended {e.outcome}")

    return Before


LOGS = Counting()  # Powertools keeps one handler per service name: one stream for every round


def one_round(engine: Any, store: Any, app: Any, logger: Any, old: bool) -> dict[str, Any]:
    from sluice.core import ids
    from sluice.core.models import JobSpec
    from sluice.worker.runtime import observers
    from sluice.worker.runtime.options import WorkerOptions
    from sluice.worker.runtime.telemetry import PowertoolsMetrics, Telemetry

    now = int(time.time() * 1000)
    engine.enqueue_many([JobSpec(job_id=ids.mint(now, QUEUE, KEY), queue=QUEUE, payload={"n": n},
                                 enqueued_at_ms=now) for n in range(JOBS)])
    logs, emf = LOGS, Counting()
    logs.reset()
    plain = observers.LogObserver
    observers.LogObserver = before_observer() if old else plain  # type: ignore[misc]
    try:
        telemetry = Telemetry(PowertoolsMetrics(), logger)
        worker = app.bind(queue=engine, store=store, telemetry=telemetry,
                          options=WorkerOptions(lease_ms=30_000, lease_batch=BATCH),
                          worker_id=f"sluice-prod-worker:{uuid.uuid4()}")
        done = 0
        with contextlib.redirect_stdout(emf):
            while done < JOBS:
                summary = worker.drain([QUEUE], BATCH)
                ran = summary.outcomes["succeeded"]
                if not ran:
                    raise AssertionError(f"only {done} of {JOBS} jobs ran: {summary}")
                done += ran
    finally:
        observers.LogObserver = plain  # type: ignore[misc]
    return {"log_bytes_per_job": logs.bytes / JOBS, "log_lines_per_job": logs.lines / JOBS,
            "emf_bytes_per_job": emf.bytes / JOBS, "lines": dict(sorted(logs.messages.items()))}


class Context:
    """What Powertools' ``inject_lambda_context`` reads of Lambda's context."""

    function_name, memory_limit_in_mb, aws_request_id = "sluice-bench-gateway", 512, str(uuid.uuid4())
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:sluice-bench-gateway"


def gateway_bytes() -> dict[str, dict[str, int]]:
    """What the gateway handler writes for one invocation answered 202, and one answered 503, by Powertools
    as in Lambda: ``before`` issue 33's cut (``@log_metrics``, a ``<Function><n>xx`` count for every answer,
    as the handler was), ``after`` (``sluice.entry.gateway.instrumented``, the handler itself, around a
    gateway that answers the status)."""
    from aws_lambda_powertools import Metrics
    from aws_lambda_powertools.metrics import MetricUnit

    from sluice.entry.gateway import instrumented

    def before(status: int) -> Any:
        metrics = Metrics(namespace="Sluice")

        @metrics.log_metrics
        def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
            metrics.add_metric(name=f"Gateway{status // 100}xx", unit=MetricUnit.Count, value=1)
            return {"statusCode": status}

        return handler

    def after(status: int) -> Any:
        return instrumented(lambda event, context: {"statusCode": status}, "api")

    # template.yaml's: Powertools adds it to the metric's dimensions, so the line grows by its name
    os.environ["POWERTOOLS_SERVICE_NAME"] = "sluice-gateway"
    out: dict[str, dict[str, int]] = {}
    for name, build in (("before", before), ("after", after)):
        for status in (202, 503):
            written = Counting()
            with contextlib.redirect_stdout(written):  # the handler's logger writes here too
                handler = build(status)
                written.reset()
                handler({}, Context())
            out.setdefault(name, {})[str(status)] = written.bytes
    return out


def platform_bytes() -> int:
    """Lambda's START, END and REPORT lines of one warm invocation in the text log format, formatted as
    Lambda writes them (not measured: no Lambda here)."""
    rid = str(uuid.uuid4())
    return len((f"START RequestId: {rid} Version: $LATEST\n"
                f"END RequestId: {rid}\n"
                f"REPORT RequestId: {rid}\tDuration: 41.27 ms\tBilled Duration: 42 ms\tMemory Size: 512 MB\t"
                f"Max Memory Used: 112 MB\t\n").encode())


def main() -> None:
    os.environ.update(servers.DUMMY_AWS_ENV)
    os.environ["_X_AMZN_TRACE_ID"] = TRACE_ID
    os.environ["POWERTOOLS_LOG_LEVEL"] = "INFO"  # template.yaml's Globals
    from aws_lambda_powertools import Logger

    from sluice.backends.dynamodb import tables
    from sluice.backends.dynamodb.jobs import DynamoJobStore
    from sluice.backends.redis.engine import RedisQueue
    from sluice.core.config import Settings
    from sluice.worker.registry import Worker

    with tempfile.TemporaryDirectory() as tmp, redis_server() as redis_url:
        moto = servers.start_moto(log_path=Path(tmp) / "moto.log")
        try:
            settings = Settings(aws_endpoint_url=moto.extra["url"], jobs_table="jobs-logs",
                                idempotency_table="idem-logs", results_bucket="results-logs")
            tables.ensure_all(settings)
            store = DynamoJobStore.from_settings(settings)
            engine = RedisQueue.from_url(redis_url)
            engine.set_config(QUEUE, rate_per_s=100_000, burst=100_000)
            app = Worker()
            app.register(QUEUE, lambda job, ctx: RESULT)
            logger = Logger(service="sluice-worker", stream=LOGS)
            runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
            for r in range(ROUNDS):
                for name in ("before", "after") if r % 2 == 0 else ("after", "before"):
                    runs[name].append(one_round(engine, store, app, logger, name == "before"))
                    got = runs[name][-1]["log_bytes_per_job"]
                    log(f"bench_log_bytes: round {r} {name}: {got:.1f} B a job")
        finally:
            moto.stop()

    def summary(name: str) -> dict[str, Any]:
        rows = runs[name]
        return {key: round(statistics.median(row[key] for row in rows), 1)
                for key in ("log_bytes_per_job", "log_lines_per_job", "emf_bytes_per_job")} | {
                    "lines": rows[-1]["lines"]}

    before, after = summary("before"), summary("after")
    saved = before["log_bytes_per_job"] - after["log_bytes_per_job"]
    emit("log_bytes", jobs=JOBS, rounds=ROUNDS, batch=BATCH, before=before, after=after,
         gateway_bytes_per_invocation=gateway_bytes(), platform_bytes_per_invocation=platform_bytes(),
         saved_bytes_per_job=round(saved, 1),
         usd_per_million_saved=round(saved * 1e6 / 1e9 * LOGS_USD_PER_GB, 3),
         spread={name: [min(r["log_bytes_per_job"] for r in rows), max(r["log_bytes_per_job"] for r in rows)]
                 for name, rows in runs.items()})


if __name__ == "__main__":
    main()
