"""Every page of the built book in a real Chromium: loads cleanly, loads nothing from outside."""

from __future__ import annotations

import os
from typing import Any

import pytest
from audit import SWITCH_TO_DARK, THEME_RULES, axe_path, serious_violations
from helpers import built_pages
from test_selfcheck_browser import GUIDE, _answer_some

from amp_book.edition import EDITION_KEY

pytestmark = pytest.mark.browser


FIGURE_TEXT_JS = """() => {
  document.querySelectorAll('.bd-article details').forEach((d) => { d.open = true; });
  const rgb = (s) => (s.match(/[\\d.]+/g) || []).map(Number).slice(0, 3);
  const lum = ([r, g, b]) => {
    const f = (c) => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  };
  const ratio = (a, b) => (Math.max(lum(a), lum(b)) + 0.05) / (Math.min(lum(a), lum(b)) + 0.05);
  const background = (el) => {
    for (; el; el = el.parentElement) {
      const c = getComputedStyle(el).backgroundColor.match(/[\\d.]+/g) || [];
      if (c.length === 3 || (c.length === 4 && Number(c[3]) > 0)) return c.slice(0, 3).map(Number);
    }
    return [255, 255, 255];
  };
  return [...document.querySelectorAll('svg.amp-svg')].filter((svg) => svg.getClientRects().length)
    .map((svg) => {
      const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
      const texts = [...svg.querySelectorAll('text')].filter((t) => t.textContent.trim());
      const back = background(svg);
      return {
        label: svg.getAttribute('aria-label') || '',
        width: svg.getBoundingClientRect().width,
        smallest: Math.min(...texts.map((t) => parseFloat(getComputedStyle(t).fontSize) * scale)),
        contrast: Math.min(...texts.map((t) => ratio(rgb(getComputedStyle(t).fill), back))),
        svgBackground: getComputedStyle(svg).backgroundColor,
      };
    });
}"""


READERS_PAGES = (
    "index.html",
    "glossary.html",
    "corrections.html",
    "references.html",
    "chapter/",
    "beyond/",
)
"""The learner's pages: visited in every combination. The API reference and the authors'
guide, in the page's own layout, at 1280 and 390 px in the light theme with JavaScript."""

OPEN_DETAILS_JS = (
    "() => document.querySelectorAll('.bd-article details').forEach((d) => { d.open = true; })"
)

PASSES = [
    pytest.param(1280, True, "light", id="1280-js-light"),
    pytest.param(1280, True, "dark", id="1280-js-dark"),
    pytest.param(390, True, "light", id="390-js-light"),
    pytest.param(390, True, "dark", id="390-js-dark"),
    pytest.param(1280, False, None, id="1280-no-js"),
    pytest.param(390, False, None, id="390-no-js"),
]


@pytest.mark.parametrize(("width", "javascript", "scheme"), PASSES)
def test_every_page_in_one_visit_per_viewport(
    browser, site_url, built_book, width, javascript, scheme, subtests, report
):
    """Each page visited once per viewport, every check made on that visit and reported
    on its own (a subtest each):

    - it has a heading, logs no console error, asks for no missing file and for nothing
      from outside, and does not scroll sideways (what a reader opens included: dropdowns,
      answers, collapsed cells), at 1280 and 390 px, light and dark, with JavaScript and
      without;
    - at 390 px with JavaScript, every figure's text is at least 10 CSS px and readable
      against the page's own background (``_check_figures``);
    - at 1280 px, light, with JavaScript: no code block, output or docstring example hides
      a line's end behind a scrollbar, and axe-core finds nothing serious or critical, in the
      light theme and then switched to dark as the theme's toggle does.

    With JavaScript the page loads in the reader's theme (a pass each). Without it the
    theme is CSS following the reader's system setting alone, so each page is measured
    light, then dark by changing that setting, on the same visit.
    """
    from helpers import recording_page

    schemes = [scheme] if javascript else ["light", "dark"]
    audit = javascript and scheme == "light" and width == 1280
    if audit:
        axe_path()  # skipped where axe-core is not installed (fails on CI), before any visit
    pg = recording_page(
        browser, site_url, viewport={"width": width, "height": 900}, color_scheme=schemes[0],
        java_script_enabled=javascript,
    )  # fmt: skip
    missing, headless, wide, figures, errors = [], [], {}, {}, {}
    code_blocks, wide_code, accessibility = 0, {}, {}
    pg.on("response", lambda r: r.status >= 400 and missing.append(f"{r.status} {r.url}"))
    # Each site's pages at their own addresses: a live page stays live (as for a reader who
    # chose this build), and its GPU edition's page is visited under editions/.
    pg.context.add_init_script(f"try{{localStorage.setItem({EDITION_KEY!r}, 'live')}}catch(e){{}}")
    every = scheme == "light" and javascript
    pages = [
        rel for rel in built_pages(built_book) if every or rel.startswith(READERS_PAGES)
    ] + ["search.html", "print.html"]  # fmt: skip
    assert "index.html" in pages
    if audit:  # the dark theme's sample of the API reference is there to audit
        assert set(API_PAGES_IN_DARK) <= set(pages)
    try:
        for rel in pages:
            logged = len(pg.console_errors)
            pg.emulate_media(color_scheme=schemes[0])
            # "load": every resource the page names has arrived
            pg.goto(f"{site_url}/{rel}", wait_until="load")
            if pg.locator("h1").count() < 1:
                headless.append(rel)
            pg.evaluate(OPEN_DETAILS_JS)
            for shown in schemes:
                pg.emulate_media(color_scheme=shown)
                if width == 390 and javascript and (found := pg.evaluate(FIGURE_TEXT_JS)):
                    figures[rel] = found
                scroll, client = pg.evaluate(
                    "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
                )
                if scroll > client:
                    wide[f"{rel} ({shown})"] = scroll - client
            if audit and rel not in ("search.html", "print.html"):
                code_blocks += pg.locator(".bd-article pre").count()
                if over := pg.evaluate(WIDE_CODE_JS):
                    wide_code[rel] = over
                if found := _audit(pg, rel):
                    accessibility[rel] = found
            if len(pg.console_errors) > logged:
                errors[rel] = pg.console_errors[logged:]
    finally:
        pg.context.close()

    with subtests.test("every page has a heading"):
        assert headless == []
    with subtests.test("no console error"):
        assert errors == {}
    with subtests.test("no missing file"):
        assert missing == []
    with subtests.test("nothing from outside"):
        assert pg.outside_requests == []
    with subtests.test("no page scrolls sideways"):
        assert wide == {}
    if width == 390 and javascript:
        with subtests.test("figures legible on a phone"):
            _check_figures(figures, scheme, report)
    if audit:
        with subtests.test("every code block fits its column at 1280 px"):
            assert code_blocks > 300  # the measure saw the book's code
            assert wide_code == {}
        with subtests.test("axe-core finds nothing serious, light and dark"):
            assert accessibility == {}


