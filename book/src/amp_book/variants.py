"""Every wording of every claim on one page: what a build on another device would print.

A page's verdicts come from its run (:func:`amp_lesson.claims.claim`), so an
author who reads the built page sees only the wording this device chose. The
other wording is printed by a build on another device, and an author should
read it too before a reader does. ``{claim-variants}``, placed on one page,
lists every claim of the book in reading order: its key, each wording the
cell gave it (the one this build chose marked), and, for each wording, the
sentence of the page that uses it, with the wording in its place and the
run's other glued values filled in.

The list is built from the records :func:`~amp_lesson.claims.claim` glues
(:data:`~amp_lesson.claims.CLAIM_RECORD_PREFIX`), read from the glue file
MyST-NB writes for each executed page, so a claim cannot be left out of it.
The page is written again whenever another page was read, so it never shows
wordings older than the pages.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util.docutils import SphinxDirective

from amp_book import pages
from amp_book.corrections import PageStore, page_link, write_again_after_reads
from amp_book.outcomes import sentences
from amp_lesson.claims import CLAIM_RECORD_PREFIX

VARIANT_CLASS = "amp-claim-variant"
"""Class of each wording on the list; the prose check reads it as the run's own text."""

_GLUE_ROLE = re.compile(r"\{glue(?::text)?\}`(?P<key>[^`]+)`")
_ROLE = re.compile(r"\{[\w:-]+\}`(?P<body>[^`]*)`")
_TITLED_TARGET = re.compile(r"^(?P<title>.*?)\s*<[^<>]*>$", re.DOTALL)
_START, _END = "\x02", "\x03"


@dataclass(frozen=True)
class Claim:
    """One claim of a page, as its cell stated it.

    Attributes
    ----------
    key : str
        The glue key.
    says, otherwise : str or None
        The wording when the outcome holds, and when it does not (``None``:
        the page commits to ``says``, and a run where it fails stops the build).
    holds : bool
        Whether the outcome held in this build.
    contexts : tuple of str
        The page's source paragraphs that glue ``key``.
    """

    key: str
    says: str
    otherwise: str | None
    holds: bool
    contexts: tuple[str, ...]

    @property
    def wordings(self) -> tuple[tuple[str, str, bool], ...]:
        """``(label, words, chosen)`` for each wording, ``says`` first."""
        out = [("when it holds", self.says, self.holds)]
        if self.otherwise is not None:
            out.append(("when it does not", self.otherwise, not self.holds))
        return tuple(out)


def glued_text(entry: dict[str, Any]) -> str:
    """The text a glue entry shows with ``{glue:text}``: its ``text/plain``, a ``str`` unquoted."""
    plain = entry.get("data", {}).get("text/plain", "")
    try:
        value = ast.literal_eval(plain)
    except (ValueError, SyntaxError):
        return str(plain)
    return value if isinstance(value, str) else str(plain)


def read_claims(glue: dict[str, Any], markdown: str) -> list[Claim]:
    """The claims among a page's glue data, each with the paragraphs of ``markdown`` that use it.

    Parameters
    ----------
    glue : dict
        The page's glue data, key to output (what MyST-NB writes to
        ``jupyter_execute/<page>.glue.json``).
    markdown : str
        The page's Markdown (its cells left out).

    Returns
    -------
    list of Claim
        In the order the page's cells made them.
    """
    paragraphs = [p for p in re.split(r"\n\s*\n", markdown) if _GLUE_ROLE.search(p)]
    found = []
    for name, entry in glue.items():
        if not name.startswith(CLAIM_RECORD_PREFIX):
            continue
        record = json.loads(glued_text(entry))
        key = record["key"]
        uses = tuple(
            p.strip() for p in paragraphs if any(m["key"] == key for m in _GLUE_ROLE.finditer(p))
        )
        found.append(Claim(key, record["says"], record["otherwise"], bool(record["holds"]), uses))
    return found


def _plain(text: str) -> str:
    """MyST inline markup to the words a reader sees: roles to their text, no backticks."""

    def role(match: re.Match[str]) -> str:
        titled = _TITLED_TARGET.match(match["body"])
        return titled["title"] if titled else match["body"].lstrip("~")

    text = _ROLE.sub(role, text)
    text = re.sub(r"`([^`]*)`", r"\1", text)
    text = re.sub(r"\*\*([^*]+)\*\*|\*([^*]+)\*", lambda m: m[1] or m[2], text)
    return " ".join(text.split())


def in_context(paragraph: str, key: str, words: str, values: dict[str, str]) -> str:
    """The sentences of ``paragraph`` that hold ``{glue:text}`key```, with ``words`` in its place.

    Every other glued value of the page is filled in from ``values``; MyST
    roles read as their text.

    >>> in_context("Two runs {glue:text}`same`. They took {glue:text}`t` s. Done.",
    ...            "same", "differ", {"t": "3"})
    'Two runs differ.'
    >>> in_context("{glue:text}`verdict` The loss fell to {glue:text}`t`.", "verdict",
    ...            "It converged.", {"t": "0.1"})
    'It converged.'
    """
    marked = _plain(
        _GLUE_ROLE.sub(
            lambda m: _START + words + _END if m["key"] == key else values.get(m["key"], m["key"]),
            paragraph,
        )
    )
    if _START not in marked:
        return marked
    start = marked.index(_START)
    end = marked.index(_END, start) - 1
    text = marked.replace(_START, "").replace(_END, "")
    chosen, offset = [], 0
    for sentence in sentences(text):
        offset = text.index(sentence, offset)
        if offset < end and offset + len(sentence) > start:
            chosen.append(sentence)
        offset += len(sentence)
    return " ".join(chosen)


