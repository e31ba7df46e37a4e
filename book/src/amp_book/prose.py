"""The build reads every sentence a reader sees, and fails on an outcome typed into one.

A page states how its run turned out only through words the run chose or
checked (:func:`amp_lesson.claims.claim`, glued into the text). This check
holds the build to that, wherever the words stand: page prose, headings,
self-check questions, options, notes and explanations, lesson-correction
boxes, figure captions, and the docstrings the API reference renders. Each
block of text (a paragraph, a title, a caption, a table cell) is read with
what the run put there left out -- glued values, cell outputs -- and with
code and maths left out too, and handed to
:func:`.outcomes.typed_outcomes`. Each sentence it flags is a
warning that names the page (or the docstring) and its line, and ``-W``
turns it into a failed build.

The same reading holds citations to a date: an issue or pull request whose
state a sentence reports ("pytorch/pytorch#152279 is open") must say when
that state was read, since it changes (:func:`undated_issue_states`). And it
refuses a mark of a figure named black, white or grey (:func:`theme_bound_colours`):
the figures draw greys inverted in the dark theme, so the words hold in one theme only.
"""

from __future__ import annotations

import re

from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.util import logging

from amp_book.outcomes import RUN_VALUE, sentences, typed_outcomes

logger = logging.getLogger(__name__)

BLOCKS = (
    nodes.paragraph,
    nodes.title,
    nodes.subtitle,
    nodes.caption,
    nodes.term,
    nodes.rubric,
    nodes.line,
    nodes.attribution,
    nodes.field_name,
)
"""The nodes read as one block of text each (the sentences of a paragraph, a title ...)."""

NOT_PROSE = (
    nodes.literal,
    nodes.literal_block,
    nodes.doctest_block,
    nodes.math,
    nodes.math_block,
    nodes.raw,
    nodes.comment,
    nodes.target,
    addnodes.desc_signature,
)
"""Code, maths, raw output and signatures: nothing a run's verdict is written in."""

FROM_THE_RUN = {"pasted-text", "pasted-math", "output", "cell_output", "amp-provenance"}
"""Classes of what the run wrote itself: glued text, cell outputs, the provenance line."""


def _from_the_run(node: nodes.Node) -> bool:
    return isinstance(node, nodes.Element) and not FROM_THE_RUN.isdisjoint(node.get("classes", []))


def _skipped(node: nodes.Node) -> bool:
    """Code, maths and the like; and, until Sphinx resolves it, a link without a title.

    An untitled ``{ref}`` holds its label (``accum-why-not-bitwise``) at this
    point and the target's title later: neither is the page's own sentence.
    """
    if isinstance(node, addnodes.pending_xref) and not node.get("refexplicit"):
        return True
    return isinstance(node, NOT_PROSE)


def readable_text(node: nodes.Node) -> str:
    """The text of ``node`` a reader sees, code and maths left out, what the run put there marked.

    Each value the run wrote (glue, a cell's output) reads as
    :data:`.outcomes.RUN_VALUE`.

    >>> para = nodes.paragraph("", "", nodes.Text("They are "),
    ...                        nodes.inline("same", "same", classes=["pasted-text"]),
    ...                        nodes.Text(" in "), nodes.literal("fp16", "fp16"), nodes.Text("."))
    >>> readable_text(para)
    'They are \u27e6run\u27e7 in  .'
    """
    if _from_the_run(node):
        return RUN_VALUE
    if _skipped(node):
        return " "
    if isinstance(node, nodes.Text):
        return str(node)
    return "".join(readable_text(child) for child in node.children)


def _inside_skipped(node: nodes.Node) -> bool:
    parent = node.parent
    while parent is not None:
        if _skipped(parent) or _from_the_run(parent):
            return True
        parent = parent.parent
    return False


_ISSUE = re.compile(r"(?:\b[\w.-]+/[\w.-]+)?#\d+\b")
_STATE = re.compile(
    r"\b(?:is|are|was|were|remains?|stays?|still)\s+(?:still\s+)?"
    r"(?:open|closed|unresolved|unfixed|unmerged)\b",
    re.IGNORECASE,
)
_DATE = re.compile(
    r"\b\d{4}-\d{2}-\d{2}\b|\b(?:January|February|March|April|May|June|July|August|"
    r"September|October|November|December) \d{4}\b"
)


