"""Kernels forked from a server that has already imported torch.

Every executed page runs in a kernel of its own. Started the usual way, each
kernel spends about 4 CPU-seconds before its first cell does any work: a new
interpreter, ipykernel, ``import torch`` (2 s) and matplotlib. Over twenty
pages that is some 80 CPU-seconds of a cold build.

So a build starts one *kernel server*, which imports those modules once and
then forks a kernel for each page. A forked kernel is still a process of its
own, in which no other page has run code: the server never runs a cell, it
only imports. What a forked kernel finds that a fresh interpreter would not is
those modules already in ``sys.modules``. Python's and NumPy's global random
generators are reseeded in each kernel, as a fresh interpreter seeds them.

- :class:`ForkingProvisioner` is a ``jupyter_client`` kernel provisioner
  (registered as ``amp-lesson-fork``) that asks the server for a kernel and
  otherwise behaves as the standard local one. It forks only an ipykernel
  of this same interpreter and environment; any other kernel starts the
  usual way.
- The server starts when the build is about to read a page with cells
  (:meth:`KernelServer.start_soon`), or else with the first kernel asked for;
  it listens on a Unix socket in the folder named by :data:`SERVER_ENV`, and
  exits with the build (the process named by :data:`OWNER_ENV`).
- The server never initialises CUDA, which does not survive a fork: it
  refuses to serve if an import did. Each kernel initialises its own.

Linux only: fork is the native way to start processes there (macOS's system
frameworks are not fork-safe). This module does not import Sphinx; the
server runs it as a script.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from jupyter_client.connect import KernelConnectionInfo
from jupyter_client.provisioning import LocalProvisioner

PROVISIONER_NAME = "amp-lesson-fork"
"""The name the provisioner is registered under (``jupyter_client.kernel_provisioners``)."""
SERVER_ENV = "AMP_LESSON_KERNEL_SERVER"
"""Environment variable naming the folder of the server's socket; set by the build."""
OWNER_ENV = "AMP_LESSON_KERNEL_SERVER_OWNER"
"""Environment variable with the build's process id; the server exits when it does."""
USUAL_WAY_ENV = "AMP_LESSON_KERNELS_USUAL_WAY"
"""Set (to 1) where a build's kernels start the usual way, with no server (see
:meth:`KernelServer.usual_way`); their sockets are still in the build's folder."""
SERVER_VARIABLES = (SERVER_ENV, OWNER_ENV, USUAL_WAY_ENV)
"""What a build sets for its kernel server; a kernel it does not fork starts without them."""
PRELOAD = ("numpy", "torch", "matplotlib.pyplot", "ipykernel.ipkernel", "ipykernel.debugger")
"""Modules the server imports before it serves the first kernel.

``ipykernel.debugger`` (and debugpy with it) is imported by every kernel as it
starts. Not ``ipykernel.kernelapp``, whose settings read the kernel's own
``JPY_PARENT_PID`` at import, nor matplotlib's inline backend, which hooks
into the IPython shell that imports it (the server has none).
"""
PRELOAD_LATER = ("amp_lesson", "torch._dynamo", "tabulate", "sklearn.datasets")
"""Modules the server imports while it waits for requests, one at a time.

``amp_lesson`` stands for every module of the package but the extension;
``torch._dynamo`` is imported by the first optimizer step (1.7 s), ``tabulate``
by its exit handler in every kernel (0.07 s), and ``sklearn.datasets`` by the
pages that load the digits (1.3 s), if installed.
A kernel forked before one of them is imported imports it itself: the first
page of a build does not wait for modules it may not need. A server started
with ``preload_all`` imports them before it serves the first kernel, which is
cheaper for a build that executes many pages: else each of the first
parallel kernels imports them too, at the same time as the server.
"""
SERVED_ROOTS = frozenset({"numpy", "torch", "matplotlib", "amp_lesson", "sklearn", "tabulate"})
"""The packages whose import a forked kernel saves (:data:`PRELOAD`, :data:`PRELOAD_LATER`)."""


