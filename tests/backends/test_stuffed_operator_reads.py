"""Session 39: the operator's on-demand reads (and a GET's hold check) of what a team's own Redis user
may write by hand, on a real redis-server as the operator's ACL user (``sluice.core.read_bounds``).

The listing read five fields of up to 1,000 jobs whole, the dead-letter list each dead job's error,
a redrive the dead job's payload, the timeline and depth routes their lists: 10 MB written into such
a field or list was copied out of the Redis every team shares at each read (a page of 1,000 such
jobs: 10 GB). Each is now read only within what Sluice writes there, and what was left unread is
said: named in the listing, in place of the error, or refused with a clear error.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from sluice.backends.redis import acl
from sluice.backends.redis.admin import GROUPS_LISTED_MOST, RedisAdmin
from sluice.backends.redis.depth import RedisDepthLog
from sluice.backends.redis.keys import QueueKeys
from sluice.core import read_bounds
from sluice.core.errors import InvalidInput
from tests.backends.acl_support import TEAM_AND_READERS, acl_server, admin_client, conn, team

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

K = QueueKeys("a")
BIG = "x" * 10_000_000


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from acl_server(tmp_path_factory.mktemp("redis-operator-reads"), TEAM_AND_READERS)


@pytest.fixture
def admin(server: str) -> Iterator[redis.Redis]:
    yield from admin_client(server)


@pytest.fixture
def operator(server: str) -> RedisAdmin:
    return RedisAdmin(conn(server, "sluice-operator"))


def job(r: redis.Redis, job_id: str, zset: str, score: float, **fields: str) -> None:
    """A job as push.lua and fail.lua leave it, in ``zset``."""
    r.hset(K.job(job_id), mapping={"p": '{"n":1}', "m": "5,3,30000,1000", "a": "1", "sz": "10", "v": "2",
                                   **fields})
    r.zadd(zset, {job_id: score})


def bytes_out(r: redis.Redis) -> int:
    """What Redis has written to its clients since the last CONFIG RESETSTAT (replies included)."""
    return int(r.info("stats")["total_net_output_bytes"])


def test_a_listing_page_leaves_each_stuffed_field_unread_and_names_it(
        admin: redis.Redis, operator: RedisAdmin, server: str) -> None:
    own = team(server)
    job(admin, "plain", K.ready, 0)
    for i, field in enumerate(("p", "m", "a", "err", "grp")):
        job(admin, f"s{i}", K.ready, 0)
        own.hset(K.job(f"s{i}"), field, BIG)
    admin.config_resetstat()
    page = operator.list_jobs("a", "ready", limit=1000)
    assert bytes_out(admin) < 100_000, "a stuffed field crossed the wire"
    found = {j.job_id: j for j in page.jobs}
    assert found["plain"].payload == {"n": 1} and found["plain"].unread == [] and found["plain"].priority == 5
    assert found["s0"].payload is None and found["s0"].unread == ["payload"] and found["s0"].priority == 5
    # meta unread: the job is listed by id alone, as one gone between the reads, and says why
    assert found["s1"].unread == ["meta"] and found["s1"].priority is None
    assert found["s2"].attempts is None and found["s2"].unread == ["attempts"]
    assert found["s2"].payload == {"n": 1}
    assert found["s3"].last_error is None and found["s3"].unread == ["last_error"]
    assert found["s4"].group is None and found["s4"].unread == ["group"]
    # fields.lua: each field's length, then one HGET per field present and within its bound (plain 3,
    # s0-s2 2 each, s3 and s4 3 each), in one call
    stats = admin.info("commandstats")
    assert stats["cmdstat_hstrlen"]["calls"] == 6 * 5 and stats["cmdstat_hget"]["calls"] == 15


def test_a_pages_payloads_are_read_within_its_budget_and_the_rest_named(admin: redis.Redis,
                                                                        operator: RedisAdmin) -> None:
    """Payloads of 3 MB each, within the one-job bound (8 MiB) but 16 MiB a page: the newest five are
    read (15 MB), the sixth and seventh named unread; a page of one reads the older one whole."""
    body = '"' + "y" * 3_000_000 + '"'
    for i in range(7):
        job(admin, f"j{i}", K.delayed, 10_000 - i, p=body)  # j0 newest: listed first
    admin.config_resetstat()
    page = operator.list_jobs("a", "delayed", limit=10)
    assert [j.job_id for j in page.jobs] == [f"j{i}" for i in range(7)]
    assert [j.unread for j in page.jobs] == [[]] * 5 + [["payload"]] * 2
    assert all(len(j.payload) == 3_000_000 for j in page.jobs[:5])
    assert bytes_out(admin) < read_bounds.PAGE_PAYLOAD_BUDGET + 100_000
    first = operator.list_jobs("a", "delayed", limit=5)
    alone = operator.list_jobs("a", "delayed", limit=1, cursor=first.next)
    (j5,) = alone.jobs
    assert j5.job_id == "j5" and j5.unread == [] and len(j5.payload) == 3_000_000


def test_the_dead_letters_say_an_error_was_not_read_and_parse_a_malformed_count(
        admin: redis.Redis, operator: RedisAdmin, server: str) -> None:
    job(admin, "d1", K.dead, 1, err="boom", a="3")
    job(admin, "d2", K.dead, 2, err="ok")
    own = team(server)
    own.hset(K.job("d2"), mapping={"err": BIG, "a": "abc"})
    admin.config_resetstat()
    dead = operator.dead_letters("a", 10)
    assert bytes_out(admin) < 10_000
    assert [(d.job_id, d.attempts) for d in dead] == [("d1", 3), ("d2", 0)]
    assert dead[0].last_error == "boom"
    assert dead[1].last_error == (f"[not read: {len(BIG)} bytes, longer than the 65536 Sluice writes; "
                                  "written by hand]")


@pytest.mark.parametrize(("field", "value", "says"), [
    ("p", BIG, r"payload \(10000000 bytes, at most 8388608\)"),
    ("tp", "0" * 100, r"traceparent \(100 bytes, at most 55\)"),
    ("m", "5,3,abc,1", r"stored meta '5,3,abc,1' is not what Sluice writes"),
    ("m", "5,3", r"stored meta '5,3' is not what Sluice writes"),
])
def test_a_dead_job_with_fields_longer_or_other_than_sluice_writes_is_refused_a_redrive_unread(
        admin: redis.Redis, operator: RedisAdmin, server: str, field: str, value: str, says: str) -> None:
    job(admin, "d1", K.dead, 1)
    team(server).hset(K.job("d1"), field, value)
    admin.config_resetstat()
    with pytest.raises(InvalidInput, match=says + r".*purge it"):
        operator.dead_spec("a", "d1")
    assert bytes_out(admin) < 10_000
    job(admin, "d2", K.dead, 2)
    assert operator.dead_spec("a", "d2").payload == {"n": 1}  # an ordinary dead job still reads


def test_a_depth_list_larger_than_sample_lua_writes_is_refused_unread(admin: redis.Redis,
                                                                       server: str) -> None:
    team(server).rpush(K.depth, "1000,1,0,0,0", BIG)
    admin.config_resetstat()
    with pytest.raises(InvalidInput, match=r"not read: queue a's depth samples holds \d+ bytes .*by hand"):
        RedisDepthLog(conn(server, "sluice-operator")).read("a")
    assert "cmdstat_lrange" not in admin.info("commandstats")
    admin.delete(K.depth)
    admin.rpush(K.depth, *[f"{i},1,0,0,0" for i in range(1000)])  # more than kept, each small: read
    RedisDepthLog(conn(server, "sluice-operator")).read("a")


def test_a_grouped_ready_listing_over_more_group_entries_than_it_reads_is_refused_unread(
        admin: redis.Redis, operator: RedisAdmin, server: str) -> None:
    """The grouped ready listing reads the groups hash's names (HKEYS) when a queue has more groups
    than one call takes. The team's user (or callers, one job per group) may make it any size: over
    ``GROUPS_LISTED_MOST`` entries it is refused by its length (HLEN), before any name is read."""
    own = team(server)
    for start in range(0, GROUPS_LISTED_MOST + 1, 50_000):
        end = min(start + 50_000, GROUPS_LISTED_MOST + 1)
        own.hset(K.groups, mapping={f"g{i}": "1" for i in range(start, end)})
    own.hset(K.groups, "#ready", "1")
    admin.config_resetstat()
    entries = GROUPS_LISTED_MOST + 2
    with pytest.raises(InvalidInput, match=rf"queue a's ready jobs are in {entries} group entries"):
        operator.list_jobs("a", "ready", limit=10)
    assert "cmdstat_hkeys" not in admin.info("commandstats")
    own.hdel(K.groups, *[f"g{i}" for i in range(1_000, GROUPS_LISTED_MOST + 1)])
    assert operator.list_jobs("a", "ready", limit=10).jobs == []  # a size it reads: read, as before
    assert admin.info("commandstats")["cmdstat_hkeys"]["calls"] >= 1


def test_a_gets_hold_check_reads_a_grp_only_as_long_as_a_group_name(admin: redis.Redis, server: str) -> None:
    """GET of a job the relay wrote no item for asks Redis whether it holds it (``holds``): a grouped
    job waits in its group's zset, found by its grp. A 10 MB grp was copied out at every GET."""
    from sluice.backends.redis.queue import RedisJobQueue

    gateway = RedisJobQueue(conn(server, "sluice-gateway"))
    job(admin, "g1", K.group("acme"), 1, grp="acme")
    assert gateway.holds("a", "g1")
    own = team(server)
    own.hset(K.job("g1"), "grp", BIG)
    admin.config_resetstat()
    assert not gateway.holds("a", "g1")  # not a group Sluice names: not read, so not found there
    assert bytes_out(admin) < 10_000
    older = [r for r in acl.rules("gateway") if r != "+hstrlen"]
    admin.execute_command("ACL", "SETUSER", "older-gateway", "reset", "on", ">pw-older-gateway", *older)
    own.hset(K.job("g1"), "grp", "acme")
    assert RedisJobQueue(conn(server, "older-gateway")).holds("a", "g1")  # reads it whole, as before


