"""The hostile team (issue 27): a second team's worker, deployed with ``--worker`` and its own
function, role and registrar, tries everything issue 27's item 2 names against team "words".
Every attempt is refused, and nothing is written.

What AWS itself enforces is tested on the templates instead (tests/infra/test_team_stack.py): a team
role's direct DynamoDB writes to another team's items (``dynamodb:LeadingKeys``), its direct S3
reads of another team's results (``results/<queue>/*``), any write to the routes table (the vended
role has no routes-table action), invoking another team's registrar (its resource policy's deny),
and writing the team map (only infra/team.yaml's stack). The local moto server does not evaluate
IAM, so those are not re-run here; the local Lambda service's resource-policy evaluation (the
"split" part) decides who may invoke a registrar once merged.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from sluice.backends.dynamodb.jobs import DynamoJobStore
from sluice.core.errors import InvalidInput, RegistrationRefused
from sluice_dev.local.dev import DevOptions, DevStack
from tests.stack.test_dev_teams import http, started, wait_job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
INVOKED: list[tuple[str, dict[str, Any]]] = []
EVIL_FN, WORDS_FN = "sluice-worker-evil", "sluice-worker-words"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DevStack, dict[str, Any]]]:
    state: Path = tmp_path_factory.mktemp("hostile") / ".sluice"
    dev = DevStack(DevOptions(
        state_dir=state, workers=1, log_level="WARNING", safety_net_every_s=600, history=False,
        settings={"route_cache_ttl_s": 1.0},  # so a route written in a test is read within a second
        team_workers=(("words", "sluice_dev.examples_team"), ("evil", "tests.stack.hostile_team"))))
    yield from started(dev, INVOKED)


def routes(dev: DevStack) -> dict[str, tuple[str, str, str]]:
    """pattern -> (function, owner, schemas) of every item in the routes table."""
    assert dev.settings is not None
    db = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=dev.settings.aws_endpoint_url)
    items = db.scan(TableName=dev.settings.routes_table, ConsistentRead=True)["Items"]
    return {i["pattern"]["S"]: (i["function"]["S"], i["owner"]["S"], i.get("schemas", {}).get("S", ""))
            for i in items}


def test_the_local_stack_plays_each_teams_infra_stack(stack: tuple[DevStack, dict[str, Any]]) -> None:
    dev, endpoints = stack
    assert dev.settings is not None and dev.lambdas is not None
    ssm = boto3.client("ssm", region_name="us-east-1", endpoint_url=dev.settings.aws_endpoint_url)
    found = ssm.get_parameters_by_path(Path="/sluice/sluice/teams/")["Parameters"]
    assert {(p["Name"], p["Type"], p["Value"]) for p in found} == {
        ("/sluice/sluice/teams/evil", "StringList", "evil-jobs"),
        ("/sluice/sluice/teams/words", "StringList", ",".join(sorted(dev.team_stacks["words"].queues)))}
    assert {"sluice-registrar-words", "sluice-registrar-evil"} <= set(dev.lambdas.functions)
    assert dev.team_stacks["evil"].role_arn == "arn:aws:iam::000000000000:role/sluice/sluice-team-evil"
    assert "evil-jobs -> sluice-worker-evil" in endpoints["routes"]
    assert routes(dev)["evil-jobs"][:2] == (EVIL_FN, "evil")


@pytest.mark.parametrize(("properties", "why"), [
    ({"Patterns": ["word-count"]}, "'word-count' is not given to team 'evil'"),  # another team's queue
    ({"Patterns": ["word-*"]}, "'word-*' is not given to team 'evil'"),  # a prefix over it
    ({"Owner": "words"}, "names owner 'words'"),  # a forged owner
    ({"FunctionName": WORDS_FN}, f"names '{WORDS_FN}'"),  # another team's function
    ({"Schedules": [{"queue": "word-count", "expression": "rate(1 minute)"}]}, "operator API"),
])
def test_the_evil_registrar_refuses_and_writes_nothing(stack: tuple[DevStack, dict[str, Any]],
                                                       properties: dict[str, Any], why: str) -> None:
    dev, _ = stack
    before = routes(dev)
    answer = dev.register_team("evil", kind="Update", properties=properties, check=False)
    assert answer["Status"] == "FAILED" and why in answer["Reason"], answer
    assert routes(dev) == before


def test_a_forged_stack_id_and_service_token_register_only_evils_own_queue(
        stack: tuple[DevStack, dict[str, Any]]) -> None:
    dev, _ = stack
    before = routes(dev)
    answer = dev.register_team("evil", kind="Update", stack_id="arn:aws:cloudformation:us-east-1:"
                               "000000000000:stack/words-worker/local",
                               properties={"ServiceToken": "sluice-registrar-words"})
    assert answer["Status"] == "SUCCESS" and answer["Data"]["Routes"] == "evil-jobs", answer
    assert routes(dev) == before


def test_the_registrar_answers_only_cloudformation(stack: tuple[DevStack, dict[str, Any]]) -> None:
    """An invoker cannot point the registrar's answer anywhere else (no request made, nothing written)."""
    dev, _ = stack
    assert dev.lambdas is not None
    before = routes(dev)
    event = {"RequestType": "Delete", "ResponseURL": "http://169.254.169.254/latest/meta-data/",
             "StackId": "x", "RequestId": "r", "LogicalResourceId": "TeamRoutes",
             "PhysicalResourceId": "sluice-registrar:words:sluice-worker-words", "ResourceProperties": {}}
    inv = dev.lambdas.invoke("sluice-registrar-evil", event, asynchronous=False)
    assert inv.done.wait(60) and inv.error is None
    assert inv.result["Status"] == "FAILED" and "ResponseURL" in inv.result["Reason"]
    assert routes(dev) == before


