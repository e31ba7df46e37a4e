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

import os
from pathlib import Path

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.util import logging

from amp_book import workdirs
from amp_book.cache.folder import (
    CACHE_DIR_ENV,
    CACHE_MARKER,
    DATABASE_NAME,
    DATABASE_TABLES,
    KEEP_CACHES,
    CacheFolderError,
    cache_base,
    database_problem,
    is_book_cache,
    prune_caches,
)
from amp_book.cache.integrity import CACHE_LOCK, SEAL_NAME, entry_problem, lock_cache_folder
from amp_book.cache.key import (
    ENTRY_FORMAT,
    EXTENSION_DIR,
    PACKAGE_DIR,
    device_description,
    execution_key,
    extension_key,
    gpu_models,
    remember_in,
    source_hash,
)
from amp_book.config import book_config

__all__ = [
    "CACHE_DIR_ENV",
    "CACHE_LOCK",
    "CACHE_MARKER",
    "DATABASE_NAME",
    "DATABASE_TABLES",
    "ENTRY_FORMAT",
    "EXTENSION_DIR",
    "KEEP_CACHES",
    "PACKAGE_DIR",
    "SEAL_NAME",
    "CacheFolderError",
    "cache_base",
    "database_problem",
    "device_description",
    "entry_problem",
    "execution_key",
    "extension_key",
    "gpu_models",
    "is_book_cache",
    "key_cache_on_sources",
    "lock_cache_folder",
    "prune_caches",
    "setup",
    "source_hash",
    "write_cached_outputs",
]

logger = logging.getLogger(__name__)


def key_cache_on_sources(app: Sphinx, config: Config) -> None:
    """Choose this build's cache folder (:func:`execution_key`) and prune the older ones."""
    remember_in(workdirs.work_folder(app.outdir) / "memo")
    key = execution_key()
    config.amp_lesson_environment_key = key
    config.amp_lesson_extension_hash = extension_key()
    if book_config(app).edition:
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
    from amp_book.cache.integrity import reading_page

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
    # A new environment key (amp_lesson_environment_key, set here) names a new cache
    # folder: every page is read (and run) again.
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
