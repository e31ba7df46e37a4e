"""Kernels forked from the build's kernel server: real servers, real kernels, real notebooks."""

from __future__ import annotations

import ast
import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import nbclient
import nbformat
import pytest
from helpers import TAG_ENV, mini_book, processes_tagged, sphinx_build
from jupyter_client.manager import KernelManager

from amp_book import kernel_server, kernels

pytestmark = [
    pytest.mark.kernels,  # every test here starts a kernel server: not the fast tier
    pytest.mark.skipif(sys.platform != "linux", reason="kernels are forked on Linux only"),
]

# Run first in every probe notebook: what the kernel found before any cell imported anything.
PROBE = """\
import json, os, random, sys
print(json.dumps({
    "preloaded": "torch" in sys.modules,
    "cwd": os.getcwd(),
    "path0": sys.path[0],
    "parent": os.environ.get("JPY_PARENT_PID"),
    "random": random.random(),
    "leak": hasattr(json, "leaked_from_another_page"),
    "later": ["torch._dynamo" in sys.modules, "amp_lesson.recipe" in sys.modules],
}))
"""


def notebook(*cells: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def text(nb: nbformat.NotebookNode, index: int) -> str:
    return "".join(o.get("text", "") for o in nb.cells[index].outputs if o.output_type == "stream")


def probe(nb: nbformat.NotebookNode) -> dict[str, object]:
    import json

    return json.loads(text(nb, 0))


@pytest.fixture(autouse=True, scope="module")
def own_kernel_folders() -> Iterator[Path]:
    """The servers of this module's tests make their folders in a folder of their own.

    So a build elsewhere on the machine is never taken for theirs. One thread
    for OpenBLAS, as a build's kernels get it (numpy's import would start
    threads, and the server forks only without any).
    """
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="akt-", dir="/tmp"))  # short: a socket's path
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(kernels.TMPDIR_ENV, str(base))
        mp.setenv("OPENBLAS_NUM_THREADS", "1")
        yield base
    import shutil

    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def server_env() -> Iterator[Path]:
    """This process set up as a build is: kernels come from a server in a new folder."""
    server = kernels.KernelServer()
    folder = server.open()
    try:
        yield folder
    finally:
        server.close()


@pytest.fixture(scope="module")
def shared_server() -> Iterator[dict[str, str]]:
    """One running server for the tests that only need kernels from it; its environment.

    Its imports take seconds, so the tests share it. pytest changes
    ``PYTEST_CURRENT_TEST`` for every test, so the kernels start with the
    environment the server started with (as a build's kernels do).
    """
    server = kernels.KernelServer()
    server.open()
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("PYTEST_CURRENT_TEST", raising=False)
        env = dict(os.environ)
        kernels.connect(server.folder, env[kernels.OWNER_ENV]).close()
    preloaded = server.folder / kernel_server.PRELOADED_NAME
    deadline = time.monotonic() + 120
    while not preloaded.is_file() and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        yield env
    finally:
        server.close()


def run(
    nb: nbformat.NotebookNode, cwd: Path, env: dict[str, str] | None = None
) -> nbformat.NotebookNode:
    client = nbclient.NotebookClient(nb, timeout=120, resources={"metadata": {"path": str(cwd)}})
    client.execute(env=env)
    return nb


def test_the_provisioner_is_installed() -> None:
    assert kernels.provisioner_installed()


def test_a_forked_kernel_runs_a_notebook_as_a_fresh_one_does(
    shared_server: dict[str, str], tmp_path: Path
) -> None:
    cells = [
        PROBE,
        "import torch\nprint(torch.arange(6.0).reshape(2, 3).half().sum(dim=0).tolist())",
        "import matplotlib.pyplot as plt\nplt.plot([0, 1], [1, 0])\nplt.show()",
    ]
    forked = run(notebook(*cells), tmp_path, shared_server)
    with pytest.MonkeyPatch.context() as mp:  # the same process, with no server to ask
        for name in (kernels.SERVER_ENV, kernels.OWNER_ENV, "JUPYTER_DEFAULT_PROVISIONER_NAME"):
            mp.delenv(name, raising=False)
        fresh = run(notebook(*cells), tmp_path, shared_server)
    assert probe(forked)["preloaded"] is True
    assert probe(fresh)["preloaded"] is False
    # imported by the server while it waited (the fixture waits until it has finished)
    assert probe(forked)["later"] == [True, True]
    assert probe(fresh)["later"] == [False, False]
    for key in ("cwd", "path0", "leak"):
        assert probe(forked)[key] == probe(fresh)[key], key
    assert probe(forked)["cwd"] == str(tmp_path)
    # jupyter_client's launcher names the kernel's parent; the forked kernel gets the same.
    assert probe(forked)["parent"] == str(os.getpid())
    assert text(forked, 1) == text(fresh, 1) == "[3.0, 5.0, 7.0]\n"
    kinds = [sorted(o.get("data", {})) for o in forked.cells[2].outputs]
    assert kinds == [sorted(o.get("data", {})) for o in fresh.cells[2].outputs]
    assert ["image/png", "text/plain"] in kinds  # the inline backend is hooked into the shell