def worth_a_server(code: str) -> bool:
    """Whether a cell of ``code`` imports a package the server imports before its kernels.

    Code that does not parse counts as needing it (a kernel then starts forked, as before).

    >>> worth_a_server("import json\\nprint(6 * 7)"), worth_a_server("from amp_lesson import x")
    (False, True)
    >>> worth_a_server("import torch.nn as nn"), worth_a_server("%matplotlib inline\\nimport os")
    (True, False)
    """
    import ast

    text = "\n".join(
        "" if line.lstrip().startswith(("%", "!")) else line for line in code.splitlines()
    )
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return True
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        if any(name.split(".")[0] in SERVED_ROOTS for name in names):
            return True
    return False


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
REQUEST_TIMEOUT_ENV = "AMP_LESSON_KERNEL_REQUEST_TIMEOUT"
REQUEST_TIMEOUT_S = float(os.environ.get(REQUEST_TIMEOUT_ENV) or 10.0)
"""How long the server waits for a connected client to finish sending its request
(seconds; :data:`REQUEST_TIMEOUT_ENV` changes it, as the tests do)."""
TMPDIR_ENV = "AMP_LESSON_KERNEL_TMPDIR"
"""Environment variable naming where the build makes its server folder (default ``/tmp``).

The tests point it at a folder of their own, so that another build on the machine is never
taken for theirs.
"""
FOLDER_PREFIX = "amp-lesson-kernels-"
PRELOAD_ALL_FLAG = "--preload-all"
_KERNEL_MODULE = "ipykernel_launcher"


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
        with contextlib.suppress(ModuleNotFoundError):
            importlib.import_module(name)
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
    amp_book.kernels.BadRequest: a request is a JSON object with args, cwd and env, not list
    """
    try:
        request = json.loads(data.decode())
    except (UnicodeDecodeError, ValueError) as error:
        raise BadRequest(f"a request is one line of JSON ({error})") from None
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


_PR_SET_PDEATHSIG = 1


def die_with_parent(signum: int = signal.SIGKILL) -> bool:
    """Have the kernel receive ``signum`` when the process that forked it ends (Linux).

    Returns whether the request was accepted (``False`` off Linux).
    """
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _send(conn: socket.socket, message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
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
    path = folder / SOCKET_NAME
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    try:
        owner_fd: int | None = os.pidfd_open(owner)
    except (AttributeError, OSError):
        owner_fd = None
    if owner_fd is not None:
        selector.register(owner_fd, selectors.EVENT_READ, "owner")
    kernels: dict[int, socket.socket | None] = {}  # pid -> the connection that asked for it
    # pid -> a pidfd that becomes readable when the kernel exits, so that the server reaps
    # it and tells its client at once, not at the next timeout of the select below
    exit_fds: dict[int, int] = {}
    reading: dict[socket.socket, _PendingRequest] = {}
    owner_alive = True
    pending = list(later)
    handlers = {signum: signal.signal(signum, _stop) for signum in _STOP_SIGNALS}
    server_pid = os.getpid()
    try:
        while owner_alive:
            if _stop_asked:
                raise _Stopped(_stop_asked[0])
            timeout = 0 if pending else 0.2
            if reading:
                soonest = min(r.deadline for r in reading.values()) - time.monotonic()
                timeout = max(0.0, min(timeout, soonest))
            events = selector.select(timeout=timeout)
            if not events and pending:
                preload([pending.pop(0)])
                if not pending:
                    with contextlib.suppress(OSError):  # the build may have removed the folder
                        (folder / PRELOADED_NAME).write_text("\n".join(sorted(sys.modules)))
            for key, _events in events:
                if key.data == "owner":
                    owner_alive = False
                elif key.data == "accept":
                    conn, _ = listener.accept()
                    conn.setblocking(False)
                    reading[conn] = _PendingRequest(conn)
                    selector.register(conn, selectors.EVENT_READ, "request")
                elif key.data == "request":
                    waiting = reading[key.fileobj]  # type: ignore[index]
                    try:
                        if not waiting.read():
                            continue
                        request = parse_request(waiting.data)
                    except BadRequest as error:
                        _log(f"request refused: {error}")
                        waiting.conn.setblocking(True)
                        waiting.conn.settimeout(1.0)
                        _send(waiting.conn, {"error": str(error)})
                        selector.unregister(waiting.conn)
                        del reading[waiting.conn]
                        waiting.close()
                        continue
                    selector.unregister(waiting.conn)
                    del reading[waiting.conn]
                    conn, fds = waiting.conn, waiting.fds
                    conn.setblocking(True)
                    refusal = _refusal(request, env, len(fds))
                    if refusal:
                        _log(f"fork refused: {'; '.join(refusal)}")
                        _send(conn, {"refused": refusal})
                        waiting.close()  # the connection and the descriptors
                        continue
                    pid = os.fork()
                    if pid == 0:  # the kernel
                        server_pid = 0
                        die_with_parent(signal.SIGKILL)
                        for signum, handler in handlers.items():
                            signal.signal(signum, handler)
                        selector.close()
                        listener.close()
                        if owner_fd is not None:
                            os.close(owner_fd)
                        for fd in exit_fds.values():
                            os.close(fd)
                        for other in [*kernels.values(), *(r.conn for r in reading.values())]:
                            if other is not None:
                                other.close()
                        conn.close()
                        os.setsid()  # its own process group, as jupyter_client starts a kernel
                        for target, fd in enumerate(fds):
                            os.dup2(fd, target)
                            os.close(fd)
                        return request
                    for fd in fds:
                        os.close(fd)
                    kernels[pid] = conn
                    selector.register(conn, selectors.EVENT_READ, pid)
                    with contextlib.suppress(AttributeError, OSError):  # else reaped within 0.2 s
                        exit_fds[pid] = os.pidfd_open(pid)
                        selector.register(exit_fds[pid], selectors.EVENT_READ, ("exited", pid))
                    _send(conn, {"pid": pid})
                elif isinstance(key.data, tuple):  # ("exited", pid): reaped below
                    selector.unregister(key.fd)
                    os.close(exit_fds.pop(key.data[1]))
                else:  # a kernel's client sent something or went away: its kernel goes too
                    pid, conn = key.data, key.fileobj
                    with contextlib.suppress(OSError):
                        if conn.recv(1):  # type: ignore[union-attr]
                            continue
                    selector.unregister(conn)
                    conn.close()  # type: ignore[union-attr]
                    kernels[pid] = None
                    with contextlib.suppress(OSError):
                        os.killpg(pid, signal.SIGKILL)
            now = time.monotonic()
            for conn, waiting in list(reading.items()):  # clients that sent too little
                if waiting.deadline <= now:
                    _log(f"request refused: not complete within {REQUEST_TIMEOUT_S:g} s")
                    selector.unregister(conn)
                    del reading[conn]
                    waiting.close()
            if owner_fd is None and owner_alive:
                try:
                    os.kill(owner, 0)
                except ProcessLookupError:
                    owner_alive = False
            _reap(kernels, exit_fds, selector)
    except _Stopped as stop:
        _log(f"stopped by signal {stop.args[0]}")
    finally:
        if server_pid == os.getpid():  # the server, not a kernel returning its request
            for pid in kernels:
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
            for waiting in reading.values():
                waiting.close()
            with contextlib.suppress(OSError):
                path.unlink()
            if not _running(owner):
                import shutil

                shutil.rmtree(folder, ignore_errors=True)
            for signum, handler in handlers.items():
                signal.signal(signum, handler)
    return None


def _refusal(request: dict[str, Any], env: dict[str, str], n_fds: int) -> list[str]:
    """Why the server does not fork the kernel of ``request`` (empty: it does)."""
    if n_fds != 3:
        return [f"a request sends 3 file descriptors (stdin, stdout, stderr), not {n_fds}"]
    if differ := env_differences(request["env"], env):
        return differ  # the names of the variables that differ
    if (threads := thread_count()) > 1:
        return [f"the server has {threads} threads; it forks only with one"]
    return []


def _reap(
    kernels: dict[int, socket.socket | None],
    exit_fds: dict[int, int],
    selector: selectors.BaseSelector,
) -> None:
    """Reap the kernels that ended; tell their clients how."""
    while kernels:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        if pid in exit_fds:  # reaped before its pidfd was read
            selector.unregister(exit_fds[pid])
            os.close(exit_fds.pop(pid))
        conn = kernels.pop(pid, None)
        if conn is not None:  # else its client has gone
            selector.unregister(conn)
            _send(conn, {"exit": os.waitstatus_to_exitcode(status)})
            conn.close()


def _log(message: str) -> None:
    """A line in the server's log (its standard error)."""
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
    sys.argv = [_KERNEL_MODULE, *request["args"]]
    runpy.run_module(_KERNEL_MODULE, run_name="__main__", alter_sys=True)


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
    """``python -m amp_book.kernels FOLDER OWNER_PID [--preload-all]``: run the server."""
    import warnings

    folder, owner = Path(argv[0]), int(argv[1])
    env = dict(os.environ)
    # Python 3.12 warns when a process with threads forks. The server checks that it has one
    # thread before each fork; should the check ever miss one, the warning stops the server
    # (and so the build) instead of scrolling past in its log.
    warnings.filterwarnings("error", message=".*fork", category=DeprecationWarning)
    listener = listen(folder)
    preload(PRELOAD)
    later = later_modules()
    if argv[2:] == [PRELOAD_ALL_FLAG]:
        preload(later)
        (folder / PRELOADED_NAME).write_text("\n".join(sorted(sys.modules)))
        later = []
    request = serve(listener, folder, owner, env, later)
    if request is None:
        return 0
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


