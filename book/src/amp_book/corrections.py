"""A common statement, checked: one kind of box, and the page that gathers them.

Statements about mixed precision circulate in tutorials and slides, and some
of them do not survive a run. Where a page's run shows something other than
such a statement, the page says so in a box written with
``{lesson-correction}``::

    :::{lesson-correction} The smallest normal
    A common statement: ... . The run shows ...
    :::

The box states the claim it checks in full and what the run (or PyTorch's
documentation) shows, and points at nothing outside itself ("the table
above"): the page that gathers the boxes shows it away from its own. It
renders as a warning titled "A common statement, checked" (and the optional
subject). ``{lesson-corrections}``, placed on one page, lists every such box
of the book in reading order, each under a link to the page it stands on and
a link back to the box itself, so a reader or an instructor sees all of them
together. The list is built from the boxes themselves: a box cannot be left out of it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.environment.collectors import EnvironmentCollector
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import docname_join
from sphinx.util.docutils import SphinxDirective

TITLE = "A common statement, checked"
BOX_CLASS = "lesson-correction"


class correction_list(nodes.General, nodes.Element):
    """Placeholder for ``{lesson-corrections}``, replaced once every page is read."""


class LessonCorrection(SphinxDirective):
    """``{lesson-correction} [subject]``: a box that checks a common statement against the run."""

    has_content = True
    optional_arguments = 1
    final_argument_whitespace = True
    option_spec: ClassVar[dict[str, Any]] = {"name": directives.unchanged}

    def run(self) -> list[nodes.Node]:
        if not self.content:
            raise self.error(
                "lesson-correction needs a body: the statement it checks and what the run showed"
            )
        subject = self.arguments[0].strip() if self.arguments else ""
        title_text = f"{TITLE}: {subject}" if subject else TITLE
        box = nodes.admonition("", classes=["admonition", "warning", BOX_CLASS])
        self.set_source_info(box)
        textnodes, messages = self.parse_inline(title_text, lineno=self.lineno)
        title = nodes.title(title_text, "", *textnodes)
        self.set_source_info(title)
        box += title
        box += messages
        box.extend(self.parse_content_to_nodes())
        serial = self.env.new_serialno(BOX_CLASS)
        box["ids"].append(f"{BOX_CLASS}-{serial}")
        self.add_name(box)
        return [box]


class LessonCorrections(SphinxDirective):
    """``{lesson-corrections}``: every ``{lesson-correction}`` box of the book, in reading order."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        node = correction_list("")
        self.set_source_info(node)
        return [node]


def reading_order(env: BuildEnvironment, root: str) -> list[str]:
    """Every document reachable from ``root`` through the toctrees, depth first."""
    order: list[str] = []
    stack = [root]
    while stack:
        doc = stack.pop()
        if doc in order:
            continue
        order.append(doc)
        stack.extend(reversed(env.toctree_includes.get(doc, [])))
    return order


class PageStore(EnvironmentCollector):
    """What each page contributes to a page that lists them all; survives parallel reads.

    A subclass names its environment attribute (``attribute``) and says what a
    page contributes (:meth:`collect`, ``None`` for nothing); the store maps
    each contributing page to it.
    """

    attribute: ClassVar[str]

    @classmethod
    def store(cls, env: BuildEnvironment) -> dict[str, Any]:
        """The pages' contributions, by docname."""
        if not hasattr(env, cls.attribute):
            setattr(env, cls.attribute, {})
        return getattr(env, cls.attribute)  # type: ignore[no-any-return]

    @classmethod
    def in_reading_order(cls, env: BuildEnvironment, root: str) -> list[str]:
        """The contributing pages, in reading order, then any the toctrees do not reach."""
        store = cls.store(env)
        order = reading_order(env, root)
        return [d for d in order if d in store] + sorted(d for d in store if d not in order)

    def collect(self, app: Sphinx, doctree: nodes.document) -> Any:
        raise NotImplementedError

    @classmethod
    def shown(cls, contribution: Any) -> Any:
        """What of a page's contribution the pages that list it show (all of it, unless a
        subclass says less): a read that leaves it equal leaves them as they are."""
        return contribution

    def clear_doc(self, app: Sphinx, env: BuildEnvironment, docname: str) -> None:
        self.store(env).pop(docname, None)

    def merge_other(
        self, app: Sphinx, env: BuildEnvironment, docnames: set[str], other: BuildEnvironment
    ) -> None:
        theirs = self.store(other)
        for docname in docnames:
            if docname in theirs:
                self.store(env)[docname] = theirs[docname]

    def process_doc(self, app: Sphinx, doctree: nodes.document) -> None:
        docname = app.env.current_document.docname
        found = self.collect(app, doctree)
        if found is None:
            self.store(app.env).pop(docname, None)
        else:
            self.store(app.env)[docname] = found


