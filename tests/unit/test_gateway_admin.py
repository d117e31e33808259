"""Issue 17, the operator API: /v1/admin/queues/{queue}/... through the gateway handler.

Driven with the REST proxy event fixtures (their identity is an IAM caller, the role
``web-servers``: a plain enqueue caller). Every refused request must leave the queue's
config, dead set and the jobs table untouched.
"""

from __future__ import annotations

from typing import Any

import pytest

from sluice.core import ids
from sluice.core.bus import EventBus
from sluice.core.models import FinishedCounts
from sluice.core.routes import Route, RouteTable
from sluice.entry.gateway import Gateway
from sluice.gateway.api import Api, Backends, IdMinting, Intake, Policy
from sluice_dev.cli.ops import UNROUTED, api_route, route_of
from sluice_dev.fakes import FakeKeyStore, FakeLog, FakeQueue, FakeStore, ManualClock
from tests.unit.test_gateway_fakes import KEY, LambdaContext, event_for, unpack

OPERATOR = "arn:aws:iam::123456789012:role/operator"
OPERATOR_SESSION = "arn:aws:sts::123456789012:assumed-role/operator/alice"
WEB = "arn:aws:sts::123456789012:assumed-role/web-servers/web-1"  # the fixtures' caller


def admin_queue() -> FakeQueue:
    """The operator's queue: ``emails`` with 7 ready jobs (the oldest 1.5 s old), 1 delayed and 2 leased
    (one lease overdue), and its cumulative endings; the reserved ``sluice-relay`` is known too."""
    queue = FakeQueue(now_ms=ManualClock())
    for state, n in (("ready", 7), ("delayed", 1), ("leased", 2)):
        queue.seed("emails", state, n)
    overdue = next(j for (q, _), j in queue.jobs.items() if q == "emails" and j.state == "leased")
    overdue.deadline_ms = queue.now_ms()
    queue.finished["emails"] = FinishedCounts(succeeded=40, dead=2, cancelled=1)
    queue.add("sluice-relay", "ownership-1")
    return queue


class FixedRoutes:
    def __init__(self, table: RouteTable) -> None:
        self._table = table

    def table(self) -> RouteTable:
        return self._table

    def last(self) -> RouteTable:
        return self._table


class Rig:
    def __init__(self, operators: tuple[str, ...] = (OPERATOR,), routes: RouteTable | None = None) -> None:
        self.queue, self.store, self.log = admin_queue(), FakeStore(), FakeLog()
        cache = None if routes is None else FixedRoutes(routes)
        self.api = Api(Backends(self.log, self.store, self.queue, events=EventBus()), IdMinting(KEY),  # type: ignore[arg-type]
                       intake=Intake(routes=cache), policy=Policy(operators),  # type: ignore[arg-type]
                       idempotency=FakeKeyStore())
        self.gateway = Gateway(self.api)

    def call(self, method: str, path: str, body: Any = None, *, caller: str | None = OPERATOR_SESSION,
             **kw: Any) -> tuple[int, dict[str, str], Any]:
        query = kw.pop("query", None)
        event = event_for(method, path, body, **kw)
        if query is not None:
            event.update(queryStringParameters=query, multiValueQueryStringParameters={
                k: [v] for k, v in query.items()})
        identity = dict(event["requestContext"]["identity"])
        identity["userArn"] = caller
        if caller is None:  # an API key caller: no IAM identity at all
            identity.update(caller=None, user=None, accessKey=None, apiKeyId="k1abc", apiKey="secret")
        event["requestContext"] = {**event["requestContext"], "identity": identity}
        return unpack(self.gateway(event, LambdaContext()))

    def untouched(self) -> bool:
        return self.queue.writes == [] and self.store.generations == {} and self.log.records == [] \
            and self.log.pending == []


def dead_id(rig: Rig, n: int = 0) -> str:
    job_id = ids.mint(1_700_000_000_000 + n, "emails", KEY)
    rig.queue.kill("emails", job_id, {"n": 1}, attempts=3, error="boom", enqueued_at_ms=1)
    return job_id


Q = "/v1/admin/queues/emails"
WRITES = [("POST", Q + "/pause", None), ("POST", Q + "/resume", None),
          ("PUT", Q + "/rate", {"per_second": 5}), ("PUT", Q + "/max-in-flight", {"max_in_flight": 3}),
          ("PUT", Q + "/watermarks", {"high": 100}), ("POST", Q + "/dlq/redrive", {"all": True}),
          ("DELETE", Q + "/dlq", None), ("PUT", Q + "/caps", {"max_dead": 9}),
          ("PUT", Q + "/sensitive", {"fields": ["password"]})]
