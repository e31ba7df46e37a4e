"""The whole book on one page (``print.html``) and as one PDF (``amp-lesson.pdf``).

When the HTML is written, the pages of the reading path (the landing page,
the chapter, the pages beyond it, the glossary and the corrections; not the
API reference or the authors' guide) are put one after another into
``print.html``: each page's article, its ids prefixed with the page's name
so that none clashes, its links to another page of the path turned into links
within the document and every other link into one to the hosted book, with a
table of contents first and the answers of the self-checks open. That page is
the book for any browser's "Print"; it needs no script.

Chromium then prints it, with JavaScript off (so the playgrounds show their
worked examples), to ``amp-lesson.pdf``: A4, a bookmark per heading, page
numbers in the footer. Which Chromium: ``CHROMIUM_PATH`` (a path, or
``playwright`` for Playwright's own), else one on ``PATH``
(:func:`find_chromium`); it is driven through Playwright. ``amp_lesson_pdf``
says whether to print: ``"auto"`` (default) prints when both are at hand,
``"yes"`` requires them, ``"no"`` never prints. The landing page's
``{book-downloads}`` links to the PDF when the build prints one, and to the
one-page book always, so a build without Chromium (Read the Docs) links to
nothing that is missing (and a PDF an earlier build left is removed). The
PDF is printed again only when ``print.html`` or a style sheet it links has
changed (:func:`print_key`).
"""

from __future__ import annotations

import html
import os
import posixpath
import re
import shutil
import time
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.errors import SphinxError
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

from amp_book.config import book_config
from amp_book.theme import section_of

logger = logging.getLogger(__name__)

PRINT_PAGE = "print.html"
PDF = "amp-lesson.pdf"
CHROMIUM_ENV = "CHROMIUM_PATH"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
PDF_CHOICES = ("auto", "yes", "no")

_ARTICLE = re.compile(r'<article class="bd-article"[^>]*>(.*)</article>', re.DOTALL)
_ID = re.compile(r'\bid="([^"]+)"')
# Attributes that name ids, one or a list of them.
_ID_REFS = re.compile(
    r'(?<![\w-])(aria-labelledby|aria-describedby|aria-controls|for|headers)="([^"]*)"'
)
_HREF = re.compile(r'\b(href|src)="([^"]*)"')
_LINK = re.compile(r"<link\b[^>]*>")
_HEAD = re.compile(r"<head>(.*?)</head>", re.DOTALL)
_SCRIPT = re.compile(r"<script\b.*?</script>\s*", re.DOTALL)


class PrintError(SphinxError):
    """The book could not be printed although it was asked to be, or links to the PDF."""

    category = "Printing the book"


# -- where Chromium is -----------------------------------------------------------------


def find_chromium() -> str | None:
    """The Chromium to print with (and the tests to drive), or ``None`` when there is none.

    ``CHROMIUM_PATH`` names it: ``playwright`` for the Chromium Playwright
    installs for itself, or a path; unset, the first of ``chromium``,
    ``chromium-browser`` and ``google-chrome`` on ``PATH``.
    """
    setting = os.environ.get(CHROMIUM_ENV, "").strip()
    if setting == "playwright":
        try:
            from playwright.sync_api import sync_playwright
        except ImportError:
            return None
        with sync_playwright() as p:
            path = p.chromium.executable_path
        return path if path and os.path.exists(path) else None
    if setting:
        return setting if os.path.exists(setting) else None
    return next((path for name in CHROMIUM_NAMES if (path := shutil.which(name))), None)


