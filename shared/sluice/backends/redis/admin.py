"""The operator's view of Redis: a queue's stats, the registry of queues, the dead letters
(list, redrive, purge) and the memory in use; for the gateway's admin calls, its admission
view and the CLI."""

from __future__ import annotations

import json
from typing import Any

import redis

from sluice.backends.redis.checks import MAX_BATCH, MAX_TOKEN, checked_int, text
from sluice.backends.redis.client import is_cluster
from sluice.backends.redis.config import parse_config
from sluice.backends.redis.connection import RedisConnection
from sluice.backends.redis.keys import QUEUES_KEY, REGISTRY_RESERVED_KEY, QueueKeys
from sluice.backends.redis.scripts import REDIS_ERRORS, translate
from sluice.core import read_bounds
from sluice.core.errors import InvalidInput, JobNotFound
from sluice.core.listing import (
    DEFAULT_PAGE,
    GROUPED_SCAN_MOST,
    GROUPS_PER_CALL,
    Cursor,
    JobPage,
    ListedJob,
    after,
    check_limit,
    check_prefix,
    check_state,
    cursor_score,
    encode_cursor,
    merge_parts,
    paginate,
    parse_cursor,
)
from sluice.core.models import (
    GROUP_RE,
    JOB_ID_RE,
    QUEUE_NAME_RE,
    DeadJob,
    JobSpec,
    QueueStats,
    validate_job_id,
)

# The groups hash's entries a grouped ready listing reads (HKEYS) at most: a queue's groups come
# from its callers' jobs and from its team's own Redis user. 200,000 fields (100,000 groups taking
# turns with leases: two fields each) are 2.5 MB and 48-112 ms of Redis's time in one HKEYS, and a
# page over them already takes seconds (100,000 groups: 2.9-4.1 s); a larger hash, read whole,
# would block every queue longer.
GROUPS_LISTED_MOST = 200_000
_FIELDS = ("p", "m", "a", "err", "grp")  # a listed job's hash fields (``_listed``)
# One job's fields as fields.lua answers them: a field's value, None when absent, or its length (an
# int) when present and left unread (longer than its read bound, or past the page's payload budget).
Row = list[str | int | None]
# Job ids one fields.lua call reads: a script blocks Redis while it runs, 6.3 ms for 1,000 jobs of
# five fields, so a page of 1,000 is four calls of about 1.6 ms.
_FIELDS_PER_CALL = 250
_SPEC_FIELDS = ("p", "m", "grp", "tp")  # a dead job's, for its redrive (``dead_spec``)


