"""infra/secret_rotation/app.py over fake Secrets Manager and ElastiCache clients (no AWS, no moto:
moto has no ElastiCache ModifyUser): a Redis user's rotation gives the user both passwords,
keeps its username and id, and moves AWSCURRENT; a job id key stays a bare key."""

from __future__ import annotations

import json
import sys
import types
from typing import Any

import pytest

from tests.infra import cfn
from tests.loading import module_from_file


def load_app() -> Any:
    return module_from_file(cfn.ROOT / "infra/secret_rotation/app.py", "rotation_app")


class NotFound(Exception):
    pass


class FakeSecrets:  # boto3's argument names
    exceptions = types.SimpleNamespace(ResourceNotFoundException=NotFound)

    def __init__(self, current: str) -> None:
        self.values = {"v1": current}
        self.stages = {"v1": ["AWSCURRENT"]}

    def describe_secret(self, SecretId: str) -> dict[str, Any]:
        return {"VersionIdsToStages": self.stages}

    def get_secret_value(self, SecretId: str, VersionStage: str,
                         VersionId: str | None = None) -> dict[str, Any]:
        for version, stages in self.stages.items():
            if VersionStage in stages and VersionId in (None, version) and version in self.values:
                return {"SecretString": self.values[version]}
        raise NotFound(VersionStage)

    def put_secret_value(self, SecretId: str, ClientRequestToken: str, SecretString: str,
                         VersionStages: list[str]) -> None:
        self.values[ClientRequestToken] = SecretString
        self.stages[ClientRequestToken] = list(VersionStages)

    def update_secret_version_stage(self, SecretId: str, VersionStage: str, MoveToVersionId: str,
                                    RemoveFromVersionId: str) -> None:
        self.stages[RemoveFromVersionId].remove(VersionStage)
        self.stages[MoveToVersionId] = [VersionStage]


class FakeElastiCache:
    def __init__(self) -> None:
        self.modified: list[tuple[str, list[str]]] = []

    def describe_users(self, UserId: str) -> dict[str, Any]:
        return {"Users": [{"UserId": UserId, "Status": "active"}]}

    def modify_user(self, UserId: str, Passwords: list[str]) -> None:
        self.modified.append((UserId, Passwords))


def rotate(monkeypatch: pytest.MonkeyPatch, current: str) -> tuple[FakeSecrets, FakeElastiCache]:
    sm, ec = FakeSecrets(current), FakeElastiCache()
    fake = types.ModuleType("boto3")
    fake.client = lambda name: {"secretsmanager": sm, "elasticache": ec}[name]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "boto3", fake)
    monkeypatch.setenv("REDIS_USER_ID_PREFIX", "sluice-ab12cd34")
    app = load_app()
    sm.stages["v2"] = ["AWSPENDING"]
    for step in ("createSecret", "setSecret", "testSecret", "finishSecret"):
        app.handler({"SecretId": "arn:secret", "ClientRequestToken": "v2", "Step": step}, None)
    return sm, ec


def test_a_redis_users_password_rotates_with_both_valid_in_between(monkeypatch: pytest.MonkeyPatch) -> None:
    user = "sluice-ab12cd34-team-words"
    sm, ec = rotate(monkeypatch, json.dumps({"username": user, "user_id": user, "password": "old"}))
    new = json.loads(sm.values["v2"])
    assert new["username"] == new["user_id"] == user
    assert len(new["password"]) == 64 and new["password"] != "old"
    assert ec.modified == [(user, ["old", new["password"]])]
    assert sm.stages == {"v1": [], "v2": ["AWSCURRENT"]}


def test_a_job_id_key_stays_a_bare_key(monkeypatch: pytest.MonkeyPatch) -> None:
    sm, ec = rotate(monkeypatch, "k" * 64)
    assert len(sm.values["v2"]) == 64 and not sm.values["v2"].startswith("{") and ec.modified == []


def test_another_stacks_redis_user_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="not one of sluice-ab12cd34"):
        rotate(monkeypatch, json.dumps({"username": "x", "user_id": "sluice-other-relay", "password": "old"}))
