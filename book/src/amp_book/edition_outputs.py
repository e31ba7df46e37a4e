"""What a stored edition may show, checked before anything of it is rendered.

A stored edition is data from another machine, committed to the repository and
published under the book's name, so it is read as untrusted:

- **its files**: a page's notebook must lie inside the edition's folder, be a
  gzip file of at most :data:`MAX_FILE_BYTES` that decompresses to at most
  :data:`MAX_NOTEBOOK_BYTES` (read no further than that), and hold JSON;
- **its outputs**: only the kinds the book's own pages print. Text, PNG and
  JPEG images are shown as data. HTML and SVG, which a browser would run, pass
  only when every element, attribute and style in them is among those the
  book's tables, provenance lines and Matplotlib figures use
  (:data:`HTML_TAGS`, :data:`SVG_TAGS`, :data:`ATTRIBUTES`); a script, an
  event handler, a link out or anything else is refused. Markdown (cells, or
  outputs) may hold no raw HTML; raw cells are refused;
- **its summary**: beside each ``<page>.ipynb.gz`` the recorder writes
  ``<page>.summary.txt``, the page's outputs as plain text
  (:func:`summary`), so that a pull request shows what a recording changed.
  A summary that is not the notebook's is refused too.

Every refusal is an :class:`~amp_book.edition_store.EditionError` naming the
file and the page.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import json
import re
import zlib
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

MAX_FILE_BYTES = 4 << 20
"""The largest stored notebook file (gzipped); the book's are tens of kilobytes."""
MAX_NOTEBOOK_BYTES = 32 << 20
"""The most a stored notebook may decompress to; reading stops there."""
MAX_MANIFEST_BYTES = 1 << 20
"""The largest ``edition.json``."""
NOTEBOOK_SUFFIX = ".ipynb.gz"
SUMMARY_SUFFIX = ".summary.txt"

GLUE_PREFIX = "application/papermill.record/"
"""Where MyST-NB's ``glue`` keeps a value's own MIME type."""
TEXT_TYPES = ("text/plain", "text/latex")
IMAGE_TYPES = ("image/png", "image/jpeg")
MARKUP_TYPES = ("text/html", "image/svg+xml", "text/markdown")

HTML_TAGS = frozenset(
    [
        "table",
        "thead",
        "tbody",
        "tfoot",
        "tr",
        "th",
        "td",
        "caption",
        "colgroup",
        "col",
        "p",
        "span",
        "div",
        "br",
        "code",
        "em",
        "strong",
        "sub",
        "sup",
        "figure",
        "figcaption",
    ]
)
"""The HTML elements of the book's own outputs (``amp_lesson.display``)."""
SVG_TAGS = frozenset(
    [
        "svg",
        "g",
        "path",
        "text",
        "tspan",
        "use",
        "defs",
        "rect",
        "circle",
        "ellipse",
        "line",
        "polyline",
        "polygon",
        "clippath",
        "pattern",
        "title",
        "desc",
        "style",
        "lineargradient",
        "radialgradient",
        "stop",
        "mask",
        "marker",
        "symbol",
    ]
)
"""The SVG elements Matplotlib's figures use (lower-cased, as the parser reads them)."""
ATTRIBUTES = frozenset(
    [
        "class",
        "id",
        "scope",
        "colspan",
        "rowspan",
        "role",
        "aria-label",
        "title",
        "data-device",
        "style",
        "x",
        "y",
        "x1",
        "y1",
        "x2",
        "y2",
        "cx",
        "cy",
        "r",
        "rx",
        "ry",
        "d",
        "transform",
        "width",
        "height",
        "viewbox",
        "xmlns",
        "xmlns:xlink",
        "version",
        "type",
        "fill",
        "fill-opacity",
        "stroke",
        "stroke-width",
        "stroke-linecap",
        "stroke-linejoin",
        "stroke-dasharray",
        "opacity",
        "points",
        "clip-path",
        "mask",
        "patternunits",
        "patterncontentunits",
        "gradientunits",
        "offset",
        "stop-color",
        "stop-opacity",
        "font-size",
        "font-family",
        "font-weight",
        "text-anchor",
        "dominant-baseline",
        "preserveaspectratio",
        "href",
        "xlink:href",
    ]
)
"""The attributes those elements carry. ``href`` only to an element of the same SVG."""
_UNSAFE_CSS = re.compile(r"url\(\s*(?!['\"]?#)|@import|expression\s*\(|javascript:|behavior\s*:")


