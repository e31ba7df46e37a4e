"""What a stored edition may show, checked before anything of it is rendered.

A stored edition is data from another machine, committed to the repository and
published under the book's name, so it is read as untrusted:

- **its files**: a page's notebook must lie inside the edition's folder, be a
  gzip file of at most :data:`MAX_FILE_BYTES` that decompresses to at most
  :data:`MAX_NOTEBOOK_BYTES` (read no further than that), and hold JSON;
- **its outputs**: only the kinds the book's own pages print. Text, PNG and
  JPEG images are shown as data. HTML and SVG, which a browser would run, pass
  only when every element, attribute, class and style in them is among those
  the book's tables, provenance lines and Matplotlib figures use
  (:data:`HTML_TAGS`, :data:`SVG_TAGS`, :data:`ATTRIBUTES`,
  :data:`CSS_PROPERTIES`), with no comment or declaration; a script, an event
  handler, a link out or anything else is refused. What passes is written
  again from what was read (:func:`clean_markup`), so a browser never parses
  markup this check read differently;
- **its markdown** (cells, figure captions and outputs): plain MyST and the
  book's own directives and roles (:data:`DIRECTIVES`, :data:`ROLES`), maths
  that becomes safe MathML, links to pages or web addresses; no raw HTML, no
  directive or role that passes markup through or reads a file (but
  ``literalinclude`` of the lesson's source), no raw cells;
- **its metadata**: only what the recorder writes (:data:`NOTEBOOK_METADATA`);
  MyST-NB reads a notebook's ``mystnb`` metadata as the page's configuration,
  execution among it;
- **its summary**: beside each ``<page>.ipynb.gz`` the recorder writes
  ``<page>.summary.txt``, the page's metadata, markdown and outputs as plain
  text (:func:`summary`), so that a pull request shows what a recording
  changed. A summary that is not the notebook's, or is a link, is refused too.

Every refusal is an :class:`~amp_book.edition.store.EditionError` naming the
file and the page.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import html
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
TEXT_TYPES = ("text/plain",)
IMAGE_TYPES = ("image/png", "image/jpeg")
MARKUP_TYPES = ("text/html", "image/svg+xml")

HTML_TAGS = frozenset([
    "table", "thead", "tbody", "tfoot", "tr", "th", "td", "caption", "colgroup", "col", "p",
    "span", "div", "br", "code", "em", "strong", "sub", "sup", "figure", "figcaption"
])  # fmt: skip
"""The HTML elements of the book's own outputs (``amp_lesson.display``)."""
SVG_TAGS = frozenset([
    "svg", "g", "path", "text", "tspan", "use", "defs", "rect", "circle", "ellipse", "line",
    "polyline", "polygon", "clippath", "pattern", "title", "desc", "style", "lineargradient",
    "radialgradient", "stop", "mask", "marker", "symbol"
])  # fmt: skip
"""The SVG elements Matplotlib's figures use (lower-cased, as the parser reads them)."""
ATTRIBUTES = frozenset([
    "class", "id", "scope", "colspan", "rowspan", "role", "aria-label", "title",
    "data-device", "style", "x", "y", "x1", "y1", "x2", "y2", "cx", "cy", "r", "rx", "ry",
    "d", "transform", "width", "height", "viewbox", "xmlns", "xmlns:xlink", "version", "type",
    "fill", "fill-opacity", "stroke", "stroke-width", "stroke-linecap", "stroke-linejoin",
    "stroke-dasharray", "opacity", "points", "clip-path", "mask", "patternunits",
    "patterncontentunits", "gradientunits", "offset", "stop-color", "stop-opacity",
    "font-size", "font-family", "font-weight", "text-anchor", "dominant-baseline",
    "preserveaspectratio", "href", "xlink:href"
])  # fmt: skip
"""The attributes those elements carry."""
CSS_PROPERTIES = frozenset([
    "fill", "fill-opacity", "stroke", "stroke-width", "stroke-opacity", "stroke-linejoin",
    "stroke-linecap", "stroke-dasharray", "stroke-dashoffset", "opacity", "font-size",
    "font-family", "font-style", "font-weight", "text-anchor"
])  # fmt: skip
"""The style properties Matplotlib's figures set (nothing that places, hides or loads)."""
_CSS_VALUE = re.compile(r"(?:[#\w\s.,%'\"+-]|(?:light-dark|rgba?)\(|\))*|url\(#[\w.:-]+\)")
_TRANSFORM = re.compile(r"(?:[\d\s.,eE+-]|(?:rotate|translate|scale|matrix|skewX|skewY)\(|\))*")
_STYLE_SHEET = re.compile(r"\s*\*\s*\{([^{}]*)\}\s*")
_CLASS = re.compile(r"amp-[\w-]+|align-(default|left|center|right)|caption-text")
_ID = re.compile(r"[\w.:-]+")
_VOID = frozenset(["br", "col"])
MAX_MARKUP_CHARACTERS = 4 << 20
"""The longest HTML or SVG output (the book's largest figure is under a megabyte)."""
_UNCLOSED = re.compile(r"<[^>]*(?:<|$)")
_TEXT_ATTRIBUTES = frozenset(["title", "aria-label", "role", "scope", "data-device"])
_SVG_CASE = {
    name.lower(): name
    for name in [
        "clipPath", "linearGradient", "radialGradient", "viewBox", "preserveAspectRatio",
        "patternUnits", "patternContentUnits", "gradientUnits",
    ]
}  # fmt: skip
"""SVG's names in their case, which the parser lowers (an SVG read as XML needs it)."""


