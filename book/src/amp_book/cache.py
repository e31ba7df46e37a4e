"""The execution cache: what a page's stored outputs are keyed on, and which caches are kept.

Each page's outputs are stored by MyST-NB's jupyter-cache under a key of what
they depend on (:mod:`.execution`): its cells (MyST-NB's own key), the modules
of ``amp_lesson`` it imports and the data it reads (the page's key), and what
every page depends on alike (the cache folder's key, :func:`execution_key`:
the installed distributions, Python, the build device, GPU model included). So
no page shows numbers older than what made them, and an edit re-runs only the
pages it can change. Old caches are pruned, and only folders the book itself
created are ever deleted.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.util import logging

import amp_lesson
from amp_book import execution, workdirs
from amp_book.errors import BookError

logger = logging.getLogger(__name__)

PACKAGE_DIR = Path(amp_lesson.__file__).resolve().parent
"""The lesson's package, whose modules the pages import."""

EXTENSION_DIR = Path(__file__).resolve().parent
"""This package: the book's build."""

ENTRY_FORMAT = 2
"""How the book writes a cache entry: 2, each notebook sealed with its digest
(:func:`amp_book.patches.lock_cache_writes`). Part of the cache folder's key."""

CACHE_DIR_ENV = "AMP_LESSON_CACHE_DIR"
"""Where the execution caches live, when set (else beside the output folder): a folder
several clones may share."""

KEEP_CACHES = 3

_SKIP_PARTS = {"__pycache__", ".ipynb_checkpoints"}


def source_hash(
    paths: Iterable[Path],
    extra: Iterable[str] = (),
    exclude: Iterable[str] = (),
    suffixes: Iterable[str] | None = None,
) -> str:
    """SHA-256 over every file below ``paths`` (names and bytes) and ``extra``.

    Byte-compiled files and caches are left out, so the hash changes exactly
    when a source file, a data file or one of the ``extra`` strings changes.
    Folders named in ``exclude`` are left out too, and with ``suffixes`` only
    files with one of those suffixes count.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = (d / "a.py").write_text("X = 1")
    >>> h1 = source_hash([d])
    >>> _ = (d / "a.py").write_text("X = 2")
    >>> h1 == source_hash([d])
    False
    """
    digest = hashlib.sha256()
    excluded = set(exclude)
    wanted = None if suffixes is None else set(suffixes)
    for root in sorted(Path(p) for p in paths):
        if not root.exists():
            digest.update(f"missing:{root.name}".encode())
            continue
        files = [root] if root.is_file() else sorted(root.rglob("*"))
        for path in files:
            if not path.is_file() or path.suffix in {".pyc", ".pyo"}:
                continue
            if wanted is not None and path.suffix not in wanted:
                continue
            if _SKIP_PARTS.intersection(path.parts):
                continue
            if excluded.intersection(path.relative_to(root).parts[:-1]):
                continue
            rel = path.relative_to(root.parent).as_posix()
            digest.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    for item in extra:
        digest.update(item.encode() + b"\0")
    return digest.hexdigest()


NVIDIA_PROC = Path("/proc/driver/nvidia/gpus")
"""Where the NVIDIA driver describes each GPU it sees (one folder per GPU)."""