# The API reference's module pages are one template over docstrings: in the dark theme the
# audit reads its index and two module pages (every page is audited in the light theme).
API_PAGES_IN_DARK = ("api/index.html", "api/amp_lesson.formats.html", "api/amp_lesson.bench.html")


CODE_TEXT = [".highlight pre"]
"""Left out of each page's audit: the text of its code blocks. Its colours are the
highlighting style's, the same on every page, and its tens of thousands of token spans were
half of axe's time over the book; ``test_every_colour_of_the_code_highlighting_is_readable``
audits one block holding every token class of the style, in both themes. What else axe would
check there holds by the sweep's own measure: at 1280 px no code block scrolls, so none
needs a tab stop. The copy buttons, outside ``pre``, are audited on every page."""


def _audit(pg, rel: str) -> list[str]:
    """axe-core's serious findings on the page in the light theme, then switched to dark
    (theme rules; API reference pages: a sample), code text aside (:data:`CODE_TEXT`). The
    self-checks' guide is audited with some widgets answered, so their feedback is too."""
    # "load", then the fonts: the audit reads only the document and its styles.
    pg.evaluate("document.fonts.ready.then(() => true)")
    if rel == GUIDE:
        _answer_some(pg)
    assert pg.evaluate("document.documentElement.dataset.theme") == "light", rel
    found = [f"light: {v}" for v in serious_violations(pg, exclude=CODE_TEXT)]
    if rel.startswith("api/") and rel not in API_PAGES_IN_DARK:
        return found
    pg.emulate_media(color_scheme="dark")
    pg.evaluate(SWITCH_TO_DARK)
    return found + [f"dark: {v}" for v in serious_violations(pg, THEME_RULES, exclude=CODE_TEXT)]


TOKEN_SAMPLE_JS = """() => {
  const classes = new Set();
  for (const sheet of document.styleSheets) {
    for (const rule of sheet.cssRules) {
      for (const m of (rule.selectorText || '').matchAll(/\\.highlight \\.([\\w-]+)/g)) {
        classes.add(m[1]);
      }
    }
  }
  const used = new Set([...document.querySelectorAll('.highlight pre span[class]')]
    .flatMap((s) => [...s.classList]));
  const sample = document.querySelector('div.highlight-python').cloneNode(true);
  sample.id = 'amp-token-sample';
  const pre = sample.querySelector('pre');
  pre.replaceChildren('plain text ');
  for (const name of [...classes].sort()) {
    const token = document.createElement('span');
    token.className = name;
    token.textContent = `token ${name}`;
    pre.append(token, ' plain\\n');
  }
  document.querySelector('.bd-article').append(sample);
  return {classes: [...classes].sort(), used: [...used].sort()};
}"""


