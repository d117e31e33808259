"""The Lua sources and the error mapping, without a server."""

from __future__ import annotations

import re
from importlib import resources

import pytest
import redis

from sluice.backends.redis import checks
from sluice.backends.redis.scripts import parse_error, source, translate, used_parts
from sluice.core import models
from sluice.core.errors import (
    AlreadyFinished,
    BackendUnavailable,
    InvalidInput,
    JobNotFound,
    LeaseLost,
    SluiceError,
    StaleToken,
)

LUA = resources.files("sluice.backends.redis") / "lua"
SCRIPTS = sorted(p.name for p in LUA.iterdir() if p.name.endswith(".lua") and not p.name.startswith("_"))


def test_one_script_per_state_change() -> None:
    assert set(SCRIPTS) >= {f"{verb}.lua" for verb in (
        "enqueue", "push", "lease", "extend", "ack", "fail", "release", "cancel", "reap", "redrive",
        "purge", "stats", "config", "rate")}


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_script_opens_with_an_input_output_header(name: str) -> None:
    text = (LUA / name).read_text()
    header = text.split("\n\n")[0]
    assert header.startswith(f"-- {name}:")
    for section in ("-- Input", "-- Output", "KEYS[1]"):
        assert section in header, section


@pytest.mark.parametrize("name", SCRIPTS)
def test_scripts_take_every_key_through_keys(name: str) -> None:
    """No key name is spelled in Lua: they all come from KEYS (job keys from the KEYS prefix)."""
    code = "\n".join(line for line in source(name).splitlines() if not line.lstrip().startswith("--"))
    assert "sluice:" not in code
    assert "{" not in re.sub(r"\{[^{}]*\}", "", code.replace("{{", ""))  # only Lua table braces
    for call in re.findall(r"redis\.call\('(\w+)', ([^,)]+)(?:, ([^,)]+))?", code):
        command, first, second = call
        if command in ("TIME",):
            continue
        if command == "MEMORY":  # MEMORY USAGE <key>: the key comes second
            assert first == "'USAGE'", f"{name}: MEMORY {first}"
            first = second
        assert not first.startswith(("'", '"')), f"{name}: {command} on a literal key {first}"


@pytest.mark.parametrize("name", SCRIPTS)
def test_includes_are_pasted_and_render_is_stable(name: str) -> None:
    rendered = source(name)
    assert not re.search(r"^--@include", rendered, re.MULTILINE)
    own = (LUA / name).read_text()
    # _lib.lua pasted, cut down to what the script uses (test_an_include_keeps_only_what_the_script_uses)
    assert len(rendered) > len(own) or "--@include" not in own
    assert rendered == source(name)


def test_time_comes_from_redis() -> None:
    lib = (LUA / "_lib.lua").read_text()
    assert "redis.call('TIME')" in lib
    for name in SCRIPTS:
        assert "os.time" not in source(name) and "os.clock" not in source(name)


def test_lua_limits_match_the_models() -> None:
    lib = (LUA / "_lib.lua").read_text()
    consts = {m[0]: int(m[1]) for m in re.findall(r"^local (MAX_\w+|MIN_\w+) = (\d+)", lib, re.MULTILINE)}
    assert consts == {
        "MAX_PRIORITY": models.MAX_PRIORITY, "MAX_ATTEMPTS": models.MAX_ATTEMPTS,
        "MIN_LEASE_MS": models.MIN_LEASE_MS, "MAX_LEASE_MS": models.MAX_LEASE_MS,
        "MAX_DELAY_MS": models.MAX_DELAY_MS, "MAX_TOKEN": 2**53 - 1,
        "MAX_SKEW_MS": checks.RELAY_SKEW_MS,
        # A job's sz as the relay's, gateway's and operator's scripts read it (size_of): above any job
        # a Redis string holds (512 MB), and 1000 of them sum below 1e17 (Lua to Redis: "%.17g").
        "MAX_JOB_BYTES": 10**10 - 1,
    }
    assert consts["MAX_JOB_BYTES"] > 512 * 2**20 and 1000 * consts["MAX_JOB_BYTES"] < 10**17
    assert "local BAND = 17592186044416" in lib and 17592186044416 == 2**44
    unset = re.findall(r"^local DEFAULT_MAX_ATTEMPTS = (\d+)", lib, re.MULTILINE)
    assert unset == [str(models.DEFAULT_MAX_ATTEMPTS)]  # reclaim's ceiling for an unset max_attempts


def test_lua_job_overhead_matches_the_limits() -> None:
    from sluice.core.limits import JOB_OVERHEAD_BYTES

    lib = (LUA / "_lib.lua").read_text()
    assert re.findall(r"^local JOB_OVERHEAD = (\d+)$", lib, re.MULTILINE) == [str(JOB_OVERHEAD_BYTES)]
    assert "return #payload + #meta + 2 * #id + #prefix + JOB_OVERHEAD" in lib  # limits.job_bytes