def gpu_models(proc_dir: Path = NVIDIA_PROC) -> tuple[str, ...]:
    """The model names of the NVIDIA GPUs on this machine, sorted; ``()`` when none.

    Read from the driver's ``<proc_dir>/*/information`` files ("Model: NVIDIA
    H200"), else from ``nvidia-smi`` when it is on PATH; torch is not imported.

    >>> import tempfile
    >>> gpus = Path(tempfile.mkdtemp())
    >>> gpu_models(gpus)
    ()
    >>> (gpus / "0000:17:00.0").mkdir()
    >>> info = gpus / "0000:17:00.0" / "information"
    >>> _ = info.write_text("Model: \\t\\t NVIDIA H200\\nIRQ: \\t\\t 95\\n")
    >>> gpu_models(gpus)
    ('NVIDIA H200',)
    """
    proc_dir = Path(proc_dir)
    models = []
    if proc_dir.is_dir():
        for info in sorted(proc_dir.glob("*/information")):
            for line in info.read_text(encoding="utf-8", errors="replace").splitlines():
                field, _, value = line.partition(":")
                if field.strip() == "Model":
                    models.append(value.strip())
    if not models and proc_dir == NVIDIA_PROC and (smi := shutil.which("nvidia-smi")):
        try:
            out = subprocess.run(
                [smi, "--query-gpu=name", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
                check=False,
            ).stdout
        except (OSError, subprocess.TimeoutExpired):
            out = ""
        models = [line.strip() for line in out.splitlines() if line.strip()]
    return tuple(sorted(models))


def device_description(gpus: Iterable[str] | None = None) -> list[str]:
    """What names the device the cells will run on, as the cache key holds it.

    ``AMP_LESSON_DEVICE``, the GPU models present (``gpus``, or
    :func:`gpu_models`) and ``CUDA_VISIBLE_DEVICES``: a book executed on one
    GPU never serves its outputs for another.
    """
    models = gpu_models() if gpus is None else tuple(sorted(gpus))
    return [
        f"device={os.environ.get('AMP_LESSON_DEVICE', 'auto')}",
        f"gpus={'|'.join(models)}",
        f"visible={os.environ.get('CUDA_VISIBLE_DEVICES', '*')}",
    ]


def execution_key(gpus: Iterable[str] | None = None) -> str:
    """The key of the execution-cache folder: what every page's output depends on alike.

    The installed distributions and their versions (torch, numpy, matplotlib,
    ...), the Python version and the device (:func:`device_description`).
    What a page depends on besides (the package's modules it imports, the data
    it reads) is that page's own key (:mod:`.execution`). torch itself is not
    imported: that alone would cost an author two seconds on every rebuild.
    And :data:`ENTRY_FORMAT`: a cache whose entries another version of the book
    wrote otherwise is never read; and whether pages' runs are noted
    (:func:`.edition.ran.wanted`), so that every page of such a cache has its notes.
    """
    from amp_book.edition import ran

    notes = ["notes=on"] if ran.wanted() else []  # every page's run noted: its own cache
    return execution.environment_key([*device_description(gpus), f"entries={ENTRY_FORMAT}", *notes])


def extension_key() -> str:
    """A hash of the extension's Python code: a change re-reads every page, from the cache.

    The extension's directives and transforms shape each page's doctree, so
    Sphinx must read every page again when they change; its scripts, styles and
    templates only shape the written HTML, which Sphinx redoes anyway.
    """
    return source_hash([EXTENSION_DIR], suffixes=[".py"])


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

    from amp_book.patches import CACHE_LOCK, lock_cache_folder

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


def key_cache_on_sources(app: Sphinx, config: Config) -> None:
    """Choose this build's cache folder (:func:`execution_key`) and prune the older ones."""
    execution.remember_in(workdirs.work_folder(app.outdir) / "memo")
    key = execution_key()
    config.amp_lesson_environment_key = key
    config.amp_lesson_extension_hash = extension_key()
    if config.amp_lesson_edition:
        return  # a stored edition executes nothing: no cache, no kernels
    base = cache_base(app.outdir)
    cache = base / key[:16]
    config.nb_execution_cache_path = str(cache)
    prune_caches(base, cache)
    cache.mkdir(parents=True, exist_ok=True)
    (cache / CACHE_MARKER).write_text(
        "Execution cache of the amp-lesson book; deleted when it is no longer among the "
        f"{KEEP_CACHES} most recent.\n",
        encoding="utf-8",
    )
    os.utime(cache)  # most recently used: pruning orders the caches by this time
    if config.nb_execution_mode == "cache":
        if (problem := database_problem(cache)) is not None:
            logger.warning(
                "the execution cache at %s could not be read (%s); it was emptied, and its "
                "pages run again",
                cache,
                problem,
                type="amp_lesson",
                subtype="cache",
            )
        # Create the cache's database here, once: parallel readers (-j) that
        # each find it missing race to create it ("table settings already exists").
        from jupyter_cache.cache.db import create_db

        create_db(cache).dispose()
    logger.info("amp_lesson: execution cache key %s", key[:16])


def write_cached_outputs(app: Sphinx, doctree: nodes.document) -> None:
    """Give ``jupyter_execute/<page>.ipynb`` the outputs the page shows.

    MyST-NB writes that notebook from the one it parsed. When it executes the
    page, the execution fills that notebook in; when the outputs come from the
    execution cache it merges them into a copy, and the file it writes has
    none. The download button and the notebook twins read that file, so a
    page read again from the cache (an extension edit, ``-E``) would offer a
    notebook without outputs. Merge them in here, from the same cache.
    """
    path = Path(app.env.mystnb_config.output_folder) / f"{app.env.docname}.ipynb"
    if app.config.nb_execution_mode != "cache" or not path.is_file():
        return
    import nbformat
    from jupyter_cache import get_cache

    notebook = nbformat.reads(path.read_text(encoding="utf-8"), as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    if not code or any(cell.get("outputs") for cell in code):
        return
    from amp_book.patches import reading_page

    reading = reading_page.set(app.env.docname)  # a dropped entry's warning names the page
    try:
        _, merged = get_cache(app.config.nb_execution_cache_path).merge_match_into_notebook(
            notebook
        )
    except KeyError:  # not in the cache: nothing ran, nothing to add
        return
    finally:
        reading_page.reset(reading)
    path.write_text(nbformat.writes(merged), encoding="utf-8")


def setup(app: Sphinx) -> dict[str, bool]:
    """Register the cache's settings and choose its folder; nothing outside the app changes."""
    app.add_config_value("amp_lesson_watch", [], "env", types=[list])
    # A new environment key names a new cache folder: every page is read (and run) again.
    app.add_config_value("amp_lesson_environment_key", "", "env", types=[str])
    app.add_config_value("amp_lesson_extension_hash", "", "env", types=[str])
    # Before MyST-NB reads nb_execution_cache_path at builder-inited.
    app.connect("config-inited", key_cache_on_sources, priority=100)
    app.connect("doctree-read", write_cached_outputs)
    app.connect("builder-inited", use_own_output_folder, priority=600)  # after MyST-NB's
    return {"parallel_read_safe": True, "parallel_write_safe": True}


def use_own_output_folder(app: Sphinx) -> None:
    """Have MyST-NB write the executed notebooks in this build's own folder
    (:func:`.workdirs.executed_folder`), not in ``jupyter_execute/`` beside the output
    folder, which another build into a sibling folder would share."""
    config = getattr(app.env, "mystnb_config", None)
    if config is not None:
        folder = workdirs.executed_folder(app.outdir).resolve()
        app.env.mystnb_config = config.copy(output_folder=str(folder))