_SHEET_PROPERTIES = frozenset(["stroke-linejoin", "stroke-linecap"])


def _style_problems(declarations: str, allowed: frozenset[str] = CSS_PROPERTIES) -> list[str]:
    """What in CSS ``declarations`` (``a: b; c: d``) is not a property and value Matplotlib
    writes; an escape, a comment, an at-rule or a URL out is refused with them."""
    problems = []
    for declaration in declarations.split(";"):
        if not declaration.strip():
            continue
        name, colon, value = declaration.partition(":")
        name = name.strip().lower()
        if not colon or name not in allowed:
            problems.append(f"a style {declaration.strip()[:40]!r}")
        elif not _CSS_VALUE.fullmatch(value.strip()):
            problems.append(f"a style value {value.strip()[:40]!r}")
    return problems


class _Markup(HTMLParser):
    """Reads HTML or SVG, notes what is not among the book's own elements, and writes it
    again from what it read: the browser gets markup this parser and it read alike."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.problems: list[str] = []
        self.out: list[str] = []
        self._open: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._start(tag, attrs, closed=False)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._start(tag, attrs, closed=True)

    def _start(self, tag: str, attrs: list[tuple[str, str | None]], closed: bool) -> None:
        if tag not in HTML_TAGS and tag not in SVG_TAGS:
            self.problems.append(f"a <{tag}> element")
        if tag == "style" and "svg" not in self._open:
            self.problems.append("a <style> element outside a figure")
        written = []
        for name, value in attrs:
            value = value or ""
            if name not in ATTRIBUTES:
                self.problems.append(f"a {name!r} attribute on <{tag}>")
            elif name in ("href", "xlink:href"):
                if not (value.startswith("#") and _ID.fullmatch(value[1:])):
                    self.problems.append(f"a link out of the figure ({value[:60]!r})")
            elif name == "style":
                self.problems += [f"{p} on <{tag}>" for p in _style_problems(value)]
            elif name == "class":
                if bad := [c for c in value.split() if not _CLASS.fullmatch(c)]:
                    self.problems.append(f"a class {bad[0][:40]!r} on <{tag}>")
            elif name == "id":
                if not _ID.fullmatch(value):
                    self.problems.append(f"an id {value[:40]!r} on <{tag}>")
            elif name in CSS_PROPERTIES or name in ("clip-path", "mask"):
                if not _CSS_VALUE.fullmatch(value):
                    self.problems.append(f"{name}={value[:60]!r} on <{tag}>")
            elif name == "transform":
                if not _TRANSFORM.fullmatch(value):
                    self.problems.append(f"{name}={value[:60]!r} on <{tag}>")
            elif name in _TEXT_ATTRIBUTES:
                pass  # words for a reader or a screen reader, written escaped
            elif "(" in value or (":" in value and name not in ("xmlns", "xmlns:xlink")):
                self.problems.append(f"{name}={value[:60]!r} on <{tag}>")
            written.append(f' {_SVG_CASE.get(name, name)}="{html.escape(value)}"')
        self.out.append(f"<{_SVG_CASE.get(tag, tag)}{''.join(written)}{' /' if closed else ''}>")
        if not closed and tag not in _VOID:
            self._open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in self._open:
            while self._open:
                if (opened := self._open.pop()) == tag:
                    break
                self.out.append(f"</{_SVG_CASE.get(opened, opened)}>")
            self.out.append(f"</{_SVG_CASE.get(tag, tag)}>")

    def handle_data(self, data: str) -> None:
        if self._open and self._open[-1] == "style":
            sheet = _STYLE_SHEET.fullmatch(data)
            if sheet is None:
                self.problems.append(f"a style sheet {data.strip()[:60]!r}")
            else:  # it applies to the whole page: Matplotlib's line joins and caps alone
                self.problems += _style_problems(sheet.group(1), _SHEET_PROPERTIES)
        self.out.append(html.escape(data, quote=False))

    def handle_comment(self, data: str) -> None:
        self.problems.append("a comment")

    def handle_decl(self, decl: str) -> None:
        self.problems.append(f"a declaration <!{decl[:40]}>")

    def handle_pi(self, data: str) -> None:
        self.problems.append(f"a processing instruction <?{data[:40]}>")

    def unknown_decl(self, data: str) -> None:
        self.problems.append(f"a declaration <![{data[:40]}>")

    def handle_entityref(self, name: str) -> None:  # pragma: no cover (convert_charrefs)
        self.out.append(f"&amp;{name}")

    def written(self) -> str:
        """The markup as read: each element's attributes quoted, its text escaped, every
        element closed, and nothing the parser left unread."""
        closing = [f"</{_SVG_CASE.get(tag, tag)}>" for tag in reversed(self._open)]
        return "".join([*self.out, *closing])


def clean_markup(text: str) -> tuple[str, list[str]]:
    """The HTML or SVG ``text`` written again from what was read, and what in it is not
    among the book's own outputs' elements (:func:`markup_problems`).

    A browser and Python's parser read some malformed markup differently; shown as
    written again, the markup is what was checked.

    >>> clean_markup('<p class="amp-provenance">1 &lt; 2 <br></p>')
    ('<p class="amp-provenance">1 &lt; 2 <br></p>', [])
    >>> clean_markup('<p>1 < 2</p>')[1]
    ["a tag that does not close ('< 2<')"]
    """
    if len(text) > MAX_MARKUP_CHARACTERS:
        return "", [f"markup of {len(text)} characters, more than {MAX_MARKUP_CHARACTERS}"]
    if (unclosed := _UNCLOSED.search(text)) is not None:
        # Refused before Python's parser reads it: it takes time quadratic in such markup.
        return "", [f"a tag that does not close ({unclosed.group()[:40]!r})"]
    parser = _Markup()
    try:
        parser.feed(text)
        parser.close()
    except AssertionError as error:  # Python's parser asserts on some declarations
        return "", [f"markup Python's parser cannot read ({error})"]
    return parser.written(), parser.problems


def markup_problems(text: str) -> list[str]:
    """What in the HTML or SVG ``text`` is not among the book's own outputs' elements.

    >>> markup_problems('<table class="amp-table"><tr><td class="amp-number">1</td></tr></table>')
    []
    >>> markup_problems('<img src=x onerror="alert(1)">')
    ['a <img> element', "a 'src' attribute on <img>", "a 'onerror' attribute on <img>"]
    >>> markup_problems('<svg><use xlink:href="https://example.org/x.svg#a"/></svg>')
    ["a link out of the figure ('https://example.org/x.svg#a')"]
    """
    return clean_markup(text)[1]


DIRECTIVES = frozenset([
    "admonition", "note", "tip", "warning", "important", "dropdown", "deeper", "deeper-end",
    "glue", "glue:any", "glue:figure", "glue:math", "math", "bit-explorer",
    "scaler-playground", "claim-variants", "lesson-correction", "page-info",
    "selfcheck-choice", "selfcheck-discuss", "selfcheck-predict", "selfcheck-refill",
    "selfcheck-sort", "selfcheck-step-through", "literalinclude"
])  # fmt: skip
"""The directives a stored page may hold: those of the book's lesson pages. Not ``raw``,
``eval-rst``, ``include`` or anything else that reads a file or passes markup through
(``literalinclude`` only of the lesson's own source, :data:`INCLUDE_ROOT`)."""
ROLES = frozenset([
    "cite:p", "cite:t", "doc", "ref", "numref", "eq", "term", "math", "glue", "glue:text",
    "glue:any", "reading-time", "py:class", "py:data", "py:func", "py:meth", "py:mod",
    "py:attr", "py:exc"
])  # fmt: skip
"""The roles a stored page may use (not ``download``, ``raw`` or any that reads a file)."""
INCLUDE_ROOT = "src/amp_lesson/"
"""Where, from the repository's root, a stored page's ``literalinclude`` may read."""
_TOKENS = frozenset(
    f"{name}_{end}"
    for name in (
        "paragraph",
        "heading",
        "bullet_list",
        "ordered_list",
        "list_item",
        "strong",
        "em",
        "s",
        "blockquote",
        "table",
        "thead",
        "tbody",
        "tr",
        "th",
        "td",
        "dl",
        "dt",
        "dd",
        "link",
        "footnote",
        "footnote_block",
        "footnote_reference",
    )
    for end in ("open", "close")
) | frozenset([
    "inline", "text", "softbreak", "hardbreak", "code_inline", "code_block", "hr",
    "myst_target", "myst_line_comment", "math_inline", "math_block", "math_block_label",
    "math_inline_double", "amsmath", "footnote_ref", "footnote_anchor", "myst_block_break"
])  # fmt: skip
"""The markdown-it tokens of plain MyST: text, lists, tables, links, maths, code."""
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def _link_ok(href: str) -> bool:
    """Whether a link goes to a web address, or to a page or place of the book."""
    if re.search(r"[\s<>\"'`\\]", href):
        return False
    scheme = _SCHEME.match(href)
    return scheme is None or scheme.group().lower() in ("http:", "https:")


def _math_problems(latex: str) -> list[str]:
    from amp_book.mathml import mathml_problems

    return [f"maths {latex.strip()[:40]!r}: {p}" for p in mathml_problems(latex)]


def markdown_problems(text: str, docname: str = "") -> list[str]:
    r"""What in the MyST markdown ``text`` (of page ``docname``) is not plain MyST or one of
    the book's own directives and roles: raw HTML, a directive or role that passes markup
    through or reads a file, a link that is not to a page or a web address.

    A directive's argument, options and body are checked apart, as MyST reads them.

    >>> markdown_problems("A {term}`word <glossary entry>` and `<code>`, $x^2$.")
    []
    >>> markdown_problems("Text <script>alert(1)</script>")
    ["raw HTML '<script>'", "raw HTML '</script>'"]
    >>> markdown_problems("```{raw} html\n<b>x</b>\n```")
    ['a {raw} directive']
    """
    from amp_book.pages import markdown_parser

    env: dict[str, Any] = {}
    problems = _token_problems(markdown_parser().parse(text, env), docname)
    for label, reference in env.get("references", {}).items():
        if not _link_ok(href := str(reference.get("href", ""))):
            problems.append(f"a link [{label}] to {href[:60]!r}")
    return problems


def _inline_problems(text: str, docname: str) -> list[str]:
    """What in ``text``, read as MyST reads a directive's argument or option (inline), is not
    plain MyST or the book's own roles."""
    from amp_book.pages import markdown_parser

    return _token_problems(markdown_parser().parseInline(text, {}), docname)


LITERALINCLUDE_OPTIONS = frozenset(
    ["language", "lines", "start-after", "end-before", "start-at", "end-at", "pyobject",
     "caption", "emphasize-lines", "linenos", "lineno-match", "dedent", "name", "class"]
)  # fmt: skip
"""The options a stored page's ``literalinclude`` may take (not ``diff``, which reads a
second file of any path)."""
_OPTION = re.compile(r":([\w-]+):(.*)")


def _directive_problems(name: str, argument: str, content: str, docname: str) -> list[str]:
    """What is wrong with directive ``name``: its argument and options read inline, its body
    as markdown."""
    problems = _inline_problems(argument, docname)
    lines = content.splitlines()
    if lines and lines[0].strip() == "---":
        return [*problems, f"a {{{name}}} directive with a block of options (---)"]
    while lines and lines[0].startswith(":"):
        option = _OPTION.fullmatch(lines.pop(0))
        if option is None:
            problems.append(f"a {{{name}}} directive option that is not one line :name: value")
            continue
        key, value = option.groups()
        if name == "literalinclude" and key not in LITERALINCLUDE_OPTIONS:
            problems.append(f"a literalinclude option {key!r}")
        problems += _inline_problems(value.strip(), docname)
    if name in ("math", "glue:math"):
        return problems + _math_problems("\n".join(lines))
    return problems + markdown_problems("\n".join(lines), docname)


def _token_problems(tokens: list[Any], docname: str) -> list[str]:
    problems = []
    for token in tokens:
        for t in [token, *(token.children or [])]:
            if t.type in ("html_block", "html_inline"):
                problems.append(f"raw HTML {t.content.strip()[:60]!r}")
            elif t.type in ("fence", "colon_fence"):
                info = t.info.strip()
                if not info.startswith("{"):
                    continue  # a code block: shown, never run
                name, _, argument = info[1:].partition("}")
                if name not in DIRECTIVES:
                    problems.append(f"a {{{name}}} directive")
                    continue
                if name == "literalinclude" and not _inside_source(argument.strip(), docname):
                    problems.append(f"a literalinclude of {argument.strip()[:60]!r}")
                problems += _directive_problems(name, argument, t.content, docname)
            elif t.type == "myst_role":
                name = t.meta.get("name", "")
                if name not in ROLES:
                    problems.append(f"a {{{name}}} role")
                elif name == "math":
                    problems += _math_problems(t.content)
            elif t.type == "link_open":
                if not _link_ok(href := str(t.attrs.get("href", ""))):
                    problems.append(f"a link to {href[:60]!r}")
            elif t.type in ("math_inline", "math_block", "math_inline_double", "amsmath"):
                problems += _math_problems(t.content)
            elif t.type not in _TOKENS:
                problems.append(f"a {t.type} ({(t.content or t.markup)[:40]!r})")
    return problems


def _inside_source(argument: str, docname: str) -> bool:
    """Whether a literalinclude of ``argument`` on page ``docname`` reads the lesson's source."""
    import posixpath

    if not argument or argument.startswith("/"):
        return False
    folder = posixpath.dirname(f"docs/{docname}") if docname else "docs"
    path = posixpath.normpath(posixpath.join(folder, argument))
    return path.startswith(INCLUDE_ROOT) and ".." not in path.split("/")


def _text(value: Any) -> str:
    """A notebook's multi-line string: a string, or a list of them."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "".join(value)
    raise ValueError(f"a text that is {type(value).__name__}, not a string or list of them")


NOTEBOOK_FIELDS = frozenset(["cells", "metadata", "nbformat", "nbformat_minor"])
"""A stored notebook's fields: nbformat 4's (an older format's ``worksheets`` would be read
as cells no check has seen)."""
CELL_FIELDS = frozenset(["cell_type", "metadata", "source", "id", "execution_count", "outputs"])
OUTPUT_FIELDS = frozenset(
    ["output_type", "data", "metadata", "execution_count", "name", "text", "ename", "evalue",
     "traceback"]
)  # fmt: skip
NOTEBOOK_METADATA = {"jupytext", "kernelspec", "language_info"}
"""What a stored notebook's metadata may name: not ``mystnb`` or ``myst``, which would set
the build's configuration (execution among it) for the page."""
CELL_METADATA = {"tags", "mystnb"}
FIGURE_METADATA = {"figure": {"caption", "name"}, "image": {"alt", "width", "classes"}}
"""A code cell's ``mystnb`` metadata: the caption (MyST, checked) and alt text of its figure."""
_TAG = re.compile(r"[\w-]+")
OUTPUT_METADATA = {"scrapbook", "needs_background", *IMAGE_TYPES, "image/svg+xml"}


def _plain(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` is JSON of strings, numbers and flags, a few levels deep."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return True
    if depth >= 3:
        return False
    if isinstance(value, list):
        return all(_plain(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v, depth + 1) for k, v in value.items())
    return False


def metadata_problems(notebook: dict[str, Any], docname: str = "") -> list[str]:
    """What in the metadata of a stored notebook, its cells or outputs is not what the
    recorder writes (see :data:`NOTEBOOK_METADATA`)."""
    problems = []
    meta = notebook.get("metadata", {})
    if not isinstance(meta, dict) or not _plain(meta):
        return ["notebook metadata that is not an object of plain values"]
    problems += [f"notebook metadata {k!r}" for k in meta if k not in NOTEBOOK_METADATA]
    for number, cell in enumerate(notebook.get("cells", []), 1):
        if not isinstance(cell, dict):
            continue
        where = f"cell {number}"
        cell_meta = cell.get("metadata", {})
        if not isinstance(cell_meta, dict) or not _plain(cell_meta):
            problems.append(f"{where}: metadata that is not an object of plain values")
            continue
        allowed = CELL_METADATA if cell.get("cell_type") == "code" else set()
        problems += [f"{where}: metadata {k!r}" for k in cell_meta if k not in allowed]
        tags = cell_meta.get("tags", [])
        if not (
            isinstance(tags, list) and all(isinstance(t, str) and _TAG.fullmatch(t) for t in tags)
        ):
            problems.append(f"{where}: tags that are not a list of names")
        mystnb = cell_meta.get("mystnb", {})
        if not isinstance(mystnb, dict):
            problems.append(f"{where}: mystnb metadata that is not an object")
            mystnb = {}
        for key, value in mystnb.items():
            if key not in FIGURE_METADATA or not isinstance(value, dict):
                problems.append(f"{where}: mystnb metadata {key!r}")
                continue
            problems += [
                f"{where}: mystnb.{key} {k!r}" for k in value if k not in FIGURE_METADATA[key]
            ]
            for k, v in value.items():
                if not isinstance(v, (str, list)):
                    problems.append(f"{where}: mystnb.{key}.{k} that is not text")
                elif k == "caption":
                    problems += [f"{where}: caption: {p}" for p in markdown_problems(_text(v))]
                elif k != "alt" and "<" in str(v):
                    problems.append(f"{where}: mystnb.{key}.{k} {str(v)[:40]!r}")
        for output in cell.get("outputs", []) if isinstance(cell.get("outputs"), list) else []:
            out_meta = output.get("metadata", {}) if isinstance(output, dict) else {}
            if not isinstance(out_meta, dict) or not _plain(out_meta):
                problems.append(f"{where}: output metadata that is not an object")
                continue
            problems += [
                f"{where}: output metadata {k!r}" for k in out_meta if k not in OUTPUT_METADATA
            ]
            scrapbook = out_meta.get("scrapbook", {})
            if not isinstance(scrapbook, dict) or not all(
                isinstance(v, str) for v in scrapbook.values()
            ):
                problems.append(f"{where}: scrapbook metadata that is not names")
    return problems


def _output_problems(output: Any) -> Iterator[str]:
    if not isinstance(output, dict):
        yield "an output that is not an object"
        return
    yield from (f"an output field {k!r}" for k in output if k not in OUTPUT_FIELDS)
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
            elif inner in MARKUP_TYPES:
                yield from (f"{p} in a {mime} output" for p in markup_problems(_text(value)))
            else:
                yield f"an output of type {mime} (the book's pages print none)"
    else:
        yield f"an output of type {kind!r}"


def notebook_problems(notebook: Any, docname: str = "") -> list[str]:
    """Everything in a stored notebook (of page ``docname``) the book would not show
    (``[]``: it may be shown): its cells' markdown (:func:`markdown_problems`), their
    outputs, and the metadata of all three (:func:`metadata_problems`).

    >>> cell = {"cell_type": "code", "source": "x", "outputs": [
    ...     {"output_type": "display_data", "data": {"application/javascript": "alert(1)"}}]}
    >>> print(*notebook_problems({"cells": [cell]}))
    cell 1: an output of type application/javascript (the book's pages print none)
    """
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        return ["not a notebook (an object with a list of cells)"]
    problems = []
    if notebook.get("nbformat", 4) != 4:
        problems.append(f"a notebook of format {notebook.get('nbformat')!r}, not 4")
    problems += [f"a notebook field {k!r}" for k in notebook if k not in NOTEBOOK_FIELDS]
    for number, cell in enumerate(notebook["cells"], 1):
        kind = cell.get("cell_type") if isinstance(cell, dict) else None
        if isinstance(cell, dict):
            problems += [f"cell {number}: a field {k!r}" for k in cell if k not in CELL_FIELDS]
        try:
            if kind == "markdown":
                found = markdown_problems(_text(cell.get("source", "")), docname)
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
    return problems + metadata_problems(notebook, docname)


def shown(notebook: dict[str, Any]) -> dict[str, Any]:
    """A checked notebook (:func:`notebook_problems` found nothing) as the edition's build
    gets it: nbformat 4, its fields alone, its HTML and SVG outputs written again from what
    was checked (:func:`clean_markup`)."""
    import copy

    cells = []
    for cell in notebook["cells"]:
        cell = {k: copy.deepcopy(v) for k, v in cell.items() if k in CELL_FIELDS}
        if "outputs" in cell:
            cell["outputs"] = [
                {k: v for k, v in output.items() if k in OUTPUT_FIELDS}
                for output in cell["outputs"]
            ]
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            for mime in list(data):
                if mime.removeprefix(GLUE_PREFIX) in MARKUP_TYPES:
                    data[mime] = clean_markup(_text(data[mime]))[0]
        cells.append(cell)
    minor = notebook.get("nbformat_minor")
    return {
        "cells": cells,
        "metadata": copy.deepcopy(notebook.get("metadata", {})),
        "nbformat": 4,
        "nbformat_minor": minor if isinstance(minor, int) else 5,
    }


def stored_path(folder: Path, file: Any) -> Path:
    """The path of a page's stored notebook, ``file`` as the manifest names it, if it lies
    inside ``folder`` and is named as the recorder names it; raises ValueError otherwise."""
    if not isinstance(file, str) or not file.endswith(NOTEBOOK_SUFFIX):
        raise ValueError(f"its file must be a path ending {NOTEBOOK_SUFFIX}, got {file!r}")
    relative = Path(file)
    if relative.is_absolute() or ".." in relative.parts:
        raise ValueError(f"its file must be a path inside the edition's folder, got {file!r}")
    if len(file) > 255 or any(len(part) > 200 for part in relative.parts):
        raise ValueError(f"its file must be a short path, got {file[:60]!r}...")
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
    except RecursionError:
        raise ValueError("not a notebook's JSON (nested past the recursion limit)") from None


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
        what = "a figure" if "<svg" in text else "HTML"
        return [*lines, f"[{what}: {len(text)} characters, sha256 {_sha(text)}]"]
    if inner in IMAGE_TYPES or inner == "image/svg+xml":
        return [f"[{inner}: {len(text)} characters, sha256 {_sha(text)}]"]
    return text.rstrip("\n").splitlines()


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def summary(notebook: dict[str, Any]) -> str:
    """A stored notebook as plain text, cell by cell, for a reviewer: its metadata, its
    markdown, each code cell's code and metadata, and its outputs (an error's traceback too).

    HTML reads as its text (a table's cells joined by ``|``) and its digest, a figure as its
    size and digest, a value glued for the prose as ``glue <name>: <text>``.

    >>> nb = {"cells": [{"cell_type": "markdown", "source": "# A page"},
    ...     {"cell_type": "code", "source": "print(1)\\n", "outputs": [
    ...     {"output_type": "stream", "name": "stdout", "text": "1\\n"}]}]}
    >>> print(summary(nb), end="")
    metadata {}
    | # A page
    [1]
      > print(1)
        1
    """
    lines = [f"metadata {_json(notebook.get('metadata', {}))}"]
    number = 0
    for cell in notebook["cells"]:
        if cell.get("cell_type") != "code":
            lines += [f"| {ln}".rstrip() for ln in _text(cell.get("source", "")).splitlines()]
            continue
        number += 1
        meta = cell.get("metadata") or {}
        lines.append(f"[{number}]" + (f" {_json(meta)}" if meta else ""))
        lines += [f"  > {ln}".rstrip() for ln in _text(cell.get("source", "")).splitlines()]
        for output in cell.get("outputs", []):
            kind = output.get("output_type")
            if kind == "stream":
                shown = _text(output.get("text", "")).rstrip("\n").splitlines()
            elif kind == "error":
                shown = [f"{output.get('ename')}: {output.get('evalue')}"]
                shown += [ln for frame in output.get("traceback", []) for ln in frame.splitlines()]
            else:
                data = output.get("data", {})
                meta = output.get("metadata") or {}
                name = (meta.get("scrapbook") or {}).get("name")
                preferred = [m for m in data if m.endswith(("text/html", "text/markdown"))]
                chosen = preferred[:1] or [m for m in data if m.endswith("text/plain")][:1]
                chosen = chosen or sorted(data)[:1]
                shown = [s for m in chosen for s in _summarised(m, data[m])]
                shown += [f"[{m}: {len(_text(data[m]))} characters, sha256 {_sha(_text(data[m]))}]"
                          for m in sorted(data) if m not in chosen]  # fmt: skip
                if name:
                    shown = [f"glue {name}: {shown[0] if shown else ''}", *shown[1:]]
                if rest := {k: v for k, v in meta.items() if k != "scrapbook"}:
                    shown.append(f"metadata {_json(rest)}")
            lines += [f"    {s}" if s else "" for s in shown]
    return "\n".join(lines) + "\n"


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)
