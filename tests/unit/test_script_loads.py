"""A worker's Redis user may not SCRIPT LOAD (a team could stall the shared Redis with its own Lua):
the internal function loads its scripts, and only texts on the allow-list of shipped worker scripts
(``sluice.core.script_loads``, ``lua/worker_scripts.sha1``). Fakes only: the real Redis users are
tests/backends/test_redis_acl.py's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
import redis

from sluice.backends.aws.script_loader import LambdaScriptLoader
from sluice.backends.redis import acl
from sluice.backends.redis.scripts import Scripts, source, worker_allow_list
from sluice.core import script_loads as sl
from sluice.core.errors import InvalidInput, ScriptNotAllowed, SluiceError
from sluice.entry import gateway_internal
from sluice.entry.gateway import Gateway

WORKER_TEXTS = {name: source(name) for name in acl.WORKER.scripts}


class FakeLoader:
    def __init__(self) -> None:
        self.loads: list[dict[str, str]] = []

    def load(self, texts: Mapping[str, str]) -> None:
        self.loads.append(dict(texts))


def intake() -> tuple[sl.ScriptIntake, FakeLoader]:
    loader = FakeLoader()
    return sl.ScriptIntake(loader, worker_allow_list()), loader


# -- the allow-list -----------------------------------------------------------------------------

def test_every_current_worker_scripts_sha1_is_on_the_allow_list_under_its_name() -> None:
    """Editing a worker's Lua (or _lib.lua) changes its text: append its new SHA-1 to the file
    (never remove a line: a team on an older layer still loads its own)."""
    allowed = worker_allow_list()
    missing = [f"{sl.sha1(text)} {name}" for name, text in WORKER_TEXTS.items()
               if allowed.get(sl.sha1(text)) != name]
    assert not missing, "append to sluice/backends/redis/lua/worker_scripts.sha1:\n" + "\n".join(missing)


def test_the_allow_list_holds_worker_scripts_only() -> None:
    assert set(worker_allow_list().values()) == set(acl.WORKER.scripts)  # never push.lua, reap.lua...


@pytest.mark.parametrize("text", ["abc lease.lua", f"{'a' * 40} lease.lua extra", f"{'A' * 40} lease.lua",
                                  f"{'a' * 40} ../x.lua", f"{'a' * 40}"])
def test_a_malformed_allow_list_line_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="line 2"):
        sl.parse_allow_list("# header\n" + text)


def test_a_sha_listed_twice_is_refused_and_comments_and_blanks_are_skipped() -> None:
    line = f"{'a' * 40} lease.lua"
    assert sl.parse_allow_list(f"# c\n\n{line}\n") == {"a" * 40: "lease.lua"}
    with pytest.raises(ValueError, match="twice"):
        sl.parse_allow_list(f"{line}\n{'a' * 40} ack.lua")


# -- the internal call's check ------------------------------------------------------------------

def test_shipped_worker_scripts_are_loaded_as_given() -> None:
    take, loader = intake()
    assert take(sl.request(WORKER_TEXTS)) == sorted(WORKER_TEXTS)
    assert loader.loads == [WORKER_TEXTS]


HOSTILE: dict[str, tuple[Any, type[SluiceError], str]] = {
    "endless lua under a worker name": ({"lease.lua": "while true do end"}, ScriptNotAllowed,
                                        "deploy Sluice's stack first"),
    "a shipped text under another name": ({"ack.lua": WORKER_TEXTS["lease.lua"]}, ScriptNotAllowed,
                                          "not a worker script Sluice has shipped"),
    "a shipped text with one byte more": ({"ack.lua": WORKER_TEXTS["ack.lua"] + " "}, ScriptNotAllowed,
                                          "ack"),
    "a lone surrogate": ({"ack.lua": "\ud800"}, ScriptNotAllowed, "sha1 None"),
    "a relay script's name": ({"push.lua": source("push.lua")}, InvalidInput, "not a worker script's name"),
    "a path as a name": ({"../lease.lua": WORKER_TEXTS["lease.lua"]}, InvalidInput, "not a worker script"),
    "a name not a string": ({1: WORKER_TEXTS["lease.lua"]}, InvalidInput, "not a worker script's name"),
    "a text not a string": ({"lease.lua": ["while true do end"]}, InvalidInput, "not a string"),
    "a text of bytes": ({"lease.lua": b"x"}, InvalidInput, "not a string"),
    "a null text": ({"lease.lua": None}, InvalidInput, "not a string"),
    "too large": ({"lease.lua": "-" * (sl.MAX_SCRIPT_BYTES + 1)}, InvalidInput, "over"),
    "too many": ({f"s{i}.lua": "x" for i in range(sl.MAX_SCRIPTS + 1)}, InvalidInput, "at most"),
    "none": ({}, InvalidInput, "needs 'scripts'"),
    "not an object": ([["lease.lua", "x"]], InvalidInput, "needs 'scripts'"),
    "a string": ("while true do end", InvalidInput, "needs 'scripts'"),
}


@pytest.mark.parametrize("label", sorted(HOSTILE))
def test_a_hostile_load_call_is_refused_and_nothing_is_loaded(label: str) -> None:
    scripts, error, words = HOSTILE[label]
    take, loader = intake()
    # one good text first: a bad one anywhere in the call loads none of it
    event = {**sl.request({}), "scripts": {"idle.lua": WORKER_TEXTS["idle.lua"], **scripts}
             if isinstance(scripts, dict) and scripts else scripts}
    with pytest.raises(error, match=words):
        take(event)
    assert loader.loads == []


def test_a_call_with_other_keys_or_no_scripts_is_refused() -> None:
    take, loader = intake()
    with pytest.raises(InvalidInput, match="only 'scripts'"):
        take({**sl.request(WORKER_TEXTS), "eval": "while true do end"})
    with pytest.raises(InvalidInput, match="needs 'scripts'"):
        take({"sluice_internal": "load_scripts"})
    assert loader.loads == []


# -- the internal function's answers ------------------------------------------------------------

def no_api() -> Any:
    raise AssertionError("a script load builds no Api")


def test_the_internal_function_answers_a_load_and_its_refusals() -> None:
    take, loader = intake()
    gateway = Gateway(no_api, serves=frozenset({"internal"}), scripts=lambda: take)
    ok = gateway(sl.request({"ack.lua": WORKER_TEXTS["ack.lua"]}), None)
    assert ok == {"statusCode": 200, "loaded": ["ack.lua"]}
    refused = gateway(sl.request({"ack.lua": "while true do end"}), None)
    assert refused["statusCode"] == 403 and refused["error"]["code"] == "SCRIPT_NOT_ALLOWED"
    assert "deploy Sluice's stack first" in refused["error"]["message"]
    bad = gateway(sl.request({"ack.lua": 7}), None)  # type: ignore[dict-item]
    assert bad["statusCode"] == 400 and bad["error"]["code"] == "INVALID_INPUT"
    assert loader.loads == [{"ack.lua": WORKER_TEXTS["ack.lua"]}]


def test_a_gateway_given_no_intake_loads_nothing() -> None:
    answer = gateway_internal.handle(no_api, sl.request({"ack.lua": WORKER_TEXTS["ack.lua"]}))
    assert answer["statusCode"] == 500 and answer["error"]["code"] == "CONFIG_ERROR"


def test_the_workers_loader_sends_the_call_and_raises_the_refusal_as_its_error() -> None:
    sent: list[dict[str, Any]] = []

    def invoke(event: dict[str, Any]) -> dict[str, Any]:
        sent.append(event)
        take, _ = intake()
        return gateway_internal.handle(no_api, event, lambda: take)

    loader = LambdaScriptLoader(invoke)
    loader.load({"ack.lua": WORKER_TEXTS["ack.lua"]})
    with pytest.raises(ScriptNotAllowed, match="deploy Sluice's stack first"):
        loader.load({"ack.lua": "while true do end"})
    assert sent[0] == {"sluice_internal": "load_scripts", "scripts": {"ack.lua": WORKER_TEXTS["ack.lua"]}}


# -- the scripts runner: NOSCRIPT asks the loader, then runs once more --------------------------

class _Sha:
    def __init__(self, text: str) -> None:
        self.sha = sl.sha1(text)


class NoScriptLoadRedis:
    """Redis with a worker's rights: EVALSHA of a cached script; SCRIPT LOAD refused."""

    def __init__(self) -> None:
        self.cached: set[str] = set()
        self.evalshas = 0

    def register_script(self, text: str) -> _Sha:
        return _Sha(text)

    def execute_command(self, *args: Any) -> Any:
        if args[0] == "EVALSHA":
            self.evalshas += 1
            if args[1] not in self.cached:
                raise redis.exceptions.NoScriptError("No matching script. Please use EVAL.")
            return 3
        raise redis.exceptions.NoPermissionError("no permissions to run the 'script|load' command")

    def pipeline(self, transaction: bool) -> _Pipe:
        return _Pipe(self)


