"""Teams (issue 27) on the moto server: the grant, result reads, the team map in SSM, and the
registrar writing the real routes table. Each hostile attempt is refused and writes nothing."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from sluice.backends.aws.team_map import SsmTeamMap
from sluice.backends.dynamodb import tables
from sluice.backends.dynamodb.jobs import DynamoJobStore
from sluice.backends.dynamodb.routes import DynamoRouteStore
from sluice.core.config import Settings
from sluice.core.errors import InvalidInput, StoreError
from sluice.core.ids import mint
from sluice.core.routes import Route
from sluice.registrar.register import Registrar
from sluice_dev.fakes import FakeDescriber

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]
KEY = b"k" * 32
BIG = {"blob": "x" * 5000}


@pytest.fixture
def settings(moto_url: str, unique: str) -> Settings:
    s = Settings(aws_endpoint_url=moto_url, jobs_table=f"jobs-{unique}", idempotency_table=f"idem-{unique}",
                 results_bucket=f"results-{unique}", routes_table=f"routes-{unique}",
                 stack_name=f"st{unique}", large_result_bytes=1024)
    tables.ensure_all(s)
    return s


def _db(s: Settings) -> Any:
    return boto3.client("dynamodb", region_name="us-east-1", endpoint_url=s.aws_endpoint_url)


def _items(s: Settings) -> list[dict[str, Any]]:
    return list(_db(s).scan(TableName=s.jobs_table, ConsistentRead=True)["Items"])


def test_a_grant_never_creates_an_item_for_an_id_of_another_queue(settings: Settings) -> None:
    """A hostile worker granting, under its own queue, an id minted (or made up) for another team's
    queue: refused before any write. (Its own credentials on that id: IAM's LeadingKeys,
    tests/infra/test_team_stack.py.)"""
    store = DynamoJobStore.from_settings(settings)
    theirs = mint(1_700_000_000_000, "payments", KEY)
    with pytest.raises(InvalidInput, match="names queue 'payments', not 'thumbs'"):
        store.grant(theirs, "thumbs", "evil-worker")
    made_up = "01HF7YAT00J9PY63D99Z97F3G2.payments.0000000000000000"
    with pytest.raises(InvalidInput, match="no item written"):
        store.grant(made_up, "evil", "evil-worker", lease_token=1)
    assert _items(settings) == []
    mine = mint(1_700_000_000_000, "thumbs", KEY)
    assert store.grant(mine, "thumbs", "worker") == 1  # the queue's own id: as before


def test_get_reads_only_the_jobs_own_result_whatever_result_ref_says(settings: Settings) -> None:
    store = DynamoJobStore.from_settings(settings)
    theirs, mine = mint(1_700_000_000_000, "payments", KEY), mint(1_700_000_000_000, "thumbs", KEY)
    store.write_result(theirs, store.grant(theirs, "payments", "w"), BIG)
    ref = store.get_job(theirs).result_ref
    assert ref is not None and f"/results/payments/{theirs}/" in ref
    assert store.get_job(theirs).result == BIG
    # The thumbs team points its own item at the payments team's result (its role may write its item).
    store.write_result(mine, store.grant(mine, "thumbs", "w"), "small")
    _db(settings).update_item(TableName=settings.jobs_table, Key={"job_id": {"S": mine}},
                              UpdateExpression="SET result_ref = :r REMOVE #res",
                              ExpressionAttributeNames={"#res": "result"},
                              ExpressionAttributeValues={":r": {"S": ref}})
    with pytest.raises(StoreError, match="does not name its own result"):
        store.get_job(mine)
    assert store.get_job(mine, load_result=False).result is None


def test_results_written_before_the_queue_prefix_stay_readable(settings: Settings) -> None:
    store = DynamoJobStore.from_settings(settings)
    job = mint(1_700_000_000_000, "thumbs", KEY)
    token = store.grant(job, "thumbs", "w")
    body = json.dumps(BIG, separators=(",", ":"), sort_keys=True).encode()
    import hashlib

    key = f"results/{job}/{token}/{hashlib.sha256(body).hexdigest()}.json"
    boto3.client("s3", region_name="us-east-1", endpoint_url=settings.aws_endpoint_url).put_object(
        Bucket=settings.results_bucket, Key=key, Body=body)
    _db(settings).update_item(TableName=settings.jobs_table, Key={"job_id": {"S": job}},
                              UpdateExpression="SET result_ref = :r, #st = :s",
                              ExpressionAttributeNames={"#st": "status"},
                              ExpressionAttributeValues={":r": {"S": f"s3://{settings.results_bucket}/{key}"},
                                                         ":s": {"S": "succeeded"}})
    assert store.get_job(job).result == BIG


def test_the_team_map_is_read_from_ssm(settings: Settings) -> None:
    ssm = boto3.client("ssm", region_name="us-east-1", endpoint_url=settings.aws_endpoint_url)
    base = f"/sluice/{settings.stack_name}/teams/"
    ssm.put_parameter(Name=base + "media", Type="StringList", Value="avatars,thumbs-*")
    ssm.put_parameter(Name=base + "pay", Type="StringList", Value="payments")
    ssm.put_parameter(Name=base + "bad", Type="StringList", Value="sluice-ops")  # never Sluice's queues
    ssm.put_parameter(Name=f"/sluice/other{settings.stack_name}/teams/x", Type="StringList", Value="x")
    teams = SsmTeamMap.from_settings(settings).read_teams()
    assert teams == {"media": ("avatars", "thumbs-*"), "pay": ("payments",), "bad": ()}


def test_the_registrar_refuses_another_teams_queue_and_writes_nothing(settings: Settings) -> None:
    routes = DynamoRouteStore.from_settings(settings)
    routes.put_routes("pay", [Route("payments", f"{settings.stack_name}-worker-pay", "pay")], [])
    fn = f"{settings.stack_name}-worker-evil"
    evil = Registrar.of(settings.stack_name, "evil", "evil-*", routes,
                        FakeDescriber({fn: {"queues": ["evil-a", "payments"], "schemas": {}}}))
    with pytest.raises(InvalidInput, match="'payments' is not given to team 'evil'"):
        evil.apply({"RequestType": "Create", "ResourceProperties": {}})
    with pytest.raises(InvalidInput, match="names owner 'pay'"):
        evil.apply({"RequestType": "Create", "ResourceProperties": {"Owner": "pay"}})
    assert [(r.pattern, r.owner) for r in routes.list_routes()] == [("payments", "pay")]
    evil.describer = FakeDescriber({fn: {"queues": ["evil-a"], "schemas": {}}})
    evil.apply({"RequestType": "Create", "ResourceProperties": {"Owner": "evil"}})
    assert sorted((r.pattern, r.owner) for r in routes.list_routes()) == [("evil-a", "evil"),
                                                                          ("payments", "pay")]
    evil.apply({"RequestType": "Delete", "PhysicalResourceId": "x", "ResourceProperties": {}})
    assert [(r.pattern, r.owner) for r in routes.list_routes()] == [("payments", "pay")]