EVERY = [*WRITES, ("GET", Q + "/dlq", None), ("GET", Q, None), ("GET", Q + "/jobs", None)]


# -- an operator may --------------------------------------------------------------------------------


def test_an_operator_pauses_sets_rate_limit_and_watermarks_then_resumes() -> None:
    rig = Rig()
    code, _, doc = rig.call("POST", Q + "/pause")
    assert (code, doc["queue"], doc["paused"]) == (200, "emails", True)
    code, _, doc = rig.call("PUT", Q + "/rate", {"per_second": 2.5, "burst": 7})
    assert (code, doc["rate_per_s"], doc["burst"]) == (200, 2.5, 7)
    code, _, doc = rig.call("PUT", Q + "/max-in-flight", {"max_in_flight": 4})
    assert (code, doc["max_in_flight"]) == (200, 4)
    code, _, doc = rig.call("PUT", Q + "/watermarks", {"high": 100})
    assert (code, doc["high_watermark"], doc["low_watermark"]) == (200, 100, 50)
    code, _, doc = rig.call("POST", Q + "/resume")
    assert (code, doc["paused"]) == (200, False)
    assert rig.queue.config["emails"].paused is False and rig.queue.config["emails"].max_in_flight == 4


def test_the_operator_role_itself_is_allowed() -> None:
    assert Rig().call("POST", Q + "/pause", caller=OPERATOR)[0] == 200


# -- issue 27, item 3: no allow-list means no operator (fail closed) --------------------------------


NO_ALLOW_LIST = "OperatorPrincipalArns"


@pytest.mark.parametrize(("caller", "why"), [(WEB, NO_ALLOW_LIST), (OPERATOR, NO_ALLOW_LIST),
                                           (OPERATOR_SESSION, NO_ALLOW_LIST), (None, "SigV4")])
@pytest.mark.parametrize(("method", "path", "body"), EVERY)
def test_with_no_allow_list_every_caller_is_refused_and_nothing_is_written(
        method: str, path: str, body: Any, caller: str | None, why: str) -> None:
    """OperatorPrincipalArns empty (the template's default): IAM letting a signed caller reach the
    route is not enough, every admin route is 403 NOT_OPERATOR and nothing is written; an API-key
    caller (no SigV4) is refused for that first."""
    rig = Rig(operators=())
    dead_id(rig)
    code, _, doc = rig.call(method, path, body, caller=caller)
    assert (code, doc["code"]) == (403, "NOT_OPERATOR") and why in doc["detail"]
    assert rig.untouched()


def test_authorize_with_an_empty_list_refuses_everyone() -> None:
    from sluice.core.errors import NotOperator
    from sluice.gateway.admin import authorize

    for principal in (OPERATOR, OPERATOR_SESSION, WEB, "arn:aws:iam::123456789012:root"):
        with pytest.raises(NotOperator, match="names no operator"):
            authorize(principal, ())
        with pytest.raises(NotOperator):
            authorize(principal, [""])  # an empty entry names nobody either
    authorize(OPERATOR_SESSION, (OPERATOR,))  # a named operator's session still may


def test_with_no_allow_list_high_priorities_are_nobodys() -> None:
    """The same list gates the priorities above MaxCallerPriority: empty, nobody may use them."""
    from sluice.core.caller import Caller

    for principal in (OPERATOR, WEB):
        caller = Caller.verified(principal, principal, operators=(), max_caller_priority=5)
        assert not caller.is_operator and caller.may_use(5) and not caller.may_use(6)


def test_dlq_list_redrive_one_through_sluice_redrive_and_purge() -> None:
    rig = Rig()
    first, second, third = dead_id(rig, 0), dead_id(rig, 1), dead_id(rig, 2)
    code, _, doc = rig.call("GET", Q + "/dlq")
    assert code == 200 and [j["job_id"] for j in doc["jobs"]] == [first, second, third]
    code, _, doc = rig.call("POST", Q + "/dlq/redrive", {"job_id": first})
    assert (code, doc["moved"], doc["refused"]) == (200, 1, {})
    # gateway.redrive's order: a generation minted in the jobs table, the record in Kafka again, then Redis.
    assert rig.store.generations == {first: 1}
    assert [s.job_id for s in rig.log.pending] == [first]
    assert ("redrive", "emails", first, "1") in rig.queue.writes
    code, _, doc = rig.call("DELETE", Q + "/dlq")
    assert (code, doc["purged"]) == (200, 2) and rig.queue.dead["emails"] == []