def test_a_server_told_to_preload_all_imports_everything_before_its_first_kernel(
    server_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)  # one environment throughout
    kernels.start(server_env, os.environ[kernels.OWNER_ENV], preload_all=True)
    nb = notebook(PROBE, "import sys\nprint('debugpy' in sys.modules)")
    first = run(nb, tmp_path, dict(os.environ))
    assert probe(first)["preloaded"] is True
    assert probe(first)["later"] == [True, True]  # not left to be imported between requests
    assert text(first, 1) == "True\n"  # every kernel imports debugpy as it starts ...
    preloaded = (server_env / kernel_server.PRELOADED_NAME).read_text().split()
    assert "debugpy" in preloaded  # ... so the server has imported it for them


def test_a_server_told_to_preload_nothing_later_imports_only_the_first_modules(
    server_env: Path,
) -> None:
    kernels.start(server_env, os.environ[kernels.OWNER_ENV], preload_later=False)
    preloaded = server_env / kernel_server.PRELOADED_NAME
    deadline = time.monotonic() + 120
    while not preloaded.is_file() and time.monotonic() < deadline:
        time.sleep(0.05)
    modules = set(preloaded.read_text().split())
    assert set(kernel_server.PRELOAD) <= modules
    later = set(kernel_server.later_modules()) - {"amp_lesson"}  # amp_book reads its version
    assert "torch._dynamo" in later
    assert later & modules == set()


def test_a_forked_kernel_runs_its_exit_handlers_as_it_ends(
    shared_server: dict[str, str], tmp_path: Path
) -> None:
    marker = tmp_path / "exit-handler-ran"
    cell = f"import atexit, pathlib\natexit.register(pathlib.Path({str(marker)!r}).touch)"
    run(notebook(PROBE, cell), tmp_path, shared_server)
    deadline = time.monotonic() + 30  # the client does not wait for the kernel to be reaped
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists()


def test_kernels_share_no_state_and_draw_their_own_random_numbers(
    shared_server: dict[str, str], tmp_path: Path
) -> None:
    first = run(
        notebook(PROBE, "import json\njson.leaked_from_another_page = True"),
        tmp_path,
        shared_server,
    )
    second = run(notebook(PROBE), tmp_path, shared_server)
    assert probe(second)["preloaded"] is True
    assert probe(second)["leak"] is False
    assert probe(first)["random"] != probe(second)["random"]


def test_a_kernel_from_another_environment_starts_the_usual_way(
    shared_server: dict[str, str], tmp_path: Path
) -> None:
    # A variable an import reads (the number of threads) differs: the server refuses.
    threads = "3" if shared_server.get("OMP_NUM_THREADS") != "3" else "5"
    env = {**shared_server, "OMP_NUM_THREADS": threads}
    nb = run(notebook(PROBE, "import os\nprint(os.environ['OMP_NUM_THREADS'])"), tmp_path, env)
    assert probe(nb)["preloaded"] is False
    assert text(nb, 1).strip() == threads


def test_fork_request_declines_what_it_cannot_fork(
    shared_server: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    python = sys.executable
    ours = [python, "-m", "ipykernel_launcher", "-f", "c.json"]
    assert kernels.fork_request(ours, {"env": dict(os.environ)}) is not None
    assert kernels.fork_request(["/usr/bin/python3.9", *ours[1:]], {}) is None
    assert kernels.fork_request([python, "-m", "other_kernel", "-f", "c.json"], {}) is None
    assert kernels.fork_request(ours, {"stdout": subprocess.DEVNULL}) is None
    monkeypatch.delenv(kernels.SERVER_ENV)
    assert kernels.fork_request(ours, {}) is None


def test_the_exit_code_and_signals_reach_the_kernel_manager(
    shared_server: dict[str, str], tmp_path: Path
) -> None:
    km = KernelManager(kernel_name="python3")
    km.start_kernel(cwd=str(tmp_path), env=shared_server)
    try:
        process = km.provisioner.process
        assert isinstance(process, kernels.ForkedKernel)
        assert process.poll() is None
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=60)
        # An interrupt is SIGINT to the kernel's process group, as for any local kernel.
        # stop_on_error=False: after an error ipykernel aborts the requests that reach it
        # before its own "stop aborting" message, and the os._exit below, sent as soon as
        # the reply is in, can be one of them on a loaded machine.
        kc.execute("import time\ntime.sleep(60)", stop_on_error=False)
        time.sleep(0.5)
        started = time.monotonic()
        km.interrupt_kernel()
        reply = kc.get_shell_msg(timeout=30)
        assert reply["content"]["ename"] == "KeyboardInterrupt"
        assert time.monotonic() - started < 30
        kc.execute("import os\nos._exit(3)")
        assert process.wait(timeout=30) == 3
        kc.stop_channels()
    finally:
        km.shutdown_kernel(now=True)