def test_a_grant_for_another_teams_job_creates_nothing(stack: tuple[DevStack, dict[str, Any]]) -> None:
    """Evil's worker code granting words' job id under its own queue. (Its credentials on words'
    item: IAM's LeadingKeys, tests/infra/test_team_stack.py.)"""
    dev, endpoints = stack
    assert dev.settings is not None
    code, accepted = http("POST", f"{endpoints['gateway_url']}/v1/queues/word-count/jobs",
                          {"payload": {"text": "a b"}, "delay_seconds": 600})
    assert code == 202, accepted
    store, job_id = DynamoJobStore.from_settings(dev.settings), accepted["job_id"]
    before = store.get_job(job_id, load_result=False) if _exists(dev, job_id) else None
    with pytest.raises(InvalidInput, match="names queue 'word-count', not 'evil-jobs'"):
        store.grant(job_id, "evil-jobs", "sluice-worker-evil:x", lease_token=1)
    after = store.get_job(job_id, load_result=False) if _exists(dev, job_id) else None
    assert after == before and (after is None or after.token == 0)


def _exists(dev: DevStack, job_id: str) -> bool:
    assert dev.settings is not None
    db = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=dev.settings.aws_endpoint_url)
    return "Item" in db.get_item(TableName=dev.settings.jobs_table, Key={"job_id": {"S": job_id}})


