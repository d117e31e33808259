"""Cold start of each function, from the BUILT artifacts, against `import boto3`.

Prints one JSON object per function of ``functions/`` (all eight; issue 30, item 3):
  {"bench": "cold_start", "function", "import_ms", "first_call_ms", "boto3_import_ms", ...}

It builds the template for this machine (``infra/artifacts.py``: x86_64, python3.12, the
layer with its precompiled bytecode), or measures ``--artifacts DIR`` (a build folder), and
starts redis-server, the moto server and Tansu. For each function it starts fresh python3.12
processes (``-I -S``) with only that function's bundle and the built layer on the path, as
Lambda lays them out, configured from the template as ``sluice dev`` does, and times:

- ``import_ms``: importing the handler module (Lambda's init phase: the gateway and the
  worker build their adapters then; the worker also loads and checks its handlers module);
- ``first_call_ms``: the first invocation, with the adapters built on that call, up to the end
  of its first unit of work: the gateway enqueues one job (Kafka acknowledges it); the worker
  drains an empty queue; the relay, whose invocation runs for most of a minute by design,
  until it has pushed its first job into Redis. Before each relay round the bench appends one
  fresh job to Kafka (``RELAY_QUEUE``), so the relay always has one to push; the driver sees
  the push on the event bus (``events.Pushed``), as any observer does. The rest of the
  relay's window (polling an empty topic, then the hand-over) is idle time, not cold start,
  and is reported apart as ``relay_call_ms``. (Until session 4 the relay ran a 300 ms pass
  that ended whenever its adapters were built, so it timed an idle wait and, on a slow
  round, no work at all.);
- ``boto3_import_ms``: ``import boto3`` alone from the same layer, the yardstick;
- ``cpu_*``: the same in CPU time (see ``_figures``);
- ``redis_loaded``, ``modules``: whether redis-py was imported by then (the gateway's enqueue
  path needs none), and how many modules were;
- ``at_import``: which of the heavy libraries (redis, kafka, jsonschema, boto3, Powertools' event
  handler) the handler's import loaded: none should (``tests/tooling/test_cold_imports.py``);
- ``cpu_import_ratio_spread``, ``cpu_total_ratio_spread``: the lowest and highest per-round ratio;
  ``cpu_first_call_ratio``: the first call alone against the yardstick.

The operator's first call is an operator's ``GET /v1/admin/queues`` (every queue's stats from Redis;
its HTTP surface is built on it since session 36). The functions without a first call here
(``FIRST_CALLS``: the internal, firings, events and countdown functions, whose first unit of work needs a
caller this bench does not play) are timed at import only (``first_call_ms`` null). ``--profile
FUNCTION`` (a logical id) adds one round under cProfile and logs the first call's heaviest entries,
cumulative CPU: what dominates it.

Each figure is the median of ROUNDS fresh processes, each run right after a yardstick run; the
ratios are medians of the per-round ratios (this machine's load comes and goes). The targets
(issue 14): import within 1.5x boto3's, import plus first call within 3x (``import_ratio``,
``total_ratio``).

``--against DIR`` (another build folder, e.g. main's) times that build's function in every round
too, right beside this one's and after the same yardstick, the two in alternating order: its own
figures under ``against``, and ``vs_against_cpu_import`` (and ``_first_call``, ``_total``) the median
[lowest, highest] of the per-round ratios, this build's CPU over that one's (below 1: this build costs
less). Load that comes and goes then moves both sides of a round alike.

``--traces`` (issue 31, item 6) runs each round twice, right after each other: traces off, then on
(``SLUICE_TRACES``; the OpenTelemetry API with no SDK, what Sluice itself adds: the exporter is the
deployer's), with the same input (the gateway's request and the relay's record carry a
``traceparent``, so spans are made). It adds ``traces_import_ratio``, ``traces_total_ratio`` (on/off:
medians of the per-round ratios, wall clock), their CPU forms and their spreads; the target: within
1.1 (10%).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import emit, log
from infra import artifacts
from sluice_dev.local.api_server import LOCAL_OPERATOR as OPERATOR

ROUNDS = 5
FUNCTIONS = ("GatewayFunction", "OperatorFunction", "InternalFunction", "FiringsFunction", "RelayFunction",
             "WorkerFunction", "EventsFunction", "CountdownFunction")  # every function of functions/
HEAVY = ("redis", "kafka", "jsonschema", "boto3", "aws_lambda_powertools.event_handler")
EVENTS = Path(__file__).resolve().parent.parent / "tests" / "events"

DRIVER = r"""
import json, sys, time
task, opt, ref, event, timeout_ms, rie, until, profile = sys.argv[1:9]
sys.path[:0] = [task, opt]
sys.path.insert(2, rie)  # the rie's folder, for its Context (stdlib only), after the layer
from lambda_rie import Context
module_name, _, name = ref.rpartition(".")
c0, t0 = time.process_time(), time.perf_counter()
import importlib
handler = getattr(importlib.import_module(module_name), name)
c1, t1 = time.process_time(), time.perf_counter()
at_import = [m for m in HEAVY if m in sys.modules]
if until == "none":  # timed at import only
    print(json.dumps({"import_ms": (t1 - t0) * 1000, "import_cpu_ms": (c1 - c0) * 1000,
                      "at_import": at_import, "modules": len(sys.modules), "result": "import only"}))
    sys.exit(0)
