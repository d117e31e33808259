"""A queue's depth over the last hour, and how long its jobs waited to start (issue 32's closing
review; docs/console.md, "Depth over time"). Pure: the Redis side is ``lease.lua`` (the waits),
``sample.lua`` (the samples) and ``backends.redis.depth``; the relay's ``DepthSampler`` decides when.

**The wait** of a job is from its enqueue (the job's ``enqueued_at_ms``, which its lease reads) to
its first lease, at Redis's clock: what ``QueueWaitTime`` measures in the worker, but recorded where
every console can read it. ``lease.lua`` counts each first lease in a histogram of
``BUCKETS_PER_OCTAVE`` buckets per power of two (bucket ``floor(log2(ms + 1) * 4)``: a value is
known within 19 %, reported at its bucket's geometric middle, within 9 %), one ``HINCRBY`` per
distinct bucket of a lease call. A retry is not counted (its wait would include its earlier
attempts); a delayed job's wait includes its delay (it was enqueued then).

**A sample** is the queue's ready, delayed, leased and dead counts as the relay measured them, and
the histogram of the jobs that started since the sample before (``sample.lua`` takes and empties
it), stored as one short text in a capped, expiring list per queue: ``<at_ms>,<ready>,<delayed>,
<leased>,<dead>`` then ``;<bucket>:<count>,...`` when jobs started.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from pydantic import Field

from sluice.core.base import Model

HOUR_MS: Final = 3_600_000
BUCKETS_PER_OCTAVE: Final = 4
MAX_BUCKET: Final = 200  # 2^50 ms: anything a Redis TIME minus an enqueue time can be
SAMPLE_EVERY_S: Final = 10.0  # the relay's samples per queue at most this often (sample.lua checks too)
# Samples kept per queue: an hour at SAMPLE_EVERY_S, and room for a second relay's that sample.lua
# let through between them.
SAMPLES_KEPT: Final = 2 * int(HOUR_MS / 1000 / SAMPLE_EVERY_S)
SAMPLES_TTL_MS: Final = HOUR_MS + 600_000  # a queue nobody samples any more drops its hour after this
MAX_SAMPLE: Final = 4096  # bytes of one stored sample (a histogram has MAX_BUCKET fields at most)
# Largest number a sample may carry: what sample.lua and lease.lua can write (Lua numbers are doubles).
# A larger one was written by hand (a team's Redis user may write its own queue's keys) and would
# overflow a float in the percentiles and the console's chart: its sample, or bucket, is skipped.
MAX_NUMBER: Final = 2**53 - 1


def bucket(wait_ms: int) -> int:
    """The histogram bucket of a wait, as lease.lua computes it."""
    return min(MAX_BUCKET, math.floor(math.log2(max(0, wait_ms) + 1) * BUCKETS_PER_OCTAVE + 1e-9))


def bucket_ms(b: int) -> int:
    """A bucket's value: the geometric middle of its bounds (2^(b/4) - 1 .. 2^((b+1)/4) - 1)."""
    return max(0, round(2 ** ((b + 0.5) / BUCKETS_PER_OCTAVE) - 1))


def percentile(histogram: Mapping[int, int], q: float) -> int | None:
    """Nearest-rank percentile ``q`` (0..100) of the waits in ``histogram`` (bucket -> count), as its
    bucket's value; None when it holds none."""
    total = sum(n for n in histogram.values() if n > 0)
    if total == 0:
        return None
    rank = max(1, math.ceil(q / 100 * total))
    seen = 0
    for b in sorted(histogram):
        seen += max(0, histogram[b])
        if seen >= rank:
            return bucket_ms(b)
    return bucket_ms(max(histogram))  # not reached: seen ends at total


def merged(histograms: Iterable[Mapping[int, int]]) -> dict[int, int]:
    out: dict[int, int] = {}
    for h in histograms:
        for b, n in h.items():
            out[b] = out.get(b, 0) + n
    return out


class DepthSample(Model):
    """One sample of a queue (``GET /v1/admin/queues/{queue}/depth``)."""

    at_ms: int = Field(description="When the relay took it (Redis TIME, ms).")
    ready: int
    delayed: int
    leased: int
    dead: int
    started: int = Field(default=0, description="Jobs first leased since the sample before.")
    wait_p50_ms: int | None = Field(default=None, description="Their enqueue-to-start wait, p50.")
    wait_p99_ms: int | None = Field(default=None, description="Their enqueue-to-start wait, p99.")


class DepthHistory(Model):
    """A queue's samples of the last hour, oldest first, and the waits of every job started in it."""

    queue: str
    samples: list[DepthSample]
    started: int = Field(description="Jobs first leased in the samples' span.")
    wait_p50_ms: int | None = Field(description="Enqueue-to-start wait of those jobs, p50 (within 9 %).")
    wait_p99_ms: int | None = Field(description="Enqueue-to-start wait of those jobs, p99 (within 9 %).")
    sample_every_s: float = SAMPLE_EVERY_S


def encode(at_ms: int, ready: int, delayed: int, leased: int, dead: int,
           histogram: Mapping[int, int] | None = None) -> str:
    """A sample's stored text (as sample.lua writes it; for tests and fakes)."""
    head = f"{int(at_ms)},{int(ready)},{int(delayed)},{int(leased)},{int(dead)}"
    if not histogram:
        return head
    return head + ";" + ",".join(f"{b}:{n}" for b, n in sorted(histogram.items()))


def decode(text: str | bytes) -> tuple[DepthSample, dict[int, int]] | None:
    """A stored sample and its histogram; None for anything that is not one (skipped, not trusted)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if len(text) > MAX_SAMPLE:
        return None
    head, _, tail = text.partition(";")
    try:
        at, ready, delayed, leased, dead = (int(x) for x in head.split(","))
        histogram: dict[int, int] = {}
        for part in filter(None, tail.split(",")):
            b, _, n = part.partition(":")
            if 0 <= int(b) <= MAX_BUCKET and 0 < int(n) <= MAX_NUMBER:
                histogram[int(b)] = histogram.get(int(b), 0) + int(n)
    except ValueError:
        return None
    if min(at, ready, delayed, leased, dead) < 0 or max(at, ready, delayed, leased, dead) > MAX_NUMBER:
        return None
    sample = DepthSample(at_ms=at, ready=ready, delayed=delayed, leased=leased, dead=dead,
                         started=sum(histogram.values()), wait_p50_ms=percentile(histogram, 50),
                         wait_p99_ms=percentile(histogram, 99))
    return sample, histogram


def history(queue: str, stored: Sequence[str | bytes], now_ms: int) -> DepthHistory:
    """The last hour of ``stored`` (oldest first), its samples and the waits over all of them."""
    since = now_ms - HOUR_MS
    kept = [found for found in map(decode, stored) if found is not None and found[0].at_ms >= since]
    kept.sort(key=lambda found: found[0].at_ms)
    hour = merged(h for _, h in kept)
    return DepthHistory(queue=queue, samples=[s for s, _ in kept], started=sum(hour.values()),
                        wait_p50_ms=percentile(hour, 50), wait_p99_ms=percentile(hour, 99))
