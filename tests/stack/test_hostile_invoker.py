"""Issue 27, item 1: a hostile invoker against every split function of one `sluice dev` stack.

The invoker holds real local credentials: the default worker's, a team worker's, the relay's, or
a key nobody was given. With each it calls the local Lambda Invoke API (boto3, SigV4-signed, as a
function in AWS would) on the public, operator, internal and firings functions, with every event
shape a caller could forge: an API Gateway proxy event naming an operator as its caller (purge a
dead-letter queue, pause a queue, enqueue at priority 9, read and cancel another team's job,
create a schedule), a family event (children of another team's job, a release), a load of its own
endless Lua into Redis's script cache (refused SCRIPT_NOT_ALLOWED: not a shipped worker script, and
not in the cache after), a firing at a time of its choosing.

Every attempt is refused: by the function's resource policy (Lambda's 403 AccessDeniedException,
decided as AWS decides it over template.yaml's AWS::Lambda::ResourcePolicy), or, where the policy
admits the caller (a worker, a team worker or the relay on the internal function), by the function
itself (403 WRONG_FUNCTION for any shape but its own; a forged family refused by its parent's
fencing token). Nothing is written: the jobs topic, the jobs table, the schedules table and the
queues' Redis state are the same before and after, and the other team's job is still waiting.
The template's policies refuse the same callers: tests/infra/test_template_invokers.py.

Every function (issue 27): the same invokers also try the relay, the default worker, the team's
worker and Sluice's registrar (issue 31) with a scheduled event, a worker dispatch and forged
CloudFormation Deletes of the default worker's routes (DefaultWorkerRoutes, and the registrar's
DefaultWorkerRegistration, which would delete its routes and declared schedules; answered at a
ResponseURL on the moto S3). Each is refused by the function's resource policy; the routes table is
unchanged, no answer reaches the URL, and no job is leased or acked. The events and countdown
functions run in-process locally (their stream's poller), so no local invoker reaches them: their
policies are held by the template test.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from sluice.backends.redis.queue import RedisJobQueue
from sluice.core.config import Settings
from sluice.core.models import JOB_ID_PATTERN
from sluice.core.schedules import FIRE_KEY, iso
from sluice.core.script_loads import sha1
from sluice_dev.local.access import key_of
from sluice_dev.local.api_server import LOCAL_CALLER_HEADER, build_event
from sluice_dev.local.dev import (
    FIRINGS_FUNCTION,
    GATEWAY_FUNCTION,
    INTERNAL_FUNCTION,
    OPERATOR_FUNCTION,
    REGISTRAR_FUNCTION,
    RELAY_FUNCTION,
    WORKER_FUNCTION,
    DevOptions,
    DevStack,
    scheduled_event,
    team_function_name,
)
from tests.stack.test_hostile_callers import Http, Offsets

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(240)]

OPERATOR = "arn:aws:iam::000000000000:role/ops"
TEAM_A = "arn:aws:iam::000000000000:role/team-a"
TEAM = ("words", "sluice_dev.examples_team")
CALLERS = {
    "the worker": key_of("sluice-worker"),
    "a team's worker": key_of(f"sluice-worker-{TEAM[0]}"),
    "the relay": key_of("sluice-relay"),
    "an unknown principal": "AKIASTRANGER00000001",
    "a stranger allowed lambda:* on *": "AKIASTRANGERSTAR0001",
}
# The stranger's own IAM policy allows every Lambda action on every resource: only a Deny in the
# function's resource policy stops it (issue 27).
STRANGER = "arn:aws:iam::000000000000:role/admin-with-lambda-star"
LAMBDA_STAR = {"Statement": [{"Effect": "Allow", "Action": "lambda:*", "Resource": "*"}]}
FUNCTIONS = (GATEWAY_FUNCTION, OPERATOR_FUNCTION, INTERNAL_FUNCTION, FIRINGS_FUNCTION)
ADMITTED = {(INTERNAL_FUNCTION, c) for c in ("the worker", "a team's worker", "the relay")}


@dataclass
class Rig:
    dev: DevStack
    settings: Settings
    http: Http
    victim: str  # team A's delayed job
    offsets: Offsets

    def client(self, key: str) -> Any:
        return boto3.client(
            "lambda",
            endpoint_url=self.dev.endpoints["lambda_url"],
            region_name="us-east-1",
            aws_access_key_id=key,
            aws_secret_access_key="whatever",
            config=Config(retries={"max_attempts": 1}, read_timeout=60),
        )

    def snapshot(self) -> dict[str, Any]:
        """What a refused attempt must not change."""
        queues = RedisJobQueue.from_settings(self.settings)
        stats = {
            q: queues.stats(q).model_dump(exclude={"idle_workers", "oldest_ready_age_ms"})
            for q in ("echo", "word-count")
        }
        db = boto3.client("dynamodb", endpoint_url=self.settings.aws_endpoint_url, region_name="us-east-1")
        items = db.scan(TableName=self.settings.jobs_table)["Items"]  # every job's, and a family's
        jobs = {
            i["job_id"]["S"]: json.dumps(i, sort_keys=True)
            for i in items
            if re.fullmatch(JOB_ID_PATTERN, i["job_id"]["S"].removeprefix("~family~"))
        }
        schedules = db.scan(TableName=self.dev.function("OperatorFunction").env["SLUICE_SCHEDULES_TABLE"])
        assert self.settings.routes_table
        routes = db.scan(TableName=self.settings.routes_table)["Items"]
        return {
            "topic": self.offsets.settled(),
            "redis": stats,
            "jobs": jobs,
            "schedules": schedules["Count"],
            "routes": sorted(json.dumps(r, sort_keys=True) for r in routes),
        }


def wait_until(what: str, check: Any, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (value := check()):
        assert time.monotonic() < deadline, f"not within {timeout_s}s: {what}"
        time.sleep(0.2)
    return value


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    state: Path = tmp_path_factory.mktemp("invoker") / ".sluice"
    dev = DevStack(
        DevOptions(
            state_dir=state,
            workers=1,
            gateway_concurrency=1,
            log_level="WARNING",
            safety_net_every_s=600,
            team_workers=(TEAM,),
            team_containers=1,
            parameters={"OperatorPrincipalArns": OPERATOR},
        )
    )
    endpoints = dev.start()
    assert dev.settings is not None and dev.access is not None
    dev.access.add_identity(CALLERS["a stranger allowed lambda:* on *"], STRANGER, [LAMBDA_STAR], {})
    http = Http(endpoints["gateway_url"])
    offsets = Offsets(dev.settings)
    try:
        r = http(
            "POST",
            "/v1/queues/echo/jobs",
            {"payload": {"text": "team A's"}, "delay_seconds": 600},  # within the relay's horizon: in Redis
            headers={LOCAL_CALLER_HEADER: TEAM_A},
        )
        assert r.status == 202, r.doc
        victim = r.doc["job_id"]
        queues = RedisJobQueue.from_settings(dev.settings)
        wait_until("the victim waits in Redis", lambda: queues.stats("echo").delayed >= 1)
        yield Rig(dev, dev.settings, http, victim, offsets)
    finally:
        offsets.consumer.close()
        dev.stop()


def proxy(method: str, path: str, body: Any = None) -> dict[str, Any]:
    """An API Gateway proxy event, forged: its identity names an operator."""
    raw = None if body is None else json.dumps(body).encode()
    return build_event(
        method, path, [("Content-Type", "application/json"), (LOCAL_CALLER_HEADER, OPERATOR)], raw
    )


ENDLESS = "while true do end"  # a team's own Lua: it would stall Redis for every queue


def shapes(victim: str) -> dict[str, dict[str, Any]]:
    return {
        "purge a dead-letter queue": proxy("DELETE", "/v1/admin/queues/echo/dlq"),
        "pause a queue": proxy("POST", "/v1/admin/queues/echo/pause"),
        "create a schedule": proxy(
            "POST",
            "/v1/admin/queues/echo/schedules",
            {"name": "evil", "expression": "rate(1 minute)", "payload": {"text": "x"}},
        ),
        "enqueue at priority 9": proxy(
            "POST", "/v1/queues/echo/jobs", {"payload": {"text": "x"}, "priority": 9}
        ),
        "read another team's job": proxy("GET", f"/v1/jobs/{victim}"),
        "cancel another team's job": proxy("DELETE", f"/v1/jobs/{victim}"),
        "children of another team's job": {
            "sluice_internal": "enqueue_children",
            "parent_id": victim,
            "token": 1,
            "jobs": [{"queue": "echo", "payload": {"text": "x"}, "key": "k"}],
        },
        "release a continuation": {"sluice_internal": "release", "continuation": victim},
        "load its own endless Lua into Redis": {"sluice_internal": "load_scripts",
                                                "scripts": {"lease.lua": ENDLESS}},
        "a firing at a time of one's choosing": {
            FIRE_KEY: "nightly",
            "queue": "echo",
            "scheduled_time": iso(int(time.time() * 1000)),
        },
    }


def refused_by_the_function(shape: str, answer: dict[str, Any]) -> bool:
    """The internal function's own refusal: any other shape is WRONG_FUNCTION; a forged family is
    refused by its parent's fencing token; a release of a job that is no continuation releases nothing."""
    if shape == "release a continuation":
        return answer.get("released") is False or "error" in answer
    if shape == "load its own endless Lua into Redis":  # not a shipped worker script: nothing loaded
        return answer.get("statusCode") == 403 and answer["error"]["code"] == "SCRIPT_NOT_ALLOWED"
    if shape == "children of another team's job":
        return answer.get("statusCode", 0) >= 400 and "error" in answer
    if "body" in answer:  # a proxy event's answer
        return answer["statusCode"] == 403 and json.loads(answer["body"])["code"] == "WRONG_FUNCTION"
    return answer.get("statusCode") == 403 and answer["error"]["code"] == "WRONG_FUNCTION"