def undated_issue_states(text: str) -> list[str]:
    """The sentences of ``text`` that report an issue's state without the date it was read.

    >>> undated_issue_states("A request is open as pytorch/pytorch#152279. See #12.")
    ['A request is open as pytorch/pytorch#152279.']
    >>> undated_issue_states("When read on 2026-12-01, pytorch/pytorch#152279 was closed.")
    []
    """
    return [
        sentence
        for sentence in sentences(text)
        if _ISSUE.search(sentence) and _STATE.search(sentence) and not _DATE.search(sentence)
    ]


_GREY_MARK = re.compile(
    r"\b(?:black|white|gr[ae]y)\s+(?:(?:and|or|,)\s+\w+\s+)?"
    r"(?:line|dot|marker|circle|square|triangle|cross|bar|curve|point|arrow|star|band)(?:e?s)?\b",
    re.IGNORECASE,
)


def theme_bound_colours(text: str) -> list[str]:
    """The sentences of ``text`` that name a mark of a figure black, white or grey.

    :func:`.figures.dark_colour` inverts greys for the dark theme, so
    the black markers of the light theme are white there; a hue keeps its name.

    >>> theme_bound_colours("The black circle is the first row. The red crosses are skips.")
    ['The black circle is the first row.']
    >>> theme_bound_colours("Black-box testing; a white paper.")
    []
    """
    return [sentence for sentence in sentences(text) if _GREY_MARK.search(sentence)]


def scan_doctree(doctree: nodes.document) -> list[tuple[nodes.Element, str, str]]:
    """(block, problem, sentence) for every sentence of ``doctree`` the build refuses.

    The problem is ``"typed_outcome"`` (:func:`.outcomes.typed_outcomes`),
    ``"undated_issue_state"`` (:func:`undated_issue_states`) or
    ``"theme_bound_colour"`` (:func:`theme_bound_colours`).
    """
    found = []
    for block in doctree.findall(lambda n: isinstance(n, BLOCKS)):
        if _inside_skipped(block):
            continue
        text = readable_text(block)
        found += [(block, "typed_outcome", sentence) for sentence in typed_outcomes(text)]
        found += [(block, "undated_issue_state", s) for s in undated_issue_states(text)]
        found += [(block, "theme_bound_colour", s) for s in theme_bound_colours(text)]
    for image in doctree.findall(nodes.image):  # alt text is written, even for a cell's figure
        found += [
            (image, "theme_bound_colour", s) for s in theme_bound_colours(image.get("alt", ""))
        ]
    return found


_MESSAGES = {
    "typed_outcome": "an outcome typed into the text, not chosen by the run: %r (glue it "
    "with amp_lesson.claims.claim and {glue:text})",
    "undated_issue_state": "an issue's state cited without the date it was read: %r "
    "(say when, e.g. 'when read on 2026-12-01', or leave the state out)",
    "theme_bound_colour": "a figure's mark named by a grey, which the dark theme inverts: %r "
    "(name it by its shape or line style, or draw it in a hue)",
}


def _warn(app: Sphinx, doctree: nodes.document) -> None:
    for block, problem, sentence in scan_doctree(doctree):
        logger.warning(
            _MESSAGES[problem],
            sentence,
            location=block,
            type="amp_lesson",
            subtype=problem,
        )


RUN_SENTENCE_CLASS = "amp-run-sentence"
"""Class added to glued text that is a whole sentence, set in the weight of the prose around it."""


def is_whole_sentence(text: str) -> bool:
    """Whether glued ``text`` is a sentence of its own, not a value or a phrase inside one.

    >>> is_whole_sentence("The two runs differ in the last bit."), is_whole_sentence("4.883e-04")
    (True, False)
    >>> is_whole_sentence("stays at")
    False
    """
    text = " ".join(text.split())
    return " " in text and bool(re.fullmatch(r"[\"\u201c(]?[A-Z0-9].*[.!?][\"\u201d)]?", text))


def mark_run_sentences(app: Sphinx, doctree: nodes.document) -> None:
    """Mark each glued whole sentence (:data:`RUN_SENTENCE_CLASS`), so it is not set in bold."""
    for node in doctree.findall(nodes.inline):
        if "pasted-text" in node["classes"] and is_whole_sentence(node.astext()):
            node["classes"].append(RUN_SENTENCE_CLASS)


def setup(app: Sphinx) -> dict[str, bool]:
    app.connect("doctree-read", _warn)
    app.connect("doctree-read", mark_run_sentences)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
