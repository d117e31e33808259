"""The built-in example handlers (sluice_dev.examples), called directly with a stand-in context."""

from __future__ import annotations

import hashlib
import io
import json
import threading
import time
import urllib.error
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sluice import Fail, Job, LeaseLost, Retry
from sluice.backends.dynamodb.fenced import IDEMPOTENCY_HEADER, TOKEN_HEADER
from sluice_dev import examples as ex


class Ctx:
    def __init__(self, token: int = 7) -> None:
        self.token = token
        self.lease_lost = threading.Event()
        self.cancel_requested = threading.Event()
        self.lease_deadline_ms = 1_000
        self.tables: list[tuple[str, dict[str, Any]]] = []

    def fenced_table(self, name: str) -> Any:
        ctx = self

        class Table:
            def put_item(self, item: dict[str, Any]) -> None:
                ctx.tables.append((name, item))

        return Table()


def job(queue: str, payload: Any, attempt: int = 1) -> Job:
    return Job(job_id="01JOB", queue=queue, payload=payload, attempt=attempt, max_attempts=3)


def test_every_example_queue_has_a_handler() -> None:
    assert set(ex.app.handlers) == {"echo", "hash", "notify", "ledger", "flaky", "slow", "thumbnails",
                                    "fanout", "square", "sum"}


def test_echo_returns_the_payload_under_echo() -> None:
    payload = {"hello": ["world", 1, None]}
    assert ex.echo(job("echo", payload), Ctx()) == {"echo": payload}  # type: ignore[arg-type]
    assert ex.expected_result("echo", payload) == {"echo": payload}


def test_hash_iterates_sha256_and_matches_the_prediction() -> None:
    result = ex.hash_payload(job("hash", {"data": "abc", "rounds": 2}), Ctx())  # type: ignore[arg-type]
    once = hashlib.sha256(b"abc").digest()
    assert result == {"sha256": hashlib.sha256(once).hexdigest(), "rounds": 2}
    assert ex.expected_result("hash", {"data": "abc", "rounds": 2}) == result


@pytest.mark.parametrize("rounds", [0, -1, True, 1.5, "3", ex.MAX_ROUNDS + 1])
def test_hash_refuses_bad_rounds_permanently(rounds: Any) -> None:
    with pytest.raises(Fail):
        ex.hash_payload(job("hash", {"data": "x", "rounds": rounds}), Ctx())  # type: ignore[arg-type]


def test_handlers_refuse_a_payload_that_is_not_an_object() -> None:
    for fn in (ex.hash_payload, ex.notify, ex.ledger, ex.slow):
        with pytest.raises(Fail, match="JSON object"):
            fn(job("x", [1, 2]), Ctx())  # type: ignore[arg-type]


def test_flaky_fails_exactly_as_predicted_then_succeeds_with_an_attempt_free_result() -> None:
    payload = {"fail_attempts": 2}
    assert ex.failing_attempts(payload) == 2
    for attempt in (1, 2):
        with pytest.raises(RuntimeError, match="on purpose"):
            ex.flaky(job("flaky", payload, attempt), Ctx())  # type: ignore[arg-type]
    third = ex.flaky(job("flaky", payload, 3), Ctx())  # type: ignore[arg-type]
    fourth = ex.flaky(job("flaky", payload, 4), Ctx())  # type: ignore[arg-type]
    assert third == fourth == ex.expected_result("flaky", payload)


def test_flaky_always_fail_never_succeeds_and_has_no_expected_result() -> None:
    payload = {"always_fail": True}
    assert ex.failing_attempts(payload) is None
    with pytest.raises(RuntimeError):
        ex.flaky(job("flaky", payload, 99), Ctx())  # type: ignore[arg-type]
    assert ex.expected_result("flaky", payload) is ...


def test_flaky_default_fails_about_one_payload_in_five_deterministically() -> None:
    outcomes = [ex.failing_attempts({"i": i}) for i in range(1000)]
    assert outcomes == [ex.failing_attempts({"i": i}) for i in range(1000)]
    assert set(outcomes) == {0, 1}
    assert 150 < outcomes.count(1) < 250