def test_another_teams_result_is_not_read_through_a_forged_result_ref(
        stack: tuple[DevStack, dict[str, Any]]) -> None:
    dev, endpoints = stack
    assert dev.settings is not None
    s, gateway = dev.settings, endpoints["gateway_url"]
    code, words = http("POST", f"{gateway}/v1/queues/word-count/jobs", {"payload": {"text": "x"}})
    assert code == 202 and wait_job(gateway, words["job_id"])["status"] == "succeeded"
    # Words' large result, where the store would keep it.
    secret = json.dumps({"secret": "words-only"}).encode()
    key = f"results/word-count/{words['job_id']}/1/{hashlib.sha256(secret).hexdigest()}.json"
    boto3.client("s3", region_name="us-east-1", endpoint_url=s.aws_endpoint_url).put_object(
        Bucket=s.results_bucket, Key=key, Body=secret)
    code, evil = http("POST", f"{gateway}/v1/queues/evil-jobs/jobs", {"payload": {}})
    assert code == 202 and wait_job(gateway, evil["job_id"])["status"] == "succeeded"
    # Evil's role may write its own item: it points its result_ref at words' object.
    db = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=s.aws_endpoint_url)
    db.update_item(TableName=s.jobs_table, Key={"job_id": {"S": evil["job_id"]}},
                   UpdateExpression="SET result_ref = :r REMOVE #res",
                   ExpressionAttributeNames={"#res": "result"},
                   ExpressionAttributeValues={":r": {"S": f"s3://{s.results_bucket}/{key}"}})
    code, view = http("GET", f"{gateway}/v1/jobs/{evil['job_id']}")
    assert "words-only" not in json.dumps(view) and code != 200, (code, view)


def test_a_route_written_around_the_registrar_is_never_dispatched(
        stack: tuple[DevStack, dict[str, Any]]) -> None:
    """Evil's route item naming words' queue (a write its vended role cannot make in AWS): the relay
    checks the team map, does not invoke evil's function, and says so; words' job waits, unrun by
    evil, and runs in words' function once the route is words' again."""
    dev, endpoints = stack
    assert dev.settings is not None
    s, gateway = dev.settings, endpoints["gateway_url"]
    db = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=s.aws_endpoint_url)
    good = db.get_item(TableName=s.routes_table, Key={"pattern": {"S": "word-count"}})["Item"]
    forged = {**good, "function": {"S": EVIL_FN}, "owner": {"S": "evil"}}
    db.put_item(TableName=s.routes_table, Item=forged)
    try:
        time.sleep(3)  # every route cache (1 s here) has read the forged route
        code, accepted = http("POST", f"{gateway}/v1/queues/word-count/jobs",
                              {"payload": {"text": "one two"}})
        assert code == 202, accepted
        time.sleep(6)  # several relay passes
        evil_runs = [e for fn, e in list(INVOKED) if fn == EVIL_FN and "word-count" in e.get("queues", [])]
        assert evil_runs == []
        _, view = http("GET", f"{gateway}/v1/jobs/{accepted['job_id']}")
        assert view["status"] in ("accepted", "queued") and view["attempts"] == 0, view
        relay_log = (dev.logs / "sluice-relay.log").read_text()
        assert f"queue word-count not dispatched to {EVIL_FN}" in relay_log
        assert "does not give queue 'word-count' to team 'evil'" in relay_log
    finally:
        db.put_item(TableName=s.routes_table, Item=good)
    done = wait_job(gateway, accepted["job_id"])
    assert done["status"] == "succeeded" and done["result"]["function"] == WORDS_FN, done


def test_a_teams_code_scheduling_onto_another_teams_queue_stops_its_registration(tmp_path: Path) -> None:
    """Issue 31, item 5: evil's handlers module declares a schedule on word-count (team words'). Its
    registrar function, asked by CloudFormation's Create at start, refuses it with the reason, before
    any write: the stack does not start."""
    dev = DevStack(DevOptions(
        state_dir=tmp_path / ".sluice", workers=1, log_level="WARNING", history=False, safety_net_every_s=600,
        team_workers=(("words", "sluice_dev.examples_team"), ("evil", "tests.stack.hostile_schedules"))))
    why = ("team evil's routes were refused: schedule word-count/drain-them targets queue 'word-count', "
           "which the team map does not give team 'evil'")
    with pytest.raises(RegistrationRefused, match=why):
        dev.start()
    assert dev.lambdas is None and not (tmp_path / ".sluice" / "endpoints.json").exists()