class _Pipe:
    def __init__(self, client: NoScriptLoadRedis) -> None:
        self.client, self.calls = client, []  # type: ignore[var-annotated]

    def execute_command(self, *args: Any) -> None:
        self.calls.append(args)

    def execute(self, raise_on_error: bool) -> list[Any]:
        out: list[Any] = []
        for args in self.calls:
            try:
                out.append(self.client.execute_command(*args))
            except redis.exceptions.RedisError as exc:
                out.append(exc)
        return out


class CachingLoader(FakeLoader):
    def __init__(self, client: NoScriptLoadRedis) -> None:
        super().__init__()
        self.client = client

    def load(self, texts: Mapping[str, str]) -> None:
        super().load(texts)
        self.client.cached |= {sl.sha1(t) for t in texts.values()}


def test_a_noscript_asks_the_loader_for_every_worker_script_once_then_runs_again() -> None:
    client = NoScriptLoadRedis()
    scripts = Scripts(client)  # type: ignore[arg-type]
    loader = CachingLoader(client)
    scripts.use_loader(loader, acl.WORKER.scripts)
    assert scripts._run("idle.lua", ["k"], ["w", 0]) == 3
    assert [sorted(x) for x in loader.loads] == [sorted(acl.WORKER.scripts)]
    assert next(iter(loader.loads[0])) == "idle.lua" and loader.loads[0] == WORKER_TEXTS
    assert scripts._run("ack.lua", ["k"], []) == 3 and len(loader.loads) == 1  # all were loaded at once
    assert client.evalshas == 3