def test_every_invoker_is_refused_every_function_and_nothing_is_written(rig: Rig) -> None:
    lambdas = rig.dev.lambdas
    assert lambdas is not None
    before, denied = rig.snapshot(), lambdas.counts["denied"]
    outcomes: dict[tuple[str, str, str], str] = {}
    for who, key in CALLERS.items():
        client = rig.client(key)
        for function in FUNCTIONS:
            for shape, event in shapes(rig.victim).items():
                try:
                    reply = client.invoke(FunctionName=function, Payload=json.dumps(event).encode())
                except ClientError as exc:
                    error = exc.response["Error"]["Code"]
                    assert (error, exc.response["ResponseMetadata"]["HTTPStatusCode"]) == (
                        "AccessDeniedException",
                        403,
                    ), (who, function, shape)
                    outcomes[(who, function, shape)] = "denied by policy"
                    continue
                answer = json.loads(reply["Payload"].read())
                assert "FunctionError" not in reply, (who, function, shape, answer)
                assert (function, who) in ADMITTED, f"{who} got through to {function}: {shape} -> {answer}"
                assert refused_by_the_function(shape, answer), (who, function, shape, answer)
                outcomes[(who, function, shape)] = "refused by the function"
    # Only the internal function admits the worker, a team's worker and the relay, and it refuses
    # every shape they could send but a family of their own; everything else is AccessDenied.
    admitted = {k for k, v in outcomes.items() if v == "refused by the function"}
    assert {(f, w) for w, f, _s in admitted} == ADMITTED
    assert lambdas.counts["denied"] - denied == len(outcomes) - len(admitted)
    time.sleep(2)  # anything asynchronous an attempt might have set off
    assert rig.snapshot() == before
    assert RedisJobQueue.from_settings(rig.settings).conn.client.script_exists(sha1(ENDLESS)) == [False]
    r = rig.http("GET", f"/v1/jobs/{rig.victim}", headers={LOCAL_CALLER_HEADER: TEAM_A})
    assert r.status == 200 and r.doc["status"] not in ("cancelled", "succeeded"), r.doc


