"""amp_book.theme: the maths font, colours without JavaScript, signs in MathML,
and what the built book's HTML must (not) hold: one wired set of sidebar buttons, no
FontAwesome script, no "Next" into the pages for authors, named toggles."""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

import pytest
from bs4 import BeautifulSoup
from fontTools.ttLib import TTFont
from helpers import built_pages, built_soup

from amp_book import theme, workdirs

# -- the maths font ---------------------------------------------------------------------


def test_math_characters_come_from_math_elements_only() -> None:
    pages = [
        "<p>outside 9 &amp; Q</p><math><mi>x</mi><mo>&#x02212;</mo><mn>1</mn></math>",
        '<div class="math"><math display="block"><msup><mi>β</mi><mn>2</mn></msup></math></div>',
    ]
    assert {chr(c) for c in theme.math_characters(pages)} == {"x", "\u2212", "1", "β", "2"}
    assert theme.math_characters(["<p>no maths</p>"]) == set()


def test_the_subset_font_keeps_the_math_table_and_every_glyph_asked_for(tmp_path: Path) -> None:
    wanted = {ord(c) for c in "∑∇∈−×‖ℒβσ"}
    target = tmp_path / "math.woff"
    theme.subset_math_font(theme.MATH_FONT_SOURCE, target, wanted)
    font = TTFont(str(target))
    assert "MATH" in font  # large operators and stretchy brackets need it
    cmap = set(font.getBestCmap())
    assert wanted <= cmap
    assert ord("𝑥") in cmap  # a one-letter <mi> x is drawn as mathematical italic x
    assert ord("ℎ") in cmap  # ... and h as the Planck constant
    assert ord("≈") not in cmap  # only what was asked for (and the letters' forms)
    assert target.stat().st_size < theme.MATH_FONT_SOURCE.stat().st_size / 5


def test_write_math_font_writes_the_font_and_its_licence_once(tmp_path: Path) -> None:
    (tmp_path / "a.html").write_text("<math><mi>y</mi><mo>=</mo><mn>2</mn></math>")
    font = theme.write_math_font(tmp_path)
    assert font is not None
    assert font.is_file()
    assert (font.parent / "NotoSansMath-OFL.txt").read_text().startswith("Copyright")
    first = font.stat().st_mtime_ns
    assert theme.write_math_font(tmp_path) == font
    assert font.stat().st_mtime_ns == first  # same characters: not written again
    (tmp_path / "b.html").write_text("<math><mo>∑</mo></math>")
    theme.write_math_font(tmp_path)
    assert ord("∑") in TTFont(str(font)).getBestCmap()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert theme.write_math_font(empty) is None  # no maths, no font


def test_unary_signs_are_set_tight_and_binary_ones_are_not() -> None:
    ml = (
        '<mi>x</mi><mo>&#x0003D;</mo><mo stretchy="false">&#x00028;</mo><mo>&#x02212;</mo>'
        "<mn>1</mn><mo>&#x00029;</mo><mo>&#x02212;</mo><mn>2</mn><mo>&#x0002B;</mo><mn>3</mn>"
    )
    out = theme.mark_unary_signs(ml)
    assert out.count('form="prefix"') == 1
    assert '&#x00028;</mo><mo form="prefix">&#x02212;</mo><mn>1' in out
    assert "<mo>&#x0002B;</mo>" in out  # 2 + 3: binary
    assert theme.mark_unary_signs("<mo>&#x0003D;</mo><mo>-</mo><mn>4</mn>").count("prefix") == 1


# -- colours without JavaScript ---------------------------------------------------------