def test_a_loader_that_loads_nothing_gets_one_retry_then_the_error() -> None:
    client = NoScriptLoadRedis()
    scripts = Scripts(client)  # type: ignore[arg-type]
    loader = FakeLoader()
    scripts.use_loader(loader)
    with pytest.raises(SluiceError, match="NOSCRIPT"):
        scripts._run("idle.lua", ["k"], ["w", 0])
    assert client.evalshas == 2 and loader.loads == [{"idle.lua": WORKER_TEXTS["idle.lua"]}]


def test_a_pipelined_noscript_asks_the_loader_and_sends_those_calls_again() -> None:
    client = NoScriptLoadRedis()
    scripts = Scripts(client)  # type: ignore[arg-type]
    loader = CachingLoader(client)
    scripts.use_loader(loader, acl.WORKER.scripts)
    assert scripts._pipelined("ack.lua", [(["k"], []), (["k"], [])]) == [3, 3]
    assert len(loader.loads) == 1 and client.evalshas == 4


# -- the composition root -------------------------------------------------------------------------

def test_the_workers_root_gives_its_connection_the_internal_functions_loader_and_others_none() -> None:
    from sluice.core.config import Settings
    from sluice.entry import root as wiring

    url = "redis://127.0.0.1:1/0"  # never connected: building a client opens no socket
    wiring.reset()
    try:
        worker = Settings(redis_url=url, internal_function_name="sluice-internal", aws_region="us-east-1")
        wiring.worker_queue(worker)
        scripts = wiring.redis(worker).scripts
        assert isinstance(scripts.loader, LambdaScriptLoader)
        assert scripts.load_together == acl.WORKER.scripts
        gateway = Settings(redis_url=url, aws_region="us-east-1")  # the gateway's queue: loads itself
        wiring.queue(gateway)
        assert wiring.redis(gateway).scripts.loader is None
        alone = Settings(redis_url=url, aws_region="eu-west-1")  # a worker with no internal function
        wiring.worker_queue(alone)
        assert wiring.redis(alone).scripts.loader is None
    finally:
        wiring.reset()
