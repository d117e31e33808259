"""One typed method per Lua script in ``lua/``; Redis errors become ``sluice.core.errors``.

Each ``.lua`` file is read once per process, when first used, and registered as a
redis-py ``Script`` (EVALSHA, with one SCRIPT LOAD on NOSCRIPT; a connection given a
``ScriptLoader``, a worker's, whose user may not SCRIPT LOAD, asks it instead and tries once
more: docs/security.md, "Who loads a worker's scripts"). A line
``--@include _lib.lua`` is replaced by that file's Lua source, so helpers are written
once. Arguments are passed through ARGV, never pasted into the source.

Scripts report failures as error replies ``CODE text k=v ...``; ``translate`` turns
them into the exception for ``CODE`` with the ``k=v`` pairs as details (so
``STALE_TOKEN mine=3 current=4`` becomes ``StaleToken(mine=3, current=4)``).
Nothing here retries: a script whose reply was lost may have run, and running it again
(an ack, a lease) is not harmless. Connection failures become ``BackendUnavailable``
and the caller decides.

Inputs are validated by the facades (``checks``) before they get here; the scripts
validate again before their first write.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, NamedTuple

import redis
from redis.commands.core import Script

from sluice.backends.redis.keys import QUEUES_KEY, REGISTRY_KEYS, REGISTRY_LOADED_KEY, QueueKeys
from sluice.core.errors import BackendUnavailable, NotPermitted, RedisTopologyError, SluiceError, from_code
from sluice.core.listing import RECENT_KEPT, cursor_score
from sluice.core.models import Extended, FinishedCounts, LeasedJob
from sluice.core.ports import ScriptLoader
from sluice.core.script_loads import parse_allow_list, sha1

_INCLUDE = re.compile(r"^--@include (\w+\.lua)$", re.MULTILINE)
# Server replies that mean "not now" rather than "wrong": safe to retry later.
_UNAVAILABLE = ("READONLY", "LOADING", "MASTERDOWN", "OOM", "BUSY", "TRYAGAIN", "CLUSTERDOWN")


@cache
def source(name: str) -> str:
    """The Lua source of ``name`` (e.g. "lease.lua") with its includes pasted in: of each, the
    top-level statements the script uses (``used_parts``)."""
    folder = resources.files("sluice.backends.redis") / "lua"
    text = (folder / name).read_text(encoding="utf-8")
    return _INCLUDE.sub(lambda m: used_parts((folder / m.group(1)).read_text(encoding="utf-8"), text), text)


_TOP_LOCAL = re.compile(r"(?m)^(?=local )")
_DEFINES = re.compile(r"local function (\w+)|local ([\w, ]+?)\s*=")
_WORD = re.compile(r"\w+")


def used_parts(lib: str, body: str) -> str:
    """``lib`` (an included file: a sequence of top-level ``local`` statements) cut down to the
    statements ``body`` uses, directly or through another kept one, in their order. Every call of a
    script runs each of its top-level statements again (a closure per helper): the whole _lib.lua
    cost each call about 4 µs, as much as a small script (issue 30). A name is found as a word
    anywhere (a comment too): a statement kept for nothing costs only that."""
    parts = _TOP_LOCAL.split(lib)
    names: list[set[str]] = []
    for part in parts:
        m = _DEFINES.match(part)
        names.append(set() if m is None else {m.group(1)} if m.group(1) else
                     {n.strip() for n in m.group(2).split(",")})
    keep = [not defined for defined in names]  # what defines nothing (comments) stays
    words = set(_WORD.findall(body))
    grew = True
    while grew:
        grew = False
        for i, part in enumerate(parts):
            if not keep[i] and names[i] & words:
                keep[i] = grew = True
                words |= set(_WORD.findall(part))
    return "".join(part for part, kept in zip(parts, keep, strict=True) if kept)


ALLOW_LIST = "worker_scripts.sha1"  # beside the Lua: every worker script text shipped (append-only)


@cache
def worker_allow_list() -> dict[str, str]:
    """sha1 -> name of every worker script text Sluice has shipped (``sluice.core.script_loads``)."""
    folder = resources.files("sluice.backends.redis") / "lua"
    return parse_allow_list((folder / ALLOW_LIST).read_text(encoding="utf-8"))


class RedisScriptLoader:
    """``ScriptLoader`` by SCRIPT LOAD on ``client`` (a Sluice function's user; on a cluster,
    redis-py sends it to every primary) of the texts not in the cache already.

    One SCRIPT EXISTS of every text's SHA-1 first (on a cluster every primary's, a script missing on
    one counts as missing): the internal function's ``load_scripts`` is a call any team's worker may
    repeat in a loop with the shipped texts (session 36), and SCRIPT LOAD has Redis hash each whole
    text again (about 70 KB for the seven, each call) where SCRIPT EXISTS reads seven SHA-1s. A user
    whose ACL lacks ``script|exists`` (one whose template change has not reached ElastiCache yet)
    loads every text, as before."""

    def __init__(self, client: redis.Redis[Any]) -> None:
        self.client = client

    def load(self, texts: Mapping[str, str]) -> None:
        for name, text in self.missing(texts).items():
            try:
                got = _word(self.client.execute_command("SCRIPT", "LOAD", text))
            except REDIS_ERRORS as exc:
                raise translate(exc) from exc
            if got != sha1(text):  # never expected: Redis names a script by its SHA-1
                raise SluiceError(f"redis loaded {name} as {got}, not {sha1(text)}")

    def missing(self, texts: Mapping[str, str]) -> dict[str, str]:
        """The texts (by name) not in Redis's script cache."""
        if not texts:
            return {}
        try:
            found = self.client.execute_command("SCRIPT", "EXISTS", *(sha1(t) for t in texts.values()))
        except redis.exceptions.NoPermissionError:
            return dict(texts)
        except REDIS_ERRORS as exc:
            raise translate(exc) from exc
        return {name: text for (name, text), there in zip(texts.items(), found, strict=True) if not there}


