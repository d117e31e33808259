"""``sluice dev``: the whole pipeline on one machine, with the same code that runs in AWS.

- servers (``local.stack``): redis-server, the moto server (DynamoDB and S3), and
  Tansu storing to S3 on that moto server (or an existing Kafka);
- resources: the jobs topic and its dead-letter topic, the jobs and idempotency
  tables, the results bucket, and the examples' ledger table;
- the gateway: real HTTP on 127.0.0.1, each request turned into an API Gateway
  proxy event for the gateway handler (``http.local_server``);
- a local Lambda service (``local.lambdas``) running the relay and worker functions
  in warm container processes: EventBridge's part is played by a scheduler that
  invokes the relay every ``relay_every_s`` and the worker safety net every
  ``safety_net_every_s``; the relay dispatches workers through the Lambda Invoke
  API, exactly as in AWS;
- a fencing-aware HTTP sink for the ``notify`` example (``local.sink``).

Children get their configuration as ``SLUICE_*`` variables (``stack.settings_env``).
``DevStack.stop`` ends every child; ``run`` does so on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sluice.config import Settings
from sluice.local import servers
from sluice.local.lambdas import Function, LambdaApi, LocalLambda
from sluice.local.sink import FencedSink
from sluice.local.stack import STATE_DIR, Stack, settings_env
from sluice.models import is_reserved_queue

WORKER_FUNCTION = "sluice-worker"
RELAY_FUNCTION = "sluice-relay"
GATEWAY_FUNCTION = "sluice-gateway"
GATEWAY_TIMEOUT_MS = 29_000  # API Gateway's integration timeout
FUNCTIONS_DIR = Path(__file__).resolve().parents[3] / "functions"  # present in a source checkout


@dataclass
class DevOptions:
    state_dir: Path = STATE_DIR
    handlers: str = "sluice.examples"
    kafka_bootstrap: str | None = None  # an existing Kafka; else Tansu on S3
    workers: int = 4  # worker function concurrency (container processes)
    worker_timeout_s: int = 900
    worker_idle_s: float = 120.0
    relay_every_s: float = 30.0
    relay_timeout_s: float = 40.0
    safety_net_every_s: float = 10.0
    gateway_concurrency: int = 2  # gateway containers (processes)
    warm_workers: int = 1  # worker containers started ahead of the first dispatch
    history: bool = True
    log_level: str = "INFO"
    settings: dict[str, Any] = field(default_factory=dict)  # Settings overrides, e.g. worker_batch
    relay_handler: str | None = None  # "module:function" in place of the relay's own (sluice chaos)


def _handler_ref(function: str, fallback: str) -> str:
    """The function's own Lambda handler file in a source checkout, else the sluice call it wraps."""
    app = FUNCTIONS_DIR / function / "app.py"
    return f"{app}:handler" if app.exists() else fallback


def _warm_up_event() -> dict[str, Any]:
    from sluice.http.local_server import build_event

    return build_event("GET", "/v1/openapi.json", [("Accept", "application/json")], None)


def scheduled_event() -> dict[str, Any]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {"version": "0", "id": f"local-{time.time_ns()}", "detail-type": "Scheduled Event",
            "source": "aws.events", "account": "000000000000", "time": now, "region": "us-east-1",
            "resources": ["arn:aws:events:us-east-1:000000000000:rule/sluice-relay-local"], "detail": {}}


