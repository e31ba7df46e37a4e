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

The reading time is not typed: :func:`reading_time` computes it from the
page's own source each time the page is read, so it follows every edit. It
reads the page as the build does (:mod:`amp_book.pages`, then
MyST's own Markdown parser for each Markdown cell) and adds

- the words of prose at :data:`WORDS_PER_MINUTE`,
- :data:`SELF_CHECK_MINUTES` for each self-check directive,
- :data:`CODE_CELL_MINUTES` for each code cell whose code the reader sees,

and rounds the sum up to a multiple of :data:`ROUND_TO_MINUTES`.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.util import docname_join
from sphinx.util.docutils import SphinxDirective

WORDS_PER_MINUTE = 200
"""Reading speed for the prose of a technical page: slower than for a novel."""

SELF_CHECK_MINUTES = 2
"""Allowance for one self-check: read the question, commit to an answer, open and
compare the answer. Its options (hint, answer, note) are not counted as prose on top."""

CODE_CELL_MINUTES = 1
"""Allowance for one code cell the reader sees: read the code and its output."""

ROUND_TO_MINUTES = 5
"""The reading time is rounded up to a multiple of this: it is an estimate, not a timing."""

HIDDEN_CELL_TAGS = frozenset({"remove-cell", "remove-input"})
"""Tags of a code cell whose code the reader does not see (``hide-input`` folds it: it counts)."""

NOT_READ = frozenset(
    {
        "code-cell",
        "code-block",
        "code",
        "sourcecode",
        "literalinclude",
        "math",
        "raw",
        "toctree",
        "glue",
        "glue:any",
        "glue:math",
        "glue:md",
        "lesson-corrections",
        "nb-exec-table",
        "bit-explorer",
        "scaler-playground",
        "page-info",
    }
)
"""Directives whose body is not prose a reader reads: code, maths, navigation, generated
content, and the playgrounds (whose body shows only without JavaScript)."""

_WORD = re.compile(r"[^\W_]+(?:['\u2019-][^\W_]+)*")
_DIRECTIVE = re.compile(r"^\{(?P<name>[^}\s]+)\}\s*(?P<arg>.*)$", re.DOTALL)
_OPTION = re.compile(r"^:[\w-]+:")
_ROLE_TITLE = re.compile(r"^(?P<title>.*?)\s*<[^<>]+>$", re.DOTALL)


@dataclass(frozen=True)
class ReadingTime:
    """What a page holds to read, and the minutes it takes (see :func:`reading_time`)."""

    words: int
    self_checks: int
    code_cells: int

    @property
    def minutes(self) -> int:
        """The reading time, rounded up to a multiple of :data:`ROUND_TO_MINUTES`."""
        exact = (
            self.words / WORDS_PER_MINUTE
            + self.self_checks * SELF_CHECK_MINUTES
            + self.code_cells * CODE_CELL_MINUTES
        )
        return math.ceil(exact / ROUND_TO_MINUTES) * ROUND_TO_MINUTES


def reading_time(text: str) -> ReadingTime:
    """The words, self-checks and visible code cells of the MyST page whose source is ``text``.

    Prose is the Markdown a reader sees: paragraphs, headings, lists, tables,
    and the bodies and arguments of directives that hold Markdown (notes,
    dropdowns, self-checks, correction boxes). Code, maths blocks, directive
    options, targets, comments and front matter are not prose; an inline role,
    literal or formula counts as one word (a role with a title, as its title).

    >>> page = '''---
    ... file_format: mystnb
    ... kernelspec: {name: python3, display_name: Python 3}
    ... ---
    ... # A page
    ...
    ... ```{code-cell} ipython3
    ... :tags: [remove-input]
    ... print("provenance")
    ... ```
    ...
    ... FP16 has {glue:text}`fp16_exponent_bits` exponent bits.
    ...
    ... ```{code-cell} ipython3
    ... 1 + 1
    ... ```
    ...
    ... :::{selfcheck-discuss} Why five?
    ... :hint: Count them.
    ... :::
    ... '''
    >>> reading_time(page)
    ReadingTime(words=9, self_checks=1, code_cells=1)
    >>> reading_time(page).minutes
    5

    Raises
    ------
    TypeError
        If ``text`` is not a ``str``.
    ValueError
        If ``text`` looks like a file name rather than a page's source, or holds
        nothing to read: no prose, no self-check and no visible code cell.
    """
    if not isinstance(text, str):
        raise TypeError(
            "reading_time takes the source of a page as a str, "
            f"got {type(text).__name__}; read the file first (Path.read_text)"
        )
    stripped = text.strip()
    if "\n" not in stripped and re.search(r"\.(md|ipynb)$", stripped):
        raise ValueError(
            f"reading_time takes the source of a page, not its file name: got {stripped!r}; "
            "pass Path(...).read_text(encoding='utf-8')"
        )
    from amp_book.pages import read_text

    return page_reading_time(read_text(text))


def page_reading_time(page: Any) -> ReadingTime:
    """:func:`reading_time` of a page already read (a :class:`.pages.Page`: a MyST page
    or a notebook, as a stored edition's pages are)."""
    words = self_checks = 0
    for cell in page.cells:
        if cell.kind == "markdown":
            cell_words, cell_checks = _count_markdown(cell.source)
            words += cell_words
            self_checks += cell_checks
    code_cells = sum(1 for c in page.code_cells if HIDDEN_CELL_TAGS.isdisjoint(c.tags))
    if not (words or self_checks or code_cells):
        raise ValueError(
            "the page holds nothing to read (no prose, no self-check, no visible code cell), "
            "so it has no reading time"
        )
    return ReadingTime(words, self_checks, code_cells)


def reading_minutes(text: str) -> int:
    """The reading time of the MyST page whose source is ``text``, in whole minutes.

    The words of prose at :data:`WORDS_PER_MINUTE`, plus
    :data:`SELF_CHECK_MINUTES` per self-check and :data:`CODE_CELL_MINUTES`
    per visible code cell, rounded up to a multiple of :data:`ROUND_TO_MINUTES`
    (see :func:`reading_time` for what counts, and for the errors).

    >>> reading_minutes("# Title\\n\\n" + "word " * 1001)
    10
    """
    return reading_time(text).minutes


@functools.cache
def _self_check_names() -> frozenset[str]:
    from amp_book.selfcheck import DIRECTIVES

    return frozenset(DIRECTIVES)


def _count_markdown(source: str) -> tuple[int, int]:
    """(words of prose, self-check directives) in the Markdown ``source``."""
    from amp_book.pages import markdown_parser

    words = checks = 0
    for token in markdown_parser().parse(source):
        if token.type == "inline":
            words += _inline_words(token.children or [])
        elif token.type in ("fence", "colon_fence"):
            directive = _DIRECTIVE.match(token.info.strip())
            if directive is None:  # a literal code block
                continue
            name = directive["name"]
            if name in NOT_READ:
                continue
            checks += name in _self_check_names()
            words += _count_markdown(directive["arg"])[0]
            inner_words, inner_checks = _count_markdown(_directive_body(token.content))
            words += inner_words
            checks += inner_checks
    return words, checks


def _inline_words(children: list[Any]) -> int:
    count = 0
    for child in children:
        if child.type == "text":
            count += len(_WORD.findall(child.content))
        elif child.type in ("code_inline", "math_inline"):
            count += 1
        elif child.type == "myst_role":
            title = _ROLE_TITLE.match(child.content)
            count += len(_WORD.findall(title["title"])) if title else 1
        elif child.children:  # links, emphasis: their text
            count += _inline_words(child.children)
    return count


def _directive_body(content: str) -> str:
    """A directive's content without its options (``:key: value`` lines or a YAML block)."""
    lines = content.splitlines()
    if lines and lines[0].strip() == "---":
        end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), len(lines))
        return "\n".join(lines[end + 1 :])
    start = 0
    while start < len(lines) and _OPTION.match(lines[start].strip()):
        start += 1
    return "\n".join(lines[start:])


# -- the directive -----------------------------------------------------------------------


class PageInfo(SphinxDirective):
    """``{page-info}``: the page's reading time, and what it assumes (``:assumes:``, MyST).

    The reading time is :func:`reading_minutes` of this page's source file.
    """

    has_content = False
    option_spec: ClassVar[dict[str, Any]] = {"assumes": directives.unchanged_required}

    def run(self) -> list[nodes.Node]:
        from amp_book.pages import read_page

        source = Path(self.env.doc2path(self.env.docname))
        try:
            time = page_reading_time(read_page(source))
        except ValueError as error:
            raise self.error(f"page-info: {error}") from error
        line = nodes.paragraph("", "", classes=["amp-page-info"])
        self.set_source_info(line)
        when = f"About {time.minutes} minutes"
        if time.self_checks:
            when += " with the exercises"
        line += nodes.inline(when, when, classes=["amp-page-info-time"])
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
    """Register ``{page-info}``."""
    app.add_directive("page-info", PageInfo)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


__all__ = [
    "CODE_CELL_MINUTES",
    "ROUND_TO_MINUTES",
    "SELF_CHECK_MINUTES",
    "WORDS_PER_MINUTE",
    "ReadingTime",
    "reading_minutes",
    "reading_time",
    "setup",
]
