"""The gateway reads API Gateway HTTP API payload 2.0 events (the small profile's front door; issue 33,
item 2): tests/events/httpapi_*.json through functions/gateway/app.py, and the hostile shapes."""

from __future__ import annotations

import copy
import json
from types import ModuleType
from typing import Any

import pytest

from sluice.core.models import JobRecord, JobState
from sluice.entry import gateway_api, http_api
from tests.loading import module_from_file
from tests.unit.test_gateway_fakes import LambdaContext
from tests.unit.test_gateway_handler import APP, Fakes, app, event, fakes  # noqa: F401  (fixtures)

CALLER = "arn:aws:sts::123456789012:assumed-role/web-servers/web-1"


def call(app: ModuleType, ev: dict[str, Any]) -> tuple[int, dict[str, str], Any]:  # noqa: F811
    response = app.handler(ev, LambdaContext())
    assert "multiValueHeaders" not in response  # an HTTP API drops them: every header is in headers
    headers = {k.lower(): v for k, v in response["headers"].items()}
    return response["statusCode"], headers, json.loads(response["body"])


def test_a_v2_enqueue_names_its_caller_from_the_iam_authorizer(app: ModuleType, fakes: Fakes) -> None:  # noqa: F811
    code, headers, body = call(app, event("httpapi_enqueue.json"))
    assert code == 202 and headers["location"] == f"/v1/jobs/{body['job_id']}"
    [spec] = fakes.log.records
    assert (spec.queue, spec.priority, spec.lease_ms) == ("emails", 5, 60_000)
    assert spec.idempotency_key == f"{CALLER}|order-1234-welcome-email"
    code, headers, again = call(app, event("httpapi_enqueue.json"))
    assert (code, again, headers["idempotent-replayed"]) == (200, body, "true")


def test_a_v2_get_reads_the_job(app: ModuleType, fakes: Fakes) -> None:  # noqa: F811
    ev = event("httpapi_get_job.json")
    assert call(app, ev)[0] == 404
    job_id = ev["rawPath"].rsplit("/", 1)[1]
    fakes.store.put(JobRecord(job_id=job_id, queue="emails", status=JobState.QUEUED))
    fakes.queue.add("emails", job_id)
    code, _, body = call(app, ev)
    assert (code, body["status"]) == (200, "queued")


def test_a_named_stage_is_taken_off_the_raw_path(app: ModuleType) -> None:  # noqa: F811
    code, _, doc = call(app, event("httpapi_openapi_stage.json"))
    assert code == 200 and "/v1/queues/{queue}/jobs" in doc["paths"]


def test_a_v2_event_cannot_name_its_caller_outside_the_authorizer() -> None:
    ev = event("httpapi_enqueue.json")
    del ev["requestContext"]["authorizer"]
    ev["requestContext"]["identity"] = {"userArn": "arn:aws:iam::123456789012:role/admin", "apiKeyId": "k"}
    rest = http_api.as_rest(ev)
    assert gateway_api.principal(rest) == "" and gateway_api.idempotency_scope(rest) == ""
    assert gateway_api.principal(http_api.as_rest(event("httpapi_enqueue.json"))) == CALLER


def test_an_unsigned_v2_enqueue_is_no_callers_as_a_rest_one_is(
        app: ModuleType, fakes: Fakes) -> None:  # noqa: F811
    ev = event("httpapi_enqueue.json")
    ev["requestContext"]["authorizer"] = {"iam": {"userArn": ""}}
    rest = event("apigw_enqueue.json")
    rest["requestContext"]["identity"]["userArn"] = None
    # The same scope (nobody's) and key: the REST request replays the 2.0 one's job.
    assert call(app, ev)[0] == 202 and app.handler(rest, LambdaContext())["statusCode"] == 200
    # The replay appends the same record again (the relay keeps one job per id).
    assert [r.idempotency_key for r in fakes.log.records] == ["|order-1234-welcome-email"] * 2
    assert len({r.job_id for r in fakes.log.records}) == 1


