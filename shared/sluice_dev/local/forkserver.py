"""A fork server for the local Lambda containers: one process imports once, each container is a fork.

A container started as ``python -m sluice_dev.local.container`` spends most of its cold start
importing (boto3, pydantic, the sluice entry modules: about 0.6 CPU-s), and ``sluice dev`` starts
several per stack. Here one "zygote" process (``python -m sluice_dev.local.forkserver FD``) imports
those modules once, before any handler's module and before anything reads the environment, and forks
a container for each request. The fork then becomes what the fresh process was:

- its own session (``setsid``: the service kills a container with ``killpg``), its stdin, stdout and
  stderr (the fds the service made for it, passed over a Unix socket), its cwd, and the command line
  ps shows (``python -m sluice_dev.local.container NAME HANDLER``, written over the zygote's);
- its own environment: ``os.environ`` is replaced by the function's (the service's environment plus
  the function's variables, as ``Popen(env=...)`` gave it), ``time.tzset()`` reads TZ again;
- fresh module state: nothing in the zygote has run a handler, built a client or read a setting, so
  what a fork inherits is what importing gives; the handler's own module loads in the fork. ``random``
  reseeds itself in a fork.
- the same end: at stdin's EOF ``container.main`` returns; non-daemon threads are joined and atexit
  functions run, as at a fresh interpreter's exit.

A module belongs in ``PRELOAD`` only if importing it reads no environment variable a function may
set (sluice reads ``os.environ`` only in ``Settings``, which the zygote checks it has not built; boto3
reads it when a session is made). Lambda entry modules that prepare at import (``sluice.entry.
worker_function``, functions/*/app.py) are not preloadable: their preparation is the fork's cold start.
Interpreter-start variables (``PYTHON*``: sys.path, hash seed, bytecode) cannot change after start:
the service keeps one zygote per set of them (``zygote_key``).

The same zygote forks servers (``spawn_server``: ``python -m MODULE ARGV`` as ``MODULE.main(argv)``,
stdin from /dev/null, output to a log): ``servers.start_moto`` forks each moto server from a zygote
that imported moto once (``servers.MOTO_PRELOAD``), ~0.03 CPU-s a server instead of ~0.8.

The zygote reaps its forks and reports each exit (code as ``Popen.returncode`` gives it: -N for a
signal) to the service, whose ``ForkedProcess`` stands in for ``subprocess.Popen``. If the zygote
dies, its containers are killed and reported as ended by SIGKILL; the next spawn starts a new zygote.
The zygote ends when the service closes its socket (or dies); its containers end at their stdin's EOF.
"""

from __future__ import annotations

import ast
import atexit
import contextlib
import gc
import importlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from pathlib import Path
from queue import Queue
from typing import IO, Any, Protocol

# Imported by the zygote before any fork (see the module's doc for what may be listed), where the
# service runs sluice's functions (``preload_for``); a harness of its own handlers gets CONTAINER only.
CONTAINER = "sluice_dev.local.container"
PRELOAD = (CONTAINER, "sluice.entry.root", "sluice.entry.worker",
           "sluice.entry.gateway", "sluice.entry.gateway_api",
           "sluice.entry.relay", "sluice.entry.registrar", "sluice.entry.firings", "sluice.entry.operator",
           "sluice.entry.internal", "boto3", "botocore.session", "botocore.client", "redis")
_MAX_MESSAGE = 1 << 20


class ContainerProcess(Protocol):
    """What the local Lambda service uses of a container's process (``subprocess.Popen`` has it)."""

    @property
    def pid(self) -> int: ...

    @property
    def stdin(self) -> IO[bytes] | None: ...

    @property
    def stdout(self) -> IO[bytes] | None: ...

    @property
    def returncode(self) -> int | Any: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


def preload_for(handlers: Iterable[str]) -> tuple[str, ...]:
    """What a zygote imports for these handler refs (``module:function`` or ``/path/app.py:function``).

    The sluice modules (PRELOAD) when any handler is sluice's: its module is in ``sluice``, or its
    file imports from ``sluice`` (functions/*/app.py). The file is parsed, not run.
    """
    for ref in handlers:
        target = ref.rpartition(":")[0]
        if target.endswith(".py"):
            try:
                tree = ast.parse(Path(target).read_bytes())
            except (OSError, SyntaxError, ValueError):
                continue
            names = [a.name for n in tree.body if isinstance(n, ast.Import) for a in n.names]
            names += [n.module for n in tree.body
                      if isinstance(n, ast.ImportFrom) and n.module and not n.level]
        else:
            names = [target]
        if any(name == "sluice" or name.startswith(("sluice.", "sluice_dev.")) for name in names):
            return PRELOAD
    return (CONTAINER,)


