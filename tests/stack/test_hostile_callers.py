"""Issue 19: a hostile but authorised caller against one `sluice dev` stack, over real HTTP.

The stack runs with small limits (template parameters, as `sam deploy --parameter-overrides`
would set them) so each flood reaches its limit in a few requests: reserved names, a priority
flood, oversized payloads and batches, deeply delayed batches until the delayed cap, a queue
with no handler until its dead cap, and random queue names until the registry is full. Each
refusal is checked for its exact status and problem code, and for writing nothing: the jobs
topic holds the same records before and after it (the gateway's only write is to Kafka),
and, at the end, the topic's records are audited: each hostile queue holds exactly the jobs
answered 202, and no record breaks a limit.

All along, a background thread enqueues an ordinary ``echo`` job (sluice_dev.examples) every
``ORDINARY_EVERY_S``; the last test enqueues one more after every flood, and every one of them
must reach ``succeeded``: no hostile input may stop ordinary work.

The tests share the stack and run in file order (the registry flood comes after the other
floods, since it fills the registry that their queues are in).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from sluice.backends.kafka.auth import client_config
from sluice.backends.redis.engine import RedisQueue
from sluice.core import ids
from sluice.core.config import Settings
from sluice.relay import RELAY_QUEUE
from sluice.relay.ownership import partition_job_id
from sluice_dev.local.dev import DevOptions, DevStack

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(150)]

MAX_DELAYED = 20
MAX_DEAD = 4
MAX_QUEUES = 10
MAX_CALLER_PRIORITY = 5
MAX_PAYLOAD = 2048
WEEK_S = 7 * 24 * 3600  # the largest delay_seconds the API takes
ORDINARY_EVERY_S = 0.5
PARAMETERS = {"MaxDelayedPerQueue": str(MAX_DELAYED), "MaxDeadPerQueue": str(MAX_DEAD),
              "MaxQueues": str(MAX_QUEUES), "MaxCallerPriority": str(MAX_CALLER_PRIORITY),
              "MaxPayloadBytes": str(MAX_PAYLOAD),
              # The floods use queues no worker handles (a dead-cap queue, random names): accepted,
              # as a stack deployed with UnroutedQueues=default accepts them, so that the caps and
              # the registry bound are what refuses them (with the default, "refuse", NO_ROUTE would).
              "UnroutedQueues": "default"}


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    doc: Any


class Http:
    """One caller of the local gateway (a connection per request: the floods are sequential)."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80

    def __call__(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
                 headers: dict[str, str] | None = None) -> Reply:
        data = raw if raw is not None else None if body is None else json.dumps(body).encode()
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            # The gateway (as API Gateway) may answer a body over its limit before reading it and
            # close: the answer is still there to read after the broken send.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                conn.request(method, path, body=data,
                             headers={"Content-Type": "application/json", **(headers or {})})
            r = conn.getresponse()
            text = r.read()
            return Reply(r.status, {k.lower(): v for k, v in r.getheaders()},
                         json.loads(text) if text else None)
        finally:
            conn.close()


class Offsets:
    """How far the jobs topic reaches, per partition: the gateway's one write.

    Counted by reading the records, not by asking for end offsets: the local broker (Tansu on S3
    storage) sometimes reports a partition's end offset one short of an acknowledged write, and
    keeps it so until the next write to that partition, while a fetch returns the record at once.
    """

    def __init__(self, settings: Settings) -> None:
        from kafka import KafkaConsumer, TopicPartition

        self.consumer = KafkaConsumer(**client_config(settings), enable_auto_commit=False, group_id=None)
        parts = self.consumer.partitions_for_topic(settings.kafka_topic) or set()
        self.partitions = [TopicPartition(settings.kafka_topic, p) for p in sorted(parts)]
        assert self.partitions
        self.consumer.assign(self.partitions)
        self.consumer.seek_to_beginning(*self.partitions)

    def __call__(self) -> dict[int, int]:
        """The offset after the last record each partition holds, once a fetch comes back empty."""
        while self.consumer.poll(timeout_ms=100):
            pass
        return {tp.partition: self.consumer.position(tp) for tp in self.partitions}

    def settled(self) -> dict[int, int]:
        """Reach once two reads 0.25 s apart agree: a fetch in flight may miss a write just made."""
        last = self()
        for _ in range(40):
            time.sleep(0.25)
            now = self()
            if now == last:
                return now
            last = now
        raise AssertionError(f"the jobs topic's reach never settled: {last}")