def test_every_colour_of_the_code_highlighting_is_readable(make_page, site_url, built_book):
    """One code block holding a token of every class the highlighting style colours, and
    plain code text, is audited by axe-core's contrast rule in the light theme and switched
    to dark; the page's own code uses no class outside the sample."""
    axe_path()  # skipped where axe-core is not installed (fails on CI)
    pg = make_page(viewport={"width": 1280, "height": 900}, color_scheme="light")
    pg.context.add_init_script(f"try{{localStorage.setItem({EDITION_KEY!r}, 'live')}}catch(e){{}}")
    pg.goto(f"{site_url}/chapter/recipe.html", wait_until="load")
    pg.evaluate("document.fonts.ready.then(() => true)")
    sample = pg.evaluate(TOKEN_SAMPLE_JS)
    assert len(sample["classes"]) > 40, sample  # Pygments' token classes
    assert set(sample["used"]) <= set(sample["classes"]), sample
    assert pg.locator("#amp-token-sample pre > span").count() == len(sample["classes"])
    light = serious_violations(pg, ["color-contrast"], include=["#amp-token-sample"])
    pg.emulate_media(color_scheme="dark")
    pg.evaluate(SWITCH_TO_DARK)
    dark = serious_violations(pg, ["color-contrast"], include=["#amp-token-sample"])
    assert (light, dark) == ([], [])


def _check_figures(found: dict, scheme: str, report) -> None:
    """Every figure legible on a phone and drawn for the theme (see FIGURE_TEXT_JS)."""
    from amp_lesson.plotting import PHONE_COLUMN_PX

    # print.html is the book for paper: its figures are a page's width there
    found = {rel: page for rel, page in found.items() if rel != "print.html"}
    figures = [f for page in found.values() for f in page]
    assert len(figures) >= 15  # the book's figures, the landing page's one included
    assert "index.html" in found
    assert all(f["label"] for f in figures)  # each named by its alt text
    small = [(rel, f["label"][:40], round(f["smallest"], 1)) for rel, page in found.items()
             for f in page if f["smallest"] < 10]  # fmt: skip
    assert small == []
    dim = [(rel, f["label"][:40], round(f["contrast"], 1)) for rel, page in found.items()
           for f in page if f["contrast"] < 4.5]  # fmt: skip
    assert dim == []
    assert {f["svgBackground"] for f in figures} == {"rgba(0, 0, 0, 0)"}  # transparent
    assert max(f["width"] for f in figures) <= PHONE_COLUMN_PX  # shrunk to the column
    report(
        f"smallest figure text at 390 px, {scheme}",
        f"{min(f['smallest'] for f in figures):.1f} px over {len(figures)} figures",
    )


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_math_renders_as_mathml_in_both_themes(page, site_url, built_book, theme):
    page.goto(f"{site_url}/chapter/start.html")
    page.evaluate(f"document.documentElement.dataset.theme = '{theme}'")
    box = page.locator("math").first.bounding_box()
    assert box is not None
    assert box["width"] > 10


CONTRAST_JS = """
(selector) => {
  const rgb = (s) => (s.match(/[\\d.]+/g) || []).map(Number);
  const lum = ([r, g, b]) => {
    const f = (c) => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  };
  const background = (el) => {
    for (; el; el = el.parentElement) {
      const c = rgb(getComputedStyle(el).backgroundColor);
      if (c.length === 3 || (c.length === 4 && c[3] > 0)) return c.slice(0, 3);
    }
    return [255, 255, 255];
  };
  return [...document.querySelectorAll(selector)].map((el) => {
    const a = lum(rgb(getComputedStyle(el).color).slice(0, 3));
    const b = lum(background(el));
    return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
  });
}
"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_books_own_outputs_have_readable_text(browser, site_url, built_book, scheme):
    """Provenance lines and result tables meet WCAG AA contrast (4.5:1) in both themes."""
    from helpers import recording_page

    pg = recording_page(browser, site_url, color_scheme=scheme)
    checked = 0
    try:
        for rel in ("chapter/formats.html", "beyond/what-mixed-precision-buys.html", "index.html"):
            pg.goto(f"{site_url}/{rel}", wait_until="networkidle")
            assert pg.evaluate("document.documentElement.dataset.theme") == scheme
            ratios = pg.evaluate(CONTRAST_JS, ".amp-provenance, table.amp-table td")
            assert ratios, rel
            assert min(ratios) >= 4.5, (rel, min(ratios))
            checked += len(ratios)
    finally:
        pg.context.close()
    assert checked > 10


HEADER_ICONS_JS = """
() => [...document.querySelectorAll('.bd-header-article .btn')]
  .filter((btn) => btn.getClientRects().length)
  .map((btn) => {
    const icon = [...btn.querySelectorAll('img, i, [class*="fa-"]')]
      .find((el) => el.getBoundingClientRect().height > 0);  // the theme switch shows one of 3
    const box = icon ? icon.getBoundingClientRect() : null;  // null: no icon shows
    const header = document.querySelector('.bd-header-article').getBoundingClientRect();
    return {label: btn.className, fontSize: parseFloat(getComputedStyle(btn).fontSize),
            iconHeight: box && box.height, iconBottom: box && box.bottom,
            headerBottom: header.bottom};
  })
