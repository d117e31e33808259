"""``sluice scenario gc-pause|crash-before-ack`` and ``sluice chaos``: the break-it commands.

Registered on the main ``sluice`` group by ``sluice_dev.cli``; runnable alone too:
``python -m sluice_dev.chaos.cli scenario gc-pause --time-scale 0.1``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from sluice.core.errors import SluiceError
from sluice_dev.chaos.nemesis import EXTRA_KINDS, KINDS, SHARD_KIND


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


@click.group("scenario")
def scenario() -> None:
    """Play one of the seed's failure stories with real worker processes, Redis and DynamoDB."""


def _header(text: str) -> None:
    click.echo(text)
    click.echo("")


def _finish(result: Any, as_json: bool) -> None:
    click.echo("")
    click.echo(click.style(result.verdict, fg="red" if result.stale_write_accepted else "green"))
    if as_json:
        click.echo(json.dumps(result.as_dict(), separators=(",", ":"), default=str))


def _play(params: Callable[[], Any], header: str, story: Callable[..., Any], as_json: bool,
          html: str | None = None) -> None:
    """One scenario: its parameters (refused: exit 2), what will happen, the story as it plays, and
    the verdict; ``html``: the run's drawing written to that file too."""
    try:
        p = params()
    except SluiceError as exc:
        _fail(str(exc))
        return
    _header(header)
    try:
        result = story(p, echo=lambda e: click.echo(e.line()))
    except (SluiceError, TimeoutError, RuntimeError, OSError) as exc:
        _fail(str(exc))
        return
    if html is not None:
        from pathlib import Path

        from sluice_dev.chaos.scenario_html import page

        Path(html).write_text(page(result.as_dict()), encoding="utf-8")
    _finish(result, as_json)


# The options every scenario takes.
_LEASE = click.option("--lease", "lease", type=float, default=10.0, show_default=True,
                      help="Lease length, seconds.")
_TIME_SCALE = click.option("--time-scale", type=float, default=1.0, show_default=True,
                           help="Multiply every duration (0.1 = ten times faster).")
_AS_JSON = click.option("--json", "as_json", is_flag=True, help="End with the result as one JSON line.")


