"""Each page offered as a notebook: download (``.ipynb``, ``.py``, every page in a zip) and Colab.

The download is the page's executed notebook as plain Jupyter
(:mod:`.export`); the Colab button opens its twin in ``notebooks/``. The
theme's repository buttons point at the repository of ``[project.urls]``.
"""

from __future__ import annotations

import functools
import json
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.util import logging

from amp_book import edition, export, in_preview, urls, workdirs
from amp_book.config import book_config

logger = logging.getLogger(__name__)


def _repository(app: Sphinx) -> str:
    """The repository's https address: ``amp_lesson_repository`` or ``[project.urls]``."""
    repo = book_config(app).repository.strip().removesuffix(".git").strip("/")
    if repo and not repo.startswith("https://"):
        repo = f"https://github.com/{repo}"  # the setting may be given as owner/name
    return repo or urls.repository_url()


def _add_repository_buttons(app: Sphinx, config: Config) -> None:
    """The theme's repository, "Edit this page" and "Open an issue" buttons, pointed at the
    repository of ``[project.urls]`` (or ``amp_lesson_repository``) unless ``conf.py`` says
    otherwise."""
    options = config.html_theme_options
    options.setdefault("repository_url", _repository(app))
    options.setdefault("repository_branch", book_config(app).branch)
    options.setdefault("path_to_docs", Path(app.srcdir).name)
    for button in ("use_repository_button", "use_edit_page_button", "use_issues_button"):
        options.setdefault(button, True)


def _add_notebook_buttons(
    app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any
) -> None:
    """Offer the executed page as a plain Jupyter notebook (see :mod:`.export`)."""
    executed = Path(app.env.mystnb_config.output_folder) / f"{pagename}.ipynb"
    if doctree is None or not executed.is_file() or edition.in_edition(app):
        return
    # The titles and labels read from the sources, as tools/notebooks.py reads them for the
    # twins Colab opens: the download and its twin say the same words.
    if getattr(app, "_amp_lesson_targets", None) is None:
        memo = workdirs.work_folder(app.outdir) / TITLES_MEMO
        app._amp_lesson_targets = export.book_titles_and_labels(Path(app.srcdir), memo)
    titles, labels = app._amp_lesson_targets
    executed_nb = json.loads(executed.read_text(encoding="utf-8"))
    export_page = functools.partial(
        export.export_notebook,
        executed_nb,
        export.read_glue(executed),
        docname=pagename,
        executed=True,
        repository=_repository(app),
        titles=titles,
        labels=labels,
        built_on=export.build_device(executed_nb) or "this build's machine",
        source_dir=Path(app.srcdir),
        objects=_documented_objects(app),
    )
    try:
        nb = export_page()
    except ValueError as error:  # a part of the book only (a test's one-page book, say)
        logger.warning("%s: the notebook keeps it as plain text", error, location=pagename)
        nb = export_page(strict_references=False)
    target = Path(app.outdir) / "_sources" / f"{pagename}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(nb, indent=1, ensure_ascii=False), encoding="utf-8")
    target.with_suffix(".py").write_text(export.export_script(nb), encoding="utf-8")
    context["ipynb_source"] = f"{pagename}.ipynb"
    context["amp_lesson_opens_on"] = export.opens_on(nb)


def _documented_objects(app: Sphinx) -> Callable[[str], bool] | None:
    """Whether a dotted name is a module or object the API reference documents: what a Python
    role on a page may link to. From the build's own records, so writing a page imports
    nothing (importing the lesson would import torch: two seconds on a one-page edit).
    ``None`` in a book without an API reference (the names are then imported)."""
    domain: Any = app.env.get_domain("py")
    if not domain.objects:
        return None
    known = set(domain.objects) | set(domain.modules)
    return known.__contains__


TITLES_MEMO = "titles.json"
"""In the build's work folder: the pages' titles and labels, as the notebooks need them."""

NOTEBOOKS_ZIP = "amp-lesson-notebooks.zip"
"""Every page's notebook in one download, at the root of the built site."""


def _add_download_entries(context: dict[str, Any]) -> None:
    """The page's code as a script, and every notebook as one zip, in the theme's download menu."""
    for button in context.get("header_buttons", []):
        if button.get("label") != "download-buttons":
            continue
        pathto = context["pathto"]
        entries = button["buttons"]
        where = next(
            (i + 1 for i, b in enumerate(entries) if b.get("label") == "download-notebook-button"),
            0,
        )
        script = {
            "type": "link",
            "url": f"{pathto('_sources', 1)}/{context['ipynb_source'].removesuffix('.ipynb')}.py",
            "text": ".py",
            "icon": "fas fa-code",
            "tooltip": "Download this page's code as a Python script",
            "label": "download-script-button",
        }
        every = {
            "type": "link",
            "url": pathto(NOTEBOOKS_ZIP, 1),
            "text": "all notebooks (.zip)",
            "icon": "fas fa-file-archive",
            "tooltip": "Download every page of the book as a notebook, in one zip file",
            "label": "download-all-notebooks-button",
        }
        entries[where:where] = [script, every]