"""


@pytest.mark.parametrize("width", [1280, 390])
def test_the_header_buttons_icons_are_text_sized(browser, site_url, built_book, width):
    """The Colab logo is an image: unsized, it drew at its 225 px over the page's title."""
    from helpers import recording_page

    pg = recording_page(browser, site_url, viewport={"width": width, "height": 900})
    try:
        pg.goto(f"{site_url}/chapter/gradscaler.html", wait_until="load")
        buttons = pg.evaluate(HEADER_ICONS_JS)
    finally:
        pg.context.close()
    assert any("colab" in b["label"] for b in buttons), buttons
    for b in buttons:
        assert b["iconHeight"] is not None, b
        assert 0 < b["iconHeight"] <= 2 * b["fontSize"], b
        assert b["iconBottom"] <= b["headerBottom"], b


WIDE_CODE_JS = """
() => {
  // Collapsed cells ("Show code cell source") count too: a reader opens them.
  document.querySelectorAll('.bd-article details').forEach((d) => { d.open = true; });
  return [...document.querySelectorAll('.bd-article pre')]
    .filter((pre) => pre.getClientRects().length && pre.scrollWidth > pre.clientWidth)
    .map((pre) => {
      const widest = pre.textContent.split('\\n').sort((a, b) => b.length - a.length)[0];
      return [pre.scrollWidth - pre.clientWidth, widest];
    });
}
"""


# -- copying code ---------------------------------------------------------------------------


def test_every_code_cell_has_a_copy_button_that_copies_its_code(browser, site_url, built_book):
    from helpers import recording_page

    pg = recording_page(browser, site_url, viewport={"width": 1280, "height": 900})
    try:
        pg.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=site_url)
        pg.goto(f"{site_url}/chapter/amp-training-loop.html", wait_until="networkidle")
        cells = pg.locator("div.cell_input div.highlight")
        assert cells.count() >= 3
        for i in range(cells.count()):
            assert cells.nth(i).locator("button.copybtn").count() == 1, i
        # Outputs are for reading, not copying.
        assert pg.locator("div.cell_output button.copybtn").count() == 0
        cell = cells.nth(1)
        cell.hover()
        cell.locator("button.copybtn").click()
        copied = pg.evaluate("navigator.clipboard.readText()")
        shown = cell.locator("pre").inner_text()
        assert copied.strip() == shown.strip()
        assert len(copied.strip().splitlines()) >= 1
        assert pg.console_errors == []
    finally:
        pg.context.close()


def test_copy_buttons_show_without_hover_on_a_phone_and_on_keyboard_focus(
    browser, site_url, built_book
):
    from helpers import recording_page

    phone = recording_page(
        browser, site_url, viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True
    )
    desk = recording_page(browser, site_url, viewport={"width": 1280, "height": 900})
    try:
        phone.goto(f"{site_url}/chapter/amp-training-loop.html", wait_until="load")
        opacity = "el => getComputedStyle(el).opacity"
        assert phone.locator("button.copybtn").first.evaluate(opacity) == "1"
        desk.goto(f"{site_url}/chapter/amp-training-loop.html", wait_until="load")
        button = desk.locator("button.copybtn").first
        desk.mouse.move(0, 0)
        assert button.evaluate(opacity) == "0"  # a desktop shows it on hover...
        button.focus()
        desk.keyboard.press("Shift+Tab")
        desk.keyboard.press("Tab")  # ...and when the keyboard brings focus to it
        assert desk.evaluate("document.activeElement.classList.contains('copybtn')")
        desk.wait_for_function(
            "getComputedStyle(document.activeElement).opacity === '1'", timeout=5000
        )
    finally:
        phone.context.close()
        desk.context.close()


def test_a_copied_session_leaves_out_prompts_and_output(browser, site_url, built_book):
    """sphinx-copybutton keeps only the lines after ">>> " and "... " prompts."""
    from helpers import recording_page

    pg = recording_page(browser, site_url, viewport={"width": 1280, "height": 900})
    try:
        pg.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=site_url)
        pg.goto(f"{site_url}/chapter/formats.html", wait_until="networkidle")
        # A session typed at the Python prompt, as a reader would see it in a docstring.
        pg.evaluate("""() => {
            const block = document.querySelector("div.cell_input div.highlight pre");
            block.textContent = ">>> x = 1 + 1\\n>>> print(x)\\n2";
        }""")
        cell = pg.locator("div.cell_input div.highlight").first
        cell.hover()
        cell.locator("button.copybtn").click()
        assert pg.evaluate("navigator.clipboard.readText()").strip() == "x = 1 + 1\nprint(x)"
    finally:
        pg.context.close()