class _Markup(HTMLParser):
    """Reads HTML or SVG and notes what is not among the book's own elements."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.problems: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in HTML_TAGS and tag not in SVG_TAGS:
            self.problems.append(f"a <{tag}> element")
        self._in_style = tag == "style"
        for name, value in attrs:
            value = value or ""
            if name not in ATTRIBUTES:
                self.problems.append(f"a {name!r} attribute on <{tag}>")
            elif name in ("href", "xlink:href") and not value.startswith("#"):
                self.problems.append(f"a link out of the figure ({value[:60]!r})")
            elif _UNSAFE_CSS.search(value) or "javascript:" in value.lower():
                self.problems.append(f"{name}={value[:60]!r} on <{tag}>")

    handle_startendtag = handle_starttag

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style and _UNSAFE_CSS.search(data):
            self.problems.append(f"a style sheet that loads or runs something ({data[:60]!r})")


def markup_problems(text: str) -> list[str]:
    """What in the HTML or SVG ``text`` is not among the book's own outputs' elements.

    >>> markup_problems('<table class="amp-table"><tr><td class="amp-number">1</td></tr></table>')
    []
    >>> markup_problems('<img src=x onerror="alert(1)">')
    ['a <img> element', "a 'src' attribute on <img>", "a 'onerror' attribute on <img>"]
    >>> markup_problems('<svg><use xlink:href="https://example.org/x.svg#a"/></svg>')
    ["a link out of the figure ('https://example.org/x.svg#a')"]
    """
    parser = _Markup()
    parser.feed(text)
    parser.close()
    return parser.problems


def markdown_html(text: str) -> list[str]:
    """The raw HTML in the MyST markdown ``text`` (MyST passes it through to the page).

    >>> markdown_html("A {term}`word <glossary entry>` and `<code>`.")
    []
    >>> markdown_html("Text <script>alert(1)</script>")
    ['<script>', '</script>']
    """
    from amp_book.pages import markdown_parser

    found = []
    for token in markdown_parser().parse(text):
        for t in [token, *(token.children or [])]:
            if t.type in ("html_block", "html_inline"):
                found.append(t.content.strip()[:60])
    return found


def _text(value: Any) -> str:
    """A notebook's multi-line string: a string, or a list of them."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "".join(value)
    raise ValueError(f"a text that is {type(value).__name__}, not a string or list of them")


def _output_problems(output: Any) -> Iterator[str]:
    if not isinstance(output, dict):
        yield "an output that is not an object"
        return
    kind = output.get("output_type")
    if kind == "stream":
        _text(output.get("text", ""))
    elif kind == "error":
        for field in ("ename", "evalue"):
            _text(output.get(field, ""))
        _text(output.get("traceback", []))
    elif kind in ("display_data", "execute_result"):
        data = output.get("data", {})
        if not isinstance(data, dict):
            yield "an output whose data is not an object"
            return
        for mime, value in data.items():
            inner = mime.removeprefix(GLUE_PREFIX)
            if inner in TEXT_TYPES:
                _text(value)
            elif inner in IMAGE_TYPES:
                try:
                    base64.b64decode("".join(_text(value).split()), validate=True)
                except (binascii.Error, ValueError):
                    yield f"{mime} data that is not base64"
            elif inner == "text/markdown":
                yield from (
                    f"raw HTML {h!r} in a {mime} output" for h in markdown_html(_text(value))
                )
            elif inner in MARKUP_TYPES:
                yield from (f"{p} in a {mime} output" for p in markup_problems(_text(value)))
            else:
                yield f"an output of type {mime} (the book's pages print none)"
    else:
        yield f"an output of type {kind!r}"


def notebook_problems(notebook: Any) -> list[str]:
    """Everything in a stored notebook the book would not show (``[]``: it may be shown).

    >>> cell = {"cell_type": "code", "source": "x", "outputs": [
    ...     {"output_type": "display_data", "data": {"application/javascript": "alert(1)"}}]}
    >>> print(*notebook_problems({"cells": [cell]}))
    cell 1: an output of type application/javascript (the book's pages print none)
    """
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        return ["not a notebook (an object with a list of cells)"]
    problems = []
    for number, cell in enumerate(notebook["cells"], 1):
        kind = cell.get("cell_type") if isinstance(cell, dict) else None
        try:
            if kind == "markdown":
                found = [f"raw HTML {h!r}" for h in markdown_html(_text(cell.get("source", "")))]
            elif kind == "code":
                _text(cell.get("source", ""))
                outputs = cell.get("outputs", [])
                if not isinstance(outputs, list):
                    found = ["outputs that are not a list"]
                else:
                    found = [p for output in outputs for p in _output_problems(output)]
            else:
                found = [f"a cell of type {kind!r}"]
        except ValueError as error:
            found = [str(error)]
        problems += [f"cell {number}: {p}" for p in found]
    return problems


