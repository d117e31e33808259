"""A job id key rotation draws a key whose key id neither held key has (session 36): ``ids.fresh_key``
and the local stack's rotation (``sluice_dev.local.job_id_secret.rotate``, what ``sluice chaos``'s
``rotate_job_id_key`` runs) over a fake Secrets Manager client. The rotation Lambda's copy is held
by tests/infra/test_secret_rotation.py."""

from __future__ import annotations

import types
from collections.abc import Iterator
from typing import Any

import pytest

from sluice.core import ids
from sluice.core.config import Settings
from sluice_dev.local import job_id_secret

CURRENT = b"current-job-id-key-0123456789abcdef"
PREVIOUS = b"previous-job-id-key-0123456789abcdef"


def keys_with_id(kid: str, prefix: bytes = b"drawn-") -> Iterator[bytes]:
    """Keys (of a key's length) whose key id is ``kid``."""
    n = 0
    while True:
        key = prefix + f"{n:026d}".encode()
        if ids.key_id(key) == kid:
            yield key
        n += 1


def free_key(*held: bytes) -> bytes:
    taken = {ids.key_id(k) for k in held}
    return next(k for n in range(10_000) if ids.key_id(k := b"free-" + f"{n:026d}".encode()) not in taken)


def test_a_drawn_key_sharing_a_held_key_id_is_drawn_again() -> None:
    assert ids.key_id(CURRENT) != ids.key_id(PREVIOUS)
    draws = iter([next(keys_with_id(ids.key_id(CURRENT))), next(keys_with_id(ids.key_id(PREVIOUS))),
                  free := free_key(CURRENT, PREVIOUS)])
    assert ids.fresh_key([CURRENT, PREVIOUS], lambda: next(draws)) == free
    assert ids.fresh_key([], lambda: CURRENT) == CURRENT  # nothing held: the first draw


def test_a_draw_that_never_frees_a_key_id_ends_in_an_error() -> None:
    with pytest.raises(RuntimeError, match="no job id key"):
        ids.fresh_key([CURRENT], lambda: CURRENT)
    with pytest.raises(ValueError, match="at least 16 bytes"):
        ids.fresh_key([CURRENT], lambda: b"short")


class FakeSecrets:
    """Secrets Manager as moto keeps a secret: put with AWSCURRENT moves the old one to AWSPREVIOUS."""

    exceptions = types.SimpleNamespace(ResourceNotFoundException=KeyError)

    def __init__(self, current: bytes, previous: bytes | None) -> None:
        self.stages = {"AWSCURRENT": current.decode()}
        if previous is not None:
            self.stages["AWSPREVIOUS"] = previous.decode()

    def get_secret_value(self, SecretId: str, VersionStage: str) -> dict[str, Any]:
        return {"SecretString": self.stages[VersionStage]}

    def put_secret_value(self, SecretId: str, SecretString: str, VersionStages: list[str]) -> None:
        assert VersionStages == ["AWSCURRENT"]
        self.stages["AWSPREVIOUS"], self.stages["AWSCURRENT"] = self.stages["AWSCURRENT"], SecretString


@pytest.mark.parametrize("previous", [PREVIOUS, None], ids=["rotated-before", "first-rotation"])
def test_the_local_rotation_never_gives_the_new_key_a_held_key_id(
        monkeypatch: pytest.MonkeyPatch, previous: bytes | None) -> None:
    """``rotate_job_id_key`` drew the current key's key id one time in 32 (a chaos run's relay then
    dead-lettered the new key's records as unminted until its Verifier re-read)."""
    fake = FakeSecrets(CURRENT, previous)
    monkeypatch.setattr(job_id_secret, "_client", lambda s: fake)
    held = [CURRENT] if previous is None else [CURRENT, PREVIOUS]
    colliding = [next(keys_with_id(ids.key_id(k), b"tok-")) for k in held]
    drawn = iter([k.decode() for k in colliding] + [free_key(*held).decode()])
    monkeypatch.setattr(job_id_secret.secrets, "token_urlsafe", lambda n: next(drawn))
    key = job_id_secret.rotate(Settings(job_id_secret_arn="arn:aws:secretsmanager:us-east-1:0:secret:k"))
    assert ids.key_id(key) not in {ids.key_id(k) for k in held}
    assert fake.stages == {"AWSCURRENT": key.decode(), "AWSPREVIOUS": CURRENT.decode()}
