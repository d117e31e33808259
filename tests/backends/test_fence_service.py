"""Fencing for services (issue 31, item 7): the fence's stores on their real servers (redis-server,
moto server), the WSGI middleware behind a real HTTP server called by a handler's ``ctx.http``, and
the ASGI middleware called in-process, with the hostile cases: a forged huge token, a negative one,
another job's, a replay of the same token, and requests racing."""

from __future__ import annotations

import asyncio
import json
import random
import threading
import uuid
from collections.abc import Iterator
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import boto3
import pytest
import redis

from sluice.core.bus import EventBus, FencedCall
from sluice.core.errors import BackendUnavailable, InvalidInput, StaleToken
from sluice.core.fencing import MAX_FENCE_TOKEN, fence_headers
from sluice.worker.runtime.http import FencedHttp
from sluice_fence import (
    ENVIRON_KEY,
    Admitted,
    DynamoFenceStore,
    Fence,
    FenceASGI,
    FenceStore,
    FenceWSGI,
    RedisFenceStore,
)
from sluice_fence.redis_store import PREFIX, SCRIPT

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


@pytest.fixture(params=["redis", "dynamodb"])
def store(request: pytest.FixtureRequest) -> FenceStore:
    if request.param == "redis":
        return RedisFenceStore(redis.Redis.from_url(request.getfixturevalue("redis_url")))
    db = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=request.getfixturevalue("moto_url"))
    s = DynamoFenceStore(db, f"fence-{uuid.uuid4().hex[:10]}")
    s.create_table()
    return s


def test_a_token_is_recorded_when_newer_let_through_again_when_equal_and_refused_when_older(
        store: FenceStore) -> None:
    assert store.advance("j1", 3) == ("new", 3)
    assert store.advance("j1", 3) == ("same", 3)  # a retry of the same attempt
    assert store.advance("j1", 2) == ("stale", 3)  # an older holder: nothing written
    assert store.advance("j1", 1) == ("stale", 3)
    assert store.advance("j1", 7) == ("new", 7)
    assert store.advance("j1", 3) == ("stale", 7)
    assert store.advance("j2", 1) == ("new", 1)  # another job's tokens are its own
    assert store.advance("j1", 6) == ("stale", 7)


def test_tokens_compare_exactly_up_to_2_63_and_nothing_past_it_is_recorded(store: FenceStore) -> None:
    """Lua's numbers are doubles: 2^63-1 and 2^63-2 are one double; the script compares digits."""
    assert store.advance("big", MAX_FENCE_TOKEN - 1) == ("new", MAX_FENCE_TOKEN - 1)
    assert store.advance("big", MAX_FENCE_TOKEN) == ("new", MAX_FENCE_TOKEN)
    assert store.advance("big", MAX_FENCE_TOKEN - 1) == ("stale", MAX_FENCE_TOKEN)
    assert store.advance("small", 2**53 + 1) == ("new", 2**53 + 1)
    assert store.advance("small", 2**53) == ("stale", 2**53 + 1)
    for forged in (MAX_FENCE_TOKEN + 1, 2**64, 10**30, 0, -1, True):
        with pytest.raises(InvalidInput):
            store.advance("j", forged)
    assert store.advance("j", 1) == ("new", 1)  # none of them was recorded


def test_the_script_refuses_what_it_was_not_written_for_before_writing(redis_client: redis.Redis) -> None:
    script = redis_client.register_script(SCRIPT)
    for token in ("9223372036854775808", "18446744073709551616", "-1", "0", "05", "+5", " 5", "5.0", "1e3",
                  "0x10", "", "99999999999999999999"):
        with pytest.raises(redis.ResponseError, match="INVALID_INPUT token"):
            script(keys=[PREFIX + "k"], args=[token, "1000"])
    for ttl in ("0", "-5", "1.5", "31536000001", "x"):
        with pytest.raises(redis.ResponseError, match="INVALID_INPUT ttl_ms"):
            script(keys=[PREFIX + "k"], args=["5", ttl])
    assert redis_client.keys("*") == []
    redis_client.set(PREFIX + "k", "not a token")  # no script wrote this: refused, left as it is
    with pytest.raises(redis.ResponseError, match="INVALID_STATE"):
        script(keys=[PREFIX + "k"], args=["5", "1000"])
    assert redis_client.get(PREFIX + "k") == "not a token"
    store = RedisFenceStore(redis_client, ttl_ms=60_000)
    store.advance("t", 4)
    assert redis_client.get(PREFIX + "t") == "4" and 59_000 < redis_client.pttl(PREFIX + "t") <= 60_000


