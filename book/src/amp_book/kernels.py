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
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jupyter_client.connect import KernelConnectionInfo
from jupyter_client.provisioning import LocalProvisioner

from amp_book.kernel_server import (
    KERNEL_MODULE,
    LOG_NAME,
    NO_LATER_FLAG,
    PID_NAME,
    PRELOAD_ALL_FLAG,
    SOCKET_NAME,
    START_LOCK_NAME,
    START_TIMEOUT_S,
    process_running,
)

PROVISIONER_NAME = "amp-lesson-fork"
"""The name the provisioner is registered under (``jupyter_client.kernel_provisioners``)."""
SERVER_ENV = "AMP_LESSON_KERNEL_SERVER"
"""Environment variable naming the folder of the server's socket; set by the build."""
OWNER_ENV = "AMP_LESSON_KERNEL_SERVER_OWNER"
"""Environment variable with the build's process id; the server exits when it does."""
USUAL_WAY_ENV = "AMP_LESSON_KERNELS_USUAL_WAY"
"""Set (to 1) where a build's kernels start the usual way, with no server (see
:meth:`KernelServer.usual_way`); their sockets are still in the build's folder."""
TEMP_ENV = "AMP_LESSON_KERNEL_TEMP"
"""The kernels' temporary folder, in the server's folder (the kernels' start-up points
``TMPDIR`` at it): what a page's processes leave there goes with the build."""
SERVER_VARIABLES = (SERVER_ENV, OWNER_ENV, USUAL_WAY_ENV)
"""What a build sets for its kernel server; a kernel it does not fork starts without them."""
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


TMPDIR_ENV = "AMP_LESSON_KERNEL_TMPDIR"
"""Environment variable naming where the build makes its server folder (default ``/tmp``).

The tests point it at a folder of their own, so that another build on the machine is never
taken for theirs.
"""
FOLDER_PREFIX = "amp-lesson-kernels-"


def provisioner_installed() -> bool:
    """Whether jupyter_client can find :class:`ForkingProvisioner` (an installed entry point)."""
    from importlib.metadata import entry_points

    group = "jupyter_client.kernel_provisioners"
    return any(ep.name == PROVISIONER_NAME for ep in entry_points(group=group))


OWNER_NAME = "owner"
"""In each build's kernel folder: the build's process (pid and start time), so that a later
build removes the folder of one that was killed outright (nothing of it could)."""


def _process_id(pid: int) -> str:
    """``pid`` with its start time: a pid can be taken by another process later."""
    try:
        started = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        started = "?"
    return f"{pid} {started}"


def remove_orphaned_folders(base: Path) -> list[Path]:
    """Remove the kernel folders in ``base`` whose build has ended (killed with SIGKILL, say,
    when its own :meth:`KernelServer.close` could not run); return them."""
    import shutil

    removed = []
    for folder in base.glob(FOLDER_PREFIX + "*"):
        try:
            owner = (folder / OWNER_NAME).read_text()
        except OSError:  # being made now, or not a build's
            continue
        parts = owner.split()
        if len(parts) != 2 or not parts[0].isdigit():  # half-written, or not a build's
            continue
        if _process_id(int(parts[0])) != owner:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


class KernelServer:
    """The kernel server of one build: where it listens, and how it ends.

    :meth:`open` points this process's environment (and so every kernel manager
    it or its forked readers start) at a new server folder; the server itself
    starts with :meth:`start_soon` or the first kernel. :meth:`close` stops it
    and removes the folder.
    """

    def __init__(self) -> None:
        self.folder: Path | None = None
        self._saved: dict[str, str | None] = {}
        self._undo_provisioner: Callable[[], None] | None = None

    def open(self, build: str | Path | None = None) -> Path:
        """Make the server's folder, named for the output folder ``build`` (a digest of its
        path) and unique to this process; point the environment at it."""
        import hashlib
        import tempfile

        if self.folder is not None:
            return self.folder
        # Short and in /tmp: a Unix socket's path has a limit of about 100 bytes.
        base = os.environ.get(TMPDIR_ENV) or "/tmp"
        remove_orphaned_folders(Path(base))
        named = ""
        if build is not None:
            named = hashlib.sha256(str(Path(build).resolve()).encode()).hexdigest()[:8] + "-"
        self.folder = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX + named, dir=base))
        owner = self.folder / f"{OWNER_NAME}.tmp"
        owner.write_text(_process_id(os.getpid()))
        owner.replace(self.folder / OWNER_NAME)  # never read half-written
        self._saved = {name: os.environ.get(name) for name in (*SERVER_VARIABLES, TEMP_ENV)}
        os.environ[SERVER_ENV] = str(self.folder)
        (self.folder / "t").mkdir()
        os.environ[TEMP_ENV] = str(self.folder / "t")
        os.environ[OWNER_ENV] = str(os.getpid())
        self._undo_provisioner = use_provisioner()
        return self.folder

    def start_soon(self, *, preload_all: bool = False, preload_later: bool = True) -> None:
        """Start the server now, in the background, instead of with the first kernel.

        ``preload_all``, ``preload_later``: see :data:`PRELOAD_LATER`.
        """
        if self.folder is not None:
            start(
                self.folder,
                os.environ[OWNER_ENV],
                preload_all=preload_all,
                preload_later=preload_later,
            )

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
            while process_running(server_pid) and time.monotonic() < deadline:
                time.sleep(0.02)
        shutil.rmtree(self.folder, ignore_errors=True)
        for name, value in self._saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if self._undo_provisioner is not None:
            self._undo_provisioner()
            self._undo_provisioner = None
        self.folder = None