# -- maths ---------------------------------------------------------------------------------


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_maths_is_set_in_the_served_maths_font(browser, site_url, built_book, theme):
    from helpers import recording_page

    pg = recording_page(browser, site_url, color_scheme=theme)
    try:
        pg.goto(f"{site_url}/chapter/formats.html", wait_until="networkidle")
        pg.evaluate("document.fonts.ready")
        family = pg.evaluate("getComputedStyle(document.querySelector('math')).fontFamily")
        assert family.startswith('"Noto Sans Math (book)"')
        faces = pg.evaluate(
            "[...document.fonts].filter(f => f.family.includes('Noto Sans Math'))"
            ".map(f => f.status)"
        )
        assert faces == ["loaded"]
        # A display equation and an inline one both draw with it.
        assert pg.evaluate("document.fonts.check('16px \"Noto Sans Math (book)\"', '\u2211\u2212')")
        for selector in ["div.math math", "span.math math"]:
            box = pg.locator(selector).first.bounding_box()
            assert box is not None, selector
            assert box["width"] > 5, selector
            assert box["height"] > 5, selector
        assert pg.console_errors == []
    finally:
        pg.context.close()


# -- icons, colours without JavaScript, tables, scrolling ----------------------------------

ICONS_JS = """
() => [...document.querySelectorAll('[class*="fa-"]')]
  .filter(el => el.getClientRects().length && getComputedStyle(el).visibility !== 'hidden')
  .map(el => {
    const before = getComputedStyle(el, '::before');
    return {cls: el.className, content: before.content, font: before.fontFamily,
            width: el.getBoundingClientRect().width};
  })
"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_themes_icons_are_drawn_from_its_web_font(browser, site_url, built_book, scheme):
    """No FontAwesome script: every visible icon is a glyph of the theme's vendored font."""
    from helpers import recording_page

    pg = recording_page(browser, site_url, color_scheme=scheme)
    requested = []
    pg.on("request", lambda r: requested.append(r.url))
    try:
        pg.goto(f"{site_url}/chapter/formats.html", wait_until="networkidle")
        pg.evaluate("document.fonts.ready")
        icons = pg.evaluate(ICONS_JS)
        assert len(icons) >= 5
        for icon in icons:
            assert icon["content"] not in ("none", "normal", '""'), icon
            assert "Font Awesome" in icon["font"], icon
            assert icon["width"] > 4, icon
        # Drawn from the book's cut-down copy (amp_book.theme.write_icon_fonts), declared after
        # the theme's own: that one loaded, the theme's full font never asked for.
        loaded = pg.evaluate(
            "[...document.fonts].filter((f) => f.family.includes('Font Awesome 7 Free')"
            " && f.weight === '900' && f.status === 'loaded').length"
        )
        assert loaded == 1
        assert [url for url in requested if "/fonts/fa-solid-900.woff" in url]
        assert not [url for url in requested if "webfonts/" in url or "fontawesome.js" in url]
        assert pg.console_errors == []
    finally:
        pg.context.close()


def test_without_javascript_the_page_keeps_its_colours_and_code_its_syntax_colours(
    browser, site_url, built_book
):
    from helpers import recording_page

    pg = recording_page(browser, site_url, java_script_enabled=False)
    try:
        pg.goto(f"{site_url}/chapter/amp-training-loop.html", wait_until="load")
        assert pg.evaluate("document.documentElement.dataset.theme") == "auto"
        primary = pg.evaluate(
            "getComputedStyle(document.documentElement).getPropertyValue('--pst-color-primary')"
        )
        assert primary.strip().startswith("#")
        colours = pg.evaluate("""() => {
            const pre = document.querySelector('div.cell_input div.highlight pre');
            const spans = [...pre.querySelectorAll('span')];
            return {
              pre: getComputedStyle(pre).color,
              tokens: [...new Set(spans.map(s => getComputedStyle(s).color))],
            };
        }""")
        # Keywords, names, numbers and strings each get their own colour.
        assert len(set(colours["tokens"]) - {colours["pre"]}) >= 3, colours
    finally:
        pg.context.close()


def test_without_javascript_a_reader_who_asks_for_dark_gets_the_dark_theme(
    browser, site_url, built_book
):
    from helpers import recording_page

    seen = {}
    for scheme in ("light", "dark"):
        pg = recording_page(browser, site_url, java_script_enabled=False, color_scheme=scheme)
        try:
            pg.goto(f"{site_url}/chapter/gradscaler.html", wait_until="load")
            assert pg.evaluate("document.documentElement.dataset.theme") == "auto"
            seen[scheme] = pg.evaluate("""() => {
                const spans = [...document.querySelectorAll('div.cell_input div.highlight pre span')];
                return {
                  background: getComputedStyle(document.body).backgroundColor,
                  text: getComputedStyle(document.querySelector('article p')).color,
                  tokens: spans.slice(0, 40).map(s => getComputedStyle(s).color).join(' '),
                  figure: getComputedStyle(document.querySelector('svg.amp-svg text')).fill,
                };
            }""")
        finally:
            pg.context.close()

    def lightness(rgb: str) -> float:
        r, g, b = (int(c) for c in rgb[rgb.index("(") + 1 : rgb.index(")")].split(",")[:3])
        return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255

    light, dark = seen["light"], seen["dark"]
    assert lightness(light["background"]) > 0.9, seen
    assert lightness(dark["background"]) < 0.2, seen
    assert lightness(dark["text"]) > 0.7, seen
    assert lightness(light["text"]) < 0.3, seen
    assert light["tokens"] != dark["tokens"], seen  # the code's dark syntax colours
    assert (light["figure"], dark["figure"]) == ("rgb(0, 0, 0)", "rgb(255, 255, 255)"), seen


