"""Latency at low load and under load: how long one job takes, stage by stage, against a raw Kafka
round trip; then the same probe while the pipeline carries half of what it can.

Prints one JSON object:
  {"bench": "latency", "jobs", "enqueue_to_start_p50_ms", "enqueue_to_start_p99_ms",
   "enqueue_to_result_p50_ms", "enqueue_to_result_p99_ms", "raw_kafka_p50_ms", "raw_kafka_p99_ms",
   "raw_kafka_block_p50s_ms", "start_vs_raw_p50", "start_vs_raw_p99", "stages": {stage: {"p50_ms",
   "p99_ms"}}, "under_load": {"pipeline_jobs_per_s", "load_per_s", "probes",
   "enqueue_to_start_p50_ms", "enqueue_to_start_p99_ms", "p99_vs_low_load_p99", "target_met"}, ...}

It starts a private ``sluice dev`` stack (the template's functions and schedules: the relay
every minute, stopping 5 s before its 60 s timeout) and enqueues JOBS ``echo`` jobs one at a
time over HTTP, each only after the previous one's result is readable and a random pause
(0-GAP_S), so no job ever waits behind another and the sends do not lock onto the relay's
cadence. The stages come from the stack's history (``sluice_dev.local.history``, one JSONL line
per event, wall clock of one machine): the client's 202, the relay's ``push`` (``push.lua``
returned), the worker's ``lease``, the handler's ``start`` and the result ``write`` accepted
by the jobs table (from then on ``GET /v1/jobs/{id}`` reads it: the read is strongly consistent).

Between two jobs, one raw kafka-python round trip goes through the same broker: a producer
(acks=all, no linger, as the gateway's) sends one record to a topic of its own and a consumer
(assigned, polling, default fetch settings) receives it; its p50 is the yardstick.
Targets (issue 18): enqueue-to-start p50 <= 2.5x raw p50, p99 <= 6x raw p50.

The raw round trip is the floor: its consumer fetches as the relay's does (``consumer_config``:
``fetch_max_wait_ms`` 100, not kafka-python's 500, so a fetch the broker holds open does not sit
in the figure), ten warm-up trips are left out, and ``raw_kafka_block_p50s_ms`` gives the p50 of
each block of 50 trips, so a run shows its own spread.

Under load (issue 30): in the same stack, ``PIPE_JOBS`` ``square`` jobs go through the pipeline from
``CLIENTS`` threads, ``PER_REQUEST`` a request, as ``bench_pipeline`` sends them; their throughput
(first 202 to last result) is what the pipeline carries here. A sender then keeps half of that
rate going to ``square`` (batches paced on the clock) while ``LOAD_PROBES`` ``echo`` probes go one
at a time, as at low load. Target: their enqueue-to-start p99 <= 3x the low-load p99 of the run.

A run lasts about JOBS x (per-job latency + GAP_S/2 + a raw round trip); with 200 jobs it spans
a relay hand-over or more, which the p99 includes.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import by_function, dev_stack, emit, log
from sluice_dev.local import history

JOBS = 200
GAP_S = 0.2
JOB_TIMEOUT_S = 30.0
RAW_TOPIC = "bench.latency.raw"
RAW_WARMUP = 10
RAW_BLOCK = 50
WORKERS = 4  # bench_pipeline's: the load phase runs its workload
PIPE_JOBS = 2_000
CLIENTS = 8
PER_REQUEST = 10
LOAD_PROBES = 100
LOAD_QUEUE = "square"


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1), nearest rank; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def summary(values_s: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values_s]
    return {"p50_ms": round(pct(ms, 0.5), 1), "p99_ms": round(pct(ms, 0.99), 1),
            "max_ms": round(max(ms, default=0.0), 1), "n": len(ms)}


class Tail:
    """The history as it grows, indexed by job: the first time of each op that matters here."""

    OPS = ("lease", "start", "write")

    def __init__(self, path: str) -> None:
        self.path, self.offset = path, 0
        self.first: dict[str, dict[str, float]] = {}
        self.pushes: list[dict[str, Any]] = []

    def read(self) -> None:
        events, self.offset = history.read(self.path, self.offset)
        for e in events:
            op = e.get("op")
            if op == "push" and e.get("outcome") == "ok":
                for job in e.get("jobs", ()):
                    self.first.setdefault(str(job), {}).setdefault("push", float(e["t1"]))
            elif op in self.OPS and e.get("job"):
                if op == "write" and e.get("outcome") not in ("written", "already_written"):
                    continue
                self.first.setdefault(str(e["job"]), {}).setdefault(str(op), float(e["t1"]))

    def written(self, job: str) -> bool:
        return "write" in self.first.get(job, {})


class RawKafka:
    """One record at a time through the broker: producer send to consumer receipt."""

    def __init__(self, bootstrap: str, settings: Any) -> None:
        from kafka import KafkaConsumer, KafkaProducer, TopicPartition
        from kafka.admin import KafkaAdminClient, NewTopic
        from kafka.errors import TopicAlreadyExistsError

        from sluice.backends.kafka.source import consumer_config

        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            admin.create_topics([NewTopic(RAW_TOPIC, 1, 1)])
        except TopicAlreadyExistsError:
            pass
        finally:
            admin.close()
        self.producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
        # The relay's fetch settings, with no group: the floor fetches as the relay does.
        config = {**consumer_config(settings), "bootstrap_servers": bootstrap, "group_id": None}
        self.consumer = KafkaConsumer(**config)
        tp = TopicPartition(RAW_TOPIC, 0)
        self.consumer.assign([tp])
        self.consumer.seek_to_end(tp)
        self.consumer.position(tp)
        self._got: dict[bytes, float] = {}
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._consume, name="bench-raw-consumer", daemon=True)
        self._thread.start()

    def _consume(self) -> None:
        while not self._stop.is_set():
            for records in self.consumer.poll(timeout_ms=500).values():
                now = time.time()
                with self._cond:
                    for r in records:
                        self._got[r.value] = now
                    self._cond.notify_all()

    def round_trip(self, n: int) -> float | None:
        value = f"raw-{n}-{time.time_ns()}".encode()
        sent = time.time()
        self.producer.send(RAW_TOPIC, value)
        self.producer.flush()
        with self._cond:
            if not self._cond.wait_for(lambda: value in self._got, 10.0):
                return None
            return self._got.pop(value) - sent

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.consumer.close()
        self.producer.close()


def run(jobs: int, gap_s: float, seed: int, load_probes: int = LOAD_PROBES,
        pipe_jobs: int = PIPE_JOBS) -> dict[str, Any]:
    from sluice.client import Client

    rng = random.Random(seed)
    with dev_stack("latency", workers=WORKERS, warm_workers=1) as (dev, endpoints, counts):
        tail = Tail(str(endpoints["history_path"]))
        raw = RawKafka(str(endpoints["kafka_bootstrap"]), dev.settings)
        url = str(endpoints["gateway_url"])
        client = Client(url, timeout_s=10)
        # The first jobs wait for the relay to take its partitions and the worker to warm up.
        for i in range(3):
            job = client.enqueue("echo", {"warm": i}).job_id
            _wait(tail, job, 90.0)
        for i in range(RAW_WARMUP):
            raw.round_trip(-1 - i)
        raw_s: list[float] = []
        counts.clear()  # invocations of the measured jobs only
        sent = probe(client, tail, jobs, rng, gap_s, "latency", raw=raw, raw_s=raw_s)
        time.sleep(0.5)
        tail.read()
        raw.close()
        invocations = by_function(counts)
        low = figures(sent, tail, raw_s, invocations)
        if load_probes > 0:
            low["under_load"] = under_load(client, url, tail, rng, gap_s, load_probes, pipe_jobs,
                                           low["enqueue_to_start_p99_ms"])
    return low


def probe(client: Any, tail: Tail, jobs: int, rng: random.Random, gap_s: float, label: str,
          raw: RawKafka | None = None, raw_s: list[float] | None = None) -> dict[str, float]:
    """``jobs`` echo jobs one at a time, each once the previous one's result is written; each
    one's 202 time by job id. With ``raw``, one raw round trip after each, into ``raw_s``."""
    sent: dict[str, float] = {}
    begun = time.monotonic()
    for i in range(jobs):
        job = client.enqueue("echo", {"i": i}).job_id
        sent[job] = time.time()
        if not _wait(tail, job, JOB_TIMEOUT_S):
            log(f"{label}: job {i} ({job}) not done within {JOB_TIMEOUT_S}s")
        if raw is not None and raw_s is not None:
            rt = raw.round_trip(i)
            if rt is not None:
                raw_s.append(rt)
        time.sleep(rng.uniform(0, gap_s))
        if (i + 1) % 50 == 0:
            log(f"{label}: {i + 1}/{jobs} jobs, {time.monotonic() - begun:.0f}s")
    return sent