def test_redrive_all_moves_every_dead_job() -> None:
    rig = Rig()
    jobs = [dead_id(rig, n) for n in range(3)]
    code, _, doc = rig.call("POST", Q + "/dlq/redrive", {"all": True})
    assert (code, doc["moved"]) == (200, 3) and set(rig.store.generations) == set(jobs)


# -- non-operators are refused, and nothing is written ----------------------------------------------


@pytest.mark.parametrize(("method", "path", "body"), EVERY)
def test_a_plain_enqueue_caller_is_refused_403_and_nothing_is_written(method: str, path: str,
                                                                      body: Any) -> None:
    rig = Rig()
    dead_id(rig)
    code, headers, doc = rig.call(method, path, body, caller=WEB)
    assert (code, headers["content-type"], doc["code"]) == (403, "application/problem+json", "NOT_OPERATOR")
    assert WEB in doc["detail"] and rig.untouched()


def test_a_non_operator_with_a_bad_body_still_gets_403_not_400() -> None:
    rig = Rig()
    code, _, doc = rig.call("PUT", Q + "/rate", raw="{not json", caller=WEB)
    assert (code, doc["code"]) == (403, "NOT_OPERATOR") and rig.untouched()


# -- hostile input from an operator: 4xx, nothing written -------------------------------------------


@pytest.mark.parametrize("queue", ["sluice-relay", "sluice-"])
@pytest.mark.parametrize(("method", "suffix", "body"), [(m, p[len(Q):], b) for m, p, b in EVERY])
def test_reserved_queues_are_400(queue: str, method: str, suffix: str, body: Any) -> None:
    rig = Rig()
    code, _, doc = rig.call(method, f"/v1/admin/queues/{queue}{suffix}", body)
    assert (code, doc["code"]) == (400, "RESERVED_QUEUE") and rig.untouched()


@pytest.mark.parametrize("queue", ["Bad%20Name", "a" * 200, "%2e%2e", "%7Bemails%7D", "a:b", "", "%00"])
def test_malformed_queue_names_are_400_as_on_the_enqueue_routes(queue: str) -> None:
    rig = Rig()
    code, _, doc = rig.call("POST", f"/v1/admin/queues/{queue}/pause")
    pointers = [e["pointer"] for e in doc.get("errors") or []]
    assert code == 400 and (pointers == ["#/path/queue"] or doc["code"] == "INVALID_QUEUE"), doc
    assert rig.untouched()


def test_a_queue_no_route_covers_is_404_once_routes_exist() -> None:
    table = RouteTable([Route(pattern="emails", function="sluice-worker-mail", owner="mail")])
    rig = Rig(routes=table)
    code, _, doc = rig.call("POST", "/v1/admin/queues/unknown/pause")
    assert (code, doc["code"]) == (404, "NO_ROUTE") and rig.untouched()
    assert rig.call("POST", Q + "/pause")[0] == 200  # a routed queue is fine


@pytest.mark.parametrize("body", [
    {"per_second": -1}, {"per_second": "5"}, {"per_second": True}, {"per_second": 1e308},
    {"per_second": 5, "burst": -2}, {"per_second": 5, "burst": 1.5}, {}, {"per_second": 5, "extra": 1},
    [], None, {"per_second": None}])
def test_bad_rate_values_are_400(body: Any) -> None:
    rig = Rig()
    code, headers, doc = rig.call("PUT", Q + "/rate", body)
    assert code == 400 and headers["content-type"] == "application/problem+json", doc
    assert rig.untouched()


@pytest.mark.parametrize(("raw", "status"), [("NaN", 400), ('{"per_second": NaN}', 400),
                                             ('{"per_second": 1, "per_second": 2}', 400)])
def test_malformed_json_is_refused(raw: str, status: int) -> None:
    rig = Rig()
    assert rig.call("PUT", Q + "/rate", raw=raw)[0] == status and rig.untouched()


@pytest.mark.parametrize(("suffix", "body"), [
    ("/max-in-flight", {"max_in_flight": -1}), ("/max-in-flight", {"max_in_flight": "3"}),
    ("/watermarks", {"high": 10, "low": 20}), ("/watermarks", {"low": 3}),
    ("/dlq/redrive", {}), ("/dlq/redrive", {"all": True, "job_id": "x"})])
