# One module: the server process and its protocol; the build's side of it is amp_book.kernels.
"""The kernel server: one process that imports torch once, then forks a kernel per page.

Run by the build (:class:`amp_book.kernels.KernelServer`) as
``python -m amp_book.kernel_server FOLDER OWNER_PID [--preload-all]``. It listens on a Unix
socket in ``FOLDER``, answers each request (a kernel's command line, working folder and
environment) by forking a kernel that runs ``ipykernel_launcher`` with them, and exits
with the build (the process ``OWNER_PID``). It never runs a cell, and never initialises
CUDA, which does not survive a fork. Linux only; it does not import Sphinx.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import selectors
import signal
import socket
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

PRELOAD = ("numpy", "torch", "matplotlib.pyplot", "ipykernel.ipkernel", "ipykernel.debugger")
"""Modules the server imports before it serves the first kernel.

``ipykernel.debugger`` (and debugpy with it) is imported by every kernel as it
starts. Not ``ipykernel.kernelapp``, whose settings read the kernel's own
``JPY_PARENT_PID`` at import, nor matplotlib's inline backend, which hooks
into the IPython shell that imports it (the server has none).
"""
PRELOAD_LATER = ("amp_lesson", "torch._dynamo", "tabulate")
"""Modules the server imports while it waits for requests, one at a time.

``amp_lesson`` stands for every module of the package but the extension;
``torch._dynamo`` is imported by the first optimizer step (1.7 s), ``tabulate``
by its exit handler in every kernel (0.07 s). Not ``sklearn.datasets``, which
three pages import (1.3 s): scikit-learn imports pandas where it is installed,
pandas imports pyarrow, and pyarrow's allocator starts a thread (on a CUDA image
with all three), after which the server could fork no kernel.
A kernel forked before one of them is imported imports it itself: the first
page of a build does not wait for modules it may not need. A server started
with ``preload_all`` imports them before it serves the first kernel, which is
cheaper for a build that executes many pages: else each of the first
parallel kernels imports them too, at the same time as the server. One
started with ``preload_later=False`` imports none of them: a build that runs
no more pages than it runs at once asks for every kernel at its start, so no
kernel would be forked after them (they took 2.8 s of a core from the pages).
"""
PER_LAUNCH_ENV = ("JPY_",)
"""Prefixes of the environment variables a kernel manager sets per kernel.