def can_print() -> bool:
    """Whether this machine has what printing needs: Playwright and a Chromium."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return False
    return find_chromium() is not None


# -- the reading path -------------------------------------------------------------------


def reading_path(
    relations: dict[str, list[str | None]], root: str, sections: list[str]
) -> list[str]:
    """The pages a reader walks with "Next" from ``root``, up to the first of a reference section.

    >>> relations = {"index": [None, None, "a"], "a": ["index", "index", "api/x"],
    ...              "api/x": ["index", "a", None]}
    >>> reading_path(relations, "index", ["api/*"])
    ['index', 'a']
    """
    path, page = [], root
    while page is not None and page not in path and section_of(page, sections) is None:
        path.append(page)
        page = (relations.get(page) or [None, None, None])[2]
    return path


def _slug(docname: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", docname).strip("-")


_EDITION_LINE = re.compile(r'<span class="amp-edition-line">.*?</span>(?=</p>)', re.DOTALL)

# Boxes that scroll sideways when what they hold is wider than the page: a table (in prose or
# in a cell's output) and a displayed equation. (Code wraps instead: amp_lesson.css.)
_SCROLLER = re.compile(
    r'<div class="(?P<cls>pst-scrollable-table-container|output text_html|math notranslate nohighlight)">'
)
_DIV_TAG = re.compile(r"<div\b|</div>")


def _element_end(text: str, start: int) -> int:
    """The end of the ``<div>`` element that opens at ``start`` (or the text's end)."""
    depth = 0
    for tag in _DIV_TAG.finditer(text, start):
        depth += 1 if tag.group(0) != "</div>" else -1
        if depth == 0:
            return tag.end()
    return len(text)


def focusable_scrollers(body: str, title: str) -> str:
    """``body`` with each box that may scroll sideways made a region a keyboard can reach.

    print.html runs no script, so nothing gives its scrolling boxes the tab stop the
    theme's script gives them on the book's pages: a reader with a keyboard could not
    scroll them. Each table's box (in the prose, or a cell's output that holds one) and
    each displayed equation gets ``tabindex="0"``, ``role="region"`` and a name: what it
    is, its number on the page and the page's title.

    >>> out = focusable_scrollers('<div class="output text_html"><table></table></div>'
    ...                           '<div class="output text_html"><p>x</p></div>', "GradScaler")
    >>> print(out)  # doctest: +NORMALIZE_WHITESPACE
    <div class="output text_html" tabindex="0" role="region"
    aria-label="Table 1 of “GradScaler”"><table></table></div><div
    class="output text_html"><p>x</p></div>
    """
    counts = {"Table": 0, "Equation": 0}
    pieces, at = [], 0
    for match in _SCROLLER.finditer(body):
        kind = "Equation" if match.group("cls").startswith("math") else "Table"
        if match.group("cls") == "output text_html":
            end = _element_end(body, match.start())
            if "<table" not in body[match.end() : end]:
                continue  # an output without a table (a figure, a line of text) fits the page
        counts[kind] += 1
        name = html.escape(f"{kind} {counts[kind]} of \u201c{title}\u201d", quote=True)
        pieces.append(body[at : match.end() - 1])
        pieces.append(f' tabindex="0" role="region" aria-label="{name}">')
        at = match.end()
    pieces.append(body[at:])
    return "".join(pieces)


def page_section(
    docname: str, page_html: str, in_book: set[str], site_url: str, title: str = ""
) -> str:
    """One page's article, made to live in ``print.html`` at the site's root.

    Its ids get the page's slug as a prefix; a link to a page in ``in_book``
    becomes a link within the document, any other link to the site one to
    ``site_url``; images and downloads are found from the root; a box that
    scrolls sideways is a named region a keyboard reaches
    (:func:`focusable_scrollers`, named after ``title``, by default the docname).

    >>> page = ('<article class="bd-article"><h1 id="t">T</h1><a href="#t">x</a>'
    ...         '<a href="../b.html#s">y</a><a href="c.html">z</a></article>')
    >>> out = page_section("p/a", page, {"b", "p/a"}, "https://book.example")
    >>> re.findall(r'(?:id|href)="([^"]+)"', out)
    ['p-a', 'p-a--t', '#p-a--t', '#b--s', 'https://book.example/p/c.html']
    """
    match = _ARTICLE.search(page_html)
    if match is None:
        raise ValueError(f'{docname}: no <article class="bd-article"> in its HTML')
    body = _SCRIPT.sub("", match.group(1))  # the page on paper runs nothing
    body = _EDITION_LINE.sub("", body)  # one edition on paper: this build's
    slug = _slug(docname)
    body = _ID.sub(lambda m: f'id="{slug}--{m.group(1)}"', body)
    body = _ID_REFS.sub(
        lambda m: f'{m.group(1)}="' + " ".join(f"{slug}--{i}" for i in m.group(2).split()) + '"',
        body,
    )
    folder = posixpath.dirname(docname)

    def link(m: re.Match[str]) -> str:
        attribute, target = m.group(1), html.unescape(m.group(2))
        if target.startswith("#"):
            return f'{attribute}="#{slug}--{html.escape(target[1:])}"'
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("//"):
            return m.group(0)  # another site, mail, data:
        path, _, fragment = target.partition("#")
        resolved = posixpath.normpath(posixpath.join(folder, path)) if path else docname
        if attribute == "href" and resolved.endswith(".html"):
            doc = resolved.removesuffix(".html")
            if doc in in_book:
                anchor = f"{_slug(doc)}--{fragment}" if fragment else _slug(doc)
                return f'href="#{html.escape(anchor)}"'
            page = f"{site_url}/{resolved}" + (f"#{fragment}" if fragment else "")
            return f'href="{html.escape(page)}"'
        if attribute == "href":  # a download (a zip, a notebook): from the hosted book
            return f'href="{html.escape(f"{site_url}/{resolved}")}"'
        return f'{attribute}="{html.escape(resolved)}"'

    body = _HREF.sub(link, body)
    body = re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{slug}--{m.group(1)})", body)
    # A printed self-check shows its answer; a collapsed cell, its code.
    body = re.sub(r"<details\b(?![^>]*\bopen\b)", "<details open", body)
    body = focusable_scrollers(body, title or docname)
    return f'<section class="amp-print-page" id="{slug}">{body.strip()}</section>'


