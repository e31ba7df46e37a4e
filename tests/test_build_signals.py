"""A signal at any moment of a real build ends every process of it and leaves no folder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import FRONT_MATTER, ROOT, TAG_ENV, add_extension, mini_book, processes_tagged

from amp_book import kernels

pytestmark = [
    pytest.mark.book,
    pytest.mark.skipif(sys.platform != "linux", reason="the build's processes end so on Linux"),
]

SLOW_CELL = """\
```{{code-cell}} ipython3
from pathlib import Path
Path({marker!r}).write_text("running")
import time
time.sleep(120)
```
"""


def wait_for(predicate, timeout: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


@pytest.fixture
def slow_book(tmp_path: Path) -> Iterator[tuple[Path, Path, dict[str, str], str]]:
    """A book whose page runs for two minutes; its marker file; the build's environment."""
    marker = tmp_path / "cell-running"
    src = mini_book(tmp_path, SLOW_CELL.format(marker=str(marker)))
    kernel_tmp = Path(tempfile.mkdtemp(prefix="aks-", dir="/tmp"))
    tag = uuid.uuid4().hex
    env = dict(
        os.environ,
        **{TAG_ENV: tag},
        **{kernels.TMPDIR_ENV: str(kernel_tmp)},
    )
    env.pop("PYTEST_CURRENT_TEST", None)
    yield src, marker, env, tag
    for pid in processes_tagged(tag):  # a failed test leaves nothing running either
        os.kill(pid, signal.SIGKILL)
    for folder in kernel_tmp.glob("*"):
        subprocess.run(["rm", "-rf", str(folder)], check=False)
    kernel_tmp.rmdir()


BUILD_BOOK = [sys.executable, str(ROOT / "tools" / "build_book.py")]


def start(cmd: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    # A suite run in the background inherits SIGINT ignored (a shell's `&` does that), and under
    # nohup SIGHUP too, and an ignored signal stays ignored across exec. A command in a terminal
    # has both at their defaults: handled here while the command starts, they reach it so (exec
    # resets a handled signal), and Python installs its KeyboardInterrupt in every process again.
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGHUP)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGHUP, lambda *_: None)
    try:
        # A session of its own, as a terminal gives a command: Ctrl-C reaches its process group.
        return subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:300]
    except OSError:
        return "(ended)"


def assert_everything_ended(proc: subprocess.Popen[bytes], env: dict[str, str], tag: str) -> None:
    proc.wait(timeout=30)
    assert wait_for(lambda: not processes_tagged(tag), timeout=10), (
        f"still running: {[(pid, _cmdline(pid)) for pid in processes_tagged(tag)]}"
    )
    left = list(Path(env[kernels.TMPDIR_ENV]).glob(kernels.FOLDER_PREFIX + "*"))
    assert not left, [(p, sorted(f.name for f in p.iterdir())) for p in left]


@pytest.mark.parametrize(
    ("moment", "signum", "to_group", "forked"),
    [
        ("while a cell runs", signal.SIGTERM, False, False),
        ("while a cell runs", signal.SIGINT, True, False),  # Ctrl-C in a terminal
        ("while a cell runs", signal.SIGHUP, True, False),  # the terminal closes
        ("as the build starts", signal.SIGTERM, False, False),
        ("as the build starts", signal.SIGINT, True, False),
        # A page that imports numpy is worth the kernel server: its kernel is forked.
        ("while a cell runs", signal.SIGINT, True, True),
        ("as the build starts", signal.SIGINT, True, True),
    ],
)
def test_a_signal_to_build_book_ends_every_process_of_the_build(
    slow_book: tuple[Path, Path, dict[str, str], str],
    moment: str,
    signum: int,
    to_group: bool,
    forked: bool,
) -> None:
    src, marker, env, tag = slow_book
    if forked:
        page = src / "page.md"
        page.write_text(page.read_text().replace("import time\n", "import time\nimport numpy\n"))
    proc = start([*BUILD_BOOK, "--docs", str(src), str(src.parent / "html")], env)
    if moment == "as the build starts":
        time.sleep(2.0)  # Sphinx is reading its configuration and starting the kernel server
    else:
        assert wait_for(marker.exists, timeout=120), "the cell never started"
    started = time.monotonic()
    (os.killpg if to_group else os.kill)(proc.pid, signum)
    assert_everything_ended(proc, env, tag)
    print(
        f"{signal.Signals(signum).name} {moment}: all ended in {time.monotonic() - started:.1f} s"
    )


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_a_signal_to_sphinx_alone_makes_build_book_exit_128_plus_its_number(
    slow_book: tuple[Path, Path, dict[str, str], str], signum: int
) -> None:
    """As the out-of-memory killer ends the build and not the script around it: the script
    exited 241 (SIGTERM) or 247 (SIGKILL), Python's 256 - N, which a shell reads as neither."""
    src, marker, env, tag = slow_book
    proc = start([*BUILD_BOOK, "--docs", str(src), str(src.parent / "html")], env)
    assert wait_for(marker.exists, timeout=120), "the cell never started"
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    (sphinx,) = [int(pid) for pid in children if "sphinx" in _cmdline(int(pid))]
    os.kill(sphinx, signum)
    if signum == signal.SIGKILL:  # Sphinx removes nothing: the next build's server does
        proc.wait(timeout=30)
        assert wait_for(lambda: not processes_tagged(tag), timeout=10)
        left = list(Path(env[kernels.TMPDIR_ENV]).glob(kernels.FOLDER_PREFIX + "*"))
        assert kernels.remove_orphaned_folders(Path(env[kernels.TMPDIR_ENV])) == left
    assert_everything_ended(proc, env, tag)
    assert proc.returncode == 128 + signum