def test_no_script_css_reaims_the_themes_fallback_the_light_code_colours_and_the_dark_rules() -> (
    None
):
    theme_css = (
        "html[data-theme=light]{--c:#000}html:not([data-theme]){--c:#111;--d:#222}"
        "html:not([data-theme]) .only-dark{display:none!important}"
    )
    pygments = (
        'html[data-theme="light"] .highlight .k { color: #0000ff }\n'
        'html[data-theme="dark"] .highlight .k { color: #ffff00 }\n'
    )
    css = theme.no_script_css(theme_css, pygments, 'html[data-theme="dark"] .amp-x{color:#eee}')
    light, dark = css.split("@media (prefers-color-scheme: dark) {")
    assert 'html[data-theme="auto"]{--c:#111;--d:#222}' in light
    assert 'html[data-theme="auto"] .only-dark{display:none!important}' in light
    assert 'html[data-theme="auto"] .highlight .k { color: #0000ff }' in light
    assert "#ffff00" not in light
    assert "#000}" not in css
    # a reader whose system asks for dark: the dark code colours and the book's dark rules
    assert 'html[data-theme="auto"] .highlight .k { color: #ffff00 }' in dark
    assert 'html[data-theme="auto"] .amp-x{color:#eee}' in dark
    assert dark.rstrip().endswith("}")


def test_reference_sections_match_by_glob() -> None:
    patterns = ["api/*", "guide/*"]
    assert theme.section_of("guide/execution", patterns) == "guide/*"
    assert theme.section_of("api/amp_lesson.scaler", patterns) == "api/*"
    assert theme.section_of("chapter/review", patterns) is None
    assert theme.section_of("guide/execution", []) is None


# -- the built book ------------------------------------------------------------------------


def _soup(built_book: Path, rel: str) -> BeautifulSoup:
    return built_soup(built_book / rel)


@pytest.mark.book
def test_pages_carry_one_set_of_sidebar_buttons_and_no_fontawesome_script(
    built_book: Path,
) -> None:
    for rel in built_pages(built_book):
        soup = _soup(built_book, rel)
        assert len(soup.select(".primary-toggle")) == 1, rel
        assert len(soup.select(".secondary-toggle")) <= 1, rel
        assert not soup.select('script[src*="fontawesome"]'), rel
        assert soup.select_one('link[rel="icon"]')["href"].endswith("favicon.svg"), rel


@pytest.mark.book
def test_hidden_cells_and_the_search_button_are_named_by_their_text(built_book: Path) -> None:
    toggles = 0
    for rel in built_pages(built_book):
        soup = _soup(built_book, rel)
        for summary in soup.select("details.hide > summary"):
            assert not summary.has_attr("aria-label"), rel
            toggles += 1
        for button in soup.select(".search-button-field"):
            assert not button.has_attr("aria-label"), rel  # named by "Search Ctrl+K"
    assert toggles > 0  # the book does hide some cells' source


@pytest.mark.book
def test_no_previous_or_next_link_crosses_between_the_reading_path_and_the_reference(
    built_book: Path,
) -> None:
    links = {}
    for rel in built_pages(built_book):
        soup = _soup(built_book, rel)
        links[rel] = [a["href"] for a in soup.select("a.right-next, a.left-prev")]

    def section(rel: str) -> str:
        return rel.split("/")[0] if rel.startswith(("api/", "guide/")) else "reading path"

    crossing = {
        rel: hrefs
        for rel, hrefs in links.items()
        for href in hrefs
        if section(posixpath.normpath(posixpath.join(posixpath.dirname(rel), href))) != section(rel)
    }
    assert crossing == {}
    assert links["chapter/start.html"]  # the reading path itself is intact
    # the authors' guide is off the reading path: no previous or next link leads into it or
    # out of it, and its front page lists its pages
    assert links["guide/execution.html"] == []
    guide = _soup(built_book, "guide/index.html")
    assert {"execution.html", "selfchecks.html", "claims.html"} <= {
        a["href"].split("#")[0] for a in guide.select("article a.reference.internal")
    }
    assert not _soup(built_book, "references.html").select_one("a.right-next")  # the end


@pytest.mark.book
def test_the_served_maths_font_holds_every_character_of_the_books_maths(
    built_book: Path,
) -> None:
    pages = [p.read_text(encoding="utf-8") for p in built_book.rglob("*.html")]
    used = theme.math_characters(pages)
    assert len(used) > 20
    font = TTFont(str(built_book / "_static" / theme.MATH_FONT_OUT))
    assert "MATH" in font
    assert used <= set(font.getBestCmap())
    assert (built_book / "_static" / "fonts" / "NotoSansMath-OFL.txt").is_file()
    css = (built_book / "_static" / "amp_lesson.css").read_text(encoding="utf-8")
    assert re.search(r"math\s*\{\s*font-family:\s*\"Noto Sans Math \(book\)\"", css)


