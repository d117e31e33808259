"""Operator commands on Redis: ``sluice queues``, ``sluice queue ...``, ``sluice dlq ...``.

They go to Redis directly (the local stack's, or ``SLUICE_REDIS_URL``), or, pointed at a deployed
API without Redis (``Target.operator_api``), through the operator API (``/v1/admin/queues...``).
Every change is picked up by running relays within about a second (``sluice.core.knobs``).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from sluice.core import knobs as control
from sluice.core.clock import wall_ms
from sluice.core.errors import InvalidInput
from sluice.core.models import (
    QueueConfig,
    QueueStats,
    is_reserved_queue,
    validate_job_id,
    validate_queue_name,
)
from sluice.core.routes import RouteTable, unrouted_refused
from sluice.gateway.admin import mark_sensitive
from sluice.gateway.redrive import redrive_all, redrive_one
from sluice_dev.cli.output import emit, json_mode
from sluice_dev.cli.target import Target

# Arguments are checked as they are parsed: a bad one is reported before any connection.
QUEUE_NAME = click.argument("name", callback=lambda _ctx, _param, value: validate_queue_name(value))


def console() -> Console:
    """Rich output; piped output gets a wide fixed width instead of rich's 80 columns."""
    return Console() if sys.stdout.isatty() else Console(width=160)


def age(ms: int | None) -> str:
    if ms is None:
        return "-"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


def rate(config: QueueConfig) -> str:
    if config.rate_per_s <= 0:
        return "unlimited"
    return f"{config.rate_per_s:g}/s burst {config.burst}"


def caps(config: QueueConfig) -> str:
    """The queue's own caps; "default" where the deployment's (SLUICE_MAX_*_PER_QUEUE) apply."""
    return (f"delayed {config.max_delayed or 'default'}, dead {config.max_dead or 'default'}, "
            f"bytes {config.max_bytes or 'default'}")


UNROUTED = "none: no route (enqueues refused, NO_ROUTE)"


def route_of(table: RouteTable | None, queue: str, refuse_unrouted: bool = True) -> str:
    """Where a queue's jobs go: its route's function (and owner), the default worker, or nobody
    (routes are known, none covers the queue, and unrouted queues are refused)."""
    route = None if table is None else table.resolve(queue)
    if route is None:
        return UNROUTED if unrouted_refused(table, route, refuse_unrouted) else "default worker"
    typed = " typed" if queue in route.schemas else ""
    return f"{route.function} ({route.owner}{typed})"


def route_table(target: Target) -> RouteTable | None:
    store = target.routes()
    return None if store is None else RouteTable(store.list_routes())


def stats_row(st: QueueStats, route: str = "default worker") -> dict[str, Any]:
    c = st.config
    return {"queue": st.queue, "route": route, "ready": st.ready, "delayed": st.delayed,
            "in_flight": st.leased, "dead": st.dead, "oldest_ready_age_ms": st.oldest_ready_age_ms,
            "paused": c.paused,
            "rate_per_s": c.rate_per_s, "burst": c.burst, "max_in_flight": c.max_in_flight,
            "max_in_flight_per_group": c.max_in_flight_per_group,
            "high_watermark": c.high_watermark, "low_watermark": c.low_watermark,
            "max_delayed": c.max_delayed, "max_dead": c.max_dead,  # 0: the deployment's default
            "max_bytes": c.max_bytes, "used_bytes": st.used_bytes, "budget_bytes": st.budget_bytes,
            "parked": st.parked, "parked_at_ms": st.parked_at_ms}


def api_route(route: dict[str, Any] | None) -> str:
    """``route_of``'s text for the operator API's ``route`` field."""
    if not route:
        return "default worker"
    if route.get("refused"):
        return UNROUTED
    return f"{route['function']} ({route['owner']}{' typed' if route.get('typed') else ''})"


def api_rows(target: Target) -> list[tuple[QueueStats, int, str]] | None:
    """Every queue through the operator API (stats, overdue leases, route), or None to use Redis."""
    api = target.operator_api()
    if api is None:
        return None
    return [(QueueStats.model_validate(row), int(row.get("overdue_leases") or 0), api_route(row.get("route")))
            for row in api.queue_rows()]


def all_stats(target: Target, include_internal: bool = False) -> list[QueueStats]:
    engine = target.engine()
    names = [q for q in engine.queues() if include_internal or not is_reserved_queue(q)]
    stats = [engine.limits.with_budget(engine.stats(q)) for q in names]
    directory = target.queue_directory()
    if directory is None:
        return stats
    states = directory.parked()  # the relay's counters: one scan of the registry, never of the lot
    return [st.model_copy(update={"parked": p.parked, "parked_at_ms": p.parked_at_ms})
            if (p := states.get(st.queue)) is not None else st for st in stats]


