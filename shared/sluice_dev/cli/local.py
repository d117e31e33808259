"""``sluice dev`` and ``sluice demo``: the pipeline on this machine."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from sluice_dev.cli.output import emit, json_mode
from sluice_dev.cli.target import Target

if TYPE_CHECKING:
    from sluice.worker.runtime.options import HandlerSpec


def _settings_overrides(worker_batch: int | None, worker_concurrency: int | None,
                        traces: Path | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if worker_batch is not None:
        out["worker_batch"] = worker_batch
    if worker_concurrency is not None:
        out["worker_concurrency"] = worker_concurrency
    if traces is not None:  # every function traces, into one file (sluice_dev.local.traces)
        out["traces"] = True
        out["traces_path"] = str(traces.resolve())
    return out


def _announce(endpoints: dict[str, Any], described: list[tuple[str, str]]) -> None:
    click.echo(f"sluice dev is running (pid {endpoints['pid']}); Ctrl-C or SIGTERM stops it")
    for name, value in described:
        click.echo(f"  {name:<9} {value}")
    click.echo(f"local overrides of {endpoints['template']}"
               f"{' at ' + str(endpoints['config_env']) if endpoints['config_env'] else ''}:")
    for line in endpoints["overrides"]:
        click.echo(f"  {line}")
    from sluice.entry.worker import load_app

    hint = try_hint(load_app(str(endpoints["handlers"])).handlers)
    if hint is not None:
        click.echo(f"try:  {hint}")


def try_hint(handlers: Mapping[str, HandlerSpec]) -> str | None:
    """A first job on a queue these handlers have (None: they have none). Only echo's payload is
    known; for any other queue the user writes the payload its handler expects."""
    if "echo" in handlers:
        return "sluice enqueue echo --payload '{\"hello\": \"world\"}' --wait"
    queues = sorted(handlers)
    if not queues:
        return None
    return (f"sluice enqueue {queues[0]} --payload '<its JSON payload>' --wait   "
            f"(queues: {', '.join(queues[:8])}{', ...' if len(queues) > 8 else ''})")


LARGE_LOCAL_SHARDS = 3  # template.yaml's Profiles mapping: large's RedisShards


def _team_worker(spec: str) -> tuple[str, str]:
    name, sep, module = spec.partition("=")
    if not sep or not name or not module:
        raise click.BadParameter(f"{spec!r} is not NAME=MODULE (e.g. media=myteam.jobs)",
                                 param_hint="--worker")
    return name, module


@click.command()
@click.option("--template", "template_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="The SAM template whose functions to run (default: this checkout's).")
@click.option("--config-env", default=None,
              help="Take parameter values from this samconfig.toml environment (as sam deploy --config-env).")
@click.option("--artifacts", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="Run the BUILT functions of this sam build folder (python infra/artifacts.py OUT builds "
                   "one for this machine), each with only its bundle and the layer on its path.")
@click.option("--handlers", default="sluice_dev.examples", show_default=True,
              help="Module whose `app` (a sluice.Worker) holds your handlers, e.g. myapp.jobs "
                   "(the WorkerHandlersModule parameter; the template's default deploys none).")
@click.option("--workers", type=click.IntRange(1, 64), default=4, show_default=True,
              help="Worker containers (processes) that may run at once, per worker function.")
@click.option("--worker", "team_workers", multiple=True, metavar="NAME=MODULE",
              help="Also run a team's own worker function sluice-worker-NAME for MODULE's handlers, "
                   "configured from infra/worker.yaml (or --worker-template), with its own "
                   "containers; every worker's queues are routed to it (repeatable; docs/teams.md).")
@click.option("--worker-template", "team_template", default=None,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The team's own copy of infra/worker.yaml, which --worker functions are configured "
                   "from (default: this checkout's infra/worker.yaml).")
@click.option("--kafka", "kafka_bootstrap", envvar="SLUICE_DEV_KAFKA", default=None,
              help="Use this existing plaintext Kafka (host:port, or SLUICE_DEV_KAFKA) instead of "
                   "starting Tansu. Not SLUICE_KAFKA_BOOTSTRAP: that may name a deployed cluster.")
@click.option("--worker-batch", type=click.IntRange(1, 1000), default=None,
              help="Jobs a worker leases per call and per invocation.")
@click.option("--worker-concurrency", type=click.IntRange(1, 64), default=None,
              help="Jobs one worker runs at once (threads).")
@click.option("--redis-shards", type=click.IntRange(1, 16), default=None,
              help="Redis shards: above 1, a local Redis cluster of that many masters, which the "
                   "functions reach at a redis+cluster:// URL (the RedisShards parameter; docs/scale.md). "
                   "Default: 1, or the large profile's 3.")
@click.option("--profile", type=click.Choice(["small", "standard", "large"]), default=None,
              help="Run the template at this Profile (docs/deploy.md, Profiles): small serves the API as "
                   "an HTTP API does (payload 2.0 events), large runs a local Redis cluster of 3 shards.")
@click.option("--relay-every", type=click.FloatRange(1, 3600), default=None,
              help="Seconds between scheduled relay invocations (an override of the template's "
                   "schedule; each run then lasts this plus 10 s).")
@click.option("--history/--no-history", default=True, show_default=True,
              help="Record every grant, result write and ack in .sluice/history.jsonl (sluice top reads it).")
@click.option("--traces", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Trace every job (SLUICE_TRACES) and write the spans of every function to this file, "
                   "one JSON object a line (docs/worker.md, Traces).")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
@click.pass_obj
def dev(target: Target, template_path: Path | None, config_env: str | None, artifacts: Path | None,
        handlers: str, workers: int, team_workers: tuple[str, ...], team_template: Path | None,
        kafka_bootstrap: str | None, worker_batch: int | None, worker_concurrency: int | None,
        redis_shards: int | None, profile: str | None, relay_every: float | None, history: bool,
        log_level: str, traces: Path | None) -> None:
    """Run the whole pipeline here until Ctrl-C: Redis, Kafka, DynamoDB, gateway, relay, workers.

    Each function runs as template.yaml configures it; every local difference is printed at
    start-up. Writes .sluice/endpoints.json and prints the endpoints. A second `sluice dev` in
    the same folder reports the running one.
    """
    from sluice_dev.local.dev import DevOptions, DevStack, describe, signals_stop
    from sluice_dev.local.template import TEMPLATE

    options = DevOptions(state_dir=target.state_dir, template=template_path or TEMPLATE,
                         config_env=config_env, handlers=handlers, kafka_bootstrap=kafka_bootstrap,
                         redis_shards=redis_shards or (LARGE_LOCAL_SHARDS if profile == "large" else 1),
                         profile=profile,
                         artifacts=artifacts.resolve() if artifacts else None,
                         workers=workers, relay_every_s=relay_every,
                         relay_timeout_s=None if relay_every is None else relay_every + 10,
                         log_level=log_level.upper(), history=history, why="a sluice dev option",
                         settings=_settings_overrides(worker_batch, worker_concurrency, traces),
                         team_workers=tuple(_team_worker(w) for w in team_workers))
    if team_template is not None:
        options = dataclasses.replace(options, team_template=team_template.resolve())
    stack = DevStack(options)
    with signals_stop(stack):
        endpoints = stack.start(progress=lambda m: click.echo(f"  {m}...", err=True))
        try:
            if json_mode():  # the endpoints, as .sluice/endpoints.json holds them
                emit(endpoints, "")
            else:
                _announce(endpoints, describe(endpoints))
            sys.stdout.flush()
            stack.wait()
            click.echo("stopping...", err=True)
        finally:
            stack.stop()
    click.echo("stopped; no process left behind", err=True)


@click.command()
@click.option("--jobs", "n_jobs", type=click.IntRange(10, 100_000), default=2000, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="End with the summary as one JSON line.")
@click.option("--workers", type=click.IntRange(1, 64), default=4, show_default=True,
              help="Worker containers that may run at once.")
@click.option("--seed", type=int, default=1, show_default=True,
              help="Picks which jobs are duplicates, delayed or failing.")
@click.option("--timeout", type=click.FloatRange(10, 3600), default=300.0, show_default=True,
              help="Give up waiting for the jobs to finish after this many seconds.")
@click.option("--keep", is_flag=True, help="Leave the demo's state directory for inspection.")
@click.pass_obj
def demo(target: Target, n_jobs: int, as_json: bool, workers: int, seed: int, timeout: float,
         keep: bool) -> None:
    """Start a private stack, push JOBS jobs through it, and check that nothing was lost.

    Exits 0 only if every accepted job ended succeeded or dead with exactly one
    result, and no stale write was accepted.
    """
    from sluice_dev.local.demo import DemoOptions, run_demo

    state_dir = target.state_dir.parent / ".sluice-demo" if target.state_dir == Path(".sluice") \
        else target.state_dir
    ok = run_demo(DemoOptions(jobs=n_jobs, as_json=as_json, workers=workers, seed=seed, timeout_s=timeout,
                              state_dir=state_dir, keep=keep))
    sys.exit(0 if ok else 1)


COMMANDS = [dev, demo]
