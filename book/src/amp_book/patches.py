"""Where the build changes another project's behaviour, each with the reason and its undo.

Every patch here is applied by the execution extension (:mod:`.runner`) as a
build starts and undone when it ends, and each has a test in
``tests/test_patches.py`` that fails, by its name, when the upstream release
in the lock changes the shape the patch relies on (CONTRIBUTING.md, "Where the
build leans on private APIs", gives the bug each works around).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)

Undo = Callable[[], None]
"""What a patch returns: the call that puts upstream back as it was."""


def _nothing() -> None:
    """The undo of a patch that found nothing to change."""


def encrypt_kernel_transport() -> Undo | None:
    """Have the kernels that execute the pages encrypt their local sockets.

    ipykernel warns once per kernel, so once per page, that it "is running
    over TCP without encryption"; that noise would hide a real warning in the
    build log. The cure it names is CurveZMQ keys provisioned by the kernel
    manager, which jupyter_client does when ``transport_encryption`` is
    ``"auto"`` and the kernelspec declares ``curve`` (ipykernel's does).
    MyST-NB offers no setting for its kernel manager, so this changes the
    default of that one trait. Returns the undo, or ``None`` where zmq lacks
    CurveZMQ or jupyter_client predates the trait.
    """
    try:
        import zmq
        from jupyter_client.manager import KernelManager
    except ImportError:
        return None
    trait = KernelManager.class_traits().get("transport_encryption")
    if trait is None or not zmq.has("curve"):
        return None
    before = trait.default_value
    trait.default_value = "auto"
    if KernelManager().transport_encryption != "auto":
        trait.default_value = before
        return None

    def undo() -> None:
        trait.default_value = before

    return undo


def write_on_every_core(app: Sphinx) -> Undo | None:
    """Write the pages in ``-j N`` processes at once, not Sphinx's N - 1.

    Sphinx keeps one of the N for its main process, which resolves each
    chunk of pages before it forks a writer for it. But resolving is the
    lighter half (0.07 s a page here, against 0.14 s to write one, mostly the
    theme's navigation), so with ``-j 2`` the one writer worked through the
    chunks one after another while the main process waited, one core idle
    (5.6 s of writing on two cores here, 3.6 s with two writers). N writers
    and the main process share the N cores. Nothing changes where Sphinx
    writes serially (``-j 1``, or an extension that is not parallel-write
    safe), and nothing is patched if this Sphinx has no such method. In the live preview a
    few pages (:data:`IN_PROCESS_MAX`) are read and written in this process instead. Returns the
    undo, or ``None`` where nothing was patched.
    """
    builder = app.builder
    if app.parallel < 2 or not getattr(builder, "allow_parallel", True):
        return None
    write_parallel = getattr(builder, "_write_parallel", None)
    if not callable(write_parallel):  # loud: -W fails the build, the benchmark would drop
        logger.warning(
            "amp_lesson: this Sphinx's builder has no _write_parallel; pages are written in "
            "N - 1 processes (see CONTRIBUTING.md, 'Where the build leans on private APIs')",
            type="amp_lesson",
            subtype="upstream",
        )
        return None

    write_serial = getattr(builder, "_write_serial", None)
    read_parallel = getattr(builder, "_read_parallel", None)
    read_serial = getattr(builder, "_read_serial", None)
    from amp_book import in_preview

    # In the live preview only: a whole build keeps Sphinx's parallel readers (a reader per
    # chunk of pages, whose failure and signals the build's own handling is made for).
    in_process = in_preview(app) and all(map(callable, (write_serial, read_parallel, read_serial)))

    def write_in_n_processes(docnames: Any, nproc: int) -> None:
        if in_process and len(docnames) <= IN_PROCESS_MAX:
            write_serial(docnames)  # type: ignore[misc]
        else:
            write_parallel(docnames, nproc=max(nproc, app.parallel))

    def read_in_process_if_few(docnames: Any, nproc: int) -> None:
        if len(docnames) <= IN_PROCESS_MAX:
            read_serial(docnames)  # type: ignore[misc]
        else:
            read_parallel(docnames, nproc=nproc)  # type: ignore[misc]

    builder._write_parallel = write_in_n_processes  # type: ignore[method-assign]
    if in_process:
        builder._read_parallel = read_in_process_if_few  # type: ignore[method-assign]

    def undo() -> None:
        builder.__dict__.pop("_write_parallel", None)
        builder.__dict__.pop("_read_parallel", None)

    return undo


IN_PROCESS_MAX = 8
"""In the live preview, at most this many pages to read, or to write, are read or written in
the build's own process (:func:`write_on_every_core`). Sphinx forks workers whatever their number: for the
one page an author edited, forking a reader and sending the environment back took longer
than reading it (0.8 s of a 4 s rebuild here), and the writers for the six pages it
touches, likewise."""
