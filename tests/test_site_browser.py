"""Every page of the built book in a real Chromium: loads cleanly, loads nothing from outside."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.browser


def _pages(html: Path) -> list[str]:
    skip = {"genindex.html", "search.html"}
    return sorted(
        p.relative_to(html).as_posix()
        for p in html.rglob("*.html")
        if p.name not in skip and "_static" not in p.parts and "_sources" not in p.parts
    )


def test_every_page_loads_without_errors_or_outside_requests(page, site_url, built_book):
    pages = _pages(built_book)
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
