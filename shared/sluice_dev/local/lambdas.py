"""A local Lambda service: warm containers (OS processes) per function, and the Invoke API.

The relay dispatches workers the way it does in AWS, through ``LambdaDispatcher``
(boto3 ``invoke`` with ``InvocationType=Event``); on one machine its endpoint is the
small HTTP server here (``Settings.lambda_endpoint_url``). Each invocation runs in a
container process (``sluice_dev.local.container``) that calls the function's handler
with a Lambda-like context and time budget. As in Lambda, a container runs one
invocation at a time and stays warm for the next (clients built once are reused),
a function has a concurrency limit, an invocation that overruns its timeout has its
container killed, and idle containers are reclaimed.

Asynchronous invocations wait in a queue while every container is busy. Worker
dispatches only say "drain these queues", so a dispatch identical to ones already
waiting beyond the concurrency limit is dropped rather than queued (``coalesced``).

With an ``Access`` (``sluice_dev.local.access``), every invocation is first decided as IAM
decides it (issue 27): over HTTP the SigV4 signature's access key id names the caller, in-process
the caller is passed; a refused one is Lambda's 403 ``AccessDeniedException``, and never runs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import IO, Any

from sluice_dev.local.access import Access, AccessDenied, Caller, access_key_id
from sluice_dev.local.forkserver import ContainerProcess, ForkServer, Zygotes, preload_for, zygote_key
from sluice_dev.local.httpd import QuietHandler, ThreadedServer

log = logging.getLogger(__name__)

_INVOKE_PATH = re.compile(r"^/2015-03-31/functions/(?P<name>[^/]+)/invocations/?$")
_FUNCTION_PATH = re.compile(r"^/2015-03-31/functions/(?P<name>[^/]+)/?$")
# The container zygotes of this process, by interpreter, preload and interpreter-start variables: a
# stack started after another in this process (a test file's, a chaos run's) forks from the same one.
_ZYGOTES = Zygotes()


@dataclass(frozen=True)
class Function:
    name: str
    handler: str  # "module:function", imported in the container
    timeout_ms: int
    max_concurrency: int
    env: Mapping[str, str] = field(default_factory=dict)
    idle_s: float = 60.0  # a container idle this long is reclaimed
    # The container's command line, where not sluice_dev.local.container in this interpreter: built
    # artifacts run under infra/lambda_rie.py in the runtime's Python (sluice dev --artifacts).
    command: tuple[str, ...] = ()


@dataclass(eq=False)
class Invocation:
    function: str
    event: Any
    id: str = field(default_factory=lambda: str(uuid.uuid4()))
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: str | None = None
    started: float | None = None  # monotonic, when a container took it

    def finish(self, result: Any = None, error: str | None = None) -> None:
        self.result, self.error = result, error
        self.done.set()


@dataclass(eq=False)
class Container:
    function: Function
    proc: ContainerProcess  # a fork of the zygote, or a Popen for a command of its own
    busy: Invocation | None = None
    last_used: float = field(default_factory=time.monotonic)
    invocations: int = 0

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, inv: Invocation) -> None:
        assert self.proc.stdin is not None
        self.busy, inv.started = inv, time.monotonic()
        self.invocations += 1
        line = json.dumps({"id": inv.id, "event": inv.event, "timeout_ms": self.function.timeout_ms})
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)


class LocalLambda:
    def __init__(self, functions: list[Function], log_dir: Path, *, python: str = sys.executable,
                 access: Access | None = None, fork: bool = True) -> None:
        self.functions = {f.name: f for f in functions}
        self.access = access  # None: nobody is checked (a harness of its own functions)
        self.log_dir = log_dir
        self.python = python
        self.containers: list[Container] = []
        self.pending: dict[str, deque[Invocation]] = {f.name: deque() for f in functions}
        self.counts = {"invocations": 0, "cold_starts": 0, "errors": 0, "timeouts": 0, "coalesced": 0,
                       "crashed": 0, "denied": 0}
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._logs: dict[str, IO[bytes]] = {}
        # Containers are forks of a zygote that has imported once (sluice_dev.local.forkserver), one
        # zygote per set of interpreter-start variables; fork=False starts each as a fresh process.
        # The zygotes are this process's (_ZYGOTES); _zygotes: the ones this service forked from.
        self.fork = fork
        self._zygotes: dict[tuple[tuple[str, str], ...], ForkServer] = {}
        self._preload = preload_for(f.handler for f in functions if not f.command)
        # Called with every invocation once it has its answer or error (under the service's lock:
        # keep it short). The chaos run records the worker's drain summaries through it.
        self.on_finish: Callable[[Invocation], None] | None = None

    # -- API -------------------------------------------------------------------------------------

    def invoke(self, name: str, event: Any, *, asynchronous: bool = True, first: bool = False,
               caller: Caller | None = None) -> Invocation:
        """Queue an invocation; wait on ``done`` for its answer. KeyError for an unknown function;
        AccessDenied when ``caller`` may not invoke it (``caller`` None: the harness itself).

        ``first`` puts it ahead of the invocations already waiting (an operator's manual run).
        """
        fn = self.functions[name]
        if caller is not None and self.access is not None:
            try:
                self.access.check(name, caller)
            except AccessDenied:
                with self._cond:
                    self.counts["denied"] += 1
                raise
        inv = Invocation(name, event)
        with self._cond:
            waiting = self.pending[name]
            if asynchronous and len(waiting) >= fn.max_concurrency and \
                    sum(1 for w in waiting if w.event == event) >= fn.max_concurrency:
                self.counts["coalesced"] += 1
                self._finish(inv, error="coalesced with identical waiting invocations")
                return inv
            if first:
                waiting.appendleft(inv)
            else:
                waiting.append(inv)
            self.counts["invocations"] += 1
            self._cond.notify_all()
        return inv

    def _finish(self, inv: Invocation, result: Any = None, error: str | None = None) -> None:
        inv.finish(result, error)
        if self.on_finish is not None:
            try:
                self.on_finish(inv)
            except Exception:  # an observer must never break the service
                log.exception("on_finish failed for %s", inv.id)

    def busy(self, name: str | None = None) -> int:
        with self._cond:
            return sum(1 for c in self.containers if c.busy and (name is None or c.function.name == name))

    def waiting(self, name: str | None = None) -> int:
        with self._cond:
            return sum(len(q) for n, q in self.pending.items() if name is None or n == name)

    def describe(self) -> list[dict[str, Any]]:
        """Every live container (pid, function, busy): the chaos suite picks its victims here."""
        with self._cond:
            return [{"pid": c.pid, "function": c.function.name, "busy": c.busy is not None,
                     "invocations": c.invocations} for c in self.containers if c.proc.poll() is None]

    def start(self) -> LocalLambda:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._run, name="sluice-local-lambda", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """End every container (SIGTERM, then SIGKILL after ``timeout``). A second call does nothing."""
        with self._cond:
            if self._stopping:
                return
            self._stopping = True
            containers = list(self.containers)
            self._cond.notify_all()
        for c in containers:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(c.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for c in containers:
            try:
                c.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                c.kill()
                c.proc.wait(5)
        if self._thread is not None:
            self._thread.join(5)
        for f in self._logs.values():
            f.close()

    # -- the scheduler -----------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._stopping:
                    return
                self._housekeep()
                self._assign()
                self._cond.wait(0.25)

    def _housekeep(self) -> None:
        now = time.monotonic()
        alive: list[Container] = []
        for c in self.containers:
            inv = c.busy
            if c.proc.poll() is not None:
                if inv is not None:
                    self.counts["crashed"] += 1
                    self._finish(inv, error=f"container {c.pid} exited with {c.proc.returncode}")
                continue
            if inv is not None and inv.started is not None and \
                    now - inv.started > c.function.timeout_ms / 1000 + 1.0:
                log.warning("%s: invocation %s timed out; killing container %s", c.function.name, inv.id,
                            c.pid)
                self.counts["timeouts"] += 1
                c.kill()
                self._finish(inv, error="Task timed out")
                continue
            if inv is None and now - c.last_used > c.function.idle_s:
                assert c.proc.stdin is not None
                with contextlib.suppress(OSError):
                    c.proc.stdin.close()  # the container exits at EOF
                continue
            alive.append(c)
        self.containers = alive

    def _assign(self) -> None:
        for name, waiting in self.pending.items():
            fn = self.functions[name]
            while waiting:
                idle = next((c for c in self.containers if c.function.name == name and c.busy is None), None)
                if idle is None:
                    if sum(1 for c in self.containers if c.function.name == name) >= fn.max_concurrency:
                        break
                    idle = self._spawn(fn)
                    if idle is None:
                        break
                inv = waiting.popleft()
                try:
                    idle.send(inv)
                except OSError as exc:  # it died between the check and the write
                    self._finish(inv, error=f"container {idle.pid} unreachable: {exc}")
                    idle.kill()

    def _spawn(self, fn: Function) -> Container | None:
        logf = self._logs.get(fn.name)
        if logf is None:
            logf = self._logs[fn.name] = open(self.log_dir / f"{fn.name}.log", "ab")  # noqa: SIM115
        env = {**os.environ, **fn.env}
        try:
            proc: ContainerProcess
            if self.fork and not fn.command:
                proc = self._zygote(env).spawn([fn.name, fn.handler], env, logf)
            else:
                argv = list(fn.command) or [self.python, "-m", "sluice_dev.local.container", fn.name,
                                            fn.handler]
                proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=logf,
                                        env=env, start_new_session=True)
        except OSError as exc:
            log.error("cannot start a container for %s: %s", fn.name, exc)
            return None
        c = Container(fn, proc)
        self.containers.append(c)
        self.counts["cold_starts"] += 1
        threading.Thread(target=self._read, args=(c,), name=f"sluice-container-{proc.pid}",
                         daemon=True).start()
        return c

    def _zygote(self, env: Mapping[str, str]) -> ForkServer:
        """The live zygote for ``env``'s interpreter-start variables (a new one if it died).

        The first spawn waits, under the service's lock, for a new zygote's imports (what the first
        container's would have cost; nothing runs yet at a stack's start). Not done: botocore's data
        files parsed in the zygote too (~0.1 CPU-s a container, not measurable in a stack test).
        """
        key = zygote_key(env)

        def start() -> ForkServer:
            # The zygote's own output (its imports' warnings) goes to the log of the service that
            # started it.
            with open(self.log_dir / "forkserver.log", "ab") as logf:
                return ForkServer(self.python, {**os.environ, **dict(key)}, logf, self._preload)

        zygote = self._zygotes[key] = _ZYGOTES.get((self.python, self._preload, key), start)
        return zygote

    def _read(self, c: Container) -> None:
        assert c.proc.stdout is not None
        for raw in c.proc.stdout:
            try:
                answer = json.loads(raw)
            except ValueError:
                continue
            with self._cond:
                inv = c.busy
                if inv is None or answer.get("id") != inv.id:
                    continue
                c.busy, c.last_used = None, time.monotonic()
                if answer.get("error"):
                    self.counts["errors"] += 1
                self._finish(inv, answer.get("result"), answer.get("error"))
                self._cond.notify_all()
        with contextlib.suppress(subprocess.TimeoutExpired):
            c.proc.wait(30)  # reap it: an exited container must not linger as a zombie
        with self._cond:
            self._cond.notify_all()  # exited: housekeeping reports a busy invocation as crashed


def _get_function(service: LocalLambda, name: str) -> tuple[int, Any, dict[str, str]]:
    """Lambda's GetFunction: 200 with the configuration, or 404 ResourceNotFoundException."""
    name = name.rsplit(":", 1)[-1] if name.startswith("arn:") else name
    fn = service.functions.get(name)
    if fn is None:
        return 404, {"Type": "User", "message": f"Function not found: {name}"}, {
            "x-amzn-ErrorType": "ResourceNotFoundException"}
    return 200, {"Configuration": {"FunctionName": name, "Timeout": fn.timeout_ms // 1000,
                                   "Handler": fn.handler}}, {}


def _invoke_request(service: LocalLambda, name: str, body: bytes, kind: str,
                    authorization: str | None) -> tuple[int, Any, dict[str, str]]:
    """Lambda's Invoke: (status, body, headers) of its answer; a synchronous one waits for it."""
    if name not in service.functions:
        return 404, {"Type": "User", "message": f"Function not found: {name}"}, {
            "x-amzn-ErrorType": "ResourceNotFoundException"}
    try:
        event = json.loads(body or b"{}")
    except ValueError:
        return 400, {"Type": "User", "message": "Could not parse request body into json"}, {
            "x-amzn-ErrorType": "InvalidRequestContentException"}
    try:
        caller = _signer(service, authorization)
        inv = service.invoke(name, event, asynchronous=kind == "Event", caller=caller)
    except AccessDenied as exc:
        return 403, {"Type": "User", "Message": str(exc)}, {"x-amzn-ErrorType": "AccessDeniedException"}
    if kind == "Event":
        return 202, None, {}
    inv.done.wait()
    if inv.error is not None:
        return 200, {"errorMessage": inv.error}, {"X-Amz-Function-Error": "Unhandled"}
    return 200, inv.result, {}


def _signer(service: LocalLambda, authorization: str | None) -> Caller | None:
    """Who signed an Invoke request (its access key id's principal); None where nobody is checked."""
    if service.access is None:
        return None
    return Caller(service.access.principal_of(access_key_id(authorization)))


class LambdaApi(ThreadedServer):
    """The Lambda Invoke API over HTTP (the part boto3's ``invoke`` uses), plus a status page.

    ``POST /2015-03-31/functions/{name}/invocations``: ``X-Amz-Invocation-Type: Event`` -> 202,
    ``RequestResponse`` (default) -> 200 with the handler's result. ``GET /local/containers``
    lists the containers.
    """

    def __init__(self, service: LocalLambda, host: str = "127.0.0.1", port: int = 0) -> None:
        self.service = service
        super().__init__(self._handler(), host, port, thread_name="sluice-lambda-api")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        service = self.service

        class _Handler(QuietHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                match = _INVOKE_PATH.match(self.path.split("?")[0])
                name = match.group("name") if match else ""
                name = name.rsplit(":", 1)[-1] if name.startswith("arn:") else name
                kind = self.headers.get("X-Amz-Invocation-Type", "RequestResponse")
                self._send(*_invoke_request(service, name, body, kind, self.headers.get("Authorization")))

            def do_GET(self) -> None:
                match = _FUNCTION_PATH.match(self.path.split("?")[0])
                if match:  # GetFunction: route registration checks that a worker function exists
                    return self._send(*_get_function(service, match.group("name")))
                if self.path.rstrip("/") != "/local/containers":
                    self._send(404, {"message": "not found"})
                    return
                self._send(200, {"containers": service.describe(), "counts": dict(service.counts)})

            def _send(self, status: int, body: Any, headers: Mapping[str, str] | None = None) -> None:
                raw = b"" if body is None and status == 202 else json.dumps(body, default=str).encode()
                self.answer(status, raw, [("Content-Type", "application/json"),
                                          ("X-Amz-Executed-Version", "$LATEST"), *(headers or {}).items()])

        return _Handler