def _writable_file(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """Refused before the run, not after it: a scenario takes seconds to minutes, and its drawing is why the
    user asked."""
    if value is None:
        return None
    path = Path(value)
    folder = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise click.BadParameter(f"{value} is a folder; name a file")
    if not folder.is_dir():
        raise click.BadParameter(f"no folder {folder} to write {path.name} in")
    if not os.access(path if path.exists() else folder, os.W_OK):
        raise click.BadParameter(f"cannot write {value}")
    return value


@scenario.command("gc-pause")
@_LEASE
@click.option("--renew-every", type=float, default=3.0, show_default=True,
              help="A's heartbeat interval, seconds.")
@click.option("--freeze-at", type=float, default=2.0, show_default=True,
              help="When A stalls (SIGSTOP), seconds after taking the lease.")
@click.option("--freeze-for", type=float, default=12.0, show_default=True, help="How long A stays frozen.")
@click.option("--no-fencing", is_flag=True, help="Storage takes the unconditional write path: the bug.")
@_TIME_SCALE
@_AS_JSON
@click.option("--html", "html", default=None, metavar="FILE", callback=_writable_file,
              help="Also write the run's drawing (its timeline, as the workers recorded it) to FILE.")
def gc_pause_cmd(lease: float, renew_every: float, freeze_at: float, freeze_for: float, no_fencing: bool,
                 time_scale: float, as_json: bool, html: str | None) -> None:
    """Worker A stalls past its lease; B takes over; A wakes up and writes. Who wins?"""
    from sluice_dev.chaos import scenarios

    _play(lambda: scenarios.Params(lease_s=lease, renew_every_s=renew_every, freeze_at_s=freeze_at,
                                   freeze_for_s=freeze_for, fencing=not no_fencing, time_scale=time_scale),
          f"gc-pause: lease {lease:g} s renewed every {renew_every:g} s; A stalls at {freeze_at:g} s "
          f"for {freeze_for:g} s; fencing {'OFF (the bug)' if no_fencing else 'ON'}; "
          f"time scale {time_scale:g}",
          scenarios.gc_pause, as_json, html)


@scenario.command("crash-before-ack")
@_LEASE
@click.option("--renew-every", type=float, default=3.0, show_default=True,
              help="Heartbeat interval, seconds.")
@_TIME_SCALE
@_AS_JSON
def crash_before_ack_cmd(lease: float, renew_every: float, time_scale: float, as_json: bool) -> None:
    """A worker finishes a job and crashes just before acknowledging it. What happens?"""
    from sluice_dev.chaos import scenarios

    _play(lambda: scenarios.Params(lease_s=lease, renew_every_s=renew_every, time_scale=time_scale),
          f"crash-before-ack: lease {lease:g} s renewed every {renew_every:g} s; A is SIGKILLed between "
          f"its result write and its ack; time scale {time_scale:g}", scenarios.crash_before_ack, as_json)


@click.command("chaos")
@click.option("--jobs", type=click.IntRange(1, 1_000_000), default=500, show_default=True,
              help="Unique jobs to enqueue.")
@click.option("--duration", type=click.FloatRange(5, 86_400), default=40.0, show_default=True,
              help="Seconds of faults; jobs are enqueued over the first 90%.")
@click.option("--seed", type=int, default=1, show_default=True, help="Seeds the workload and the nemesis.")
@click.option("--workers", type=click.IntRange(1, 32), default=3, show_default=True,
              help="Worker containers (lambda: the worker function's concurrency) or processes.")
@click.option("--runtime", type=click.Choice(["lambda", "process"]), default="lambda", show_default=True,
              help="lambda: the local Lambda service as sluice dev runs it (worker containers dispatched by "
                   "the relay and the safety net, the relay on a schedule); process: long-lived worker "
                   "and relay processes.")
@click.option("--no-faults", is_flag=True, help="A control run: the same workload, no nemesis.")
@click.option("--operator/--no-operator", default=False, show_default=True,
              help="An operator also cancels jobs, redrives and purges dead ones, pauses and resumes the "
                   "queue while the nemesis faults (a few jobs then fail by design, to be dead-lettered).")
@click.option("--drain-timeout", type=float, default=None, help="Seconds to wait for the queues to drain.")
@click.option("--redis-shards", type=click.IntRange(1, 16), default=1, show_default=True,
              help="Above 1: run on a local Redis cluster of that many masters; the nemesis then also "
                   "restarts one shard at a time with its data lost.")
@click.option("--add-fault", "add_faults", multiple=True,
              type=click.Choice([*EXTRA_KINDS, "all"]),
              help="Fault kinds planned only when asked for (repeatable; all: both): flush_registry_shard "
                   "loses the queue registry's Redis cache (on a cluster its whole shard), rotate_job_id_key "
                   "rotates the job id key in Secrets Manager. A seed's plan without them is unchanged.")
@click.option("--only-fault", "only_faults", multiple=True,
              type=click.Choice([*KINDS, SHARD_KIND, *EXTRA_KINDS]),
              help="Inject only the plan's faults of this kind (repeatable): the seed's plan, filtered.")
@click.option("--tenant-flood", type=click.IntRange(0, 1_000_000), default=0, show_default=True,
              help="Above 0: the tenant nemesis: one tenant pauses its own queue, floods it with this many "
                   "jobs (50,000 is ten times the relay's old hold limit), delays jobs 7 days ahead, goes "
                   "over its byte budget and then a rate limit, while the others run the workload.")
@click.option("--tenant-far", type=click.IntRange(0, 100_000), default=100, show_default=True,
              help="With --tenant-flood: the tenant's jobs delayed 7 days (cancelled at the end).")
@click.option("--tenant-hold", type=click.Choice(["pause-then-rate", "pause"]), default="pause-then-rate",
              show_default=True, help="With --tenant-flood: paused, then rate-limited from half the window "
                                      "on; or paused to the end.")
@click.option("--relay-max-pending", type=click.IntRange(10, 1_000_000), default=None,
              help="The relay's per-partition hold limit (default 5,000; Settings.relay_max_pending).")
@click.option("--keyed", is_flag=True,
              help="Send each batch with an Idempotency-Key (sent again with it until answered), and let "
                   "the workload's gateway die at seeded batches before or after its append (issue 33).")
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the history and logs go (default .sluice_dev/chaos/seed<K>-<time>).")
@click.option("--json", "as_json", is_flag=True, help="End with the checker's report as one JSON line.")
def chaos(jobs: int, duration: float, seed: int, workers: int, runtime: str, no_faults: bool,
          operator: bool, drain_timeout: float | None, redis_shards: int, add_faults: tuple[str, ...],
          only_faults: tuple[str, ...],
          tenant_flood: int, tenant_far: int, tenant_hold: str,
          relay_max_pending: int | None, keyed: bool, state_dir: Path | None, as_json: bool) -> None:
    """A Jepsen-style run: the local pipeline under a seeded nemesis, then a history checker."""
    from sluice_dev.chaos import runner, tenant

    rate_at = None if tenant_hold == "pause" else 0.5
    plan = tenant.TenantPlan(flood=tenant_flood, far=tenant_far, rate_at=rate_at) if tenant_flood else None
    options = runner.Options(jobs=jobs, duration_s=duration, seed=seed, workers=workers, runtime=runtime,
                             faults=not no_faults, operator=operator, drain_timeout_s=drain_timeout,
                             state_dir=state_dir, redis_shards=redis_shards, tenant=plan,
                             relay_max_pending=relay_max_pending,
                             extra_faults=EXTRA_KINDS if "all" in add_faults else add_faults,
                             only_faults=only_faults, keyed=keyed)
    try:
        outcome = runner.run(options, say=click.echo)
    except (SluiceError, TimeoutError, RuntimeError, OSError) as exc:
        _fail(str(exc))
        return
    r = outcome.report
    click.echo("")
    must_be_zero = ("lost", "lost_after_202", "unexpected", "duplicate_results", "wrong_results",
                    "stale_writes_accepted", "stuck", "cancel_violations", "reruns_without_redrive",
                    "pause_violations", "family_violations")
    shown = ("accepted", "succeeded", "dead", "unknown_enqueues", "executions", "duplicate_executions",
             "writes_rejected", *must_be_zero) + (("cancelled", "purged_lost") if operator else ())
    for name in shown:
        value = getattr(r, name)
        line = f"  {name.replace('_', ' '):<24}{value:>8}"
        click.echo(click.style(line, fg="red") if name in must_be_zero and value else line)
    click.echo(f"  {'faults':<24}{sum(r.faults.values()):>8}  {dict(sorted(r.faults.items()))}")
    if operator:
        click.echo(f"  {'operator':<24}{sum(r.operator.values()):>8}  {dict(sorted(r.operator.items()))}")
    click.echo(f"  {outcome.runtime + ' runtime':<24}{'':>8}  {outcome.runtime_counts}")
    lat = outcome.latency
    click.echo(f"  {'latency (others)':<24}{'':>8}  p50 {lat.get('p50')} ms, p99 {lat.get('p99')} ms "
               f"over {lat.get('n')} jobs")
    ok = r.ok
    if outcome.tenant:
        held = bool(outcome.tenant.get("others_drained_while_held"))
        ok = ok and held
        line = f"  {'tenant nemesis':<24}{'':>8}  {outcome.tenant}"
        click.echo(line if held else click.style(line, fg="red"))
    click.echo("")
    verdict = "PASS: every invariant held" if ok else "FAIL: an invariant was violated"
    click.echo(click.style(verdict, fg="green" if ok else "red") + f" (history: {outcome.state_dir})")
    if as_json:
        click.echo(json.dumps(outcome.as_dict(), separators=(",", ":"), default=str))
    sys.exit(0 if ok else 1)


@click.group()
def main_group() -> None:
    """The break-it commands on their own."""


main_group.add_command(scenario)
main_group.add_command(chaos)


def main() -> None:
    main_group()


if __name__ == "__main__":
    main()