def test_the_admin_path_goes_to_the_operator_routes_however_spelt(
        app: ModuleType, fakes: Fakes) -> None:  # noqa: F811
    ev = event("httpapi_get_job.json")
    ev["rawPath"] = "/v1//ADMIN/queues"
    rest = http_api.as_rest(ev)
    from sluice.entry.gateway import kind_of
    assert kind_of(rest) == "operator"
    code, _, _ = call(app, ev)
    assert code == 403 and fakes.log.records == []


@pytest.mark.parametrize("mutate", [
    lambda e: e.update(version="1.0"),
    lambda e: e["requestContext"].pop("http"),
    lambda e: e.update(rawPath=7),
    lambda e: e["requestContext"]["http"].update(method=None),
])
def test_only_a_whole_v2_shape_is_read_as_one(mutate: Any) -> None:
    ev = copy.deepcopy(event("httpapi_enqueue.json"))
    mutate(ev)
    assert not http_api.is_http_api_event(ev)


def test_the_rest_event_carries_the_request() -> None:
    ev = event("httpapi_enqueue.json")
    ev.update(rawQueryString="a=1&a=2&b=", queryStringParameters={"a": "1,2", "b": ""},
              cookies=["c=1", "d=2"])
    rest = http_api.as_rest(ev)
    assert (rest["httpMethod"], rest["path"], rest["body"]) == ("POST", "/v1/queues/emails/jobs", ev["body"])
    assert rest["multiValueQueryStringParameters"] == {"a": ["1", "2"], "b": [""]}
    assert rest["headers"]["idempotency-key"] == "order-1234-welcome-email"
    assert rest["headers"]["cookie"] == "c=1; d=2"
    assert rest["requestContext"]["identity"]["sourceIp"] == "203.0.113.10"


def test_the_response_joins_multi_value_headers_and_lifts_cookies() -> None:
    multi = {"B": ["x", "y"], "Set-Cookie": ["s=1", "t=2"]}
    out = http_api.as_http_api_response({"statusCode": 202, "headers": {"A": "1"}, "body": "{}",
                                         "multiValueHeaders": multi})
    assert out == {"statusCode": 202, "headers": {"A": "1", "B": "x, y"}, "body": "{}",
                   "isBase64Encoded": False, "cookies": ["s=1", "t=2"]}


OPERATOR = "arn:aws:iam::123456789012:role/operator"
ADMIN = [("GET", "/v1/admin/queues/emails/jobs", None), ("GET", "/v1/admin/queues/emails/depth", None),
         ("GET", "/v1/admin/queues/emails/jobs/01HZX5Q3W7K2M9N4P6R8S0T1V2/timeline", None),
         ("PUT", "/v1/admin/queues/emails/sensitive", '{"fields": []}'),
         ("POST", "/v1/admin/queues/emails/pause", None), ("GET", "/v1/admin/queues", None)]


@pytest.mark.parametrize("signed_as", [None, CALLER])
def test_the_local_caller_header_names_no_operator_through_the_http_api(
        fakes: Fakes, monkeypatch: pytest.MonkeyPatch, signed_as: str | None) -> None:  # noqa: F811
    """Hostile-caller review (session 35): the small profile's HTTP API passes every header on, so a
    caller (unsigned, or signed as a plain caller) sends `X-Sluice-Local-Caller: <an operator>` to the
    admin routes, the newest ones included; only `authorizer.iam` may name the caller: 403, nothing
    written. The same header with an operator's signature is the control: the list is not empty."""
    monkeypatch.setenv("SLUICE_OPERATOR_PRINCIPALS", OPERATOR)
    operator = module_from_file(APP.parents[1] / "operator" / "app.py", "operator_app_under_test")
    for method, path, body in ADMIN:
        ev = copy.deepcopy(event("httpapi_get_job.json"))
        ev["rawPath"] = ev["requestContext"]["http"]["path"] = path
        ev["requestContext"]["http"]["method"] = method
        ev["body"] = body
        ev["headers"].update({"X-Sluice-Local-Caller": OPERATOR, "x-sluice-local-caller": OPERATOR,
                              "content-type": "application/json"})
        if signed_as is None:
            del ev["requestContext"]["authorizer"]
        else:
            ev["requestContext"]["authorizer"]["iam"]["userArn"] = signed_as
        code, _, doc = call(operator, ev)
        assert (code, doc["code"]) == (403, "NOT_OPERATOR"), (method, path, doc)
    assert fakes.queue.writes == [] and fakes.log.records == []
    ev["requestContext"].setdefault("authorizer", {"iam": {}})["iam"]["userArn"] = OPERATOR
    assert call(operator, ev)[0] == 200  # the last one, GET /v1/admin/queues, signed as the operator


