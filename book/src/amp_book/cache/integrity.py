"""An execution cache that is whole: one writer at a time, every entry sealed.

jupyter-cache adds an entry and trims the cache in two steps, and commits an entry's
record before it writes its notebook; :func:`lock_cache_writes` makes each addition and
its trim one step under a lock on the cache folder (:data:`CACHE_LOCK`), seals each
notebook with its digest once written (:data:`SEAL_NAME`), and drops on lookup an entry
whose seal does not match (:func:`entry_problem`), naming the page (:data:`reading_page`).
``tests/test_patches.py`` fails when jupyter-cache changes the shape this relies on.
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

from sphinx.util import logging

logger = logging.getLogger(__name__)

Undo = Callable[[], None]


def _nothing() -> None:
    """The undo of a call that changed nothing."""


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


_upstream: dict[str, Any] = {}
"""jupyter-cache's own methods, while :func:`lock_cache_writes` has them replaced."""

_sharing: contextvars.ContextVar[bool] = contextvars.ContextVar("sharing", default=False)
"""Set while this process reads an entry under the shared lock (no writer can be at work)."""


def _locked(cache: Any, shared: bool = False) -> Any:
    return lock_cache_folder(Path(cache.path), shared=shared)


def _drop(cache: Any, record: Any, notebook: Path) -> None:
    """Remove an entry: its notebook's folder, then its record."""
    from jupyter_cache.cache.db import NbCacheRecord

    shutil.rmtree(notebook.parent, ignore_errors=True)
    with contextlib.suppress(KeyError):
        NbCacheRecord.remove_records([record.pk], cache.db)


def _store_whole(cache: Any, bundle: Any, *args: Any, **kwargs: Any) -> Any:
    """``cache_notebook_bundle``, its trim included, under the exclusive lock; the notebook
    sealed once written, and nothing of it kept if it could not be written whole."""
    from jupyter_cache.cache.db import NbCacheRecord

    with _locked(cache):
        try:
            record = _upstream["cache_notebook_bundle"](cache, bundle, *args, **kwargs)
            _seal(cache._get_notebook_path_cache(record.hashkey))
        except OSError as error:  # a full disk, say: nothing half-written is left
            _, hashkey = cache.create_hashed_notebook(bundle.nb)
            notebook = cache._get_notebook_path_cache(hashkey)
            with contextlib.suppress(KeyError):
                _drop(cache, NbCacheRecord.record_from_hashkey(hashkey, cache.db), notebook)
            shutil.rmtree(notebook.parent, ignore_errors=True)
            page = reading_page.get()
            raise OSError(
                error.errno,
                f"{page + ': ' if page else ''}its run could not be stored in the "
                f"execution cache at {notebook.parent} ({error.strerror or error}); "
                "nothing of it was kept",
            ) from error
        return record


def _match_whole(cache: Any, nb: Any) -> Any:
    """``match_cache_notebook``, for an entry whose seal matches; one that does not is dropped
    (with a warning naming the page) and is a miss (``KeyError``)."""
    match = _upstream["match_cache_notebook"]
    record = match(cache, nb)  # KeyError: no entry
    notebook = cache._get_notebook_path_cache(record.hashkey)
    if (problem := entry_problem(notebook)) is None:
        return record
    if _sharing.get():  # a writer cannot be at work: dropped by the next lookup
        raise KeyError(f"cache entry {notebook.parent}: {problem}")
    with _locked(cache):  # drop it, unless a writer just replaced it
        record = match(cache, nb)  # KeyError: another build trimmed it meanwhile, a miss
        notebook = cache._get_notebook_path_cache(record.hashkey)
        if (problem := entry_problem(notebook)) is None:
            return record
        _drop(cache, record, notebook)
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


def _merge_whole(cache: Any, nb: Any, *args: Any, **kwargs: Any) -> Any:
    """``merge_match_into_notebook`` of a whole entry, read under the shared lock, so that
    no writer replaces it half-way through."""
    _match_whole(cache, nb)  # a broken entry is dropped (KeyError) before the shared lock
    with _locked(cache, shared=True):
        token = _sharing.set(True)
        try:
            return _upstream["merge_match_into_notebook"](cache, nb, *args, **kwargs)
        except KeyError as error:  # another build sharing the cache removed it just now
            page = reading_page.get()
            raise RuntimeError(
                f"{page + ': ' if page else ''}the execution cache's entry was removed by "
                f"another build while this one read it ({error}); build again"
            ) from error
        finally:
            _sharing.reset(token)


_REPLACED = {
    "cache_notebook_bundle": _store_whole,
    "match_cache_notebook": _match_whole,
    "merge_match_into_notebook": _merge_whole,
}
"""jupyter-cache's methods and what :func:`lock_cache_writes` puts in their place."""


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
        import fcntl  # noqa: F401 (what the locks need)
    except ImportError:
        return None
    from jupyter_cache.cache.main import JupyterCacheBase

    if _upstream:
        return _nothing  # locked already: the first call's undo unlocks
    for name, ours in _REPLACED.items():
        theirs = getattr(JupyterCacheBase, name)
        _upstream[name] = theirs
        setattr(JupyterCacheBase, name, functools.wraps(theirs)(ours))

    def undo() -> None:
        for name, theirs in _upstream.items():
            setattr(JupyterCacheBase, name, theirs)
        _upstream.clear()

    return undo
