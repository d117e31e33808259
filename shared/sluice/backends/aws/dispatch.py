"""``ports.Dispatcher`` implementations: how the relay starts workers for a backlog.

In AWS, asynchronous Lambda invokes (``InvocationType=Event``): the call returns once
Lambda has queued the event, so the relay never waits for a worker to run. On one
machine, worker OS processes running the same worker Lambda handler.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sluice.backends.aws.clients import lambda_client
from sluice.core.config import Settings
from sluice.core.errors import BackendUnavailable, InvalidInput
from sluice.core.models import DispatchEvent

log = logging.getLogger(__name__)

EVENT_PLACEHOLDER = "{event}"


def dispatch_event(queue: str, batch: int) -> str:
    return DispatchEvent(queues=[queue], batch=batch, source="relay").model_dump_json()


class LambdaDispatcher:
    """Invokes a queue's worker function asynchronously, a few invokes in parallel.

    ``function_for(queue)`` names the function a queue is routed to (``routes.CachedRouteLookup``);
    without it every queue goes to ``function_name``, the default worker.
    """

    def __init__(self, client: Any, function_name: str, *, parallel: int = 8,
                 build_client: Callable[[], Any] | None = None,
                 function_for: Callable[[str], str] | None = None) -> None:
        """``client``: a Lambda client; or None and ``build_client``, called on the first dispatch."""
        if not function_name:
            raise InvalidInput("LambdaDispatcher needs the worker function's name or ARN")
        if client is None and build_client is None:
            raise InvalidInput("LambdaDispatcher needs a Lambda client or a way to build one")
        self._client = client
        self._build = build_client if client is None else None
        self.function_name = function_name
        self.function_for = function_for or (lambda _queue: function_name)
        self.parallel = parallel

    @property
    def client(self) -> Any:
        # Built on the first dispatch, not with the relay: a Lambda client costs a cold relay
        # 100-300 ms of botocore model loading, and most passes of a quiet relay dispatch nothing.
        if self._build is not None:
            self._client, self._build = self._build(), None
        return self._client

    @classmethod
    def from_settings(cls, settings: Settings,
                      function_for: Callable[[str], str] | None = None) -> LambdaDispatcher:
        def build() -> Any:
            return lambda_client(settings, read_timeout=5)

        return cls(None, settings.worker_function_name or "", build_client=build, function_for=function_for)

    def _invoke(self, function: str, payload: bytes) -> bool:
        import botocore.exceptions

        try:
            reply = self.client.invoke(FunctionName=function, InvocationType="Event", Payload=payload)
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
            log.warning("async invoke of %s failed: %s", function, exc)
            return False
        return int(reply.get("StatusCode", 0)) == 202

    def dispatch(self, queue: str, invocations: int, batch: int) -> int:
        """Returns how many invocations Lambda accepted; raises only if none was."""
        if invocations <= 0:
            return 0
        function = self.function_for(queue)
        payload = dispatch_event(queue, batch).encode()
        _ = self.client  # built here, before the pool's threads share it
        if invocations == 1:
            accepted = int(self._invoke(function, payload))
        else:
            with ThreadPoolExecutor(max_workers=min(self.parallel, invocations)) as pool:
                accepted = sum(pool.map(lambda p: self._invoke(function, p), [payload] * invocations))
        if accepted == 0:
            raise BackendUnavailable(f"Lambda accepted none of {invocations} invokes of {function}")
        return accepted


class LocalProcessDispatcher:
    """Starts worker processes locally, at most ``max_processes`` alive at once.

    ``command`` runs the worker Lambda handler with a Lambda-like context (the worker
    runtime owns that entry point). The dispatch event's JSON replaces any
    ``{event}`` argument, or is appended as the last argument.
    """

    def __init__(self, command: Sequence[str], *, max_processes: int = 4,
                 env: Mapping[str, str] | None = None, cwd: str | None = None) -> None:
        if not command:
            raise InvalidInput("LocalProcessDispatcher needs a worker command")
        self.command = list(command)
        self.max_processes = max_processes
        self.env = {**os.environ, **(env or {})}
        self.cwd = cwd
        self.procs: list[subprocess.Popen[bytes]] = []

    def alive(self) -> int:
        self.procs = [p for p in self.procs if p.poll() is None]
        return len(self.procs)

    def _argv(self, event: str) -> list[str]:
        if any(EVENT_PLACEHOLDER in a for a in self.command):
            return [a.replace(EVENT_PLACEHOLDER, event) for a in self.command]
        return [*self.command, event]

    def dispatch(self, queue: str, invocations: int, batch: int) -> int:
        n = max(0, min(invocations, self.max_processes - self.alive()))
        argv = self._argv(dispatch_event(queue, batch))
        for _ in range(n):
            try:
                proc = subprocess.Popen(argv, env=self.env, cwd=self.cwd, stdin=subprocess.DEVNULL,
                                        start_new_session=True)
            except OSError as exc:
                raise BackendUnavailable(f"cannot start a worker process: {exc}") from exc
            self.procs.append(proc)
        return n

    def close(self, timeout: float = 5.0) -> None:
        """Stop every worker this dispatcher started (SIGTERM, then SIGKILL)."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait(timeout)
        self.procs = []
