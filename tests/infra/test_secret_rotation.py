"""infra/secret_rotation/app.py over fake Secrets Manager and ElastiCache clients (no AWS, no moto:
moto has no ElastiCache ModifyUser): a Redis user's rotation gives the user both passwords,
keeps its username and id, and moves AWSCURRENT; a job id key stays a bare key."""

from __future__ import annotations

import json
import sys
import types
from datetime import UTC, datetime, timedelta
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

    def __init__(self, current: str, previous_age_days: float | None = None, age_days: float = 30) -> None:
        self.values = {"v1": current}
        self.stages = {"v1": ["AWSCURRENT"]}
        now = datetime.now(UTC)
        self.created = {"v1": now - timedelta(days=age_days)}
        if previous_age_days is not None:
            self.values["v0"], self.stages["v0"] = "p" * 64, ["AWSPREVIOUS"]
            self.created["v0"] = now - timedelta(days=previous_age_days)

    def list_secret_versions(self, SecretId: str) -> dict[str, Any]:
        return {"Versions": [{"VersionId": v, "VersionStages": stages, "CreatedDate": self.created.get(v)}
                             for v, stages in self.stages.items()]}

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


def rotate(monkeypatch: pytest.MonkeyPatch, current: str,
           **ages: float) -> tuple[FakeSecrets, FakeElastiCache]:
    sm, ec = FakeSecrets(current, **ages), FakeElastiCache()
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


def test_a_job_id_key_younger_than_a_jobs_life_is_not_rotated_while_a_previous_key_verifies(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A careless second rotation would drop AWSPREVIOUS while ids it minted may be in flight."""
    with pytest.raises(ValueError, match=r"refused: the job id key is 2\.0 days old"):
        rotate(monkeypatch, "k" * 64, previous_age_days=32, age_days=2)
    sm, _ = rotate(monkeypatch, "k" * 64, previous_age_days=60, age_days=30)  # the schedule's 30 days
    assert sm.stages["v2"] == ["AWSCURRENT"]
    sm, _ = rotate(monkeypatch, "k" * 64, age_days=0.1)  # the first rotation: no older key in flight
    assert sm.stages["v2"] == ["AWSCURRENT"]


def test_the_rotations_key_age_is_the_job_life_bound() -> None:
    from sluice.core.limits import DAY_MS, JOB_LIFE_MS

    assert load_app().KEY_MIN_AGE_DAYS * DAY_MS == JOB_LIFE_MS


def test_the_rotations_key_id_is_the_layers() -> None:
    """The rotation has no layer: its copy of ``ids.key_id`` (over the key's UTF-8 bytes, as
    ``sluice.entry.root.job_id_key`` reads a bare SecretString) and its draw bound must agree."""
    from sluice.core import ids

    app = load_app()
    assert app.CROCKFORD == ids.CROCKFORD and app.MAX_KEY_DRAWS == ids.MAX_KEY_DRAWS
    for n in range(200):
        key = f"key-{n}-é-{'k' * 40}"
        assert app.key_id(key) == ids.key_id(key.encode("utf-8"))


def _keys_with_id(app: Any, kid: str, tag: str) -> str:
    return next(k for n in range(10_000) if app.key_id(k := f"{tag}{n:063d}") == kid)


@pytest.mark.parametrize("previous_age_days", [60, None], ids=["rotated-before", "first-rotation"])
def test_a_new_job_id_key_never_takes_the_current_or_previous_keys_key_id(
        monkeypatch: pytest.MonkeyPatch, previous_age_days: float | None) -> None:
    """Session 36: a rotation drew the current key's key id one time in 32 (one character of 32).
    The draws here give the current key's key id, then the previous key's, then a free one."""
    app = load_app()
    current, previous = "k" * 64, "p" * 64  # FakeSecrets' previous key is "p" * 64
    held = [current] if previous_age_days is None else [current, previous]
    assert len({app.key_id(k) for k in held}) == len(held)
    taken = {app.key_id(k) for k in held}
    free = next(k for n in range(10_000) if app.key_id(k := f"f{n:063d}") not in taken)
    draws = iter("".join([*(_keys_with_id(app, app.key_id(k), "c") for k in held), free]))
    fake_secrets = types.ModuleType("secrets")
    fake_secrets.choice = lambda alphabet: next(draws)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "secrets", fake_secrets)
    ages = {} if previous_age_days is None else {"previous_age_days": previous_age_days}
    sm, _ = rotate(monkeypatch, current, **ages)
    assert sm.values["v2"] == free and sm.stages["v2"] == ["AWSCURRENT"]
