"""What the book adds to, and mends in, sphinx-book-theme.

- Templates in ``templates/`` (searched before the theme's): the page loads
  no FontAwesome script (the theme's CSS already draws every icon from its
  vendored web font), no search index in its head (search.html loads it),
  and the search button's accessible name contains the words it shows.
- MyST-NB's "Show code cell source" toggle is named by its visible text, not
  by an ``aria-label`` that says something else.
- The reading path keeps to itself: the API reference and the pages for
  authors (``amp_lesson_reference_pages``) are sections of their own, and no
  "Previous" or "Next" link crosses between them and the learner's pages
  (see :func:`section_of`).
- With JavaScript off the page keeps the theme's colours and the code its
  syntax colours (see :func:`no_script_css`).
- A favicon, so no browser asks for a missing ``/favicon.ico``.
- Maths is set in Noto Sans Math, cut down at build time to the characters
  the book's maths uses (see :func:`write_math_font`).
- A figure a cell drew (the SVG of :func:`amp_lesson.plotting.figure_svg`) is
  set into the page itself rather than linked as an image, so that its
  colours follow the theme (see :func:`_inline_figures`); one without alt
  text is a warning, so ``-W`` fails the build.
"""

from __future__ import annotations

import fnmatch
import hashlib
import html
import re
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.util import logging

from amp_book import add_static_path
from amp_book.config import book_config

logger = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
TEMPLATES_DIR = HERE / "templates"
FONTS_DIR = HERE / "fonts"
MATH_FONT_SOURCE = FONTS_DIR / "NotoSansMath-Regular.woff"
MATH_FONT_LICENSE = FONTS_DIR / "OFL.txt"
MATH_FONT_OUT = "fonts/amp-lesson-math.woff"
NO_SCRIPT_CSS = "amp_lesson_noscript.css"
SITE_SCRIPT = "amp_lesson.js"
FAVICON = "favicon.svg"


# -- templates ------------------------------------------------------------------


def _add_templates_and_favicon(app: Sphinx, config: Config) -> None:
    if str(TEMPLATES_DIR) not in map(str, config.templates_path):
        config.templates_path.append(str(TEMPLATES_DIR))
    if not config.html_favicon:
        # Without one the browser asks for /favicon.ico and logs a 404.
        config.html_favicon = str(HERE / "static" / FAVICON)


# -- MyST-NB's hide-input toggle ---------------------------------------------------


def _hidden_cell_summary_named_by_its_text(app: Sphinx) -> None:
    """Drop the ``aria-label`` MyST-NB puts on a hidden cell's ``<summary>``.

    The label ("Toggle hidden content") differs from the words the reader
    sees ("Show code cell source"), which fails WCAG 2.5.3 (label in name).
    Without it the summary is named by its visible text.
    """
    from myst_nb.sphinx_ import HideCodeCellNode, depart_HideCellInput, visit_HideCellInput

    def visit(self: Any, node: nodes.Element) -> None:
        start = len(self.body)
        visit_HideCellInput(self, node)
        self.body[start:] = [
            re.sub(r"<summary aria-label=\"[^\"]*\">", "<summary>", part)
            for part in self.body[start:]
        ]

    app.add_node(HideCodeCellNode, override=True, html=(visit, depart_HideCellInput))


# -- figures ---------------------------------------------------------------------------

INLINE_SVG_MARK = '<svg class="amp-svg"'
"""How a figure drawn by :func:`amp_lesson.plotting.figure_svg` begins: it is themed
(:func:`.figures.themed_svg`) as it is set into the page."""


def _inline_figures(app: Sphinx) -> None:
    """Set the book's SVG figures into the page; every other image as Sphinx writes it."""
    from sphinx.writers.html5 import HTML5Translator

    from amp_book.figures import themed_svg
    from amp_lesson.plotting import label_svg

    def visit(self: Any, node: nodes.Element) -> None:
        uri = node.get("uri", "")
        path = Path(self.builder.srcdir) / uri
        if uri.endswith(".svg") and path.is_file():
            svg = path.read_text(encoding="utf-8")
            if svg.startswith(INLINE_SVG_MARK):
                alt = node.get("alt")
                if not alt:
                    logger.warning(
                        "a figure has no alt text: give its cell `mystnb: image: alt:` "
                        "(or its glue directive :alt:)",
                        location=node,
                        type="amp_lesson",
                        subtype="figure_alt",
                    )
                svg = themed_svg(svg)
                self.body.append(label_svg(svg, alt) if alt else svg)
                raise nodes.SkipNode
        HTML5Translator.visit_image(self, node)

    app.add_node(nodes.image, override=True, html=(visit, HTML5Translator.depart_image))