def zygote_key(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The interpreter-start variables of an environment: forks of one zygote share them."""
    return tuple(sorted((k, v) for k, v in env.items() if k.startswith("PYTHON")))


# -- the service's side ----------------------------------------------------------------------------


class ForkedProcess:
    """A process forked by the zygote: ``Popen``'s pid, pipes (a server's: none), ``poll`` and ``wait``."""

    def __init__(self, pid: int, stdin: IO[bytes] | None, stdout: IO[bytes] | None) -> None:
        self.pid, self.stdin, self.stdout = pid, stdin, stdout
        self.returncode: int | None = None
        self._ended = threading.Event()

    def _exited(self, code: int) -> None:
        self.returncode = code
        self._ended.set()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(f"container {self.pid}", timeout or 0.0)
        assert self.returncode is not None
        return self.returncode


class ForkServer:
    """One zygote process and the thread that hears from it."""

    def __init__(self, python: str, env: Mapping[str, str], stderr: IO[bytes],
                 preload: Sequence[str] = (CONTAINER,)) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen([python, "-m", "sluice_dev.local.forkserver", str(theirs.fileno()),
                                          *preload],
                                         pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                                         stdout=stderr, stderr=stderr, env=dict(env))
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._sock = ours
        self._lock = threading.Lock()  # one spawn at a time: replies come in request order
        self._replies: Queue[ForkedProcess | None] = Queue()
        self._forked: dict[int, ForkedProcess] = {}
        self._pipes: tuple[IO[bytes] | None, IO[bytes] | None] | None = None
        self.alive = True
        threading.Thread(target=self._listen, name=f"sluice-forkserver-{self.proc.pid}", daemon=True).start()

    def spawn(self, argv: list[str], env: Mapping[str, str], stderr: IO[bytes],
              timeout: float = 60.0) -> ForkedProcess:
        """Fork a container running ``sluice_dev.local.container`` with ``argv`` and ``env``.

        OSError when the zygote is gone or does not answer in ``timeout`` s.
        """
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        try:
            return self._fork(CONTAINER, argv, env, [in_r, out_w, stderr.fileno()],
                              (os.fdopen(in_w, "wb"), os.fdopen(out_r, "rb")), timeout)
        finally:
            os.close(in_r)
            os.close(out_w)

    def spawn_server(self, module: str, argv: list[str], env: Mapping[str, str], out: IO[bytes],
                     timeout: float = 60.0) -> ForkedProcess:
        """Fork ``python -m MODULE ARGV`` (``MODULE.main(argv)``, preloaded by this zygote) with
        stdin from /dev/null and stdout and stderr to ``out``, as ``servers._spawn`` starts a server."""
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            return self._fork(module, argv, env, [null, out.fileno(), out.fileno()], (None, None), timeout)
        finally:
            os.close(null)

    def _fork(self, module: str, argv: list[str], env: Mapping[str, str], fds: list[int],
              pipes: tuple[IO[bytes] | None, IO[bytes] | None], timeout: float) -> ForkedProcess:
        """Send the request and ``fds`` (the fork's stdin, stdout, stderr); the fork once it leads its
        session. ``pipes``: this side's ends of the fork's stdin and stdout, closed if it fails."""
        request = json.dumps({"module": module, "argv": argv, "env": dict(env), "cwd": os.getcwd()}).encode()
        with self._lock:
            if not self.alive:
                for f in pipes:
                    if f is not None:
                        f.close()
                raise OSError("the fork server has ended")
            self._pipes = pipes
            try:
                socket.send_fds(self._sock, [request], fds)
                forked = self._replies.get(timeout=timeout)
            except Exception as exc:
                # No answer: a late one would answer the next spawn, so this zygote is done with.
                self.alive = False
                with contextlib.suppress(OSError):
                    self._sock.shutdown(socket.SHUT_RDWR)
                for f in pipes:
                    if f is not None:
                        f.close()
                raise OSError(f"the fork server did not fork: {exc}") from exc
            finally:
                self._pipes = None
        if forked is None:
            raise OSError("the fork server ended before it forked")
        return forked

    def _listen(self) -> None:
        while True:
            try:
                raw = self._sock.recv(_MAX_MESSAGE)
            except OSError:
                raw = b""
            if not raw:
                break
            message = json.loads(raw)
            if "pid" in message:
                pipes = self._pipes
                if pipes is None:  # a late answer to a spawn that gave up: nobody holds its pipes
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(int(message["pid"]), signal.SIGKILL)
                    continue
                forked = ForkedProcess(int(message["pid"]), *pipes)
                self._forked[forked.pid] = forked
                self._replies.put(forked)
            elif "exited" in message:
                ended = self._forked.pop(int(message["exited"]), None)
                if ended is not None:
                    ended._exited(int(message["code"]))
        # The zygote is gone: nobody reaps or reports its forks any more, so they end now.
        self.alive = False
        self._replies.put(None)
        for forked in list(self._forked.values()):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(forked.pid, signal.SIGKILL)
            forked._exited(-signal.SIGKILL)
        self._forked.clear()

    def close(self, timeout: float = 5.0) -> None:
        """End the zygote (its forks run on until their stdin closes)."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self._sock.close()


class Zygotes:
    """This process's zygotes by key, each kept for the next start until the process exits, then
    ended and waited for: their CPU, and their forks', counts in this process's children (a tier's
    CPU-s, .ci/cpu_per_file.py) as each fresh process's did. A zygote that died is replaced."""

    def __init__(self) -> None:
        self._by_key: dict[Hashable, ForkServer] = {}
        self._lock = threading.Lock()
        self._at_exit = False

    def get(self, key: Hashable, start: Callable[[], ForkServer]) -> ForkServer:
        with self._lock:
            zygote = self._by_key.get(key)
            if zygote is None or not zygote.alive:
                if zygote is not None:
                    zygote.close()
                if not self._at_exit:
                    atexit.register(self.close)
                    self._at_exit = True
                zygote = self._by_key[key] = start()
            return zygote

    def close(self) -> None:
        with self._lock:
            for zygote in self._by_key.values():
                zygote.close()
            self._by_key.clear()


# -- the zygote ------------------------------------------------------------------------------------


def _send(sock: socket.socket, message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):  # the service is gone: the loop ends at the next read
        sock.send(json.dumps(message).encode())


def _retitle(argv: Sequence[str]) -> None:
    """Show ``argv`` as this process's command line (ps, psutil: ``/proc/self/cmdline``), as
    setproctitle does: the zygote's argv area (``/proc/self/stat``'s arg_start and arg_end) is
    rewritten in place, NUL-padded, cut to its size (the zygote's own line is the longer)."""
    import ctypes

    try:
        fields = Path("/proc/self/stat").read_text().rpartition(")")[2].split()
        start, end = int(fields[45]), int(fields[46])  # stat fields 48 and 49
    except (OSError, IndexError, ValueError):
        return
    size = end - start
    if size <= 1:
        return
    title = "\0".join(argv).encode()[:size - 1]
    ctypes.memmove(start, title + b"\0" * (size - len(title)), size)


def _become(sock: socket.socket, wake: tuple[int, ...], request: dict[str, Any], fds: list[int]) -> None:
    """In the fork: become ``python -m MODULE ARGV`` (the request's; a container unless it names
    another module) under its environment."""
    code: Any = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        sock.close()
        os.setsid()
        for fd in wake:  # the zygote's wake-up pipe, and its "in a session now" pipe last
            os.close(fd)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)  # stdin, stdout, stderr (dup2's copies are inheritable, as Popen's are)
        for fd in set(fds):
            if fd > 2:
                os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        time.tzset()
        name = request.get("module", CONTAINER)
        module = importlib.import_module(name)
        sys.argv = [module.__file__ or name, *request["argv"]]
        _retitle([sys.executable, "-m", name, *request["argv"]])
        code = module.main(request["argv"])
    except SystemExit as exc:
        code = exc.code
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        # A fresh interpreter's exit: join non-daemon threads, run atexit, flush.
        with contextlib.suppress(BaseException):
            threading._shutdown()  # type: ignore[attr-defined]
        with contextlib.suppress(BaseException):
            import atexit

            atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
        os._exit(code if isinstance(code, int) else (0 if code is None else 1))


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(sock, {"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def serve(sock: socket.socket, preload: Sequence[str]) -> int:
    """The zygote's loop: a fork per request, an exit report per reaped fork, until the socket closes."""
    for name in preload:
        importlib.import_module(name)
    # What the imports made stays out of every fork's collections: a collection that walks it
    # writes to each object's header, copying the zygote's pages into the fork one by one.
    gc.freeze()
    root = sys.modules.get("sluice.entry.root")
    if root is not None and root.settings.cache_info().currsize:
        # Every fork would keep the zygote's Settings, not read its function's environment.
        raise RuntimeError(f"a module of {list(preload)} read the settings at import: it cannot be preloaded")
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda _signum, _frame: None)  # wakes select() through wake_r
    while True:
        ready, _, _ = select.select([sock.fileno(), wake_r], [], [], 1.0)
        if wake_r in ready:
            os.read(wake_r, 4096)
        _reap(sock)  # every round too: a SIGCHLD that came while a fork was being made is not lost
        if sock.fileno() not in ready:
            continue
        try:
            raw, fds, _flags, _addr = socket.recv_fds(sock, _MAX_MESSAGE, 3)
        except OSError:
            raw, fds = b"", []
        if not raw:
            return 0
        request = json.loads(raw)
        for stream in (sys.stdout, sys.stderr):  # nothing of the zygote's is written twice
            stream.flush()
        # The pid is answered once the fork leads its session (as Popen returns after its child's
        # setsid): a killpg right after the spawn must find the group.
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(ready_r)
            _become(sock, (wake_r, wake_w, ready_w), request, fds)
        os.close(ready_w)
        os.read(ready_r, 1)  # EOF: the fork closed its end after setsid (or died)
        os.close(ready_r)
        for fd in fds:
            os.close(fd)
        _send(sock, {"pid": pid})


if __name__ == "__main__":
    sys.exit(serve(socket.socket(fileno=int(sys.argv[1])), sys.argv[2:]))