class RedisAdmin:
    """Reads about queues, and the dead-letter operations, over a shared connection."""

    def __init__(self, conn: RedisConnection) -> None:
        self.conn = conn

    # --- queues -----------------------------------------------------------------------------

    def stats(self, queue: str) -> QueueStats:
        k = self.conn.keys(queue)
        r = self.conn.scripts.stats(k)
        return QueueStats(queue=queue, ready=r.ready, delayed=r.delayed, leased=r.leased, dead=r.dead,
                          oldest_ready_age_ms=None if r.oldest_ready_age_ms < 0 else r.oldest_ready_age_ms,
                          config=parse_config(r.config), idle_workers=r.idle, finished=r.finished,
                          used_bytes=r.used_bytes)

    def overdue_leases(self, queue: str) -> int:
        """Leases past their deadline that nobody has reaped yet (a crashed or frozen worker), by
        Redis's clock; a read, for ``sluice top``."""
        client = self.conn.client
        try:
            seconds, micros = client.time()
            now_ms = int(seconds) * 1000 + int(micros) // 1000
            return int(client.zcount(self.conn.keys(queue).leased, 0, now_ms))
        except redis.exceptions.RedisError as exc:
            raise translate(exc) from exc

    def queues(self) -> list[str]:
        """Every queue ever enqueued to or configured (the advisory registry)."""
        try:
            names = self.conn.client.smembers(QUEUES_KEY)
        except REDIS_ERRORS as exc:
            raise translate(exc) from exc
        return sorted(n for n in map(text, names) if QUEUE_NAME_RE.fullmatch(n))

    def registry(self, queue: str) -> tuple[bool, int]:
        """(``queue`` is registered, how many public names are: reserved ones do not count toward
        the limit): the gateway's view of the limit (the reservation, register.lua, decides)."""
        try:
            pipe = self.conn.client.pipeline(transaction=False)
            pipe.sismember(QUEUES_KEY, self.conn.keys(queue).queue)
            pipe.scard(QUEUES_KEY)
            pipe.scard(REGISTRY_RESERVED_KEY)
            member, size, reserved = pipe.execute()
        except REDIS_ERRORS as exc:
            raise translate(exc) from exc
        return bool(member), int(size) - int(reserved)

    def memory_percent(self) -> float | None:
        """used_memory as a percentage of maxmemory (None when Redis has no maxmemory); on a
        cluster, the fullest primary's (one shard full refuses its queues' pushes)."""
        client = self.conn.client
        try:
            if is_cluster(client):
                primaries = redis.cluster.RedisCluster.PRIMARIES
                infos = list(client.info("memory", target_nodes=primaries).values())
            else:
                infos = [client.info("memory")]
        except REDIS_ERRORS as exc:
            raise translate(exc) from exc
        shares = [100.0 * int(i.get("used_memory", 0)) / int(i["maxmemory"])
                  for i in infos if int(i.get("maxmemory", 0) or 0) > 0]
        return max(shares) if shares else None

    # --- listing (issue 32) --------------------------------------------------------------------

    def list_jobs(self, queue: str, state: str, limit: int = DEFAULT_PAGE, cursor: str | None = None,
                  prefix: str | None = None) -> JobPage:
        """One page of ``queue``'s jobs in ``state``, newest first (``sluice.core.listing``): ZRANGE
        BYSCORE REV of members from the cursor's score down (past the cursor's own score-mates up
        to it), then one pipeline: ZSCORE of the page and its boundary; then the page's fields within
        their read bounds (``_job_fields``: fields.lua).
        Reads only. ``ready`` takes in the fair groups' ready zsets too, when the
        queue has groups (``_grouped``); ``parked`` is not Redis's (the gateway's ``ParkedJobs``)."""
        state, limit = check_state(state), check_limit(limit)
        start, prefix = parse_cursor(cursor), check_prefix(prefix)
        k = self.conn.keys(queue)
        if state == "parked":
            raise InvalidInput("parked jobs wait in the relay's parking lot, not in Redis: list them "
                               "through the operator API (GET /v1/admin/queues/{queue}/jobs?state=parked)")
        if state == "ready" and self._grouped_ready(k):
            return self._grouped(queue, k, limit, start, prefix)
        key = {"ready": k.ready, "delayed": k.delayed, "leased": k.leased, "dead": k.dead,
               "finished": k.recent}[state]
        top: Any = "+inf" if start is None else start.score
        bottom: Any = "-inf"
        client = self.conn.client
        try:
            skip = 0
            if start is not None:  # members share scores: skip the cursor's score-mates up to it
                mates = client.zrange(key, top, top, desc=True, byscore=True)
                skip = sum(1 for m in mates if not after(start, start.score, text(m)))

            def read(offset: int, count: int) -> list[str]:
                rows = client.zrange(key, top, bottom, desc=True, byscore=True, offset=skip + offset,
                                     num=count)
                return [text(m) for m in rows]

            picked, boundary, examined = paginate(read, prefix, limit)
            shown = [*picked, *([boundary] if boundary is not None else [])]
            pipe = client.pipeline(transaction=False)
            for job_id in shown:
                pipe.zscore(key, job_id)
            scores = pipe.execute() if shown else []
        except REDIS_ERRORS as exc:
            raise translate(exc) from exc
        rows = self._job_fields(k, picked) if state != "finished" else [None] * len(picked)
        jobs = [_listed(job_id, state, scores[i], rows[i]) for i, job_id in enumerate(picked)]
        following = None
        if boundary is not None:
            # The boundary left between the two reads (acked, leased): go on from the page's last
            # job instead, or from the same cursor (a page that found none re-reads its span).
            known = [(m, sc) for m, sc in zip(shown, scores, strict=True) if sc is not None]
            if scores[-1] is not None:
                following = encode_cursor(cursor_score(scores[-1]), boundary)
            elif known:
                following = encode_cursor(cursor_score(known[-1][1]), known[-1][0])
            else:
                following = cursor
        return JobPage(queue=queue, state=state, jobs=jobs, next=following, scanned=examined)

    def _grouped_ready(self, k: QueueKeys) -> bool:
        """Whether some fair group has ready jobs (``#ready`` in the groups hash counts them: _lib.lua)."""
        try:
            (count,) = self.conn.client.hmget(k.groups, "#ready")
        except REDIS_ERRORS as exc:
            raise translate(exc) from exc
        return int(count or 0) > 0

    def _group_names(self, k: QueueKeys) -> list[str]:
        """The groups that may hold ready jobs, as listing.lua reads them when it reads them itself:
        the groups hash's fields (``>group`` taking turns, ``group`` with leases; not ``#`` counters)
        and the old layout's turns zset; each once, only names a group may have."""
        try:
            size = int(self.conn.client.hlen(k.groups))
            if size > GROUPS_LISTED_MOST:  # read whole, it would block Redis for every queue
                raise InvalidInput(f"queue {k.queue}'s ready jobs are in {size} group entries, more than a "
                                   f"listing reads ({GROUPS_LISTED_MOST}); list another state, or page "
                                   "with a prefix after its groups drain")
            pipe = self.conn.client.pipeline(transaction=False)
            pipe.hkeys(k.groups)
            pipe.zrange(k.turns_zset, 0, -1)
            fields, old = pipe.execute()
        except REDIS_ERRORS as exc:
            raise translate(exc) from exc
        found = (f[1:] if f.startswith(">") else f for f in map(text, fields) if not f.startswith("#"))
        return [g for g in dict.fromkeys([*found, *map(text, old)]) if GROUP_RE.fullmatch(g)]

    def _grouped(self, queue: str, k: QueueKeys, limit: int, start: Cursor | None,
                 prefix: str | None) -> JobPage:
        """``ready`` with the fair groups' ready zsets merged in, newest first, by ``listing.lua``
        (a k-way merge in Redis: only the page comes back), at most ``GROUPED_SCAN_MOST`` entries
        examined a call; then the page's fields (``_job_fields``). One call when the queue has at
        most ``GROUPS_PER_CALL`` groups; over more (the script says so, reading nothing else), the
        groups are read here (HKEYS) and given ``GROUPS_PER_CALL`` a call, the calls' pages merged
        (``merge_parts``): one call over 100,000 groups blocked Redis for seconds, for every queue."""
        score, after_id = (None, "") if start is None else (start.score, start.job_id)
        examined, boundary, rows = self.conn.scripts.listing(
            k, score, after_id, limit + 1, prefix or "", GROUPED_SCAN_MOST, "few", [str(GROUPS_PER_CALL)])
        if examined < 0:
            names = self._group_names(k)
            chunks = [names[i:i + GROUPS_PER_CALL] for i in range(0, len(names), GROUPS_PER_CALL)]
            parts = [self.conn.scripts.listing(k, score, after_id, limit + 1, prefix or "", GROUPED_SCAN_MOST,
                                               "groups" if i else "ready", chunk)
                     for i, chunk in enumerate(chunks)]
            examined, boundary, rows = merge_parts(parts, limit + 1)
        page = rows[:limit]
        following = rows[limit - 1] if len(rows) > limit else boundary
        read = self._job_fields(k, [job_id for job_id, _ in page])
        jobs = [_listed(job_id, "ready", score, read[i]) for i, (job_id, score) in enumerate(page)]
        return JobPage(queue=queue, state="ready", jobs=jobs, scanned=examined,
                       next=None if following is None else encode_cursor(following[1], following[0]))

    def _job_fields(self, k: QueueKeys, job_ids: list[str], fields: tuple[str, ...] = _FIELDS,
                    budget: int = read_bounds.PAGE_PAYLOAD_BUDGET) -> list[Row]:
        """Jobs' hash fields (a ``Row`` each), each read only within its read bound and the first
        field (the payload) only within ``budget`` over all of them (0: none;
        ``sluice.core.read_bounds``), by ``fields.lua``: ``_FIELDS_PER_CALL`` jobs a call, the
        lengths asked in Redis. An id no job may have (a zset member its team wrote by hand) names
        no hash: all its fields read as absent, unasked."""
        bounds = [read_bounds.CAPS[f] for f in fields]
        asked = [job_id for job_id in job_ids if JOB_ID_RE.fullmatch(job_id)]
        found: dict[str, Row] = {}
        left = budget
        for i in range(0, len(asked), _FIELDS_PER_CALL):
            chunk = asked[i:i + _FIELDS_PER_CALL]
            rows = self.conn.scripts.fields(k, fields, bounds, left, chunk)
            found.update(zip(chunk, rows, strict=True))
            if budget:  # the next call gets what this one left (1, not 0, which would mean none)
                left = max(1, left - sum(len(row[0].encode()) for row in rows if isinstance(row[0], str)))
        absent: Row = [None] * len(fields)
        return [found.get(job_id, absent) for job_id in job_ids]

    # --- dead letters -----------------------------------------------------------------------

    def dead_letters(self, queue: str, limit: int = 100) -> list[DeadJob]:
        """The oldest ``limit`` dead jobs. Each one's attempts and last error are read only within
        what the scripts write there (``read_bounds``): a longer error, written by hand, is
        named in its place and not read."""
        k, limit = self.conn.keys(queue), checked_int(limit, 1, 10_000, "limit")
        try:
            entries = self.conn.client.zrange(k.dead, 0, limit - 1, withscores=True)
        except REDIS_ERRORS as exc:
            raise translate(exc) from exc
        ids = [text(member) for member, _ in entries]
        out = []
        read = self._job_fields(k, ids, ("a", "err"), 0)
        for job_id, (_, died), (attempts, error) in zip(ids, entries, read, strict=True):
            if isinstance(error, int):
                error = read_bounds.unread_error(error, read_bounds.CAPS["err"])
            out.append(DeadJob(job_id=job_id, queue=queue, last_error=error, died_at_ms=int(died),
                               attempts=0 if isinstance(attempts, int) else _number(attempts or 0) or 0))
        return out

    def dead_spec(self, queue: str, job_id: str) -> JobSpec:
        """A dead job as its Kafka record had it (ready now), for a redrive to append again
        (``sluice.gateway.redrive``); ``JobNotFound`` if the job is not dead-lettered. A read: its
        fields by ``fields.lua``, each within its read bound, or ``InvalidInput`` naming those longer
        (a team's Redis user wrote them by hand: a redrive would append what no record carries)."""
        k = self.conn.keys(queue)
        try:
            score = self.conn.client.zscore(k.dead, validate_job_id(job_id))
        except REDIS_ERRORS as exc:
            raise translate(exc) from exc
        row = self._job_fields(k, [job_id], _SPEC_FIELDS, 0)[0] if score is not None else [None] * 4
        payload, meta, group, trace = row
        if payload is None or meta is None:
            raise JobNotFound(f"job {job_id} is not dead-lettered in {queue}", job_id=job_id)
        over = [f"{read_bounds.NAMES[f]} ({n} bytes, at most {read_bounds.CAPS[f]})"
                for f, n in zip(_SPEC_FIELDS, row, strict=True) if isinstance(n, int)]
        if over:
            raise InvalidInput(f"dead job {job_id} holds fields longer than Sluice writes them: "
                               f"{', '.join(over)}; written by hand, so not read, and it cannot be redriven; "
                               "purge it", job_id=job_id)
        spec = [_number(v) for v in text(meta).split(",")]
        if len(spec) != 4 or None in spec:
            raise InvalidInput(f"dead job {job_id}'s stored meta {text(meta)!r} is not what Sluice writes "
                               "(written by hand): it cannot be redriven; purge it", job_id=job_id)
        priority, max_attempts, lease_ms, enqueued_at_ms = (int(v or 0) for v in spec)
        try:
            body = json.loads(text(payload))
        except ValueError as exc:
            raise InvalidInput(f"dead job {job_id}'s stored payload is not JSON (written by hand): it cannot "
                               "be redriven; purge it", job_id=job_id) from exc
        return JobSpec(job_id=job_id, queue=queue, payload=body, priority=priority,
                       max_attempts=max_attempts, lease_ms=lease_ms, enqueued_at_ms=enqueued_at_ms,
                       group=None if group is None else text(group),
                       traceparent=None if trace is None else text(trace))  # its redrive stays in its trace

    def redrive(self, queue: str, job_id: str | None = None, generation: int = 0) -> int:
        """Move one dead job (NOT_FOUND if it is not dead) or all of them back to ready.

        ``generation``: the redrive generation the jobs table minted for this job's redrive
        (``sluice.gateway.redrive``, which every redrive of a queue with a jobs table goes through);
        the worker's grant needs it to leave the job's final item. 0 (only for all, or for
        queues with no jobs table, such as the relay's own) leaves the job's generation alone.
        """
        k = self.conn.keys(queue)
        if job_id is not None:
            generation = checked_int(generation, 0, MAX_TOKEN, "generation")
            return self.conn.scripts.redrive(k, validate_job_id(job_id), 1, generation)
        if generation:
            raise InvalidInput("a redrive generation belongs to one job: give its job_id")
        total = 0
        while moved := self.conn.scripts.redrive(k, None, MAX_BATCH):
            total += moved
        return total

    def purge_dead(self, queue: str) -> int:
        k = self.conn.keys(queue)
        total = 0
        while deleted := self.conn.scripts.purge(k, MAX_BATCH):
            total += deleted
        return total