def provisioner_installed() -> bool:
    """Whether jupyter_client can find :class:`ForkingProvisioner` (an installed entry point)."""
    from importlib.metadata import entry_points

    group = "jupyter_client.kernel_provisioners"
    return any(ep.name == PROVISIONER_NAME for ep in entry_points(group=group))


class KernelServer:
    """The kernel server of one build: where it listens, and how it ends.

    :meth:`open` points this process's environment (and so every kernel manager
    it or its forked readers start) at a new server folder; the server itself
    starts with :meth:`start_soon` or the first kernel. :meth:`close` stops it
    and removes the folder.
    """

    _ENV = (*SERVER_VARIABLES, "JUPYTER_DEFAULT_PROVISIONER_NAME")

    def __init__(self) -> None:
        self.folder: Path | None = None
        self._saved: dict[str, str | None] = {}
        self._saved_default: str | None = None

    def open(self) -> Path:
        import tempfile

        if self.folder is not None:
            return self.folder
        # Short and in /tmp: a Unix socket's path has a limit of about 100 bytes.
        base = os.environ.get(TMPDIR_ENV) or "/tmp"
        self.folder = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX, dir=base))
        self._saved = {name: os.environ.get(name) for name in self._ENV}
        os.environ[SERVER_ENV] = str(self.folder)
        os.environ[OWNER_ENV] = str(os.getpid())
        os.environ["JUPYTER_DEFAULT_PROVISIONER_NAME"] = PROVISIONER_NAME
        factory = _provisioner_factory()
        if factory is not None:  # made before: it read the variable then
            self._saved_default = factory.default_provisioner_name
            factory.default_provisioner_name = PROVISIONER_NAME
        return self.folder

    def start_soon(self, *, preload_all: bool = False) -> None:
        """Start the server now, in the background, instead of with the first kernel.

        ``preload_all``: see :data:`PRELOAD_LATER`.
        """
        if self.folder is not None:
            start(self.folder, os.environ[OWNER_ENV], preload_all=preload_all)

    def usual_way(self) -> None:
        """Start no server: each kernel starts the usual way, as the pages need nothing the
        server would import for them. The folder stays, for the kernels' sockets."""
        if self.folder is not None:
            os.environ[USUAL_WAY_ENV] = "1"

    def close(self) -> None:
        import shutil

        if self.folder is None:
            return
        server_pid = None
        with contextlib.suppress(OSError, ValueError):
            server_pid = int((self.folder / PID_NAME).read_text())
        # The folder goes first: should this process be killed while it waits below (the live
        # preview kills its build on Ctrl-C), nothing is left behind.
        shutil.rmtree(self.folder, ignore_errors=True)
        if server_pid is not None:
            with contextlib.suppress(OSError):
                os.kill(server_pid, signal.SIGTERM)
        started_here = own_server(self.folder)
        _servers.pop(self.folder, None)
        _started_by.pop(self.folder, None)
        if started_here is not None:  # this process's child: reap it
            with contextlib.suppress(subprocess.TimeoutExpired):
                started_here.wait(timeout=10)
        elif server_pid is not None:  # a reader's child: wait until it has ended
            deadline = time.monotonic() + 10
            while _running(server_pid) and time.monotonic() < deadline:
                time.sleep(0.02)
        shutil.rmtree(self.folder, ignore_errors=True)
        for name, value in self._saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        factory = _provisioner_factory()
        if factory is not None and self._saved_default is not None:
            factory.default_provisioner_name = self._saved_default
        self._saved_default = None
        self.folder = None