def test_a_dead_member_no_job_may_have_lists_as_a_job_with_nothing_read(
        admin: redis.Redis, operator: RedisAdmin, server: str) -> None:
    """A member the team's user ZADDs to its dead set names no job Sluice made (ids are at most 128
    characters): it lists with nothing asked of its hash, and the other dead jobs as before."""
    job(admin, "d1", K.dead, 1, err="boom")
    team(server).zadd(K.dead, {"x" * 200: 2, "bad id!": 3})
    dead = operator.dead_letters("a", 10)
    assert [(d.job_id[:5], d.attempts, d.last_error) for d in dead] == [
        ("d1", 1, "boom"), ("xxxxx", 0, None), ("bad i", 0, None)]
    page = operator.list_jobs("a", "dead", limit=10)
    assert [j.job_id[:5] for j in page.jobs] == ["bad i", "xxxxx", "d1"] and page.jobs[2].last_error == "boom"


def test_a_dead_job_whose_payload_is_no_json_is_refused_a_redrive(admin: redis.Redis, operator: RedisAdmin,
                                                                  server: str) -> None:
    job(admin, "d1", K.dead, 1)
    team(server).hset(K.job("d1"), "p", "{not json")
    with pytest.raises(InvalidInput, match=r"stored payload is not JSON .*purge it"):
        operator.dead_spec("a", "d1")
