"""The book's titles and labels, read from its MyST as Sphinx finds them.

A cross-reference in a notebook becomes a link to the hosted book, so the export needs
each page's title and each label's page, anchor and section title. Pages are read with
MyST-Parser's markdown-it tokens (:func:`amp_book.pages.markdown_parser`), as the build
reads them, and so is a directive's option block.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

DIRECTIVE_INFO = re.compile(r"^\{(?P<name>[\w:-]+)\}(?P<arg>.*)$")
_OPTION = re.compile(r"^:(?P<key>[\w-]+):(?:\s+(?P<value>.*))?$")


def split_options(lines: list[str]) -> tuple[dict[str, str], list[str]]:
    options: dict[str, str] = {}
    i = 0
    if lines and lines[0].strip() == "---":  # YAML block of options
        end = next((j for j in range(1, len(lines)) if lines[j].strip() == "---"), 0)
        for entry in lines[1:end]:
            key, _, value = entry.partition(":")
            options[key.strip()] = value.strip()
        return options, lines[end + 1 :]
    while i < len(lines) and (m := _OPTION.match(lines[i].strip())):
        options[m["key"]] = (m["value"] or "").strip()
        i += 1
    return options, lines[i:]


# -- inline markup ------------------------------------------------------------------------------


TERM_PREFIX = "term:"


def blocks(text: str) -> Iterator[Any]:
    """The tokens of the MyST ``text``, and in turn those of each directive's content that is
    MyST (a literal one's, :data:`_LITERAL_DIRECTIVES`, is not: a heading in it is none)."""
    from amp_book.pages import markdown_parser

    for token in markdown_parser().parse(text):
        yield token
        directive = DIRECTIVE_INFO.match(token.info) if "fence" in token.type else None
        if directive and directive["name"] not in _LITERAL_DIRECTIVES:
            yield from blocks("\n".join(split_options(token.content.splitlines())[1]))


def _glossary_terms(token: Any) -> list[str]:
    """The terms a ``{glossary}`` token defines: its content's unindented lines, less options."""
    directive = DIRECTIVE_INFO.match(token.info) if "fence" in token.type else None
    if directive is None or directive["name"] != "glossary":
        return []
    lines = token.content.splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln[0].isspace() and ln[0] != ":"]


def titles_and_labels(
    pages: Mapping[str, str],
) -> tuple[dict[str, str], dict[str, tuple[str, str, str]]]:
    """Page titles and section labels of MyST ``pages`` (docname: text), as Sphinx finds them.

    Each page is read as the build reads it (:func:`.pages.read_text`, then
    MyST-Parser's tokens): titles and ``(label)=`` targets come from its
    Markdown cells, outside literal blocks, and a code cell's figure ``name`` is a label too. Each term of a
    ``{glossary}`` is a label under :data:`TERM_PREFIX` and its lower-case
    text, with the anchor Sphinx gives it.

    >>> titles_and_labels({"a/b": "# Bee\\n\\n(sec-x)=\\n## Sec X\\n"})
    ({'a/b': 'Bee'}, {'sec-x': ('a/b', 'sec-x', 'Sec X')})
    >>> titles_and_labels({"g": "# G\\n\\n```{glossary}\\nLoss scale\\n  The factor.\\n```\\n"})[1]
    {'term:loss scale': ('g', 'term-Loss-scale', 'Loss scale')}
    """
    from sphinx.util.nodes import _make_id  # the ids Sphinx gives glossary terms

    from amp_book.pages import read_text

    titles: dict[str, str] = {}
    labels: dict[str, tuple[str, str, str]] = {}
    for doc, text in pages.items():
        for cell in read_text(text).cells:
            if cell.kind == "code":
                figure = (cell.metadata.get("mystnb") or {}).get("figure") or {}
                if figure.get("name"):
                    labels[figure["name"]] = (doc, figure["name"], figure.get("caption", ""))
                continue
            if cell.kind != "markdown":
                continue
            tokens = list(blocks(cell.source))
            for i, token in enumerate(tokens):
                for term in _glossary_terms(token):
                    labels[TERM_PREFIX + term.lower()] = (doc, _make_id(f"term-{term}"), term)
                if token.type == "heading_open" and doc not in titles:
                    titles[doc] = _smart(tokens[i + 1].content)
                elif token.type == "myst_target":
                    after = tokens[i + 1 : i + 3]
                    heading = [t.type for t in after[:1]] == ["heading_open"]
                    title = _smart(after[1].content) if heading else ""
                    block = (
                        DIRECTIVE_INFO.match(after[0].info)
                        if after and "fence" in after[0].type
                        else None
                    )
                    if block and block["name"] == "deeper":  # a Going deeper block's title
                        title = f"Going deeper: {_smart(block['arg'].strip())}"
                    labels[token.content] = (doc, token.content, title)
    return titles, labels


def _smart(title: str) -> str:
    """``title`` with the typographic quotes and dashes Sphinx gives it (``smartquotes``)."""
    from docutils.utils.smartquotes import smartyPants

    return smartyPants(title, "qDe", "en")


def book_titles_and_labels(
    docs: Path, memo: Path | None = None
) -> tuple[dict[str, str], dict[str, tuple[str, str, str]]]:
    """:func:`titles_and_labels` of every MyST page under ``docs`` (the book's source folder).

    With ``memo`` (a JSON file of the build's own) each page's titles and labels are kept
    there with its size and modification time, and read back while it has not changed:
    parsing every page again would cost a one-page edit a second.

    >>> import tempfile
    >>> docs = Path(tempfile.mkdtemp()); memo = docs / "memo.json"
    >>> _ = (docs / "a.md").write_text("# A page\\n"); _ = (docs / "b.md").write_text("# B\\n")
    >>> book_titles_and_labels(docs, memo)[0] == book_titles_and_labels(docs, memo)[0]
    True
    >>> _ = (docs / "a.md").write_text("# A page, renamed\\n")
    >>> book_titles_and_labels(docs, memo)[0]
    {'a': 'A page, renamed', 'b': 'B'}
    """
    from amp_book.memo import read_json, write_json

    docs = Path(docs)
    kept = read_json(memo)
    fresh: dict[str, Any] = {}
    titles: dict[str, str] = {}
    labels: dict[str, tuple[str, str, str]] = {}
    for path in sorted(docs.rglob("*.md")):
        rel = path.relative_to(docs)
        if {"_build", ".jupyter_cache"} & set(rel.parts):
            continue
        stat = path.stat()
        stamp = [stat.st_size, stat.st_mtime_ns]
        entry = kept.get(rel.as_posix())
        if not (isinstance(entry, dict) and entry.get("stamp") == stamp):
            doc = rel.with_suffix("").as_posix()
            page_titles, page_labels = titles_and_labels({doc: path.read_text(encoding="utf-8")})
            entry = {"stamp": stamp, "titles": page_titles, "labels": page_labels}
        fresh[rel.as_posix()] = entry
        titles.update(entry["titles"])
        labels.update({k: tuple(v) for k, v in entry["labels"].items()})
    if memo is not None and fresh != kept:
        write_json(memo, fresh)
    return titles, labels


_LITERAL_DIRECTIVES = frozenset(
    ["code-block", "code", "sourcecode", "code-cell", "math", "eval-rst", "raw", "mermaid"]
)
