"""The execution extension: everything the build does to the process, undone when it ends.

The other extensions of the book only register directives, transforms and
event handlers on their app; this one changes the process the build runs in,
so that pages execute fast and a build ends whole:

- each page's kernel is forked from a server that has already imported torch
  (:mod:`.kernels`), instead of starting from nothing;
- each of ``-j N`` kernels gets its share of the cores, shows its figures as the
  book's SVG (:func:`.figures.show_figures_as_svg`, from its start-up file) and records
  the cell it runs, so a kernel that dies is named with its cell;
- the upstream patches of :mod:`.patches` (locked cache writes, encrypted
  kernel sockets, writers on every core);
- a signal, or the end of the build's parent, ends every process of the build
  (:mod:`.shutdown`), and a failed build kills the workers Sphinx left.

All of it is undone when the build finishes: the environment variables are
put back as they were, the patches undone, the server closed and the signal
handlers given back, so a second app in the same process (a test) starts
from the process as it was.
"""

from __future__ import annotations

import atexit
import importlib
import os
import sys
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.errors import ExtensionError
from sphinx.util import logging

from amp_book import (
    execution,
    in_preview,
    kernel_server,
    kernels,
    pages,
    patches,
    shutdown,
    workdirs,
)
from amp_book.cache import integrity
from amp_book.config import book_config
from amp_book.scheduling import AUTODOC

logger = logging.getLogger(__name__)

_kernel_server = kernels.KernelServer()
_undo: list[patches.Undo] = []
"""What to undo when the build finishes, in reverse order."""


def _start(app: Sphinx, config: Config) -> None:
    """Remember the process's environment, and patch upstream, before anything changes them."""
    saved = dict(os.environ)

    def restore_environment() -> None:
        os.environ.clear()
        os.environ.update(saved)

    _undo.append(restore_environment)
    undos = [patches.encrypt_kernel_transport()]
    if config.nb_execution_mode == "cache" and not getattr(config, "amp_lesson_edition", ""):
        undos.append(integrity.lock_cache_writes())
    _undo.extend(undo for undo in undos if undo is not None)
    # From here a signal, or the end of the build's parent, ends every process of the build.
    shutdown.watch()
    _undo.append(shutdown.stop_watching)


def _record_cells(app: Sphinx, config: Config) -> None:
    """Each kernel records the cell it starts, so that a kernel that dies is named with its cell,
    and notes what it runs, so that a recording of the page knows what it depends on."""
    if not getattr(config, "amp_lesson_edition", ""):
        execution.record_cells(workdirs.kernels_folder(app.outdir))
        from amp_book.edition import ran

        if ran.wanted():
            ran.prepare(workdirs.kernels_folder(app.outdir) / "ran", [Path(app.srcdir)])


def _finish(app: Sphinx, exception: BaseException | None) -> None:
    """Undo everything :func:`_start` and the kernel server did, newest first."""
    while _undo:
        _undo.pop()()


def _end_workers_of_a_failed_build(app: Sphinx, exception: BaseException | None) -> None:
    """A failed build kills the readers and writers Sphinx's SIGTERM did not end."""
    if exception is not None:
        ended = shutdown.end_workers()
        if ended:
            logger.info(
                "amp_lesson: the build failed; killed %d process(es) still running", len(ended)
            )


def _write_on_every_core(app: Sphinx) -> None:
    undo = patches.write_on_every_core(app)
    if undo is not None:
        _undo.append(undo)


