"""Self-check exercises as MyST directives that work without JavaScript.

Directives (see :mod:`.directives`, :mod:`.tables` and ``docs/guide/selfchecks.md``):

- ``{selfcheck-choice}`` -- multiple choice; ``:mode: multiple`` for choose-all-that-apply,
  ``:mode: eliminate`` to strike the wrong options one at a time;
- ``{selfcheck-predict}`` -- commit a prediction, then see the answer beside it;
- ``{selfcheck-sort}`` -- sort items into buckets;
- ``{selfcheck-step-through}`` -- reveal rows one at a time, then say what the next row is;
- ``{selfcheck-refill}`` -- refill a table's column from memory and compare;
- ``{selfcheck-discuss}`` -- an open prompt with a hint.

Each renders a complete static page first (answers behind native
``<details>``); ``static/selfcheck.js`` then upgrades the markup in place.
The script and style sheet are local files, added only to pages that hold a
self-check, and the script is deferred.
"""

from __future__ import annotations

from typing import Any

from docutils import nodes
from sphinx.application import Sphinx

from amp_book import add_static_path
from amp_book.selfcheck import html
from amp_book.selfcheck.directives import (
    ChoiceDirective,
    DiscussDirective,
    PredictDirective,
    SelfCheckDirective,
    SortDirective,
)
from amp_book.selfcheck.tables import RefillDirective, StepThroughDirective

PREFIX = "selfcheck-"
"""Every directive's name starts with this, so none can collide with another
extension's (sphinx-design's ``{steps}`` once did)."""

DIRECTIVES: dict[str, type[SelfCheckDirective]] = {
    f"{PREFIX}{name}": cls
    for name, cls in (
        ("choice", ChoiceDirective),
        ("predict", PredictDirective),
        ("sort", SortDirective),
        ("step-through", StepThroughDirective),
        ("refill", RefillDirective),
        ("discuss", DiscussDirective),
    )
}

SCRIPT = "selfcheck.js"
STYLE = "selfcheck.css"


def _has_selfcheck(doctree: nodes.document | None) -> bool:
    if doctree is None:
        return False
    return any("sc" in node["classes"] for node in doctree.findall(html.html_element))


def _add_assets_to_page(
    app: Sphinx,
    pagename: str,
    templatename: str,
    context: dict[str, Any],
    doctree: nodes.document | None,
) -> None:
    """Add the script and style sheet to pages that hold a self-check, and only those."""
    if _has_selfcheck(doctree):
        app.add_css_file(STYLE)
        app.add_js_file(SCRIPT, loading_method="defer")


def setup(app: Sphinx) -> dict[str, Any]:
    """Register the self-check directives, their node and their assets."""
    html.register(app)
    for name, directive in DIRECTIVES.items():
        app.add_directive(name, directive)
    app.connect("config-inited", add_static_path, priority=600)
    app.connect("html-page-context", _add_assets_to_page)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
