"""Every page of the built book in a real Chromium: loads cleanly, loads nothing from outside."""

from __future__ import annotations

import pytest
from helpers import built_pages

pytestmark = pytest.mark.browser


def test_every_page_loads_without_errors_or_outside_requests(page, site_url, built_book):
    pages = built_pages(built_book)
    assert "index.html" in pages
    for rel in pages:
        page.goto(f"{site_url}/{rel}", wait_until="load")
        page.wait_for_load_state("networkidle")
        assert page.locator("h1").count() >= 1, rel
    assert page.console_errors == []
    assert page.outside_requests == []


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


def test_no_page_scrolls_sideways_on_a_phone(browser, site_url, built_book):
    """At 390 px wide, wide content scrolls in its own box; the page itself does not."""
    from helpers import recording_page

    pg = recording_page(browser, site_url, viewport={"width": 390, "height": 844})
    wide = {}
    try:
        for rel in built_pages(built_book):
            pg.goto(f"{site_url}/{rel}", wait_until="load")
            scroll, client = pg.evaluate(
                "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
            )
            if scroll > client:
                wide[rel] = scroll - client
    finally:
        pg.context.close()
    assert wide == {}