def test_lua_reserved_prefix_matches_the_models() -> None:
    lib = (LUA / "_lib.lua").read_text()
    found = re.findall(r"^local RESERVED_PREFIX = '([^']*)'$", lib, re.MULTILINE)
    assert found == [models.RESERVED_QUEUE_PREFIX]


@pytest.mark.parametrize(("text", "cls", "details"), [
    ("STALE_TOKEN job=a mine=3 current=4", StaleToken, {"job": "a", "mine": 3, "current": 4}),
    ("LEASE_LOST job=a mine=9", LeaseLost, {"job": "a", "mine": 9}),
    ("NOT_FOUND job=x", JobNotFound, {"job": "x"}),
    ("ALREADY_FINISHED job=x", AlreadyFinished, {"job": "x"}),
    ("INVALID_INPUT meta of x", InvalidInput, {}),
    ("SOMETHING_NEW", SluiceError, {}),
])
def test_error_replies_map_to_typed_errors(text: str, cls: type[SluiceError],
                                           details: dict[str, object]) -> None:
    err = parse_error(text)
    assert type(err) is cls
    assert err.details == details
    if cls is StaleToken:
        assert isinstance(err, StaleToken) and (err.mine, err.current) == (3, 4)


@pytest.mark.parametrize("exc", [redis.exceptions.ConnectionError("refused"),
                                 redis.exceptions.TimeoutError("slow"),
                                 redis.exceptions.ResponseError("READONLY You can't write against a replica"),
                                 redis.exceptions.ResponseError("LOADING Redis is loading"),
                                 redis.exceptions.ResponseError("OOM command not allowed"),
                                 # what Redis 7 answers when a write inside a script meets maxmemory
                                 redis.exceptions.ResponseError(
                                     "Error running script (call to f_1d3a): @user_script:261: @user_script: "
                                     "261: -OOM command not allowed when used memory > 'maxmemory'."),
                                 redis.exceptions.BusyLoadingError("loading")])
def test_backend_trouble_is_unavailable(exc: redis.exceptions.RedisError) -> None:
    assert isinstance(translate(exc), BackendUnavailable)


def test_a_script_bug_is_a_plain_sluice_error() -> None:
    err = translate(redis.exceptions.ResponseError("ERR user_script:1: attempt to call a nil value"))
    assert type(err) is SluiceError


def test_lua_job_format_matches_the_formats_module() -> None:
    """The Redis job hash carries its format (issue 29): _lib.lua's JOB_FORMAT is formats.REDIS_JOB."""
    from sluice.core import formats

    lib = (LUA / "_lib.lua").read_text()
    assert re.findall(r"^local JOB_FORMAT = '(\d+)'$", lib, re.MULTILINE) == [str(formats.REDIS_JOB)]
    assert lib.count("'v', JOB_FORMAT") == 2  # both of create_jobs' HSETs
    assert formats.redis_job_format({"p": "1", "m": "0,3,1000,0"}) == 1
    assert formats.redis_job_format({"v": "2"}) == formats.REDIS_JOB


def test_an_include_keeps_only_what_the_script_uses() -> None:
    """Every call runs each top-level statement of its script again (a closure per helper): a
    script carries only the helpers it calls, directly or through another, and what they read
    (issue 30), in the file's order; a statement defining nothing (a comment) stays."""
    lib = "-- head\nlocal A = 1\nlocal B, C = 2, 3\nlocal function f() return A end\n" \
          "local function g() return f() + B end\nlocal function h() return C end\n"
    assert used_parts(lib, "return g()") == "-- head\nlocal A = 1\nlocal B, C = 2, 3\n" \
        "local function f() return A end\nlocal function g() return f() + B end\n"
    assert used_parts(lib, "return 1") == "-- head\n"


@pytest.mark.parametrize("name", SCRIPTS)
def test_each_script_defines_every_helper_it_calls(name: str) -> None:
    lib = (LUA / "_lib.lua").read_text(encoding="utf-8")
    helpers = set(re.findall(r"(?m)^local function (\w+)", lib))
    text = source(name)
    defined = set(re.findall(r"(?m)^local function (\w+)", text))
    assert {h for h in helpers if re.search(rf"\b{h}\s*\(", text)} <= defined
    if "--@include _lib.lua" in (LUA / name).read_text(encoding="utf-8"):
        assert "local function create_jobs" not in source("extend.lua")
        assert len(text) < len(lib) + len((LUA / name).read_text(encoding="utf-8"))


def test_a_push_hands_redis_its_numbers_as_strings() -> None:
    """redis.call formats a Lua number argument with %.17g, about as costly as a small command:
    per job pushed, create_jobs passes its size (each distinct one formatted once), its ready score
    and its run_at as strings it made with '%d' (issue 30)."""
    lib = (LUA / "_lib.lua").read_text(encoding="utf-8")
    body = lib[lib.index("local function create_jobs"):lib.index("local function enqueue_jobs")]
    assert "sizes[n] = sz" in body and "'sz', sz," in body
    assert "string.format('%d', ready_score(" in body and "string.format('%d', run_at)" in body