def test_result_tables_align_numbers_right_and_text_left(page, site_url, built_book):
    page.goto(f"{site_url}/chapter/accumulation-equals-full-batch.html")
    cells = page.evaluate("""() => [...document.querySelectorAll('table.amp-table td')].map(td =>
        [td.className, getComputedStyle(td).textAlign, td.textContent])""")
    numbers = [c for c in cells if c[0] == "amp-number"]
    texts = [c for c in cells if c[0] == "amp-text"]
    assert numbers
    assert texts
    assert {c[1] for c in numbers} == {"right"}
    assert {c[1] for c in texts} == {"left"}
    heads = page.evaluate("""() => [...document.querySelectorAll('table.amp-table th.amp-number')]
        .map(th => getComputedStyle(th).textAlign)""")
    assert heads
    assert set(heads) == {"right"}


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_on_a_phone_wide_code_and_tables_show_that_they_scroll(
    browser, site_url, built_book, scheme
):
    """A box wider than the screen carries an edge shadow that says it scrolls."""
    from helpers import recording_page

    pg = recording_page(
        browser, site_url, viewport={"width": 390, "height": 844}, color_scheme=scheme
    )
    try:
        # A chapter page, and the landing page's loop (half of each line out of sight).
        for rel in ("chapter/accumulation-equals-full-batch.html", "index.html"):
            pg.goto(f"{site_url}/{rel}", wait_until="load")
            boxes = pg.evaluate("""() => [...document.querySelectorAll(
                    '.bd-article pre, div.cell_output .output.text_html')]
                .filter(el => el.scrollWidth > el.clientWidth + 1)
                .map(el => ({tag: el.tagName, image: getComputedStyle(el).backgroundImage,
                             attachment: getComputedStyle(el).backgroundAttachment}))""")
            assert any(b["tag"] == "PRE" for b in boxes), rel
            if rel != "index.html":
                assert any(b["tag"] == "DIV" for b in boxes)  # a result table
            for box in boxes:
                assert box["image"].count("radial-gradient") == 2, box  # a shadow at each edge
                assert box["attachment"] == "local, local, scroll, scroll", box
    finally:
        pg.context.close()


TABLES_JS = """() => [...document.querySelectorAll('article.bd-article table')]
  .filter((t) => !t.closest('details:not([open])') && t.offsetParent !== null)
  .map((t) => {
    const row = t.tHead ? t.tHead.rows[0] : t.rows[0];
    const last = row.cells[row.cells.length - 1].getBoundingClientRect();
    const box = t.parentElement.closest('.amp-scrolls');
    const cue = box && box.previousElementSibling;
    const cueShown = !!(cue && cue.classList.contains('amp-scroll-cue')
      && cue.getBoundingClientRect().height > 0 && getComputedStyle(cue).visibility === 'visible');
    return {header: row.cells[0].textContent.trim().slice(0, 30),
            fits: last.right <= window.innerWidth + 0.5,
            scrolls: !!box && box.scrollWidth > box.clientWidth, cueShown};
  })"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_on_a_phone_every_tables_last_column_is_in_view_or_a_cue_says_it_scrolls(
    browser, site_url, built_book, scheme
):
    """At 390 px, on every chapter page and the diagnose page: each table's last column is on
    screen, or the table scrolls and a visible line above it says so."""
    from helpers import recording_page

    pg = recording_page(
        browser, site_url, viewport={"width": 390, "height": 844}, color_scheme=scheme
    )
    pages = [p for p in built_pages(built_book) if p.startswith("chapter/")]
    counted = hidden = 0
    try:
        for rel in [*pages, "beyond/check-your-own-model.html"]:
            pg.goto(f"{site_url}/{rel}", wait_until="load")
            for table in pg.evaluate(TABLES_JS):
                counted += 1
                hidden += not table["fits"]
                assert table["fits"] or (table["scrolls"] and table["cueShown"]), (rel, table)
    finally:
        pg.context.close()
    assert counted > 30
    assert hidden > 0  # the cue is tested, not only tables that fit


# -- page weight -----------------------------------------------------------------------------

FIRST_LOAD_BUDGET_KB = 350


def test_a_chapter_pages_first_load_stays_within_its_budget(browser, site_url, built_book):
    """Every chapter page's first load, images aside, is at most 350 KB gzipped."""
    import gzip
    from urllib.parse import urlparse

    from helpers import recording_page

    pg = recording_page(browser, site_url)
    requests: list[Any] = []
    pg.on("request", lambda request: requests.append(request))
    # Each page's first load, not a visit after another page: no browser cache.
    cdp = pg.context.new_cdp_session(pg)
    cdp.send("Network.enable")
    cdp.send("Network.setCacheDisabled", {"cacheDisabled": True})
    weights = {}
    try:
        for rel in [p for p in built_pages(built_book) if p.startswith("chapter/")]:
            requests.clear()
            pg.goto(f"{site_url}/{rel}", wait_until="networkidle")
            by_type: dict[str, int] = {}
            for request in {r.url: r for r in requests}.values():
                if request.resource_type == "image":
                    continue
                path = built_book / (urlparse(request.url).path.lstrip("/") or "index.html")
                size = len(gzip.compress(path.read_bytes(), 6))
                by_type[request.resource_type] = by_type.get(request.resource_type, 0) + size
            weights[rel] = by_type
    finally:
        pg.context.close()
    assert len(weights) >= 10
    totals = {rel: sum(v.values()) / 1024 for rel, v in weights.items()}
    over = {rel: round(kb) for rel, kb in totals.items() if kb > FIRST_LOAD_BUDGET_KB}
    assert over == {}, weights
    assert all("script" in v and "stylesheet" in v and "document" in v for v in weights.values())