def use_provisioner() -> Callable[[], None]:
    """Have the kernels this process (and its forked readers) start go through
    :class:`ForkingProvisioner`; returns what undoes it.

    With no server open, the provisioner starts each kernel as jupyter_client's
    own does, and still notes how a kernel ended (:func:`kernel_ends`), which
    the stock provisioner tells nobody.
    """
    saved_variable = os.environ.get("JUPYTER_DEFAULT_PROVISIONER_NAME")
    os.environ["JUPYTER_DEFAULT_PROVISIONER_NAME"] = PROVISIONER_NAME
    factory = _provisioner_factory()
    saved_default = None
    if factory is not None:  # made before: it read the variable then
        saved_default = factory.default_provisioner_name
        factory.default_provisioner_name = PROVISIONER_NAME

    def undo() -> None:
        if saved_variable is None:
            os.environ.pop("JUPYTER_DEFAULT_PROVISIONER_NAME", None)
        else:
            os.environ["JUPYTER_DEFAULT_PROVISIONER_NAME"] = saved_variable
        made = _provisioner_factory()
        if made is not None:
            made.default_provisioner_name = saved_default or "local-provisioner"

    return undo


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
        self.lost_with_server = False  # the server went away, killing its kernels
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
                self.lost_with_server = True
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
        """Send ``signum`` to the kernel unless it has ended (as :class:`subprocess.Popen`).

        The server reaps a kernel as it ends, before its client reads the exit code:
        one that ended just now is not an error either.
        """
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
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