@dataclass
class Ordinary:
    """Echo jobs enqueued while the floods run (and one after): every one must succeed."""

    call: Http
    lock: threading.Lock = field(default_factory=threading.Lock)  # held while a refusal is checked
    stop: threading.Event = field(default_factory=threading.Event)
    ids: list[str] = field(default_factory=list)
    refused: list[Reply] = field(default_factory=list)
    thread: threading.Thread | None = None

    def enqueue(self, n: int, priority: int = 0) -> str | None:
        with self.lock:
            r = self.call("POST", "/v1/queues/echo/jobs", {"payload": {"n": n}, "priority": priority})
        if r.status != 202:
            self.refused.append(r)
            return None
        self.ids.append(r.doc["job_id"])
        return str(r.doc["job_id"])

    def run(self) -> None:
        n = 0
        while not self.stop.wait(ORDINARY_EVERY_S):
            self.enqueue(n)
            n += 1


@dataclass
class Hostile:
    call: Http
    settings: Settings
    engine: RedisQueue
    offsets: Offsets
    ordinary: Ordinary
    accepted: dict[str, list[str]] = field(default_factory=dict)  # hostile queue -> ids answered 202

    @contextlib.contextmanager
    def writes_nothing(self) -> Iterator[None]:
        """Nothing reaches the jobs topic inside the block (the ordinary thread waits meanwhile)."""
        with self.ordinary.lock:
            before = self.offsets.settled()
            yield
            assert self.offsets.settled() == before, "a refused request wrote to the jobs topic"

    def refused(self, reply: Reply, status: int, code: str) -> None:
        assert (reply.status, reply.headers.get("content-type"), reply.doc and reply.doc.get("code")) == \
            (status, "application/problem+json", code), (reply.status, reply.doc)

    def queue(self, name: str) -> dict[str, Any]:
        r = self.call("GET", f"/v1/queues/{name}")
        assert r.status == 200, r.doc
        return dict(r.doc)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hostile]:
    state: Path = tmp_path_factory.mktemp("hostile") / ".sluice"
    dev = DevStack(DevOptions(state_dir=state, workers=2, gateway_concurrency=2, log_level="WARNING",
                              safety_net_every_s=1, parameters=PARAMETERS,
                              settings={"queue_view_ttl_ms": 500},
                              why="small limits so that the floods reach them"))
    endpoints = dev.start()
    assert dev.settings is not None
    ordinary = Ordinary(Http(endpoints["gateway_url"]))
    ordinary.thread = threading.Thread(target=ordinary.run, name="ordinary-echo", daemon=True)
    offsets = Offsets(dev.settings)
    try:
        ordinary.thread.start()
        yield Hostile(ordinary.call, dev.settings, RedisQueue.from_url(dev.settings.redis_url), offsets,
                      ordinary)
    finally:
        ordinary.stop.set()
        ordinary.thread.join(30)
        offsets.consumer.close()
        dev.stop()


