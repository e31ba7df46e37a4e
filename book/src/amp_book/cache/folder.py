"""Where the execution caches live, which of them are kept, and a database that is whole.

Each cache is a folder named by its key (:mod:`.key`) under :func:`cache_base`; the
book's older caches are pruned (:func:`prune_caches`), and only folders the book itself
created are ever deleted. A damaged database is emptied rather than failing every build
(:func:`database_problem`).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path

from amp_book import workdirs
from amp_book.errors import BookError

CACHE_DIR_ENV = "AMP_LESSON_CACHE_DIR"
"""Where the execution caches live, when set (else beside the output folder): a folder
several clones may share."""

KEEP_CACHES = 3

CACHE_MARKER = ".amp-lesson-execution-cache"
"""File the book writes into each execution cache it creates; only those are ever pruned."""

_KEY_NAME = re.compile(r"[0-9a-f]{16}")


def is_book_cache(path: Path) -> bool:
    """Whether ``path`` is an execution cache this book created.

    That is a real folder (not a link) named by a cache key (16 hex digits)
    that holds the book's marker file and a jupyter-cache database. Nothing
    else is ever deleted by :func:`prune_caches`.
    """
    path = Path(path)
    return (
        path.is_dir()
        and not path.is_symlink()
        and _KEY_NAME.fullmatch(path.name) is not None
        and (path / CACHE_MARKER).is_file()
        and (path / "global.db").is_file()
    )


def prune_caches(base: Path, current: Path, keep: int = KEEP_CACHES) -> list[Path]:
    """Delete the book's older execution caches in ``base``; return what was deleted.

    ``current`` and the ``keep - 1`` most recently used other caches stay
    (switching branches back and forth stays cheap). Only folders for which
    :func:`is_book_cache` holds are candidates: other files and folders in
    ``base`` are never touched, whatever their names.
    """
    if not isinstance(keep, int) or keep < 1:
        raise ValueError(f"keep must be an integer >= 1, got {keep!r}")
    base, current = Path(base), Path(current)
    if not base.is_dir():
        return []
    ours = sorted(
        (p for p in base.iterdir() if p != current and is_book_cache(p)),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    stale = ours[keep - 1 :]
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)
    return stale


DATABASE_NAME = "global.db"
"""jupyter-cache's database in each cache folder."""

DATABASE_TABLES = frozenset({"nbcache", "nbproject", "settings"})
"""The tables jupyter-cache creates in :data:`DATABASE_NAME`, and reads from."""


def database_problem(cache: Path) -> str | None:
    """What is wrong with the database of the execution cache ``cache`` (``None``: nothing, or
    no database yet); a database that is damaged (cut short, overwritten) is removed, with the
    entries it indexed, under the cache's write lock, so that no build writing to it is cut off.

    A damaged database made every later build fail ("database disk image is malformed").
    """
    import sqlite3

    from amp_book.cache.integrity import CACHE_LOCK, lock_cache_folder

    path = cache / DATABASE_NAME
    if not path.is_file():
        return None
    with lock_cache_folder(cache):
        try:
            with contextlib.closing(sqlite3.connect(path, timeout=60)) as db:
                result = db.execute("PRAGMA quick_check").fetchone()
                tables = {
                    row[0]
                    for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")
                }
            problem = None if result == ("ok",) else f"its database fails its check: {result[0]}"
            lacking = sorted(DATABASE_TABLES - tables)
            if problem is None and lacking:
                # An empty file passes SQLite's check, and jupyter-cache, seeing a database,
                # creates none of its tables: every later build failed ("Unexpected error
                # accessing jupyter cache").
                size = path.stat().st_size
                problem = f"its database ({size} bytes) lacks jupyter-cache's {', '.join(lacking)}"
        except sqlite3.OperationalError as error:
            if "locked" in str(error) or "busy" in str(error):
                return None  # in use by a build that does not take the lock: not damaged
            problem = f"its database: {error}"
        except sqlite3.DatabaseError as error:
            problem = f"its database: {error}"
        if problem is not None:
            for entry in cache.iterdir():
                if entry.name not in (CACHE_LOCK, CACHE_MARKER):
                    if entry.is_dir() and not entry.is_symlink():
                        shutil.rmtree(entry, ignore_errors=True)
                    else:
                        entry.unlink(missing_ok=True)
    return problem


class CacheFolderError(BookError):
    """The folder the execution caches are to go in cannot hold them."""

    category = "The execution cache"


def cache_base(outdir: str | Path, environ: Mapping[str, str] = os.environ) -> Path:
    """Where this build keeps its execution caches: :data:`CACHE_DIR_ENV` if set (a relative
    value from the folder the build was started in), else beside the output folder; made if
    missing. :class:`CacheFolderError`, naming the variable and what is wrong, where it is no
    folder this build can write in.

    >>> import tempfile
    >>> where = Path(tempfile.mkdtemp())
    >>> cache_base(where / "out", {}) == where / "out.work" / "jupyter_cache"
    True
    >>> _ = (where / "a-file").write_text("")
    >>> try:
    ...     cache_base(where / "out", {CACHE_DIR_ENV: str(where / "a-file")})
    ... except CacheFolderError as error:
    ...     print(error)
    AMP_LESSON_CACHE_DIR='/...a-file' is a file, not a folder: name a folder for the ...
    """
    value = environ.get(CACHE_DIR_ENV)
    if not value:
        return workdirs.cache_folder(outdir)
    base = Path(value).expanduser().absolute()
    named = f"{CACHE_DIR_ENV}={value!r}"
    if base.exists() and not base.is_dir():
        raise CacheFolderError(
            f"{named} is a file, not a folder: name a folder for the execution caches "
            "(it is made if missing), or unset it to keep them beside the output folder"
        )
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise CacheFolderError(f"{named}: the folder cannot be made ({error.strerror})") from None
    if not os.access(base, os.W_OK | os.X_OK):
        raise CacheFolderError(
            f"{named}: {base} is not writable by this user; name a folder the build can "
            "write in, or unset it to keep the caches beside the output folder"
        )
    return base
