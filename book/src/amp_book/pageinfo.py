"""One line under a chapter page's title: how long the page takes, and what it assumes.

Each chapter page states, right below its title and provenance line, its reading
time with the exercises and the pages (or knowledge) it relies on::

    ```{page-info}
    :assumes: {doc}`formats`, {doc}`underflow`
    ```

renders as "About 25 minutes with the exercises · Assumes: Two floating-point
formats, The underflow problem", the assumed pages as links. ``:assumes:`` is
MyST inline content, so it takes ``{doc}`` roles and plain words alike (the
first page assumes no page, only PyTorch's training loop); a ``{doc}`` that
names no page of the book fails the build with a message that says which.

The reading time is not typed: the build computes it from what a reader of
the page reads on its main path (:func:`doctree_reading_time`, on the page as
read, its glued values in place) and adds

- the words of prose at :data:`WORDS_PER_MINUTE`,
- :data:`SELF_CHECK_MINUTES` for each self-check,
- :data:`CODE_CELL_MINUTES` for each code cell whose code the reader sees,

and rounds the sum up to a multiple of :data:`ROUND_TO_MINUTES`. The main path
leaves out Going deeper blocks (:mod:`.deeper`) and everything in them, code and
cell outputs, displayed maths, and the self-checks' own text (their allowance
covers reading them). ``{reading-time}`chapter``` states the sum of the
chapter's pages' times ("about 3 hours 10 minutes"), so the landing page and
Start never type one; it is written again after any page is read.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import docname_join
from sphinx.util.docutils import SphinxDirective

from amp_book.corrections import PageStore, write_again_after_reads

WORDS_PER_MINUTE = 200
"""Reading speed for the prose of a technical page: slower than for a novel."""

SELF_CHECK_MINUTES = 2
"""Allowance for one self-check: read the question, commit to an answer, open and
compare the answer. Its options (hint, answer, note) are not counted as prose on top."""

CODE_CELL_MINUTES = 1
"""Allowance for one code cell the reader sees: read the code and its output."""

ROUND_TO_MINUTES = 5
"""The reading time is rounded up to a multiple of this: it is an estimate, not a timing."""

NOT_READ_CLASSES = frozenset(
    {"cell_output", "sc", "amp-page-info", "amp-provenance", "amp-playground"}
)
"""Classes of what a reader does not read as prose: a cell's output, a self-check (its
allowance covers it), the lines under the title, a playground."""

NOT_READ_NODES: tuple[type[nodes.Node], ...] = (
    nodes.literal_block,
    nodes.math_block,
    nodes.raw,
    nodes.comment,
    nodes.target,
    nodes.system_message,
    nodes.substitution_definition,
    addnodes.toctree,
)
"""Nodes that hold no prose: code, displayed maths, raw HTML (tables of outputs,
playgrounds), comments, targets and navigation."""

ONE_WORD_NODES: tuple[type[nodes.Node], ...] = (nodes.literal, nodes.math)
"""Inline code and inline maths: read as one word each."""

_WORD = re.compile(r"[^\W_]+(?:['\u2019-][^\W_]+)*")


@dataclass(frozen=True)
class ReadingTime:
    """What a page holds to read on its main path, and the minutes it takes."""

    words: int
    self_checks: int
    code_cells: int

    @property
    def minutes(self) -> int:
        """The reading time, rounded up to a multiple of :data:`ROUND_TO_MINUTES`.

        >>> ReadingTime(words=1001, self_checks=0, code_cells=0).minutes
        10
        >>> ReadingTime(words=400, self_checks=2, code_cells=3).minutes
        10
        """
        exact = (
            self.words / WORDS_PER_MINUTE
            + self.self_checks * SELF_CHECK_MINUTES
            + self.code_cells * CODE_CELL_MINUTES
        )
        return math.ceil(exact / ROUND_TO_MINUTES) * ROUND_TO_MINUTES


def count_words(text: str) -> int:
    """The words of ``text``: runs of letters and digits, with inner apostrophes and hyphens.

    >>> count_words("FP16's range isn't BF16's: 65504 vs 3.4e38.")
    8
    """
    return len(_WORD.findall(text))


def doctree_reading_time(doctree: nodes.Node) -> ReadingTime:
    """The words, self-checks and visible code cells on the main path of ``doctree``.

    Prose is the text a reader reads: paragraphs, headings, lists, tables typed
    in the page, notes and correction boxes, glued words in place. An inline
    code span or formula is one word. Left out: Going deeper blocks (all of
    their content), :data:`NOT_READ_NODES`, and nodes with a class of
    :data:`NOT_READ_CLASSES`; each self-check counts once, each code cell
    that shows its code once.

    >>> from docutils.core import publish_doctree
    >>> source = "Three ``words`` here.\\n\\n::\\n\\n  not = prose\\n"
    >>> doctree_reading_time(publish_doctree(source))
    ReadingTime(words=3, self_checks=0, code_cells=0)
    """
    from amp_book.deeper import deeper

    words = checks = cells = 0
    stack: list[nodes.Node] = [doctree]
    while stack:
        node = stack.pop()
        if isinstance(node, nodes.Text):
            words += count_words(node.astext())
            continue
        if isinstance(node, (deeper, *NOT_READ_NODES)):
            continue
        if isinstance(node, ONE_WORD_NODES):
            words += 1
            continue
        classes = set(node.get("classes", ())) if isinstance(node, nodes.Element) else set()
        if "sc" in classes:
            checks += 1
            continue
        if "cell" in classes and isinstance(node, nodes.container):
            cells += any("cell_input" in c.get("classes", ()) for c in node.children
                         if isinstance(c, nodes.Element))  # fmt: skip
        if classes & NOT_READ_CLASSES:
            continue
        stack.extend(reversed(node.children))
    return ReadingTime(words, checks, cells)


def about(minutes: int) -> str:
    """``minutes`` as a reader says it: "about 45 minutes", "about 3 hours 10 minutes".

    >>> about(45), about(60), about(190)
    ('about 45 minutes', 'about 1 hour', 'about 3 hours 10 minutes')
    """
    hours, rest = divmod(minutes, 60)
    parts = []
    if hours:
        parts.append(f"{hours} hour{'s' if hours > 1 else ''}")
    if rest or not hours:
        parts.append(f"{rest} minutes")
    return "about " + " ".join(parts)


# -- where the build keeps each page's time ----------------------------------------------

SCOPES = {"chapter": "chapter/"}
"""What ``{reading-time}`` sums: the pages whose names start with the prefix."""


class ReadingTimes(PageStore):
    """Each page's main-path :class:`ReadingTime`, kept across parallel reads."""

    attribute = "amp_lesson_reading_times"

    def collect(self, app: Sphinx, doctree: nodes.document) -> ReadingTime | None:
        if not any(True for _ in doctree.findall(page_time)):
            return None  # only pages that state their time
        return doctree_reading_time(doctree)

    @classmethod
    def shown(cls, contribution: ReadingTime) -> tuple[int, bool]:
        """The minutes, and whether there are exercises: what the totals and the page say."""
        return contribution.minutes, bool(contribution.self_checks)