def wait_until(what: str, check: Any, timeout_s: float = 30.0, every_s: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"not within {timeout_s}s: {what}"
        time.sleep(every_s)


# -- reserved names ----------------------------------------------------------------------------------


def test_reserved_queue_names_are_400_and_their_jobs_404(hostile: Hostile) -> None:
    h = hostile
    issue_bodies = [{"payload": {"topic": "sluice.jobs", "partition": "x"}, "priority": 9},
                    {"payload": {"topic": "sluice.jobs", "partition": 0}, "priority": 9}]
    with h.writes_nothing():
        for body in issue_bodies:
            r = h.call("POST", f"/v1/queues/{RELAY_QUEUE}/jobs", body)
            h.refused(r, 400, "RESERVED_QUEUE")
            assert "'sluice-'" in r.doc["detail"]
        h.refused(h.call("POST", f"/v1/queues/{RELAY_QUEUE}/jobs/batch", {"jobs": issue_bodies}),
                  400, "RESERVED_QUEUE")
        h.refused(h.call("POST", "/v1/queues/sluice-anything/jobs", {"payload": 1}), 400, "RESERVED_QUEUE")
        keyed = h.call("POST", f"/v1/queues/{RELAY_QUEUE}/jobs", {"payload": 1},
                       headers={"Idempotency-Key": "hostile-reserved-key"})
        h.refused(keyed, 400, "RESERVED_QUEUE")
        h.refused(h.call("GET", f"/v1/queues/{RELAY_QUEUE}"), 400, "RESERVED_QUEUE")
        # The relay's own partition job ids, and a correctly signed id naming the reserved queue.
        minted = ids.mint(int(time.time() * 1000), RELAY_QUEUE, _key(h.settings))
        topic = h.settings.kafka_topic
        partition_ids = [partition_job_id(topic, tp.partition) for tp in h.offsets.partitions]
        for job_id in [*partition_ids, minted]:
            h.refused(h.call("GET", f"/v1/jobs/{job_id}"), 404, "NOT_FOUND")
            h.refused(h.call("DELETE", f"/v1/jobs/{job_id}"), 404, "NOT_FOUND")
    # The refused request did not take its Idempotency-Key (else: 422 for another queue and body).
    again = h.call("POST", "/v1/queues/echo/jobs", {"payload": {"key": "reused"}},
                   headers={"Idempotency-Key": "hostile-reserved-key"})
    assert again.status == 202, again.doc
    h.ordinary.ids.append(again.doc["job_id"])
    # Every partition is still owned once (a DELETE of a partition job never reached Redis).
    def owned() -> bool:
        stats = h.engine.stats(RELAY_QUEUE)
        return (stats.ready + stats.leased, stats.dead) == (len(h.offsets.partitions), 0)

    wait_until("every partition job is in the ownership queue", owned)


def _key(settings: Settings) -> bytes:
    from sluice.entry import root as wiring

    return wiring.job_id_key(settings)


# -- priority flood ----------------------------------------------------------------------------------


def test_a_priority_flood_above_max_caller_priority_is_403(hostile: Hostile) -> None:
    h = hostile
    with h.writes_nothing():
        for n in range(40):  # the local gateway's caller has no operator identity
            prio = MAX_CALLER_PRIORITY + 1 + n % (9 - MAX_CALLER_PRIORITY)
            h.refused(h.call("POST", "/v1/queues/echo/jobs", {"payload": n, "priority": prio}),
                      403, "PRIORITY_NOT_ALLOWED")
        batch = [{"payload": i, "priority": MAX_CALLER_PRIORITY} for i in range(5)]
        batch[3]["priority"] = 9
        r = h.call("POST", "/v1/queues/echo/jobs/batch", {"jobs": batch})
        h.refused(r, 403, "PRIORITY_NOT_ALLOWED")
        assert "3" in r.doc["detail"], r.doc
    # At the limit: an ordinary job.
    assert h.ordinary.enqueue(-1, priority=MAX_CALLER_PRIORITY) is not None, h.ordinary.refused


# -- oversized payloads and batches --------------------------------------------------------------------


def test_oversized_payloads_and_batches_are_refused(hostile: Hostile) -> None:
    h = hostile
    big = "x" * (MAX_PAYLOAD + 1)
    with h.writes_nothing():
        h.refused(h.call("POST", "/v1/queues/echo/jobs", {"payload": big}), 413, "PAYLOAD_TOO_LARGE")
        jobs: list[dict[str, Any]] = [{"payload": i} for i in range(5)]
        jobs[2] = {"payload": big}
        r = h.call("POST", "/v1/queues/echo/jobs/batch", {"jobs": jobs})
        h.refused(r, 413, "PAYLOAD_TOO_LARGE")
        assert "2" in r.doc["detail"], r.doc
        # A body over max_payload_bytes + 64 KiB is refused before it is decoded.
        raw = b'{"payload": "' + b"y" * (MAX_PAYLOAD + 70_000) + b'"}'
        h.refused(h.call("POST", "/v1/queues/echo/jobs", raw=raw), 413, "PAYLOAD_TOO_LARGE")
        # 101 jobs: over the batch's 100 (a validation error).
        r = h.call("POST", "/v1/queues/echo/jobs/batch", {"jobs": [{"payload": i} for i in range(101)]})
        h.refused(r, 400, "INVALID_INPUT")
        # 99 jobs of nearly the largest payload and a last one over it (a ~200 KiB body).
        fits = {"payload": "z" * (MAX_PAYLOAD - 16)}
        r = h.call("POST", "/v1/queues/echo/jobs/batch", {"jobs": [*[fits] * 99, {"payload": big}]})
        h.refused(r, 413, "PAYLOAD_TOO_LARGE")
        # A batch body over 10 MiB (API Gateway's own limit).
        raw = b'{"jobs": [{"payload": "' + b"w" * (10 * 1024 * 1024 + 1) + b'"}]}'
        h.refused(h.call("POST", "/v1/queues/echo/jobs/batch", raw=raw), 413, "PAYLOAD_TOO_LARGE")


# -- deeply delayed batches, until the delayed cap ---------------------------------------------------


def test_deeply_delayed_batches_wait_in_the_delay_lane_not_in_redis(hostile: Hostile) -> None:
    h = hostile
    queue = "deferred"
    week = [{"payload": i, "delay_seconds": WEEK_S} for i in range(10)]
    with h.writes_nothing():  # one second beyond the maximum delay: refused, naming the job
        r = h.call("POST", f"/v1/queues/{queue}/jobs/batch",
                   {"jobs": [*week[:4], {"payload": 4, "delay_seconds": WEEK_S + 1}]})
        h.refused(r, 400, "INVALID_INPUT")
        assert [e.get("index") for e in r.doc["errors"]] == [4], r.doc
        h.refused(h.call("POST", f"/v1/queues/{queue}/jobs", {"payload": 1, "delay_seconds": 10 ** 9}),
                  400, "INVALID_INPUT")
    # A week ahead is beyond the relay's horizon (issue 28, the delay lane): the relay parks such a
    # job by run time in DynamoDB, so Redis holds none of them and the delayed cap (what Redis may
    # hold) never fills. Before the delay lane, past the cap a flood like this held its queue's
    # ready jobs, and its partition, behind jobs due in a week.
    accepted: list[str] = []
    for _ in range(3):  # 60 jobs, three times the cap
        with h.ordinary.lock, ThreadPoolExecutor(2) as pool:
            replies = list(pool.map(lambda _: h.call("POST", f"/v1/queues/{queue}/jobs/batch",
                                                       {"jobs": week}), range(2)))
        for r in replies:
            assert r.status == 202, r.doc
            accepted += [j["job_id"] for j in r.doc["jobs"]]
    h.accepted[queue] = accepted
    assert len(accepted) == 3 * MAX_DELAYED
    wait_until("the relay parks every one", lambda: (h.queue(queue).get("parked") or 0) >= len(accepted))
    h.ordinary.enqueue(-2)  # during the flood
    stats = h.queue(queue)
    assert (stats["delayed"], stats["max_delayed"]) == (0, MAX_DELAYED), stats
    states = [h.call("GET", f"/v1/jobs/{i}").doc["status"] for i in accepted]
    assert states.count("accepted") == len(accepted), states  # waiting, none dropped


# -- a queue with no handler, until its dead cap ----------------------------------------------------------


def test_a_queue_whose_jobs_all_die_stops_at_its_dead_cap(hostile: Hostile) -> None:
    h = hostile
    queue = "nohandler"
    refusal, accepted = None, 0
    deadline = time.monotonic() + 30
    while refusal is None:
        assert time.monotonic() < deadline, f"{accepted} jobs to a queue without a handler and no 429"
        with h.ordinary.lock:
            before = h.offsets.settled()
            r = h.call("POST", f"/v1/queues/{queue}/jobs", {"payload": accepted, "max_attempts": 1})
            if r.status == 202:
                h.accepted.setdefault(queue, []).append(r.doc["job_id"])
            if r.status == 429:
                assert h.offsets.settled() == before, "a 429 wrote to the jobs topic"
                refusal = r
                continue
        assert r.status == 202, r.doc
        accepted += 1
        if accepted == 2:
            h.ordinary.enqueue(-3)  # during the flood
    h.refused(refusal, 429, "QUEUE_FULL")
    assert int(refusal.headers["retry-after"]) >= 1
    assert accepted >= MAX_DEAD
    stats = h.queue(queue)
    assert stats["dead"] >= MAX_DEAD and stats["max_dead"] == MAX_DEAD, stats


# -- random queue names, until the registry is full ----------------------------------------------------------


def test_random_queue_names_stop_at_the_registry_bound(hostile: Hostile) -> None:
    h = hostile
    refusal, accepted = None, 0
    deadline = time.monotonic() + 30
    while refusal is None:
        assert time.monotonic() < deadline, f"{accepted} new queue names and no 403"
        name = f"rnd-{uuid.uuid4().hex[:12]}"
        with h.ordinary.lock:
            before = h.offsets.settled()
            r = h.call("POST", f"/v1/queues/{name}/jobs", {"payload": 1, "max_attempts": 1})
            if r.status == 202:
                h.accepted[name] = [r.doc["job_id"]]
            if r.status == 403:
                assert h.offsets.settled() == before, "a 403 wrote to the jobs topic"
                refusal = r
                continue
        assert r.status == 202, r.doc
        accepted += 1  # (settled() waits: the relay registers a queue when it first pushes into it)
    h.refused(refusal, 403, "QUEUE_NOT_ALLOWED")
    assert accepted <= MAX_QUEUES
    # Names the gateway accepted before its view caught up are dead-lettered by the relay, never
    # registered: the registry stays at its bound.
    time.sleep(1.5)
    assert h.engine.registry("never-seen")[1] <= MAX_QUEUES
    assert h.engine.registry("echo")[0]  # a registered queue still takes jobs (the ordinary thread)


# -- and after all of it ----------------------------------------------------------------------------------


def test_ordinary_jobs_during_and_after_the_floods_succeed(hostile: Hostile) -> None:
    h = hostile
    h.ordinary.stop.set()
    assert h.ordinary.thread is not None
    h.ordinary.thread.join(30)
    during = list(h.ordinary.ids)
    assert len(during) >= 5 and not h.ordinary.refused, (during, [r.doc for r in h.ordinary.refused])
    before = h.offsets.settled()
    after = h.ordinary.enqueue(10_000)
    assert after is not None, h.ordinary.refused
    # The instrument of writes_nothing sees a write (this one at least).
    wait_until("the ordinary job's record", lambda: sum(h.offsets().values()) > sum(before.values()),
               timeout_s=10)

    def statuses() -> dict[str, str]:
        return {i: h.call("GET", f"/v1/jobs/{i}").doc.get("status") for i in h.ordinary.ids}

    def all_succeeded() -> bool:
        return set(statuses().values()) == {"succeeded"}

    with contextlib.suppress(AssertionError):
        wait_until("every ordinary job succeeds", all_succeeded, timeout_s=40, every_s=0.5)
    final = statuses()
    assert set(final.values()) == {"succeeded"}, {i: s for i, s in final.items() if s != "succeeded"}
    done = h.call("GET", f"/v1/jobs/{after}").doc
    assert done["result"] == {"echo": {"n": 10_000}}, done


def test_the_jobs_topic_holds_only_what_was_answered_202(hostile: Hostile) -> None:
    """The audit behind every ``writes_nothing``, on the records themselves: a hostile queue's
    records are exactly the jobs answered 202, and no record breaks a limit."""
    from tests.backends.test_gateway_stack import kafka_records

    h = hostile
    by_queue: dict[str, list[str]] = {}
    for key, spec in kafka_records(h.settings):
        assert not spec["queue"].startswith("sluice-"), spec
        assert spec["priority"] <= MAX_CALLER_PRIORITY, spec
        assert len(json.dumps(spec["payload"], separators=(",", ":"))) <= MAX_PAYLOAD, key
        assert spec["run_at_ms"] <= spec["enqueued_at_ms"] + WEEK_S * 1000 + 1000, spec
        by_queue.setdefault(spec["queue"], []).append(key)
    assert len(h.accepted) >= 4, h.accepted  # deferred, nohandler and the random names
    for queue, accepted in h.accepted.items():
        assert sorted(by_queue.get(queue, [])) == sorted(accepted), queue
    assert set(by_queue) - set(h.accepted) == {"echo"}, sorted(by_queue)