class DevStack:
    def __init__(self, options: DevOptions) -> None:
        self.options = options
        self.stack = Stack(state_dir=options.state_dir, kafka_bootstrap=options.kafka_bootstrap)
        self.settings: Settings | None = None
        self.lambdas: LocalLambda | None = None
        self.lambda_api: LambdaApi | None = None
        self.gateway: Any = None
        self.sink: FencedSink | None = None
        self.endpoints: dict[str, Any] = {}
        self._stop = threading.Event()
        self._scheduler: threading.Thread | None = None
        self._log_handler: logging.Handler | None = None

    @property
    def logs(self) -> Path:
        return self.options.state_dir / "logs"

    # -- start ---------------------------------------------------------------------------------------

    def start(self, progress: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
        """Start everything and write endpoints.json; on any failure stop what was started."""
        o = self.options
        self.stack.claim()  # raises StackRunning before anything starts
        try:
            self._check_handlers()
            for key, value in servers.DUMMY_AWS_ENV.items():
                os.environ.setdefault(key, value)
            history = (o.state_dir / "history.jsonl").resolve() if o.history else None
            if history is not None:
                history.unlink(missing_ok=True)
            base = Settings(**{"handlers_module": o.handlers,
                               "history_path": str(history) if history else None,
                               "worker_function_name": WORKER_FUNCTION, **o.settings})
            self._log_to_file()
            progress("starting redis, moto and the Kafka broker")
            s = self.stack.start_servers(base)
            self.sink = FencedSink().start()
            lambda_port = servers.free_port()
            s = s.model_copy(update={"lambda_endpoint_url": f"http://127.0.0.1:{lambda_port}"})
            self.settings = s
            progress("starting the local Lambda service; creating topics, tables and buckets")
            self.lambdas = LocalLambda(self._functions(s), self.logs).start()
            self.lambda_api = LambdaApi(self.lambdas, port=lambda_port).start()
            # Cold starts (imports, clients) overlap the resource creation; neither warm-up
            # touches a table or a topic.
            warm_up = {"queues": ["echo"], "batch": 1, "source": "warm-up"}
            warm = [self.lambdas.invoke(WORKER_FUNCTION, warm_up)
                    for _ in range(min(o.warm_workers, o.workers))]
            warm += [self.lambdas.invoke(GATEWAY_FUNCTION, _warm_up_event(), asynchronous=False)
                     for _ in range(o.gateway_concurrency)]
            self._ensure_resources(s)
            for inv in warm:
                inv.done.wait(30)
            self.gateway = self._serve_gateway()
            self._scheduler = threading.Thread(target=self._schedule, name="sluice-schedule", daemon=True)
            self._scheduler.start()
            self.endpoints = {
                "gateway_url": self.gateway.url,
                "lambda_url": self.lambda_api.url,
                "sink_url": self.sink.url,
                "handlers": o.handlers,
                "history_path": str(history) if history else None,
                "log_dir": str(self.logs.resolve()),
                "state_dir": str(o.state_dir.resolve()),
                "kafka_topic": s.kafka_topic,
                "tansu": "tansu" in self.stack.servers,
            }
            self.stack.write_endpoints(self.endpoints)
            self.endpoints = {**self.endpoints, **self._written()}
        except BaseException:
            self.stop()
            raise
        return self.endpoints

    def _written(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.options.state_dir / "endpoints.json").read_text())
        return data

    def _log_to_file(self) -> None:
        """This process's own log lines (the HTTP front, the Lambda service) go to logs/dev.log,
        not to the terminal, where the endpoints block should stay readable."""
        self.logs.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(self.logs / "dev.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger = logging.getLogger("sluice")
        logger.addHandler(handler)
        logger.propagate = False
        self._log_handler = handler

    def _check_handlers(self) -> None:
        """Import the handlers module here first: a typo is one clear error, not crashing workers."""
        from sluice.runtime.lambda_entry import load_app

        cwd = os.getcwd()
        if cwd not in sys.path:
            sys.path.insert(0, cwd)  # the user's own module, as the children will see it
        load_app(self.options.handlers)

    def _ensure_resources(self, s: Settings) -> None:
        import boto3

        from sluice.examples import LEDGER_TABLE
        from sluice.kafka.producer import ensure_topics
        from sluice.store import tables

        ensure_topics(s)
        tables.ensure_all(s)
        client = boto3.client("dynamodb", region_name=s.aws_region, endpoint_url=s.aws_endpoint_url)
        tables._create_table(client, LEDGER_TABLE, "pk", "expires_at")

    def _child_env(self, s: Settings, service: str) -> dict[str, str]:
        assert self.sink is not None
        path = os.pathsep.join(p for p in (os.getcwd(), os.environ.get("PYTHONPATH", "")) if p)
        return {**servers.DUMMY_AWS_ENV, **settings_env(s), "PYTHONPATH": path,
                "POWERTOOLS_SERVICE_NAME": service, "POWERTOOLS_LOG_LEVEL": self.options.log_level,
                "POWERTOOLS_METRICS_NAMESPACE": "Sluice", "SLUICE_EXAMPLES_SINK_URL": self.sink.url}

    def _functions(self, s: Settings) -> list[Function]:
        o = self.options
        worker_env = self._child_env(s, WORKER_FUNCTION)
        relay_env = {**self._child_env(s, RELAY_FUNCTION),
                     "SLUICE_RELAY_STOP_BEFORE_MS": str(min(s.relay_stop_before_ms,
                                                           int(o.relay_timeout_s * 1000) // 4))}
        return [
            Function(GATEWAY_FUNCTION, _handler_ref("gateway", "sluice.local.container:gateway"),
                     GATEWAY_TIMEOUT_MS, o.gateway_concurrency, self._child_env(s, GATEWAY_FUNCTION),
                     idle_s=3600),
            Function(WORKER_FUNCTION, _handler_ref("worker", "sluice.runtime.lambda_entry:handle_dispatch"),
                     o.worker_timeout_s * 1000, o.workers, worker_env, idle_s=o.worker_idle_s),
            # Two at most: the next scheduled run starts while the previous one hands over.
            Function(RELAY_FUNCTION,
                     o.relay_handler or _handler_ref("relay", "sluice.relay_control:run_scheduled"),
                     int(o.relay_timeout_s * 1000), 2, relay_env, idle_s=o.relay_every_s * 3),
        ]

    def _serve_gateway(self) -> Any:
        """HTTP on 127.0.0.1; each request becomes a proxy event for a gateway container.

        Containers, not threads: Powertools' resolver keeps the current event in a class
        attribute, so two requests in one process would see each other's headers and body.
        Lambda never runs two requests in one process, and neither do we.
        """
        from sluice.http.local_server import LocalGateway

        lambdas = self.lambdas
        assert lambdas is not None

        def handler(event: dict[str, Any], _context: Any) -> dict[str, Any]:
            inv = lambdas.invoke(GATEWAY_FUNCTION, event, asynchronous=False)
            answered = inv.done.wait(GATEWAY_TIMEOUT_MS / 1000 + 5)
            if answered and inv.error is None and isinstance(inv.result, dict):
                result: dict[str, Any] = inv.result
                return result
            # What API Gateway answers when its Lambda integration fails or times out.
            status, title = (503, "Service Unavailable") if self._stop.is_set() else \
                (502, "Bad Gateway") if answered else (504, "Gateway Timeout")
            detail = "sluice dev is stopping" if status == 503 else \
                f"the gateway function failed: {inv.error}"
            if status != 503:
                logging.getLogger("sluice.local.dev").warning("%s %s: %s", event.get("httpMethod"),
                                                             event.get("path"), detail)
            body = {"type": "about:blank", "title": title, "status": status, "detail": detail}
            return {"statusCode": status, "headers": {"Content-Type": "application/problem+json"},
                    "body": json.dumps(body)}

        return LocalGateway([handler] * self.options.gateway_concurrency).start()

    # -- EventBridge's part ----------------------------------------------------------------------------

    def _schedule(self) -> None:
        o = self.options
        next_relay = next_safety = time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            try:
                if now >= next_relay:
                    next_relay = now + o.relay_every_s
                    self.invoke_relay()
                if now >= next_safety:
                    next_safety = now + o.safety_net_every_s
                    self.invoke_safety_net()
            except Exception as exc:  # a hiccup must not stop the schedule
                logging.getLogger("sluice.local.dev").warning("schedule: %s", exc)
            self._stop.wait(min(next_relay, next_safety) - time.monotonic())

    def invoke_relay(self) -> None:
        if self.lambdas is not None:
            self.lambdas.invoke(RELAY_FUNCTION, scheduled_event())

    def invoke_safety_net(self) -> None:
        """Drain and reap every queue with work in Redis, as the scheduled worker rule does in AWS."""
        if self.lambdas is None or self.settings is None:
            return
        from sluice import wiring

        engine = wiring.queue(self.settings)
        queues = []
        for name in engine.queues():
            if is_reserved_queue(name):  # Sluice's own (the relay's partition jobs): never a worker's
                continue
            st = engine.stats(name)
            if st.ready or st.delayed or st.leased:
                queues.append(name)
        if queues:
            event = {"queues": queues[:50], "batch": self.settings.worker_batch, "source": "safety-net"}
            self.lambdas.invoke(WORKER_FUNCTION, event)

    # -- stop ----------------------------------------------------------------------------------------

    def stop(self) -> None:
        self._stop.set()
        if self._scheduler is not None:
            self._scheduler.join(5)
        parts = [p for p in (self.gateway, self.lambda_api, self.lambdas, self.sink) if p is not None]
        # In parallel: each HTTP server takes up to its poll interval (0.5 s) to notice.
        threads = [threading.Thread(target=_quietly, args=(p.stop,)) for p in parts]
        for t in threads:
            t.start()
        for t in threads:
            t.join(15)
        self.gateway = self.lambda_api = self.lambdas = self.sink = None
        self.stack.stop()
        if self._log_handler is not None:
            logger = logging.getLogger("sluice")
            logger.removeHandler(self._log_handler)
            logger.propagate = True
            self._log_handler.close()
            self._log_handler = None

    def wait(self) -> None:
        """Block until ``request_stop`` (a signal handler calls it)."""
        while not self._stop.wait(0.2):
            pass

    def request_stop(self) -> None:
        self._stop.set()

    def stop_functions(self) -> None:
        """Stop the schedule and every container, and leave the servers up (to be read, then ``stop``)."""
        self._stop.set()
        if self._scheduler is not None:
            self._scheduler.join(5)
        if self.lambdas is not None:
            self.lambdas.stop()


def _quietly(fn: Callable[[], None]) -> None:
    with contextlib.suppress(Exception):
        fn()


def describe(endpoints: dict[str, Any]) -> list[tuple[str, str]]:
    """The short block ``sluice dev`` prints: (name, value) rows."""
    kafka = endpoints.get("kafka_bootstrap", "?")
    broker = "Tansu, storing to S3 on moto" if endpoints.get("tansu") else "existing broker"
    return [
        ("gateway", f"{endpoints.get('gateway_url')}   POST /v1/queues/<queue>/jobs"),
        ("redis", str(endpoints.get("redis_url"))),
        ("kafka", f"{kafka}   ({broker}, topic {endpoints.get('kafka_topic')})"),
        ("dynamodb", f"{endpoints.get('dynamodb_endpoint')}   (moto; S3 too)"),
        ("workers", f"{endpoints.get('handlers')} via {endpoints.get('lambda_url')}"),
        ("state", f"{endpoints.get('state_dir', '.sluice')}/  (endpoints.json, logs/, history.jsonl)"),
    ]


@contextlib.contextmanager
def signals_stop(stack: DevStack) -> Any:
    """SIGTERM, SIGINT and SIGHUP stop the stack; the previous handlers come back afterwards."""
    previous = {}

    def handler(signum: int, _frame: Any) -> None:
        stack.request_stop()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        previous[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