def _start_server(
    folder: Path, owner: str, preload_all: bool, preload_later: bool
) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "amp_book.kernel_server", str(folder), owner]
    if preload_all:
        cmd.append(PRELOAD_ALL_FLAG)
    elif not preload_later:
        cmd.append(NO_LATER_FLAG)
    with open(folder / LOG_NAME, "ab") as log:
        server = subprocess.Popen(
            cmd,
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


def start(
    folder: Path, owner: str, *, preload_all: bool = False, preload_later: bool = True
) -> None:
    """Start the kernel server of ``folder`` unless a process has; do not wait for it.

    ``preload_all``: import :data:`PRELOAD_LATER` too before serving the first kernel;
    ``preload_later=False``: never import them (see :data:`PRELOAD_LATER`).
    """
    with open(folder / START_LOCK_NAME, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        lock.seek(0)
        if not lock.read():  # nobody has started it yet
            server = _start_server(folder, owner, preload_all, preload_later)
            lock.write(f"{os.getpid()} {server.pid}")
            lock.flush()


def own_server(folder: Path) -> subprocess.Popen[bytes] | None:
    """The server of ``folder`` if this very process started it (so can wait for it)."""
    if _started_by.get(folder) == os.getpid():
        return _servers.get(folder)
    return None


def server_exited(folder: Path) -> bool:
    """Whether the server of ``folder`` was started and has exited, whoever started it."""
    server = own_server(folder)
    if server is not None:
        return server.poll() is not None
    try:
        _, pid = (folder / START_LOCK_NAME).read_text().split()
    except (OSError, ValueError):  # not started yet, or being started now
        return False
    return not process_running(int(pid))


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
        if server_exited(folder):
            raise server_failed(folder, server_end(folder))
        if time.monotonic() > deadline:
            raise server_failed(folder, f"did not start within {timeout:g} s")
        time.sleep(0.05)
    return conn


def describe_exit(returncode: int | None) -> str:
    """How a process ended, from its return code (negative: the signal that ended it).

    >>> describe_exit(1), describe_exit(-9)
    ('exit status 1', 'signal SIGKILL (9; the out-of-memory killer sends it, as does kill -9)')
    >>> describe_exit(-11)
    'signal SIGSEGV (11; a crash in compiled code)'
    """
    if returncode is None:
        return "an unknown exit status"
    if returncode >= 0:
        return f"exit status {returncode}"
    number = -returncode
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = "a signal"
    why = {
        signal.SIGKILL: "the out-of-memory killer sends it, as does kill -9",
        signal.SIGSEGV: "a crash in compiled code",
        signal.SIGABRT: "an abort in compiled code",
        signal.SIGBUS: "a crash in compiled code",
    }.get(number)
    return f"signal {name} ({number}{'; ' + why if why else ''})"


def server_exit(folder: Path, wait_s: float = 2.0) -> int | None:
    """How the server of ``folder`` ended (a return code: negative, the signal), or ``None``
    where it has not or this process cannot tell.

    The process that started it waits for it; any other (a parallel reader) reads the exit
    status the kernel keeps for an ended process until its parent has waited for it (the
    ``exit_code`` of ``/proc/<pid>/stat``). A server that has just been killed takes a moment
    to be seen ended: this waits up to ``wait_s``.
    """
    deadline = time.monotonic() + wait_s
    while True:
        server = own_server(folder)
        if server is not None:
            code = server.poll()
        else:
            try:
                _, pid = (folder / START_LOCK_NAME).read_text().split()
            except (OSError, ValueError):
                return None
            code = _exit_of_ended(int(pid))
        if code is not None or time.monotonic() > deadline:
            return code
        time.sleep(0.02)


def _exit_of_ended(pid: int) -> int | None:
    """The return code of process ``pid`` if it has ended and its parent has not yet waited
    for it (Linux keeps its wait status: field 52 of ``/proc/<pid>/stat``), else ``None``."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    if not fields or fields[0] != "Z" or len(fields) < 50:
        return None
    status = int(fields[49])
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def server_end(folder: Path) -> str:
    """What became of the server of ``folder`` that has exited: whether it had started
    serving, and how it ended where this process started it."""
    code = server_exit(folder, wait_s=0.5)
    how = f" ({describe_exit(code)})" if code is not None else ""
    if (folder / PID_NAME).is_file():  # written once it listened
        return f"ended{how}, after it had started serving"
    return f"did not start: it ended{how} first"


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
    if len(cmd) < 3 or cmd[1:3] != ["-m", KERNEL_MODULE]:
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


_ENDS: dict[int, str] = {}
"""How each kernel this process has seen end ended, by its pid (:func:`kernel_ends`)."""


def _note_end(process: Any) -> None:
    if getattr(process, "lost_with_server", False):
        folder = os.environ.get(SERVER_ENV)
        code = server_exit(Path(folder)) if folder else None
        how = describe_exit(code) if code is not None else "an end this process cannot see"
        _ENDS[process.pid] = f"ended with its kernel server, which ended with {how}"
    elif process.returncode is not None:
        _ENDS[process.pid] = f"ended with {describe_exit(process.returncode)}"


def kernel_ends(clear: bool = False) -> dict[int, str]:
    """How the kernels this process started and saw end ended, by pid (``clear``: and forget
    them). A dead kernel gives no Python traceback; its exit status or signal is the clue."""
    ends = dict(_ENDS)
    if clear:
        _ENDS.clear()
    return ends


class ForkingProvisioner(LocalProvisioner):  # type: ignore[misc]
    """Start ipykernel kernels by forking the build's kernel server.

    Any kernel :func:`fork_request` declines starts as
    :class:`~jupyter_client.provisioning.LocalProvisioner` starts it. Either
    way, while the build's folder exists, the kernel listens on Unix sockets
    in it (:meth:`pre_launch`), not on TCP ports.
    """

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        """Have the kernel listen on Unix sockets of its own in the server's folder.

        Its connection file goes there too. On TCP, jupyter_client picks each port by
        binding port 0 and closing it;
        the kernel binds it once it is up (half a second or more for a kernel
        started the usual way). Another process picking in between (the other readers of a
        parallel build, another build on the machine) can be handed the same
        port, and one kernel dies with "Address already in use". A socket file
        named for this kernel alone cannot be taken so.
        """
        km = self.parent
        folder = os.environ.get(SERVER_ENV)
        if km is not None and folder and Path(folder).is_dir():
            name = f"k{os.urandom(6).hex()}"
            if km.transport == "tcp":
                km.transport = "ipc"
                km.ip = str(Path(folder) / name)  # sockets: <ip>-1 ... <ip>-5
            if not km.connection_file:
                # Not a /tmp/tmp*.json of jupyter_client's (it holds the kernel's key), which
                # a build killed outright never removed: the folder goes with the build.
                km.connection_file = str(Path(folder) / f"{name}.json")
        return dict(await super().pre_launch(**kwargs))

    async def poll(self) -> int | None:
        """As :class:`LocalProvisioner` polls; a kernel seen to have ended is noted
        (:func:`kernel_ends`), so that a dead kernel's report can say how it ended."""
        returncode = await super().poll()
        if returncode is not None and self.process is not None:
            _note_end(self.process)
        return returncode

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
