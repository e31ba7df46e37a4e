"""A build that ends whole: on a signal, or when the process that started it ends.

A build is a tree of processes: Sphinx's main process, the readers and
writers it forks for ``-j``, the kernel server and the kernels it forks
(:mod:`.kernels`), or kernels started the usual way. Left to themselves,
they do not end together. Ctrl-C reaches the terminal's process group, so a
reader caught in a kernel call can go on executing pages while the main
process waits for it (``multiprocessing`` joins its children at exit);
SIGTERM ends the main process at once, without its exit handlers, leaving
the readers, the server and its folder; and the parent of a build (nox, the
live preview, ``tools/build_book.py``) may end without passing the signal on.

So, from the moment the build's configuration is read until it finishes:

- SIGTERM, SIGINT and SIGHUP in the main process kill its readers and writers,
  stop the kernel server (which kills its kernels and removes its folder),
  and end the process by the same signal;
- the main process receives SIGTERM when its parent ends, and each reader
  and writer is killed when the main process ends (Linux's parent-death
  signal), so no part of the build outlives the process that started it;
- a build that fails kills the readers and writers still running
  (:func:`end_workers`): Sphinx sends them SIGTERM, which a reader executing
  a notebook survives.

Linux only, as the forked kernels are; elsewhere nothing changes.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from amp_book.kernel_server import die_with_parent

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
"""The signals that end a build, whole."""

_state: dict[str, Any] = {"main": None, "cleanups": [], "saved": {}}
_at_fork_registered = False


def _in_a_reader() -> None:
    """In each process the build's main process forks (a reader or writer)."""
    main = _state["main"]
    if main is None or os.getppid() != main:
        return  # not a build's child (the hook stays registered after a build)
    _state["main"] = None
    _state["cleanups"] = []
    for signum in SIGNALS:  # the main process ends the build; a reader just ends
        signal.signal(signum, signal.SIG_DFL)
    die_with_parent(signal.SIGKILL, main)  # at once, should the main process have ended


def _end_the_build(signum: int, frame: FrameType | None) -> None:
    """The main process's handler of :data:`SIGNALS`: end every process of the build."""
    for other in SIGNALS:  # a second Ctrl-C does not interrupt the cleanup
        signal.signal(other, signal.SIG_IGN)
    for child in multiprocessing.active_children():
        with contextlib.suppress(OSError):
            os.kill(child.pid, signal.SIGKILL)  # type: ignore[arg-type]
    for cleanup in reversed(_state["cleanups"]):
        with contextlib.suppress(Exception):
            cleanup()
    for child in multiprocessing.active_children():  # reaps them
        child.join(timeout=5)
    stop_watching()
    with contextlib.suppress(Exception):
        sys.stderr.write(f"\nThe build was stopped by {signal.Signals(signum).name}.\n")
        sys.stderr.flush()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def watch(cleanup: Callable[[], None] | None = None) -> bool:
    """End the build whole from now on (see the module's description).

    ``cleanup`` runs when a signal ends the build (after the readers are
    killed), as :meth:`.kernels.KernelServer.close` does. Returns whether the
    build is now watched (``False`` off Linux, or outside the main thread,
    where Python cannot handle signals).
    """
    global _at_fork_registered
    if sys.platform != "linux":
        return False
    if cleanup is not None:
        _state["cleanups"].append(cleanup)
    if _state["main"] == os.getpid():
        return True
    try:
        saved = {signum: signal.signal(signum, _end_the_build) for signum in SIGNALS}
    except ValueError:  # not the main thread
        return False
    _state["saved"] = saved
    _state["main"] = os.getpid()
    if not _at_fork_registered:
        os.register_at_fork(after_in_child=_in_a_reader)
        _at_fork_registered = True
    die_with_parent(signal.SIGTERM, os.getppid())
    return True


MANAGER_PREFIX = "SyncManager-"
"""How ``multiprocessing`` names a manager's server process."""


def end_workers() -> list[int]:
    """Kill the readers and writers a failed build leaves running; return their pids.

    When a reader fails, Sphinx ends the others with SIGTERM and reads no more
    from their pipes. nbclient handles SIGTERM while it executes a notebook (it
    shuts the kernel down and returns), so such a reader reads on, then blocks
    sending its result: it holds the read end of its own pipe (inherited at the
    fork), so that end never closes. The main process waits for it at exit
    (``multiprocessing`` joins its children), and the failed build never ends.
    Only the main process has these children; elsewhere this does nothing. A manager's
    server process (``multiprocessing.Manager()``, named ``SyncManager-N``) is not a reader or
    writer: extensions keep their shared state in one (sphinx-sitemap its queue of pages) and
    read it in their own ``build-finished`` handlers, so it is left to end with the build.
    """
    stray = [
        child
        for child in multiprocessing.active_children()
        if not child.name.startswith(MANAGER_PREFIX)
    ]
    for child in stray:
        with contextlib.suppress(OSError):
            os.kill(child.pid, signal.SIGKILL)  # type: ignore[arg-type]
    for child in stray:  # reaps them
        child.join(timeout=5)
    return [child.pid for child in stray if child.pid is not None]


def stop_watching() -> None:
    """Give the process back its own handlers; the build has finished."""
    if _state["main"] != os.getpid():
        return
    for signum, handler in _state["saved"].items():
        with contextlib.suppress(ValueError, TypeError):
            signal.signal(signum, handler)
    die_with_parent(0)  # 0: no signal when the parent ends
    _state.update(main=None, cleanups=[], saved={})
