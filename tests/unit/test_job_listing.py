"""Issue 32, item 1: a queue's jobs listed by state through the operator API (GET
/v1/admin/queues/{queue}/jobs), newest first with a cursor, filtered by id prefix, and the payload
fields a typed queue marks sensitive redacted. The gateway over the fake queue; the Redis read is
tests/backends/test_lua_listing.py's."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field, SecretStr

from sluice.core import listing
from sluice.core.errors import InvalidInput
from sluice.core.ports import ParkedRecord
from sluice.core.routes import Route, RouteTable
from sluice_dev.fakes.relay import FakeParkingLot
from tests.unit.test_gateway_admin import OPERATOR_SESSION, WEB, Rig

JOBS = "/v1/admin/queues/emails/jobs"


def seeded(n: int = 30, routes: RouteTable | None = None) -> Rig:
    rig = Rig(routes=routes)
    rig.queue.seed("emails", "ready", 0)
    for i in range(n):
        rig.queue.add("emails", f"job-{i:03d}", {"to": f"u{i}@x", "card": {"number": "4111", "exp": "12/30"}},
                      priority=i % 3)
    return rig


def test_pages_of_ready_jobs_newest_first_follow_the_cursor_to_the_end() -> None:
    rig = seeded(30)
    seen: list[str] = []
    cursor = None
    for _ in range(10):
        query = {"state": "ready", "limit": "7", **({"cursor": cursor} if cursor else {})}
        code, _, doc = rig.call("GET", JOBS, query=query)
        assert code == 200 and doc["state"] == "ready" and len(doc["jobs"]) <= 7
        seen += [j["job_id"] for j in doc["jobs"]]
        cursor = doc["next"]
        if cursor is None:
            break
    assert sorted(seen) == [f"job-{i:03d}" for i in range(30)] and len(seen) == len(set(seen))
    # the reverse of the order workers take them: the lowest priority's newest job first
    assert seen[0] == "job-027" and seen[-1] == "job-002"
    assert rig.untouched()


def test_a_prefix_filters_and_each_state_lists_only_its_own_jobs() -> None:
    rig = seeded(30)
    rig.queue.seed("emails", "dead", 2)
    code, _, doc = rig.call("GET", JOBS, query={"state": "ready", "prefix": "job-01"})
    assert code == 200 and sorted(j["job_id"] for j in doc["jobs"]) == [f"job-01{i}" for i in range(10)]
    code, _, doc = rig.call("GET", JOBS, query={"state": "dead"})
    assert [j["state"] for j in doc["jobs"]] == ["dead", "dead"]
    assert all(j["job_id"].startswith("dead-") for j in doc["jobs"])


class Card(BaseModel):
    number: SecretStr
    exp: str


class Order(BaseModel):
    to: str
    card: Card


def test_fields_a_typed_queue_marks_sensitive_are_redacted_before_they_leave_the_api() -> None:
    routes = RouteTable([Route("emails", "fn-emails", "team", {"emails": Order.model_json_schema()}, 1)])
    rig = seeded(3, routes)
    code, _, doc = rig.call("GET", JOBS, query={"state": "ready"})
    assert code == 200
    for job in doc["jobs"]:
        assert job["payload"]["card"] == {"number": listing.REDACTED, "exp": "12/30"}
        assert job["redacted"] == ["card.number"] and job["payload"]["to"].startswith("u")
    assert "4111" not in str(doc)


def test_sensitive_paths_follow_refs_optionals_lists_and_the_explicit_mark() -> None:
    schema = {"properties": {"a": {"type": "string", "x-sluice-sensitive": True},
                             "b": {"anyOf": [{"$ref": "#/$defs/B"}, {"type": "null"}]},
                             "c": {"type": "array", "items": {"$ref": "#/$defs/B"}},
                             "loop": {"$ref": "#/$defs/Loop"}},
              "$defs": {"B": {"properties": {"pin": {"type": "string", "writeOnly": True}}},
                        "Loop": {"properties": {"next": {"$ref": "#/$defs/Loop"}}}}}
    paths = listing.sensitive_paths(schema)
    assert paths == [("a",), ("b", "pin"), ("c", "*", "pin")]
    payload = {"a": "x", "b": {"pin": "1"}, "c": [{"pin": "2"}, {"pin": "3"}], "d": 4}
    out, hit = listing.redact(payload, paths)
    assert out == {"a": "[redacted]", "b": {"pin": "[redacted]"},
                   "c": [{"pin": "[redacted]"}, {"pin": "[redacted]"}], "d": 4}
    assert hit == ["a", "b.pin", "c.*.pin"] and payload["a"] == "x"  # the input is left alone
    assert listing.redact({"b": None}, paths) == ({"b": None}, [])



class Plain(BaseModel):
    n: str


class Wallet(BaseModel):
    """Secrets where a schema walk that knew only properties, items and $defs missed them."""

    tokens: dict[str, SecretStr]  # additionalProperties
    cards: dict[str, Card]  # additionalProperties -> $ref
    pair: tuple[str, SecretStr]  # prefixItems
    spare: dict[str, SecretStr] | None = None  # anyOf -> additionalProperties
    whole: Annotated[Plain, Field(json_schema_extra={"x-sluice-sensitive": True})]  # a mark beside $ref


WALLET = {"tokens": {"a": "S1"}, "cards": {"x": {"number": "S2", "exp": "12/30"}}, "pair": ["k", "S3"],
          "spare": {"b": "S4"}, "whole": {"n": "S5"}}


def test_a_typed_queues_secrets_in_maps_tuples_and_marked_models_are_redacted() -> None:
    """Hostile-team review (session 35): a handler model holding SecretStr values in a dict or a
    tuple, or marking a whole sub-model, showed them to every operator in the listing."""
    paths = listing.sensitive_paths(Wallet.model_json_schema())
    assert paths == [("cards", "*", "number"), ("pair", "1"), ("spare", "*"), ("tokens", "*"), ("whole",)]
    out, hit = listing.redact(WALLET, paths)
    assert out == {"tokens": {"a": "[redacted]"}, "cards": {"x": {"number": "[redacted]", "exp": "12/30"}},
                   "pair": ["k", "[redacted]"], "spare": {"b": "[redacted]"}, "whole": "[redacted]"}
    assert hit == ["cards.*.number", "pair.1", "spare.*", "tokens.*", "whole"]
    routes = RouteTable([Route("emails", "fn-emails", "team", {"emails": Wallet.model_json_schema()}, 1)])
    rig = Rig(routes=routes)
    rig.queue.seed("emails", "ready", 0)
    rig.queue.add("emails", "job-1", WALLET)
    code, _, doc = rig.call("GET", JOBS, query={"state": "ready"})
    assert code == 200 and len(doc["jobs"]) == 1
    assert not any(f"S{i}" in str(doc) for i in range(1, 6)), doc


def test_a_hand_written_draft_07_schema_marks_through_definitions_and_pattern_properties() -> None:
    secret = {"$ref": "#/definitions/S"}
    schema = {"definitions": {"S": {"type": "string", "writeOnly": True}},
              "properties": {"pw": secret,
                             "env": {"type": "object", "patternProperties": {"^K": secret}},
                             "old": {"type": "array", "items": [{"type": "string"}, secret]},
                             "gone": {"$ref": "#/definitions/Nope", "x-sluice-sensitive": True}}}
    assert listing.sensitive_paths(schema) == [("env", "*"), ("gone",), ("old", "1"), ("pw",)]


def test_pointers_reach_map_members_and_list_items_by_index() -> None:
    """An operator's pointer: ``*`` over an object is every member, a number an item of a list (RFC
    6901); one past the end, or not an index (``01``), reaches nothing."""
    paths = listing.setting_paths(listing.check_sensitive(
        ["/cards/*/number", "/items/0/pin", "/items/7/pin", "/items/01/k"]))
    payload = {"cards": {"x": {"number": "S1"}, "y": {"number": "S2"}},
               "items": [{"pin": "S3", "k": 1}, {"pin": "p2", "k": 2}]}
    out, hit = listing.redact(payload, paths)
    assert out == {"cards": {"x": {"number": "[redacted]"}, "y": {"number": "[redacted]"}},
                   "items": [{"pin": "[redacted]", "k": 1}, {"pin": "p2", "k": 2}]}
    assert hit == ["cards.*.number", "items.0.pin"] and payload["items"][0]["pin"] == "S3"


HOSTILE = [
    ({"state": "running"}, "state"), ({"state": "ready|dead"}, "state"), ({"limit": "1001"}, "limit"),
    ({"limit": "0"}, "limit"), ({"limit": "99999999999999999999"}, "limit"), ({"limit": "-1"}, "limit"),
    ({"cursor": "nope"}, "cursor"), ({"cursor": "1~"}, "cursor"), ({"cursor": "1~a b"}, "cursor"),
    ({"cursor": "9" * 40 + "~a"}, "cursor"), ({"cursor": "1.5~a"}, "cursor"),
    ({"prefix": "*"}, "prefix"), ({"prefix": "job-*"}, "prefix"), ({"prefix": "a[0-9]"}, "prefix"),
    ({"prefix": "{emails}:x"}, "prefix"), ({"prefix": "x\r\nFLUSHALL"}, "prefix"),
    ({"prefix": "a" * 200}, "prefix"),
]


@pytest.mark.parametrize(("query", "name"), HOSTILE)
def test_hostile_queries_are_400_and_read_nothing(query: dict[str, str], name: str) -> None:
    rig = seeded(3)
    code, _, doc = rig.call("GET", JOBS, query=query)
    assert code == 400, doc
    assert name in str(doc.get("errors") or doc.get("detail")) and rig.untouched()


def test_a_non_operator_gets_403_and_a_cursor_past_the_end_an_empty_page() -> None:
    rig = seeded(3)
    code, _, doc = rig.call("GET", JOBS, caller=WEB)
    assert (code, doc["code"]) == (403, "NOT_OPERATOR")
    code, _, doc = rig.call("GET", JOBS, query={"cursor": "-5~zzz"}, caller=OPERATOR_SESSION)
    assert (code, doc["jobs"], doc["next"]) == (200, [], None)


@pytest.mark.parametrize("bad", [{"state": "x"}, {"limit": 0}, {"limit": True}, {"cursor": "1~"},
                                 {"prefix": "a*"}, {"cursor": 5}])
def test_the_core_checks_refuse_what_the_route_would(bad: dict[str, Any]) -> None:
    args: dict[str, Any] = {"state": "ready", "limit": 5, "cursor": None, "prefix": None, **bad}
    with pytest.raises(InvalidInput):
        listing.check_state(args["state"])
        listing.check_limit(args["limit"])
        listing.parse_cursor(args["cursor"])
        listing.check_prefix(args["prefix"])


def test_a_prefix_that_matches_nothing_stops_at_its_scan_budget_with_a_boundary() -> None:
    members = [f"job-{i:06d}" for i in range(25_000)]
    reads: list[int] = []

    def reader(start: int) -> listing.Read:  # the members after the boundary, as the adapter reads them
        def read(offset: int, count: int) -> list[str]:
            reads.append(count)
            return members[start + offset:start + offset + count]
        return read

    picked, boundary, examined = listing.paginate(reader(0), "zzz", 50)
    assert picked == [] and boundary is not None and listing.SCAN_MOST <= examined < listing.SCAN_MOST + 1000
    pages, found = 1, []
    while boundary is not None and not found:
        found, boundary, _ = listing.paginate(reader(members.index(boundary) + 1), "job-024999", 50)
        pages += 1
    assert found == ["job-024999"] and pages == 3 and max(reads) == 1000
    page, boundary, examined = listing.paginate(reader(0), None, 10)
    assert (page, boundary, examined) == (members[:10], members[9], 11)  # one more read: another page follows


# -- sensitive fields of any queue, by its setting (issue 32's closing review) -----------------------

SENSITIVE = "/v1/admin/queues/emails/sensitive"


def test_an_untyped_queues_setting_redacts_its_fields_in_the_listing() -> None:
    rig = seeded(3)  # no routes: an untyped queue
    code, _, doc = rig.call("PUT", SENSITIVE, {"fields": ["to", "/card/number", "/nope/x"]})
    assert code == 200, doc
    assert doc["sensitive"] == ["/to", "/card/number", "/nope/x"]
    code, _, doc = rig.call("GET", JOBS, query={"state": "ready"})
    assert code == 200 and len(doc["jobs"]) == 3
    for job in doc["jobs"]:
        card = {"number": listing.REDACTED, "exp": "12/30"}
        assert job["payload"] == {"to": listing.REDACTED, "card": card}
        assert job["redacted"] == ["card.number", "to"]
    assert "4111" not in str(doc) and "u0@x" not in str(doc)
    code, _, doc = rig.call("GET", "/v1/admin/queues/emails")
    assert doc["config"]["sensitive"] == ["/to", "/card/number", "/nope/x"]
    code, _, doc = rig.call("PUT", SENSITIVE, {"fields": []})  # marks none again
    assert code == 200 and "sensitive" not in doc  # none marked: left out, as for a queue never marked
    _, _, doc = rig.call("GET", JOBS, query={"state": "ready"})
    assert doc["jobs"][0]["payload"]["card"]["number"] == "4111" and doc["jobs"][0]["redacted"] == []


def test_a_typed_queues_schema_and_its_setting_both_redact() -> None:
    routes = RouteTable([Route("emails", "fn-emails", "team", {"emails": Order.model_json_schema()}, 1)])
    rig = seeded(2, routes)
    assert rig.call("PUT", SENSITIVE, {"fields": ["/card/exp"]})[0] == 200
    _, _, doc = rig.call("GET", JOBS, query={"state": "ready"})
    assert doc["jobs"][0]["payload"]["card"] == {"number": listing.REDACTED, "exp": listing.REDACTED}
    assert doc["jobs"][0]["redacted"] == ["card.exp", "card.number"]


def test_pointers_reach_list_items_escaped_names_and_the_whole_payload() -> None:
    stored = listing.check_sensitive(["/items/*/pin", "/a~1b", "x~y", ""])
    assert stored == ["/items/*/pin", "/a~1b", "/x~0y", ""]
    paths = listing.setting_paths(stored)
    payload = {"items": [{"pin": 1}, {"pin": 2, "k": 3}], "a/b": "s", "x~y": "t", "keep": 1}
    out, hit = listing.redact(payload, paths[:3])
    assert out == {"items": [{"pin": "[redacted]"}, {"pin": "[redacted]", "k": 3}], "a/b": "[redacted]",
                   "x~y": "[redacted]", "keep": 1}
    assert hit == ["items.*.pin", "a/b", "x~y"]
    assert listing.redact(payload, paths) == ("[redacted]", ["items.*.pin", "a/b", "x~y", "(payload)"])
    assert listing.redact(None, paths) == (None, [])  # a finished job carries no payload


HOSTILE_FIELDS: list[Any] = [
    "password", {"fields": "password"}, {"fields": [1]}, {"fields": [None]}, {"fields": [["a"]]},
    {"fields": ["a"] * 33}, {"fields": ["/" + "a" * 256]}, {"fields": ["/a/b/c/d/e/f/g/h/i/j/k/l/m"]},
    {"fields": ["/a~2b"]}, {"fields": ["/a~"]}, {"fields": ["a/b"]}, {"fields": ["/a//b"]}, {"fields": ["/"]},
    {"fields": ["/a\nb"]}, {"fields": ["\x00"]}, {"fields": ["a", "/a"]}, {"fields": ["a"], "extra": 1},
    {}, None, {"fields": {"a": 1}},
]


@pytest.mark.parametrize("body", HOSTILE_FIELDS)
def test_a_bad_sensitive_setting_is_400_and_writes_nothing(body: Any) -> None:
    rig = seeded(1)
    code, _, doc = rig.call("PUT", SENSITIVE, body)
    assert code == 400, doc
    assert rig.untouched() and rig.queue.get_config("emails").sensitive == ()


def test_a_non_operator_cannot_change_what_is_redacted() -> None:
    rig = seeded(1)
    code, _, doc = rig.call("PUT", SENSITIVE, {"fields": []}, caller=WEB)
    assert (code, doc["code"]) == (403, "NOT_OPERATOR") and rig.untouched()



def test_a_change_that_unmarks_a_field_is_logged_with_who_and_the_list_before(
        caplog: pytest.LogCaptureFixture) -> None:
    """Careless-operator review (session 35): `{"fields": []}`, or a list that drops a field, shows
    those values in clear from the next page on; the answer leaves `sensitive` out when none is
    marked, so before this nothing said which fields had been marked, or by whom."""
    rig = seeded(1)
    with caplog.at_level("INFO", logger="sluice.gateway.admin"):
        assert rig.call("PUT", SENSITIVE, {"fields": ["to", "/card/number"]})[0] == 200
        assert rig.call("PUT", SENSITIVE, {"fields": ["/card/number", "/card/exp"]})[0] == 200
        assert rig.call("PUT", SENSITIVE, {"fields": []})[0] == 200
    added, typo, cleared = [r for r in caplog.records if r.name == "sluice.gateway.admin"]
    assert (added.levelname, added.sensitive_before, added.sensitive) == ("INFO", [], ["/to", "/card/number"])
    assert (typo.levelname, typo.unmarked) == ("WARNING", ["/to"])
    assert (cleared.levelname, cleared.sensitive) == ("WARNING", [])
    assert cleared.unmarked == ["/card/number", "/card/exp"]
    assert cleared.principal == OPERATOR_SESSION and cleared.queue == "emails"
    assert OPERATOR_SESSION in cleared.getMessage() and "/card/exp" in cleared.getMessage()
    assert rig.call("PUT", SENSITIVE, {"fields": []}, caller=WEB)[0] == 403  # a refusal logs no change
    assert len([r for r in caplog.records if r.name == "sluice.gateway.admin"]) == 3


# -- state=parked: the relay's parking lot, through the operator API (issue 32's review) --------------


def with_lot(rig: Rig) -> FakeParkingLot:
    lot = FakeParkingLot()
    rig.gateway.http._parked = lambda: lot
    t = 1_800_000_000_000
    value = b'{"job_id":"%s","payload":{"to":"x@y","card":{"number":"4111"}},"priority":2,"group":"g1"}'
    for i in range(6):
        lot.park("emails", i % 2, [ParkedRecord(i % 2, 100 + i, b"k", value % f"held-{i}".encode(),
                                                f"held-{i}", t, 0)])
        lot.park("emails", 0, [ParkedRecord(0, 200 + i, b"k", value % f"late-{i}".encode(), f"late-{i}", t,
                                            t + 86_400_000 * (i + 1))], delay=True)
    lot.park("other", 0, [ParkedRecord(0, 1, None, b"{}", "not-mine", t, 0)])
    return lot


def test_parked_jobs_are_listed_with_their_lane_run_time_and_redacted_payload() -> None:
    rig = seeded(1)
    with_lot(rig)
    assert rig.call("PUT", SENSITIVE, {"fields": ["/card/number"]})[0] == 200
    seen, cursor = [], None
    for _ in range(10):
        code, _, doc = rig.call("GET", JOBS, query={"state": "parked", "limit": "4",
                                                    **({"cursor": cursor} if cursor else {})})
        assert code == 200 and doc["state"] == "parked", doc
        seen += doc["jobs"]
        cursor = doc["next"]
        if cursor is None:
            break
    assert [j["job_id"] for j in seen] == ["held-5", "held-3", "held-1", "held-4", "held-2", "held-0",
                                           *[f"late-{i}" for i in reversed(range(6))]]
    late = seen[6]
    shown = (late["parked"], late["at_ms"], late["priority"], late["group"])
    assert shown == ("delay", 1_800_518_400_000, 2, "g1")
    assert (seen[0]["parked"], seen[0]["at_ms"]) == ("held", None)
    assert all(j["payload"] == {"to": "x@y", "card": {"number": "[redacted]"}} for j in seen)
    assert "4111" not in str(seen)
    code, _, doc = rig.call("GET", JOBS, query={"state": "parked", "prefix": "late-1"})
    assert [j["job_id"] for j in doc["jobs"]] == ["late-1"]


def test_without_a_parking_lot_nothing_is_parked() -> None:
    rig = seeded(1)
    code, _, doc = rig.call("GET", JOBS, query={"state": "parked"})
    assert (code, doc["jobs"], doc["next"]) == (200, [], None)


@pytest.mark.parametrize(("state", "cursor"), [
    ("parked", "5~job-001"), ("ready", "o1-5~5"), ("parked", "o1-5"), ("parked", "x1-5~5"),
    ("parked", "o1-5-6-7~1"), ("parked", "d1-1000000000000000-1~1"), ("parked", "o1-a~1")])
def test_a_cursor_of_the_other_kind_or_no_place_is_400_and_reads_nothing(state: str, cursor: str) -> None:
    rig = seeded(1)
    lot = with_lot(rig)
    pages = lot.pages
    code, _, doc = rig.call("GET", JOBS, query={"state": state, "cursor": cursor})
    assert code == 400, doc
    assert "cursor" in str(doc.get("errors") or doc.get("detail")) and lot.pages == pages and rig.untouched()


# -- a page over many fair groups: several listing.lua calls merged (session 35) ---------------------


def _lua_model(zsets: list[list[tuple[str, int]]], cursor: tuple[str, int] | None, want: int, prefix: str,
               budget: int) -> listing.Part:
    """listing.lua's answer over ``zsets``, in Python: newest first after the cursor, ``want``
    matches at most, a boundary where ``budget`` entries were examined and more follow."""
    def key(r: tuple[str, int]) -> tuple[int, bytes]:
        return r[1], r[0].encode()
    rows = sorted((r for z in zsets for r in z if cursor is None or key(r) < key(cursor)), key=key,
                  reverse=True)
    out: list[tuple[str, int]] = []
    for n, row in enumerate(rows, 1):
        if row[0].startswith(prefix):
            out.append(row)
            if len(out) >= want:
                return n, None, out
        if n >= budget and n < len(rows):
            return n, row, out
    return len(rows), None, out


def _walk_pages(call: Any, limit: int) -> list[str]:
    seen: list[str] = []
    cursor = None
    for _ in range(10_000):
        _, boundary, rows = call(cursor, limit + 1)
        assert len(rows) <= limit + 1
        seen += [r[0] for r in rows[:limit]]
        cursor = rows[limit - 1] if len(rows) > limit else boundary
        if cursor is None:
            return seen
    raise AssertionError("the walk did not end")


@pytest.mark.parametrize("seed", range(12))
def test_pages_merged_from_calls_over_parts_of_the_groups_walk_as_one_call_does(seed: int) -> None:
    """``merge_parts``: a page over many groups is several listing.lua calls (``GROUPS_PER_CALL``
    groups each, so none blocks Redis for long); the walk they give is the walk one call over every
    zset gives, with ties on a score, a prefix and a small budget."""
    import random

    rnd = random.Random(seed)
    zsets = [[(f"{rnd.choice('ab')}{z}-{i}", rnd.randrange(40)) for i in range(rnd.randrange(12))]
             for z in range(rnd.randrange(1, 30))]
    split = rnd.randrange(1, 6)
    parts = [zsets[i:i + split] for i in range(0, len(zsets), split)]
    for prefix, budget, limit in (("", 1000, 5), ("a", 7, 3), ("b", 3, 1), ("", 4, 50)):
        def one(cursor: Any, want: int, prefix: str = prefix, budget: int = budget) -> listing.Part:
            return _lua_model(zsets, cursor, want, prefix, budget)

        def merged(cursor: Any, want: int, prefix: str = prefix, budget: int = budget) -> listing.Part:
            return listing.merge_parts([_lua_model(p, cursor, want, prefix, budget) for p in parts], want)

        expected = _walk_pages(one, limit)
        assert _walk_pages(merged, limit) == expected, (prefix, budget, limit)
        assert expected == [r[0] for r in sorted((r for z in zsets for r in z),
                                                 key=lambda r: (r[1], r[0].encode()), reverse=True)
                            if r[0].startswith(prefix)]
