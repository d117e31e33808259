"""``sluice cost``: a month of Sluice for a workload, line by line, next to SQS + Lambda for the same work.

The figures are the cost model's (``sluice_dev.cost``: prices.toml, the profile, the model), the same
that docs/cost.md's tables are generated from. No AWS call, no stack: arithmetic only. A bad input (a
negative or non-finite number, an absurd volume, an unknown profile) is a usage error, exit code 2.
"""

from __future__ import annotations

import re
from typing import Any

import click

from sluice.core.errors import InvalidInput
from sluice_dev.cli.output import emit, json_mode
from sluice_dev.cost.model import (
    DEFAULT_EGRESS_KB,
    EGRESS_CHOICES,
    MAX_EGRESS_KB,
    MAX_HANDLER_SECONDS,
    MAX_JOBS_PER_MONTH,
    Bill,
    Estimate,
    Workload,
    bounded,
    estimate,
)
from sluice_dev.cost.numbers import count, money
from sluice_dev.cost.prices import PRICES_FILE, load
from sluice_dev.cost.profiles import Profile, profile

_SUFFIXES = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9}
_COUNT = re.compile(r"([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?)([kmb]?)")
SECONDS_PER_MONTH = 2_628_000


def parse_count(text: str) -> float:
    """'250k', '100M', '1B', '1.5m', '1,000,000', '2e6': jobs a month (range checked by the caller)."""
    found = _COUNT.fullmatch(text.strip().lower().replace(",", "").replace("_", ""))
    if found is None:
        raise InvalidInput(f"{text!r} is not a number of jobs (say 250k, 100M, 1B or 1500000)")
    return float(found[1]) * _SUFFIXES[found[2]]


class _Checked(click.ParamType):
    """A number read by ``parse`` and held between 0 and ``most``: anything else is a usage error."""

    def __init__(self, what: str, most: float, parse: Any = float) -> None:
        self.name, self.what, self.most, self.parse = what, what, most, parse

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, float):
            return value
        try:
            number = self.parse(str(value))
            bounded(self.what, number, self.most)
        except (InvalidInput, ValueError) as exc:
            self.fail(str(exc) if isinstance(exc, InvalidInput) else f"{value!r} is not a number", param, ctx)
        return float(number)


class _Profile(click.ParamType):
    name = "profile"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Profile:
        if isinstance(value, Profile):
            return value
        try:
            return profile(str(value))
        except InvalidInput as exc:
            self.fail(str(exc), param, ctx)


def _rows(bill: Bill, explain: bool) -> list[str]:
    per = bill.jobs_per_month / 1e6
    out = [f"{bill.name:<46} {'$ a month':>12} {'$ per M jobs':>13}"]

    def row(name: str, monthly: float) -> str:
        return f"  {name:<44} {money(monthly):>12} {money(monthly / per) if per else '-':>13}"

    for line in bill.lines:
        out.append(row(line.name, line.monthly))
        if explain:
            out.append(f"      {line.arithmetic}")
    out += [row("fixed", bill.fixed), row("variable", bill.variable), row("total", bill.monthly)]
    return out


def text(e: Estimate, explain: bool = False) -> str:
    w = e.workload
    rate = w.jobs_per_month / SECONDS_PER_MONTH
    book = load()
    reads = sorted({p.read for p in book.prices.values()})
    head = [f"profile {e.profile}, {count(w.jobs_per_month)} jobs a month ({rate:,.1f} a second), handler "
            f"{count(w.handler_seconds)} s, egress {w.egress}"
            + (f" ({count(w.egress_kb_per_job)} KB a job)" if w.egress != "none" else "")
            + ("" if w.keyed else ", no Idempotency-Key"),
            f"prices: {book.region}, on-demand, {PRICES_FILE.name} (read {reads[0]} to {reads[-1]})", ""]
    more = e.sluice.monthly - e.sqs.monthly
    tail = ["", f"Sluice costs {e.ratio:,.2f}× SQS + Lambda for this work (${money(more)} a month more); "
            "what that buys: docs/cost.md, \"Compared with SQS\"."]
    return "\n".join([*head, *_rows(e.sluice, explain), "", *_rows(e.sqs, explain), *tail])


def as_json(e: Estimate) -> dict[str, Any]:
    def bill(b: Bill) -> dict[str, Any]:
        per = b.jobs_per_month / 1e6
        return {"name": b.name, "monthly": b.monthly, "fixed_monthly": b.fixed,
                "variable_monthly": b.variable, "per_million": b.per_million,
                "lines": [{"name": line.name, "fixed": line.fixed, "monthly": line.monthly,
                           "per_million": line.monthly / per if per else None, "arithmetic": line.arithmetic}
                          for line in b.lines]}

    w = e.workload
    return {"profile": e.profile, "jobs_per_month": w.jobs_per_month, "handler_seconds": w.handler_seconds,
            "keyed": w.keyed, "egress": w.egress, "egress_kb_per_job": w.egress_kb_per_job,
            "region": load().region, "sluice": bill(e.sluice), "sqs_lambda": bill(e.sqs), "ratio": e.ratio}


@click.command("cost")
@click.option("--jobs-per-month", required=True,
              type=_Checked("jobs per month", MAX_JOBS_PER_MONTH, parse_count), metavar="JOBS",
              help="Jobs a month: 250k, 100M, 1B, or a plain number.")
@click.option("--profile", "chosen", type=_Profile(), default="standard", show_default=True,
              help="The deploy profile priced (template.yaml's Profile): small, standard (the template's "
                   "defaults) or large.")
@click.option("--handler-seconds", type=_Checked("handler seconds", MAX_HANDLER_SECONDS), default=0.0,
              metavar="S",
              show_default=True, help="Your handler's own run time a job, at the worker's memory.")
@click.option("--egress", type=click.Choice(EGRESS_CHOICES), default="none", show_default=True,
              help="The handlers' way out (template.yaml's HandlerEgress).")
@click.option("--egress-kb", type=_Checked("egress KB per job", MAX_EGRESS_KB), default=DEFAULT_EGRESS_KB,
              metavar="KB",
              show_default=True, help="KB a job sends and receives through the NAT gateway.")
@click.option("--keyed/--unkeyed", default=True, show_default=True,
              help="Whether each enqueue sends an Idempotency-Key (sluice.Client's keyed=).")
@click.option("--explain", is_flag=True, help="Print each line's arithmetic under it.")
def cost(jobs_per_month: float, chosen: Profile, handler_seconds: float, egress: str, egress_kb: float,
         keyed: bool, explain: bool) -> None:
    """What a month of jobs costs on Sluice, line by line, and on SQS + Lambda for the same work.

    \b
      sluice cost --jobs-per-month 100M
      sluice cost --jobs-per-month 1B --handler-seconds 0.2 --egress nat-single --json
    """
    workload = Workload(jobs_per_month, handler_seconds, keyed, egress, egress_kb)
    result = estimate(workload, chosen, load())
    if json_mode():
        emit(as_json(result), "")
    else:
        click.echo(text(result, explain))


COMMANDS = [cost]
