"""A Lambda container for BUILT artifacts: only the function's bundle and the layer on its path.

    python3.12 -I -S infra/lambda_rie.py FUNCTION_NAME TASK_DIR OPT_PYTHON module.function

lays the import path out as Lambda does (``/var/task`` = TASK_DIR first, then ``/opt/python`` =
OPT_PYTHON, then the standard library; ``-I -S`` keep this interpreter's own site-packages and
``PYTHON*`` variables out), imports the handler once (the init phase) and then speaks the local
Lambda service's protocol (``sluice_dev.local.container``): one JSON line per invocation on stdin,
``{"id", "event", "timeout_ms"}``, one answer line on the original stdout. Standard library only:
it must not lend the function anything the build did not put there. ``sluice dev --artifacts``
and tests/infra/test_artifacts_e2e.py run the gateway, relay and worker through it.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback
import uuid
from typing import Any


class Context:
    """The parts of awslambdaric's LambdaContext that handlers and Powertools read."""

    function_version = "$LATEST"
    log_stream_name = "local"

    def __init__(self, function_name: str, timeout_ms: int, request_id: str) -> None:
        self.function_name = function_name
        self.invoked_function_arn = f"arn:aws:lambda:us-east-1:000000000000:function:{function_name}"
        self.aws_request_id = request_id or str(uuid.uuid4())
        self.memory_limit_in_mb = int(os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128"))
        self.log_group_name = f"/aws/lambda/{function_name}"
        self._deadline = time.monotonic() + timeout_ms / 1000

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def main(argv: list[str]) -> int:
    function_name, task, opt, ref = argv
    sys.path[:0] = [task, opt]  # Lambda's order: the function's own code, then the layers
    os.environ.setdefault("AWS_LAMBDA_FUNCTION_NAME", function_name)
    os.environ["LAMBDA_TASK_ROOT"] = task
    answers = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)  # print() and loggers write to the log, never to the answer channel
    module_name, _, name = ref.rpartition(".")
    handler: Any = getattr(importlib.import_module(module_name), name)
    for line in sys.stdin:
        request = json.loads(line)
        context = Context(function_name, int(request["timeout_ms"]), str(request["id"]))
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