def forget_inherited_server() -> None:
    """Drop a kernel server this process inherited the variables of (from a build that
    started it, or a test's), so that its kernels start as jupyter_client starts them."""
    for name in SERVER_VARIABLES:
        os.environ.pop(name, None)
    if os.environ.get("JUPYTER_DEFAULT_PROVISIONER_NAME") == PROVISIONER_NAME:
        del os.environ["JUPYTER_DEFAULT_PROVISIONER_NAME"]
    factory = _provisioner_factory()
    if factory is not None and factory.default_provisioner_name == PROVISIONER_NAME:
        factory.default_provisioner_name = "local-provisioner"


def _provisioner_factory() -> Any:
    """jupyter_client's provisioner factory, if this process has made it yet."""
    from jupyter_client.provisioning.factory import KernelProvisionerFactory

    if KernelProvisionerFactory.initialized():
        return KernelProvisionerFactory.instance()
    return None


# -- the client: a jupyter_client provisioner --------------------------------------------


class ForkedKernel:
    """A kernel the server forked, with the part of :class:`subprocess.Popen` that
    :class:`~jupyter_client.provisioning.LocalProvisioner` uses."""

    stdin = stdout = stderr = None

    def __init__(self, conn: socket.socket, pid: int, received: bytes = b"") -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._conn: socket.socket | None = conn
        self._buffer = received  # what the server sent after the pid, if anything

    def _read_exit(self, timeout: float | None) -> None:
        conn = self._conn
        if conn is None or self.returncode is not None:
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            conn.settimeout(left)
            try:
                chunk = conn.recv(4096)
            except (TimeoutError, BlockingIOError):
                return
            if not chunk:  # the server is gone; so is the kernel (see serve)
                self._buffer += b'{"exit": -9}\n'
                break
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        self.returncode = int(json.loads(line)["exit"])
        conn.close()
        self._conn = None

    def poll(self) -> int | None:
        """The exit code if the kernel has ended, else ``None``."""
        self._read_exit(timeout=0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the kernel to end; return its exit code (negative: the signal)."""
        self._read_exit(timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(f"kernel {self.pid}", timeout or 0)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


# The servers this process started. A forked reader inherits this dict, but only the
# process that started a server can wait for it: anywhere else ``poll()`` meets ECHILD
# and reports it as having exited.
_servers: dict[Path, subprocess.Popen[bytes]] = {}
_started_by: dict[Path, int] = {}


def _start_server(folder: Path, owner: str, preload_all: bool) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "amp_book.kernels", str(folder), owner]
    with open(folder / LOG_NAME, "ab") as log:
        server = subprocess.Popen(
            [*cmd, PRELOAD_ALL_FLAG] if preload_all else cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            # os.environ, as a kernel manager passes it; not the C library's environment,
            # which a library may have changed (GNU readline sets LINES and COLUMNS).
            env=dict(os.environ),
        )
    _servers[folder] = server
    _started_by[folder] = os.getpid()
    return server


def start(folder: Path, owner: str, *, preload_all: bool = False) -> None:
    """Start the kernel server of ``folder`` unless a process has; do not wait for it.

    ``preload_all``: import :data:`PRELOAD_LATER` too before serving the first kernel.
    """
    with open(folder / START_LOCK_NAME, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        lock.seek(0)
        if not lock.read():  # nobody has started it yet
            server = _start_server(folder, owner, preload_all)
            lock.write(f"{os.getpid()} {server.pid}")
            lock.flush()


def own_server(folder: Path) -> subprocess.Popen[bytes] | None:
    """The server of ``folder`` if this very process started it (so can wait for it)."""
    if _started_by.get(folder) == os.getpid():
        return _servers.get(folder)
    return None


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists and has not exited (a zombie has)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def server_exited(folder: Path) -> bool:
    """Whether the server of ``folder`` was started and has exited, whoever started it."""
    server = own_server(folder)
    if server is not None:
        return server.poll() is not None
    try:
        _, pid = (folder / START_LOCK_NAME).read_text().split()
    except (OSError, ValueError):  # not started yet, or being started now
        return False
    return not _running(int(pid))


def connect(folder: Path, owner: str, timeout: float = START_TIMEOUT_S) -> socket.socket:
    """A connection to the kernel server of ``folder``, starting it if no process has.

    Parallel readers share one server: the first to find none starts it,
    under a lock, and the others wait for its socket.
    """
    path = folder / SOCKET_NAME

    def attempt() -> socket.socket | None:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError):
            conn.close()
            return None
        return conn

    if (conn := attempt()) is not None:
        return conn
    start(folder, owner)
    deadline = time.monotonic() + timeout
    while (conn := attempt()) is None:
        if time.monotonic() > deadline or server_exited(folder):
            raise server_failed(folder, "did not start")
        time.sleep(0.05)
    return conn


def server_failed(folder: Path, what: str) -> RuntimeError:
    """The error for a kernel server that failed, with the end of its log."""
    log = folder / LOG_NAME
    tail = log.read_text(errors="replace")[-4000:] if log.is_file() else "(no log)"
    return RuntimeError(f"the kernel server in {folder} {what}; its log ends:\n{tail}")


def fork_request(cmd: list[str], kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """The server request that starts kernel ``cmd``, or ``None`` where it must start as usual.

    >>> fork_request(["/usr/bin/R", "--slave"], {}) is None
    True
    """
    folder, owner = os.environ.get(SERVER_ENV), os.environ.get(OWNER_ENV)
    env = kwargs.get("env") or dict(os.environ)
    if not folder or not owner or os.environ.get(USUAL_WAY_ENV) or sys.platform != "linux":
        return None
    if len(cmd) < 3 or cmd[1:3] != ["-m", _KERNEL_MODULE]:
        return None
    if os.path.abspath(cmd[0]) != os.path.abspath(sys.executable):
        return None
    if any(kwargs.get(stream) is not None for stream in ("stdin", "stdout", "stderr")):
        return None
    env = {**env, "JPY_PARENT_PID": str(os.getpid())}  # as jupyter_client's launcher sets it
    cwd = str(kwargs.get("cwd") or os.getcwd())
    return {
        "args": cmd[3:],
        "cwd": cwd,
        "env": env,
        "folder": folder,
        "owner": owner,
    }


def start_kernel(request: dict[str, Any]) -> ForkedKernel | None:
    """Ask the server for the kernel of ``request`` (see :func:`fork_request`).

    Returns ``None`` if the server refused (the environment differs from its own).
    """
    folder = Path(request["folder"])
    conn = connect(folder, request["owner"])
    message = {k: request[k] for k in ("args", "cwd", "env")}
    reply = b""
    try:
        with open(os.devnull, "rb") as devnull:
            fds = [devnull.fileno(), sys.__stdout__.fileno(), sys.__stderr__.fileno()]
            socket.send_fds(conn, [json.dumps(message).encode() + b"\n"], fds)
        conn.settimeout(START_TIMEOUT_S)
        while not reply.endswith(b"\n"):
            chunk = conn.recv(4096)
            if not chunk:
                break
            reply += chunk
    except OSError as error:  # the server died while it read the request
        conn.close()
        raise server_failed(folder, f"failed ({error})") from error
    if not reply.endswith(b"\n"):
        conn.close()
        raise server_failed(folder, "closed the connection")
    line, _, rest = reply.partition(b"\n")
    answer = json.loads(line)
    if "error" in answer:
        conn.close()
        raise server_failed(folder, f"could not read the request: {answer['error']}")
    if "pid" not in answer:  # refused: the kernel starts the usual way
        conn.close()
        return None
    return ForkedKernel(conn, int(answer["pid"]), rest)


class ForkingProvisioner(LocalProvisioner):  # type: ignore[misc]
    """Start ipykernel kernels by forking the build's kernel server.

    Any kernel :func:`fork_request` declines starts as
    :class:`~jupyter_client.provisioning.LocalProvisioner` starts it. Either
    way, while the build's folder exists, the kernel listens on Unix sockets
    in it (:meth:`pre_launch`), not on TCP ports.
    """

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        """Have the kernel listen on Unix sockets of its own in the server's folder.

        On TCP, jupyter_client picks each port by binding port 0 and closing it;
        the kernel binds it once it is up (half a second or more for a kernel
        started the usual way). Another process picking in between (the other readers of a
        parallel build, another build on the machine) can be handed the same
        port, and one kernel dies with "Address already in use". A socket file
        named for this kernel alone cannot be taken so.
        """
        km = self.parent
        folder = os.environ.get(SERVER_ENV)
        if km is not None and folder and km.transport == "tcp" and Path(folder).is_dir():
            km.transport = "ipc"
            km.ip = str(Path(folder) / f"k{os.urandom(6).hex()}")  # sockets: <ip>-1 ... <ip>-5
        return dict(await super().pre_launch(**kwargs))

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> KernelConnectionInfo:
        request = fork_request(cmd, kwargs)
        kernel = None if request is None else start_kernel(request)
        if kernel is None:
            # Without the server's variables: the build's IPython startup then has the kernel
            # end with this process (a forked one ends with the server instead).
            env = dict(kwargs.get("env") or os.environ)
            for name in SERVER_VARIABLES:
                env.pop(name, None)
            return await super().launch_kernel(cmd, **{**kwargs, "env": env})
        self.process = kernel
        self.pid = self.pgid = self.process.pid  # the kernel leads its own process group
        self.cwd = request["cwd"]
        return self.connection_info


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
