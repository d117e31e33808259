"""``sluice top``: queue depths, throughput and lease health, refreshing live.

Throughput is how fast jobs leave the queues: the drop in ready + delayed + in
flight + dead, plus what arrived meanwhile, is not observable from Redis alone, so
on the local stack it is read from the workers' history (acks per second); against
a deployment it shows the change in depth per second. Lease health is the number of
leases past their deadline that nobody has reclaimed yet (a crashed or frozen
worker); the relay reaps them within seconds.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from typing import Any

import click
from rich.console import Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from sluice.backends.redis.keys import QueueKeys
from sluice.core.models import QueueStats, is_reserved_queue
from sluice_dev.cli.ops import age, api_rows, console, rate, stats_row
from sluice_dev.cli.output import emit, json_mode
from sluice_dev.cli.target import Target
from sluice_dev.local import history


@dataclass
class Sample:
    at: float
    stats: list[QueueStats]
    overdue: dict[str, int]
    acks: int | None


@dataclass
class TopState:
    target: Target
    previous: Sample | None = None
    history_offset: int = 0
    acks: int = 0
    rates: dict[str, float] = field(default_factory=dict)

    def sample(self) -> Sample:
        remote = api_rows(self.target)  # a deployed API without Redis: the operator API
        if remote is not None:
            return Sample(time.monotonic(), [st for st, _o, _r in remote],
                          {st.queue: overdue for st, overdue, _r in remote}, None)
        engine = self.target.engine()
        names = [q for q in engine.queues() if not is_reserved_queue(q)]
        stats = [engine.stats(q) for q in names]
        now_ms = _redis_ms(engine.client)
        overdue = {q: int(engine.client.zcount(QueueKeys(q).leased, 0, now_ms)) for q in names}
        acks = self._acks()
        return Sample(time.monotonic(), stats, overdue, acks)

    def _acks(self) -> int | None:
        path = (self.target.local or {}).get("history_path")
        if not path:
            return None
        if self.previous is None and self.history_offset == 0:
            with contextlib.suppress(OSError):  # count from now on: the history may be long
                self.history_offset = os.path.getsize(path)
        events, self.history_offset = history.read(path, self.history_offset)
        self.acks += sum(1 for e in events if e.get("op") == "ack" and e.get("outcome") == "ok")
        return self.acks

    def as_data(self, s: Sample) -> dict[str, Any]:
        """The snapshot for --json: each queue's row (as ``sluice queues --json``) with its overdue
        leases, and the acks counted so far (null for a deployed stack). Rates are left to the
        reader: two lines' depths and ``at`` give them."""
        self.previous = s
        return {"at": time.time(), "where": self.target.where, "acked_since_start": s.acks,
                "queues": [{**stats_row(st), "overdue_leases": s.overdue.get(st.queue, 0)} for st in s.stats]}

    def render(self, s: Sample, *, live: bool = True) -> Any:
        prev, self.previous = self.previous, s
        dt = (s.at - prev.at) if prev else 0.0
        table = Table(title=f"sluice top - {self.target.where}", title_justify="left")
        for col in ("queue", "ready", "delayed", "in flight", "overdue leases", "dead", "oldest ready",
                    "Δ depth/s", "rate", "state"):
            table.add_column(col, justify="left" if col in ("queue", "rate", "state") else "right")
        before = {st.queue: st for st in prev.stats} if prev else {}
        for st in s.stats:
            depth = st.ready + st.delayed + st.leased
            old = before.get(st.queue)
            delta = "-"
            if old is not None and dt > 0:
                delta = f"{(depth - old.ready - old.delayed - old.leased) / dt:+.1f}"
            overdue = s.overdue.get(st.queue, 0)
            table.add_row(st.queue, str(st.ready), str(st.delayed), str(st.leased),
                          f"[red]{overdue}[/]" if overdue else "0", str(st.dead), age(st.oldest_ready_age_ms),
                          delta, rate(st.config), "[yellow]paused[/]" if st.config.paused else "running")
        if s.acks is not None and prev is not None and prev.acks is not None and dt > 0:
            per_s = (s.acks - prev.acks) / dt
            line = f"throughput: {per_s:.1f} jobs/s finished   acked since start: {s.acks}"
        elif s.acks is not None:
            line = f"throughput: measuring...   acked since start: {s.acks}"
        else:
            line = "throughput: see Δ depth/s (no worker history for a deployed stack)"
        return Group(table, Text(line), *([Text("Ctrl-C to quit", style="dim")] if live else []))


def _redis_ms(client: Any) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


@click.command()
@click.option("--interval", type=click.FloatRange(0.2, 60), default=1.0, show_default=True,
              help="Seconds between refreshes.")
@click.option("--once", is_flag=True, help="Print one snapshot and exit.")
@click.pass_obj
def top(target: Target, interval: float, once: bool) -> None:
    """Live queue depths, throughput and lease health."""
    state = TopState(target)
    while json_mode():  # one JSON line per refresh
        emit(state.as_data(state.sample()), "")
        if once:
            return
        time.sleep(interval)
    if once:
        console().print(state.render(state.sample(), live=False))
        return
    with Live(state.render(state.sample()), refresh_per_second=4, screen=False) as live:
        while True:
            time.sleep(interval)
            live.update(state.render(state.sample()))


COMMANDS = [top]
