"""A page that runs no code says what built it too; doctrees pickled without the environment."""

from __future__ import annotations

import datetime
import importlib.metadata

from docutils import nodes
from sphinx.application import Sphinx

import amp_lesson
from amp_book import edition


def _note_pages_without_code(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    """Give pages that run no code a provenance line too (what built them, and when).

    It goes under the title, except on the landing page, which leads with what the book
    is for and carries the line at its foot.
    """
    nb_metadata = getattr(app.env, "nb_metadata", {})
    if nb_metadata.get(docname, {}).get("exec_data") or edition.shows_a_run(app, docname):
        return  # executed pages print their own line from their first cell
    section = next(iter(doctree.findall(nodes.section)), None)
    if section is None:
        return
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = "not installed"
    today = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    text = f"Runs no code · built with amp_lesson {amp_lesson.__version__} · torch {torch_version} · {today}"
    para = nodes.paragraph(text, text, classes=["amp-provenance"])
    if docname == app.config.root_doc:
        section.append(para)
        return
    title = next(iter(section.findall(nodes.title)), None)
    section.insert(section.index(title) + 1 if title is not None else 0, para)


def _detach_foreign_documents(app: Sphinx, doctree: nodes.document) -> None:
    """Point every node at its own doctree before Sphinx pickles it.

    Nodes that autodoc's nested parse creates keep a reference to the document
    they were parsed in, and through its settings to the whole build
    environment: each API page's pickled doctree held a copy of it (about 800 KB
    each, 20 MB in all), unpickled again on every build that numbers figures.
    Without the reference a node finds its document through its parent.
    """
    for node in doctree.findall():
        if node.__dict__.get("_document", doctree) is not doctree:
            del node._document


def setup(app: Sphinx) -> dict[str, bool]:
    """Add the provenance line to pages without code; detach nodes from foreign documents."""
    app.connect("doctree-resolved", _note_pages_without_code)
    app.connect("doctree-read", _detach_foreign_documents)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