_STYLESHEET = re.compile(r'<link\b(?=[^>]*\brel="stylesheet")[^>]*\bhref="([^"?]+)[^>]*>')


def union_head(pages: list[tuple[str, str, str]]) -> str:
    """The first page's ``<head>`` content, with every style sheet any of the pages links.

    A page links the playgrounds' and the self-checks' styles only when it holds one; the
    page that holds them all needs them all. Each page lies at the site's root or one folder
    down, and ``print.html`` at its root, so a sheet's ``../`` is dropped.

    >>> a = ("index", "", '<head><link rel="stylesheet" href="_static/a.css?v=1" /></head>')
    >>> b = ("ch/b", "", '<head><link rel="stylesheet" href="../_static/b.css" /></head>')
    >>> print(union_head([a, b]))
    <link rel="stylesheet" href="_static/a.css?v=1" />
    <link rel="stylesheet" href="_static/b.css" />
    """
    first = _HEAD.search(pages[0][2])
    # The page's own links (the next page, the search page, scripts to preload) go: the
    # book on one page has no next page and runs no script.
    head = _LINK.sub(
        lambda m: m.group(0) if 'rel="stylesheet"' in m.group(0) or "icon" in m.group(0) else "",
        first.group(1) if first else "",
    )
    have = set(_STYLESHEET.findall(head))
    for _, _, text in pages[1:]:
        found = _HEAD.search(text)
        for link in _STYLESHEET.finditer(found.group(1) if found else ""):
            href = link.group(1).removeprefix("../")
            if href not in have:
                have.add(href)
                head += "\n" + link.group(0).replace(link.group(1), href, 1)
    return head