def parked(st: QueueStats, now_ms: int | None = None) -> str:
    """Its records in the parking lot (the registry's counter) and how long since one parked: "-"
    for none, "6000 (last 2.0m ago)"."""
    if not st.parked:
        return "-"
    if not st.parked_at_ms:
        return str(st.parked)
    return f"{st.parked} (last {age(max(0, (now_ms or wall_ms()) - st.parked_at_ms))} ago)"


def size(n: int) -> str:
    """Bytes for a person: 900 B, 1.5 KB, 32.0 MB (1024-based)."""
    value, unit = float(n), "B"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if value < 1024 or unit == "TB":
            break
        value /= 1024
    return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"


def in_redis(st: QueueStats) -> str:
    """The queue's bytes in Redis against its budget: "1.2 MB / 32.0 MB (4%)", or just the bytes."""
    if not st.budget_bytes:
        return size(st.used_bytes)
    share = st.used_bytes * 100 // st.budget_bytes
    return f"{size(st.used_bytes)} / {size(st.budget_bytes)} ({share}%)"


def queues_table(stats: list[QueueStats], title: str | None = None,
                 routes: RouteTable | None = None, shown: dict[str, str] | None = None) -> Table:
    table = Table(title=title, title_justify="left")
    for col in ("queue", "ready", "delayed", "in flight", "dead", "oldest ready", "rate",
                "max in flight", "caps", "in redis", "parked", "state", "route"):
        # caps: delayed/dead, "-" = default
        # the queue's name stays whole however narrow the terminal: the other columns wrap
        width = max((len(st.queue) for st in stats), default=5) if col == "queue" else None
        table.add_column(col, justify="left" if col in ("queue", "rate", "state", "route") else "right",
                         min_width=width)
    for st in stats:
        c = st.config
        table.add_row(st.queue, str(st.ready), str(st.delayed), str(st.leased), str(st.dead),
                      age(st.oldest_ready_age_ms), rate(c), str(c.max_in_flight or "-"),
                      f"{c.max_delayed or '-'}/{c.max_dead or '-'}", in_redis(st), parked(st),
                      "[yellow]paused[/]" if c.paused else "running",
                      (shown or {}).get(st.queue) or route_of(routes, st.queue))
    return table


@click.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object per queue, one per line.")
@click.option("--all", "include_internal", is_flag=True, help="Include the relay's internal queue.")
@click.pass_obj
def queues(target: Target, as_json: bool, include_internal: bool) -> None:
    """List every queue: depths, in-flight count, rate limit, paused state and route."""
    remote = api_rows(target)  # a deployed API without Redis: the operator API (public queues only)
    if remote is not None:
        stats, shown = [st for st, _o, _r in remote], {st.queue: r for st, _o, r in remote}
        routes = None
    else:
        stats, routes = all_stats(target, include_internal), route_table(target)
        refuse = target.settings(need="SLUICE_REDIS_URL").unrouted_queues == "refuse"
        shown = {st.queue: route_of(routes, st.queue, refuse) for st in stats}
    if as_json:
        for st in stats:
            click.echo(json.dumps(stats_row(st, shown[st.queue])))
        return
    if not stats:
        click.echo("no queues yet: enqueue a job to create one")
        return
    console().print(queues_table(stats, routes=routes, shown=shown))


# -- sluice queue ... -------------------------------------------------------------------------------


@click.group()
def queue() -> None:
    """Change a queue's knobs at runtime: pause, resume, rate, limit, watermark."""


def _show(config: QueueConfig, name: str, text: str | None = None) -> None:
    """The queue's config after a change: TEXT (default: state, rate, limit), or all of it as JSON."""
    limit = config.max_in_flight or "unlimited"
    per_group = f" ({config.max_in_flight_per_group} per group)" if config.max_in_flight_per_group else ""
    state = "paused" if config.paused else "running"
    emit({"queue": name, **config.model_dump(mode="json")},
         text or f"{name}: {state}, rate {rate(config)}, max in flight {limit}{per_group}")


@queue.command()
@QUEUE_NAME
@click.pass_obj
def pause(target: Target, name: str) -> None:
    """Stop pushing jobs into NAME's Redis queue; Kafka holds the backlog."""
    api, name = target.operator_api(), validate_queue_name(name)
    _show(api.pause(name) if api else control.pause(target.engine(), name), name)