def test_sluices_own_callers_are_still_admitted(rig: Rig) -> None:
    """The policies deny by principal, not wholesale: the API server (as API Gateway) reaches the
    public and operator functions, and the Scheduler role the firings function."""
    r = rig.http("GET", "/v1/queues/echo", headers={LOCAL_CALLER_HEADER: TEAM_A})
    assert r.status == 200, r.doc
    r = rig.http("GET", "/v1/admin/queues/echo", headers={LOCAL_CALLER_HEADER: OPERATOR})
    assert r.status == 200, r.doc
    lambdas = rig.dev.lambdas
    assert lambdas is not None
    inv = lambdas.invoke(
        FIRINGS_FUNCTION, {"warm": True}, asynchronous=False, caller=rig.dev.scheduler_caller()
    )
    assert inv.done.wait(60) and inv.result["error"]["code"] == "WRONG_FUNCTION"  # admitted, then refused


# The relay's, the default worker's and a team worker's legitimate callers: the relay dispatches
# both workers (each one's resource policy admits its role: template.yaml's WorkerFunctionPolicy,
# infra/worker.yaml's TeamWorkerPolicy). Everyone else below is a hostile invoker of these three.
SCHEDULED = (RELAY_FUNCTION, WORKER_FUNCTION, team_function_name(TEAM[0]), REGISTRAR_FUNCTION)
LEGITIMATE = {(WORKER_FUNCTION, "the relay"), (team_function_name(TEAM[0]), "the relay")}