def _number(value: object) -> int | None:
    """A job's number as a script wrote it (0..2**53-1); None for what none would write (a team's
    Redis user may write its own queue's keys by hand): shown as unknown, never a 500 for the page."""
    try:
        n = int(float(value)) if isinstance(value, float) else int(str(value))
    except (TypeError, ValueError, OverflowError):
        return None
    return n if 0 <= n <= MAX_TOKEN else None


def _listed(job_id: str, state: str, score: float | None, row: Row | None) -> ListedJob:
    """A page's job from its zset score and its hash's p, m, a, err, grp as ``_job_fields`` read
    them (None: finished; a job gone, or whose meta was left unread, shows its id alone); the fields
    left unread are named (``read_bounds``)."""
    at = None if state == "ready" or score is None else _number(score)
    unread = [read_bounds.NAMES[f] for f, v in zip(_FIELDS, row or (), strict=False) if isinstance(v, int)]
    if row is None or not isinstance(row[1], str):
        return ListedJob(job_id=job_id, state=state, at_ms=at, unread=unread)
    payload, meta, attempts, error, group = (v if isinstance(v, str) else None for v in row)
    parts = str(meta).split(",")
    priority, enqueued = (_number(parts[0]), _number(parts[3])) if len(parts) == 4 else (None, None)
    try:
        body = None if payload is None else json.loads(payload)
    except ValueError:
        body = payload
    return ListedJob(job_id=job_id, state=state, at_ms=at, enqueued_at_ms=enqueued, priority=priority,
                     attempts=None if isinstance(row[2], int) else _number(attempts or 0),
                     group=group, last_error=error, payload=body, unread=unread)