def test_the_compiled_templates_are_kept_for_the_next_build(built_book: Path) -> None:
    kept = list((workdirs.doctrees_folder(built_book) / "jinja").glob("__jinja2_*.cache"))
    # one a template the pages render: the theme's layout, its sidebar, the book's own
    assert len(kept) >= 10


def test_no_script_css_takes_the_fallback_rules_of_the_built_theme(built_book: Path) -> None:
    from amp_book.theme import NO_SCRIPT_CSS

    static = built_book / "_static"
    theme_css = (static / "styles" / "pydata-sphinx-theme.css").read_text(encoding="utf-8")
    written = (static / NO_SCRIPT_CSS).read_text(encoding="utf-8")
    fallback = theme_css.count("html:not([data-theme])")
    assert fallback > 0
    # every rule of the theme's written for a page with no data-theme, re-aimed
    assert written.count('html[data-theme="auto"]') >= fallback
    assert "html:not([data-theme])" not in written


@pytest.mark.book
def test_no_page_gives_two_elements_one_id(built_book: Path) -> None:
    """A link to a section finds one place; a self-check's id is not a heading's anchor."""
    import collections

    twice = {}
    for rel in built_pages(built_book):
        counts = collections.Counter(
            re.findall(r'\bid="([^"]+)"', (built_book / rel).read_text(encoding="utf-8"))
        )
        repeated = sorted(i for i, n in counts.items() if n > 1)
        if repeated:
            twice[rel] = repeated
    assert twice == {}


@pytest.mark.book
def test_every_icon_the_site_names_is_in_the_cut_down_icon_fonts(built_book: Path) -> None:
    """The subsets hold the glyph of every ``fa-*`` class a page names and of every icon the
    theme's stylesheet writes itself; the pages load them, not the theme's full fonts."""
    static = built_book / "_static"
    css = (static / "styles" / "pydata-sphinx-theme.css").read_text(encoding="utf-8")
    full = {}
    for name in ("fa-solid-900", "fa-regular-400", "fa-brands-400"):
        full[name] = set(
            TTFont(str(static / "vendor/fontawesome/webfonts" / f"{name}.woff2")).getBestCmap()
        )
    cut = {name: set(TTFont(str(static / "fonts" / f"{name}.woff")).getBestCmap()) for name in full}
    # Independently of theme.icon_codepoints: the classes the chapter's pages carry, read
    # with BeautifulSoup, and the stylesheet's --pst-icon-* variables.
    named = set()
    for page in built_pages(built_book):
        for tag in built_soup(built_book / page).select('[class*="fa-"]'):
            named.update(c for c in tag["class"] if c.startswith("fa-"))
    points = {}
    for rule in re.finditer(r"([^{}]+)\{--fa:\"\\([0-9a-f]+)\"\}", css):
        for selector in rule[1].split(","):
            points[selector.strip().lstrip(".")] = int(rule[2], 16)
    wanted = {points[n] for n in named if n in points}
    wanted |= {ord(c) for c in re.findall(r"--pst-icon-[a-z-]+:\"([\ue000-\uf8ff])\"", css)}
    assert len(wanted) >= 15, sorted(map(hex, wanted))
    for name, glyphs in full.items():
        missing = {hex(p) for p in wanted & glyphs} - {hex(p) for p in cut[name]}
        assert not missing, (name, sorted(missing))
        assert len(cut[name]) < len(glyphs) / 10  # cut down indeed
    icons_css = (static / theme.ICON_FONTS_CSS).read_text(encoding="utf-8")
    assert icons_css.count("@font-face") == 3
    assert "webfonts/" not in icons_css
    head = (built_book / "chapter" / "gradscaler.html").read_text(encoding="utf-8")
    assert head.index("pydata-sphinx-theme.css") < head.index(
        theme.ICON_FONTS_CSS
    )  # declared after