def test_search_finds_a_word_from_a_chapter_page_whose_head_loads_no_index(
    browser, site_url, built_book
):
    """The search index loads on the search page only, and a search from a chapter finds."""
    from helpers import recording_page

    head = (built_book / "chapter" / "gradscaler.html").read_text(encoding="utf-8")
    assert "searchindex.js" not in head
    assert "searchtools.js" not in head
    assert "searchindex.js" in (built_book / "search.html").read_text(encoding="utf-8")
    pg = recording_page(browser, site_url)
    try:
        pg.goto(f"{site_url}/chapter/gradscaler.html")
        pg.keyboard.press("Control+k")
        box = pg.locator("#pst-search-dialog input[name=q]")
        box.fill("GradScaler")
        box.press("Enter")
        pg.wait_for_url("**/search.html?q=GradScaler*")
        results = pg.locator("#search-results li a")
        results.first.wait_for()
        hrefs = [a.get_attribute("href") for a in results.all()]
        assert any("chapter/gradscaler.html" in h for h in hrefs), hrefs
        assert pg.console_errors == []
        assert pg.outside_requests == []
    finally:
        pg.context.close()


# -- figures that read on every screen, in both themes --------------------------------------


def test_a_figures_text_changes_colour_with_the_theme(make_page, site_url, built_book):
    colours = {}
    for scheme in ("light", "dark"):
        pg = make_page(viewport={"width": 1280, "height": 900}, color_scheme=scheme)
        pg.goto(f"{site_url}/chapter/gradscaler.html", wait_until="load")
        colours[scheme] = pg.locator("svg.amp-svg text").first.evaluate(
            "t => getComputedStyle(t).fill"
        )
    assert colours["light"] == "rgb(0, 0, 0)"
    assert colours["dark"] == "rgb(255, 255, 255)"


# -- the anchors' sites' buttons ----------------------------------------------------------


def test_every_page_offers_its_repository_source_and_an_issue(make_page, site_url, built_book):
    import os

    from amp_book.urls import repository_url

    repo = repository_url()  # as the test's build found it: no AMP_LESSON_REPOSITORY
    branch = os.environ.get("AMP_LESSON_BRANCH", "main")
    pg = make_page(viewport={"width": 1280, "height": 900})
    pg.goto(f"{site_url}/chapter/formats.html", wait_until="load")
    hrefs = pg.locator(".bd-header-article a[href]").evaluate_all(
        "links => links.map(a => a.getAttribute('href'))"
    )
    assert repo in hrefs  # the repository
    assert f"{repo}/edit/{branch}/docs/chapter/formats.md" in hrefs  # edit this page
    issue = [h for h in hrefs if h.startswith(f"{repo}/issues/new")]
    assert issue  # open an issue
    assert "chapter/formats" in issue[0]  # naming the page
    assert pg.outside_requests == []  # offered, not loaded


# -- without JavaScript, search says what it needs -----------------------------------------


def test_without_javascript_search_says_it_needs_javascript(browser, site_url, built_book):
    from helpers import recording_page

    pg = recording_page(browser, site_url, java_script_enabled=False)
    try:
        pg.goto(f"{site_url}/search.html?q=GradScaler", wait_until="load")
        note = pg.locator(".amp-search-needs-js")
        assert note.is_visible()
        assert "Search needs JavaScript" in note.inner_text()
        assert note.get_by_role("link", name="the glossary").is_visible()
        assert pg.get_by_text("Error", exact=True).count() == 0
        assert not pg.locator("article form.bd-search").is_visible()  # no box that cannot search
    finally:
        pg.context.close()


# -- the whole book, as one page and one PDF ----------------------------------------------