pushed_at = []
if until == "first-push":  # inside the timed call: the relay imports both on its first call anyway
    from sluice.core import bus as events
    from sluice.entry import root as wiring
    def on_push(e):
        if e.outcome == "ok" and e.pushed:
            pushed_at.append((time.process_time(), time.perf_counter()))
    wiring.events().subscribe(on_push, events.Pushed)
if profile == "1":
    import cProfile, pstats
    profiler = cProfile.Profile(time.process_time)
    profiler.enable()
result = handler(json.loads(event), Context("bench", int(timeout_ms), "cold-start"))
c2, t2 = time.process_time(), time.perf_counter()
if profile == "1":
    profiler.disable()
    pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(45)
if until == "first-push" and not pushed_at:
    sys.exit(f"the relay pushed nothing within its window: {str(result)[:500]}")
c_end, t_end = pushed_at[0] if pushed_at else (c2, t2)
print(json.dumps({"import_ms": (t1 - t0) * 1000, "first_call_ms": (t_end - t1) * 1000,
                  "import_cpu_ms": (c1 - c0) * 1000, "first_call_cpu_ms": (c_end - c1) * 1000,
                  "call_ms": (t2 - t1) * 1000, "redis_loaded": "redis" in sys.modules,
                  "at_import": at_import, "modules": len(sys.modules), "result": str(result)[:200]}))