@queue.command()
@QUEUE_NAME
@click.pass_obj
def resume(target: Target, name: str) -> None:
    """Resume pushing jobs into NAME."""
    api, name = target.operator_api(), validate_queue_name(name)
    _show(api.resume(name) if api else control.resume(target.engine(), name), name)


@queue.command("rate")
@QUEUE_NAME
@click.option("--per-second", type=float, required=True,
              help="Jobs per second pushed into Redis; 0 = no limit.")
@click.option("--burst", type=click.IntRange(0, None), default=None,
              help="Jobs that may go at once (default: one second's worth).")
@click.pass_obj
def rate_cmd(target: Target, name: str, per_second: float, burst: int | None) -> None:
    """Limit how fast the relay pushes NAME's jobs (shared by every relay)."""
    api, name = target.operator_api(), validate_queue_name(name)
    _show(api.set_rate(name, per_second, burst) if api else
          control.set_rate(target.engine(), name, per_second, burst), name)


@queue.command()
@QUEUE_NAME
@click.option("--max-in-flight", type=click.IntRange(0, None), default=None,
              help="Most jobs leased at once; 0 = no limit.")
@click.option("--per-group", type=click.IntRange(0, None), default=None,
              help="Most jobs of one fair group (a job's group) leased at once; 0 = no limit.")
@click.pass_obj
def limit(target: Target, name: str, max_in_flight: int | None, per_group: int | None) -> None:
    """Cap how many of NAME's jobs run at the same time, in all and per group."""
    if max_in_flight is None and per_group is None:
        raise InvalidInput("give --max-in-flight, --per-group or both")
    api, name = target.operator_api(), validate_queue_name(name)
    _show(api.set_max_in_flight(name, max_in_flight, per_group) if api else
          control.set_max_in_flight(target.engine(), name, max_in_flight, per_group), name)


@queue.command()
@QUEUE_NAME
@click.option("--high", type=click.IntRange(0, None), required=True,
              help="Pause pushing above this ready depth.")
@click.option("--low", type=click.IntRange(0, None), default=None, help="Resume below this (default high/2).")
@click.pass_obj
def watermark(target: Target, name: str, high: int, low: int | None) -> None:
    """Backpressure: stop pushing while NAME's ready depth is above --high."""
    api, name = target.operator_api(), validate_queue_name(name)
    config = api.set_watermarks(name, high, low) if api else control.set_watermarks(target.engine(), name,
                                                                                      high, low)
    _show(config, name, f"{name}: pause above {config.high_watermark}, resume below {config.low_watermark}")


@queue.command("caps")
@QUEUE_NAME
@click.option("--max-delayed", type=click.IntRange(0, None), default=None,
              help="Delayed jobs NAME may hold (the gateway answers 429 beyond); 0 = the default.")
@click.option("--max-dead", type=click.IntRange(0, None), default=None,
              help="Dead jobs at which NAME takes no more jobs; 0 = the default.")
@click.option("--max-bytes", type=click.IntRange(0, None), default=None,
              help="Bytes NAME's jobs may take in Redis (its byte budget); 0 = the default.")
@click.pass_obj
def caps_cmd(target: Target, name: str, max_delayed: int | None, max_dead: int | None,
             max_bytes: int | None) -> None:
    """Set NAME's own caps on delayed and dead jobs and its byte budget (docs/deploy.md, Limits)."""
    api, name = target.operator_api(), validate_queue_name(name)
    if api is not None and max_delayed is None and max_dead is None and max_bytes is None:
        raise InvalidInput("give --max-delayed, --max-dead, --max-bytes or some of them")
    config = api.set_caps(name, max_delayed, max_dead, max_bytes) if api else control.set_caps(
        target.engine(), name, max_delayed, max_dead, max_bytes)
    _show(config, name, f"{name}: {caps(config)}")


@queue.command("sensitive")
@QUEUE_NAME
@click.argument("fields", nargs=-1)
@click.option("--clear", is_flag=True, help="Mark no field (the schema's marks of a typed queue stay).")
@click.pass_obj
def sensitive_cmd(target: Target, name: str, fields: tuple[str, ...], clear: bool) -> None:
    """Show NAME's payload FIELDS as [redacted] in listings (the operator API, the console,
    `sluice jobs list`): JSON pointers (/card/number; * is every item of a list) or top-level
    names (password). Replaces the queue's list; typed or not (docs/api.md, Sensitive fields)."""
    if bool(fields) == clear:
        raise InvalidInput("give the fields, or --clear")
    api, name = target.operator_api(), validate_queue_name(name)
    # On Redis, as the operator API does: an internal queue is refused, and the durable registry's
    # copy is written first, so a Redis loss cannot unmark the fields.
    config = api.set_sensitive(name, fields) if api else mark_sensitive(
        target.engine(), target.queue_directory(), name, list(fields), by="sluice queue sensitive (Redis)")
    _show(config, name, f"{name}: sensitive {', '.join(config.sensitive) or 'none'}")


