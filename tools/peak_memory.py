"""Run a command and measure its wall time and the peak memory of all its processes together.

Read the Docs gives a build 15 minutes and 7 GB of memory, for the build and every process
it starts (Sphinx's ``-j`` workers, the kernels that execute the pages). This runs a command,
and every ``interval`` seconds sums the proportional set size (PSS: a page shared by N
processes counts 1/N in each) of the command and all its descendants, from
``/proc/<pid>/smaps_rollup`` (Linux; the resident size where PSS cannot be read). The peak
of those sums is the figure to hold against the budget. A process that lives shorter than the
interval can be missed; the build's are long-lived (workers and kernels live for its reading).
A descendant whose parent ends is adopted by init and would leave the tree: with ``adopt``
(the command line, ``tools/rtd_build.py``) this process makes itself their "subreaper"
(``prctl(PR_SET_CHILD_SUBREAPER)``), so they are adopted by it and still counted.

    python tools/peak_memory.py [--json FILE] [--interval S] -- COMMAND ...
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass
class Measured:
    """What :func:`run_measured` saw: the command's status, its time and its memory peak."""

    returncode: int
    seconds: float
    peak_bytes: int
    peak_processes: int  # how many processes the peak summed
    samples: int


def _children() -> dict[int, list[int]]:
    """Every process's children, from ``/proc/<pid>/stat`` (its fourth field is the parent)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # ended meanwhile
            continue
        parent = int(stat[stat.rindex(b")") + 2 :].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    return children


def tree(root: int) -> list[int]:
    """``root`` and all its descendants now alive.

    >>> os.getpid() in tree(os.getpid())
    True
    """
    children, found, todo = _children(), [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def memory_of(pid: int) -> int:
    """The process's proportional set size in bytes (its resident size if PSS is unreadable),
    0 if it has ended.

    >>> memory_of(os.getpid()) > 0
    True
    """
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


def adopt_orphans() -> None:
    """Make this process the subreaper of its descendants (Linux): an orphan among them is
    adopted by it, not by init, and stays in its tree."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


def _reap_adopted() -> None:
    """Collect the adopted orphans that have ended (no zombie is left behind)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def run_measured(
    cmd: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    interval: float = 0.25,
    adopt: bool = False,
) -> Measured:
    """Run ``cmd`` to its end; sample its process tree's memory every ``interval`` seconds.

    With ``adopt``, this process adopts the orphans of the command's tree
    (:func:`adopt_orphans`) and counts every descendant of its own: for a process that runs
    nothing else meanwhile, as the command line and ``tools/rtd_build.py`` are.
    """
    if not sys.platform.startswith("linux"):
        raise OSError("peak memory is read from /proc: Linux only")
    if interval <= 0:
        raise ValueError(f"interval must be positive, got {interval}")
    if adopt:
        adopt_orphans()
    start = time.perf_counter()
    proc = subprocess.Popen(list(cmd), env=None if env is None else dict(env), cwd=cwd)
    peak = peak_processes = samples = 0
    while proc.poll() is None:
        pids = [p for p in tree(os.getpid()) if p != os.getpid()] if adopt else tree(proc.pid)
        total = sum(memory_of(pid) for pid in pids)
        samples += 1
        if total > peak:
            peak, peak_processes = total, len(pids)
        time.sleep(interval)
    status = proc.wait()
    if adopt:
        _reap_adopted()
    return Measured(status, time.perf_counter() - start, peak, peak_processes, samples)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--interval", type=float, default=0.25)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    measured = run_measured(command, interval=args.interval, adopt=True)
    print(
        f"peak_memory: status {measured.returncode}, {measured.seconds:.1f} s, peak "
        f"{measured.peak_bytes / 2**30:.2f} GiB over {measured.peak_processes} processes "
        f"({measured.samples} samples)"
    )
    if args.json:
        args.json.write_text(json.dumps(asdict(measured), indent=1) + "\n")
    return measured.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