def test_a_server_started_with_sigchld_ignored_still_reports_how_its_kernels_end(
    server_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An ignored SIGCHLD is inherited through exec (some process supervisors leave it so).
    monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
    before = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        km, kernel = kernel_through(server_env, tmp_path)  # starts the server
    finally:
        signal.signal(signal.SIGCHLD, before)
    try:
        process = km.provisioner.process
        assert isinstance(process, kernels.ForkedKernel)
        os.kill(kernel, signal.SIGTERM)
        assert process.wait(timeout=60) == -signal.SIGTERM
    finally:
        km.cleanup_resources()


def test_a_kernel_dies_with_the_process_that_asked_for_it(shared_server: dict[str, str]) -> None:
    # A client process starts a kernel through the server, then is killed outright.
    script = (
        "import sys, time\n"
        "from jupyter_client.manager import KernelManager\n"
        "km = KernelManager(kernel_name='python3')\n"
        "km.start_kernel()\n"
        "print(km.provisioner.process.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    client = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=shared_server
    )
    pid = int(client.stdout.readline())
    os.kill(pid, 0)  # running
    client.kill()
    client.wait()
    assert wait_until_gone(pid), f"kernel {pid} outlived its client"


def wait_until_gone(pid: int, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # reap it, if it was this process's child
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_the_server_exits_with_its_owner(tmp_path: Path) -> None:
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        conn = kernels.connect(tmp_path, str(owner.pid))
        conn.close()
        server_pid = int((tmp_path / kernel_server.PID_NAME).read_text())
        os.kill(server_pid, 0)
    finally:
        owner.kill()
        owner.wait()
    server = kernels.own_server(tmp_path)  # started by this process: wait for it here
    assert server is not None
    assert server.pid == server_pid
    server.wait(timeout=20)  # raises if it outlives its owner
    assert not (tmp_path / kernel_server.SOCKET_NAME).exists()


def in_forked_child(
    check: Callable[[], None], meanwhile: Callable[[], None] = lambda: None
) -> None:
    """Run ``check`` in a child forked from this process, as Sphinx forks its readers.

    The parent runs ``meanwhile``, then waits for the child.
    """
    pid = os.fork()
    if pid == 0:  # the child: report through the exit code only
        code = 1
        try:
            check()
            code = 0
        except BaseException:  # noqa: BLE001 (the child must reach os._exit)
            import traceback

            traceback.print_exc()
        finally:
            os._exit(code)
    meanwhile()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the check failed in the forked child"


def test_a_forked_reader_waits_for_a_server_its_parent_is_starting(tmp_path: Path) -> None:
    # The build starts the server, then Sphinx forks its readers. A reader that
    # asks for a kernel before the server listens must wait for it: it cannot
    # wait() for its parent's child, so it must not take that for an exit.
    owner = str(os.getpid())
    kernels.start(tmp_path, owner)
    server = kernels.own_server(tmp_path)
    assert server is not None
    os.kill(server.pid, signal.SIGSTOP)  # held before it listens, as a slow start is
    try:
        assert not (tmp_path / kernel_server.SOCKET_NAME).exists()

        def reader() -> None:
            assert not kernels.server_exited(tmp_path)
            kernels.connect(tmp_path, owner).close()

        def resume() -> None:  # once the reader has tried and found no socket
            time.sleep(1.0)
            os.kill(server.pid, signal.SIGCONT)

        in_forked_child(reader, meanwhile=resume)
        server.kill()
        os.waitid(os.P_PID, server.pid, os.WEXITED | os.WNOWAIT)  # a zombie, not yet reaped
        in_forked_child(lambda: assert_exited(tmp_path))
    finally:
        server.kill()
        server.wait()


def assert_exited(folder: Path) -> None:
    assert kernels.server_exited(folder)


def test_a_server_that_fails_is_an_error_that_shows_its_log(
    server_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # matplotlib refuses a backend that does not exist, at import: the server dies.
    monkeypatch.setenv("MPLBACKEND", "no_such_backend")
    km = KernelManager(kernel_name="python3")
    with pytest.raises(RuntimeError, match="kernel server") as error:
        km.start_kernel(cwd=str(tmp_path))
    assert "no_such_backend" in str(error.value)
    km.cleanup_resources()


def test_the_server_imports_start_no_thread() -> None:
    # As a build's kernels are given one OpenBLAS thread; then nothing the server imports may
    # start a thread, or it could fork no kernel after importing it.
    code = (
        "from amp_book import kernel_server\n"
        "kernel_server.preload([*kernel_server.PRELOAD, *kernel_server.later_modules()])\n"
        "print(kernel_server.thread_names())"
    )
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert len(ast.literal_eval(out.stdout.strip())) == 1, out.stdout + out.stderr


def test_an_import_that_starts_a_thread_is_named_in_the_log(tmp_path: Path) -> None:
    (tmp_path / "starts_a_thread.py").write_text(
        "import threading, time\n"
        "threading.Thread(target=time.sleep, args=(30,), daemon=True, name='sleeper').start()\n"
    )
    code = (
        "import sys\nsys.path.insert(0, sys.argv[1])\n"
        "from amp_book import kernel_server\n"
        "kernel_server.preload(['json', 'starts_a_thread', 'csv'])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True
    )
    lines = [line for line in out.stderr.splitlines() if "started threads" in line]
    assert len(lines) == 1, out.stderr
    # The thread's name as the system knows it (Python names its threads there from 3.14).
    assert "importing starts_a_thread started threads (" in lines[0]


@pytest.mark.cuda
def test_no_cuda_device_file_is_open_after_the_imports() -> None:
    code = (
        "from amp_book import kernel_server\n"
        "kernel_server.preload([*kernel_server.PRELOAD, *kernel_server.later_modules()])\n"
        "print(kernel_server._cuda_driver_open())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.cuda
def test_a_forked_kernel_uses_the_gpu(shared_server: dict[str, str], tmp_path: Path) -> None:
    nb = run(
        notebook(
            PROBE,
            "import torch\nx = torch.ones(256, 256, device='cuda', dtype=torch.float16)\n"
            "print((x @ x).float().mean().item(), torch.cuda.get_device_name())",
        ),
        tmp_path,
        shared_server,
    )
    assert probe(nb)["preloaded"] is True
    assert text(nb, 1).split()[0] == "256.0"


# -- in the build ------------------------------------------------------------------------

PAGE = (
    "```{code-cell} ipython3\nimport json, sys\nfrom ipykernel.connect import get_connection_file\n"
    "print('torch imported before the page:', 'torch' in sys.modules)\n"
    "print('transport:', json.loads(open(get_connection_file()).read())['transport'])\n"
    "import ctypes\nsig = ctypes.c_int()\nctypes.CDLL(None).prctl(2, ctypes.byref(sig), 0, 0, 0)\n"
    "print('ends with its parent by signal', sig.value)\n```\n"
)
# A page that imports none of what the server imports first: its kernel starts the usual way.
NUMPY_PAGE = PAGE + "\n```{code-cell} ipython3\nimport numpy\n```\n"


@pytest.mark.parametrize(
    ("fork", "body", "forked"),
    [(True, NUMPY_PAGE, True), (False, NUMPY_PAGE, False), (True, PAGE, False)],
    ids=["fork", "no-fork", "fork-not-worth-it"],
)
def test_the_book_forks_its_kernels_and_cleans_up(
    tmp_path: Path, fork: bool, body: str, forked: bool, own_kernel_folders: Path
) -> None:
    src = mini_book(tmp_path, body)
    folders_before = set(own_kernel_folders.glob(kernels.FOLDER_PREFIX + "*"))
    tag = uuid.uuid4().hex  # this build's processes, and no other build's
    out = tmp_path / "html"
    env = dict(os.environ, **{TAG_ENV: tag})
    sphinx_build(src, out, "-D", f"amp_lesson_fork_kernels={int(fork)}", env=env)
    html = (out / "page.html").read_text(encoding="utf-8")
    assert f"torch imported before the page: {forked}" in html
    # The book's kernels, forked or not, listen on socket files of their own (no port race);
    # MyST-NB's stock kernels on TCP.
    assert f"transport: {'ipc' if fork else 'tcp'}" in html
    # Every kernel ends with what started it (SIGKILL on its parent's death): a forked one with
    # the server, one started the usual way with its reader, even in a build that kept its
    # folder for the sockets.
    assert "ends with its parent by signal 9" in html
    assert set(own_kernel_folders.glob(kernels.FOLDER_PREFIX + "*")) <= folders_before
    assert all(wait_until_gone(pid) for pid in processes_tagged(tag))  # server, kernels


def test_a_build_can_start_the_server_before_any_kernel(server_env: Path) -> None:
    server = kernels.KernelServer()
    server.folder = server_env  # the fixture's server folder, as the build's extension holds it
    server.start_soon()
    deadline = time.monotonic() + 60
    while not (server_env / kernel_server.SOCKET_NAME).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (server_env / kernel_server.SOCKET_NAME).exists()  # listening, and no kernel asked for
    first = int((server_env / kernel_server.PID_NAME).read_text())
    server.start_soon()  # a second call starts no second server
    time.sleep(0.5)
    assert int((server_env / kernel_server.PID_NAME).read_text()) == first
    assert not wait_until_gone(first, timeout=0.5)  # the first server still runs


# -- a server that survives its clients and ends its kernels -------------------------------


def raw_request(folder: Path, payload: bytes, fds: bool = True) -> dict[str, object] | None:
    """Send ``payload`` to the server of ``folder`` as a client would; its reply, if any."""
    import json
    import socket

    conn = kernels.connect(folder, os.environ[kernels.OWNER_ENV])
    try:
        with open(os.devnull, "rb") as devnull:
            descriptors = [devnull.fileno()] * 3 if fds else []
            socket.send_fds(conn, [payload], descriptors)
        conn.settimeout(30)
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = conn.recv(4096)
            if not chunk:
                break
            reply += chunk
    finally:
        conn.close()
    return json.loads(reply) if reply else None


def test_the_server_answers_bad_requests_and_goes_on_serving(
    server_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
    env = dict(os.environ)
    for payload, words in [
        (b"{}\n", "args must be a list"),
        (b"[]\n", "not list"),
        (b"not json\n", "one line of JSON"),
        (b'{"args": [], "cwd": "relative", "env": {}}\n', "absolute path"),
        (b'{"args": [1], "cwd": "/", "env": {}}\n', "list of strings"),
    ]:
        reply = raw_request(server_env, payload)
        assert reply is not None, payload
        assert words in str(reply["error"]), (payload, reply)
    # A request larger than the cap is cut off at the cap: refused, not read whole.
    big = b'{"args": [], "cwd": "/", "env": {"X": "' + b"x" * (8 << 20) + b'"}}\n'
    started = time.monotonic()
    with contextlib.suppress(OSError):  # the server may close before all of it is sent
        reply = raw_request(server_env, big)
        assert reply is None or "at most" in str(reply["error"])
    cut_off_s = time.monotonic() - started
    # A client that connects and sends nothing does not hold up the others.
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.connect(str(server_env / kernel_server.SOCKET_NAME))
    try:
        nb = run(notebook(PROBE), tmp_path, env)
        assert probe(nb)["preloaded"] is True  # served, forked, while the silent one waits
    finally:
        silent.close()
    log = (server_env / kernel_server.LOG_NAME).read_text()
    assert "at most" in log, log[-2000:]
    print(f"an 8 MB request was refused after {cut_off_s:.2f} s")


def test_a_deeply_nested_request_is_refused_and_the_server_goes_on_serving(
    server_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """100 KB of ``[`` made ``json.loads`` raise RecursionError, which ended the server."""
    monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
    env = dict(os.environ)
    reply = raw_request(server_env, b"[" * 100_000 + b"\n")
    assert reply is not None
    assert "not nested deeper" in str(reply["error"]), reply
    assert probe(run(notebook(PROBE), tmp_path, env))["preloaded"] is True  # still serving


def test_the_server_survives_a_storm_of_malformed_requests(
    server_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Random bytes, JSON of every shape, requests cut off or sent with the wrong number of
    descriptors: each is answered with a refusal or hung up on, and the same server then forks
    a build's kernel (the parser alone is fuzzed harder in test_kernel_server.py)."""
    import json
    import random
    import socket

    monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
    env = dict(os.environ)
    kernels.connect(server_env, env[kernels.OWNER_ENV]).close()  # started
    server_pid = int((server_env / kernel_server.PID_NAME).read_text())
    rng = random.Random(45)
    shapes = [
        lambda: bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 300))) + b"\n",
        lambda: (
            json.dumps(rng.choice([None, 1, "x", [], {}, [[[]]], {"args": {}}])).encode() + b"\n"
        ),
        lambda: json.dumps({"args": ["-f"], "cwd": "/", "env": {"A": "1"}}).encode() + b"\n",
        lambda: b"{" * rng.randrange(1, 50_000) + b"\n",
        lambda: b"\xff\xfe" * rng.randrange(1, 100) + b"\n",
    ]
    answered = hung_up = 0
    with open(os.devnull, "rb") as devnull:
        for _ in range(150):
            payload = rng.choice(shapes)()
            n_fds = rng.choice([0, 1, 3, 3, 4])
            cut = rng.random() < 0.2  # the client leaves half-way through its request
            conn = kernels.connect(server_env, env[kernels.OWNER_ENV])
            try:
                socket.send_fds(
                    conn,
                    [payload[: len(payload) // 2] if cut else payload],
                    [devnull.fileno()] * n_fds,
                )
                if cut:
                    continue
                conn.settimeout(30)
                reply = conn.makefile("rb").readline()
            except OSError:  # the server hung up while it was being sent
                hung_up += 1
                continue
            finally:
                conn.close()
            if not reply:
                hung_up += 1
                continue
            message = json.loads(reply)
            assert "error" in message or "refused" in message, (payload[:80], n_fds, message)
            answered += 1
    assert int((server_env / kernel_server.PID_NAME).read_text()) == server_pid
    os.kill(server_pid, 0)  # the same server, still running
    assert probe(run(notebook(PROBE), tmp_path, env))["preloaded"] is True
    assert answered > 100, (answered, hung_up)


def test_idle_connections_cannot_exhaust_the_servers_descriptors(
    server_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hundreds of connections that send nothing, to a server allowed few file descriptors,
    ended it with "Too many open files"; now it reads at most MAX_WAITING_REQUESTS at once,
    dropping the longest waiting, and a build's request that comes after them is served."""
    import resource
    import socket

    monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
    monkeypatch.setenv(kernel_server.REQUEST_TIMEOUT_ENV, "120")  # none expires meanwhile
    env = dict(os.environ)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))  # the server inherits the limit
    try:
        kernels.connect(server_env, env[kernels.OWNER_ENV]).close()  # started with it
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    server_pid = int((server_env / kernel_server.PID_NAME).read_text())
    limits = (Path("/proc") / str(server_pid) / "limits").read_text()
    assert re.search(r"Max open files\s+256\s", limits), limits
    idle = []
    try:
        for _ in range(400):
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conn.connect(str(server_env / kernel_server.SOCKET_NAME))
            idle.append(conn)
        nb = run(notebook(PROBE), tmp_path, env)
        assert probe(nb)["preloaded"] is True  # forked by the server, after all of them
    finally:
        for conn in idle:
            conn.close()
    log = (server_env / kernel_server.LOG_NAME).read_text()
    assert "dropped the one that had waited longest" in log, log[-2000:]
    assert "Too many open files" not in log, log[-2000:]


def test_a_client_that_never_reads_its_long_refusal_holds_up_no_one(
    server_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request from an environment with 60 000 extra variables was refused with all their
    names, written to a client that read nothing: the server blocked in send for ever."""
    import json
    import socket

    monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
    env = dict(os.environ)
    extra = {f"X{i:05d}": "" for i in range(60_000)}  # 0.8 MB: under the size cap
    request = {"args": [], "cwd": "/", "env": {**env, **extra}}
    mute = kernels.connect(server_env, env[kernels.OWNER_ENV])
    try:
        with open(os.devnull, "rb") as devnull:
            socket.send_fds(mute, [json.dumps(request).encode() + b"\n"], [devnull.fileno()] * 3)
        # ... and never reads the answer, while a build asks for its kernel.
        assert probe(run(notebook(PROBE), tmp_path, env))["preloaded"] is True
        reply = json.loads(mute.makefile("rb").readline())
    finally:
        mute.close()
    assert len(reply["refused"]) == kernel_server.MAX_NAMES_SHOWN + 1
    assert reply["refused"][-1] == f"{60_000 - kernel_server.MAX_NAMES_SHOWN} more"
    log = (server_env / kernel_server.LOG_NAME).read_text()
    assert max(len(line) for line in log.splitlines()) < kernel_server.MAX_LOG_LINE + 200


def test_a_connection_dropped_in_the_round_it_spoke_does_not_end_the_server(
    server_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With MAX_WAITING_REQUESTS being read, a new connection drops the oldest; when the
    oldest had also spoken in that same round of events, the server looked it up after the
    drop and ended with a KeyError."""
    import socket

    monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
    monkeypatch.setenv(kernel_server.REQUEST_TIMEOUT_ENV, "120")
    env = dict(os.environ)
    kernels.connect(server_env, env[kernels.OWNER_ENV]).close()  # started
    server_pid = int((server_env / kernel_server.PID_NAME).read_text())
    path = str(server_env / kernel_server.SOCKET_NAME)
    fds = Path(f"/proc/{server_pid}/fd")
    waiting = []
    try:
        before = len(list(fds.iterdir()))
        for _ in range(kernel_server.MAX_WAITING_REQUESTS):
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conn.connect(path)
            conn.sendall(b"{")
            waiting.append(conn)
        deadline = time.monotonic() + 300
        while len(list(fds.iterdir())) < before + len(waiting) and time.monotonic() < deadline:
            time.sleep(0.05)  # until the server has taken every one (it may be importing)
        assert len(list(fds.iterdir())) >= before + len(waiting)
        time.sleep(0.5)  # and read what each sent
        os.kill(server_pid, signal.SIGSTOP)  # busy (a module being imported), say
        try:
            newest = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            newest.connect(path)
            waiting.append(newest)
            waiting[0].sendall(b'"')  # the oldest speaks in the same round
        finally:
            os.kill(server_pid, signal.SIGCONT)
        assert probe(run(notebook(PROBE), tmp_path, env))["preloaded"] is True
        os.kill(server_pid, 0)  # the same server
    finally:
        for conn in waiting:
            conn.close()
    assert "KeyError" not in (server_env / kernel_server.LOG_NAME).read_text()


def test_a_silent_client_is_dropped_after_the_timeout(
    server_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    monkeypatch.setenv(kernel_server.REQUEST_TIMEOUT_ENV, "1.5")  # read by the server as it starts
    kernels.connect(server_env, os.environ[kernels.OWNER_ENV]).close()
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.connect(str(server_env / kernel_server.SOCKET_NAME))
    silent.settimeout(60)
    try:
        assert silent.recv(1) == b""  # the server hangs up on it
    finally:
        silent.close()
    assert "not complete within 1.5 s" in (server_env / kernel_server.LOG_NAME).read_text()


def test_the_server_does_not_fork_with_threads(
    server_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With more than one OpenBLAS thread, numpy's import starts threads in the server.
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "3")
    monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
    km = KernelManager(kernel_name="python3")
    km.start_kernel(cwd=str(tmp_path), env=dict(os.environ))
    try:
        assert not isinstance(km.provisioner.process, kernels.ForkedKernel)  # the usual way
    finally:
        km.shutdown_kernel(now=True)
    log = (server_env / kernel_server.LOG_NAME).read_text()
    assert "forks only with one" in log, log[-2000:]


def kernel_through(folder: Path, tmp_path: Path) -> tuple[KernelManager, int]:
    km = KernelManager(kernel_name="python3")
    km.start_kernel(cwd=str(tmp_path), env=dict(os.environ))
    assert isinstance(km.provisioner.process, kernels.ForkedKernel)
    return km, km.provisioner.process.pid


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_ends_the_server_and_its_kernels(
    server_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, signum: int
) -> None:
    monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
    km, kernel = kernel_through(server_env, tmp_path)
    server = int((server_env / kernel_server.PID_NAME).read_text())
    os.kill(server, signum)
    try:
        log = server_env / kernel_server.LOG_NAME
        assert wait_until_gone(server), f"the server outlived the signal: {log.read_text()[-2000:]}"
        assert wait_until_gone(kernel), "its kernel outlived it"
        assert not (server_env / kernel_server.SOCKET_NAME).exists()
    finally:
        km.cleanup_resources()


def test_a_server_whose_owner_is_killed_ends_its_kernels_and_removes_its_folder(
    tmp_path: Path,
) -> None:
    # The owner (the build's main process) starts the server and a kernel, then is killed
    # outright: nobody is left to clean up but the server.
    script = (
        "import os, sys, time\n"
        "from jupyter_client.manager import KernelManager\n"
        "from amp_book import kernels\n"
        "server = kernels.KernelServer()\n"
        "folder = server.open()\n"
        "km = KernelManager(kernel_name='python3')\n"
        "km.start_kernel()\n"
        "print(folder, km.provisioner.process.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=tmp_path
    )
    folder_name, pid = owner.stdout.readline().split()
    folder = Path(folder_name)
    server = int((folder / kernel_server.PID_NAME).read_text())
    owner.kill()
    owner.wait()
    assert wait_until_gone(server), "the server outlived its owner"
    assert wait_until_gone(int(pid)), "a kernel outlived its server"
    assert not folder.exists()


def test_a_kernel_dies_with_its_server_even_when_the_server_is_killed(
    server_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
    km, kernel = kernel_through(server_env, tmp_path)
    kernels.kernel_ends(clear=True)
    os.kill(int((server_env / kernel_server.PID_NAME).read_text()), signal.SIGKILL)
    try:
        assert wait_until_gone(kernel), "a kernel outlived its server's SIGKILL"
        assert km.is_alive() is False
        # The dead kernel's report says how the server ended (CONTRIBUTING promises it).
        assert kernels.kernel_ends(clear=True) == {
            kernel: "ended with its kernel server, which ended with signal SIGKILL (9; the "
            "out-of-memory killer sends it, as does kill -9)"
        }
    finally:
        km.cleanup_resources()


def test_a_parallel_reader_sees_how_a_server_it_did_not_start_ended(tmp_path: Path) -> None:
    """Only the process that started the server can wait for it; a parallel reader reads its
    wait status from /proc while the starter has not yet waited for it."""
    child = subprocess.Popen([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), 15)"])
    (tmp_path / kernel_server.START_LOCK_NAME).write_text(f"{os.getpid()} {child.pid}")
    try:
        assert kernels.server_exit(tmp_path, wait_s=20) == -signal.SIGTERM  # not waited for
    finally:
        assert child.wait() == -signal.SIGTERM
    assert kernels.server_exit(tmp_path, wait_s=0) is None  # waited for: nothing left to read


@pytest.fixture
def idle_server(tmp_path: Path) -> Iterator[kernel_server._Server]:
    """A server's state in this process, listening in ``tmp_path``, never serving: for its
    cleanup. Whatever the test does, this process gets its handlers and descriptors back."""
    import socket

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(tmp_path / kernel_server.SOCKET_NAME))
    server = kernel_server._Server(listener, tmp_path, os.getpid(), dict(os.environ), [])
    try:
        yield server
    finally:
        for signum, handler in server.handlers.items():
            signal.signal(signum, handler)
        server.selector.close()
        if server.owner_fd is not None:
            os.close(server.owner_fd)
        listener.close()
        kernel_server._stop_asked.clear()


def test_a_kernel_not_yet_in_a_group_of_its_own_is_killed_as_the_server_ends(
    idle_server: kernel_server._Server,
) -> None:
    # A kernel forked just before the server ends may not have called setsid yet: no process
    # group has its pid, so killing the group alone would miss it.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        assert os.getpgid(child.pid) != child.pid  # in this process's group, as just forked
        idle_server.kernels[child.pid] = None
        idle_server.close()
        assert child.wait(timeout=60) == -signal.SIGKILL
    finally:
        child.kill()
        child.wait()


def test_a_stop_signal_during_a_fork_is_handled_once_the_fork_is_recorded() -> None:
    # Between os.fork() and recording the pid, a stop would end the server without the kernel
    # it knows nothing of; the signal waits until the block ends, and is not lost.
    seen: list[list[int]] = []

    def signal_while_held() -> None:
        with kernel_server._signals_held():
            # to this thread: the server has only one, a test runner has others
            signal.pthread_kill(threading.get_ident(), signal.SIGHUP)
            time.sleep(0.2)
            seen.append(list(kernel_server._stop_asked))  # what the handler had seen

    old = signal.signal(signal.SIGHUP, kernel_server._stop)
    try:
        with pytest.raises(kernel_server._Stopped):
            signal_while_held()
        assert seen == [[]]
        assert kernel_server._stop_asked == [signal.SIGHUP]
    finally:
        signal.signal(signal.SIGHUP, old)
        kernel_server._stop_asked.clear()


def test_a_second_stop_signal_does_not_cut_the_servers_cleaning_short(
    idle_server: kernel_server._Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    children = [
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"]) for _ in range(2)
    ]
    kill = kernel_server._kill_kernel

    def kill_and_be_signalled(pid: int) -> None:
        os.kill(os.getpid(), signal.SIGHUP)  # as the first kernel is killed
        kill(pid)

    monkeypatch.setattr(kernel_server, "_kill_kernel", kill_and_be_signalled)
    try:
        for child in children:
            idle_server.kernels[child.pid] = None
        idle_server.close()
        assert [child.wait(timeout=60) for child in children] == [-signal.SIGKILL] * 2
        assert not (tmp_path / kernel_server.SOCKET_NAME).exists()
        assert signal.getsignal(signal.SIGHUP) is not kernel_server._stop  # restored
    finally:
        for child in children:
            child.kill()
            child.wait()


def test_signalling_a_kernel_that_has_just_ended_is_not_an_error() -> None:
    import socket

    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()  # reaped: as the server reaps a kernel before its client reads the exit
    ours, servers = socket.socketpair()
    try:
        kernel = kernels.ForkedKernel(ours, ended.pid)
        kernel.send_signal(signal.SIGINT)  # no ProcessLookupError
        assert kernel.poll() is None  # the exit is not read yet
    finally:
        ours.close()
        servers.close()


def test_a_kernel_whose_server_ended_before_it_asked_to_die_with_it_ends_at_once() -> None:
    # Asking to die with the parent fires only when the parent ends after the request; a
    # kernel not scheduled until its server had ended would run on. Given the pid its
    # parent had (here 1, which is not this child's), it ends itself.
    code = (
        "import time; from amp_book.kernel_server import die_with_parent\n"
        "assert die_with_parent(9, parent=1)\n"
        "time.sleep(120)"
    )
    ended = subprocess.run([sys.executable, "-c", code], check=False, timeout=120)
    assert ended.returncode == -signal.SIGKILL
    kept = "from amp_book.kernel_server import die_with_parent\n"
    kept += "import os; assert die_with_parent(9, parent=os.getppid())"
    subprocess.run([sys.executable, "-c", kept], check=True, timeout=120)


SWALLOWS_A_SIGNAL = """\
import pathlib, time
pathlib.Path(__file__).with_name("importing").touch()
try:  # as a module-level bare except (pydevd's, say) would
    time.sleep(60)
except BaseException:
    pass
"""

SERVE_LATER = """\
import os, sys
from pathlib import Path
from amp_book import kernel_server
folder = Path(sys.argv[1])
sys.path.insert(0, str(folder))
kernel_server.serve(kernel_server.listen(folder), folder, os.getppid(), dict(os.environ), ["swallows"])
"""


def test_a_signal_ends_the_server_though_a_module_it_imports_swallows_it(
    own_kernel_folders: Path,
) -> None:
    import tempfile

    folder = Path(tempfile.mkdtemp(dir=own_kernel_folders))
    (folder / "swallows.py").write_text(SWALLOWS_A_SIGNAL)
    server = subprocess.Popen(
        [sys.executable, "-c", SERVE_LATER, str(folder)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (folder / "importing").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (folder / "importing").exists(), "the server never imported the module"
        server.send_signal(signal.SIGTERM)  # while the module sleeps under its bare except
        assert server.wait(timeout=30) == 0
        assert "stopped by signal 15" in server.stderr.read()  # type: ignore[union-attr]
    finally:
        server.kill()


def test_only_the_kernel_folders_of_ended_builds_are_removed(tmp_path: Path) -> None:
    """A build killed outright (SIGKILL) leaves its kernel folder; the next build removes it,
    and never a running build's, nor a folder being made (no owner yet)."""
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    folders = {}
    for name, owner in [
        ("live", kernels._process_id(os.getpid())),
        ("ended", f"{ended.pid} 1"),
        ("reused", f"{os.getpid()} 1"),  # this pid, but another process's start time
        ("new", None),
        ("half-written", ""),  # the owner file opened, its line not yet written
        ("not a build's", "x y z"),
    ]:
        folders[name] = tmp_path / f"{kernels.FOLDER_PREFIX}{name}"
        folders[name].mkdir()
        if owner is not None:
            (folders[name] / kernels.OWNER_NAME).write_text(owner)
    removed = kernels.remove_orphaned_folders(tmp_path)
    assert sorted(removed) == sorted([folders["ended"], folders["reused"]])
    for kept in ("live", "new", "half-written", "not a build's"):
        assert folders[kept].is_dir(), kept


def test_a_builds_kernel_folder_is_named_for_its_output_folder(tmp_path: Path) -> None:
    """The kernels' sockets cannot live in ``<out>.work/`` (a socket's path is limited to
    about 100 bytes); their folder in /tmp is named for the build's output folder instead."""
    import hashlib

    folders = {}
    for name in ("outX", "outY"):
        server = kernels.KernelServer()
        folders[name] = server.open(tmp_path / name)
        try:
            assert (folders[name] / kernels.OWNER_NAME).is_file()
            assert os.environ[kernels.SERVER_ENV] == str(folders[name])
        finally:
            server.close()
        assert not folders[name].exists()
        digest = hashlib.sha256(str((tmp_path / name).resolve()).encode()).hexdigest()[:8]
        assert folders[name].name.startswith(f"{kernels.FOLDER_PREFIX}{digest}-")
        socket_path = folders[name] / "k0123456789ab-5"  # the longest a kernel's socket is
        assert len(str(socket_path)) < 100


def test_a_kernels_connection_file_is_in_the_builds_folder_not_in_tmp(
    server_env: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """jupyter_client wrote each kernel's connection file (its key) as ``/tmp/tmp*.json``,
    which a build killed outright never removed; now it is in the server's folder, which the
    next build removes with the rest (``remove_orphaned_folders``)."""
    monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
    km = KernelManager(kernel_name="python3")
    km.start_kernel()
    try:
        assert Path(km.connection_file).parent == server_env
        assert Path(km.connection_file).is_file()
    finally:
        km.shutdown_kernel(now=True)
        km.cleanup_resources()
    assert not Path(km.connection_file).exists()


@pytest.mark.book
def test_a_build_leaves_nothing_in_the_temporary_folder(tmp_path: Path) -> None:
    """A page whose code starts processes (the DDP page's ranks) left multiprocessing's
    ``pymp-*`` folders in ``TMPDIR``; the kernels' temporary folder is now the build's own."""
    body = (
        "```{code-cell} ipython3\n"
        "import multiprocessing, tempfile\n"
        "with multiprocessing.get_context('forkserver').Pool(1) as pool:\n"
        "    print(pool.apply(abs, (-3,)))\n"
        "print('amp-lesson-kernels-' in tempfile.gettempdir())\n"
        "```\n"
    )
    src = mini_book(tmp_path, body)
    # Short, as /tmp is: multiprocessing's sockets go in it (a Unix socket's path is short).
    temp = Path(tempfile.mkdtemp(prefix="t", dir="/tmp"))
    env = {**os.environ, "TMPDIR": str(temp), "AMP_LESSON_CACHE_DIR": str(tmp_path / "cache")}
    sphinx_build(src, tmp_path / "html", env=env)
    assert sorted(p.name for p in temp.iterdir()) == []
    temp.rmdir()
    page = (tmp_path / "html" / "page.html").read_text()
    outputs = re.findall(r"<pre>(.*?)</pre>", page, re.DOTALL)
    assert outputs[-1] == "<span></span>3\nTrue\n", outputs[-1]