def scheduled_shapes(rig: Rig) -> dict[str, tuple[dict[str, Any], str | None]]:
    """Each forged event, with the ResponseURL key a custom-resource answer would be PUT at."""
    from sluice_dev.local import teams

    bucket = teams.ResponseBucket(rig.settings)
    key, url = bucket.url()
    delete = teams.cfn_event(
        "Delete",
        "arn:aws:cloudformation:us-east-1:000000000000:stack/sluice/local",
        url,
        {"ServiceToken": WORKER_FUNCTION, "Owner": "sluice", "HandlersModule": "x"},
        f"sluice-routes:sluice:{WORKER_FUNCTION}",
    )
    delete["LogicalResourceId"] = "DefaultWorkerRoutes"
    key2, url2 = bucket.url()
    registration = teams.cfn_event(
        "Delete",
        "arn:aws:cloudformation:us-east-1:000000000000:stack/sluice/local",
        url2,
        {"ServiceToken": REGISTRAR_FUNCTION, "Owner": "sluice", "Function": WORKER_FUNCTION},
        f"sluice-registrar:sluice:{WORKER_FUNCTION}",
    )
    registration["LogicalResourceId"] = "DefaultWorkerRegistration"
    return {
        "a scheduled event": (scheduled_event(), None),
        "a worker dispatch": ({"queues": ["echo", "word-count"], "batch": 10, "source": "safety-net"}, None),
        "a CloudFormation Delete of DefaultWorkerRoutes": (delete, key),
        "a CloudFormation Delete of DefaultWorkerRegistration": (registration, key2),
    }


def test_every_invoker_is_refused_the_relay_and_the_workers_and_nothing_is_written(rig: Rig) -> None:
    from sluice_dev.local import teams

    lambdas = rig.dev.lambdas
    assert lambdas is not None
    before, denied = rig.snapshot(), lambdas.counts["denied"]
    assert before["routes"], "the default worker's routes are registered"
    answers: list[str] = []
    tried = 0
    for who, key in CALLERS.items():
        client = rig.client(key)
        for function in SCHEDULED:
            if (function, who) in LEGITIMATE:
                continue
            for shape, (event, response_key) in scheduled_shapes(rig).items():
                with pytest.raises(ClientError) as refused:
                    client.invoke(
                        FunctionName=function, InvocationType="Event", Payload=json.dumps(event).encode()
                    )
                    pytest.fail(f"{who} got through to {function}: {shape}")
                error = refused.value.response
                assert (error["Error"]["Code"], error["ResponseMetadata"]["HTTPStatusCode"]) == (
                    "AccessDeniedException",
                    403,
                ), (who, function, shape)
                tried += 1
                if response_key is not None:
                    answers.append(response_key)
    assert tried == (len(CALLERS) * len(SCHEDULED) - len(LEGITIMATE)) * 4
    assert lambdas.counts["denied"] - denied == tried
    time.sleep(2)  # anything asynchronous an attempt might have set off
    assert rig.snapshot() == before  # the routes, the queues' Redis state (nothing leased or acked), ...
    bucket = teams.ResponseBucket(rig.settings)
    assert all(bucket.answer(k, timeout_s=0.1) is None for k in answers)  # nobody answered CloudFormation