def _word(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def parse_error(text: str, **extra: Any) -> SluiceError:
    """``CODE text k=v ...`` -> the exception for CODE, with the k=v pairs as details."""
    code, _, rest = text.partition(" ")
    details: dict[str, Any] = {}
    for word in rest.split():
        key, eq, value = word.partition("=")
        if eq:
            details[key] = int(value) if value.lstrip("-").isdigit() else value
    details.update(extra)
    return from_code(code, f"{code}: {rest}" if rest else code, **details)


# redis-py's cluster client raises RedisClusterException, which is not a RedisError: catch both.
REDIS_ERRORS = (redis.exceptions.RedisError, redis.exceptions.RedisClusterException)

_TO_CLUSTER = "use redis+cluster:// (rediss+cluster:// with TLS) for a cluster"


def _topology(exc: Exception) -> SluiceError | None:
    """A Redis URL that does not match the server's mode, or keys that span slots: a
    ``RedisTopologyError`` naming it; None for anything else."""
    text = str(exc)
    if isinstance(exc, redis.exceptions.AskError):  # MovedError too: a plain client at a cluster
        return RedisTopologyError(f"Redis answered MOVED/ASK ({text}): the URL names one node of a "
                                  f"cluster; {_TO_CLUSTER}")
    if isinstance(exc, redis.exceptions.ClusterCrossSlotError) or "same slot" in text or "key slot" in text:
        return RedisTopologyError(f"keys of one call hash to different cluster slots ({text}); every key "
                                  "of a call must share its {queue} hash tag")
    if "cluster support disabled" in text or "Cluster mode is not enabled" in text:
        return RedisTopologyError(f"a redis+cluster:// URL names a Redis without cluster mode ({text}); "
                                  "use redis:// (rediss://) for a single node")
    if "slots are not covered" in text:
        return RedisTopologyError(f"the Redis cluster leaves hash slots unassigned ({text}); assign every "
                                  "slot, or check the configuration endpoint")
    return None


# How Redis says NOPERM: a command refused outright (redis-py's NoPermissionError), or a
# ``redis.call`` refused inside a script (6.2 words it as below; 7 and Valkey carry NOPERM).
_NOPERM_IN_SCRIPT = ("The user executing the script can't", "NOPERM")


def _denied(exc: Exception) -> SluiceError | None:
    """A NOPERM reply as ``NotPermitted`` (the ACL user may not touch those keys or run that
    command); None for anything else."""
    text = str(exc)
    if isinstance(exc, redis.exceptions.NoPermissionError) or (
            isinstance(exc, redis.exceptions.ResponseError) and any(m in text for m in _NOPERM_IN_SCRIPT)):
        return NotPermitted(f"redis refused this call for this function's Redis user (NOPERM: {text}); "
                            "its ACL covers only its own queues' keys and the commands its scripts run "
                            "(docs/security.md, Redis users)")
    return None


def translate(exc: Exception) -> SluiceError:
    """A redis-py error (``REDIS_ERRORS``) as the ``sluice.core.errors`` exception it means."""
    topology = _topology(exc)
    if topology is not None:
        return topology
    if isinstance(exc, redis.exceptions.RedisClusterException):
        return BackendUnavailable(f"redis cluster unavailable: {exc}")
    if isinstance(exc, redis.exceptions.AuthenticationError):
        return BackendUnavailable(f"redis refused the AUTH of this function's credentials (read again once): "
                                  f"{exc}")
    denied = _denied(exc)
    if denied is not None:
        return denied
    if isinstance(exc, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
        return BackendUnavailable(f"redis unavailable: {exc}")
    if isinstance(exc, redis.exceptions.NoScriptError):  # still, after a load: a failover meanwhile
        return BackendUnavailable(f"redis does not hold the script even after loading it (NOSCRIPT): {exc}")
    text = str(exc)
    if isinstance(exc, redis.exceptions.ResponseError):
        # redis-py strips a known error code off the text (CLUSTERDOWN, READONLY, TRYAGAIN...) and
        # keeps it as status_code: "CLUSTERDOWN Hash slot not served" reads "Hash slot not served".
        status = getattr(exc, "status_code", None)
        if status in _UNAVAILABLE:
            return BackendUnavailable(f"redis refused: {status} {text}")
        if text.startswith(_UNAVAILABLE) or "-OOM command not allowed" in text:  # the latter: in a script
            return BackendUnavailable(f"redis refused: {text}")
        return parse_error(text)
    return SluiceError(f"redis error: {text}")


class JobFields(NamedTuple):
    """A validated job as the enqueue and push scripts take it (5 ARGV entries)."""

    job_id: str
    payload: str  # JSON
    meta: str  # "<priority>,<max_attempts>,<lease_ms>,<enqueued_at_ms>", see lua/_lib.lua
    run_at_ms: int
    group: str = ""  # its fair group; "" = none (the default group)
    traceparent: str = ""  # its W3C traceparent (JobSpec.traceparent); "" = untraced


_RECORDS = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


PUSH_FIELDS = 8  # per record in push.lua's records argument


def push_argv(owner_token: int, flat: list[str], budget: int = 0, follow: int = -1) -> list[Any]:
    """push.lua's ARGV: the owner token, the record count, and the records as one JSON array of
    strings (offset, job_id, payload, meta, run_at_ms, redrive_gen, group, traceparent per record), then the
    deployment's byte budget per queue (0 = none) and the offset this call follows (-1: none; see
    push.lua). One argument rather than seven per record: redis-py packs each argument in Python,
    which was most of a push's client CPU. (Eight per record since traces: PUSH_FIELDS.)"""
    return [owner_token, len(flat) // PUSH_FIELDS, _RECORDS.encode(flat), budget, follow]


def push_keys(k: QueueKeys, topic: str, partition: int) -> list[str]:
    """push.lua's KEYS for ``topic``'s ``partition`` into queue ``k``."""
    return [k.relayed(topic, partition), k.job_prefix, k.ready, k.delayed, k.seq, k.wake, k.used, k.config,
            *k.group_keys, k.dead, k.leased, k.tokens, k.idle]


class StatsReply(NamedTuple):
    ready: int
    delayed: int
    leased: int
    dead: int
    oldest_ready_age_ms: int  # -1 when nothing is ready
    now_ms: int
    config: dict[str, str]
    idle: int = 0  # workers waiting for work (idle.lua)
    finished: FinishedCounts = FinishedCounts()  # cumulative endings (keys.finished)
    used_bytes: int = 0  # keys.used


class ThrottleReply(NamedTuple):
    allowed: bool
    retry_after_ms: int
    requests_left: int
    bytes_left: int


def _decimal(value: float) -> str:
    """A non-negative rate as throttle.lua reads it: digits, a point, digits (no exponent)."""
    text = f"{value:.6f}".rstrip("0").rstrip(".")
    return text or "0"


@dataclass(frozen=True, slots=True)
class PushResult:
    pushed: int
    skipped: int
    offset: int  # the partition's stored relayed offset after the push
    left: int = 0  # the last records not taken: their jobs did not fit the queue's byte budget
    paused: bool = False  # none taken: the queue's config says paused (left is all of them)

    @classmethod
    def of(cls, reply: Sequence[Any]) -> PushResult:
        return cls(pushed=int(reply[0]), skipped=int(reply[1]), offset=int(reply[2]), left=int(reply[3]),
                   paused=int(reply[4]) == 1)


class Scripts:
    """The Lua scripts bound to one redis client. Methods take already-validated input."""

    def __init__(self, client: redis.Redis[Any]) -> None:
        self.client = client
        self._scripts: dict[str, Script] = {}
        # None: SCRIPT LOAD after a NOSCRIPT (Sluice's users); else asked instead (a worker's).
        self.loader: ScriptLoader | None = None
        self.load_together: tuple[str, ...] = ()  # loaded with any one the loader is asked for

    def use_loader(self, loader: ScriptLoader, together: Sequence[str] = ()) -> None:
        """After a NOSCRIPT, ask ``loader`` for the script (and every one of ``together``: a Redis
        that lost one lost them all, so one call rather than one per script) and try once more."""
        self.loader, self.load_together = loader, tuple(together)

    def _load(self, name: str) -> None:
        """``name`` into Redis's script cache (a NOSCRIPT said it is not there)."""
        if self.loader is None:
            self.client.execute_command("SCRIPT", "LOAD", source(name))
        else:
            self.loader.load({n: source(n) for n in dict.fromkeys((name, *self.load_together))})

    def _script(self, name: str) -> Script:
        script = self._scripts.get(name)
        if script is None:
            script = self._scripts[name] = self.client.register_script(source(name))
        return script

    def _run(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        try:
            if self.loader is None:
                return self._script(name)(keys=keys, args=args)
            sha = self._script(name).sha  # type: ignore[attr-defined]  # redis-py has it; its stubs do not
            try:
                return self.client.execute_command("EVALSHA", sha, len(keys), *keys, *args)
            except redis.exceptions.NoScriptError:  # the call did not run: load, then once more
                self._load(name)
                return self.client.execute_command("EVALSHA", sha, len(keys), *keys, *args)
        except REDIS_ERRORS as exc:
            raise translate(exc) from exc

    def _pipelined(self, name: str, calls: Sequence[tuple[Sequence[str], Sequence[Any]]]) -> list[Any]:
        """Several calls of one script in one round trip (no MULTI: each call is atomic on its
        own); per call its reply, or its error translated. A NOSCRIPT reply (a restarted or
        failed-over Redis) means that call did not run: the script is loaded and those calls
        sent again. Raises, translated, when the round trip itself failed: then any call may
        have run."""
        if not calls:
            return []
        sha = self._script(name).sha  # type: ignore[attr-defined]  # redis-py has it; its stubs do not
        replies: list[Any] = [None] * len(calls)
        todo = list(range(len(calls)))
        for _ in range(2):
            pipe = self.client.pipeline(transaction=False)
            for i in todo:
                keys, args = calls[i]
                # As a raw command: redis-py's cluster pipeline blocks its evalsha() method, not EVALSHA.
                pipe.execute_command("EVALSHA", sha, len(keys), *keys, *args)  # type: ignore[no-untyped-call]
            try:
                for i, reply in zip(todo, pipe.execute(raise_on_error=False), strict=True):
                    replies[i] = reply
                todo = [i for i in todo if isinstance(replies[i], redis.exceptions.NoScriptError)]
                if todo:
                    self._load(name)
            except REDIS_ERRORS as exc:
                raise translate(exc) from exc
            if not todo:
                break
        return [translate(r) if isinstance(r, REDIS_ERRORS) else r for r in replies]

    # --- jobs -----------------------------------------------------------------------------

    def enqueue(self, k: QueueKeys, jobs: Sequence[JobFields], *, internal: bool = False) -> list[bool]:
        """``enqueue.lua`` (public queues only) or, ``internal``, ``enqueue_internal.lua``
        (reserved queues only): the same job layout and reply."""
        args: list[Any] = [len(jobs)]
        for job in jobs:
            args.extend(job)
        reply = self._run("enqueue_internal.lua" if internal else "enqueue.lua",
                          [k.job_prefix, k.ready, k.delayed, k.seq, k.used, *k.group_keys], args)
        return [bool(x) for x in reply]

    def lease(self, k: QueueKeys, n: int, lease_ms: int, reclaim_limit: int,
              policy_attempts: int | None = None) -> list[LeasedJob]:
        """``policy_attempts``: the queue's handler's retry policy's max_attempts (0: it has none),
        kept for the leases that lapse (lease.lua ARGV[4]); None tells nothing."""
        args: list[Any] = [n, lease_ms, reclaim_limit]
        if policy_attempts is not None:
            args.append(policy_attempts)
        reply = self._run("lease.lua", [k.job_prefix, k.ready, k.delayed, k.leased, k.dead, k.tokens, k.seq,
                                        k.config, k.settle, k.finished, k.used, *k.group_keys,
                                        k.turns_zset, k.waits], args)
        now, t0 = int(reply[0]), int(reply[1])
        queue = k.queue
        loads = json.loads
        jobs = []
        for k_th, i in enumerate(range(2, len(reply), 2), start=1):
            job_id, used, meta, *more = _word(reply[i]).split(" ")  # more: [gen[, group[, traceparent]]]
            priority, max_attempts, own_lease_ms, enqueued_at_ms = map(int, meta.split(","))
            ms = lease_ms or own_lease_ms
            jobs.append(LeasedJob(
                job_id=job_id, queue=queue, payload=loads(reply[i + 1]), lease_token=t0 + k_th,
                deadline_ms=now + ms, attempt=int(used) + 1, max_attempts=max_attempts,
                priority=priority, lease_ms=ms, enqueued_at_ms=enqueued_at_ms,
                redrive_gen=int(more[0]) if more else 0, group=more[1] or None if len(more) > 1 else None,
                traceparent=more[2] if len(more) > 2 else None))
        return jobs

    def extend(self, k: QueueKeys, job_id: str, token: int, lease_ms: int) -> Extended:
        reply = self._run("extend.lua", [k.job(job_id), k.leased, k.tokens], [job_id, token, lease_ms])
        return Extended(deadline_ms=int(reply[0]), cancel_requested=bool(reply[1]))

    def ack(self, k: QueueKeys, jobs: Sequence[tuple[str, int]]) -> list[SluiceError | None]:
        pairs = " ".join([f"{job_id} {token}" for job_id, token in jobs])
        reply = self._run("ack.lua", [k.job_prefix, k.leased, k.tokens, k.finished, k.used, *k.group_keys,
                                      k.recent], [pairs, RECENT_KEPT])
        out: list[SluiceError | None] = [None] * len(jobs)
        for i in range(1, len(reply), 2):
            out[int(reply[i]) - 1] = parse_error(_word(reply[i + 1]))
        return out

    def fail(self, k: QueueKeys, job_id: str, token: int, error: str, retry_after_ms: int,
             permanent: bool) -> str:
        return _word(self._run("fail.lua", [k.job(job_id), k.leased, k.ready, k.delayed, k.dead, k.tokens,
                                              k.seq, k.settle, k.finished, *k.group_keys, k.used],
                               [job_id, token, error, retry_after_ms, int(permanent)]))

    def release(self, k: QueueKeys, job_id: str, token: int) -> str:
        return _word(self._run("release.lua", [k.job(job_id), k.leased, k.ready, k.tokens, k.seq, k.settle,
                                                 k.finished, k.used, *k.group_keys],
                               [job_id, token]))

    def cancel(self, k: QueueKeys, job_id: str, settle: bool, cancelled: bool = False) -> str:
        return _word(self._run("cancel.lua", [k.job(job_id), k.ready, k.delayed, k.dead, k.tokens, k.settle,
                                                k.finished, k.used, *k.group_keys],
                               [job_id, int(settle), int(cancelled)]))

    def reap(self, k: QueueKeys, limit: int, timeline_ttl_ms: int = 0,
             timeline_cap: int = 64) -> tuple[int, int]:
        """``reap.lua``; ``timeline_ttl_ms`` > 0: each lapsed lease gets a step on its job's timeline."""
        reply = self._run("reap.lua", [k.job_prefix, k.ready, k.delayed, k.leased, k.dead, k.tokens, k.seq,
                                       k.settle, k.finished, k.used, *k.group_keys, k.config,
                                       k.timeline_prefix], [limit, timeline_ttl_ms, timeline_cap])
        return int(reply[0]), int(reply[1])

    def redrive(self, k: QueueKeys, job_id: str | None, limit: int, generation: int = 0) -> int:
        return int(self._run("redrive.lua", [k.job_prefix, k.dead, k.ready, k.seq, k.settle, *k.group_keys],
                             [job_id or "", limit, generation]))

    def settled(self, k: QueueKeys, entries: Sequence[tuple[str, int, bool]]) -> int:
        """(member, score, residue) per entry: residue, the job's dead job leaves the dead set too."""
        args: list[Any] = []
        for member, score, residue in entries:
            args += [member, score, int(residue)]
        return int(self._run("settled.lua", [k.settle, k.job_prefix, k.dead, k.used], args))

    def purge(self, k: QueueKeys, limit: int) -> int:
        return int(self._run("purge.lua", [k.job_prefix, k.dead, k.used], [limit]))

    def trim(self, k: QueueKeys, keep: int, max_age_ms: int, limit: int) -> tuple[int, int]:
        reply = self._run("trim.lua", [k.job_prefix, k.dead, k.settle, k.used], [keep, max_age_ms, limit])
        return int(reply[0]), int(reply[1])

    def register(self, queue: str, limit: int, mode: str) -> bool:
        """``register.lua`` (mode ``limit``, ``admitted`` or ``reserved``): True if ``queue`` was new."""
        return bool(self._run("register.lua", list(REGISTRY_KEYS), [queue, limit, mode]))

    def registry_load(self, names: Sequence[str], last: bool) -> int:
        """``registry_load.lua``: add ``names`` (at most 1000) to the registry's cache; ``last``
        marks it loaded. How many were new."""
        return int(self._run("registry_load.lua", [QUEUES_KEY, REGISTRY_LOADED_KEY],
                             ["1" if last else "0", *names]))

    def stats(self, k: QueueKeys) -> StatsReply:
        r = self._run("stats.lua",
                      [k.job_prefix, k.ready, k.delayed, k.leased, k.dead, k.config, k.idle, k.seq,
                       k.finished, k.used, k.groups], [])
        flat = [_word(x) for x in r[6]]
        succeeded, dead, cancelled = (int(x or 0) for x in r[8])
        return StatsReply(int(r[0]), int(r[1]), int(r[2]), int(r[3]), int(r[4]), int(r[5]),
                          dict(zip(flat[::2], flat[1::2], strict=True)), int(r[7]),
                          FinishedCounts(succeeded=succeeded, dead=dead, cancelled=cancelled), int(r[9]))

    def listing(self, k: QueueKeys, score: int | None, job_id: str, want: int, prefix: str,
                budget: int, which: str = "", groups: Sequence[str] = ()
                ) -> tuple[int, tuple[str, int] | None, list[tuple[str, int]]]:
        """``listing.lua``: ready and the fair groups' ready zsets merged newest first, after the
        cursor (``score``, ``job_id``; None: from the newest): (entries examined, the boundary where
        the budget ran out or None, the page's (id, score) newest first, at most ``want``). ``which``
        "" merges every group (read by the script); "few" the same when there are at most
        ``groups[0]`` of them, else (-1, None, []) and nothing read; "ready" ready and ``groups``;
        "groups" those only."""
        r = self._run("listing.lua", [k.ready, k.group_prefix, k.groups, k.turns_zset],
                      ["" if score is None else str(int(score)), job_id, want, prefix, budget,
                       *([which, *groups] if which else [])])
        if int(r[0]) < 0:
            return -1, None, []
        flat = [_word(x) for x in r[1:]]
        boundary = (flat[0], cursor_score(float(flat[1]))) if flat[0] else None
        rows = flat[2:]
        return int(r[0]), boundary, [(rows[i], cursor_score(float(rows[i + 1])))
                                     for i in range(0, len(rows), 2)]

    def fields(self, k: QueueKeys, fields: Sequence[str], bounds: Sequence[int], budget: int,
               job_ids: Sequence[str]) -> list[list[str | int | None]]:
        """``fields.lua``: per job, per field, its value when within its bound (and, for the first
        field, the ``budget`` left: 0 none), None when absent, or its length (an int) when not read.
        At most 1,000 ids a call."""
        r = self._run("fields.lua", [k.job_prefix], [len(fields), *fields, *bounds, budget, *job_ids])
        flat = [v if v is None or isinstance(v, int) else _word(v) for v in r]
        width = len(fields)
        return [flat[i * width:(i + 1) * width] for i in range(len(job_ids))]

    def sample(self, k: QueueKeys, counts: Sequence[int], cap: int, ttl_ms: int, gap_ms: int) -> bool:
        """``sample.lua``: one depth sample (ready, delayed, leased, dead) with the waits counted since
        the last; False when the last sample is younger than ``gap_ms`` (nothing written)."""
        return bool(self._run("sample.lua", [k.waits, k.depth], [*counts, cap, ttl_ms, gap_ms]))

    def timeline(self, k: QueueKeys, job_id: str, cap: int, ttl_ms: int, entries: Sequence[str]) -> int:
        """``timeline.lua``: append ``entries`` to the job's timeline, keep its last ``cap``, expire it
        ``ttl_ms`` after this append; the list's length after."""
        return int(self._run("timeline.lua", [k.timeline(job_id)], [cap, ttl_ms, *entries]))

    def idle(self, k: QueueKeys, worker_id: str, ms: int) -> int:
        """``idle.lua``: ``worker_id`` waits for work until now + ``ms`` (0: no longer); the
        number of waiting workers after the call."""
        return int(self._run("idle.lua", [k.idle], [worker_id, ms]))

    def config(self, k: QueueKeys, fields: Mapping[str, str]) -> int:
        args: list[str] = []
        for field, value in fields.items():
            args += [field, value]
        return int(self._run("config.lua", [k.config, *k.group_keys, k.job_prefix, k.leased], args))

    # --- relay --------------------------------------------------------------------------

    def push(self, k: QueueKeys, topic: str, partition: int, owner_token: int,
             records: Sequence[tuple[int, JobFields, int]], budget: int = 0) -> PushResult:
        """``records``: (offset, job, redrive generation or 0); ``budget``: the deployment's bytes per
        queue (0 = none), for a queue with no max_bytes of its own."""
        flat: list[str] = []
        for offset, job, gen in records:
            flat += (str(offset), job.job_id, job.payload, job.meta, str(job.run_at_ms), str(gen), job.group,
                     job.traceparent)
        return PushResult.of(self._run("push.lua", push_keys(k, topic, partition),
                                       push_argv(owner_token, flat, budget)))

    def push_many(self, calls: Sequence[tuple[QueueKeys, str, int, Sequence[Any]]]
                  ) -> list[PushResult | SluiceError]:
        """``push.lua`` once per (keys, topic, partition, ARGV) in one round trip; per call its
        result or the error that refused it (nothing of that call written)."""
        replies = self._pipelined("push.lua", [(push_keys(k, topic, partition), args)
                                               for k, topic, partition, args in calls])
        return [r if isinstance(r, SluiceError) else PushResult.of(r) for r in replies]

    def register_many(self, queues: Sequence[tuple[str, int, str]]) -> list[bool | SluiceError]:
        """``register.lua`` per (queue, limit, mode), in one round trip; per queue its reply or error."""
        replies = self._pipelined("register.lua", [(list(REGISTRY_KEYS), [q, limit, mode])
                                                   for q, limit, mode in queues])
        return [r if isinstance(r, SluiceError) else bool(r) for r in replies]

    def rate(self, k: QueueKeys, wanted: int) -> int:
        return int(self._run("rate.lua", [k.bucket, k.config], [wanted]))

    # --- the gateway's per-caller limits ----------------------------------------------------

    def throttle(self, bucket: str, rate_per_s: float, burst: int, bytes_per_s: int, byte_burst: int,
                 size: int) -> ThrottleReply:
        """``throttle.lua``: one request of ``size`` body bytes from the caller's buckets at ``bucket``
        (``keys.caller_bucket``), or nothing."""
        reply = self._run("throttle.lua", [bucket],
                          [_decimal(rate_per_s), burst, bytes_per_s, byte_burst, size])
        return ThrottleReply(bool(int(reply[0])), int(reply[1]), int(reply[2]), int(reply[3]))