class Load(threading.Thread):
    """``per_s`` jobs a second to ``LOAD_QUEUE``, ``PER_REQUEST`` a request, paced on the clock
    (a late batch is sent at once, not skipped: the rate is kept on average)."""

    def __init__(self, url: str, per_s: float) -> None:
        super().__init__(name="bench-load", daemon=True)
        self.url, self.per_s = url, per_s
        self.stop = threading.Event()
        self.sent = self.errors = 0
        self.seconds = 0.0

    def run(self) -> None:
        from sluice.client import Client

        client = Client(self.url, timeout_s=30)
        interval = PER_REQUEST / self.per_s
        started = time.monotonic()
        due = started
        while not self.stop.is_set():
            self.stop.wait(max(0.0, due - time.monotonic()))
            if self.stop.is_set():
                break
            try:
                client.enqueue_batch(LOAD_QUEUE, [{"payload": self.sent + k} for k in range(PER_REQUEST)],
                                     keyed=False)
                self.sent += PER_REQUEST
            except Exception:  # counted: the figure says how much load there was
                self.errors += 1
            due += interval
        self.seconds = time.monotonic() - started
        client.close()


def pipeline_rate(url: str, tail: Tail, jobs: int) -> float:
    """What the pipeline carries here: ``jobs`` sent as bench_pipeline sends them, over the time
    from their first 202 to their last result."""
    from benchmarks.bench_pipeline import send

    accepted, errors = send(url, jobs // PER_REQUEST, CLIENTS, PER_REQUEST, queue=LOAD_QUEUE)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and not all(tail.written(j) for j in accepted):
        tail.read()
        time.sleep(0.2)
    done = [tail.first[j]["write"] for j in accepted if tail.written(j)]
    if not done:
        raise RuntimeError(f"latency: no pipeline job finished ({len(errors)} errors)")
    return len(done) / max(1e-9, max(done) - min(accepted.values()))


def under_load(client: Any, url: str, tail: Tail, rng: random.Random, gap_s: float, probes: int,
               pipe_jobs: int, low_p99_ms: float) -> dict[str, Any]:
    rate = pipeline_rate(url, tail, pipe_jobs)
    log(f"latency: the pipeline carries {rate:.0f} jobs/s here; probing under half of it")
    load = Load(url, rate / 2)
    load.start()
    time.sleep(3.0)  # the load's backlog, if any, forms before the first probe
    try:
        sent = probe(client, tail, probes, rng, gap_s, "latency under load")
    finally:
        load.stop.set()
        load.join(30)
    tail.read()
    starts = [tail.first[j]["start"] - t for j, t in sent.items() if "start" in tail.first.get(j, {})]
    start = summary(starts)
    ratio = round(start["p99_ms"] / low_p99_ms, 2) if low_p99_ms else None
    load_per_s = load.sent / max(1e-9, load.seconds)
    return {"pipeline_jobs_per_s": round(rate, 1), "load_per_s": round(load_per_s, 1),
            "load_errors": load.errors, "probes": len(sent), "incomplete": len(sent) - len(starts),
            "enqueue_to_start_p50_ms": start["p50_ms"], "enqueue_to_start_p99_ms": start["p99_ms"],
            "p99_vs_low_load_p99": ratio, "target_met": ratio is not None and ratio <= 3.0,
            "load_1m": round(os.getloadavg()[0], 1)}


def _wait(tail: Tail, job: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        tail.read()
        if tail.written(job):
            return True
        time.sleep(0.002)
    return False


def figures(sent: dict[str, float], tail: Tail, raw_s: list[float], counts: dict[str, int]) -> dict[str, Any]:
    stages: dict[str, list[float]] = {k: [] for k in ("202_to_push", "push_to_lease", "lease_to_start",
                                                       "start_to_result", "202_to_start", "202_to_result")}
    missing = 0
    for job, t202 in sent.items():
        f = tail.first.get(job, {})
        if not all(k in f for k in ("push", "lease", "start", "write")):
            missing += 1
            continue
        stages["202_to_push"].append(f["push"] - t202)
        stages["push_to_lease"].append(f["lease"] - f["push"])
        stages["lease_to_start"].append(f["start"] - f["lease"])
        stages["start_to_result"].append(f["write"] - f["start"])
        stages["202_to_start"].append(f["start"] - t202)
        stages["202_to_result"].append(f["write"] - t202)
    start, result = summary(stages["202_to_start"]), summary(stages["202_to_result"])
    raw = summary(raw_s)
    base = raw["p50_ms"] or float("nan")
    return {"jobs": len(sent), "incomplete": missing,
            "enqueue_to_start_p50_ms": start["p50_ms"], "enqueue_to_start_p99_ms": start["p99_ms"],
            "enqueue_to_result_p50_ms": result["p50_ms"], "enqueue_to_result_p99_ms": result["p99_ms"],
            "raw_kafka_p50_ms": raw["p50_ms"], "raw_kafka_p99_ms": raw["p99_ms"],
            "raw_kafka_block_p50s_ms": [summary(raw_s[k:k + RAW_BLOCK])["p50_ms"]
                                        for k in range(0, len(raw_s), RAW_BLOCK)],
            "start_vs_raw_p50": round(start["p50_ms"] / base, 2),
            "start_vs_raw_p99": round(start["p99_ms"] / base, 2),
            "stages": {k: summary(v) for k, v in stages.items()},
            "invocations": counts, "load_1m": round(os.getloadavg()[0], 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=JOBS)
    parser.add_argument("--gap", type=float, default=GAP_S, help="largest random pause between jobs (s)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--load-probes", type=int, default=LOAD_PROBES,
                        help="probes under load (0: the low-load part only)")
    parser.add_argument("--pipe-jobs", type=int, default=PIPE_JOBS,
                        help="jobs that measure what the pipeline carries")
    args = parser.parse_args()
    emit("latency", **run(args.jobs, args.gap, args.seed, args.load_probes, args.pipe_jobs))


if __name__ == "__main__":
    main()
