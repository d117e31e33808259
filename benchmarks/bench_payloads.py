"""Large payloads in S3 (issue 28, item 4): what the pointer costs the gateway's enqueue path.

Prints one JSON object:
  {"bench": "payloads", "small_p50_us", "small_with_store_p50_us", "small_puts",
   "large_inline_p50_ms", "large_s3_p50_ms", "large_added_p50_ms", "large_s3_p99_ms"}

The use case (``Api.enqueue``: checks, spec, seal, append) over an in-memory log, so only the
payload's part differs between the sides, which take turns in blocks on this shared machine:

- small (a 200-byte payload) without a payload store, and with one: below the threshold the
  store is never called (``small_puts`` must be 0), so the two medians must match;
- large (200 KB) kept inline, and put to a moto server's S3 over HTTP first (``S3PayloadStore``).
  The difference is the added latency of a large enqueue locally; in AWS an S3 PUT of 200 KB from
  a Lambda in the same Region is typically 20-60 ms (docs/cost.md, "Large payloads").
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import boto3

from benchmarks.common import emit, log
from sluice.backends.aws.payloads import S3PayloadStore, create_payloads_bucket
from sluice.core.bus import EventBus
from sluice.core.ports import PayloadStore
from sluice.core.wire import EnqueueRequest
from sluice.gateway.api import Api, Backends, IdMinting, Intake
from sluice_dev.fakes import FakeLog, FakePayloadStore, FakeQueue, FakeStore
from sluice_dev.local import servers

KEY = b"bench-payloads-job-id-key-0123456789"
ROUNDS, BLOCK = 6, 50
SMALL = {"to": "someone@example.com", "subject": "hello", "body": "x" * 120}
LARGE = {"rows": [{"i": i, "text": "été " * 20} for i in range(1400)]}  # about 200 KB


def api(store: PayloadStore | None) -> Api:
    log_ = FakeLog()
    backends = Backends(log_, FakeStore(), FakeQueue(), events=EventBus())  # type: ignore[arg-type]
    return Api(backends, IdMinting(KEY), intake=Intake(payloads=store))


def timed(call: Callable[[], Any], n: int, out: list[float]) -> None:
    for _ in range(n):
        t = time.perf_counter()
        call()
        out.append(time.perf_counter() - t)


def main() -> None:
    for key, value in servers.DUMMY_AWS_ENV.items():
        os.environ.setdefault(key, value)  # the moto server's
    with tempfile.TemporaryDirectory() as tmp:
        moto = servers.start_moto(log_path=Path(tmp) / "moto.log")
        try:
            url = moto.extra["url"]
            client = boto3.client("s3", region_name="us-east-1", endpoint_url=url)
            create_payloads_bucket(client, "bench-payloads")
            fake = FakePayloadStore()
            sides: dict[str, tuple[Api, EnqueueRequest]] = {
                "small": (api(None), EnqueueRequest(payload=SMALL)),
                "small_with_store": (api(fake), EnqueueRequest(payload=SMALL)),
                "large_inline": (api(None), EnqueueRequest(payload=LARGE)),
                "large_s3": (api(S3PayloadStore(client, "bench-payloads")), EnqueueRequest(payload=LARGE)),
            }
            times: dict[str, list[float]] = {name: [] for name in sides}
            for a, request in sides.values():  # warm up: imports, the S3 connection
                timed(lambda a=a, r=request: a.enqueue("bench", r), 5, [])
            for round_ in range(ROUNDS):
                for side, (a, request) in sides.items():
                    timed(lambda a=a, r=request: a.enqueue("bench", r), BLOCK, times[side])
                log(f"round {round_ + 1}/{ROUNDS}")
        finally:
            moto.stop()

    def p(side: str, q: float) -> float:
        data = sorted(times[side])
        return data[min(len(data) - 1, int(q * len(data)))]

    med = {side: statistics.median(t) for side, t in times.items()}
    emit("payloads", small_p50_us=round(med["small"] * 1e6, 1),
         small_with_store_p50_us=round(med["small_with_store"] * 1e6, 1), small_puts=len(fake.puts),
         large_inline_p50_ms=round(med["large_inline"] * 1e3, 2),
         large_s3_p50_ms=round(med["large_s3"] * 1e3, 2),
         large_added_p50_ms=round((med["large_s3"] - med["large_inline"]) * 1e3, 2),
         large_s3_p99_ms=round(p("large_s3", 0.99) * 1e3, 2))


if __name__ == "__main__":
    main()