# -- sluice dlq ... ---------------------------------------------------------------------------------


@click.group()
def dlq() -> None:
    """Dead-lettered jobs: list, redrive, purge."""


@dlq.command("list")
@QUEUE_NAME
@click.option("--limit", "max_jobs", type=click.IntRange(1, 10_000), default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per job, one per line.")
@click.pass_obj
def dlq_list(target: Target, name: str, max_jobs: int, as_json: bool) -> None:
    """List NAME's dead jobs, oldest first, with their last error."""
    api, name = target.operator_api(), validate_queue_name(name)
    dead = api.dead_letters(name, max_jobs) if api else target.engine().dead_letters(name, max_jobs)
    if as_json:
        for d in dead:
            click.echo(d.model_dump_json())
        return
    if not dead:
        click.echo(f"{name}: no dead jobs")
        return
    table = Table()
    for col in ("job id", "attempts", "died", "last error"):
        table.add_column(col)
    now = time.time() * 1000
    for d in dead:
        # Text: a handler's error is its own text (and an unread one "[not read: ...]"), never rich markup
        table.add_row(d.job_id, str(d.attempts), f"{age(int(now - d.died_at_ms))} ago",
                      Text((d.last_error or "")[:100]))
    console().print(table)


@dlq.command()
@QUEUE_NAME
@click.argument("job_id", required=False, callback=lambda _c, _p, v: v and validate_job_id(v))
@click.option("--all", "everything", is_flag=True, help="Redrive every dead job of NAME.")
@click.pass_obj
def redrive(target: Target, name: str, job_id: str | None, everything: bool) -> None:
    """Put dead jobs back in NAME's ready queue: one JOB_ID, or --all.

    Each redrive is recorded in the jobs table first (a new redrive generation), which is
    what lets the job leave its final state; a job whose record expired is refused. The
    job's record is then appended to Kafka again (SLUICE_KAFKA_*), so that the relay can
    bring it back if Redis loses its data."""
    if (job_id is None) == (not everything):
        raise InvalidInput("give either a JOB_ID or --all")
    api = target.operator_api()
    if api is not None:  # the gateway redrives through sluice.gateway.redrive, the same path
        done = api.redrive(validate_queue_name(name), job_id)
        _redriven(str(done["queue"]), int(done["moved"]), dict(done["refused"]))
        return
    # The log: each redrive appends the job's record to Kafka again, so that a Redis data loss
    # cannot take the redrive with it (docs/redis-loss.md, "Redriven jobs").
    engine, store, log, name = target.engine(), target.store(), target.log(), validate_queue_name(name)
    reseal = target.reseal()  # sealed anew, as the gateway's operator API does (issue 27)
    refused: dict[str, str] = {}
    try:
        if job_id is not None:
            moved = redrive_one(engine, store, name, validate_job_id(job_id), log=log, reseal=reseal)
        else:
            report = redrive_all(engine, store, name, log=log, reseal=reseal)
            moved, refused = report.moved, report.refused
            if not json_mode():  # with --json they are in the one result object
                for job, why in refused.items():
                    click.echo(f"{name}: {job} not redriven: {why}", err=True)
    finally:
        log.close()
    _redriven(name, moved, refused, listed=True)


def _redriven(name: str, moved: int, refused: dict[str, str], *, listed: bool = False) -> None:
    if not listed and not json_mode():
        for job, why in refused.items():
            click.echo(f"{name}: {job} not redriven: {why}", err=True)
    emit({"queue": name, "moved": moved, "refused": refused},
         f"{name}: {moved} job{'s' if moved != 1 else ''} back in the ready queue")


@dlq.command()
@QUEUE_NAME
@click.option("--yes", is_flag=True, help="Really delete them.")
@click.pass_obj
def purge(target: Target, name: str, yes: bool) -> None:
    """Delete every dead job of NAME from Redis (their status stays dead)."""
    if not yes:
        raise InvalidInput(f"purging deletes every dead job of {name}; add --yes to confirm")
    api, name = target.operator_api(), validate_queue_name(name)
    deleted = api.purge_dead(name) if api else target.engine().purge_dead(name)
    emit({"queue": name, "purged": deleted},
         f"{name}: {deleted} dead job{'s' if deleted != 1 else ''} purged")


COMMANDS = [queues, queue, dlq]
