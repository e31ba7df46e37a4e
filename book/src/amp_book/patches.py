"""Where the build changes another project's behaviour, each with the reason and its undo.

Every patch here is applied by the execution extension (:mod:`.runner`) as a
build starts and undone when it ends, and each has a test in
``tests/test_patches.py`` that fails, by its name, when the upstream release
in the lock changes the shape the patch relies on (CONTRIBUTING.md, "Where the
build leans on private APIs", gives the bug each works around).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)

Undo = Callable[[], None]
"""What a patch returns: the call that puts upstream back as it was."""


def _nothing() -> None:
    """The undo of a patch that found nothing to change."""


CACHE_LOCK = ".amp-lesson-write.lock"
"""File in an execution cache that :func:`lock_cache_writes` locks."""
SEAL_NAME = "base.ipynb.sha256"
"""Beside each executed notebook in the cache: the SHA-256 of its bytes, written last."""

reading_page: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "reading_page", default=None
)
"""The page this process is reading (set by :class:`amp_book.execution.Parser`), for the
warning about a broken cache entry."""


def lock_cache_folder(folder: Path, shared: bool = False) -> Any:
    """The execution cache in ``folder`` locked (:data:`CACHE_LOCK`), exclusively or
    ``shared``: an open file, the lock released when it closes (use it in ``with``). Where
    the platform has no ``fcntl``, the file alone (Sphinx reads serially there)."""
    lock = open(folder / CACHE_LOCK, "a")  # noqa: SIM115  (closed by the caller)
    try:
        import fcntl
    except ImportError:
        return lock
    fcntl.flock(lock, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
    return lock


def _seal(notebook: Path) -> None:
    """Write ``notebook``'s digest beside it, the notebook first on disk and then the digest,
    each whole: a digest exists only for a notebook written to its end."""
    with open(notebook, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
        os.fsync(f.fileno())
    seal = notebook.with_name(SEAL_NAME)
    partial = seal.with_name(f"{SEAL_NAME}.{os.getpid()}")
    with open(partial, "w", encoding="ascii") as f:
        f.write(digest + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(partial, seal)
    folder = os.open(notebook.parent, os.O_RDONLY)
    try:
        os.fsync(folder)  # the rename itself on disk
    finally:
        os.close(folder)


def entry_problem(notebook: Path) -> str | None:
    """What is wrong with a cache entry whose notebook is ``notebook`` (``None``: nothing):
    missing, written half-way (no digest), or changed since it was written."""
    seal = notebook.with_name(SEAL_NAME)
    try:
        data = notebook.read_bytes()
    except OSError as error:
        return f"its notebook cannot be read ({error.strerror or error})"
    try:
        digest = seal.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return "its notebook was not written to its end (it has no digest)"
    if hashlib.sha256(data).hexdigest() != digest:
        return "its notebook is not the one the build wrote (its digest differs)"
    return None


def lock_cache_writes() -> Undo | None:
    """Let one process at a time add an executed notebook to a jupyter-cache, whole, and
    never serve an entry that is not.

    After each addition jupyter-cache trims the cache to its size limit in two
    queries: the records to keep, then every record not among them, deleted.
    A parallel reader (``-j``) that adds its page between the two queries has
    its new record taken for an old one, deleted or missing its file: the
    build stopped with "Notebook file does not exist for cache record" in
    two of some 25 cold builds here. An exclusive lock on a file in the cache
    folder (:data:`CACHE_LOCK`) makes each addition and its trim one step.

    jupyter-cache also commits an entry's record before it writes its notebook,
    so a full disk or a killed build could leave a record whose notebook is cut
    short, and every later build failed reading it. Each notebook is now sealed
    with its digest once written (:data:`SEAL_NAME`); an entry found without a
    matching one, half-written or changed by hand, is dropped, with a warning
    naming the page and the entry, and the page runs again.

    Applies to this process and those it forks from now on; calling it again
    changes nothing. Returns the undo, or ``None`` where the platform has no
    ``fcntl`` (which is also where Sphinx reads serially).
    """
    try:
        import fcntl
    except ImportError:
        return None
    from jupyter_cache.cache.db import NbCacheRecord
    from jupyter_cache.cache.main import JupyterCacheBase

    add = JupyterCacheBase.cache_notebook_bundle
    match = JupyterCacheBase.match_cache_notebook
    merge = JupyterCacheBase.merge_match_into_notebook
    if getattr(add, "amp_lesson_locked", False):
        return _nothing  # locked already: the first call's undo unlocks
    sharing: contextvars.ContextVar[bool] = contextvars.ContextVar("sharing", default=False)

    def locked(self: Any, mode: int) -> Any:
        return lock_cache_folder(Path(self.path), shared=mode == fcntl.LOCK_SH)

    def drop(self: Any, record: Any, notebook: Path) -> None:
        shutil.rmtree(notebook.parent, ignore_errors=True)
        with contextlib.suppress(KeyError):
            NbCacheRecord.remove_records([record.pk], self.db)

    @functools.wraps(add)
    def add_locked(self: Any, bundle: Any, *args: Any, **kwargs: Any) -> Any:
        with locked(self, fcntl.LOCK_EX):
            try:
                record = add(self, bundle, *args, **kwargs)
                _seal(self._get_notebook_path_cache(record.hashkey))
            except OSError as error:  # a full disk, say: nothing half-written is left
                _, hashkey = self.create_hashed_notebook(bundle.nb)
                notebook = self._get_notebook_path_cache(hashkey)
                with contextlib.suppress(KeyError):
                    drop(self, NbCacheRecord.record_from_hashkey(hashkey, self.db), notebook)
                shutil.rmtree(notebook.parent, ignore_errors=True)
                page = reading_page.get()
                raise OSError(
                    error.errno,
                    f"{page + ': ' if page else ''}its run could not be stored in the "
                    f"execution cache at {notebook.parent} ({error.strerror or error}); "
                    "nothing of it was kept",
                ) from error
            return record

    @functools.wraps(match)
    def match_whole(self: Any, nb: Any) -> Any:
        record = match(self, nb)  # KeyError: no entry
        notebook = self._get_notebook_path_cache(record.hashkey)
        if (problem := entry_problem(notebook)) is None:
            return record
        if sharing.get():  # a writer cannot be at work: dropped by the next lookup
            raise KeyError(f"cache entry {notebook.parent}: {problem}")
        with locked(self, fcntl.LOCK_EX):  # drop it, unless a writer just replaced it
            record = match(self, nb)  # KeyError: another build trimmed it meanwhile, a miss
            notebook = self._get_notebook_path_cache(record.hashkey)
            if (problem := entry_problem(notebook)) is None:
                return record
            drop(self, record, notebook)
        page = reading_page.get()
        logger.warning(
            "%sthe execution cache's entry %s was dropped: %s; the page runs again",
            f"{page}: " if page else "",
            notebook.parent,
            problem,
            type="amp_lesson",
            subtype="cache",
        )
        raise KeyError(f"cache entry {notebook.parent} dropped: {problem}")

    @functools.wraps(merge)
    def merge_whole(self: Any, nb: Any, *args: Any, **kwargs: Any) -> Any:
        match_whole(self, nb)  # a broken entry is dropped (KeyError) before the shared lock
        with locked(self, fcntl.LOCK_SH):  # no writer replaces the entry while it is read
            token = sharing.set(True)
            try:
                return merge(self, nb, *args, **kwargs)
            except KeyError as error:  # another build sharing the cache removed it just now
                page = reading_page.get()
                raise RuntimeError(
                    f"{page + ': ' if page else ''}the execution cache's entry was removed by "
                    f"another build while this one read it ({error}); build again"
                ) from error
            finally:
                sharing.reset(token)

    add_locked.amp_lesson_locked = True  # type: ignore[attr-defined]
    JupyterCacheBase.cache_notebook_bundle = add_locked  # type: ignore[method-assign]
    JupyterCacheBase.match_cache_notebook = match_whole  # type: ignore[method-assign]
    JupyterCacheBase.merge_match_into_notebook = merge_whole  # type: ignore[method-assign]

    def undo() -> None:
        JupyterCacheBase.cache_notebook_bundle = add  # type: ignore[method-assign]
        JupyterCacheBase.match_cache_notebook = match  # type: ignore[method-assign]
        JupyterCacheBase.merge_match_into_notebook = merge  # type: ignore[method-assign]

    return undo


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
    safe), and nothing is patched if this Sphinx has no such method. A few pages
    (:data:`IN_PROCESS_MAX`) are read and written in this process instead. Returns the
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
    in_process = callable(write_serial) and callable(read_parallel) and callable(read_serial)

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
"""At most this many pages to read, or to write, are read or written in the build's own
process (:func:`write_on_every_core`). Sphinx forks workers whatever their number: for the
one page an author edited, forking a reader and sending the environment back took longer
than reading it (0.8 s of a 4 s rebuild here), and the writers for the six pages it
touches, likewise."""
