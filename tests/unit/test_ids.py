"""sluice.ids: self-verifying job ids (pure; no sockets, no clock)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice import ids
from sluice.models import JOB_ID_RE, QUEUE_NAME_RE

KEY = b"0123456789abcdef-test-key"
OTHER = b"fedcba9876543210-test-key"
NOW = 1_700_000_000_123
queues = st.from_regex(QUEUE_NAME_RE, fullmatch=True)
times = st.integers(min_value=0, max_value=2**48 - 1)


def test_shape_ulid_queue_mac() -> None:
    job_id = ids.mint(NOW, "emails", KEY, entropy=bytes(range(10)))
    stamp, queue, mac = job_id.split(".")
    assert (len(stamp), queue, len(mac)) == (26, "emails", 16)
    assert stamp == ids.ulid(NOW, bytes(range(10)))
    assert set(stamp + mac) <= set(ids.CROCKFORD)
    assert ids.verify(job_id, KEY) == ids.Minted("emails", NOW)


@given(value=st.integers(min_value=0, max_value=2**130 - 1))
def test_base32_is_crockford_most_significant_first(value: int) -> None:
    slow = "".join(ids.CROCKFORD[(value >> shift) & 31] for shift in range(125, -1, -5))
    assert ids._base32(value, 26) == slow
    assert ids._base32(value & (2**80 - 1), 16) == slow[-16:]


def test_ulid_time_and_order() -> None:
    assert ids.ulid_time_ms(ids.ulid(NOW)) == NOW
    assert ids.ulid(NOW, bytes(10)) < ids.ulid(NOW + 1, bytes(10))
    assert ids.ulid(0, bytes(10)) == "0" * 26
    assert ids.ulid_time_ms("8" + "0" * 25) is None  # past 128 bits
    assert ids.ulid_time_ms("0" * 25 + "u") is None  # lower case is not ours
    assert ids.ulid_time_ms("0" * 25 + "I") is None  # not Crockford
    assert ids.ulid_time_ms("0" * 25) is None


@given(queue=queues, now=times, entropy=st.binary(min_size=10, max_size=10))
def test_every_minted_id_is_a_legal_job_id_and_verifies(queue: str, now: int, entropy: bytes) -> None:
    job_id = ids.mint(now, queue, KEY, entropy)
    assert JOB_ID_RE.fullmatch(job_id) and len(job_id) <= 108
    assert ids.verify(job_id, KEY) == (queue, now)
    assert ids.verify(job_id, OTHER) is None


@given(queue=queues, position=st.integers(min_value=0), char=st.sampled_from(ids.CROCKFORD + "a-_"))
def test_any_changed_character_fails(queue: str, position: int, char: str) -> None:
    job_id = ids.mint(NOW, queue, KEY)
    i = position % len(job_id)
    if job_id[i] == "." or job_id[i] == char:
        return
    assert ids.verify(job_id[:i] + char + job_id[i + 1:], KEY) is None


def test_the_mac_is_bound_to_the_queue() -> None:
    stamp, _, mac = ids.mint(NOW, "emails", KEY).split(".")
    assert ids.verify(f"{stamp}.thumbnails.{mac}", KEY) is None


@pytest.mark.parametrize("job_id", [
    "", "abc", "s1-000001-0", "01HZY1Q8J6.emails", ".emails.", "a.b.c.d",
    "0" * 26 + ".emails." + "0" * 16, "0" * 26 + ".Emails." + "0" * 16, "0" * 26 + ".emails." + "0" * 200,
    "0" * 26 + ".emails." + "é" * 16, "0" * 26 + ".emails." + "\x00" * 16,
])
def test_garbage_never_verifies_and_never_raises(job_id: str) -> None:
    assert ids.verify(job_id, KEY) is None


def test_keys_and_queues_are_checked_when_minting() -> None:
    with pytest.raises(ValueError):
        ids.check_key(b"short")
    with pytest.raises(ValueError):
        ids.mint(NOW, "a.b", KEY)  # a dot would make ids ambiguous
    with pytest.raises(ValueError):
        ids.mint(NOW, "", KEY)