""".replace("HEAVY", repr(HEAVY))

BOTO3 = r"""
import json, sys, time
sys.path[:0] = [sys.argv[1]]
c0, t0 = time.process_time(), time.perf_counter()
import boto3
print(json.dumps([(time.perf_counter() - t0) * 1000, (time.process_time() - c0) * 1000]))
"""


def _run(python: str, args: list[str], env: dict[str, str], code: str, *, show_stderr: bool = False) -> str:
    # -B: Lambda's /opt and /var/task are read-only, so no process can leave bytecode behind for the next
    out = subprocess.run([python, "-I", "-S", "-B", "-c", code, *args], env=env, capture_output=True,
                         text=True, timeout=120, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{args[:3]} failed:\n{out.stderr[-3000:]}")
    if show_stderr:
        log(out.stderr)
    return out.stdout.strip().splitlines()[-1]


RELAY_QUEUE = "cold-start"  # no worker drains it in this run
RELAY_WINDOW_MS = 20_000  # the relay's time before its stop_before: room for its first push, loaded (4 s
# was too short on a machine shared with other builds: a round failed with no push, before and after;
# 10 s too, once, with five helpers building: the relay had not taken its partitions)


def _operator_event() -> dict[str, Any]:
    """An operator's ``GET /v1/admin/queues`` (every queue's stats, from Redis), signed by ``sluice dev``'s
    operator (``OPERATOR``, on the function's allow-list here)."""
    event = json.loads((EVENTS / "apigw_get_queue.json").read_text())
    context = event["requestContext"]
    event.update(path="/v1/admin/queues", resource="/v1/admin/queues", pathParameters=None)
    event["requestContext"] = {**context, "path": "/live/v1/admin/queues", "resourcePath": "/v1/admin/queues",
                               "identity": {**context["identity"], "userArn": OPERATOR}}
    return event  # type: ignore[no-any-return]


def _events() -> dict[str, tuple[dict[str, Any], int, str]]:
    """Per function with a first call (``FIRST_CALLS``): its event, the invocation's remaining time
    (the relay's: beyond its own stop_before), and where its first call ends."""
    return {
        "GatewayFunction": (json.loads((EVENTS / "apigw_enqueue.json").read_text()), 29_000, "return"),
        "OperatorFunction": (_operator_event(), 29_000, "return"),
        "RelayFunction": (json.loads((EVENTS / "scheduled_relay.json").read_text()),
                          RELAY_WINDOW_MS, "first-push"),
        "WorkerFunction": ({"queues": ["echo"], "batch": 10, "source": "relay"}, 300_000, "return"),
    }


TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"  # --traces: the input's trace


def _append_one_job(env: Mapping[str, str], traceparent: str | None = None) -> None:
    """One fresh job in Kafka for the relay's next round, minted and sealed as the gateway writes it."""
    from sluice.backends.kafka.producer import KafkaJobLog
    from sluice.core import ids, seal
    from sluice.core.clock import wall_ms
    from sluice.core.models import JobSpec
    from sluice_dev.local.deployed import settings_of

    s = settings_of(env)
    if s.job_id_secret is None:
        raise RuntimeError("the relay's environment has no SLUICE_JOB_ID_SECRET to sign the bench's job")
    now = wall_ms()
    key = s.job_id_secret.get_secret_value().encode()
    # Minted and sealed as the gateway writes it: the relay pushes nothing else (issue 27).
    spec = seal.seal_spec(JobSpec(job_id=ids.mint(now, RELAY_QUEUE, key), queue=RELAY_QUEUE,
                                  payload={"bench": "cold_start"}, enqueued_at_ms=now,
                                  traceparent=traceparent), key)
    log = KafkaJobLog.from_settings(s)
    try:
        log.append([spec])
    finally:
        log.close()


def _fresh(event: dict[str, Any], traceparent: str | None = None) -> dict[str, Any]:
    """``event`` with a new Idempotency-Key, if it has one: with the recorded event's key, every
    round after the first would time a replay of the first round's response (no Kafka producer,
    no admission view), not an enqueue. ``traceparent``: a request's header too (``--traces``)."""
    headers = event.get("headers") or {}
    if "Idempotency-Key" not in headers:
        return event
    key = f"cold-start-{uuid.uuid4().hex}"
    extra = {"Idempotency-Key": key} | ({} if traceparent is None else {"traceparent": traceparent})
    multi = {**(event.get("multiValueHeaders") or {}), **{k: [v] for k, v in extra.items()}}
    return {**event, "headers": {**headers, **extra}, "multiValueHeaders": multi}


FIRST_CALLS = ("GatewayFunction", "OperatorFunction", "RelayFunction", "WorkerFunction")


def _figures(runs: list[dict[str, Any]], yardstick: list[list[float]]) -> dict[str, Any]:
    """Medians of the rounds; each ratio is the median of the per-round ratios to the yardstick run
    beside it. Wall clock is the target's measure; CPU time (``cpu_*``: the process's, all its
    threads) is beside it because on a loaded machine waiting for a CPU swells wall clock, most
    of all in the first call, whose servers compete for the same cores."""
    rounds = list(zip(runs, yardstick, strict=True))

    def med(values: Iterable[float]) -> float:
        return round(statistics.median(values), 1)

    def ratios(fields: tuple[str, ...], clock: int) -> list[float]:
        return [float(sum(r[f] for f in fields)) / b[clock] for r, b in rounds]

    def ratio(fields: tuple[str, ...], clock: int) -> float:
        return round(statistics.median(ratios(fields, clock)), 2)

    def spread(fields: tuple[str, ...]) -> list[float]:
        values = ratios(fields, 1)
        return [round(min(values), 2), round(max(values), 2)]

    imports = {"import_ms": med(r["import_ms"] for r in runs),
               "boto3_import_ms": med(b[0] for b in yardstick),
               "import_ratio": ratio(("import_ms",), 0),
               "cpu_import_ms": med(r["import_cpu_ms"] for r in runs),
               "cpu_boto3_import_ms": med(b[1] for b in yardstick),
               "cpu_import_ratio": ratio(("import_cpu_ms",), 1),
               "cpu_import_ratio_spread": spread(("import_cpu_ms",))}
    if "first_call_ms" not in runs[0]:
        return {**imports, "first_call_ms": None}
    return {**imports, "first_call_ms": med(r["first_call_ms"] for r in runs),
            "total_ratio": ratio(("import_ms", "first_call_ms"), 0),
            "cpu_first_call_ms": med(r["first_call_cpu_ms"] for r in runs),
            "cpu_first_call_ratio": ratio(("first_call_cpu_ms",), 1),
            "cpu_total_ratio": ratio(("import_cpu_ms", "first_call_cpu_ms"), 1),
            "cpu_total_ratio_spread": spread(("import_cpu_ms", "first_call_cpu_ms"))}


def _against_figures(runs: list[dict[str, Any]], others: list[dict[str, Any]]) -> dict[str, Any]:
    """This build's CPU over the other's (``--against``), round by round: median and spread."""
    kinds = {"import": ("import_cpu_ms",)}
    if "first_call_cpu_ms" in runs[0]:
        kinds |= {"first_call": ("first_call_cpu_ms",), "total": ("import_cpu_ms", "first_call_cpu_ms")}
    out: dict[str, Any] = {}
    for name, fields in kinds.items():
        values = [sum(a[f] for f in fields) / sum(b[f] for f in fields)
                  for a, b in zip(runs, others, strict=True)]
        out[f"vs_against_cpu_{name}"] = round(statistics.median(values), 2)
        out[f"vs_against_cpu_{name}_spread"] = [round(min(values), 2), round(max(values), 2)]
    return out


def _env_of(dev: Any, functions: Mapping[str, Any], logical_id: str) -> dict[str, str]:
    """The function's environment as ``sluice dev`` runs it; the stream functions, which ``sluice dev``
    plays in-process, get the template's own (their import reads none of it)."""
    from sluice_dev.local import servers

    try:
        return dict(functions[dev.function(logical_id).name].env)
    except StopIteration:
        return {**servers.DUMMY_AWS_ENV, **dev.deploy.functions[logical_id].concrete_env()}


def _round(python: str, args: list[str], event: dict[str, Any], fn_env: dict[str, str],
           env: dict[str, str], traceparent: str | None = None) -> dict[str, Any]:
    """One fresh process: the handler's import, then (unless ``args[6]`` is "none") its first call."""
    if args[6] == "first-push":
        _append_one_job(fn_env, traceparent)
    args = [*args[:3], json.dumps(_fresh(event, traceparent)), *args[4:]]
    return dict(json.loads(_run(python, args, env, DRIVER, show_stderr=args[7] == "1")))


def _traces_figures(off: list[dict[str, Any]], on: list[dict[str, Any]]) -> dict[str, Any]:
    """Traces on against off (``--traces``): per-round ratios of the pair run side by side, medians
    and spreads; wall clock and CPU."""
    def ratios(fields: tuple[str, ...], cpu: bool) -> list[float]:
        names = tuple(f.replace("_ms", "_cpu_ms") if cpu else f for f in fields)
        return [sum(b[f] for f in names) / sum(a[f] for f in names) for a, b in zip(off, on, strict=True)]

    out: dict[str, Any] = {"traces_import_ms": round(statistics.median(r["import_ms"] for r in on), 1)}
    kinds = [("import", ("import_ms",))]
    if "first_call_ms" in off[0]:
        kinds.append(("total", ("import_ms", "first_call_ms")))
        out["traces_first_call_ms"] = round(statistics.median(r["first_call_ms"] for r in on), 1)
    for name, fields in kinds:
        for cpu in (False, True):
            values = ratios(fields, cpu)
            key = f"traces_{'cpu_' if cpu else ''}{name}_ratio"
            out[key] = round(statistics.median(values), 3)
            out[key + "_spread"] = [round(min(values), 3), round(max(values), 3)]
    return out


def measure(build: Path, state: Path, yardstick_layer: Path | None = None, *, rounds: int = ROUNDS,
            only: tuple[str, ...] = FUNCTIONS, profile: str | None = None,
            traces: bool = False, against: Path | None = None) -> list[dict[str, Any]]:
    from sluice.backends.dynamodb import tables
    from sluice.backends.kafka.producer import ensure_topics
    from sluice_dev.local import servers
    from sluice_dev.local.dev import DevOptions, DevStack
    from sluice_dev.local.stack import Stack

    for key, value in servers.DUMMY_AWS_ENV.items():
        os.environ.setdefault(key, value)  # this process creates the topics and tables on moto
    python = artifacts.python312()
    rie_dir = str(Path(artifacts.__file__).resolve().parent)
    stack = Stack(state_dir=state)
    try:
        # handlers=None: the template's default handlers module, what a deployed worker loads
        # (sluice_dev.examples, the local stack's default, is dev tooling and not in the layer).
        dev = DevStack(DevOptions(state_dir=state, artifacts=build, history=False, log_level="WARNING",
                                  artifacts_python=python, handlers=None))
        base = dev.deploy.functions["WorkerFunction"].concrete_env()
        from sluice_dev.local.deployed import settings_of

        # redis-server with each function's ACL user, as sluice dev runs it (ElastiCache RBAC).
        dev.redis_users = dev._plan_redis_users()
        stack.redis_users = list(dev.redis_users.values())
        s = stack.start_servers(settings_of(base))
        ensure_topics(s)
        tables.ensure_all(s)
        functions = {f.name: f for f in dev.prepare(s, "http://127.0.0.1:9")}
        import boto3

        dev.ensure_function_tables(boto3.client("dynamodb", region_name=s.aws_region,
                                                endpoint_url=s.aws_endpoint_url))  # parking lot, registry
        env_base = {**servers.DUMMY_AWS_ENV, "PATH": "/usr/bin:/bin"}
        opt = str(build / "SharedLayer" / "python")
        boto3_from = str(yardstick_layer or opt)
        rows = []
        calls = _events()
        for logical_id in only:
            event, timeout_ms, until = calls.get(logical_id, ({}, 0, "none"))
            fn_env = _env_of(dev, functions, logical_id)
            env = {**env_base, **fn_env}
            if logical_id == "OperatorFunction":  # the first call's caller, on its allow-list
                env["SLUICE_OPERATOR_PRINCIPALS"] = OPERATOR
            if until == "first-push":
                timeout_ms += settings_of(fn_env).relay_stop_before_ms
            handler = dev.deploy.functions[logical_id].handler

            args = [str(build / logical_id), opt, handler, "", str(timeout_ms), rie_dir, until, "0"]
            runs, yardstick, traced, others = [], [], [], []
            tp = TRACEPARENT if traces else None
            other = None if against is None else \
                [str(against / logical_id), str(against / "SharedLayer" / "python"), *args[2:]]
            for n in range(rounds):  # the yardstick right beside each run: load here comes and goes
                yardstick.append(json.loads(_run(python, [boto3_from], env_base, BOTO3)))
                if other is not None and n % 2:  # --against: the other build first every other round
                    others.append(_round(python, other, event, fn_env, env, tp))
                runs.append(_round(python, args, event, fn_env, env, tp))
                if other is not None and not n % 2:
                    others.append(_round(python, other, event, fn_env, env, tp))
                if traces:  # the same, traced, right after: its pair in this round
                    traced.append(_round(python, args, event, fn_env, {**env, "SLUICE_TRACES": "true"}, tp))
            if profile == logical_id and until != "none":
                log(f"{logical_id}: the first call under cProfile (CPU time), heaviest cumulative entries:")
                _round(python, [*args[:7], "1"], event, fn_env, env)
            log(f"{logical_id}: {runs[-1]['result']}")
            last = runs[-1]
            rows.append({"function": logical_id, **_figures(runs, yardstick), "at_import": last["at_import"],
                         "redis_loaded": last.get("redis_loaded"), "modules": last["modules"],
                         **({"relay_call_ms": round(statistics.median(r["call_ms"] for r in runs), 1)}
                            if until == "first-push" else {}),
                         **(_traces_figures(runs, traced) if traces else {}),
                         **({"against": _figures(others, yardstick), **_against_figures(runs, others)}
                            if others else {})})
        return rows
    finally:
        stack.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--artifacts", type=Path, default=None,
                        help="a sam build folder (default: build one)")
    parser.add_argument("--yardstick", type=Path, default=None,
                        help="time `import boto3` from this site folder instead of the build's layer: to "
                             "compare a build without bytecode against the precompiled boto3 Lambda's "
                             "runtime has, give a precompiled layer's python/ folder")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="fresh processes per function")
    parser.add_argument("--only", nargs="+", choices=FUNCTIONS, default=list(FUNCTIONS),
                        help="these functions only (logical ids)")
    parser.add_argument("--profile", choices=FIRST_CALLS, default=None,
                        help="one more round of this function under cProfile: what its first call spends")
    parser.add_argument("--against", type=Path, default=None,
                        help="another build folder (main's, say) timed in every round too: this build's CPU "
                             "over that one's, round by round")
    parser.add_argument("--traces", action="store_true",
                        help="each round also with SLUICE_TRACES on, right after: the traces' cost (on/off)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sluice-cold-") as tmp:
        build = args.artifacts or artifacts.build(Path(tmp) / "x86", "x86_64")
        for row in measure(build, Path(tmp) / "state", args.yardstick, rounds=args.rounds,
                           only=tuple(args.only), profile=args.profile, traces=args.traces,
                           against=args.against):
            emit("cold_start", **row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
