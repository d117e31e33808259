"""A queue's config hash as its team may write it by hand (session 36): its worker's Redis user may
HSET every key of its queue. ``parse_config`` reads what config.lua would not have written as unset,
never as an error: an error there failed the relay's plan of every queue it relays, each step, and
every gateway's admission of the queue and the operator's list of all queues
(docs/security.md, "Values a team may stuff")."""

from __future__ import annotations

import pytest

from sluice.backends.redis.config import CONFIG_INTS, config_value, parse_config
from sluice.core.models import QueueConfig

pytestmark = pytest.mark.timeout(10)

# the last: a fullwidth 5, which int() takes
BAD_COUNTS = ["abc", "-1", "1e400", "1.5", " 5", "0x10", "99999999999999999", "", "\uff15"]
BAD_RATES = ["-1", "nan", "inf", "-inf", "abc", "1e10", "1" * 40, ""]


@pytest.mark.parametrize("field", [*CONFIG_INTS, "max_bytes"])
@pytest.mark.parametrize("value", BAD_COUNTS)
def test_a_count_config_lua_would_not_write_reads_as_unset(field: str, value: str) -> None:
    assert parse_config({field: value, "paused": "1"}) == QueueConfig(paused=True)


@pytest.mark.parametrize("value", BAD_RATES)
def test_a_rate_config_lua_would_not_write_reads_as_unset(value: str) -> None:
    assert parse_config({"rate_per_s": value, "max_in_flight": "3"}) == QueueConfig(max_in_flight=3)


def test_what_config_lua_writes_reads_as_written() -> None:
    written = {name: config_value(name, 7) for name in CONFIG_INTS}
    written |= {"max_bytes": config_value("max_bytes", 1 << 40),
                "rate_per_s": config_value("rate_per_s", 1e-05), "paused": config_value("paused", True)}
    got = parse_config({k.encode(): v.encode() for k, v in written.items()})  # as bytes, as Redis replies
    want = QueueConfig(**dict.fromkeys(CONFIG_INTS, 7), max_bytes=1 << 40, rate_per_s=1e-05, paused=True)
    assert got == want