def test_ledger_writes_one_entry_per_job_through_the_fenced_table() -> None:
    ctx = Ctx(token=4)
    result = ex.ledger(job("ledger", {"account": "a1", "amount": 5}), ctx)  # type: ignore[arg-type]
    assert result == {"account": "a1", "amount": 5, "entry": "a1#01JOB"}
    assert ctx.tables == [(ex.LEDGER_TABLE, {"pk": "a1#01JOB", "account": "a1", "amount": 5,
                                              "job_id": "01JOB", "token": 4})]


def test_ledger_tells_its_service_first_and_writes_even_when_the_services_fence_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The notice (issue 31, item 7) goes through ctx.http; it is best effort, so a stale holder's
    refused notice is logged and the write is tried all the same (the fenced table refuses it)."""
    from sluice.core.errors import StaleToken

    sent: list[tuple[str, str, dict[str, Any]]] = []

    class Http:
        def request(self, method: str, url: str, **kw: Any) -> Any:
            sent.append((method, url, kw))
            if len(sent) > 1:
                raise StaleToken(mine=4, current=5)
            return None

    class Log:
        def __init__(self) -> None:
            self.lines: list[str] = []

        def warning(self, msg: str, *args: Any) -> None:
            self.lines.append(msg % args)

    ctx = Ctx(token=4)
    ctx.http, ctx.logger = Http(), Log()  # type: ignore[attr-defined]
    monkeypatch.setenv(ex.SERVICE_URL_ENV, "http://svc:1/service/")
    payload = {"account": "a1", "amount": 5, "notice": True}
    for _ in range(2):
        ex.ledger(job("ledger", payload), ctx)  # type: ignore[arg-type]
    assert [(m, u, kw["json"], kw["resource"]) for m, u, kw in sent] == [
        ("POST", "http://svc:1/service/ledger", {"account": "a1", "amount": 5}, "ledger-notice")] * 2
    assert len(ctx.tables) == 2 and "ledger notice not sent" in ctx.logger.lines[0]  # type: ignore[attr-defined]
    monkeypatch.delenv(ex.SERVICE_URL_ENV)
    with pytest.raises(Fail, match=ex.SERVICE_URL_ENV):
        ex.ledger(job("ledger", payload), ctx)  # type: ignore[arg-type]


def test_ledger_refuses_a_non_integer_amount() -> None:
    with pytest.raises(Fail):
        ex.ledger(job("ledger", {"amount": 1.5}), Ctx())  # type: ignore[arg-type]


def test_slow_outlives_nothing_when_short_and_stops_when_the_lease_is_lost() -> None:
    assert ex.slow(job("slow", {"seconds": 0.05}), Ctx()) == {"slept": 0.05, "renewals": 0}  # type: ignore[arg-type]
    ctx = Ctx()
    ctx.lease_lost.set()
    with pytest.raises(LeaseLost):
        ex.slow(job("slow", {"seconds": 5}), ctx)  # type: ignore[arg-type]
    with pytest.raises(Fail):
        ex.slow(job("slow", {"seconds": -1}), Ctx())  # type: ignore[arg-type]


def test_slow_stops_early_when_a_cancel_is_requested() -> None:
    ctx = Ctx()
    ctx.cancel_requested.set()
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="cancel was requested"):
        ex.slow(job("slow", {"seconds": 5}), ctx)  # type: ignore[arg-type]
    assert time.monotonic() - started < 1


class FakeResponse(io.BytesIO):
    status = 200

    def __enter__(self) -> FakeResponse:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


@pytest.fixture
def sink_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ex.NOTIFY_HOSTS_ENV, "127.0.0.1:9")


def test_notify_sends_the_fencing_token_and_a_stable_idempotency_key(monkeypatch: pytest.MonkeyPatch,
                                                                      sink_host: None) -> None:
    seen: list[Any] = []

    def urlopen(request: Any, timeout: float) -> FakeResponse:
        seen.append(request)
        return FakeResponse(json.dumps({"accepted": True}).encode())

    monkeypatch.setattr(ex, "_open", urlopen)
    result = ex.notify(job("notify", {"url": "http://127.0.0.1:9/sink/x", "message": "hi"}),
                       Ctx(token=12))  # type: ignore[arg-type]
    assert result == {"status": 200, "reply": {"accepted": True}}
    headers = {k.lower(): v for k, v in seen[0].header_items()}
    assert headers[TOKEN_HEADER.lower()] == "12"
    assert headers[IDEMPOTENCY_HEADER.lower()] == "01JOB"
    assert json.loads(seen[0].data) == {"job_id": "01JOB", "message": "hi"}


@pytest.mark.parametrize(("status", "raised"), [(409, LeaseLost), (503, Retry), (429, Retry), (400, Fail)])
def test_notify_maps_the_service_answer(monkeypatch: pytest.MonkeyPatch, status: int, raised: type,
                                       sink_host: None) -> None:
    def urlopen(request: Any, timeout: float) -> FakeResponse:
        raise urllib.error.HTTPError(request.full_url, status, "no", {}, io.BytesIO(b"{}"))  # type: ignore[arg-type]

    monkeypatch.setattr(ex, "_open", urlopen)
    with pytest.raises(raised):
        ex.notify(job("notify", {"url": "http://127.0.0.1:9/sink"}), Ctx())  # type: ignore[arg-type]


def test_notify_without_any_url_fails_permanently(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ex.SINK_URL_ENV, raising=False)
    with pytest.raises(Fail, match="no sink URL"):
        ex.notify(job("notify", {}), Ctx())  # type: ignore[arg-type]


# ------------------------------------------------------------------ issue 19, item 4


def test_the_deployed_default_handlers_module_has_no_handlers() -> None:
    import importlib

    from sluice.core.config import Settings
    from tests.infra.cfn import template

    default = Settings().handlers_module
    assert template()["Parameters"]["WorkerHandlersModule"]["Default"] == default != "sluice_dev.examples"
    assert importlib.import_module(default).app.handlers == {}


@pytest.mark.parametrize("url", [
    "http://169.254.169.254/latest/meta-data/", "http://127.0.0.1:10/sink", "http://127.0.0.1/sink",
    "https://internal.corp:9/x", "http://127.0.0.1:9@evil.example/x", "http://user:pw@127.0.0.1:9/x",
    "file:///etc/passwd", "http://127.0.0.1:bad/x",
])
def test_notify_calls_only_allowed_hosts(monkeypatch: pytest.MonkeyPatch, sink_host: None, url: str) -> None:
    monkeypatch.setattr(ex, "_open", lambda *a, **k: pytest.fail(f"called {url}"))
    with pytest.raises(Fail):
        ex.notify(job("notify", {"url": url}), Ctx())  # type: ignore[arg-type]


def test_notify_allows_the_sink_host_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ex.NOTIFY_HOSTS_ENV, raising=False)
    monkeypatch.setenv(ex.SINK_URL_ENV, "http://127.0.0.1:4567/sink")
    assert ex.notify_hosts() == {"127.0.0.1:4567"}
    monkeypatch.delenv(ex.SINK_URL_ENV)
    assert ex.notify_hosts() == set()  # nothing configured: nothing may be called
    monkeypatch.setenv(ex.NOTIFY_HOSTS_ENV, "Hooks.Example.com, 10.0.0.5:8080")
    assert ex._allowed("https://hooks.example.com/x", ex.notify_hosts())
    assert ex._allowed("http://10.0.0.5:8080/x", ex.notify_hosts())
    assert not ex._allowed("http://10.0.0.5:8081/x", ex.notify_hosts())


def test_notify_maps_a_redirect_to_a_permanent_failure(monkeypatch: pytest.MonkeyPatch,
                                                       sink_host: None) -> None:
    def urlopen(request: Any, timeout: float) -> FakeResponse:
        raise urllib.error.HTTPError(request.full_url, 302, "moved", {}, io.BytesIO(b""))  # type: ignore[arg-type]

    monkeypatch.setattr(ex, "_open", urlopen)
    with pytest.raises(Fail, match="redirects are not followed"):
        ex.notify(job("notify", {"url": "http://127.0.0.1:9/sink"}), Ctx())  # type: ignore[arg-type]


def test_ledger_writes_only_to_its_configured_table(monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = Ctx()
    with pytest.raises(Fail, match="configured table"):
        ex.ledger(job("ledger", {"amount": 1, "table": "sluice-jobs"}), ctx)  # type: ignore[arg-type]
    monkeypatch.setenv(ex.LEDGER_TABLE_ENV, "team-ledger")
    ex.ledger(job("ledger", {"amount": 1}), ctx)  # type: ignore[arg-type]
    ex.ledger(job("ledger", {"amount": 2, "table": "team-ledger"}), ctx)  # type: ignore[arg-type]
    assert [name for name, _ in ctx.tables] == ["team-ledger", "team-ledger"]


def test_thumbnails_is_a_typed_queue_whose_handler_gets_a_validated_thumbnail() -> None:
    spec = ex.app.handlers["thumbnails"]
    assert spec.model is ex.Thumbnail and spec.fn is ex.thumbnails
    assert ex.app.schemas() == {"thumbnails": ex.Thumbnail.model_json_schema()}
    payload = {"url": "s3://photos/cat.jpg", "width": 128, "format": "webp"}
    result = spec.call(job("thumbnails", payload), Ctx())  # type: ignore[arg-type]
    assert result["width"] == 128 and result["format"] == "webp"
    assert result["thumbnail"].startswith("thumbs/") and result["thumbnail"].endswith("-128.webp")
    assert ex.expected_result("thumbnails", payload) == result
    assert ex.expected_result("thumbnails", {"url": "s3://p/a.jpg", "width": 9})["format"] == "png"


@pytest.mark.parametrize(("payload", "why"), [
    ({"width": 0}, "url: Field required; width: Input should be greater than 0"),
    ({"url": "file:///etc/passwd", "width": 10}, "url: String should match pattern"),
    ({"url": "s3://p/a.jpg", "width": 10, "fromat": "png"}, "fromat: Extra inputs are not permitted"),
    ({"url": "s3://p/a.jpg", "width": 10, "format": "gif"}, "format: Input should be 'png' or 'webp'"),
    ("s3://p/a.jpg", "payload: Input should be an object"),
])
def test_thumbnails_refuses_an_invalid_payload_permanently_naming_the_field(payload: Any, why: str) -> None:
    with pytest.raises(Fail) as caught:
        ex.app.handlers["thumbnails"].call(job("thumbnails", payload), Ctx())  # type: ignore[arg-type]
    assert caught.value.reason.startswith("payload does not match Thumbnail") and why in caught.value.reason
    assert ex.expected_result("thumbnails", payload) is ...


_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-10, 5000),
                    st.floats(allow_nan=False, allow_infinity=False),
                    st.sampled_from(["png", "webp", "gif", "s3://p/a.jpg", "https://x/y", "ftp://z", "64"]),
                    st.lists(st.integers(), max_size=2))


@settings(max_examples=300, deadline=None)
@example({"url": "s3://p/a.jpg", "width": 64.0})  # JSON Schema's integer includes 64.0; so does the model
@example({"url": "https://x/y", "width": 4096, "format": "webp"})
@given(st.dictionaries(st.sampled_from(["url", "width", "format", "fromat"]), _VALUES, max_size=4))
def test_the_door_is_never_looser_than_the_worker_for_the_thumbnails_schema(payload: dict[str, Any]) -> None:
    """Whatever the published schema admits (the gateway's check), the worker's model accepts:
    a payload let in at the door never ends failed for its shape (docs/worker.md, rule 2)."""
    jsonschema = pytest.importorskip("jsonschema")
    schema = ex.app.schemas()["thumbnails"]
    jsonschema.Draft202012Validator.check_schema(schema)
    if jsonschema.Draft202012Validator(schema).is_valid(payload):
        ex.Thumbnail.model_validate_json(json.dumps(payload))