def _write_notebooks_zip(app: Sphinx, exception: Exception | None) -> None:
    """Gather the pages' notebooks (``_sources/**/*.ipynb``) into :data:`NOTEBOOKS_ZIP`."""
    if exception is not None or app.builder.format != "html" or edition.in_edition(app):
        return
    if in_preview(app):
        return
    sources = Path(app.outdir) / "_sources"
    from amp_book.theme import section_of

    # The lesson's pages only: the API reference and the authors' guide are no lesson.
    reference = book_config(app).reference_pages
    notebooks = [
        path
        for path in (sorted(sources.rglob("*.ipynb")) if sources.is_dir() else [])
        if section_of(path.relative_to(sources).with_suffix("").as_posix(), reference) is None
    ]
    if not notebooks:
        return
    target = Path(app.outdir) / NOTEBOOKS_ZIP
    partial = target.with_suffix(".zip.partial")
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in notebooks:
            # A fixed date: the same notebooks give the same zip, build after build.
            info = zipfile.ZipInfo(f"amp-lesson/{path.relative_to(sources).as_posix()}")
            info.date_time = (2020, 1, 1, 0, 0, 0)
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes())
    partial.replace(target)


def _edition_sources(
    app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any
) -> None:
    """A stored edition's page (its source there: the recorded notebook) offers what the live
    page offers: its Markdown source to edit, its notebook and script to download, Colab.

    The recorded notebook holds the book's own cells (glue, claims); the reader gets the
    notebook the live build exported from the same page (:func:`_live_downloads`).
    """
    if not edition.in_edition(app) or context.get("page_source_suffix") != ".ipynb":
        return
    context["page_source_suffix"] = ".md"
    context["sourcename"] = f"{pagename}.md"
    context["ipynb_source"] = f"{pagename}.ipynb"
    recorded = Path(app.env.doc2path(pagename))  # the recording keeps the cells' tags
    context["amp_lesson_opens_on"] = export.opens_on(json.loads(recorded.read_text("utf-8")))


def _live_downloads(
    app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any
) -> None:
    """In a stored edition, the download menu's files are the live site's (see
    :func:`_edition_sources`): ``_sources/`` and the zip, one :data:`edition.LIVE_ROOT` up."""
    if not edition.in_edition(app) or "header_buttons" not in context:
        return
    pathto = context["pathto"]
    moved = {
        pathto("_sources", 1): pathto(edition.LIVE_ROOT + "_sources", 1),
        pathto(NOTEBOOKS_ZIP, 1): pathto(edition.LIVE_ROOT + NOTEBOOKS_ZIP, 1),
    }
    for button in context["header_buttons"]:
        for entry in button.get("buttons", []):
            url = entry.get("url", "")
            for here, live in moved.items():
                if url == here or url.startswith(here + "/"):
                    entry["url"] = live + url[len(here) :]


def _add_colab_button(
    app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any
) -> None:
    if "ipynb_source" not in context or "header_buttons" not in context:
        return
    _add_download_entries(context)
    url = urls.colab_url(f"notebooks/{pagename}.ipynb", book_config(app).branch, _repository(app))
    if cell := context.get("amp_lesson_opens_on"):  # Colab scrolls to the cell of that id
        url += f"#scrollTo={cell}"
    context["header_buttons"].append(
        {
            "type": "link",
            "text": "Colab",
            "url": url,
            "tooltip": "Open this page as a notebook in Colab",
            "icon": "_static/images/logo_colab.png",
            "label": "colab-button",
        }
    )


def setup(app: Sphinx) -> dict[str, bool]:
    """Add the buttons to every page and write the zip of every notebook."""
    # Before the theme builds its download menu (priority 500), after it adds buttons.
    app.connect("html-page-context", _add_notebook_buttons, priority=450)
    app.connect("html-page-context", _edition_sources, priority=450)
    app.connect("html-page-context", _add_colab_button, priority=900)
    app.connect("html-page-context", _live_downloads, priority=910)
    app.connect("build-finished", _write_notebooks_zip)
    app.connect("config-inited", _add_repository_buttons)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