def print_page(
    pages: list[tuple[str, str, str]], head: str, site_url: str, title: str, licence: str = ""
) -> str:
    """``print.html``: the pages ``(docname, title, html)`` in order, a table of contents first.

    ``head`` is the landing page's ``<head>`` content (its style sheets;
    scripts are dropped), ``title`` the book's, ``licence`` the markup of the licence line
    the cover carries (the theme's footer line, ``extra_footer``).
    """
    in_book = {doc for doc, _, _ in pages}
    contents = "".join(
        f'<li><a href="#{_slug(doc)}">{html.escape(page_title)}</a></li>'
        for doc, page_title, _ in pages
    )
    sections = "\n".join(
        page_section(doc, text, in_book, site_url, page_title) for doc, page_title, text in pages
    )
    head = _SCRIPT.sub("", head)
    head = re.sub(
        r"<title>.*?</title>", f"<title>{html.escape(title)}</title>", head, flags=re.DOTALL
    )
    return (
        '<!DOCTYPE html>\n<html lang="en" data-theme="light">\n<head>'
        + head
        # Not the theme's flex layout, whose boxes widen to their widest line: one article.
        + '</head>\n<body class="amp-print">\n<main class="amp-print-main">'
        + '<article class="bd-article amp-print-book">'
        + f'<header class="amp-print-cover"><h1>{html.escape(title)}</h1>'
        + f'<p>The whole book, as read at <a href="{html.escape(site_url)}/index.html">'
        + f"{html.escape(site_url)}</a>, on one page.</p>"
        + (f'<div class="amp-print-licence">{licence}</div>' if licence else "")
        + '<nav class="amp-print-contents" aria-label="Contents"><h2>Contents</h2>'
        + f"<ol>{contents}</ol></nav></header>\n"
        + sections
        + "\n</article></main>\n</body>\n</html>\n"
    )


# -- Sphinx ---------------------------------------------------------------------------


class book_downloads(nodes.General, nodes.Element):
    """Where ``{book-downloads}`` stands; its links are written with the page, when the
    build knows whether it prints the PDF."""


