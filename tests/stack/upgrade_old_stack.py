"""The old side of the upgrade test (tests/stack/test_upgrade.py): run with ``PYTHONPATH`` set to the
code at c44b81f (``git archive``), never imported by today's code.

It starts that code's local stack (its ``DevStack``) on servers the test started and
keeps (its ``Stack.start_servers`` is replaced here: the old stack could only start servers of its
own), leaves jobs in every state through the old gateway, stops the old functions, and writes what
it left as JSON: ``python upgrade_old_stack.py CONFIG_JSON``.

Two worker containers, a batch of one: the gated child and the gated job hold both, so the echo
jobs enqueued after them stay ready in Redis.
"""

from __future__ import annotations

import importlib
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import SecretStr

# c44b81f's layout: its local stack lived in the package today's tree names sluice_dev.local (so the
# name is built here: tests/unit/test_doc_names.py keeps the retired one out of today's code)
OLD_LOCAL = ".".join(("sluice", "local"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: tests.stack.gateway_http
from tests.stack.gateway_http import http, until  # noqa: E402 (the standard library only)

old_stack = importlib.import_module(f"{OLD_LOCAL}.stack")
old_dev = importlib.import_module(f"{OLD_LOCAL}.dev")
DevOptions, DevStack = old_dev.DevOptions, old_dev.DevStack

HANDLERS = "tests.stack.upgrade_handlers"


def enqueue(gw: str, queue: str, body: dict[str, Any]) -> str:
    status, answer = http("POST", f"{gw}/v1/queues/{queue}/jobs", body)
    assert status == 202, (queue, status, answer)
    return str(answer["job_id"])


def main() -> None:
    # SIGTERM (the test's timeout) ends the old stack as Ctrl-C would: its containers run in
    # sessions of their own, and only dev.stop() below ends them
    signal.signal(signal.SIGTERM, lambda _sig, _frame: sys.exit(1))
    config = json.loads(sys.argv[1])
    attach, gate = config["attach"], config["gate"]

    def start_servers(self: Any, base: Any = None) -> Any:
        settings = old_stack.settings_from_endpoints(attach, base)
        self.settings = settings.model_copy(update={"job_id_secret": SecretStr(attach["job_id_secret"])})
        return self.settings

    old_stack.Stack.start_servers = start_servers  # type: ignore[method-assign]
    options = DevOptions(state_dir=Path(config["state_dir"]), handlers=HANDLERS, workers=2, warm_workers=2,
                         parameters={"WorkerBatch": "1"}, log_level="WARNING", follow_events=False,
                         why="the upgrade test")
    dev = DevStack(options)
    left: dict[str, Any] = {}
    try:
        gw = dev.start()["gateway_url"]
        lease = {"lease_seconds": 5}
        # dead: one attempt, failed while the gate is shut
        left["dead"] = enqueue(gw, "up-fail", {"payload": {"gate": gate}, "max_attempts": 1})
        until(gw, left["dead"], lambda v: v["status"] == "dead")
        # a family half done: the parent and its first child succeed, the second child waits for the gate
        left["parent"] = enqueue(gw, "up-parent", {"payload": {"gate": gate}, **lease})
        parent = until(gw, left["parent"], lambda v: v["status"] == "succeeded")
        # the view lists the children by id: the gated one is the one on its own queue
        left["children"] = sorted(parent["children"], key=lambda child: ".up-child-gated." in child)
        left["continuation"] = parent["continuations"][0]
        until(gw, left["children"][0], lambda v: v["status"] == "succeeded")
        until(gw, left["children"][1], lambda v: v["status"] == "leased")
        # running: holds the second container until the gate opens
        left["running"] = enqueue(gw, "up-gated", {"payload": {"gate": gate}, **lease})
        until(gw, left["running"], lambda v: v["status"] == "leased")
        # ready: no container is free for them
        left["ready"] = [enqueue(gw, "up-echo", {"payload": {"n": i}}) for i in range(3)]
        # delayed: due after the upgrade
        left["delayed"] = enqueue(gw, "up-echo", {"payload": "later", "delay_seconds": config["delay_s"]})
        left["delayed_due_ms"] = int(time.time() * 1000) + config["delay_s"] * 1000
        # the relay caught up (docs/deploy.md, "Upgrading"): every record is in Redis
        for job_id in [*left["ready"], left["delayed"]]:
            until(gw, job_id, lambda v: v["status"] not in ("accepted",))
        every = [left["dead"], *left["children"], left["continuation"], left["running"], *left["ready"],
                 left["delayed"]]
        left["states"] = {job_id: http("GET", f"{gw}/v1/jobs/{job_id}")[1]["status"] for job_id in every}
    finally:
        dev.stop()  # the old functions end; the servers are the test's and stay
    Path(config["out"]).write_text(json.dumps(left))


if __name__ == "__main__":
    main()
