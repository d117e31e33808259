"""Issue 27, item 5: each caller's own limit, on one `sluice dev` stack over real HTTP.

The stack runs with small per-caller limits (template parameters, as a deploy would set them),
so that one caller's flood reaches its limit in a few requests. The callers are named by the
local server's ``X-Sluice-Local-Caller`` header (API Gateway's verified principal in AWS). Caller
A floods, naming a new session of its role on every request: it gets 429 ``CALLER_THROTTLED``
with Retry-After once its burst is spent, while caller B's requests, interleaved, all get 202;
a caller with a limit of its own (``CallerLimits``) gets it. Then the jobs topic is audited: it
holds exactly the jobs A was answered 202 for, so nothing A sent over the limit reached Kafka.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluice.core.config import Settings
from sluice_dev.local.api_server import LOCAL_CALLER_HEADER
from sluice_dev.local.dev import DevOptions, DevStack
from tests.stack.test_hostile_callers import Http, Reply

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(150)]

ROLE_A = "arn:aws:iam::000000000000:role/team-a"
B = "arn:aws:sts::000000000000:assumed-role/team-b/web-1"
BIG = "arn:aws:iam::000000000000:role/team-big"
BURST = 8
PARAMETERS = {"CallerRatePerSecond": "1", "CallerBurst": str(BURST), "CallerBytesPerSecond": "500",
              "CallerByteBurst": "6000", "CallerLimits": f"{BIG}=1/40/1000000/1000000"}


def session(i: int) -> str:
    """A new session of team-a's role each time: sessions count as their role."""
    return f"arn:aws:sts::000000000000:assumed-role/team-a/s{i}"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Http, Settings]]:
    state: Path = tmp_path_factory.mktemp("throttle") / ".sluice"
    dev = DevStack(DevOptions(state_dir=state, workers=1, gateway_concurrency=2, log_level="WARNING",
                              parameters=PARAMETERS, why="small per-caller limits"))
    endpoints = dev.start()
    assert dev.settings is not None
    try:
        yield Http(endpoints["gateway_url"]), dev.settings
    finally:
        dev.stop()


def enqueue(call: Http, caller: str, payload: dict[str, Any]) -> Reply:
    return call("POST", "/v1/queues/echo/jobs", {"payload": payload}, headers={LOCAL_CALLER_HEADER: caller})


def test_a_flooding_caller_gets_429_while_another_gets_202_and_kafka_holds_only_the_202s(
        stack: tuple[Http, Settings]) -> None:
    from tests.backends.test_gateway_stack import kafka_records

    call, settings = stack
    a_accepted: list[str] = []
    a_refused: list[Reply] = []
    b_accepted = 0
    started = time.monotonic()
    for i in range(30):
        r = enqueue(call, session(i), {"from": "A", "n": i})
        if r.status == 202:
            a_accepted.append(r.doc["job_id"])
        else:
            a_refused.append(r)
        if i % 6 == 0:  # within its own limit: 5 requests against a burst of 8
            rb = enqueue(call, B, {"from": "B", "n": i})
            assert rb.status == 202, rb.doc  # B's own bucket: A's flood takes nothing from it
            b_accepted += 1
    # The burst, and at most one more per second the flood lasted (1 request/s).
    lasted_s = time.monotonic() - started
    assert BURST <= len(a_accepted) <= BURST + math.ceil(lasted_s) + 1, (len(a_accepted), lasted_s)
    assert len(a_refused) == 30 - len(a_accepted) and a_refused
    for r in a_refused:
        assert (r.status, r.headers["content-type"], r.doc["code"]) == \
            (429, "application/problem+json", "CALLER_THROTTLED"), r.doc
        assert int(r.headers["retry-after"]) >= 1 and ROLE_A in r.doc["detail"]
    # Nothing A sent over its limit reached the jobs topic; everything answered 202 did.
    records = kafka_records(settings)
    from_a = sorted(key for key, spec in records if spec["payload"].get("from") == "A")
    assert from_a == sorted(a_accepted)
    assert sum(1 for _, spec in records if spec["payload"].get("from") == "B") == b_accepted


def test_bodies_count_against_the_byte_bucket_and_a_named_caller_has_its_own_limit(
        stack: tuple[Http, Settings]) -> None:
    call, _ = stack
    c = "arn:aws:iam::000000000000:user/bytes"
    body = {"blob": "x" * 2500}  # about 2.5 KB a request against 6,000 bytes and 500 a second
    replies = [enqueue(call, c, body) for _ in range(4)]
    assert [r.status for r in replies[:2]] == [202, 202]
    refused = [r for r in replies if r.status == 429]
    assert refused and all(r.doc["code"] == "CALLER_THROTTLED" for r in refused)
    # team-big's own limit (CallerLimits): a burst of 40 where every other caller gets 8.
    assert all(enqueue(call, BIG, {"n": i}).status == 202 for i in range(20))
