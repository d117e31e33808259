"""``sluice check``: what a deploy of the template gives each queue's handler, before ``sam deploy``.

For the worker function's configuration in the template (at parameter defaults, or at a
samconfig.toml environment's values), each registered queue gets: its hard timeout (its own
``timeout_s``, or the default the worker would give it), the lease its jobs get by default,
the batch, how many of its jobs one invocation can run, and whether it fits at all. Exits
non-zero where a handler cannot run, the same check the worker makes at start-up.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from sluice.worker.runtime.options import WorkerOptions
from sluice_dev.cli import egress
from sluice_dev.cli.output import emit, fail, json_mode

if TYPE_CHECKING:
    from sluice_dev.local.template import FunctionConfig


@dataclass(frozen=True)
class QueueReport:
    queue: str
    timeout_s: float
    timeout_from: str  # "timeout_s" or "default"
    lease_s: int
    batch: int
    per_invocation: int  # jobs of this queue a fresh invocation leases per lease call
    budget_s: float | None
    fits: bool


def report(app_handlers: dict[str, object], options: WorkerOptions, lease_s: int) -> list[QueueReport]:
    """One row per registered handler (pure: no I/O)."""
    from sluice.worker.runtime.options import HandlerSpec

    rows = []
    budget = options.invocation_budget_ms
    for queue, spec in sorted(app_handlers.items()):
        assert isinstance(spec, HandlerSpec)
        timeout = spec.timeout_for(options)
        fits = budget is None or timeout <= budget
        per = options.lease_batch if budget is None else \
            min(options.lease_batch, (budget // max(1, timeout)) * options.concurrency) if fits else 0
        origin = "timeout_s" if spec.timeout_ms is not None else "default"
        rows.append(QueueReport(queue, timeout / 1000, origin, lease_s, options.lease_batch, int(per),
                                None if budget is None else budget / 1000, fits))
    return rows


NO_OPERATOR = ("OperatorPrincipalArns is empty: this deployment names no operator, so the operator API "
               "(/v1/admin/...) refuses everyone (403 NOT_OPERATOR) and no caller may use the priorities "
               "above MaxCallerPriority; name the operator roles to use them (docs/security.md)")

NO_DEPLOYERS = ("DeployerPrincipalArns is empty: CloudFormation will refuse this deploy (rule "
                "DeployersAreNamed). Name the roles your deploys run as: only they may invoke the stack's "
                "custom-resource functions and the default worker's routes registration (docs/deploy.md)")


def deployment_warnings(parameters: Mapping[str, str]) -> list[str]:
    """What a deploy with these parameters leaves unusable, though it is not an error (pure).

    A template without the parameter (a team's infra/worker.yaml) gets no warning about it."""
    out = []
    if "OperatorPrincipalArns" in parameters and not [
            a for a in str(parameters["OperatorPrincipalArns"]).split(",") if a.strip()]:
        out.append(NO_OPERATOR)
    if "DeployerPrincipalArns" in parameters and not [
            a for a in str(parameters["DeployerPrincipalArns"]).split(",") if a.strip()]:
        out.append(NO_DEPLOYERS)
    return out


def safety_net_warning(parameters: Mapping[str, str], queues: Iterable[str]) -> str | None:
    """The handlers' queues a team template's safety net (its ``Queues``) leaves out, if any (pure).

    infra/worker.yaml's ``Queues`` defaults to ``jobs``: a team that deploys with the default gets a
    safety net that drains a queue its code may not have, and none of those it has. A template
    without the parameter (Sluice's own, whose safety net is ``SafetyNetQueues``) gets no warning."""
    if "Queues" not in parameters:
        return None
    drained = [q.strip() for q in str(parameters["Queues"]).split(",") if q.strip()]
    handled = sorted(set(queues))
    missed = [q for q in handled if q not in drained]
    if not missed:
        return None
    return (f"the safety net (Queues: {','.join(drained)}) does not drain or reap {', '.join(missed)}: "
            "when the relay dispatches nothing (a relay outage, a lost dispatch) their jobs wait until it "
            "does; deploy with "
            f"--parameter-overrides Queues={','.join(handled)}")


MAX_NAME = 64  # the longest Lambda function name and IAM role name


def team_name_problems(parameters: Mapping[str, str]) -> list[str]:
    """The names a team's stacks give that AWS refuses as too long (pure; empty for Sluice's template).

    Each parameter's pattern admits its own length (SluiceStackName 41, TeamName 21 characters), and no
    CloudFormation rule can count characters, so together they admit names of up to 73 characters: the
    deploy of infra/team.yaml or infra/worker.yaml failed half-way on them."""
    if "TeamName" not in parameters or "SluiceStackName" not in parameters:
        return []
    stack, team = str(parameters["SluiceStackName"]), str(parameters["TeamName"])
    names = {"the team worker function (infra/worker.yaml)": f"{stack}-worker-{team}",
             "the team's registrar function and its role (infra/team.yaml)": f"{stack}-registrar-{team}",
             "the team worker's role (infra/team.yaml)": f"{stack}-team-{team}"}
    return [f"{what} would be named {name!r}, {len(name)} characters: AWS takes at most {MAX_NAME}; "
            f"SluiceStackName and TeamName may have {MAX_NAME - len('-registrar-')} characters together"
            for what, name in names.items() if len(name) > MAX_NAME]


def life_bound(parameters: Mapping[str, str], rotations: Mapping[str, str]) -> list[str]:
    """What in the Sluice stack's retentions and job id key rotation does not honour the life bound
    (``sluice.core.limits.life_bound_problems``; empty for a team's template, which has neither)."""
    import re

    from sluice.core import limits

    if "KafkaRetentionHours" not in parameters or "RetentionDays" not in parameters:
        return []
    rotation = rotations.get("JobIdSecretRotation", "")
    found = re.fullmatch(r"rate\((\d+) days?\)", rotation.strip())
    if found is None:
        return [f"JobIdSecretRotation's schedule {rotation!r} is not rate(<n> days): the key window "
                "is unknown"]
    return limits.life_bound_problems(int(parameters["KafkaRetentionHours"]),
                                      int(parameters["RetentionDays"]), rotation_days=int(found[1]))


def budget_check(parameters: Mapping[str, str], handler_queues: int) -> tuple[list[str], list[str]]:
    """(errors, warnings) of the Sluice stack's byte budgets against its Redis node type
    (``sluice.core.limits.budget_problems``; none for a team's template, which has no Redis). The
    queues counted: the allow-list's, else the handlers module's."""
    from sluice.core import limits

    if "CacheNodeType" not in parameters or "RedisBudgetBytes" not in parameters:
        return [], []
    allowed = [q for q in str(parameters.get("QueueAllowList", "")).split(",") if q.strip()]
    return limits.budget_problems(
        str(parameters["CacheNodeType"]), int(parameters["RedisBudgetBytes"]),
        int(parameters.get("QueueBudgetBytes", 0)), len(allowed) or handler_queues,
        int(parameters.get("RedisPushMemoryPercent", 0)), int(parameters.get("RedisShards", 1)))


def worker_function(functions: Mapping[str, FunctionConfig]) -> str:
    """WorkerFunction, else the one function whose environment names a handlers module."""
    if "WorkerFunction" in functions:
        return "WorkerFunction"
    workers = sorted(lid for lid, f in functions.items() if "SLUICE_HANDLERS_MODULE" in f.env)
    if len(workers) != 1:
        from sluice.core.errors import ConfigError

        names = ", ".join(workers) or "none"
        raise ConfigError(f"the template has {len(workers)} worker functions ({names}): "
                          "name one with --function")
    return workers[0]


@click.command()
@click.argument("handlers_module")
@click.option("--template", "template_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="The SAM template to deploy (default: this checkout's template.yaml).")
@click.option("--config-env", default=None, help="A samconfig.toml environment (as sam deploy --config-env).")
@click.option("--function", "logical_id", default=None,
              help="The worker function's logical id in the template (default: WorkerFunction, or the "
                   "template's only function with SLUICE_HANDLERS_MODULE, as in a team's infra/worker.yaml).")
@click.option("--parameter", "parameters", multiple=True, metavar="NAME=VALUE",
              help="A template parameter's value, as sam deploy --parameter-overrides (repeatable).")
def check(handlers_module: str, template_path: Path | None, config_env: str | None, logical_id: str | None,
          parameters: tuple[str, ...]) -> None:
    """Report, per queue of HANDLERS_MODULE, what a deploy gives it; exit 1 where one cannot run.

    Run it before `sam deploy`, with the same template and --config-env. A team's own worker
    template (infra/worker.yaml) is checked the same way.
    """
    from sluice.core.errors import ConfigError
    from sluice.entry.worker import load_app
    from sluice_dev.local.deployed import settings_of
    from sluice_dev.local.template import TEMPLATE, code_folder, load

    overrides = {}
    for item in parameters:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ConfigError(f"--parameter {item!r} is not NAME=VALUE")
        overrides[name] = value
    deploy = load(template_path or TEMPLATE, config_env, overrides=overrides)
    _refuse_undeployable(deploy.parameters, deploy.rotations)
    logical_id = logical_id or worker_function(deploy.functions)
    cfg = deploy.functions.get(logical_id)
    if cfg is None:
        raise ConfigError(f"{deploy.path} has no function {logical_id}")
    settings = settings_of(cfg.concrete_env(), handlers_module=handlers_module)
    if settings.function_timeout_s is None:
        raise ConfigError(f"{logical_id} does not pass SLUICE_FUNCTION_TIMEOUT_S (its Timeout) to its code")
    # The user's own module: where the deploy puts it (the function's CodeUri, /var/task in
    # Lambda), else in this folder, as `sluice dev` finds it.
    for folder in (os.getcwd(), *filter(None, [code_folder(deploy, cfg)])):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    app = load_app(handlers_module)
    options = WorkerOptions.from_settings(settings)
    rows = report(dict(app.handlers), options, settings.default_lease_seconds)
    warnings = deployment_warnings(deploy.parameters) + _budget_warnings(deploy.parameters, len(rows))
    undrained = safety_net_warning(deploy.parameters, app.handlers)
    warnings += [undrained] if undrained else []
    # Issue 33: handlers that import an HTTP client, in a deploy that gives them no way out.
    clients = egress.http_client_imports(handlers_module)
    no_way_out = egress.warning(deploy.parameters, clients)
    warnings += [no_way_out] if no_way_out else []
    if json_mode():
        emit({"function": logical_id, "template": str(deploy.path), "config_env": config_env,
              "timeout_s": cfg.timeout_s, "margin_s": options.margin_ms / 1000,
              "queues": [asdict(r) for r in rows], "warnings": warnings,
              "egress": egress.has_egress(deploy.parameters), "http_clients": [str(f) for f in clients]}, "")
    else:
        _print(logical_id, f"{deploy.path}{' at ' + config_env if config_env else ''}", cfg.timeout_s,
               options.margin_ms / 1000, rows)
        for warning in warnings:  # on stderr: stdout stays the table
            click.echo(f"warning: {warning}", err=True)
    bad = [r for r in rows if not r.fits]
    if not rows:
        _refuse(f"{handlers_module} registers no handler", "NO_HANDLER")
    if bad:
        _refuse(f"cannot run: {', '.join(r.queue for r in bad)}: a handler's timeout must be at most "
                f"{bad[0].budget_s:g} s here; lower its timeout_s or raise WorkerTimeoutSeconds",
                "HANDLER_DOES_NOT_FIT")


def _print(logical_id: str, where: str, timeout_s: Any, margin_s: float, rows: list[QueueReport]) -> None:
    click.echo(f"{logical_id} in {where}: Timeout {timeout_s} s, margin {margin_s:g} s, "
               f"budget per job {rows[0].budget_s if rows else '-'} s")
    click.echo(f"{'queue':<20} {'timeout':>9} {'from':<9} {'lease':>6} {'batch':>5} {'per lease':>9}  fits")
    for r in rows:
        click.echo(f"{r.queue:<20} {r.timeout_s:>8g}s {r.timeout_from:<9} {r.lease_s:>5}s {r.batch:>5} "
                   f"{r.per_invocation:>9}  {'yes' if r.fits else 'NO'}")


def _budget_warnings(parameters: Mapping[str, str], handler_queues: int) -> list[str]:
    """``budget_check``'s warnings; its errors refuse the deploy (issue 28, item 4: the byte
    budgets' total must fit the node)."""
    errors, warnings = budget_check(parameters, handler_queues)
    if errors:
        _refuse("the byte budgets do not fit Redis: " + "; ".join(errors) + " (docs/deploy.md, Byte budgets)",
                "BUDGET_OVER_NODE")
    return warnings


def _refuse_undeployable(parameters: Mapping[str, str], rotations: Mapping[str, str]) -> None:
    """Exit 1 for what no deploy of these parameters can do, before anything else, whatever the handlers."""
    mismatch = life_bound(parameters, rotations)
    if mismatch:  # issue 27, item 7
        _refuse("the job life bound is not honoured: " + "; ".join(mismatch)
                + " (docs/security.md, Records)", "LIFE_BOUND_MISMATCH")
    too_long = team_name_problems(parameters)
    if too_long:
        _refuse("cannot deploy: " + "; ".join(too_long), "NAME_TOO_LONG")


def _refuse(message: str, code: str) -> None:
    if json_mode():
        fail(message, 1, code)
    click.echo(message, err=True)
    sys.exit(1)


COMMANDS = [check]