def _prepare_readers(app: Sphinx, env: Any, docnames: list[str]) -> None:
    """Get ready, before the readers fork, for what the pages to read need.

    A page with code cells will want a kernel: the kernel server starts now,
    in the background, while Sphinx parses. When more such pages are read than
    run at once, it imports every module it can before the first kernel, else
    none but those of :data:`.kernels.PRELOAD` (see :data:`.kernels.PRELOAD_LATER`). API pages import ``amp_lesson``
    (and torch with it) for autodoc: imported here once, every parallel
    reader forked after it has it, instead of each importing it (2.5 s each).
    A build that reads no such page (a no-change build) does neither, nor does the live
    preview. Nor does
    one whose pages import none of what the server imports first
    (:func:`.kernels.worth_a_server`): their kernels start the usual way, in
    about a second, where a forked one would wait for the server's torch.
    """
    sources = [Path(env.doc2path(doc)) for doc in docnames]
    sources = [p for p in sources if p.suffix == ".md" and p.is_file()]
    texts = [p.read_text(encoding="utf-8") for p in sources]
    code = [
        [cell.source for cell in pages.read_text(t, p).code_cells]
        for p, t in zip(sources, texts, strict=True)
    ]
    with_cells = sum(1 for cells in code if cells)
    if _kernel_server.folder is not None and with_cells:
        if in_preview(app):
            # A page the preview reads again is mostly served from the cache: no server
            # importing torch beside the rebuild for nothing; a page that does run starts
            # its kernel the usual way, quicker than a server for one page.
            _kernel_server.usual_way()
        elif any(kernels.worth_a_server(source) for cells in code for source in cells):
            many = with_cells > app.parallel  # more pages to run than run at once
            _kernel_server.start_soon(preload_all=many, preload_later=many)
        else:
            _kernel_server.usual_way()
    if app.parallel > 1 and len(docnames) > 5 and any(AUTODOC.search(t) for t in texts):
        for name in kernel_server.package_modules():
            importlib.import_module(name)


def _limit_kernel_threads(app: Sphinx, config: Config) -> None:
    """Give each of the ``-j N`` parallel kernels its share of the cores.

    Each kernel's maths libraries would otherwise start one thread per core,
    and N kernels would fight over the cores. A value already in the
    environment wins, so an author can still choose.
    """
    if app.parallel > 1:
        share = str(max(1, (os.cpu_count() or 1) // app.parallel))
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            os.environ.setdefault(name, share)


def _fork_kernels(app: Sphinx, config: Config) -> None:
    """Fork each page's kernel from one server that has imported torch (see :mod:`.kernels`).

    In the main process, before ``-j`` forks the readers, so that they share
    the server. Off with ``amp_lesson_fork_kernels = False``, off the Linux
    platform, and when nothing executes. Off, each kernel starts as
    jupyter_client starts it, through the book's provisioner where it is
    installed, so that a kernel that dies is still reported with its exit
    status or signal.
    """
    if not book_config(app).fork_kernels or config.nb_execution_mode == "off":
        kernels.forget_inherited_server()  # off: no server, whoever started us
    elif sys.platform == "linux":
        if not kernels.provisioner_installed():
            raise ExtensionError(
                f"the kernel provisioner {kernels.PROVISIONER_NAME!r} is not installed: install "
                "the book's build again (pip install -e ./book), or set "
                "amp_lesson_fork_kernels = False"
            )
        _kernel_server.open(app.outdir)  # named for this build's output folder
        atexit.register(_kernel_server.close)
        shutdown.watch(_kernel_server.close)  # a signal ends the server too

        def close() -> None:
            _kernel_server.close()
            atexit.unregister(_kernel_server.close)

        _undo.append(close)
        return
    if config.nb_execution_mode != "off" and kernels.provisioner_installed():
        _undo.append(kernels.use_provisioner())


def setup(app: Sphinx) -> dict[str, bool]:
    """Wire the build's process-wide machinery, each part undone at ``build-finished``."""
    # In the main process, before -j forks the readers that start kernels.
    app.connect("config-inited", _start, priority=50)
    app.connect("config-inited", _limit_kernel_threads)
    app.connect("config-inited", _record_cells, priority=110)
    # After the thread limits: the kernel server takes its environment from this process.
    app.connect("config-inited", _fork_kernels, priority=600)
    app.connect("builder-inited", _write_on_every_core)
    app.connect("env-before-read-docs", _prepare_readers)
    app.connect("build-finished", _end_workers_of_a_failed_build, priority=100)
    # Last of all: the other handlers of build-finished may still use the server or patches.
    app.connect("build-finished", _finish, priority=990)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