def test_the_whole_book_is_one_page_whose_links_all_resolve(built_book):
    """print.html: the reading path's pages in order, every link inside it finding its target,
    every other link absolute to the hosted book, nothing loaded from elsewhere."""
    import re

    from amp_book.urls import documentation_url

    text = (built_book / "print.html").read_text(encoding="utf-8")
    sections = re.findall(r'<section class="amp-print-page" id="([^"]+)"', text)
    assert sections[0] == "index"
    assert sections[-2:] == ["corrections", "references"]  # the print book ends with them
    assert "chapter-start" in sections
    assert "beyond-ddp-accumulation" in sections
    assert not [s for s in sections if s.startswith(("api-", "guide-"))]
    ids = set(re.findall(r'\bid="([^"]+)"', text))
    internal = set(re.findall(r'href="#([^"]+)"', text))
    assert len(internal) > 100
    assert internal - ids == set()  # every link within the book finds its target
    named = {
        ref
        for refs in re.findall(
            r'(?<![\w-])(?:aria-labelledby|aria-describedby|aria-controls|for|headers)="([^"]*)"',
            text,
        )
        for ref in refs.split()
    }
    assert named  # the self-checks' and playgrounds' labels...
    assert named - ids == set()  # ...still name their elements
    assert len(ids) == len(re.findall(r'\bid="', text))  # and no id is there twice
    for target in re.findall(r'(?:href|src)="([^"#][^"]*)"', text):
        assert not target.startswith(("http://127.", "file:")), target
        if target.startswith("http"):
            continue
        assert (built_book / target.split("?")[0]).is_file(), target  # local files exist
    assert documentation_url() in text
    assert "<script" not in text  # it needs none


SCROLLERS_JS = """() => [...document.querySelectorAll('.amp-print-book *')].filter((el) => {
  const style = getComputedStyle(el);
  return (el.scrollWidth > el.clientWidth + 1 && /auto|scroll/.test(style.overflowX))
    || (el.scrollHeight > el.clientHeight + 1 && /auto|scroll/.test(style.overflowY));
}).map((el) => ({
  what: el.tagName + '.' + [...el.classList].join('.'),
  tabindex: el.tabIndex,
  role: el.getAttribute('role'),
  name: el.getAttribute('aria-label') || '',
}))"""


@pytest.mark.parametrize("width", [390, 1280])
def test_the_whole_book_pages_scrolling_boxes_are_reached_by_keyboard(
    make_page, site_url, built_book, width
):
    """print.html runs no script, so its boxes that scroll sideways carry their own tab stop
    and a name (a region); its code wraps instead of scrolling. axe-core's
    scrollable-region-focusable rule finds nothing, on a phone or a desktop."""
    from install_axe import axe_script

    axe = axe_script()
    pg = make_page(viewport={"width": width, "height": 900})
    pg.goto(f"{site_url}/print.html", wait_until="load")
    pg.evaluate("document.fonts.ready.then(() => true)")
    scrollers = pg.evaluate(SCROLLERS_JS)
    assert not [s for s in scrollers if s["what"].startswith("PRE")]  # code wraps
    unreachable = [s for s in scrollers if s["tabindex"] < 0 or not s["name"]]
    assert unreachable == []
    assert all(s["role"] == "region" for s in scrollers), scrollers[:5]
    if width == 390:
        assert len(scrollers) > 10  # wide tables and equations scroll on a phone
    if axe is None:
        if os.environ.get("CI"):
            pytest.fail("axe-core is not installed; run `python tools/install_axe.py`")
        return
    pg.add_script_tag(path=str(axe))
    found = pg.evaluate(
        """async () => (await axe.run(document, {runOnly: {type: 'rule',
             values: ['scrollable-region-focusable']}})).violations
             .map((v) => v.nodes.length + ' ' + v.id)"""
    )
    assert found == []
    assert pg.console_errors == []


def test_the_pdf_is_built_linked_and_served(make_page, site_url, built_book, report):
    import re

    from amp_book import printbook

    index = (built_book / "index.html").read_text(encoding="utf-8")
    assert 'href="print.html"' in index  # the one-page book is linked by every build
    if 'href="amp-lesson.pdf"' not in index:
        assert not printbook.can_print()  # a build that could print, prints
        assert not (built_book / printbook.PDF).exists()  # and none links nothing
        pytest.skip("no Chromium here: the build links the one-page book only")
    pdf = built_book / printbook.PDF
    assert pdf.stat().st_mtime >= (built_book / printbook.PRINT_PAGE).stat().st_mtime
    data = pdf.read_bytes()
    assert data.startswith(b"%PDF-")
    pages = len(re.findall(rb"/Type\s*/Page\b", data))
    assert pages > 100  # the whole book, not a page of it
    assert b"/Outlines" in data  # bookmarks: a reader jumps to a chapter
    assert b"/StructTreeRoot" in data  # tagged: a screen reader reads its structure
    assert b"file://" not in data  # no link to the machine that built it
    pg = make_page(viewport={"width": 1280, "height": 900})
    pg.goto(f"{site_url}/index.html", wait_until="load")
    link = pg.locator("p.amp-book-downloads a[href='amp-lesson.pdf']")
    assert link.count() == 1
    assert pg.locator("p.amp-book-downloads a[href='print.html']").count() == 1
    response = pg.request.get(f"{site_url}/amp-lesson.pdf")
    assert response.status == 200
    assert response.body()[:5] == b"%PDF-"
    report("the PDF", f"{pdf.stat().st_size / 1e6:.1f} MB")
