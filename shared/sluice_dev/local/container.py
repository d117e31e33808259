"""One warm "Lambda container": a process that runs a handler for each invocation it is sent.

``python -m sluice_dev.local.container FUNCTION_NAME module:function`` reads one JSON
line per invocation on stdin (``{"id", "event", "timeout_ms"}``), calls the handler
with a Lambda-like context whose ``get_remaining_time_in_millis`` counts down from
``timeout_ms``, and answers one JSON line (``{"id", "result"}`` or ``{"id", "error"}``)
on the stdout it was started with. Everything the handler prints or logs goes to
stderr (the function's log file), so it cannot corrupt the answers. The process
ends when stdin closes, which also happens when its parent dies.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sluice_dev.local.api_server import LocalContext

if TYPE_CHECKING:
    from sluice.core.bus import Event


def load(ref: str) -> Callable[[Any, Any], Any]:
    """``package.module:function``, or ``/path/to/app.py:handler`` (a Lambda function's own file)."""
    target, _, name = ref.rpartition(":")
    if target.endswith(".py"):
        spec = importlib.util.spec_from_file_location(f"lambda_{Path(target).parent.name}", target)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {target}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    fn = getattr(module, name or "handler")
    if not callable(fn):
        raise TypeError(f"{ref} is not callable")
    return fn  # type: ignore[no-any-return]


_gateways: dict[str, Any] = {}


def _split(kind: Any, event: Any, context: Any) -> Any:
    if kind not in _gateways:
        from sluice.entry.gateway import gateway_from_settings

        _gateways[kind] = gateway_from_settings(serves=frozenset({kind}))
    return _gateways[kind](event, context)


# Each split function's handler where its functions/<name>/app.py is not at hand (an installed package).
def gateway(event: Any, context: Any) -> Any:
    return _split("api", event, context)


def operator(event: Any, context: Any) -> Any:
    return _split("operator", event, context)


def internal(event: Any, context: Any) -> Any:
    return _split("internal", event, context)


def firings(event: Any, context: Any) -> Any:
    return _split("firing", event, context)


def record_history(event: Event) -> None:
    """Record a worker event to ``Settings.history_path`` if set (a subscriber of the process's bus)."""
    from sluice.entry import root as wiring
    from sluice_dev.local.history import Recorder, open_history

    path = wiring.settings().history_path
    if path:
        Recorder(open_history(path))(event)


def main(argv: list[str]) -> int:
    from sluice.entry import root as wiring

    function_name, ref = argv[0], argv[1]
    wiring.events().subscribe(record_history)  # before the handler module loads: local containers record
    traces_path = wiring.settings().traces_path
    if traces_path:  # `sluice dev --traces FILE`: this function's spans to FILE, as an exporter sends them
        from sluice_dev.local.traces import install

        install(traces_path, function_name)
    answers = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)  # print() and loggers now write to the log file, never to the answer channel
    handler = load(ref)
    for line in sys.stdin:
        request = json.loads(line)
        context = LocalContext(function_name, int(request["timeout_ms"]))
        context.aws_request_id = str(request["id"])
        try:
            answer: dict[str, Any] = {"id": request["id"], "result": handler(request["event"], context)}
        except Exception as exc:  # Lambda reports an unhandled error and keeps the container
            traceback.print_exc()
            answer = {"id": request["id"], "error": f"{type(exc).__name__}: {exc}"}
        answers.write(json.dumps(answer, default=str) + "\n")
        sys.stderr.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