def test_the_dynamodb_record_carries_its_expiry(moto_url: str) -> None:
    db = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=moto_url)
    store = DynamoFenceStore(db, f"fence-{uuid.uuid4().hex[:10]}", ttl_s=3_600)
    store.create_table()
    store.advance("a", 2)
    item = db.get_item(TableName=store.table, Key={"fence": {"S": "a"}})["Item"]
    assert item["token"] == {"N": "2"} and int(item["expires_at"]["N"]) > 0
    assert db.describe_time_to_live(TableName=store.table)["TimeToLiveDescription"]["AttributeName"] == \
        "expires_at"


def test_racing_requests_record_the_newest_and_refuse_only_older_ones(store: FenceStore) -> None:
    """8 threads send tokens 1..120 of one job in a shuffled order at once. Each refusal names a
    newer token recorded; each admission recorded its own; the newest a thread is told never goes
    back (the record only grows); the record ends at 120."""
    tokens = list(range(1, 121))
    random.Random(7).shuffle(tokens)
    answers: list[tuple[int, str, int]] = []
    lock = threading.Lock()
    told: dict[int, list[int]] = {}

    def send(i: int, mine: list[int]) -> None:
        for t in mine:
            verdict, newest = store.advance("race", t)
            told.setdefault(i, []).append(newest)
            with lock:
                answers.append((t, verdict, newest))

    threads = [threading.Thread(target=send, args=(i, tokens[i::8])) for i in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    assert len(answers) == 120
    for t, verdict, newest in answers:
        if verdict == "stale":
            assert newest > t
        else:
            assert (verdict, newest) == ("new", t)
    assert all(seen == sorted(seen) for seen in told.values())
    assert store.advance("race", 120) == ("same", 120)
    assert store.advance("race", 119) == ("stale", 120)


# --- the WSGI middleware behind a real HTTP server, called by ctx.http -----------------------------

class _Threaded(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture
def service(redis_url: str) -> Iterator[tuple[str, list[Admitted]]]:
    """A service's WSGI app under the fence (Redis), served by wsgiref on its own threads; yields its
    URL and what the app saw admitted."""
    seen: list[Admitted] = []

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        seen.append(environ.get(ENVIRON_KEY))  # type: ignore[arg-type]
        start_response("200 OK", [("Content-Type", "application/json")])
        return [json.dumps({"done": True}).encode()]

    fence = Fence(RedisFenceStore(redis.Redis.from_url(redis_url)), namespace="billing")
    server = make_server("127.0.0.1", 0, FenceWSGI(app, fence), server_class=_Threaded, handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/charge", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_a_stale_holders_call_is_refused_by_the_wsgi_fence_and_raises_stale_token(
        service: tuple[str, list[Admitted]]) -> None:
    url, seen = service
    calls: list[FencedCall] = []
    bus = EventBus()
    bus.subscribe(calls.append, FencedCall)
    a, b = FencedHttp("job-1", 1, bus), FencedHttp("job-1", 2, bus)
    assert a.request("POST", url, json={"amount": 5}).status == 200  # A, the holder then
    assert b.request("POST", url, json={"amount": 5}, resource="charge").status == 200  # B took over
    with pytest.raises(StaleToken) as refused:
        a.request("POST", url, json={"amount": 5})  # A wakes up: refused, never reaches the app
    assert (refused.value.mine, refused.value.current, refused.value.details["job_id"]) == (1, 2, "job-1")
    assert b.request("PUT", url, body=b"again").status == 200  # B's retry of its own call: let through
    assert [(s.claim.token, s.replay) for s in seen if s.claim] == [(1, False), (2, False), (2, True)]
    assert [(c.outcome, c.status, c.current) for c in calls] == [
        ("ok", 200, None), ("ok", 200, None), ("rejected", 0, 2), ("ok", 200, None)]
    assert FencedHttp("job-2", 1, bus).request("POST", url).status == 200  # another job: its own fence


def test_the_wsgi_fence_answers_missing_and_malformed_headers_with_400_problems(
        service: tuple[str, list[Admitted]]) -> None:
    import urllib3

    url, seen = service
    http = urllib3.PoolManager()
    good = fence_headers("job-1", 5)

    def post(headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
        r = http.request("POST", url, headers=headers, body=b"{}", retries=False)
        return r.status, json.loads(r.data) if r.status != 200 else {}

    status, body = post({})
    assert status == 400 and body["type"] == "urn:sluice:problem:fencing-required"
    for bad in ({**good, "Sluice-Fencing-Token": "18446744073709551616"},  # forged, past 2^63
                {**good, "Sluice-Fencing-Token": "-3"}, {**good, "Sluice-Fencing-Token": "0"},
                {**good, "Sluice-Fencing-Token": "0x7"}, {**good, "Sluice-Fencing-Token": "1e3"},
                {**good, "Sluice-Job-Id": "../etc"}, {"Sluice-Fencing-Token": "5"},
                {"Sluice-Fence-Resource": "x"}, {**good, "Sluice-Fence-Resource": "a\tb"}):
        status, body = post(bad)
        assert (status, body["type"]) == (400, "urn:sluice:problem:bad-fencing"), bad
    twice = urllib3.HTTPHeaderDict(good)
    twice.add("Sluice-Fencing-Token", "9")  # a token given twice: which one? neither
    r = http.request("POST", url, headers=twice, body=b"{}", retries=False)
    assert r.status == 400
    assert http.request("GET", url, retries=False).status == 200  # reads are not fenced by default
    assert seen == [Admitted(None)]
    assert post(good)[0] == 200  # nothing refused was recorded: 5 is the first


# --- the ASGI middleware, called in-process ---------------------------------------------------------

def asgi_call(app: Any, method: str, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    sent: list[dict[str, Any]] = []
    scope = {"type": "http", "method": method, "path": "/x",
             "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()]}

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], json.loads(body) if body else {}


def test_the_asgi_fence_refuses_an_older_token_and_passes_what_it_admits(store: FenceStore) -> None:
    seen: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope.get(ENVIRON_KEY))
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": b'{"ok": true}'})

    fenced = FenceASGI(app, Fence(store, missing="allow"))
    assert asgi_call(fenced, "POST", fence_headers("job-9", 4))[0] == 201
    status, body = asgi_call(fenced, "DELETE", fence_headers("job-9", 3, "row-1"))
    assert status == 409 and (body["type"], body["token"], body["current"], body["resource"]) == \
        ("urn:sluice:problem:stale-token", 3, 4, "row-1")
    assert asgi_call(fenced, "PATCH", fence_headers("job-9", 4))[0] == 201  # the same token: a retry
    assert asgi_call(fenced, "POST", {})[0] == 201  # missing="allow": not a worker's call
    status, body = asgi_call(fenced, "POST", {"Sluice-Job-Id": "job-9", "Sluice-Fencing-Token": "-4"})
    assert status == 400  # malformed is refused even where missing headers are allowed
    assert [(a.claim and a.claim.token, a.replay) for a in seen] == [(4, False), (4, True), (None, False)]

    async def lifespan() -> None:
        done: list[Any] = []

        async def receive() -> dict[str, Any]:
            return {"type": "lifespan.startup"}

        async def send(m: Any) -> None:
            done.append(m)

        async def passthrough(scope: Any, r: Any, s: Any) -> None:
            await s({"type": "lifespan.startup.complete"})

        await FenceASGI(passthrough, Fence(store))({"type": "lifespan"}, receive, send)
        assert done == [{"type": "lifespan.startup.complete"}]

    asyncio.run(lifespan())


def test_a_store_that_cannot_answer_refuses_with_503_and_records_nothing() -> None:
    class Down:
        def advance(self, key: str, token: int) -> Any:
            raise BackendUnavailable("fence store: connection refused")

    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("a request the fence could not check reached the app")

    status, body = asgi_call(FenceASGI(app, Fence(Down())), "POST", fence_headers("j", 1))
    assert status == 503 and body["type"] == "urn:sluice:problem:fence-unavailable"
    unreachable = RedisFenceStore(redis.Redis(port=1, socket_connect_timeout=0.2))
    with pytest.raises(BackendUnavailable):
        unreachable.advance("j", 1)


def test_per_resource_fences_each_resource_of_a_job_apart(redis_url: str) -> None:
    per_job = Fence(RedisFenceStore(redis.Redis.from_url(redis_url)), namespace="a")
    per_res = Fence(RedisFenceStore(redis.Redis.from_url(redis_url)), namespace="b", per_resource=True)

    def decide(fence: Fence, token: int, resource: str) -> int | None:
        headers = fence_headers("job-r", token, resource)
        return fence.decide("POST", lambda n: [headers[n]] if n in headers else []).status

    for fence in (per_job, per_res):
        assert decide(fence, 2, "email") == 200
    assert decide(per_job, 1, "charge") == 409  # a stale holder is refused on every resource
    assert decide(per_res, 1, "charge") == 200  # ... unless the service fences resources apart
    assert decide(per_res, 1, "email") == 409


def test_the_examples_in_docs_worker_md_run(redis_url: str) -> None:
    """docs/worker.md, "Fencing for services": the service's example behind a real HTTP server, and
    the handler's, run by a worker (fakes for the queue and the store) that calls it."""
    from pathlib import Path

    import sluice
    from sluice_dev.fakes import FakeQueue, kit

    text = (Path(__file__).parents[2] / "docs" / "worker.md").read_text()
    section = text.split("## Fencing for services", 1)[1].split("\n## ", 1)[0]
    handler_src, service_src = [block.split("```", 1)[0] for block in section.split("```python\n")[1:3]]
    service_ns: dict[str, Any] = {"REDIS_URL": redis_url}
    exec(compile(service_src, "docs/worker.md", "exec"), service_ns)
    server = make_server("127.0.0.1", 0, service_ns["app"], server_class=_Threaded, handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        k = kit(FakeQueue())
        handler_ns: dict[str, Any] = {"app": k.app, "sluice": sluice, "BILLING_URL":
                                      f"http://127.0.0.1:{server.server_port}/charges"}
        exec(compile(handler_src, "docs/worker.md", "exec"), handler_ns)
        k.queue.add("charge", "ch-ok", {"amount": 5})
        assert dict(k.worker().drain(["charge"], 1).outcomes) == {"succeeded": 1}
        assert k.store.get_job("ch-ok").result == {"charge": "ch_1"}
        RedisFenceStore(redis.Redis.from_url(redis_url)).advance("billing:ch-stale", 9)  # a newer holder
        k.queue.add("charge", "ch-stale", {"amount": 5})
        assert dict(k.worker().drain(["charge"], 1).outcomes) == {"lease_lost": 1}
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_racing_holders_through_the_wsgi_fence_only_older_tokens_are_refused(
        service: tuple[str, list[Admitted]], redis_url: str) -> None:
    """Six threads call as holders 1..60 of one job at once, over HTTP through the middleware: every
    call the fence refused had a newer token already recorded, every call it let through reached the
    app, and the record ends at the newest token sent."""
    url, seen = service
    tokens = list(range(1, 61))
    random.Random(3).shuffle(tokens)
    refused: list[tuple[int, int]] = []
    lock = threading.Lock()

    def holder(mine: list[int]) -> None:
        for t in mine:
            try:
                FencedHttp("job-race", t, EventBus()).request("POST", url, json={"t": t})
            except StaleToken as exc:
                with lock:
                    refused.append((t, int(exc.current or 0)))

    threads = [threading.Thread(target=holder, args=(tokens[i::6],)) for i in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    assert refused and all(current > t for t, current in refused)
    admitted = sorted(s.claim.token for s in seen if s.claim is not None)
    assert sorted(admitted + [t for t, _ in refused]) == list(range(1, 61)) and 60 in admitted
    assert redis.Redis.from_url(redis_url).get(PREFIX + "billing:job-race") == b"60"
