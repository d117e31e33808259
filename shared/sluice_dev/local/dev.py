"""``sluice dev``: the whole pipeline on one machine, with the same code that runs in AWS.

- servers (``local.stack``): redis-server, the moto server (DynamoDB and S3), and
  Tansu storing to S3 on that moto server (or an existing Kafka);
- resources: the jobs topic and its dead-letter topic, the jobs and idempotency
  tables, the results bucket, and the examples' ledger table;
- the API: real HTTP on 127.0.0.1, each request turned into an API Gateway proxy event for
  the public function, or the operator function for ``/v1/admin/...`` (``local.api_server``);
- a local Lambda service (``local.lambdas``) running the relay and worker functions
  in warm container processes: EventBridge's part is played by a scheduler that
  invokes the relay every ``relay_every_s`` and the worker safety net every
  ``safety_net_every_s``; the relay dispatches workers through the Lambda Invoke
  API, exactly as in AWS;
- a fencing-aware HTTP sink for the ``notify`` example (``local.sink``), and a service running the
  fence middleware for the ``ledger`` example's notice (``local.service``).

Every function's configuration (Timeout, MemorySize, environment, reserved concurrency,
schedules and their inputs) comes from ``template.yaml`` at its parameters' defaults, or at a
``samconfig.toml`` environment's values (``config_env``), through ``local.deployed.plan``.
What differs locally is a named ``Override`` (``DevStack.overrides``), printed by ``sluice dev``
at start-up; where the local servers are is a named binding (``deployed.BINDINGS``).
``DevStack.stop`` ends every child; ``run`` does so on Ctrl-C or SIGTERM.

Every invocation is decided as IAM decides it (``local.access``, issue 27): each function's
containers sign with their own key, which names the role the template gives the function, and each
function's resource policy is the template's.
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
from typing import TYPE_CHECKING, Any, Final

from sluice.core.config import Settings
from sluice.core.errors import ConfigError
from sluice.core.models import is_reserved_queue
from sluice_dev.local import access as iam
from sluice_dev.local import deployed, redis_users, servers
from sluice_dev.local.api_server import LOCAL_OPERATOR
from sluice_dev.local.deployed import LocalChanges, LocalFunction, Override
from sluice_dev.local.job_id_secret import key_in_secrets_manager
from sluice_dev.local.lambdas import Function, Invocation, LambdaApi, LocalLambda
from sluice_dev.local.redis_users import LocalRedisUser
from sluice_dev.local.service import FencedService
from sluice_dev.local.sink import FencedSink
from sluice_dev.local.stack import STATE_DIR, Stack, _env_text
from sluice_dev.local.teams import TeamStack
from sluice_dev.local.template import IMPORT, TEMPLATE, DeployConfig, code_folder, load

if TYPE_CHECKING:
    from sluice.core.routes import RouteTable
    from sluice_dev.local.scheduler import LocalScheduler

WORKER_FUNCTION = deployed.NAMES["WorkerFunction"]
RELAY_FUNCTION = deployed.NAMES["RelayFunction"]
GATEWAY_FUNCTION = deployed.NAMES["GatewayFunction"]
OPERATOR_FUNCTION = deployed.NAMES["OperatorFunction"]
INTERNAL_FUNCTION = deployed.NAMES["InternalFunction"]
FIRINGS_FUNCTION = deployed.NAMES["FiringsFunction"]
REGISTRAR_FUNCTION = deployed.NAMES["RegistrarFunction"]  # Sluice's registrar (issue 31)
TEAM_MAP_FUNCTION = deployed.NAMES["TeamMapFunction"]  # outside the VPC in AWS (issue 33)
SCHEDULER_FUNCTION = deployed.NAMES["SchedulerFunction"]
# The local scheduler function calls the moto server's EventBridge Scheduler in its default group
# (template.yaml's group and the firings dead-letter queue are a deploy's); sluice dev's own scheduler
# still fires the schedules from the table, as moto's does not fire them.
MOTO_SCHEDULE_GROUP = "default"
# The stream's countdown runs in sluice dev's own process (no event source mapping locally); it
# signs as the template's CountdownFunction would (its role, its key).
COUNTDOWN_KEY = iam.key_of("sluice-countdown")
ROUTES_TABLE = "sluice-routes"  # the local routes table (template.yaml's RoutesTable)
SCHEDULES_TABLE = "sluice-schedules"  # the local schedules table (template.yaml's SchedulesTable)
PARKED_TABLE = "sluice-parked"  # the local parking lot (template.yaml's ParkedTable)
PAYLOADS_BUCKET = "sluice-payloads"  # the local payloads bucket (template.yaml's PayloadsBucket, issue 28)
QUEUES_TABLE = "sluice-queues"  # the local durable registry of queues (template.yaml's QueuesTable)
SCHEDULE_TICK_S = 1.0  # how often the local scheduler looks for due firings (a minute is the finest)
STACK_NAME = "sluice"  # so a team's function is sluice-worker-<team>, the relay's naming convention
# The infra team's deploy role, as DeployerPrincipalArns names it (the rule DeployersAreNamed wants
# one): the principal CloudFormation acts for when it sends Sluice's custom resources.
LOCAL_DEPLOYER = f"arn:aws:iam::000000000000:role/{STACK_NAME}-deployer"
DEFAULT_REGISTRATION = "DefaultWorkerRegistration"  # template.yaml's custom resource for the default worker
LOCAL_LAYER = "arn:aws:lambda:us-east-1:000000000000:layer:sluice-local:1"  # the checkout stands in
FUNCTIONS_DIR = Path(__file__).resolve().parents[3] / "functions"  # present in a source checkout


# Tansu on S3 answers a fetch with what it read from its storage within the fetch's max wait:
# with the relay's 100 ms a loaded local stack read nothing at all (a 3-shard chaos run stalled
# at 4,693 of 10,000 jobs; a probe on its broker read 0 records at 100-150 ms, 1 at 250-350, 148
# at 500, 354 at 1,000). A real Kafka answers with what it holds at once; the wait only bounds
# an idle fetch, which is why the relay's own default is short (docs/relay.md, "The fetch").
TANSU_FETCH_MAX_WAIT_MS = 500
TANSU_WHY = "Tansu on S3 returns only what its storage read within the fetch wait (docs/relay.md)"
LOCAL_OPERATOR_WHY = ("OperatorPrincipalArns is empty, so the template names no operator (it fails closed); "
                      "locally the tooling's caller (X-Sluice-Local-Caller) is named, so the console and "
                      "the operator API work (docs/security.md)")


def api_payload(profile: str) -> str:
    """The payload version of the events the profile's API sends: the small profile's HTTP API sends 2.0
    (template.yaml, ``Profiles`` mapping's ``Api``), the REST API of the others 1.0."""
    return "2.0" if profile == "small" else "1.0"


@dataclass
class DevOptions:
    """How a local stack differs from the template. Every field left None takes the template's
    value; one that is set becomes a named override (``DevStack.overrides``)."""

    state_dir: Path = STATE_DIR
    template: Path = TEMPLATE
    config_env: str | None = None  # a samconfig.toml environment, e.g. dev
    parameters: dict[str, str] = field(default_factory=dict)  # template parameter values (as sam deploy)
    # The WorkerHandlersModule parameter. The template deploys no handlers (issue 19 item 4); the
    # local stack runs the examples unless told otherwise, as `sam deploy --parameter-overrides`
    # would: a parameter value, not a difference from the deployed shape.
    handlers: str | None = "sluice_dev.examples"
    kafka_bootstrap: str | None = None  # an existing Kafka; else Tansu on S3
    redis_shards: int = 1  # above 1: a local Redis cluster of that many masters (the RedisShards parameter)
    # The template's Profile parameter (small, standard, large; issue 33): small's API is an HTTP API,
    # so the local API server then sends payload 2.0 events (``api_payload``).
    profile: str | None = None
    attach: dict[str, str] | None = None  # servers already running, kept when this stack stops (Stack.attach)
    workers: int = 4  # worker containers at once (the template leaves the worker unreserved)
    worker_timeout_s: int | None = None
    worker_idle_s: float = 120.0
    relay_every_s: float | None = None
    relay_timeout_s: float | None = None
    safety_net_every_s: float | None = None
    gateway_concurrency: int = 2  # gateway containers (processes); unreserved in the template
    warm_workers: int = 1  # worker containers started ahead of the first dispatch
    history: bool = True
    # Route the bus to the queue `sluice events` reads. Off for `sluice chaos`, which reads the
    # whole stream after its drain: moto's SQS scans every message it holds on each delivery
    # (Queue.attributes), so an unread queue makes each publish slower than the last.
    follow_events: bool = True
    log_level: str = "INFO"
    # The job id key in the moto server's Secrets Manager (SLUICE_JOB_ID_SECRET_ARN, as deployed),
    # not given as SLUICE_JOB_ID_SECRET: it can then rotate (``sluice chaos``'s rotate_job_id_key).
    job_id_key_secret: bool = False
    settings: dict[str, Any] = field(default_factory=dict)  # Settings overrides, e.g. worker_batch
    relay_handler: str | None = None  # "module:function" in place of the relay's own (sluice chaos)
    why: str = "set by the caller"  # the reason printed beside the overrides above
    # A `sam build` folder: run the BUILT functions, each with only its bundle and the layer on
    # its path (infra/lambda_rie.py), under ``artifacts_python`` (the runtime's python3.12).
    artifacts: Path | None = None
    artifacts_python: str = "python3.12"
    # Teams' worker functions (`sluice dev --worker NAME=MODULE`): each configured from its own
    # template (infra/worker.yaml at TeamName=NAME, HandlersModule=MODULE), with its own pool of
    # warm containers, named sluice-worker-NAME, its queues routed to it in the routes table.
    team_workers: tuple[tuple[str, str], ...] = ()
    team_containers: int | None = None  # each team's local containers (None: as many as ``workers``)
    team_template: Path = FUNCTIONS_DIR.parent / "infra" / "worker.yaml"

    def deploy(self) -> DeployConfig:
        params = dict(self.parameters)
        if self.redis_shards > 1:
            params["RedisShards"] = str(self.redis_shards)
        if self.profile is not None:
            params["Profile"] = self.profile
        if self.handlers is not None:
            params["WorkerHandlersModule"] = self.handlers
        # A parameter value, as `sam deploy` must pass one: the role the local stack's
        # CloudFormation requests act for (Sluice's registrar admits its deployers alone).
        params.setdefault("DeployerPrincipalArns", LOCAL_DEPLOYER)
        # The console's timeline page on the local stack (JobTimelineSeconds is 0, off, by default in AWS).
        params.setdefault("JobTimelineSeconds", "600")
        return load(self.template, self.config_env, overrides=params, stack_name=STACK_NAME)

    def team_deploys(self) -> dict[str, tuple[str, DeployConfig]]:
        """NAME -> (module, its template resolved at TeamName=NAME, HandlersModule=MODULE)."""
        out: dict[str, tuple[str, DeployConfig]] = {}
        for name, module in self.team_workers:
            if name in out:
                raise ConfigError(f"--worker {name}= is given twice")
            params = {"SluiceStackName": STACK_NAME, "TeamName": name, "HandlersModule": module,
                      "SluiceLayerArn": LOCAL_LAYER}
            # Each team's stack its own name: its rule's ARN (the SourceArn its policy admits) is
            # the team's alone, as a deployed rule's generated name is.
            out[name] = (module, load(self.team_template, overrides=params, stack_name=team_stack_name(name)))
        return out


def team_function_name(team: str) -> str:
    return f"{STACK_NAME}-worker-{team}"


def team_stack_name(team: str) -> str:
    """The local name of team ``team``'s own stack (infra/worker.yaml)."""
    return f"{team}-worker"


def team_function_id(deploy: DeployConfig) -> str:
    """The one worker function of a team's template (the function naming a handlers module)."""
    found = [lid for lid, f in deploy.functions.items() if "SLUICE_HANDLERS_MODULE" in f.env]
    if len(found) != 1:
        raise ConfigError(f"{deploy.path} must declare exactly one worker function, not {len(found)}")
    return found[0]


def _handler_ref(function: str, fallback: str) -> str:
    """The function's own Lambda handler file in a source checkout, else the sluice call it wraps."""
    app = FUNCTIONS_DIR / function / "app.py"
    return f"{app}:handler" if app.exists() else fallback


# The queue the warm-ups name: the workers' (an empty lease) and the gateways' (its view).
WARM_UP_QUEUE = "echo"


def warm_up_event() -> dict[str, Any]:
    """A gateway container's first request: a queue's view, which builds the Api (its clients) and
    reads the routes and the queue, as an enqueue's would, and writes nothing. Not the OpenAPI
    document: generating it (Powertools' models, every route's JSON Schema) took 0.66 CPU-s in each
    container, for a document that most stacks never serve."""
    from sluice_dev.local.api_server import build_event

    return build_event("GET", f"/v1/queues/{WARM_UP_QUEUE}", [("Accept", "application/json")], None)


def scheduled_event() -> dict[str, Any]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {"version": "0", "id": f"local-{time.time_ns()}", "detail-type": "Scheduled Event",
            "source": "aws.events", "account": "000000000000", "time": now, "region": "us-east-1",
            "resources": ["arn:aws:events:us-east-1:000000000000:rule/sluice-relay-local"], "detail": {}}


class DevStack:
    def __init__(self, options: DevOptions) -> None:
        self.options = options
        self.deploy = options.deploy()  # ConfigError now, before anything starts
        self.api_payload = api_payload(self.deploy.parameters.get("Profile", "standard"))
        self.teams = options.team_deploys()
        if self.teams and options.artifacts is not None:
            raise ConfigError("--worker runs teams' functions from this checkout; not with --artifacts")
        if options.artifacts is not None and (options.handlers or "").split(".")[0] == "sluice_dev":
            raise ConfigError(f"--artifacts runs the built functions, whose layer holds no dev tooling, so "
                              f"not the handlers module {options.handlers}: pass --handlers with a module "
                              "that ships in functions/worker/ (template.yaml, WorkerHandlersModule)")
        self.stack = Stack(state_dir=options.state_dir, kafka_bootstrap=options.kafka_bootstrap,
                           redis_shards=options.redis_shards, attach=options.attach)
        self.local_functions: list[LocalFunction] = []
        self.team_functions: dict[str, LocalFunction] = {}  # team -> its worker function
        self.team_stacks: dict[str, TeamStack] = {}  # team -> infra/team.yaml as the infra team deploys it
        self._servers: Settings | None = None  # where the local servers are (prepare)
        self.overrides: list[Override] = []
        self.access: iam.Access | None = None  # who may invoke which function (prepare)
        self.settings: Settings | None = None
        self.lambdas: LocalLambda | None = None
        self.lambda_api: LambdaApi | None = None
        self.gateway: Any = None
        self.sink: FencedSink | None = None
        self.service: FencedService | None = None
        self.endpoints: dict[str, Any] = {}
        self.routes: list[str] = []  # "pattern -> function" registered at start (with --worker)
        # Each function's Redis ACL user (logical id, or team:<name>), as ElastiCache RBAC in AWS.
        self.redis_users: dict[str, LocalRedisUser] = {}
        self._stop = threading.Event()
        self._scheduler: threading.Thread | None = None
        self.schedules: LocalScheduler | None = None  # EventBridge Scheduler's part (issue 17)
        self._events_thread: threading.Thread | None = None
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
            worker_cfg = self.deploy.functions["WorkerFunction"]
            base = deployed.settings_of({**worker_cfg.concrete_env(), **self._settings_env()},
                                        history_path=str(history) if history
                                        else o.settings.get("history_path"))
            self._log_to_file()
            self.redis_users = self._plan_redis_users()
            self.stack.redis_users = list(self.redis_users.values())
            progress("starting redis, moto and the Kafka broker")
            s = self.stack.start_servers(base)
            if o.job_id_key_secret:
                s = key_in_secrets_manager(s)
            self.sink = FencedSink().start()
            self.service = FencedService(s.redis_url).start()
            lambda_port = servers.free_port()
            s = s.model_copy(update={"lambda_endpoint_url": f"http://127.0.0.1:{lambda_port}",
                                     "routes_table": s.routes_table or ROUTES_TABLE,
                                     "schedules_table": s.schedules_table or SCHEDULES_TABLE,
                                     "parked_table": s.parked_table or PARKED_TABLE,
                                     "payloads_bucket": s.payloads_bucket or PAYLOADS_BUCKET,
                                     "queues_table": s.queues_table or QUEUES_TABLE})
            functions = self.prepare(s, self.sink.url)
            s = self.settings or s
            progress("starting the local Lambda service; creating topics, tables and buckets")
            self.lambdas = LocalLambda(functions, self.logs, access=self.access).start()
            self.lambda_api = LambdaApi(self.lambdas, port=lambda_port).start()
            # Cold starts (imports, clients) overlap the resource creation; neither warm-up
            # touches a table or a topic.
            warm_up = {"queues": [WARM_UP_QUEUE], "batch": 1, "source": "warm-up"}
            warm = [self.lambdas.invoke(WORKER_FUNCTION, warm_up)
                    for _ in range(min(o.warm_workers, o.workers))]
            warm += [self.lambdas.invoke(team.name, {**warm_up, "queues": [self._first_queue(name)]})
                     for name, team in self.team_functions.items()]
            # Sluice's registrar's container starts now too (an event it refuses), ready to register.
            warm.append(self.lambdas.invoke(REGISTRAR_FUNCTION, {"warm-up": True},
                                            caller=self.deployer_caller()))
            self._ensure_resources(s)
            events_queue = self._start_events(s)
            self.routes = self._register_routes(s)
            # The gateway reads the routes on its warm-up: only once every worker's are
            # registered, or it could keep a table with some of them for route_cache_ttl_s.
            warm += self._warm_gateways()
            for inv in warm:
                inv.done.wait(30)
            self.gateway = self._serve_gateway()
            self._scheduler = threading.Thread(target=self._schedule, name="sluice-schedule", daemon=True)
            self._scheduler.start()
            self.endpoints = {
                "gateway_url": self.gateway.url,
                "lambda_url": self.lambda_api.url,
                "sink_url": self.sink.url,
                "service_url": self.service.url,
                "handlers": s.handlers_module,
                "workers": [{"name": n, "function": team_function_name(n), "handlers": m}
                            for n, (m, _d) in self.teams.items()],
                "routes": self.routes,
                "template": str(o.template),
                "config_env": o.config_env,
                "overrides": [row.line() for row in self.overrides],
                "history_path": str(history) if history else None,
                "log_dir": str(self.logs.resolve()),
                "state_dir": str(o.state_dir.resolve()),
                "kafka_topic": s.kafka_topic,
                "routes_table": s.routes_table,
                # the registry (`sluice queues` reads its parked counters): the gateway's, as the
                # tooling's settings are the worker's, which has none
                "queues_table": self._registry_table() or s.queues_table,
                "tansu": "tansu" in self.stack.servers,
                "events_queue_url": events_queue,
                "redis_users": {u.username: u.role.name for u in self.redis_users.values()},
                "redis_default_user": redis_users.DEFAULT_USER_WHY,
            }
            self.stack.write_endpoints(self.endpoints)
            self.endpoints = {**self.endpoints, **self._written()}
        except BaseException:
            self.stop()
            raise
        return self.endpoints

    def _warm_gateways(self) -> list[Invocation]:
        """The public function's containers answer a queue's view (``warm_up_event``); the other
        split functions start one container each (imports, Settings), with an event they refuse."""
        assert self.lambdas is not None
        warm = [self.lambdas.invoke(GATEWAY_FUNCTION, warm_up_event(), asynchronous=False)
                for _ in range(self.options.gateway_concurrency)]
        return warm + [self.lambdas.invoke(name, {"warm-up": True}, asynchronous=False)
                       for name in (OPERATOR_FUNCTION, INTERNAL_FUNCTION)]

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
        """Import the handlers modules here first: a typo is one clear error, not crashing workers."""
        from sluice.entry.worker import load_app

        cwd = os.getcwd()
        if cwd not in sys.path:
            sys.path.insert(0, cwd)  # the user's own module, as the children will see it
        load_app(self.default_module)
        for name, (module, _deploy) in self.teams.items():
            # A team's module in its template's CodeUri (worker/ in infra/worker.yaml), as `sluice check`
            # and its own function (PYTHONPATH) find it, else in this folder.
            folder = self._team_code(name)
            if folder is not None and folder not in sys.path:
                sys.path.insert(0, folder)
            if not load_app(module).handlers:
                raise ConfigError(f"--worker {name}={module}: the module registers no handler")

    def _team_code(self, team: str) -> str | None:
        """The folder of team ``team``'s own code: its template's CodeUri, if that is a folder here."""
        deploy = self.teams[team][1]
        return code_folder(deploy, deploy.functions[team_function_id(deploy)])

    @property
    def default_module(self) -> str:
        return self.deploy.functions["WorkerFunction"].concrete_env()["SLUICE_HANDLERS_MODULE"]

    def _plan_redis_users(self) -> dict[str, LocalRedisUser]:
        """A Redis user per function that reads Redis, and per team one whose keys are the queues
        of its handlers (the queues routed to it), as template.yaml and infra/team.yaml create them."""
        from sluice.entry.worker import load_app

        functions = {lid: name for lid, name in deployed.NAMES.items() if lid in self.deploy.functions}
        teams = {team: (team_function_name(team), sorted(load_app(module).handlers))
                 for team, (module, _deploy) in self.teams.items()}
        return redis_users.plan(functions, teams)

    def _first_queue(self, team: str) -> str:
        from sluice.entry.worker import load_app

        return sorted(load_app(self.teams[team][0]).handlers)[0]

    def _register_routes(self, s: Settings) -> list[str]:
        """Every worker function's queues become its routes, as each one's Custom::SluiceRoutes
        does at deploy time: the default worker's, and the schedules its code declares, through
        Sluice's registrar (template.yaml's DefaultWorkerRegistration, issue 31), and each team's
        through its registrar (infra/team.yaml; infra/worker.yaml's TeamRoutes), which registers only
        what the team map gives the team. So, as deployed, the gateway refuses a queue no handler has
        (404 NO_ROUTE, under UnroutedQueues=refuse) and a typed queue's bad payload (400). A queue
        two modules handle is a RouteConflict, and a refused declared schedule a RegistrationRefused:
        the stack does not start."""
        from sluice_dev.local import teams

        lines = _route_lines(self.register_default(s=s), WORKER_FUNCTION)
        if not self.team_stacks:
            return lines
        teams.put_team_map(s, list(self.team_stacks.values()))
        for team in self.team_stacks:
            lines += _route_lines(self.register_team(team, s), team_function_name(team))
        return lines

    def register_default(self, s: Settings | None = None, kind: str = "Create",
                         properties: dict[str, Any] | None = None, check: bool = True) -> dict[str, Any]:
        """CloudFormation's request for template.yaml's DefaultWorkerRegistration to Sluice's registrar,
        acting for the deployer, and its answer; with ``check``, a refusal raises."""
        from sluice_dev.local import teams

        props = {"ServiceToken": REGISTRAR_FUNCTION, "Owner": "sluice", "Function": WORKER_FUNCTION,
                 "HandlersModule": self.default_module, **(properties or {})}
        stack_id = f"arn:aws:cloudformation:us-east-1:000000000000:stack/{STACK_NAME}/local"
        answer = self._custom_resource(
            REGISTRAR_FUNCTION, kind, stack_id, props, f"sluice-registrar:sluice:{WORKER_FUNCTION}",
            self.deployer_caller(), self.function("RegistrarFunction").timeout_s, s, DEFAULT_REGISTRATION)
        return teams.raise_refusal("sluice", answer, "Sluice's default worker") if check else (answer or {})

    def register_team(self, team: str, s: Settings | None = None, kind: str = "Create",
                      properties: dict[str, Any] | None = None, stack_id: str | None = None,
                      check: bool = True) -> dict[str, Any]:
        """CloudFormation's Custom::SluiceRoutes request to ``team``'s registrar (infra/worker.yaml's
        TeamRoutes), and its answer; with ``check``, a refusal raises (RouteConflict, ...)."""
        from sluice_dev.local import teams

        stack = self.team_stacks[team]
        # CloudFormation invokes it acting for the stack operation's principal: the team's deployer.
        answer = self._custom_resource(
            stack.registrar, kind, stack_id or f"arn:aws:cloudformation:us-east-1:000000000000:stack/"
            f"{team}-worker/local", {"ServiceToken": stack.registrar, **(properties or {})},
            f"sluice-registrar:{team}:{team_function_name(team)}", iam.Caller(stack.deployer_arn),
            stack.registrar_timeout_s, s)
        return teams.raise_refusal(team, answer) if check else (answer or {})

    def _custom_resource(self, function: str, kind: str, stack_id: str, properties: dict[str, Any],
                         physical_id: str, caller: iam.Caller, timeout_s: float, s: Settings | None,
                         logical_id: str | None = None) -> dict[str, Any] | None:
        """A Custom::SluiceRoutes request sent to ``function`` as CloudFormation sends it (its answer
        PUT to a ResponseURL on the moto server's S3), and the answer read back."""
        from sluice_dev.local import teams

        s = s or self._servers
        assert self.lambdas is not None and s is not None
        bucket = teams.ResponseBucket(s)
        key, url = bucket.url()
        event = teams.cfn_event(kind, stack_id, url, properties, None if kind == "Create" else physical_id)
        if logical_id is not None:
            event["LogicalResourceId"] = logical_id
        inv = self.lambdas.invoke(function, event, asynchronous=False, caller=caller)
        inv.done.wait(timeout_s + 5)
        answer = bucket.answer(key, timeout_s=5)
        if answer is None and inv.error:
            answer = {"Status": "FAILED", "Reason": f"the registrar failed: {inv.error}"}
        return answer

    def deployer_caller(self) -> iam.Caller:
        """CloudFormation acting for the stack operation's principal: the first DeployerPrincipalArns."""
        return iam.Caller(self.deploy.parameters["DeployerPrincipalArns"].split(",")[0])

    def ensure_function_tables(self, client: Any) -> None:
        """The tables only some functions name (the workers' settings, which ``tables.ensure_all``
        reads, name neither): the relay's parking lot and the gateway's registry of queues (issue 28)."""
        from sluice.backends.dynamodb import tables

        parked = self.function("RelayFunction").env.get("SLUICE_PARKED_TABLE")
        if parked:
            tables.create_parked_table(client, parked)
        registry = self._registry_table()
        if registry:
            tables.create_queues_table(client, registry)

    def _registry_table(self) -> str | None:
        """The durable registry of queues, as the gateway names it (issue 28)."""
        return self.function("GatewayFunction").env.get("SLUICE_QUEUES_TABLE")

    def _ensure_resources(self, s: Settings) -> None:
        import boto3

        from sluice.backends.dynamodb import tables
        from sluice.backends.kafka.producer import ensure_topics
        from sluice_dev.examples import LEDGER_TABLE

        ensure_topics(s)
        tables.ensure_all(s)
        client = boto3.client("dynamodb", region_name=s.aws_region, endpoint_url=s.aws_endpoint_url)
        tables._create_table(client, LEDGER_TABLE, "pk", "expires_at")
        self.ensure_function_tables(client)
        table = self.function("OperatorFunction").env.get("SLUICE_SCHEDULES_TABLE")
        if table:  # the operator function's (the workers' settings, s, name no schedules table)
            from sluice.backends.dynamodb.schedules import DynamoScheduleStore
            from sluice_dev.local.scheduler import LocalScheduler

            tables.create_schedules_table(client, table)
            self.schedules = LocalScheduler(DynamoScheduleStore(client, table).every, self.fire_schedule)

    def fire_schedule(self, event: dict[str, Any]) -> None:
        """EventBridge Scheduler's invoke of the firings function with one firing (asynchronous, as
        Scheduler's), as the role Scheduler assumes (SchedulerInvokeRole)."""
        if self.lambdas is not None:
            self.lambdas.invoke(FIRINGS_FUNCTION, event, caller=self.scheduler_caller())

    def scheduler_caller(self) -> iam.Caller:
        return iam.Caller(iam.role_arn(STACK_NAME, "SchedulerInvokeRole"))

    def fire_schedules(self) -> None:
        if self.schedules is not None:
            self.schedules.tick()

    def _start_events(self, s: Settings) -> str:
        """Completion events on moto: the stream poller (Lambda's event source mapping, which moto
        lacks) feeding the events function's ``Publisher``, and the bus routed to an SQS queue
        that ``sluice events --follow`` reads. Returns that queue's URL."""
        import boto3

        from sluice.entry import root as wiring
        from sluice.streams.completion.publish import batch_failures
        from sluice_dev.local.streams import (
            FOLLOW_QUEUE,
            StreamPoller,
            ensure_bus,
            ensure_jobs_stream,
            stream_consumers,
        )

        worker = self.settings or s
        queue_url = ensure_bus(worker, FOLLOW_QUEUE if self.options.follow_events else None)
        publisher = wiring.completion_publisher(worker)
        # The stream's countdown (the countdown function in AWS) on the same records: a child whose
        # process died before its in-process countdown is counted here (docs/flows.md, Failure).
        countdown = self._countdown(worker) if worker.internal_function_name else None
        client = boto3.client("dynamodbstreams", region_name=s.aws_region, endpoint_url=s.aws_endpoint_url)
        consumers = [publisher.publish, *([countdown.recount] if countdown else [])]
        poller = StreamPoller(client, ensure_jobs_stream(worker), lambda event: batch_failures(
            stream_consumers(event["Records"], *consumers)))
        self._events_thread = threading.Thread(target=poller.run, args=(self._stop,), name="sluice-events",
                                               daemon=True)
        self._events_thread.start()
        return queue_url

    def _countdown(self, worker: Settings) -> Any:
        """The stream's countdown, releasing through the internal function as the countdown
        function's role (its key), not as this process."""
        import boto3

        from sluice.backends.aws.family_gateway import LambdaFamilyGateway, LambdaInvoke
        from sluice.core.families import Countdown
        from sluice.entry import root as wiring
        from sluice.streams.countdown import StreamCountdown

        def client() -> Any:
            return boto3.client("lambda", region_name=worker.aws_region,
                                endpoint_url=worker.lambda_endpoint_url,
                                aws_access_key_id=COUNTDOWN_KEY, aws_secret_access_key=iam.SECRET)

        keeper = LambdaFamilyGateway(LambdaInvoke(INTERNAL_FUNCTION, client))
        return StreamCountdown(Countdown(wiring.families(worker), keeper.release))

    def _settings_env(self) -> dict[str, str]:
        return {f"SLUICE_{k.upper()}": _env_text(v) for k, v in self.options.settings.items()
                if v is not None and f"SLUICE_{k.upper()}" not in deployed.BINDINGS}

    def prepare(self, s: Settings, sink_url: str) -> list[Function]:
        """The local Lambda service's functions for servers at ``s``: the template's, with every
        local difference in ``self.overrides``. Sets ``self.settings`` to what the worker sees."""
        self.redis_users = self.redis_users or self._plan_redis_users()  # start() planned them already
        own = {lid: user.env() for lid, user in self.redis_users.items() if not lid.startswith("team:")}
        # The scheduler function's Scheduler (issue 33): the moto server's, in its default group, with the
        # local Scheduler role; the registrar, which the template gives them too, keeps the table alone.
        own["SchedulerFunction"] = {"SLUICE_SCHEDULER_GROUP": MOTO_SCHEDULE_GROUP,
                                    "SLUICE_SCHEDULER_ROLE_ARN": self.scheduler_caller().principal}
        self.local_functions, self.overrides = deployed.plan(self.deploy, self.changes(s),
                                                             self.bindings(s, sink_url), own)
        self.team_functions, self._servers = {}, s
        self.team_stacks = self._team_stacks()
        for name, (_module, deploy) in self.teams.items():
            cfg = deploy.functions[team_function_id(deploy)]
            user = self.redis_users.get(f"team:{name}")
            fn, rows = deployed.plan_team(cfg, name, team_function_name(name),
                                          self.team_changes(cfg.logical_id, s), self.bindings(s, sink_url),
                                          user.env() if user else None)
            self.team_functions[name] = fn
            self.overrides += rows
        worker = self.function("WorkerFunction")
        # Not the worker's Redis user: this process's own reads (the safety net) are the tooling's.
        tooling_env = {k: v for k, v in worker.env.items() if k not in deployed.OWN}
        # The routes table too, which the worker no longer names (its registrar writes its routes).
        self.settings = deployed.settings_of(tooling_env, worker_function_name=WORKER_FUNCTION,
                                             lambda_endpoint_url=s.lambda_endpoint_url,
                                             routes_table=s.routes_table or ROUTES_TABLE)
        self.access = self._access()
        return self._functions()

    def _access(self) -> iam.Access:
        """The template's resource policies on the local functions, and each key's role and policies."""
        local = {f.logical_id: f.name for f in self.local_functions}
        names = iam.names_for(self.deploy, local)
        access = iam.Access()
        for fn in self.local_functions:
            cfg = self.deploy.functions[fn.logical_id]
            access.add_function(self.deploy, cfg, fn.name, names)
            access.add_identity(iam.key_of(fn.name), names[f"{fn.logical_id}Role.Arn"], cfg.policies, names)
        countdown = self.deploy.functions["CountdownFunction"]
        access.add_identity(COUNTDOWN_KEY, names["CountdownFunctionRole.Arn"], countdown.policies, names)
        access.identities[self.scheduler_caller().principal] = [
            iam.bind(p, names) for p in self.deploy.role_policies.get("SchedulerInvokeRole", ())]
        for team, fn in self.team_functions.items():
            deploy = self.teams[team][1]
            cfg = deploy.functions[team_function_id(deploy)]
            stack = self.team_stacks[team]
            # Its resource policy (infra/worker.yaml's TeamWorkerPolicy): the relay's role (the
            # Sluice stack's export), the team's registrar role (named by convention: the team
            # stack's) and its own safety-net rule, whose ARN the local scheduler sends.
            own = {**names, f"{cfg.logical_id}.Arn": iam.function_arn(fn.name),
                   f"{IMPORT}{STACK_NAME}-RelayFunctionRoleArn": names["RelayFunctionRole.Arn"],
                   **{f"{r.name}.Arn": iam.rule_arn(deploy.stack_name, r.name) for r in cfg.schedules}}
            access.add_function(deploy, cfg, fn.name, own)
            if stack.registrar_role_arn not in json.dumps(access.resource_policies[fn.name]):
                raise ConfigError(f"{deploy.path}: {fn.name}'s resource policy does not admit its registrar "
                                  f"role {stack.registrar_role_arn} (infra/team.yaml's RegistrarRole)")
            # The team's worker runs as the role infra/team.yaml vends it, with that role's rights
            # (its boundary): the internal function's policy admits the role, and its own allows it.
            access.add_identity(iam.key_of(fn.name), stack.role_arn, [stack.worker_policy], names)
            # Its registrar: only the team's deployers may invoke it; it may describe the worker.
            registrar = {**names, "RegistrarFunction.Arn": iam.function_arn(stack.registrar)}
            access.resource_policies[stack.registrar] = iam.bind(stack.registrar_policy, registrar)
            access.add_identity(iam.key_of(stack.registrar), stack.registrar_role_arn,
                                stack.registrar_role_policies, registrar)
        return access

    def _team_stacks(self) -> dict[str, TeamStack]:
        """infra/team.yaml for each team, as the infra team deploys it: locally each team is given
        the queues its handlers module handles (its team map entry)."""
        from sluice.entry.worker import load_app
        from sluice_dev.local.teams import load_team

        return {name: load_team(name, sorted(load_app(module).handlers), STACK_NAME)
                for name, (module, _deploy) in self.teams.items()}

    def bindings(self, s: Settings, sink_url: str) -> dict[str, str]:
        """Where the local servers are (``deployed.BINDINGS``), from the started stack's Settings."""
        out = {"SLUICE_REDIS_URL": s.redis_url, "SLUICE_KAFKA_BOOTSTRAP": s.kafka_bootstrap,
               "SLUICE_JOBS_TABLE": s.jobs_table, "SLUICE_IDEMPOTENCY_TABLE": s.idempotency_table,
               "SLUICE_ROUTES_TABLE": s.routes_table or ROUTES_TABLE,
               "SLUICE_SCHEDULES_TABLE": s.schedules_table or SCHEDULES_TABLE,
               "SLUICE_PARKED_TABLE": s.parked_table or PARKED_TABLE,
               "SLUICE_PAYLOADS_BUCKET": s.payloads_bucket or PAYLOADS_BUCKET,
               "SLUICE_QUEUES_TABLE": s.queues_table or QUEUES_TABLE,
               "SLUICE_RESULTS_BUCKET": s.results_bucket, "SLUICE_WORKER_FUNCTION_NAME": WORKER_FUNCTION,
               "SLUICE_INTERNAL_FUNCTION_NAME": INTERNAL_FUNCTION,
               "SLUICE_TEAM_MAP_FUNCTION_NAME": TEAM_MAP_FUNCTION,
               "SLUICE_SCHEDULER_FUNCTION_NAME": SCHEDULER_FUNCTION,
               "SLUICE_EXAMPLES_SINK_URL": sink_url}
        if self.service is not None:
            out["SLUICE_EXAMPLES_SERVICE_URL"] = self.service.url
        optional = {"SLUICE_AWS_ENDPOINT_URL": s.aws_endpoint_url, "SLUICE_HISTORY_PATH": s.history_path,
                    "SLUICE_LAMBDA_ENDPOINT_URL": s.lambda_endpoint_url,
                    "SLUICE_JOB_ID_SECRET": s.job_id_secret.get_secret_value() if s.job_id_secret else None,
                    "SLUICE_JOB_ID_SECRET_ARN": s.job_id_secret_arn}
        return out | {k: v for k, v in optional.items() if v is not None}

    def changes(self, s: Settings) -> LocalChanges:
        """Every local difference from the template, each with its reason."""
        o = self.options
        env: dict[str, dict[str, tuple[str, str]]] = {lid: {} for lid in deployed.NAMES}
        for values in env.values():
            values["SLUICE_KAFKA_SECURITY"] = (s.kafka_security, "the local Kafka has no IAM auth")
            values["POWERTOOLS_LOG_LEVEL"] = (o.log_level, "--log-level")
            for var, value in self._settings_env().items():
                values[var] = (value, f"{o.why} (settings {var.removeprefix('SLUICE_').lower()})")
        self._name_local_operator(env)
        stack_name = self.deploy.functions["RelayFunction"].env.get("SLUICE_STACK_NAME")
        if isinstance(stack_name, str) and stack_name != STACK_NAME:
            why = f"the local functions are {STACK_NAME}-*, its team map /sluice/{STACK_NAME}/teams/"
            env["RelayFunction"]["SLUICE_STACK_NAME"] = (STACK_NAME, why)
            env["TeamMapFunction"]["SLUICE_STACK_NAME"] = (STACK_NAME, why)
        if o.kafka_bootstrap is None and "SLUICE_RELAY_FETCH_MAX_WAIT_MS" not in env["RelayFunction"]:
            env["RelayFunction"]["SLUICE_RELAY_FETCH_MAX_WAIT_MS"] = (str(TANSU_FETCH_MAX_WAIT_MS), TANSU_WHY)
        timeout: dict[str, tuple[float, str]] = {}
        schedule: dict[str, tuple[float, str]] = {}
        concurrency = {"WorkerFunction": (o.workers, "--workers: local containers; unreserved in AWS"),
                       "GatewayFunction": (o.gateway_concurrency,
                                           "local gateway containers; unreserved in AWS"),
                       "OperatorFunction": (1, "one local container; unreserved in AWS"),
                       "InternalFunction": (o.gateway_concurrency, "local containers for workers' children; "
                                                                   "unreserved in AWS"),
                       "FiringsFunction": (o.gateway_concurrency, "local containers for firings; "
                                                                  "unreserved in AWS"),
                       "RegistrarFunction": (1, "one local container; unreserved in AWS"),
                       "TeamMapFunction": (1, "one local container; unreserved in AWS"),
                       "SchedulerFunction": (1, "one local container; unreserved in AWS")}
        if o.worker_timeout_s is not None:
            timeout["WorkerFunction"] = (o.worker_timeout_s, o.why)
            env["WorkerFunction"]["SLUICE_FUNCTION_TIMEOUT_S"] = (str(o.worker_timeout_s),
                                                                  "follows the worker's Timeout")
        if o.relay_timeout_s is not None:
            timeout["RelayFunction"] = (o.relay_timeout_s, o.why)
            stop_ms = min(s.relay_stop_before_ms, int(o.relay_timeout_s * 1000) // 4)
            if stop_ms != s.relay_stop_before_ms:
                env["RelayFunction"]["SLUICE_RELAY_STOP_BEFORE_MS"] = (
                    str(stop_ms), "a quarter of the shortened relay Timeout")
        if self.deploy.functions["RelayFunction"].reserved_concurrency is None and \
                "RelayFunction" not in concurrency:
            groups = int(self.deploy.parameters.get("RelayPartitionGroups", 1))
            concurrency["RelayFunction"] = (2 * groups, "unreserved in AWS (ReserveRelayConcurrency=false); "
                                                        "two local containers per group, as runs overlap "
                                                        "at each hand-over")
        if o.relay_every_s is not None:
            schedule["RelayFunction"] = (o.relay_every_s, o.why)
            if o.relay_timeout_s is None or o.relay_timeout_s > o.relay_every_s:
                concurrency["RelayFunction"] = (2, "runs overlap while one hands over to the next")
        if o.safety_net_every_s is not None:
            schedule["WorkerFunction"] = (o.safety_net_every_s, o.why)
        inputs = {"WorkerFunction": ("every queue with work", "the local safety net drains every queue "
                                     "with work, not only SafetyNetQueues")}
        return LocalChanges(timeout_s=timeout, concurrency=concurrency, schedule_s=schedule,
                            schedule_input=inputs, env=env)

    def _name_local_operator(self, env: dict[str, dict[str, tuple[str, str]]]) -> None:
        """The template names no operator, so nobody is one (it fails closed); locally the tooling's
        own caller is named, so `sluice console` and the operator API keep working (an override)."""
        for lid, cfg in self.deploy.functions.items():
            if lid in env and cfg.env.get("SLUICE_OPERATOR_PRINCIPALS") == "":
                env[lid]["SLUICE_OPERATOR_PRINCIPALS"] = (LOCAL_OPERATOR, LOCAL_OPERATOR_WHY)

    def team_changes(self, logical_id: str, s: Settings) -> LocalChanges:
        """A team's function differs locally as the default worker does (containers, timeout,
        safety net), each with its reason."""
        o, base = self.options, self.changes(s)
        env = {var: value for var, value in base.env.get("WorkerFunction", {}).items()
               if var != "SLUICE_KAFKA_SECURITY"}  # a team's worker never talks to Kafka
        timeout, period = base.timeout_s.get("WorkerFunction"), base.schedule_s.get("WorkerFunction")
        return LocalChanges(
            timeout_s={} if timeout is None else {logical_id: timeout},
            concurrency={logical_id: (o.team_containers or o.workers,
                                      "--workers: each team's own pool of local containers")},
            schedule_s={} if period is None else {logical_id: period},
            schedule_input={logical_id: ("its routed queues with work", "the local safety net drains the "
                                         "queues routed to it that have work, not only Queues")},
            env={logical_id: env})

    def function(self, logical_id: str) -> LocalFunction:
        return next(f for f in self.local_functions if f.logical_id == logical_id)

    def _functions(self) -> list[Function]:
        o = self.options
        path = os.pathsep.join(p for p in (os.getcwd(), os.environ.get("PYTHONPATH", "")) if p)
        refs = {"GatewayFunction": (_handler_ref("gateway", "sluice_dev.local.container:gateway"), 3600.0),
                "OperatorFunction": (_handler_ref("operator", "sluice_dev.local.container:operator"), 3600.0),
                "InternalFunction": (_handler_ref("internal", "sluice_dev.local.container:internal"), 3600.0),
                "FiringsFunction": (_handler_ref("firings", "sluice_dev.local.container:firings"), 3600.0),
                "WorkerFunction": (_handler_ref("worker", "sluice.entry.worker:handle_dispatch"),
                                   o.worker_idle_s),
                "RegistrarFunction": (_handler_ref("registrar", "sluice.entry.registrar:handler"),
                                      o.worker_idle_s),
                "TeamMapFunction": (_handler_ref("teams", "sluice.entry.teams:handler"), o.worker_idle_s),
                "SchedulerFunction": (_handler_ref("scheduler", "sluice.entry.scheduler:handler"),
                                      o.worker_idle_s),
                "RelayFunction": (o.relay_handler or
                                  _handler_ref("relay", "sluice.entry.relay:run_scheduled"),
                                  max(o.relay_every_s or 60.0, 20.0) * 3)}
        out = []
        for fn in self.local_functions:
            ref, idle = refs[fn.logical_id]
            env = {**servers.DUMMY_AWS_ENV, **fn.env, "PYTHONPATH": path, **_credentials(fn.name)}
            command: tuple[str, ...] = ()
            if o.artifacts is not None:
                command = self._artifact_command(fn.logical_id, fn.name)
                env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
            assert fn.max_concurrency is not None, f"{fn.logical_id}: changes() names a local concurrency"
            out.append(Function(fn.name, ref, int(fn.timeout_s * 1000), fn.max_concurrency, env, idle_s=idle,
                                command=command))
        for name, team in self.team_functions.items():  # the layer's entry, as infra/worker.yaml's Handler
            own = os.pathsep.join(p for p in (self._team_code(name), path) if p)  # its CodeUri first
            env = {**servers.DUMMY_AWS_ENV, **team.env, "PYTHONPATH": own, **_credentials(team.name)}
            assert team.max_concurrency is not None
            out.append(Function(team.name, "sluice.entry.worker_function:handler",
                                int(team.timeout_s * 1000), team.max_concurrency, env,
                                idle_s=o.worker_idle_s))
        for stack in self.team_stacks.values():  # infra/team.yaml's RegistrarFunction, the layer's entry
            from sluice_dev.local.teams import registrar_env

            assert self._servers is not None
            env = {**servers.DUMMY_AWS_ENV, **registrar_env(stack, self._servers), "PYTHONPATH": path,
                   **_credentials(stack.registrar)}
            out.append(Function(stack.registrar, "sluice.entry.registrar:handler",
                                stack.registrar_timeout_s * 1000, 1, env, idle_s=o.worker_idle_s))
        return out

    def _artifact_command(self, logical_id: str, name: str) -> tuple[str, ...]:
        """The built function under infra/lambda_rie.py: its bundle, the layer, nothing else."""
        o = self.options
        assert o.artifacts is not None
        task, opt = o.artifacts / logical_id, o.artifacts / "SharedLayer" / "python"
        rie = FUNCTIONS_DIR.parent / "infra" / "lambda_rie.py"
        for needed in (task, opt, rie):
            if not needed.exists():
                raise ConfigError(f"{needed} is missing: run sam build (see infra/artifacts.py)")
        handler = self.deploy.functions[logical_id].handler
        return (o.artifacts_python, "-I", "-S", str(rie), name, str(task), str(opt), handler)

    def _serve_gateway(self) -> Any:
        """HTTP on 127.0.0.1; each request becomes a proxy event for a gateway container.

        Containers, not threads: the gateway's router keeps the current event on itself (as
        Powertools' resolver did, in a class attribute), so two requests in one process would
        see each other's headers and body.
        Lambda never runs two requests in one process, and neither do we.
        """
        from sluice.entry import http_api
        from sluice.entry.gateway import is_admin_path
        from sluice_dev.local.api_server import LocalGateway

        lambdas = self.lambdas
        assert lambdas is not None
        timeout_s = self.function("GatewayFunction").timeout_s

        def handler(event: dict[str, Any], _context: Any) -> dict[str, Any]:
            # The API's routes: /v1/admin/... integrate with the operator function, the rest with
            # the public one; API Gateway invokes either with the route's SourceArn.
            rest = http_api.as_rest(event) if http_api.is_http_api_event(event) else event
            path, method = str(rest.get("path") or ""), str(rest.get("httpMethod") or "")
            function = OPERATOR_FUNCTION if is_admin_path(path) else GATEWAY_FUNCTION
            try:
                inv = lambdas.invoke(function, event, asynchronous=False, caller=iam.api_caller(method, path))
            except iam.AccessDenied:
                # A path outside the routes each policy names: API Gateway has no such resource and
                # answers itself (its DEFAULT_4XX response in template.yaml), invoking nothing.
                missing = {"type": "about:blank", "title": "MISSING_AUTHENTICATION_TOKEN",
                           "detail": "Missing Authentication Token"}
                return {"statusCode": 403, "headers": {"Content-Type": "application/problem+json"},
                        "body": json.dumps(missing)}
            answered = inv.done.wait(timeout_s + 5)
            if answered and inv.error is None and isinstance(inv.result, dict):
                result: dict[str, Any] = inv.result
                return result
            # What API Gateway answers when its Lambda integration fails or times out.
            status, title = (503, "Service Unavailable") if self._stop.is_set() else \
                (502, "Bad Gateway") if answered else (504, "Gateway Timeout")
            detail = "sluice dev is stopping" if status == 503 else \
                f"the gateway function failed: {inv.error}"
            if status != 503:
                logging.getLogger(__name__).warning("%s %s: %s", event.get("httpMethod"),
                                                             event.get("path"), detail)
            body = {"type": "about:blank", "title": title, "status": status, "detail": detail}
            return {"statusCode": status, "headers": {"Content-Type": "application/problem+json"},
                    "body": json.dumps(body)}

        return LocalGateway([handler] * self.options.gateway_concurrency, payload=self.api_payload).start()

    # -- EventBridge's part ----------------------------------------------------------------------------

    def _timers(self) -> list[tuple[float, Callable[[], None]]]:
        """EventBridge's rules: (period, action) for each enabled schedule of the template."""
        relay, worker = self.function("RelayFunction"), self.function("WorkerFunction")
        timers: list[tuple[float, Callable[[], None]]] = [
            (period, self.invoke_relay) for period in relay.schedules.values() if period is not None]
        timers += [(period, self.invoke_safety_net) for period in worker.schedules.values()
                   if period is not None]
        timers.append((SCHEDULE_TICK_S, self.fire_schedules))  # Scheduler's part: the stored schedules
        return timers

    def _schedule(self) -> None:
        timers = self._timers()
        due = [time.monotonic()] * len(timers)
        while not self._stop.is_set():
            for i, (period, action) in enumerate(timers):
                now = time.monotonic()
                if now < due[i]:
                    continue
                due[i] = now + period
                try:
                    action()
                except Exception as exc:  # a hiccup must not stop the schedule
                    logging.getLogger(__name__).warning("schedule: %s", exc)
            self._stop.wait(max(0.0, min(due, default=time.monotonic() + 1) - time.monotonic()))

    def rule_caller(self, function: str, team: str | None = None) -> iam.Caller:
        """EventBridge invoking ``function`` (a logical id; of ``team``'s stack, if given) for its
        first enabled schedule rule, with that rule's SourceArn, which the function's resource
        policy admits (issue 27)."""
        deploy = self.deploy if team is None else self.teams[team][1]
        enabled = [s.name for s in deploy.functions[function].schedules if s.enabled]
        return iam.rule_caller(deploy.stack_name, enabled[0]) if enabled else iam.EVENTS

    def team_rule_caller(self, team: str) -> iam.Caller:
        """EventBridge invoking ``team``'s worker for its safety net (infra/worker.yaml's TeamSafetyNet)."""
        return self.rule_caller(team_function_id(self.teams[team][1]), team)

    def invoke_relay(self) -> None:
        if self.lambdas is not None:
            self.lambdas.invoke(RELAY_FUNCTION, scheduled_event(), caller=self.rule_caller("RelayFunction"))

    def invoke_safety_net(self) -> None:
        """Drain and reap every queue with work in Redis, as the scheduled worker rule does in AWS."""
        if self.lambdas is None or self.settings is None:
            return
        from sluice.entry import root as wiring

        engine = wiring.queue(self.settings)
        queues = []
        for name in engine.queues():
            if is_reserved_queue(name):  # Sluice's own (the relay's partition jobs): never a worker's
                continue
            st = engine.stats(name)
            if st.ready or st.delayed or st.leased:
                queues.append(name)
        by_function: dict[str, list[str]] = {}
        table = self._routes()
        for name in queues:  # each queue to the function it is routed to, as each one's schedule does
            route = table.resolve(name)
            by_function.setdefault(WORKER_FUNCTION if route is None else route.function, []).append(name)
        for function, names in by_function.items():
            event = {"queues": names[:50], "batch": self.settings.worker_batch, "source": "safety-net"}
            # Each function's own safety-net rule, with its ARN (WorkerSafetyNet, a team's TeamSafetyNet).
            team = next((t for t in self.teams if team_function_name(t) == function), None)
            caller = (self.rule_caller("WorkerFunction") if function == WORKER_FUNCTION
                      else self.team_rule_caller(team) if team is not None else iam.EVENTS)
            try:
                self.lambdas.invoke(function, event, caller=caller)
            except KeyError:  # routed (sluice routes register) to a function this stack does not run
                logging.getLogger(__name__).warning("safety net: no local function %s", function)

    def _routes(self) -> RouteTable:
        from sluice.backends.dynamodb.routes import DynamoRouteStore
        from sluice.core.routes import RouteTable

        if self.settings is None or not self.settings.routes_table:
            return RouteTable()
        return RouteTable(DynamoRouteStore.from_settings(self.settings).list_routes())

    # -- stop ----------------------------------------------------------------------------------------

    def stop(self) -> None:
        self._stop.set()
        if self._scheduler is not None:
            self._scheduler.join(5)
        if self._events_thread is not None:
            self._events_thread.join(5)
        parts = [p for p in (self.gateway, self.lambda_api, self.lambdas, self.sink, self.service)
                 if p is not None]
        # In parallel: each HTTP server takes up to its poll interval (0.5 s) to notice.
        threads = [threading.Thread(target=_quietly, args=(p.stop,)) for p in parts]
        for t in threads:
            t.start()
        for t in threads:
            t.join(15)
        self.gateway = self.lambda_api = self.lambdas = self.sink = self.service = None
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


def _credentials(name: str) -> dict[str, str]:
    """The function's own dummy credentials: its key id names its role to the local Lambda service."""
    return {"AWS_ACCESS_KEY_ID": iam.key_of(name), "AWS_SECRET_ACCESS_KEY": iam.SECRET}


def _route_lines(answer: dict[str, Any], function: str) -> list[str]:
    """A registrar's answer as ``sluice dev`` prints it: ``pattern -> function (typed)``."""
    data = answer.get("Data") or {}
    typed = set(filter(None, str(data.get("Typed", "")).split(",")))
    return [f"{p} -> {function}{' (typed)' if p in typed else ''}"
            for p in filter(None, str(data.get("Routes", "")).split(","))]


def _quietly(fn: Callable[[], None]) -> None:
    with contextlib.suppress(Exception):
        fn()


# Every worker's queues are registered as its routes at start (as each deploy's Custom::SluiceRoutes
# does); with none registered (a handlers module with no handler, as sluice.worker.no_handlers), the
# gateway accepts every queue, as a deploy of that module does: said, since nothing is then refused.
NO_ROUTES_ROW: Final = ("routes", "none (the handlers register no queue): the gateway accepts every queue "
                                  "and checks no payload (no 404 NO_ROUTE, no 400 PAYLOAD_INVALID), and "
                                  "the default worker has no handler for it")


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
        ("events", "jobs-table stream -> EventBridge (moto) -> SQS: sluice events --follow"),
        *[("worker", f"{w['function']}: {w['handlers']}") for w in endpoints.get("workers") or []],
        *([("route", line) for line in endpoints["routes"]] if endpoints.get("routes") else [NO_ROUTES_ROW]),
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