A kernel whose environment differs from the server's in any other variable
(which an import may have read) starts the usual way.
"""
SOCKET_NAME = "server.sock"
LOG_NAME = "server.log"
PID_NAME = "server.pid"
PRELOADED_NAME = "preloaded"
"""Written when the server has imported every module it will: their names, one a line."""
START_LOCK_NAME = "start.lock"  # holds "STARTER_PID SERVER_PID" once a process started it
START_TIMEOUT_S = 120.0
MAX_REQUEST_BYTES = 1 << 20
"""The largest request the server reads (a build's requests are a few kilobytes: its environment)."""
MAX_WAITING_REQUESTS = 64
"""The most connections the server reads requests from at once (a build has one per reader
starting a kernel). With one more, the one that has waited longest is answered with an error
and dropped, so idle clients can neither take the server's file descriptors nor keep a
build's request out."""
REQUEST_TIMEOUT_ENV = "AMP_LESSON_KERNEL_REQUEST_TIMEOUT"


def _request_timeout() -> float:
    value = os.environ.get(REQUEST_TIMEOUT_ENV) or "10"
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{REQUEST_TIMEOUT_ENV} must be a number of seconds > 0, got {value!r}")
    return seconds


REQUEST_TIMEOUT_S = _request_timeout()
"""How long the server waits for a connected client to finish sending its request
(seconds; :data:`REQUEST_TIMEOUT_ENV` changes it, as the tests do)."""
PRELOAD_ALL_FLAG = "--preload-all"
NO_LATER_FLAG = "--no-later"
KERNEL_MODULE = "ipykernel_launcher"


# -- the server --------------------------------------------------------------------------


def _cuda_driver_open() -> bool:
    """Whether this process holds an NVIDIA device file open (the CUDA driver is initialised)."""
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{fd}").startswith("/dev/nvidia"):
                return True
    return False


def package_modules() -> list[str]:
    """Every module of ``amp_lesson`` but this extension, by name."""
    import pkgutil

    import amp_lesson

    modules = pkgutil.iter_modules(amp_lesson.__path__, "amp_lesson.")
    return [info.name for info in modules if info.name != __package__]


def later_modules() -> list[str]:
    """:data:`PRELOAD_LATER`, with ``amp_lesson`` spelled out module by module."""
    names = []
    for name in PRELOAD_LATER:
        names.append(name)
        if name == "amp_lesson":
            names += package_modules()
    return names


def preload(modules: Iterable[str]) -> None:
    """Import ``modules`` as a kernel would, without initialising CUDA.

    A module that is not installed is passed over. Raises ``RuntimeError`` if
    an import opened the CUDA driver: a kernel forked from this process could
    not use the GPU.
    """
    import importlib

    # ipykernel's choice for a kernel (kernelapp.py); matplotlib reads it at import.
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    for name in modules:
        threads = thread_count()
        with contextlib.suppress(ModuleNotFoundError):
            importlib.import_module(name)
        if thread_count() > threads == 1:
            _log(
                f"importing {name} started threads ({', '.join(thread_names()[1:])}); "
                "from now on every kernel starts the usual way"
            )
        if _cuda_driver_open():
            raise RuntimeError(
                f"importing {name} in the kernel server initialised CUDA; a kernel forked "
                "from it could not use the GPU"
            )


class BadRequest(ValueError):
    """A request the server does not serve: what is wrong with it."""


def parse_request(data: bytes) -> dict[str, Any]:
    """The request in ``data`` (one JSON line), checked; raises :class:`BadRequest`.

    A request holds the kernel's arguments, working folder and environment:

    >>> parse_request(b'{"args": ["-f", "k.json"], "cwd": "/tmp", "env": {"A": "1"}}')["args"]
    ['-f', 'k.json']
    >>> parse_request(b"[]")
    Traceback (most recent call last):
    ...
    amp_book.kernel_server.BadRequest: a request is a JSON object with args, cwd and env, not list
    """
    try:
        request = json.loads(data.decode())
    except (UnicodeDecodeError, ValueError) as error:
        raise BadRequest(f"a request is one line of JSON ({error})") from None
    except RecursionError:  # arrays or objects nested past Python's recursion limit
        raise BadRequest("a request is a JSON object two levels deep, not nested deeper") from None
    if not isinstance(request, dict):
        raise BadRequest(
            "a request is a JSON object with args, cwd and env, not " + type(request).__name__
        )
    args, cwd, env = request.get("args"), request.get("cwd"), request.get("env")
    if not (isinstance(args, list) and all(isinstance(a, str) for a in args)):
        raise BadRequest("a request's args must be a list of strings")
    if not isinstance(cwd, str) or not os.path.isabs(cwd):
        raise BadRequest("a request's cwd must be an absolute path")
    if not (isinstance(env, dict) and all(isinstance(v, str) for v in env.values())):
        raise BadRequest("a request's env must map names to strings")
    return {"args": args, "cwd": cwd, "env": env}


class _PendingRequest:
    """A connection whose request has not all arrived: its bytes, descriptors and deadline."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self.data = b""
        self.fds: list[int] = []
        self.deadline = time.monotonic() + REQUEST_TIMEOUT_S

    def read(self) -> bool:
        """Read what has arrived; whether the request is complete. Raises BadRequest."""
        try:
            chunk, fds, _flags, _addr = socket.recv_fds(self.conn, 1 << 16, 3)
        except BlockingIOError:
            return False
        except OSError as error:
            raise BadRequest(f"the client went away ({error})") from None
        self.fds += fds
        if len(self.fds) > 3:
            raise BadRequest("a request sends at most 3 file descriptors")
        if not chunk:
            raise BadRequest("the client closed the connection before the end of its request")
        self.data += chunk
        if len(self.data) > MAX_REQUEST_BYTES:
            raise BadRequest(f"a request is at most {MAX_REQUEST_BYTES} bytes")
        return self.data.endswith(b"\n")

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds = []
        self.conn.close()


def thread_count() -> int:
    """The number of threads of this process (every thread, not only Python's)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        import threading

        return threading.active_count()


def thread_names() -> list[str]:
    """The names of this process's threads (Linux; empty elsewhere), the main thread's first."""
    names = []
    with contextlib.suppress(OSError):
        for task in sorted(os.listdir("/proc/self/task"), key=int):
            with contextlib.suppress(OSError):
                names.append(Path(f"/proc/self/task/{task}/comm").read_text().strip())
    return names


_PR_SET_PDEATHSIG = 1


def die_with_parent(signum: int = signal.SIGKILL, parent: int | None = None) -> bool:
    """Have the kernel receive ``signum`` when the process that forked it ends (Linux).

    ``parent``: the pid of that process, taken before the fork. Should it have
    ended before this call (a child is not always scheduled before its parent
    ends), the request would never fire: the kernel sends itself ``signum`` now.

    Returns whether the request was accepted (``False`` off Linux).
    """
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        accepted = bool(libc.prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False
    if accepted and signum and parent is not None and os.getppid() != parent:
        os.kill(os.getpid(), signum)
    return accepted


MAX_LOG_LINE = 2000
"""The longest line the server logs (what a request holds may be long)."""

MAX_NAMES_SHOWN = 20
"""The most variable names a refusal lists (a request may differ in thousands)."""

SEND_TIMEOUT_S = 1.0
"""How long the server waits for a client to take a reply (one that does not read it must not
hold up the others)."""


def _send(conn: socket.socket, message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        conn.settimeout(SEND_TIMEOUT_S)
        conn.sendall(json.dumps(message).encode() + b"\n")


def shared_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` but for the variables a kernel manager sets per kernel (:data:`PER_LAUNCH_ENV`)."""
    return {k: v for k, v in env.items() if not k.startswith(PER_LAUNCH_ENV)}


def env_differences(env: dict[str, str], reference: dict[str, str]) -> list[str]:
    """The names of the variables, but per-launch ones, that differ between two environments.

    >>> env_differences({"A": "1", "JPY_PARENT_PID": "7"}, {"A": "1", "B": "2"})
    ['B']
    """
    env, reference = shared_env(env), shared_env(reference)
    return sorted(k for k in env.keys() | reference.keys() if env.get(k) != reference.get(k))


def listen(folder: Path) -> socket.socket:
    """The server's socket, ``folder/server.sock``, listening (requests wait until served)."""
    path = folder / SOCKET_NAME
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = folder / f"{SOCKET_NAME}.{os.getpid()}"
    listener.bind(str(tmp))
    listener.listen(64)
    (folder / PID_NAME).write_text(str(os.getpid()))
    os.replace(tmp, path)  # clients never find a socket that is not listening yet
    return listener


class _Stopped(BaseException):
    """A signal asked the server to end.

    A ``BaseException``, as ``KeyboardInterrupt`` is: a library that imports
    an optional module under ``except Exception`` must not swallow it.
    """


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


_stop_asked: list[int] = []
"""The signals that asked the server to end: :func:`serve` ends at its next turn should a
module it imports have swallowed the :class:`_Stopped` raised inside it (a bare ``except:``
at module level, as pydevd, which debugpy imports, has)."""


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Hold the stop signals: one that arrives inside is handled as the block ends.

    Around a fork, so that the server never ends between forking a kernel and
    recording its pid (it kills only the kernels it knows of), and the kernel
    never runs the server's handler; around reaping, so that it never kills a
    pid it has reaped (which the system may have given to another process).
    """
    signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)


def _stop(signum: int, frame: Any) -> None:
    _stop_asked.append(signum)
    raise _Stopped(signum)


def serve(
    listener: socket.socket,
    folder: Path,
    owner: int,
    env: dict[str, str],
    later: Iterable[str] = (),
) -> dict[str, Any] | None:
    """Serve kernel requests on ``listener`` until process ``owner`` exits.

    A request whose environment differs from ``env`` (the server's, taken
    before it imported anything) is refused: its imports might have differed.
    So is any request while the server has more than one thread (a fork
    copies only the thread that forks; a lock another thread held stays held
    in the kernel for ever), and one that is malformed, larger than
    :data:`MAX_REQUEST_BYTES` or not complete within :data:`REQUEST_TIMEOUT_S`.
    Between requests it imports the modules ``later``, one at a time.

    Returns ``None`` in the server when it is done: its owner ended, or a
    signal (SIGTERM, SIGINT, SIGHUP) asked it to. However it ends, it kills
    every kernel it forked and removes its socket; when its owner has ended it
    removes its folder too, since nobody else will. In each forked kernel it
    returns that kernel's request, with the server's sockets closed, the
    kernel's standard streams in place and the default signal handlers back.
    """
    server = _Server(listener, folder, owner, env, later)
    try:
        while server.owner_alive:
            if _stop_asked:
                raise _Stopped(_stop_asked[0])
            request = server.step()
            if request is not None:  # in the kernel just forked
                return request
    except _Stopped as stop:
        _log(f"stopped by signal {stop.args[0]}")
    finally:
        server.close()
    return None


class _Server:
    """What :func:`serve` holds: the sockets it watches and the kernels it forked."""

    def __init__(
        self,
        listener: socket.socket,
        folder: Path,
        owner: int,
        env: dict[str, str],
        later: Iterable[str],
    ) -> None:
        self.listener, self.folder, self.owner, self.env = listener, folder, owner, env
        self.selector = selectors.DefaultSelector()
        self.selector.register(listener, selectors.EVENT_READ, "accept")
        try:
            self.owner_fd: int | None = os.pidfd_open(owner)
        except (AttributeError, OSError):
            self.owner_fd = None
        if self.owner_fd is not None:
            self.selector.register(self.owner_fd, selectors.EVENT_READ, "owner")
        self.kernels: dict[int, socket.socket | None] = {}  # pid -> the connection that asked
        # pid -> a pidfd that becomes readable when the kernel exits, so that the server reaps
        # it and tells its client at once, not at the next timeout of the select below
        self.exit_fds: dict[int, int] = {}
        self.reading: dict[socket.socket, _PendingRequest] = {}
        self.owner_alive = True
        self.pending = list(later)
        self.handlers = {signum: signal.signal(signum, _stop) for signum in _STOP_SIGNALS}
        self.pid = os.getpid()  # 0 in a forked kernel

    def step(self) -> dict[str, Any] | None:
        """Wait for one round of events and answer them; a request in a forked kernel."""
        timeout = 0 if self.pending else 0.2
        if self.reading:
            soonest = min(r.deadline for r in self.reading.values()) - time.monotonic()
            timeout = max(0.0, min(timeout, soonest))
        events = self.selector.select(timeout=timeout)
        if not events and self.pending:
            self._preload_next()
        for key, _events in events:
            if key.data == "owner":
                self.owner_alive = False
            elif key.data == "accept":
                self._accept()
            elif key.data == "request":
                waiting = self.reading.get(key.fileobj)  # type: ignore[call-overload]
                if waiting is None:  # dropped by an accept earlier in this round
                    continue
                try:
                    request = self._answer(waiting)
                except Exception as error:  # no request ends the server
                    if self.pid == 0:
                        raise  # in a forked kernel: the kernel's own error
                    _log(f"request failed: {type(error).__name__}: {error}")
                    if waiting.conn in self.reading:
                        self._forget(waiting)
                    _send(waiting.conn, {"error": f"{type(error).__name__}: {error}"})
                    waiting.close()
                    continue
                if request is not None:
                    return request
            elif isinstance(key.data, tuple):  # ("exited", pid): reaped below
                self.selector.unregister(key.fd)
                os.close(self.exit_fds.pop(key.data[1]))
            else:
                self._client_spoke(key.data, key.fileobj)  # type: ignore[arg-type]
        self._expire()
        if self.owner_fd is None and self.owner_alive:
            try:
                os.kill(self.owner, 0)
            except ProcessLookupError:
                self.owner_alive = False
        self._reap()
        return None

    def _accept(self) -> None:
        """Take a connection; with :data:`MAX_WAITING_REQUESTS` already being read, the one
        that has waited longest is dropped for it (the newest is the likeliest to be a build's)."""
        try:
            conn, _ = self.listener.accept()
        except OSError as error:  # out of file descriptors, or the client already left
            _log(f"connection not accepted: {error}")
            if error.errno in (errno.EMFILE, errno.ENFILE) and self.reading:
                self._drop_oldest("to free a file descriptor")
            return
        if len(self.reading) >= MAX_WAITING_REQUESTS:
            self._drop_oldest(f"{MAX_WAITING_REQUESTS} requests were being read at once")
        conn.setblocking(False)
        self.reading[conn] = _PendingRequest(conn)
        self.selector.register(conn, selectors.EVENT_READ, "request")

    def _drop_oldest(self, why: str) -> None:
        oldest = min(self.reading.values(), key=lambda r: r.deadline)
        _log(f"request refused: {why}; dropped the one that had waited longest")
        self._forget(oldest)
        _send(oldest.conn, {"error": f"refused: {why}"})
        oldest.close()

    def _preload_next(self) -> None:
        preload([self.pending.pop(0)])
        if not self.pending:
            with contextlib.suppress(OSError):  # the build may have removed the folder
                (self.folder / PRELOADED_NAME).write_text("\n".join(sorted(sys.modules)))

    def _forget(self, waiting: _PendingRequest) -> None:
        self.selector.unregister(waiting.conn)
        del self.reading[waiting.conn]

    def _answer(self, waiting: _PendingRequest) -> dict[str, Any] | None:
        """Read more of a request; once whole, refuse it or fork its kernel."""
        try:
            if not waiting.read():
                return None
            request = parse_request(waiting.data)
        except BadRequest as error:
            _log(f"request refused: {error}")
            _send(waiting.conn, {"error": str(error)})
            self._forget(waiting)
            waiting.close()
            return None
        self._forget(waiting)
        waiting.conn.setblocking(True)
        refusal = _refusal(request, self.env, len(waiting.fds))
        if refusal:
            _log(f"fork refused: {'; '.join(refusal)}")
            _send(waiting.conn, {"refused": refusal})
            waiting.close()  # the connection and the descriptors
            return None
        return self._fork(request, waiting.conn, waiting.fds)

    def _fork(
        self, request: dict[str, Any], conn: socket.socket, fds: list[int]
    ) -> dict[str, Any] | None:
        """Fork the kernel: ``request`` in it, ``None`` in the server."""
        server = os.getpid()
        with _signals_held():  # in the kernel, until the default handlers are back
            pid = os.fork()
            if pid == 0:
                self._become_kernel(conn, fds, server)
                return request
            for fd in fds:
                os.close(fd)
            self.kernels[pid] = conn  # before a stop signal ends the server
            self.selector.register(conn, selectors.EVENT_READ, pid)
            with contextlib.suppress(AttributeError, OSError):  # else reaped within 0.2 s
                self.exit_fds[pid] = os.pidfd_open(pid)
                self.selector.register(self.exit_fds[pid], selectors.EVENT_READ, ("exited", pid))
            _send(conn, {"pid": pid})
        return None

    def _become_kernel(self, conn: socket.socket, fds: list[int], server: int) -> None:
        """In the forked kernel: drop everything of the server's, take the client's streams."""
        self.pid = 0
        die_with_parent(signal.SIGKILL, server)
        for signum, handler in self.handlers.items():
            signal.signal(signum, handler)
        self.selector.close()
        self.listener.close()
        if self.owner_fd is not None:
            os.close(self.owner_fd)
        for fd in self.exit_fds.values():
            os.close(fd)
        for other in [*self.kernels.values(), *(r.conn for r in self.reading.values())]:
            if other is not None:
                other.close()
        conn.close()
        os.setsid()  # its own process group, as jupyter_client starts a kernel
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)

    def _client_spoke(self, pid: int, conn: socket.socket) -> None:
        """A kernel's client sent something or went away: its kernel goes too."""
        with contextlib.suppress(OSError):
            if conn.recv(1):
                return
        self.selector.unregister(conn)
        conn.close()
        self.kernels[pid] = None
        _kill_kernel(pid)

    def _expire(self) -> None:
        """Drop the clients that sent too little in time."""
        now = time.monotonic()
        for waiting in list(self.reading.values()):
            if waiting.deadline <= now:
                _log(f"request refused: not complete within {REQUEST_TIMEOUT_S:g} s")
                self._forget(waiting)
                waiting.close()

    def _reap(self) -> None:
        """Reap the kernels that ended; tell their clients how."""
        with _signals_held():  # no stop between reaping a pid and forgetting it
            self._reap_held()

    def _reap_held(self) -> None:
        while self.kernels:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if pid in self.exit_fds:  # reaped before its pidfd was read
                self.selector.unregister(self.exit_fds[pid])
                os.close(self.exit_fds.pop(pid))
            conn = self.kernels.pop(pid, None)
            if conn is not None:  # else its client has gone
                self.selector.unregister(conn)
                _send(conn, {"exit": os.waitstatus_to_exitcode(status)})
                conn.close()

    def close(self) -> None:
        """In the server (not in a kernel returning its request): kill every kernel, remove
        the socket (and the folder when the owner has gone), restore the signal handlers."""
        if self.pid != os.getpid():
            return
        for signum in _STOP_SIGNALS:  # a second one must not cut the cleaning short
            signal.signal(signum, signal.SIG_IGN)
        for pid in self.kernels:
            _kill_kernel(pid)
        for waiting in self.reading.values():
            waiting.close()
        with contextlib.suppress(OSError):
            (self.folder / SOCKET_NAME).unlink()
        if not process_running(self.owner):
            import shutil

            shutil.rmtree(self.folder, ignore_errors=True)
        for signum, handler in self.handlers.items():
            signal.signal(signum, handler)


def _kill_kernel(pid: int) -> None:
    """Kill a forked kernel and the processes it started.

    Its process group first; then the kernel itself, which is not yet a group
    of its own until it has called ``setsid`` (a kernel forked just before the
    server ends may not have).
    """
    for kill in (os.killpg, os.kill):
        with contextlib.suppress(OSError):
            kill(pid, signal.SIGKILL)


def _refusal(request: dict[str, Any], env: dict[str, str], n_fds: int) -> list[str]:
    """Why the server does not fork the kernel of ``request`` (empty: it does)."""
    if n_fds != 3:
        return [f"a request sends 3 file descriptors (stdin, stdout, stderr), not {n_fds}"]
    if differ := env_differences(request["env"], env):  # the names of those that differ
        shown = MAX_NAMES_SHOWN
        return differ if len(differ) <= shown else [*differ[:shown], f"{len(differ) - shown} more"]
    if (threads := thread_count()) > 1:
        return [f"the server has {threads} threads; it forks only with one"]
    return []


def _log(message: str) -> None:
    """A line in the server's log (its standard error)."""
    if len(message) > MAX_LOG_LINE:
        message = message[:MAX_LOG_LINE] + f"… ({len(message) - MAX_LOG_LINE} characters more)"
    with contextlib.suppress(Exception):
        print(f"[kernel server {os.getpid()}] {message}", file=sys.stderr, flush=True)


def run_kernel(request: dict[str, Any]) -> None:
    """Become the kernel ``request`` asks for (in a process the server forked)."""
    import random
    import runpy

    import numpy as np

    os.chdir(request["cwd"])
    # As ``python -m`` run there would: the server's own first entry is where it started.
    sys.path[0] = os.getcwd()
    os.environ.clear()
    os.environ.update(request["env"])
    # A fresh interpreter seeds these from the OS; forked, they would share the server's state.
    random.seed()
    np.random.seed()  # noqa: NPY002 (the legacy global state is what a fresh one reseeds)
    sys.argv = [KERNEL_MODULE, *request["args"]]
    runpy.run_module(KERNEL_MODULE, run_name="__main__", alter_sys=True)


def exit_kernel(code: int = 0) -> None:
    """End a forked kernel the way an interpreter ends, less the teardown of its modules.

    The exit handlers run and the streams are flushed, as at any exit; then
    the process ends without tearing down torch's objects one by one, which
    took 0.7 s after the kernel had already shut down (the client waits for it).
    Every object is frozen first: IPython's exit handler runs a full garbage
    collection (0.26 s over torch's objects), which skips frozen ones.
    """
    import atexit
    import gc

    gc.freeze()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def main(argv: list[str]) -> int:
    """``python -m amp_book.kernel_server FOLDER OWNER_PID [--preload-all | --no-later]``: run
    the server."""
    import warnings

    folder, owner = Path(argv[0]), int(argv[1])
    env = dict(os.environ)
    # Ignored SIGCHLD survives exec: the system would reap the kernels itself, and the server
    # could not tell their clients how they ended (nor a kernel's subprocess its own exit code).
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    # Python 3.12 warns when a process with threads forks. The server checks that it has one
    # thread before each fork; should the check ever miss one, the warning stops the server
    # (and so the build) instead of scrolling past in its log.
    warnings.filterwarnings("error", message=".*fork", category=DeprecationWarning)
    listener = listen(folder)
    preload(PRELOAD)
    if os.environ.get("AMP_BOOK_RAN_NOTES"):
        # What the lesson's modules run as the server imports them, each kernel it forks
        # notes as its own (amp_book.edition.ran).
        from amp_book.edition import ran

        ran.start()
    later = [] if argv[2:] == [NO_LATER_FLAG] else later_modules()
    if argv[2:] == [PRELOAD_ALL_FLAG]:
        preload(later)
        later = []
    if not later:  # all it will import
        (folder / PRELOADED_NAME).write_text("\n".join(sorted(sys.modules)))
    request = serve(listener, folder, owner, env, later)
    if request is None:
        # Done serving, its kernels killed and its socket removed: the server ends without
        # Python's teardown of torch's modules (about a second, which the build waits for).
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(0)
    try:
        run_kernel(request)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        exit_kernel(code)
    except BaseException:  # noqa: BLE001 (a forked kernel must never return to the server)
        import traceback

        traceback.print_exc()
        exit_kernel(1)
    exit_kernel(0)
    return 0  # not reached


# -- the build: one server per build ------------------------------------------------------


def process_running(pid: int) -> bool:
    """Whether process ``pid`` exists and has not exited (a zombie has)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