class page_time(nodes.inline):
    """Where the time of this page (``scope`` empty) or of a scope's pages goes."""


def _total(env: BuildEnvironment, scope: str) -> int:
    prefix = SCOPES[scope]
    times = ReadingTimes.store(env)
    return sum(t.minutes for d, t in times.items() if d.startswith(prefix))


class FillTimes(SphinxPostTransform):
    """Put each page's time, and each scope's total, in place."""

    default_priority = 5

    def run(self, **kwargs: Any) -> None:
        here = self.env.current_document.docname
        for node in list(self.document.findall(page_time)):
            scope = node.get("scope", "")
            if scope:
                text = about(_total(self.env, scope))
            else:
                time = ReadingTimes.store(self.env)[here]
                text = f"About {time.minutes} minutes"
                if time.self_checks:
                    text += " with the exercises"
            node.replace_self(nodes.inline(text, text, classes=node["classes"]))


def reading_time_role(
    name: str, rawtext: str, text: str, lineno: int, inliner: Any,
    options: Any = None, content: Any = None,
) -> tuple[list[nodes.Node], list[nodes.system_message]]:  # fmt: skip
    """``{reading-time}`chapter```: the time the chapter's pages state, summed."""
    scope = text.strip()
    if scope not in SCOPES:
        message = inliner.reporter.error(
            f"reading-time: {scope!r} is no scope; use one of {sorted(SCOPES)}", line=lineno
        )
        return [inliner.problematic(rawtext, rawtext, message)], [message]
    env = inliner.document.settings.env
    env.metadata[env.current_document.docname][TOTALS_FIELD] = True
    return [page_time("", "", scope=scope, classes=["amp-reading-time"])], []