def test_a_build_whose_parent_is_killed_ends_every_process(
    slow_book: tuple[Path, Path, dict[str, str], str],
) -> None:
    # As when nox, or the terminal running it, is killed outright: nobody passes a signal on.
    src, marker, env, tag = slow_book
    parent = (
        "import subprocess, sys\n"
        f"subprocess.run({[*BUILD_BOOK, '--docs', str(src), str(src.parent / 'html')]!r})\n"
    )
    proc = start([sys.executable, "-c", parent], env)
    assert wait_for(marker.exists, timeout=120), "the cell never started"
    os.kill(proc.pid, signal.SIGKILL)
    assert_everything_ended(proc, env, tag)


def test_ctrl_c_of_the_live_preview_during_a_build_ends_every_process(
    slow_book: tuple[Path, Path, dict[str, str], str],
) -> None:
    # The preview of `nox -s docs -- --serve` (amp_book.preview), whose builds run in a process
    # forked from it.
    src, marker, env, tag = slow_book
    from build_book import SPHINX_OPTS

    port = free_port()
    html = src.parent / "html"
    cmd = [sys.executable, "-m", "amp_book.preview", str(src), str(html), "--port", str(port),
           "--", *SPHINX_OPTS]  # fmt: skip
    proc = start(cmd, env)
    assert wait_for(marker.exists, timeout=120), "the preview's build never reached the cell"
    os.killpg(proc.pid, signal.SIGINT)
    assert_everything_ended(proc, env, tag)


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


DIES_WHEN_THE_CELL_RUNS = """\
import pathlib, sys, time
marker = pathlib.Path(sys.argv[1])
while not marker.exists():
    time.sleep(0.05)
sys.exit(1)
"""


def test_a_kernel_that_dies_at_start_while_another_page_runs_fails_the_build_whole(
    slow_book: tuple[Path, Path, dict[str, str], str], tmp_path: Path
) -> None:
    # As a kernel whose port another process took does: the page's reader fails, Sphinx ends the
    # reader whose cell is running, and nothing of the build is left.
    src, marker, env, tag = slow_book
    spec = tmp_path / "jupyter" / "kernels" / "dies-when-the-cell-runs"
    spec.mkdir(parents=True)
    argv = [sys.executable, "-c", DIES_WHEN_THE_CELL_RUNS, str(marker), "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "dies", "language": "python"})
    )
    env["JUPYTER_PATH"] = str(tmp_path / "jupyter")
    (src / "index.md").write_text("# Mini\n\n```{toctree}\npage\nbad\n```\n")
    front = FRONT_MATTER.replace("name: python3", "name: dies-when-the-cell-runs")
    (src / "bad.md").write_text(front + "\n# Bad\n\n```{code-cell} ipython3\n1 + 1\n```\n")
    page = src / "page.md"  # labels enough that its reader's result overfills a pipe (64 KiB)
    page.write_text(
        page.read_text() + "".join(f"\n({tag}-{i})=\nLabel {i}.\n" for i in range(3000))
    )
    proc = start([*BUILD_BOOK, "--docs", str(src), str(src.parent / "html"), "--", "-j", "2"], env)
    assert wait_for(marker.exists, timeout=120), "the cell never started"
    started = time.monotonic()
    assert_everything_ended(proc, env, tag)
    assert proc.returncode not in (0, None)
    print(f"the failed build ended in {time.monotonic() - started:.1f} s")


SURVIVES_SIGTERM = '''\
"""Test extension: the reader of "page" handles SIGTERM and reads on; the reader of "bad" fails."""
import pathlib
import signal
import time

READING = pathlib.Path(__file__).with_name("reading-page")


def on_read(app, docname, source):
    if docname == "page":
        # As nbclient does while it runs a notebook: SIGTERM shuts its kernel down, and the
        # reader goes on to the rest of its chunk.
        told = []
        signal.signal(signal.SIGTERM, lambda *_: told.append(True))
        READING.write_text("reading")
        deadline = time.monotonic() + 60
        while not told and time.monotonic() < deadline:
            time.sleep(0.02)
    elif docname == "bad":
        while not READING.exists():
            time.sleep(0.02)
        raise RuntimeError("this reader fails")


def setup(app):
    app.connect("source-read", on_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
'''


def test_a_failed_build_ends_a_reader_that_outlived_sphinxs_sigterm(
    slow_book: tuple[Path, Path, dict[str, str], str],
) -> None:
    # When a reader fails, Sphinx ends the others with SIGTERM. One that handles it (nbclient
    # does, while it executes a notebook) reads on and then blocks sending its result: each
    # reader inherits the read end of its own pipe, so that end is never closed. The main
    # process waits for it at exit: a failed build that never ends. Seen in a cold build whose
    # kernel died at start while another reader's kernel was starting.
    src, _, env, tag = slow_book
    add_extension(src, "survives_sigterm", SURVIVES_SIGTERM)
    (src / "index.md").write_text("# Mini\n\n```{toctree}\npage\nbad\n```\n")
    (src / "bad.md").write_text("# Bad\n\nNo code.\n")
    page = src / "page.md"  # labels enough that its reader's result overfills a pipe (64 KiB)
    page.write_text("# Page\n\n" + "".join(f"({tag}-{i})=\nLabel {i}.\n\n" for i in range(3000)))
    proc = start([*BUILD_BOOK, "--docs", str(src), str(src.parent / "html"), "--", "-j", "2"], env)
    assert wait_for((src / "reading-page").exists, timeout=120), "the page was never read"
    assert_everything_ended(proc, env, tag)
    assert proc.returncode not in (0, None)