def _theme_glued_figures(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    """Theme the figures a page holds as HTML (glued by
    :func:`amp_lesson.plotting.figure_html`), as :func:`_inline_figures` themes the rest."""
    from amp_book.figures import theme_figures_in

    for node in list(doctree.findall(nodes.raw)):
        text = node.astext()
        if "html" in node.get("format", "").split() and INLINE_SVG_MARK in text:
            themed = theme_figures_in(text)
            if themed != text:
                node.replace_self(nodes.raw(themed, themed, format=node["format"]))


# -- header buttons ------------------------------------------------------------------

REPOSITORY_ICON = "fas fa-code-branch"
"""The repository buttons' icon: from the solid set every page loads already."""


def _repository_icon_from_the_solid_set(
    app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any
) -> None:
    """Draw the repository buttons with a solid-set icon, not the brands font's logo.

    The theme draws them with ``fab fa-github``: one glyph of the brands web font,
    110 KB that no other icon on a page needs, a third of a page's first load.
    """

    def mend(buttons: list[dict[str, Any]]) -> None:
        for button in buttons:
            if str(button.get("icon", "")).startswith("fab "):
                button["icon"] = REPOSITORY_ICON
            mend(button.get("buttons", []))

    mend(context.get("header_buttons", []))


# -- reading path -------------------------------------------------------------------


def section_of(docname: str, patterns: Iterable[str]) -> str | None:
    """The glob pattern of the reference section ``docname`` is in; ``None`` on the reading path.

    >>> section_of("guide/selfchecks", ["api/*", "guide/*"])
    'guide/*'
    >>> section_of("chapter/formats", ["api/*", "guide/*"]) is None
    True
    """
    return next((p for p in patterns if fnmatch.fnmatchcase(docname, p)), None)


def _name_the_reference_sections(
    app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any
) -> None:
    """Tell the search page's script which pages are reference sections (it ranks them last)."""
    if pagename != "search":
        return
    patterns = " ".join(book_config(app).reference_pages)
    tag = f'<meta name="amp-lesson-reference-pages" content="{html.escape(patterns)}">\n'
    context["metatags"] = context.get("metatags", "") + tag


def _keep_the_reading_path_to_itself(
    app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any
) -> None:
    """No "Previous" or "Next" link between two sections (the reading path is one)."""
    patterns = book_config(app).reference_pages
    relations = getattr(app.builder, "relations", {}) or {}
    _, previous, following = relations.get(pagename, [None, None, None])
    here = section_of(pagename, patterns)
    for key, other in (("prev", previous), ("next", following)):
        if other and section_of(other, patterns) != here:
            context[key] = None


# -- no JavaScript ----------------------------------------------------------------

# One innermost rule, "selector{body}"; the selector is then searched in Python. Searched
# for inside the pattern, it made the regex rescan each long run of CSS (0.7 s a build).
_RULE = re.compile(r"([^{}]*)\{([^{}]*)\}")
_NO_THEME = "html:not([data-theme])"


_DARK = re.compile(r'(?:html)?\[data-theme=("?)dark\1\]')


def no_script_css(theme_css: str, pygments_css: str, *more_css: str) -> str:
    """CSS for a page whose scripts did not run.

    The theme renders ``<html data-theme="auto">`` and leaves it to a script
    to pick light or dark; with JavaScript off the attribute stays "auto" and
    neither the theme's colours nor the code's syntax colours apply (they are
    written for ``html[data-theme="light"]`` and ``...="dark"``). This returns
    the theme's own fallback rules (written for a page with no ``data-theme``)
    and the light syntax colours, both re-aimed at ``data-theme="auto"``; then,
    for a reader whose system asks for dark, every dark rule of the theme, the
    code and ``more_css`` (the book's own stylesheets), re-aimed the same way.

    >>> print(no_script_css(
    ...     'a{x:1}html:not([data-theme]){--c:#fff}html[data-theme=dark]{--c:#000}',
    ...     'html[data-theme="light"] .highlight .k { color: #00f }\\n'
    ...     'html[data-theme="dark"] .highlight .k { color: #ff0 }',
    ...     'html[data-theme="dark"] .amp-x{color:#eee}'))
    html[data-theme="auto"]{--c:#fff}
    html[data-theme="auto"] .highlight .k { color: #00f }
    @media (prefers-color-scheme: dark) {
    html[data-theme="auto"]{--c:#000}
    html[data-theme="auto"] .highlight .k { color: #ff0 }
    html[data-theme="auto"] .amp-x{color:#eee}
    }
    """
    rules = []
    for selector, body in _RULE.findall(theme_css):
        if _NO_THEME not in selector:
            continue
        aimed = selector.strip().replace(_NO_THEME, 'html[data-theme="auto"]')
        rules.append(f"{aimed}{{{body}}}")
    for line in pygments_css.splitlines():
        if line.startswith('html[data-theme="light"]'):
            rules.append(line.replace('html[data-theme="light"]', 'html[data-theme="auto"]', 1))
    dark = _dark_rules(theme_css)
    for line in pygments_css.splitlines():
        if line.startswith('html[data-theme="dark"]'):
            dark.append(line.replace('html[data-theme="dark"]', 'html[data-theme="auto"]', 1))
    for css in more_css:  # last, as the book's stylesheets come last on its pages
        dark += _dark_rules(css)
    if dark:
        rules += ["@media (prefers-color-scheme: dark) {", *dark, "}"]
    return "\n".join(rules)


def _dark_rules(css: str) -> list[str]:
    """The rules of ``css`` written for the dark theme, re-aimed at ``data-theme="auto"``."""
    rules = []
    for selector, body in _RULE.findall(css):
        if _DARK.search(selector) and "@" not in selector:
            aimed = _DARK.sub('html[data-theme="auto"]', selector.strip())
            rules.append(f"{aimed}{{{body}}}")
    return rules


def _write_no_script_css(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    static = Path(app.outdir) / "_static"
    theme_css = static / "styles" / "pydata-sphinx-theme.css"
    pygments_css = static / "pygments.css"
    if not theme_css.is_file() or not pygments_css.is_file():
        return
    more = [static / "styles" / "sphinx-book-theme.css", *sorted(static.glob("mystnb.*.css"))]
    more += [static / name for name in ("amp_lesson.css", "amp-playgrounds.css", "selfcheck.css")]
    css = no_script_css(
        theme_css.read_text(encoding="utf-8"),
        pygments_css.read_text(encoding="utf-8"),
        *(path.read_text(encoding="utf-8") for path in more if path.is_file()),
    )
    (static / NO_SCRIPT_CSS).write_text(
        "/* Generated by amp_book.theme: colours for a page whose scripts did"
        " not run. */\n" + css + "\n",
        encoding="utf-8",
    )


# -- MathML signs ----------------------------------------------------------------------

_SIGN = r"(?:&#x02212;|&#x0002B;|&#x0002D;|[-+\u2212])"
_CLOSING = r"(?:&#x00029;|&#x0005D;|&#x0007D;|&#x0007C;|&#x02016;|&#x027E9;|&#x00021;|[)\]}|\u2016\u27e9!])"
_UNARY_SIGN = re.compile(rf"(<mo\b[^>]*>(?!{_CLOSING}</mo>)[^<]*</mo>)<mo>({_SIGN})</mo>")


def mark_unary_signs(mathml: str) -> str:
    """Mark a sign right after an opening bracket or an operator as a prefix.

    latex2mathml writes ``(-1)`` as ``<mo>(</mo><mo>−</mo><mn>1</mn>`` in one
    row, where MathML takes the minus for a binary operator and puts space on
    both sides: "( − 1)". ``form="prefix"`` sets it tight, as TeX does.

    >>> mark_unary_signs("<mo>(</mo><mo>&#x02212;</mo><mn>1</mn><mo>)</mo><mo>&#x02212;</mo><mn>2</mn>")
    '<mo>(</mo><mo form="prefix">&#x02212;</mo><mn>1</mn><mo>)</mo><mo>&#x02212;</mo><mn>2</mn>'
    """
    return _UNARY_SIGN.sub(r'\1<mo form="prefix">\2</mo>', mathml)


# -- the maths font ------------------------------------------------------------------

_MATH = re.compile(r"<math\b.*?</math>", re.DOTALL)
_TAG = re.compile(r"<[^>]+>")
# Chromium draws a one-letter <mi> in mathematical italic (x as U+1D465):
# the font must hold the italic form of each letter the maths writes.
_ITALIC_BLOCKS = [
    ("ABCDEFGHIJKLMNOPQRSTUVWXYZ", 0x1D434),
    ("abcdefghijklmnopqrstuvwxyz", 0x1D44E),
    ("ΑΒΓΔΕΖΗΘΙΚΛΜΝΞΟΠΡϴΣΤΥΦΧΨΩ∇", 0x1D6E2),
    ("αβγδεζηθικλμνξοπρςστυφχψω∂ϵϑϰϕϱϖ", 0x1D6FC),
]
_ITALIC_EXCEPTIONS = {"h": 0x210E}  # U+1D455 is unassigned: italic h is the Planck constant


def italic_forms(characters: Iterable[int]) -> set[int]:
    """The mathematical italic code points of the letters among ``characters``.

    >>> [hex(c) for c in sorted(italic_forms(map(ord, "xhβ+")))]
    ['0x210e', '0x1d465', '0x1d6fd']
    """
    forms = set()
    for char in map(chr, characters):
        if char in _ITALIC_EXCEPTIONS:
            forms.add(_ITALIC_EXCEPTIONS[char])
            continue
        for letters, first in _ITALIC_BLOCKS:
            if char in letters:
                forms.add(first + letters.index(char))
    return forms


def math_characters(pages: Iterable[str]) -> set[int]:
    """Code points written inside ``<math>`` elements of the given HTML texts.

    >>> sorted(chr(c) for c in math_characters(["<p>a</p><math><mi>x</mi><mo>&#x2212;</mo></math>"]))
    ['x', '−']
    """
    found: set[int] = set()
    for text in pages:
        for element in _MATH.findall(text):
            found.update(ord(ch) for ch in html.unescape(_TAG.sub("", element)) if not ch.isspace())
    return found


def subset_math_font(source: Path, target: Path, characters: Iterable[int]) -> None:
    """Write the glyphs of ``source`` that ``characters`` need to ``target`` (WOFF).

    The OpenType MATH table (the sizes of big operators, the pieces of
    stretchy brackets, the spacing) is kept, with every glyph it refers to.
    """
    wanted = set(characters) | set(range(0x20, 0x7F))
    subset_font(source, target, wanted | italic_forms(wanted))


def write_math_font(outdir: Path) -> Path | None:
    """Subset the maths font to the characters of every built page; return its path.

    Skipped when the site holds no maths, and when the characters are those
    of the last build (a key beside the font records them).
    """
    pages = (p.read_text(encoding="utf-8") for p in sorted(outdir.rglob("*.html")))
    characters = math_characters(pages)
    if not characters:
        return None
    target = outdir / "_static" / MATH_FONT_OUT
    key_file = target.with_suffix(".key")
    digest = hashlib.sha256(MATH_FONT_SOURCE.read_bytes())
    digest.update(",".join(map(str, sorted(characters))).encode())
    key = digest.hexdigest()
    if not (target.is_file() and key_file.is_file() and key_file.read_text() == key):
        subset_math_font(MATH_FONT_SOURCE, target, characters)
        key_file.write_text(key)
    shutil.copyfile(MATH_FONT_LICENSE, target.parent / "NotoSansMath-OFL.txt")
    return target


def _write_math_font(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    from amp_book import in_preview

    if in_preview(app) and (Path(app.outdir) / "_static" / MATH_FONT_OUT).parent.is_dir():
        return  # the preview keeps the fonts of the last whole build
    write_math_font(Path(app.outdir))
    write_icon_fonts(Path(app.outdir))


# -- the theme's icons ---------------------------------------------------------------------

ICON_FONTS_CSS = "amp_lesson_icons.css"
"""Generated: the theme's icon fonts, declared again over the subsets (:func:`write_icon_fonts`)."""
_FONT_FACE = re.compile(r"@font-face\s*\{([^}]*)\}")
_ICON_SRC = re.compile(r"url\(([^)]*webfonts/(fa-[\w-]+)\.woff2)\)")
_ICON_BODY = re.compile(r"\{--fa:\s*\"(?:\\([0-9a-fA-F]+)|(.))\"\s*\}")
_ICON_ESCAPE = re.compile(r"\\(f[0-9a-fA-F]{3}|e[0-9a-fA-F]{3})\b")
_PRIVATE_USE = re.compile("[\ue000-\uf8ff]")
_ICON_NAME = re.compile(r"\bfa-[a-z0-9-]+")


def icon_codepoints(css: str, used: Iterable[str]) -> set[int]:
    r"""The icon fonts' code points a site needs: those of the icon classes in ``used``
    (``fa-download``), as ``css`` maps them (``.fa-download{--fa:"\f019"}``), and every
    one the stylesheets write themselves (the theme's ``--pst-icon-*`` variables).

    >>> css = '.fa-pen,.fa-pencil-alt{--fa:"\\f303"}.fa-sun{--fa:"\\f185"}:root{--x:"\uf058"}'
    >>> sorted(hex(c) for c in icon_codepoints(css, ["fa-pencil-alt", "fa-solid"]))
    ['0xf058', '0xf303']
    """
    by_name: dict[str, int] = {}
    kept, last = [], 0  # the stylesheets less the icon classes' own rules
    # Each rule's body first, then its selectors back to the end of the rule or block before
    # it: a pattern that matched the selectors first was tried at every character of the
    # 0.6 MB of the theme's stylesheets (1.8 s a build).
    for body in _ICON_BODY.finditer(css):
        start = max(css.rfind("}", 0, body.start()), css.rfind("{", 0, body.start())) + 1
        if start == body.start():  # no selector
            continue
        escaped, literal = body.groups()
        point = int(escaped, 16) if escaped else ord(literal)
        for selector in css[start : body.start()].split(","):
            if selector.strip().startswith(".fa-"):
                by_name[selector.strip()[1:]] = point
        kept.append(css[last:start])
        last = body.end()
    rest = "".join([*kept, css[last:]])
    found = {int(c, 16) for c in _ICON_ESCAPE.findall(rest)}
    found |= {ord(c) for c in _PRIVATE_USE.findall(rest)}
    return found | {by_name[name] for name in used if name in by_name}


def write_icon_fonts(outdir: Path) -> list[Path]:
    """Subset the theme's icon fonts (FontAwesome) to the icons the site shows; return them.

    The theme ships every icon: its solid set alone is 115 KB, the largest file of a page's
    first load, for the dozen icons a page draws. The subsets go to ``_static/fonts/`` (as
    WOFF) and :data:`ICON_FONTS_CSS`, loaded after the theme's styles, declares the same
    font families over them, so the browser never asks for the full fonts. The icons: the
    ``fa-*`` classes of every page and script of ``outdir`` (the scripts the book leaves out,
    ``fontawesome.js``, aside) and the code points the stylesheets write themselves. Skipped
    when the theme has no such fonts, and when the icons are those of the last build.
    """
    static = outdir / "_static"
    theme_css = static / "styles" / "pydata-sphinx-theme.css"
    if not theme_css.is_file():
        return []
    css = theme_css.read_text(encoding="utf-8")
    faces = [(body, _ICON_SRC.search(body)) for body in _FONT_FACE.findall(css)]
    faces = [(body, m) for body, m in faces if m]
    if not faces:
        return []
    texts = [p.read_text(encoding="utf-8") for p in sorted(outdir.rglob("*.html"))]
    texts += [
        p.read_text(encoding="utf-8", errors="replace")
        for p in sorted(static.rglob("*.js"))
        if p.name != "fontawesome.js"
    ]
    used = {name for text in texts for name in _ICON_NAME.findall(text)}
    sheets = [p.read_text(encoding="utf-8") for p in sorted(static.rglob("*.css"))]
    points = icon_codepoints("\n".join(s for s in sheets if "amp_lesson_icons" not in s), used)
    digest = hashlib.sha256(",".join(map(str, sorted(points))).encode())
    declared, written = [], []
    for body, match in faces:
        source = (theme_css.parent / match.group(1)).resolve()
        target = static / "fonts" / f"{match.group(2)}.woff"
        digest.update(source.read_bytes())
        declared.append(
            "@font-face{"
            + body.replace(match.group(0), f'url(fonts/{target.name}) format("woff")')
            + "}"
        )
        written.append((source, target))
    key = digest.hexdigest()
    key_file = static / "fonts" / "amp-lesson-icons.key"
    fresh = key_file.is_file() and key_file.read_text() == key
    if not (fresh and all(t.is_file() for _, t in written)):
        for source, target in written:
            subset_font(source, target, points)
        key_file.write_text(key)
    (static / ICON_FONTS_CSS).write_text(
        "/* Generated by amp_book.theme: the theme's icon fonts, cut down to the icons the"
        " book shows. */\n" + "\n".join(declared) + "\n",
        encoding="utf-8",
    )
    return [t for _, t in written]


def subset_font(source: Path, target: Path, characters: Iterable[int]) -> None:
    """Write the glyphs of ``source`` that ``characters`` need to ``target`` (WOFF), with
    every layout table (a maths font's MATH table among them) and the glyphs they name."""
    from fontTools import subset
    from fontTools.ttLib import TTFont

    options = subset.Options()
    options.layout_features = ["*"]
    options.notdef_outline = True
    options.flavor = "woff"
    font = TTFont(str(source))
    subsetter = subset.Subsetter(options)
    subsetter.populate(unicodes=sorted(characters))
    subsetter.subset(font)
    target.parent.mkdir(parents=True, exist_ok=True)
    font.flavor = "woff"
    font.save(str(target))


def _cache_compiled_templates(app: Sphinx) -> None:
    """Keep the theme's templates compiled between builds (Jinja's bytecode cache).

    Sphinx compiles every template it renders afresh in each build and each
    parallel writer: about half a second of a no-change build. Jinja keys each
    stored template on its name and the checksum of its source, so an edited
    template is compiled again.
    """
    environment = getattr(getattr(app.builder, "templates", None), "environment", None)
    if environment is None or environment.bytecode_cache is not None:
        return
    from jinja2 import FileSystemBytecodeCache

    folder = Path(app.doctreedir) / "jinja"
    folder.mkdir(parents=True, exist_ok=True)
    environment.bytecode_cache = FileSystemBytecodeCache(str(folder))


_BIBLIOENTRY = ' class="citation" id="'
_BIBLIOENTRY_ROLE = re.compile(r'(<div class="citation" id="[^"]+") role="doc-biblioentry"')


def _bibliography_entries_as_list_items(
    app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any
) -> None:
    """The references page's entries are the items of the list docutils puts them in.

    Docutils writes a bibliography as ``<div role="list">`` of ``<div
    role="doc-biblioentry">``: a list whose children are not list items (axe:
    aria-required-children, critical), and ``doc-biblioentry`` is deprecated (DPUB-ARIA 1.1).
    Each entry becomes a ``listitem``; its label and text still say what it is.

    >>> ctx = {"body": '<div role="list" class="citation-list">'
    ...        '<div class="citation" id="id2" role="doc-biblioentry">x</div></div>'}
    >>> _bibliography_entries_as_list_items(None, "references", "", ctx, None)
    >>> ctx["body"]
    '<div role="list" class="citation-list"><div class="citation" id="id2" role="listitem">x</div></div>'
    """
    body = context.get("body")
    if isinstance(body, str) and _BIBLIOENTRY in body:
        context["body"] = _BIBLIOENTRY_ROLE.sub(r'\1 role="listitem"', body)


def setup(app: Sphinx) -> dict[str, bool]:
    app.connect("doctree-resolved", _theme_glued_figures)
    app.connect("html-page-context", _bibliography_entries_as_list_items)
    app.connect("config-inited", add_static_path)
    app.add_css_file("amp_lesson.css")
    app.connect("builder-inited", _cache_compiled_templates)
    app.connect("config-inited", _add_templates_and_favicon)
    _hidden_cell_summary_named_by_its_text(app)
    _inline_figures(app)
    app.connect("html-page-context", _keep_the_reading_path_to_itself)
    app.connect("html-page-context", _name_the_reference_sections)
    # After sphinx-book-theme adds its buttons (priority 501).
    app.connect("html-page-context", _repository_icon_from_the_solid_set, priority=800)
    app.add_css_file(NO_SCRIPT_CSS)
    app.add_css_file(ICON_FONTS_CSS)
    app.add_js_file(SITE_SCRIPT, loading_method="defer")
    # After pydata-sphinx-theme rewrites pygments.css for its light and dark themes.
    app.connect("build-finished", _write_no_script_css, priority=900)
    app.connect("build-finished", _write_math_font)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