def write_again_after_reads(app: Sphinx, field: str, store: type[PageStore] | None = None) -> None:
    """Write again, after any build that read a page, each page whose metadata sets ``field``:
    a page that states what other pages hold (every claim, the chapter's total time) goes
    stale when they change, though its own source did not.

    With ``store`` (the :class:`PageStore` the page states) only when a read changed what
    the store holds: a sentence added to one page leaves every claim as it was, and the
    list of claims is not written again for it.
    """
    import copy

    def note_outdated(app: Sphinx, env: BuildEnvironment, *changes: Any) -> list[str]:
        if store is not None:  # before any page is read again or removed
            held = copy.copy(store.store(env))
            app.__dict__.setdefault("_amp_lesson_held", {})[store.attribute] = held
        return []

    def note_reading(app: Sphinx, env: BuildEnvironment, docnames: list[str]) -> None:
        app._amp_lesson_read_any = bool(docnames)  # type: ignore[attr-defined]

    def pages_to_write(app: Sphinx, env: BuildEnvironment) -> list[str]:
        if not getattr(app, "_amp_lesson_read_any", False):
            return []
        if store is not None:
            held = app.__dict__.get("_amp_lesson_held", {}).get(store.attribute)
            if held is not None and _same(held, store.store(env), store.shown):
                return []
        return sorted(d for d, meta in env.metadata.items() if meta.get(field))

    app.connect("env-get-outdated", note_outdated)
    app.connect("env-before-read-docs", note_reading)
    app.connect("env-get-updated", pages_to_write)


def _same(before: dict[str, Any], after: dict[str, Any], shown: Callable[[Any], Any]) -> bool:
    """Whether a store shows what it showed: the same pages, what each contributes that is
    shown equal (a docutils node equals only itself: a store of nodes differs once read)."""
    try:
        return before.keys() == after.keys() and all(
            shown(before[k]) == shown(after[k]) for k in before
        )
    except Exception:  # noqa: BLE001 (a contribution that cannot be compared has changed)
        return False


def page_link(env: BuildEnvironment, docname: str, here: str) -> addnodes.pending_xref:
    """A link from ``here`` to ``docname``, titled with the page's title."""
    ref = addnodes.pending_xref(
        "", refdomain="std", reftype="doc", reftarget="/" + docname,
        refdoc=here, refexplicit=True, refwarn=True,
    )  # fmt: skip
    title = env.titles.get(docname)
    ref += nodes.inline("", title.astext() if title else docname)
    return ref


class CorrectionCollector(PageStore):
    """Keeps a copy of every correction box, per page."""

    attribute = "amp_lesson_corrections"

    def collect(self, app: Sphinx, doctree: nodes.document) -> list[nodes.admonition] | None:
        boxes = [
            box.deepcopy()
            for box in doctree.findall(nodes.admonition)
            if BOX_CLASS in box["classes"]
        ]
        return boxes or None


class ExpandCorrectionLists(SphinxPostTransform):
    """Replace each ``{lesson-corrections}`` with copies of all the boxes.

    It runs before Sphinx resolves cross-references (priority 10), so a
    ``{ref}`` or ``{doc}`` inside a copied box resolves like any other on
    this page.
    """

    default_priority = 5

    def run(self, **kwargs: Any) -> None:
        placeholders = list(self.document.findall(correction_list))
        if not placeholders:
            return
        store = CorrectionCollector.store(self.env)
        docs = CorrectionCollector.in_reading_order(self.env, self.config.root_doc)
        here = self.env.current_document.docname
        for placeholder in placeholders:
            content: list[nodes.Node] = []
            for docname in docs:
                heading = nodes.paragraph(classes=["lesson-correction-source"])
                heading += nodes.Text("On ")
                heading += page_link(self.env, docname, here)
                content.append(heading)
                for box in store[docname]:
                    copy = box.deepcopy()
                    target = copy["ids"][0] if copy["ids"] else ""
                    copy["ids"] = []
                    copy["names"] = []
                    for xref in copy.findall(addnodes.pending_xref):
                        # Sphinx resolves a reference relative to its refdoc: make a
                        # {doc} target absolute first, then resolve everything from here.
                        if xref.get("reftype") == "doc":
                            origin = xref.get("refdoc", docname)
                            xref["reftarget"] = "/" + docname_join(origin, xref["reftarget"])
                        xref["refdoc"] = here
                    back = nodes.paragraph(classes=["lesson-correction-back"])
                    # Its address is the builder's to write (_link_back_in_place).
                    back += nodes.reference(
                        "", "Read it in place", internal=True, refuri="", **{BACK: [docname, target]}
                    )  # fmt: skip
                    copy += back
                    content.append(copy)
            placeholder.replace_self(content or [nodes.paragraph(text="No box disagrees yet.")])


BACK = "amp_correction_back"
"""Attribute of a copied box's link back: the page and the anchor of the box it copies."""


def _link_back_in_place(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    """Point each copied box's "Read it in place" link at the box, as this builder links pages."""
    for ref in doctree.findall(nodes.reference):
        if BACK in ref:
            page, target = ref[BACK]
            ref["refuri"] = app.builder.get_relative_uri(docname, page) + f"#{target}"
            del ref[BACK]


def setup(app: Sphinx) -> dict[str, Any]:
    """Register the two directives, the collector and the list's expansion."""
    app.add_node(correction_list)
    app.add_directive("lesson-correction", LessonCorrection)
    app.add_directive("lesson-corrections", LessonCorrections)
    app.add_env_collector(CorrectionCollector)
    app.add_post_transform(ExpandCorrectionLists)
    app.connect("doctree-resolved", _link_back_in_place)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


__all__ = [
    "BOX_CLASS",
    "TITLE",
    "PageStore",
    "page_link",
    "reading_order",
    "setup",
    "write_again_after_reads",
]