class BookDownloads(SphinxDirective):
    """``{book-downloads}``: links to the PDF (when this build prints one) and the one-page book."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        return [book_downloads()]


def downloads_html(pdf: bool) -> str:
    """The paragraph ``{book-downloads}`` writes.

    >>> "amp-lesson.pdf" in downloads_html(True), "amp-lesson.pdf" in downloads_html(False)
    (True, False)
    """
    links = []
    if pdf:
        links.append(f'<a href="{PDF}" download>the whole book as one PDF</a> (A4)')
    links.append(
        f'<a href="{PRINT_PAGE}">the whole book on one page</a>, to read offline or print '
        "from a browser"
    )
    return f'<p class="amp-book-downloads">To read it offline: {"; ".join(links)}.</p>'


def _visit_downloads(self: Any, node: nodes.Element) -> None:
    from amp_book import edition

    app = self.builder.app
    text = downloads_html(edition.live_pdf(app))
    if edition.in_edition(app):  # a stored edition links to the live book's downloads
        docname = self.builder.current_docname
        for name in (PDF, PRINT_PAGE):
            text = text.replace(f'href="{name}"', f'href="{edition.live_url(app, docname, name)}"')
    self.body.append(text)
    raise nodes.SkipNode


def _decide(app: Sphinx, config: Any) -> None:
    choice = str(config.amp_lesson_pdf).strip().lower()
    if choice not in PDF_CHOICES:
        raise PrintError(f"amp_lesson_pdf must be one of {', '.join(PDF_CHOICES)}, got {choice!r}")
    able = choice != "no" and can_print()
    if choice == "yes" and not able:
        raise PrintError(
            "amp_lesson_pdf = 'yes' but this machine cannot print the book: it needs "
            f"Playwright and a Chromium (install Chromium, or set {CHROMIUM_ENV})"
        )
    config.amp_lesson_pdf_printed = able


def _site_url(app: Sphinx) -> str:
    from amp_book import urls

    return urls.documentation_url().rstrip("/")


def _write(app: Sphinx, exception: Exception | None) -> None:
    from amp_book.edition import in_edition

    if exception is not None or app.builder.format != "html" or in_edition(app):
        return
    from amp_book import in_preview

    if in_preview(app):  # the print book waits for a whole build
        return
    outdir = Path(app.outdir)
    relations = getattr(app.builder, "relations", {}) or {}
    docs = reading_path(relations, app.config.root_doc, book_config(app).reference_pages)
    files = [outdir / f"{doc}.html" for doc in docs]
    if not all(f.is_file() for f in files):
        return
    pages = []
    for doc, path in zip(docs, files, strict=True):
        text = path.read_text(encoding="utf-8")
        title = app.env.titles[doc].astext() if doc in app.env.titles else doc
        pages.append((doc, title, text))
    licence = (app.config.html_theme_options or {}).get("extra_footer", "")
    book = print_page(pages, union_head(pages), _site_url(app), app.config.html_title, licence)
    target = outdir / PRINT_PAGE
    if not target.is_file() or target.read_text(encoding="utf-8") != book:
        target.write_text(book, encoding="utf-8")
    pdf = outdir / PDF
    if not app.config.amp_lesson_pdf_printed:
        pdf.unlink(missing_ok=True)  # one an earlier build printed is not this build's book
        return
    key = print_key(target)
    key_file = Path(app.doctreedir) / "amp-lesson-pdf.key"  # beside the build, not in the site
    if pdf.is_file() and key_file.is_file() and key_file.read_text() == key:
        return  # printed from this very page, with these very styles, before
    start = time.perf_counter()
    try:
        pages_printed = print_pdf(target, pdf)
    except Exception as error:
        # The landing page links to the PDF: a build that cannot print it must not pass.
        raise PrintError(f"printing {PRINT_PAGE} to {PDF} failed: {error}") from error
    key_file.write_text(key)
    logger.info("printed %s: %d pages in %.1f s", PDF, pages_printed, time.perf_counter() - start)


def print_key(page: Path) -> str:
    """What the PDF printed from ``page`` depends on: the page and the style sheets it links."""
    import hashlib

    text = page.read_text(encoding="utf-8")
    digest = hashlib.sha256(text.encode())
    for href in _STYLESHEET.findall(text):
        sheet = page.parent / href
        if sheet.is_file():
            digest.update(sheet.read_bytes())
    return digest.hexdigest()


FOOTER = (
    '<div style="font-size:8px;width:100%;text-align:center;color:#555">'
    '<span class="pageNumber"></span> / <span class="totalPages"></span></div>'
)


def print_pdf(page: Path, pdf: Path, chromium: str | None = None) -> int:
    """Print ``page`` to ``pdf`` with Chromium, JavaScript off; return the number of pages.

    The PDF is written beside ``pdf`` first and put in its place whole; a print that
    fails leaves neither it nor a part of it.
    """
    from playwright.sync_api import sync_playwright

    executable = chromium or find_chromium()
    if executable is None:
        raise PrintError(f"no Chromium found (install one, or set {CHROMIUM_ENV})")
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--no-first-run", "--disable-sync"]  # fmt: skip
    tmp = pdf.with_suffix(f".{os.getpid()}.tmp")
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=executable, args=args)
            try:
                context = browser.new_context(java_script_enabled=False)
                tab = context.new_page()
                tab.goto(page.resolve().as_uri(), wait_until="load")
                tab.emulate_media(media="print")
                data = tab.pdf(
                    path=str(tmp),
                    format="A4",
                    margin={"top": "18mm", "bottom": "18mm", "left": "16mm", "right": "16mm"},
                    print_background=True,
                    display_header_footer=True,
                    header_template="<span></span>",
                    footer_template=FOOTER,
                    outline=True,
                    tagged=True,  # a screen reader reads its headings, lists and tables
                )
            finally:
                browser.close()
        os.replace(tmp, pdf)
    finally:
        tmp.unlink(missing_ok=True)
    return len(re.findall(rb"/Type\s*/Page\b", data))


def _skip(self: Any, node: nodes.Element) -> None:
    raise nodes.SkipNode


def setup(app: Sphinx) -> dict[str, bool]:
    app.add_directive("book-downloads", BookDownloads)
    app.add_node(
        book_downloads,
        html=(_visit_downloads, None),
        **{fmt: (_skip, None) for fmt in ("latex", "text", "man", "texinfo")},
    )
    app.connect("config-inited", _decide)
    # After the other build-finished handlers have written the pages' last files.
    app.connect("build-finished", _write, priority=950)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


__all__ = [
    "PDF",
    "PRINT_PAGE",
    "BookDownloads",
    "PrintError",
    "book_downloads",
    "can_print",
    "downloads_html",
    "find_chromium",
    "focusable_scrollers",
    "page_section",
    "print_key",
    "print_page",
    "print_pdf",
    "reading_path",
    "setup",
    "union_head",
]