class claim_list(nodes.General, nodes.Element):
    """Placeholder for ``{claim-variants}``, replaced once every page is read."""


class ClaimVariants(SphinxDirective):
    """``{claim-variants}``: every wording of every claim of the book, in reading order."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        node = claim_list("")
        self.set_source_info(node)
        self.env.metadata[self.env.current_document.docname][LISTS_FIELD] = True
        return [node]


LISTS_FIELD = "amp_lesson_lists_claims"
"""Set in the metadata of a page that lists the claims: it is written after every read."""


def glue_file(env: BuildEnvironment, docname: str) -> Path:
    """Where MyST-NB wrote the glue data of ``docname`` (``<output folder>/<page>.glue.json``)."""
    return Path(env.mystnb_config.output_folder, *docname.split("/")).with_name(
        docname.split("/")[-1] + ".glue.json"
    )


class ClaimCollector(PageStore):
    """Keeps each page's claims and its other glued values."""

    attribute = "amp_lesson_claims"

    def collect(
        self, app: Sphinx, doctree: nodes.document
    ) -> tuple[list[Claim], dict[str, str]] | None:
        env = app.env
        docname = env.current_document.docname
        page = pages.read_page(env.doc2path(docname))
        # A page that claims glues, so MyST-NB has just rewritten its glue file.
        if not any("claim(" in cell.source for cell in page.code_cells):
            return None
        data = glue_file(env, docname)
        glue = json.loads(data.read_text(encoding="utf-8")) if data.is_file() else {}
        markdown = "\n\n".join(c.source for c in page.cells if c.kind == "markdown")
        values = {
            k: glued_text(v) for k, v in glue.items() if not k.startswith(CLAIM_RECORD_PREFIX)
        }
        return read_claims(glue, markdown), values


_MATH = re.compile(r"\$([^$]+)\$")


def _with_math(text: str) -> list[nodes.Node]:
    """``text`` as nodes, each ``$...$`` of the page's source as maths (the book renders MathML)."""
    out: list[nodes.Node] = []
    for i, part in enumerate(_MATH.split(text)):
        if i % 2:
            out.append(nodes.math(part, part))
        elif part:
            out.append(nodes.Text(part))
    return out


def _wording(label: str, words: str, chosen: bool, contexts: list[str]) -> nodes.Node:
    item = nodes.list_item()
    head = nodes.paragraph()
    head += nodes.strong(text=label.capitalize())
    head += nodes.Text(" (this build): " if chosen else ": ")
    head += nodes.inline(text=words, classes=[VARIANT_CLASS])
    item += head
    for sentence in contexts:
        quote = nodes.block_quote(classes=[VARIANT_CLASS])
        quote += nodes.paragraph("", "", *_with_math(sentence))
        item += quote
    return item


class ExpandClaimLists(SphinxPostTransform):
    """Replace each ``{claim-variants}`` with every page's claims and their wordings."""

    default_priority = 5

    def run(self, **kwargs: Any) -> None:
        placeholders = list(self.document.findall(claim_list))
        if not placeholders:
            return
        store = ClaimCollector.store(self.env)
        here = self.env.current_document.docname
        content: list[nodes.Node] = []
        for docname in ClaimCollector.in_reading_order(self.env, self.config.root_doc):
            claims, values = store[docname]
            if not claims:
                continue
            section = nodes.section(ids=[f"claims-{docname.replace('/', '-')}"])
            heading = nodes.title()
            heading += page_link(self.env, docname, here)
            section += heading
            for claim in claims:
                entry = nodes.paragraph()
                entry += nodes.literal(text=claim.key)
                if claim.otherwise is None:
                    entry += nodes.Text(": one wording; a run where it does not hold fails.")
                else:
                    entry += nodes.Text(": two wordings, the run picks one.")
                section += entry
                wordings = nodes.bullet_list()
                for label, words, chosen in claim.wordings:
                    contexts = [in_context(p, claim.key, words, values) for p in claim.contexts]
                    wordings += _wording(label, words, chosen, contexts)
                section += wordings
            content.append(section)
        for placeholder in placeholders:
            placeholder.replace_self(
                [n.deepcopy() for n in content] or [nodes.paragraph(text="No page claims yet.")]
            )


def setup(app: Sphinx) -> dict[str, Any]:
    """Register the directive, the collector, the list's expansion and its rewriting."""
    app.add_node(claim_list)
    app.add_directive("claim-variants", ClaimVariants)
    app.add_env_collector(ClaimCollector)
    app.add_post_transform(ExpandClaimLists)
    write_again_after_reads(app, LISTS_FIELD, ClaimCollector)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


__all__ = ["VARIANT_CLASS", "Claim", "glued_text", "in_context", "read_claims", "setup"]