def test_bad_limits_watermarks_and_redrives_are_400(suffix: str, body: Any) -> None:
    rig = Rig()
    dead_id(rig)
    code, _, doc = rig.call("PUT" if suffix != "/dlq/redrive" else "POST", Q + suffix, body)
    assert code == 400, doc
    assert rig.untouched()


@pytest.mark.parametrize("limit", ["0", "10001", "x"])
def test_bad_dlq_limits_are_400(limit: str) -> None:
    rig = Rig()
    code, _, _ = rig.call("GET", Q + "/dlq", query={"limit": limit})
    assert code == 400


@pytest.mark.parametrize("job_id", ["nope", ids.mint(1_700_000_000_000, "emails", KEY)],
                         ids=["malformed", "minted"])  # the minted id is random: xdist workers must agree
def test_redriving_a_job_that_is_not_dead_is_404_and_mints_no_generation(job_id: str) -> None:
    rig = Rig()
    code, _, doc = rig.call("POST", Q + "/dlq/redrive", {"job_id": job_id})
    assert (code, doc["code"]) == (404, "NOT_FOUND") and rig.untouched()


def test_wrong_method_is_405_with_allow() -> None:
    code, headers, _ = Rig().call("GET", Q + "/pause")
    assert (code, headers["allow"]) == (405, "POST")


# -- the local server's caller header (no sockets: the event it builds) ------------------------------


def test_the_local_servers_caller_header_becomes_the_iam_identity_and_is_removed() -> None:
    from sluice_dev.local.api_server import LOCAL_CALLER_HEADER, build_event

    event = build_event("POST", Q + "/pause", [(LOCAL_CALLER_HEADER.lower(), OPERATOR), ("Host", "x")], None)
    assert event["requestContext"]["identity"]["userArn"] == OPERATOR
    assert set(event["headers"]) == {"Host"} and set(event["multiValueHeaders"]) == {"Host"}
    plain = build_event("POST", Q + "/pause", [("Host", "x")], None)
    assert plain["requestContext"]["identity"]["userArn"] is None


@pytest.mark.parametrize("ctype", ["APPLICATION/JSON", "Application/Json; charset=UTF-8"])
def test_an_operators_content_type_in_any_case_is_json(ctype: str) -> None:
    # The body guard accepted these, then Powertools compared the header case-sensitively: 500.
    rig = Rig()
    code, _, doc = rig.call("PUT", Q + "/rate", {"per_second": 3}, content_type=ctype)
    assert (code, doc["rate_per_s"]) == (200, 3)


@pytest.mark.parametrize("caller", [None, WEB])
@pytest.mark.parametrize("header", ["X-Sluice-Local-Caller", "x-sluice-local-caller"])
def test_the_deployed_gateway_never_takes_its_caller_from_the_local_header(caller: str | None,
                                                                            header: str) -> None:
    """In AWS the header reaches the function untouched (API Gateway passes every header): the
    gateway must read the caller from the identity API Gateway verified, never from a header."""
    rig = Rig()
    dead_id(rig)
    for method, path, body in EVERY:
        code, _, doc = rig.call(method, path, body, caller=caller, headers={header: OPERATOR})
        assert (code, doc["code"]) == (403, "NOT_OPERATOR"), (method, path)
    assert rig.untouched()


# -- the queues' stats and caps (sluice queues, sluice top, sluice queue caps) --------------------


def test_an_operator_lists_the_queues_with_stats_overdue_leases_and_route() -> None:
    rig = Rig(routes=RouteTable([Route("emails", "sluice-worker-mail", "mail")]))
    rig.call("POST", Q + "/pause")
    code, _, doc = rig.call("GET", "/v1/admin/queues")
    assert code == 200 and [q["queue"] for q in doc["queues"]] == ["emails"]  # no reserved queue
    (row,) = doc["queues"]
    assert (row["ready"], row["delayed"], row["leased"], row["oldest_ready_age_ms"]) == (7, 1, 2, 1500)
    assert row["overdue_leases"] == 1 and row["config"]["paused"] is True
    assert row["route"] == {"function": "sluice-worker-mail", "owner": "mail", "typed": False}
    code, _, one = rig.call("GET", Q)
    assert code == 200 and one == row