def test_the_location_of_an_accepted_job_is_under_the_stage_or_base_path_the_caller_called() -> None:
    """Session 36's walk: the REST profile's URL is https://<api>.execute-api.<region>.amazonaws.com/live,
    and the 202's Location was /v1/jobs/<id>: a client that follows it reached /v1/jobs/<id> on that host,
    which the API does not serve (403 Missing Authentication Token). API Gateway puts the path as called
    in requestContext.path: the stage (or a custom domain's base path) is what it has before ``path``."""
    from sluice.gateway.http.router import Event

    def base(path: str, called: object) -> str:
        return Event({"path": path, "httpMethod": "GET", "requestContext": {"path": called}}).base_path

    assert base("/v1/queues/q/jobs", "/live/v1/queues/q/jobs") == "/live"
    assert base("/v1/queues/q/jobs", "/api/v2/v1/queues/q/jobs") == "/api/v2"  # a custom domain's mapping
    assert base("/v1/queues/q/jobs", "/v1/queues/q/jobs") == ""  # at a domain's root, or sluice dev
    for called in (None, 7, "/other/path", "live/v1/queues/q/jobs", "//v1/queues/q/jobs/"):
        assert base("/v1/queues/q/jobs", called) == ""
    assert base("/v1/queues/q/jobs", "//v1/queues/q/jobs") == ""  # a prefix that ends in / names no base


def test_two_idempotency_keys_are_refused_by_both_front_doors_and_nothing_is_appended(
        app: ModuleType, fakes: Fakes) -> None:  # noqa: F811
    """Session 39: an HTTP API joins a repeated header's values with commas, so two Idempotency-Key
    headers arrived as one key "a,b" and were accepted under it, where the REST API refused them (400).
    A key can no longer hold a comma, so both refuse, with the reason."""
    v2 = event("httpapi_enqueue.json")
    v2["headers"]["idempotency-key"] = "order-1,order-2"  # what API Gateway sends for the two headers
    code, _, body = call(app, v2)
    assert code == 400 and "cannot contain a comma" in body["detail"]
    assert "two Idempotency-Key" in body["detail"]
    rest = event("apigw_enqueue.json")
    rest["multiValueHeaders"]["Idempotency-Key"] = ["order-1", "order-2"]
    response = app.handler(rest, LambdaContext())
    assert response["statusCode"] == 400
    assert "2 Idempotency-Key headers: send one" in json.loads(response["body"])["detail"]
    rest = event("apigw_enqueue.json")
    rest["headers"]["Idempotency-Key"] = "order-1,order-2"  # one header, a comma of its own
    rest["multiValueHeaders"]["Idempotency-Key"] = ["order-1,order-2"]
    response = app.handler(rest, LambdaContext())
    detail = json.loads(response["body"])["detail"]
    assert response["statusCode"] == 400 and "cannot contain a comma" in detail
    assert fakes.log.records == []
    v2["headers"]["idempotency-key"] = "order-1;order-2 +x.y_z"  # the other printable characters still do
    assert call(app, v2)[0] == 202
