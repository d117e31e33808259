"""The worker Lambda's one function: parse the dispatch, drain within the time left, report.

The event is ``models.DispatchEvent``: from the relay's async dispatch or from the
scheduled safety-net rule, whose constant Input has the same shape. The handler
module (``Settings.handlers_module``) must expose a ``sluice.Worker``, by
convention named ``app``. ``prepare`` loads it once per container (the function's
module calls it at init) and refuses handlers whose timeout cannot fit the function's
invocation budget (``WorkerOptions.check_fits``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import ValidationError

from sluice.core import bus as ev
from sluice.core.errors import HandlerNotFound, InvalidInput
from sluice.core.models import DispatchEvent, describe_validation
from sluice.worker.runtime.options import WorkerOptions

if TYPE_CHECKING:
    from sluice.backends.aws.queue_metrics import QueueWorkMetrics
    from sluice.core.config import Settings
    from sluice.worker.registry import Worker

class LambdaContextLike(Protocol):
    """The parts of ``awslambdaric``'s LambdaContext the worker uses."""

    @property
    def aws_request_id(self) -> str: ...
    @property
    def function_name(self) -> str: ...
    def get_remaining_time_in_millis(self) -> int: ...


def parse_dispatch(event: object) -> DispatchEvent:
    try:
        return DispatchEvent.model_validate(event)
    except ValidationError as exc:
        raise InvalidInput(f"not a worker dispatch event ({describe_validation(exc)})") from exc


def load_app(module_name: str) -> Worker:
    """The ``Worker`` named ``app`` in ``module_name`` (or its only Worker)."""
    from sluice.worker.registry import Worker

    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise HandlerNotFound(f"cannot import the handlers module {module_name!r}: {exc}") from exc
    app = getattr(module, "app", None)
    if isinstance(app, Worker):
        return app
    found = [v for v in vars(module).values() if isinstance(v, Worker)]
    if len(found) == 1:
        return found[0]
    raise HandlerNotFound(f"module {module_name!r} must define exactly one sluice.Worker, named app")


_prepared: dict[tuple[str, WorkerOptions], Worker] = {}


def prepare(settings: Settings | None = None) -> tuple[Worker, WorkerOptions]:
    """The handlers module's Worker and the options it runs with, checked once per container.

    Raises ``HandlerDoesNotFit`` (naming the handler, its timeout and the budget) where a
    handler's timeout cannot fit an invocation of the worker function.
    """
    from sluice.entry import root as wiring

    s = settings or wiring.settings()
    options = WorkerOptions.from_settings(s)
    key = (s.handlers_module, options)
    app = _prepared.get(key)
    if app is None:
        app = load_app(s.handlers_module)
        options.check_fits(app.handlers.values())
        if not any(a is app for a in _prepared.values()):
            # The app's own subscribers (a test's fault points) stay; the process's bus hears
            # everything too. Production subscribes nothing to it; the local stack's containers
            # subscribe their history recorder (sluice_dev.local.container), never imported from here.
            app.events.subscribe(wiring.events().emit)
        _prepared[key] = app
    return app, options


def handler(event: dict[str, Any], context: LambdaContextLike) -> dict[str, Any]:
    """The worker function's handler: a dispatch; a registrar asking for this function's handlers
    (``{"sluice": "describe"}``, infra/team.yaml); or a ``Custom::SluiceRoutes`` request from
    CloudFormation (Sluice's default worker only: ``sluice.entry.routes_resource``)."""
    from sluice.entry import routes_resource

    if event == DESCRIBE:
        return describe(prepare()[0])
    if routes_resource.is_custom_resource(event):
        return routes_resource.handle(event, context, prepare()[0])
    return handle_dispatch(event, context)


DESCRIBE = {"sluice": "describe"}  # backends.aws.team_map.DESCRIBE_EVENT


def describe(app: Worker) -> dict[str, Any]:
    """This function's queues, typed queues' JSON Schemas and declared schedules, for its team's
    registrar (which checks every one against the team map: the answer is the team's code's, so
    nothing in it is trusted), and their digest (``core.declared.digest``)."""
    from sluice.core.declared import digest
    from sluice.core.routes import app_schemas

    queues, schemas, declared = sorted(app.handlers), app_schemas(app), app.declared_schedules()
    return {"queues": queues, "schemas": schemas, "schedules": [d.as_dict() for d in declared],
            "digest": digest(queues, schemas, declared)}


def handle_dispatch(event: object, context: LambdaContextLike,
                    settings: Settings | None = None) -> dict[str, Any]:
    from sluice.entry import root as wiring

    dispatch = parse_dispatch(event)
    s = settings or wiring.settings()
    app, options = prepare(s)
    wiring.timelines(s)  # each job's steps, for its timeline (issue 32)
    worker = app.bind(
        queue=wiring.worker_queue(s), store=wiring.lazy_store(s), options=options,
        family_gateway=wiring.family_gateway(s), families=wiring.lazy_families(s),
        payloads=wiring.payload_store(s), traces=wiring.traces(s),
        worker_id=f"{context.function_name}:{context.aws_request_id}")
    work = queue_work_metrics(app, s)
    try:
        summary = worker.drain(dispatch.queues, dispatch.batch, context.get_remaining_time_in_millis)
    finally:
        work.flush()  # before Lambda freezes the container
    return {"source": dispatch.source, "request_id": context.aws_request_id, **summary.as_dict()}


_work_metrics: dict[int, QueueWorkMetrics] = {}  # by id(app): the apps live on in _prepared


def queue_work_metrics(app: Worker, settings: Settings) -> QueueWorkMetrics:
    """The per-queue wait times and endings of ``app``'s jobs (``backends.aws.queue_metrics``), observed
    on its events from the first dispatch of the container on; flushed after each drain."""
    from sluice.backends.aws.queue_metrics import QueueBound, QueueWorkMetrics

    work = _work_metrics.get(id(app))
    if work is None:
        work = _work_metrics[id(app)] = QueueWorkMetrics(QueueBound.from_settings(settings))
        app.events.subscribe(work, ev.HandlerStarted, ev.Finished)
    return work
