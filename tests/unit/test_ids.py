"""sluice.core.ids: self-verifying job ids (pure; no sockets, no clock)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.core import ids
from sluice.core.models import JOB_ID_RE, QUEUE_NAME_RE

KEY = b"0123456789abcdef-test-key"
OTHER = b"fedcba9876543210-test-key"
NOW = 1_700_000_000_123
queues = st.from_regex(QUEUE_NAME_RE, fullmatch=True)
times = st.integers(min_value=0, max_value=2**48 - 1)


def test_shape_ulid_queue_mac() -> None:
    job_id = ids.mint(NOW, "emails", KEY, entropy=bytes(range(10)))
    stamp, queue, mac = job_id.split(".")
    # The mac segment: the key id (one character), then the 80-bit mac (16 characters).
    assert (len(stamp), queue, len(mac)) == (26, "emails", 17)
    assert mac[0] == ids.key_id(KEY)
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
    assert JOB_ID_RE.fullmatch(job_id) and len(job_id) <= 109
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


U = ids.ulid(NOW, bytes(10))  # fixed: parametrized ids must be the same in every xdist worker


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


# ------------------------------------------------------------------ key rotation (issue 19, item 8)


def _key_with_another_id(key: bytes) -> bytes:
    return next(k for n in range(100) if ids.key_id(k := key + bytes([n])) != ids.key_id(key))


def test_an_id_minted_with_the_previous_key_verifies_after_a_rotation() -> None:
    new = _key_with_another_id(OTHER)
    old_id = ids.mint(NOW, "emails", OTHER)
    assert ids.verify(old_id, new) is None  # the new key alone does not know it
    assert ids.verify(old_id, new, previous=[OTHER]) == ("emails", NOW)
    assert ids.verify(ids.mint(NOW, "emails", new), new, previous=[OTHER]) == ("emails", NOW)


def test_the_key_id_picks_the_key_and_cannot_be_swapped() -> None:
    new = _key_with_another_id(KEY)
    stamp, queue, mac = ids.mint(NOW, "emails", KEY).split(".")
    swapped = f"{stamp}.{queue}.{ids.key_id(new)}{mac[1:]}"
    assert ids.verify(swapped, KEY, previous=[new]) is None
    assert ids.verify(swapped, new, previous=[KEY]) is None


def test_keys_sharing_a_key_id_are_both_tried() -> None:
    twin = next(k for n in range(1000) if ids.key_id(k := OTHER + n.to_bytes(2, "big")) == ids.key_id(KEY)
                and k != KEY)
    assert ids.verify(ids.mint(NOW, "emails", KEY), twin, previous=[KEY]) == ("emails", NOW)


def test_ids_minted_before_key_ids_still_verify_with_any_key() -> None:
    stamp = ids.ulid(NOW, bytes(10))
    legacy = f"{stamp}.emails.{ids._mac(KEY, f'{stamp}.emails')}"
    assert ids.verify(legacy, KEY) == ("emails", NOW)
    assert ids.verify(legacy, OTHER, previous=[KEY]) == ("emails", NOW)
    assert ids.verify(legacy, OTHER) is None
    # A legacy mac does not become a keyed one by gaining a key id in front.
    assert ids.verify(f"{stamp}.emails.{ids.key_id(KEY)}{ids._mac(KEY, f'{stamp}.emails')}", KEY) is None


# -- issue 29: an id's shape, whatever key made it ---------------------------------------------


@given(queue=queues, at=times)
def test_every_id_shape_a_gateway_makes_names_its_queue_whatever_key_made_it(queue: str, at: int) -> None:
    retired = b"a-key-rotated-out-two-months-ago"
    minted = ids.mint(at, queue, retired)
    made = [minted, ids.derive(minted, queue, "k", retired), ids.derive_keyless(minted, queue, "k"),
            ids.keyless(at, queue, bytes(10), b"firing"), minted.rsplit(".", 1)[0] + "." + minted[-16:]]
    assert [ids.shaped_queue(j) for j in made] == [queue] * 5  # the last: a bare mac, before key ids
    assert ids.named_key_id(made[0]) == ids.key_id(retired) and ids.named_key_id(made[2]) is None
    assert ids.named_key_id(made[4]) is None


@pytest.mark.parametrize("job_id", [
    "", "x", "a.b.c", U + ".emails", U + ".emails." + "0" * 15,
    U + ".emails." + "0" * 18, U + ".emails.L" + "0" * 16,  # L: no key id, not U
    U + ".emails." + "0" * 16 + "u", U + ".Emails!.U" + "0" * 16,
    U + ".emails.U" + "0" * 15 + "I",  # I is no Crockford digit
    U + ".a.b.U" + "0" * 16, "9" * 26 + ".emails.U" + "0" * 16,  # a ULID past 2**128
])
def test_a_malformed_id_has_no_shape(job_id: str) -> None:
    assert ids.shaped_queue(job_id) is None and not ids.is_keyless(job_id)


def test_a_parent_minted_with_a_retired_key_is_taken_for_its_lease_to_decide() -> None:
    """Issue 29, item 7: ``enqueue_children`` refused every parent whose key had retired (two
    rotations: a long workflow's later generation, a redriven old job) as "not issued by this
    deployment", before its lease was looked at. Now its shape admits it and its lease decides;
    reserved queues and shapeless ids are still refused at once."""
    from types import SimpleNamespace

    from sluice.core.errors import JobNotFound
    from sluice.gateway.families import _parent

    host: Any = SimpleNamespace(verifier=ids.Verifier(KEY, [OTHER]))
    retired = ids.mint(NOW, "emails", b"a-key-rotated-out-two-months-ago")
    assert host.verifier.verify(retired) is None
    for parent in (retired, ids.mint(NOW, "emails", KEY), ids.derive_keyless(retired, "emails", "k")):
        assert _parent(host, parent) == parent
    for refused in (ids.mint(NOW, "sluice-relay", KEY), ids.derive_keyless(retired, "sluice-relay", "k"),
                    "not-an-id", U + ".emails.L" + "0" * 16):
        with pytest.raises(JobNotFound):
            _parent(host, refused)


# -- nemesis (issue 29): a relay's Verifier, built per invocation from the container's cached keys ------


def test_a_verifier_of_cached_keys_rereads_at_once_for_an_unknown_key_id_then_once_a_minute() -> None:
    now, reads = [1_000_000], []

    def refresh() -> tuple[bytes, list[bytes]]:
        reads.append(now[0])
        return OTHER, [KEY]

    fresh = ids.Verifier(KEY, [], refresh=refresh, clock=lambda: now[0])
    rotated_in = ids.mint(now[0], "q", OTHER)
    assert fresh.verify(rotated_in) is None and reads == []  # keys read just now: no second read yet
    cached = ids.Verifier(KEY, [], refresh=refresh, clock=lambda: now[0], cached=True)
    assert cached.verify(rotated_in) == ("q", now[0]) and reads == [now[0]]  # before: unminted
    assert cached.verify(ids.mint(now[0], "q", KEY)) is not None  # the previous key still verifies
    third = b"a-third-key-nobody-holds-0123456"
    assert cached.verify(ids.mint(now[0], "q", third)) is None and len(reads) == 1  # once a minute


def test_the_relays_verifier_takes_a_key_rotated_in_after_the_container_read_its_keys(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic import SecretStr

    from sluice.core.clock import wall_ms
    from sluice.core.config import Settings
    from sluice.entry import root

    s = Settings(job_id_secret=SecretStr(KEY.decode()))
    assert root.job_id_keys(s) == (KEY, ())  # the container's keys, cached before the rotation
    monkeypatch.setattr(root, "refresh_job_id_keys", lambda _s=None: (OTHER, (KEY,)))
    verifier = root.job_id_verifier(s)  # the next invocation's
    assert verifier is not None and verifier.verify(ids.mint(wall_ms(), "q", OTHER)) is not None


def test_a_new_key_with_the_old_keys_key_id_is_read_again_not_refused() -> None:
    # A key id is one character of 32: one rotation in 32 draws a key whose id is the current one's.
    # The Verifier re-read only for an unknown key id, so a relay refused every record of the new key
    # as unminted (a fresh-clone CI chaos run of rotate_job_id_key: 80 jobs answered 202 and lost).
    same = next(k for k in (f"rotated-in-key-{i:04d}-0123456789abcdef".encode() for i in range(10_000))
                if k != KEY and ids.key_id(k) == ids.key_id(KEY))
    now, reads = [1_000_000], []

    def refresh() -> tuple[bytes, list[bytes]]:
        reads.append(now[0])
        return same, [KEY]

    cached = ids.Verifier(KEY, [], refresh=refresh, clock=lambda: now[0], cached=True)
    rotated_in = ids.mint(now[0], "q", same)
    assert cached.verify(rotated_in) == ("q", now[0]) and reads == [now[0]]
    assert cached.verify(ids.mint(now[0], "q", KEY)) is not None  # the key before still verifies
    made_up = U + ".q." + ids.key_id(KEY) + "0" * 16
    assert cached.verify(made_up) is None and len(reads) == 1  # a made-up id: still once a minute