TOTALS_FIELD = "amp_lesson_states_totals"
"""Set in the metadata of a page that states a total: it is written after every read."""


# -- the directive -----------------------------------------------------------------------


class PageInfo(SphinxDirective):
    """``{page-info}``: the page's reading time, and what it assumes (``:assumes:``, MyST).

    The reading time is :func:`doctree_reading_time` of this page, filled in at writing.
    """

    has_content = False
    option_spec: ClassVar[dict[str, Any]] = {"assumes": directives.unchanged_required}

    def run(self) -> list[nodes.Node]:
        line = nodes.paragraph("", "", classes=["amp-page-info"])
        self.set_source_info(line)
        line += page_time("", "", scope="", classes=["amp-page-info-time"])
        messages: list[nodes.system_message] = []
        if "assumes" in self.options:
            assumed, messages = self._assumes(self.options["assumes"])
            line += nodes.inline(" \u00b7 ", " \u00b7 ", classes=["amp-page-info-sep"])
            line += nodes.inline("", "", nodes.Text("Assumes: "), *assumed,
                                 classes=["amp-page-info-assumes"])  # fmt: skip
        return [line, *messages]

    def _assumes(self, value: str) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        if not value.strip():
            raise self.error(
                "page-info: :assumes: is empty; name the pages this one relies on "
                "({doc} roles), or what it assumes in words"
            )
        parsed, messages = self.parse_inline(value.strip(), lineno=self.lineno)
        holder = nodes.inline("", "", *parsed)
        for xref in holder.findall(addnodes.pending_xref):
            if xref.get("reftype") != "doc":
                continue
            target = xref["reftarget"]
            docname = docname_join(self.env.docname, target)
            if docname == self.env.docname:
                raise self.error(f"page-info: :assumes: names this page itself ({target!r})")
            if docname not in self.env.found_docs:
                raise self.error(
                    f"page-info: :assumes: names {target!r}, which is no page of the book "
                    f"(looked for {docname!r}, relative to {self.env.docname!r})"
                )
        return list(holder.children), messages


def setup(app: Sphinx) -> dict[str, Any]:
    """Register ``{page-info}``, ``{reading-time}``, the times' store and their filling in."""
    app.add_node(page_time)
    app.add_directive("page-info", PageInfo)
    app.add_role("reading-time", reading_time_role)
    app.add_env_collector(ReadingTimes)
    app.add_post_transform(FillTimes)
    write_again_after_reads(app, TOTALS_FIELD, ReadingTimes)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


__all__ = [
    "CODE_CELL_MINUTES",
    "ROUND_TO_MINUTES",
    "SELF_CHECK_MINUTES",
    "WORDS_PER_MINUTE",
    "ReadingTime",
    "about",
    "count_words",
    "doctree_reading_time",
    "setup",
]