def stored_path(folder: Path, file: Any) -> Path:
    """The path of a page's stored notebook, ``file`` as the manifest names it, if it lies
    inside ``folder`` and is named as the recorder names it; raises ValueError otherwise."""
    if not isinstance(file, str) or not file.endswith(NOTEBOOK_SUFFIX):
        raise ValueError(f"its file must be a path ending {NOTEBOOK_SUFFIX}, got {file!r}")
    relative = Path(file)
    if relative.is_absolute() or ".." in relative.parts:
        raise ValueError(f"its file must be a path inside the edition's folder, got {file!r}")
    path = folder / relative
    if not path.resolve().is_relative_to(folder.resolve()):
        raise ValueError(f"its file {file!r} leads out of the edition's folder")
    return path


def read_notebook(path: Path) -> dict[str, Any]:
    """The notebook stored gzipped at ``path``, read within the size limits; ValueError
    (saying what is wrong) for anything else."""
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ValueError(f"{size} bytes, more than the {MAX_FILE_BYTES} a stored page may be")
    try:
        with gzip.open(path, "rb") as f:
            data = f.read(MAX_NOTEBOOK_BYTES + 1)
    except (OSError, EOFError, zlib.error) as error:
        raise ValueError(f"not a whole gzip file ({error})") from None
    if len(data) > MAX_NOTEBOOK_BYTES:
        raise ValueError(f"it decompresses to more than {MAX_NOTEBOOK_BYTES} bytes")
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise ValueError(f"not a notebook's JSON ({error})") from None


def summary_path(notebook_path: Path) -> Path:
    """Where the plain-text summary of the notebook stored at ``notebook_path`` is."""
    return notebook_path.with_name(
        notebook_path.name.removesuffix(NOTEBOOK_SUFFIX) + SUMMARY_SUFFIX
    )


class _TextOf(HTMLParser):
    """The text of an HTML table or paragraph: cells joined by " | ", rows by lines."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: list[list[str]] = [[]]
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag in ("svg", "style"):
            self._skip += 1
        elif tag in ("tr", "p", "caption", "figcaption", "br"):
            self.rows.append([])
        elif tag in ("td", "th"):
            self.rows[-1].append("")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("svg", "style"):
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        words = " ".join(data.split())
        if self._skip or not words:
            return
        if not self.rows[-1]:
            self.rows[-1].append("")
        cell = self.rows[-1][-1]
        self.rows[-1][-1] = f"{cell} {words}" if cell else words

    def text(self) -> list[str]:
        return [" | ".join(row) for row in self.rows if any(row)]


def _summarised(mime: str, value: Any) -> list[str]:
    inner = mime.removeprefix(GLUE_PREFIX)
    text = _text(value)
    if inner == "text/html":
        reader = _TextOf()
        reader.feed(text)
        lines = reader.text()
        if "<svg" in text:
            lines.append(f"[a figure: {len(text)} characters, sha256 {_sha(text)}]")
        return lines
    if inner in IMAGE_TYPES or inner == "image/svg+xml":
        return [f"[{inner}: {len(text)} characters, sha256 {_sha(text)}]"]
    return text.rstrip("\n").splitlines()


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def summary(notebook: dict[str, Any]) -> str:
    """The outputs of a stored notebook as plain text, cell by cell, for a reviewer.

    HTML reads as its text (a table's cells joined by ``|``), a figure as its size
    and digest, a value glued for the prose as ``glue <name>: <text>``.

    >>> nb = {"cells": [{"cell_type": "code", "source": "print(1)\\n", "outputs": [
    ...     {"output_type": "stream", "name": "stdout", "text": "1\\n"}]}]}
    >>> print(summary(nb), end="")
    [1] print(1)
        1
    """
    lines = []
    number = 0
    for cell in notebook["cells"]:
        if cell.get("cell_type") != "code":
            continue
        number += 1
        first = next((ln for ln in _text(cell.get("source", "")).splitlines() if ln.strip()), "")
        lines.append(f"[{number}] {first}")
        for output in cell.get("outputs", []):
            kind = output.get("output_type")
            if kind == "stream":
                shown = _text(output.get("text", "")).rstrip("\n").splitlines()
            elif kind == "error":
                shown = [f"{output.get('ename')}: {output.get('evalue')}"]
            else:
                data = output.get("data", {})
                name = output.get("metadata", {}).get("scrapbook", {}).get("name")
                preferred = [m for m in data if m.endswith(("text/html", "text/markdown"))]
                chosen = preferred[:1] or [m for m in data if m.endswith("text/plain")][:1]
                chosen = chosen or sorted(data)[:1]
                shown = [s for m in chosen for s in _summarised(m, data[m])]
                if name:
                    shown = [f"glue {name}: {shown[0] if shown else ''}", *shown[1:]]
            lines += [f"    {s}" if s else "" for s in shown]
    return "\n".join(lines) + "\n"