def test_the_schedule_rules_reach_their_own_function_only(rig: Rig) -> None:
    """EventBridge invokes with its rule's ARN (aws:SourceArn): the relay's rule the relay, the
    safety net's the default worker; neither the other, and no rule of someone else's."""
    from sluice_dev.local import access

    lambdas = rig.dev.lambdas
    assert lambdas is not None
    relay_rule, net_rule = rig.dev.rule_caller("RelayFunction"), rig.dev.rule_caller("WorkerFunction")
    assert relay_rule.source_arn and relay_rule.source_arn.endswith("-RelayTick1")
    assert net_rule.source_arn and net_rule.source_arn.endswith("-WorkerSafetyNet")
    dispatch = {"queues": ["echo"], "batch": 1, "source": "safety-net"}
    inv = lambdas.invoke(WORKER_FUNCTION, dispatch, asynchronous=False, caller=net_rule)
    assert inv.done.wait(60) and inv.error is None, inv.result
    for function, event, caller in (
        (RELAY_FUNCTION, scheduled_event(), net_rule),
        (WORKER_FUNCTION, dispatch, relay_rule),
        (RELAY_FUNCTION, scheduled_event(), access.rule_caller("sluice", "MyRule")),
        (WORKER_FUNCTION, dispatch, access.EVENTS),
    ):
        with pytest.raises(access.AccessDenied):
            lambdas.invoke(function, event, caller=caller)


def test_a_team_worker_refuses_a_stranger(rig: Rig) -> None:
    client = rig.client(CALLERS["a stranger allowed lambda:* on *"])
    event, _key = scheduled_shapes(rig)["a worker dispatch"]
    with pytest.raises(ClientError):
        client.invoke(
            FunctionName=team_function_name(TEAM[0]),
            InvocationType="Event",
            Payload=json.dumps(event).encode(),
        )


def test_a_team_worker_admits_its_rule_its_registrar_and_the_relay_only(rig: Rig) -> None:
    """infra/worker.yaml's TeamWorkerPolicy, locally: its own safety-net rule (the SourceArn the
    local scheduler sends), its registrar's role (the describe the registrar sent at start-up, which
    registered the team's routes) and the relay's role; not the default worker's rule, nor a rule
    of another stack."""
    from sluice_dev.local import access

    lambdas = rig.dev.lambdas
    assert lambdas is not None
    team = team_function_name(TEAM[0])
    rule = rig.dev.team_rule_caller(TEAM[0])
    assert rule.source_arn and rule.source_arn.endswith(f"{TEAM[0]}-worker-TeamSafetyNet")
    dispatch = {"queues": [rig.dev.team_stacks[TEAM[0]].queues[0]], "batch": 1, "source": "safety-net"}
    for caller in (rule, access.Caller(rig.dev.team_stacks[TEAM[0]].registrar_role_arn),
                   access.Caller(access.role_arn("sluice", "RelayFunctionRole"))):
        inv = lambdas.invoke(team, dispatch, asynchronous=False, caller=caller)
        assert inv.done.wait(60) and inv.error is None, (caller, inv.result)
    assert any(r.function == team for r in rig.dev._routes().routes)  # the registrar's describe got in
    for caller in (rig.dev.rule_caller("WorkerFunction"), access.rule_caller("sluice", "MyRule"),
                   access.rule_caller("other-worker", "TeamSafetyNet"), access.EVENTS,
                   access.Caller(rig.dev.team_stacks[TEAM[0]].role_arn)):
        with pytest.raises(access.AccessDenied):
            lambdas.invoke(team, dispatch, caller=caller)