def test_the_queue_rows_carry_the_cumulative_finished_counts() -> None:
    """Issue 17: jobs that left the queue for good, by how (keys.finished), on both stats routes;
    the console's sparkline plots their differences between polls."""
    rig = Rig()
    for path in ("/v1/admin/queues", Q):
        code, _, doc = rig.call("GET", path)
        row = doc["queues"][0] if "queues" in doc else doc
        assert code == 200 and row["finished"] == {"succeeded": 40, "dead": 2, "cancelled": 1}, path
        assert (row["dead"], row["ready"]) == (0, 7)  # the depths keep their meaning


def test_an_unrouted_queues_stats_are_404_and_a_listing_is_403_for_a_plain_caller() -> None:
    rig = Rig(routes=RouteTable([Route("billing", "sluice-worker-billing", "billing")]))
    code, _, doc = rig.call("GET", Q)
    assert (code, doc["code"]) == (404, "NO_ROUTE")
    code, _, doc = rig.call("GET", "/v1/admin/queues", caller=WEB)
    assert (code, doc["code"]) == (403, "NOT_OPERATOR")
    code, _, doc = rig.call("GET", "/v1/admin/queues", caller=None)
    assert (code, doc["code"]) == (403, "NOT_OPERATOR")
    # The operator's listing still shows it (it holds jobs), as going nowhere: not "the default worker"
    code, _, doc = rig.call("GET", "/v1/admin/queues")
    assert code == 200 and doc["queues"][0]["route"] == {"function": None, "owner": None, "typed": False,
                                                         "refused": True}
    assert api_route(doc["queues"][0]["route"]) == UNROUTED
    assert api_route(None) == "default worker"


def test_the_cli_names_where_a_queues_jobs_go_from_redis_too() -> None:
    table = RouteTable([Route("billing", "sluice-worker-billing", "billing")])
    assert route_of(table, "billing") == "sluice-worker-billing (billing)"
    assert route_of(table, "emails") == UNROUTED  # routes known, none covers it, refused
    assert route_of(table, "emails", refuse_unrouted=False) == "default worker"
    assert route_of(RouteTable([]), "emails") == route_of(None, "emails") == "default worker"


def test_an_operator_sets_a_queues_caps_and_a_bad_one_writes_nothing() -> None:
    rig = Rig()
    code, _, doc = rig.call("PUT", Q + "/caps", {"max_delayed": 50, "max_dead": 9})
    assert (code, doc["max_delayed"], doc["max_dead"]) == (200, 50, 9)
    rig.queue.writes.clear()
    for body in ({}, {"max_dead": -1}, {"max_dead": "9"}, {"max_dead": 9, "extra": 1}):
        code, _, doc = rig.call("PUT", Q + "/caps", body)
        assert code == 400, body
    assert rig.queue.writes == []


def test_the_queue_view_shows_its_bytes_in_redis_against_its_budget() -> None:
    """Issue 28, item 4: an operator sees each queue's use against its byte budget, and sets it."""
    rig = Rig()
    rig.queue.used["emails"] = 1234
    code, _, doc = rig.call("PUT", Q + "/caps", {"max_bytes": 5000})
    assert code == 200 and doc["max_bytes"] == 5000
    for path in ("/v1/admin/queues", Q):
        code, _, doc = rig.call("GET", path)
        row = doc["queues"][0] if "queues" in doc else doc
        assert code == 200 and (row["used_bytes"], row["budget_bytes"]) == (1234, 5000), path
    code, _, doc = rig.call("PUT", Q + "/caps", {"max_bytes": -1})
    assert code == 400


def test_sluice_queues_shows_bytes_against_the_budget() -> None:
    from sluice.core.models import QueueConfig, QueueStats
    from sluice_dev.cli.ops import in_redis, stats_row

    st = QueueStats(queue="q", ready=0, delayed=0, leased=0, dead=0, oldest_ready_age_ms=None,
                    config=QueueConfig(max_bytes=2048), used_bytes=512, budget_bytes=2048)
    assert in_redis(st) == "512 B / 2.0 KB (25%)"
    assert in_redis(st.model_copy(update={"budget_bytes": 0})) == "512 B"
    row = stats_row(st)
    assert (row["used_bytes"], row["budget_bytes"], row["max_bytes"]) == (512, 2048, 2048)
    from sluice_dev.cli.console import render

    assert '<td class="bytes">512 B / 2.0 KB (25%)</td>' in render.queue_row(st, [], "token")
    assert "in redis / budget" in render.QUEUE_HEAD


def test_sluice_queues_and_the_console_show_the_parked_records() -> None:
    from sluice.core.models import QueueConfig, QueueStats
    from sluice_dev.cli.console import render
    from sluice_dev.cli.ops import parked, queues_table, stats_row

    st = QueueStats(queue="held", ready=0, delayed=0, leased=0, dead=0, oldest_ready_age_ms=None,
                    config=QueueConfig(paused=True), parked=6000, parked_at_ms=1_000)
    assert parked(st, now_ms=121_000) == "6000 (last 2.0m ago)"
    assert parked(st.model_copy(update={"parked": 0})) == "-"
    assert (stats_row(st)["parked"], stats_row(st)["parked_at_ms"]) == (6000, 1_000)
    assert [c.header for c in queues_table([st]).columns].index("parked") == 10
    assert '<td class="parked">6000 (last' in render.queue_row(st, [], "token")
    assert "<th>parked</th>" in render.QUEUE_HEAD


def test_a_jobs_timeline_is_read_through_the_operator_route_for_operators_only() -> None:
    """Issue 32 item 2: GET /v1/admin/queues/{queue}/jobs/{job_id}/timeline, from the gateway's
    timeline log; a plain caller is refused, a bad job id is a 400."""
    from sluice.core import timeline
    from sluice.gateway.http.app import HttpGateway

    class Log:
        def append(self, queue: str, job_id: str, entries: list[str]) -> None: ...

        def read(self, queue: str, job_id: str) -> list[dict[str, Any]]:
            step = timeline.decode(timeline.encode("grant", 5, worker="A", token=33))
            return [step] if (queue, job_id) == ("emails", "j-1") else []

    rig = Rig()
    rig.gateway._http = HttpGateway(lambda: rig.api, timelines=Log)
    status, _, body = rig.call("GET", Q + "/jobs/j-1/timeline")
    assert status == 200 and body == {"queue": "emails", "job_id": "j-1",
                                      "steps": [{"at_ms": 5, "kind": "grant", "worker": "A", "token": 33}]}
    assert rig.call("GET", Q + "/jobs/j-1/timeline", caller=WEB)[0] == 403
    assert rig.call("GET", Q + "/jobs/j%20%3Cb%3E/timeline")[0] in (400, 404, 422)


def test_a_queues_depth_hour_is_read_through_the_operator_route_for_operators_only() -> None:
    """GET /v1/admin/queues/{queue}/depth (issue 32's closing review): the relay's samples from the
    gateway's depth log, with the hour's waits; a plain caller is refused, a bad queue is a 400, and a
    gateway with no depth log says so."""
    from sluice.core import depth
    from sluice.gateway.http.app import HttpGateway

    read: list[str] = []

    class Log:
        def record(self, queue: str, ready: int, delayed: int, leased: int, dead: int) -> bool:
            raise AssertionError("the operator route only reads")

        def read(self, queue: str) -> depth.DepthHistory:
            read.append(queue)
            return depth.history(queue, [depth.encode(1_000, 4, 3, 2, 1, {depth.bucket(100): 2})], 2_000)

    rig = Rig()
    rig.gateway._http = HttpGateway(lambda: rig.api, depths=Log)
    status, _, body = rig.call("GET", Q + "/depth")
    assert status == 200 and read == ["emails"]
    assert body["samples"] == [{"at_ms": 1_000, "ready": 4, "delayed": 3, "leased": 2, "dead": 1,
                                "started": 2, "wait_p50_ms": depth.bucket_ms(depth.bucket(100)),
                                "wait_p99_ms": depth.bucket_ms(depth.bucket(100))}]
    assert (body["started"], body["queue"]) == (2, "emails") and 90 <= body["wait_p99_ms"] <= 110
    assert rig.call("GET", Q + "/depth", caller=WEB)[0] == 403
    assert rig.call("GET", "/v1/admin/queues/%3Cb%3E/depth")[0] in (400, 404, 422)
    assert read == ["emails"]
    rig.gateway._http = HttpGateway(lambda: rig.api)
    assert rig.call("GET", Q + "/depth")[0] >= 400


def test_a_config_answer_names_sensitive_only_for_a_queue_that_marks_fields() -> None:
    """A client older than the setting (its QueueConfig forbids extra fields) still reads every queue
    that marks none."""
    rig = Rig()
    code, _, doc = rig.call("POST", Q + "/pause")
    assert code == 200 and "sensitive" not in doc
    code, _, doc = rig.call("PUT", Q + "/sensitive", {"fields": ["password"]})
    assert code == 200 and doc["sensitive"] == ["/password"], doc  # kept as a JSON pointer
    assert "sensitive" in rig.call("POST", Q + "/resume")[2]
