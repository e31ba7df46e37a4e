"""Finding one's way in a real Chromium: the sidebar drawer and the page's contents on a
phone, the sidebar toggle on a desktop, and search results that show the pages' words."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import any_edition, page_of

pytestmark = pytest.mark.browser

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}
PAGE = "chapter/formats.html"


def _is_open(pg: Any, dialog_id: str) -> bool:
    return pg.evaluate(f"document.getElementById('{dialog_id}').open")


def test_on_a_phone_the_drawer_opens_and_leads_to_another_page(
    make_page: Any, site_url: str
) -> None:
    pg = make_page(viewport=PHONE, is_mobile=True, has_touch=True)
    pg.goto(f"{site_url}/{PAGE}")
    pg.wait_for_load_state("networkidle")
    sidebar = pg.locator("#pst-primary-sidebar")
    assert not sidebar.is_visible()  # at phone width the navigation lives in the drawer
    toggle = pg.locator(".primary-toggle")
    assert toggle.count() == 1
    assert toggle.is_visible()
    assert not _is_open(pg, "pst-primary-sidebar-modal")

    toggle.click()
    assert _is_open(pg, "pst-primary-sidebar-modal")
    drawer = pg.locator("#pst-primary-sidebar-modal")
    link = drawer.get_by_role("link", name="GradScaler", exact=True)
    assert link.is_visible()
    assert drawer.get_by_role("link", name="Review", exact=True).is_visible()
    link.click()
    pg.wait_for_url(any_edition(site_url, "chapter/gradscaler.html"))
    assert "GradScaler" in pg.locator("h1").first.inner_text()
    assert not _is_open(pg, "pst-primary-sidebar-modal")  # a new page starts closed

    # Escape closes the drawer again.
    pg.locator(".primary-toggle").click()
    assert _is_open(pg, "pst-primary-sidebar-modal")
    pg.keyboard.press("Escape")
    assert not _is_open(pg, "pst-primary-sidebar-modal")
    assert pg.console_errors == []
    assert pg.outside_requests == []


def test_on_a_phone_the_contents_open_and_take_the_reader_to_a_section(
    make_page: Any, site_url: str
) -> None:
    pg = make_page(viewport=PHONE, is_mobile=True, has_touch=True)
    pg.goto(f"{site_url}/{PAGE}")
    pg.wait_for_load_state("networkidle")
    toggle = pg.locator(".secondary-toggle")
    assert toggle.count() == 1
    assert toggle.is_visible()
    toggle.click()
    assert _is_open(pg, "pst-secondary-sidebar-modal")
    contents = pg.locator("#pst-secondary-sidebar-modal")
    links = contents.locator("nav a.nav-link")
    assert links.count() >= 4
    target = links.nth(2)
    href = target.get_attribute("href")
    assert href.startswith("#")
    target.click()
    pg.wait_for_function(f"location.hash === {href!r}")
    assert not _is_open(pg, "pst-secondary-sidebar-modal")  # the reader sees the section
    heading = pg.locator(f"[id='{href[1:]}']")
    box = heading.bounding_box()
    assert box is not None
    assert 0 <= box["y"] < PHONE["height"]
    assert pg.console_errors == []


def test_on_a_desktop_the_sidebar_toggle_hides_and_shows_the_navigation(
    make_page: Any, site_url: str
) -> None:
    pg = make_page(viewport=DESKTOP)
    pg.goto(f"{site_url}/{PAGE}")
    pg.wait_for_load_state("networkidle")
    link = pg.locator("#pst-primary-sidebar").get_by_role("link", name="GradScaler", exact=True)
    hidden = (
        "document.getElementById('pst-primary-sidebar').classList.contains('pst-sidebar-hidden')"
    )
    assert link.is_visible()
    pg.locator(".primary-toggle").click()
    pg.wait_for_function(hidden)
    link.wait_for(state="hidden", timeout=5000)  # after the theme's slide-out
    pg.locator(".primary-toggle").click()
    pg.wait_for_function(f"!({hidden})")
    link.wait_for(state="visible", timeout=5000)
    assert not _is_open(pg, "pst-primary-sidebar-modal")  # collapsed in place, no drawer
    assert pg.console_errors == []


# -- search -------------------------------------------------------------------------------

CONTRAST_OF = """
(el) => {
  const rgb = (s) => (s.match(/[\\d.]+/g) || []).map(Number);
  const lum = ([r, g, b]) => {
    const f = (c) => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  };
  let back = el;
  for (; back; back = back.parentElement) {
    const c = rgb(getComputedStyle(back).backgroundColor);
    if (c.length === 3 || (c.length === 4 && c[3] > 0)) break;
  }
  const a = lum(rgb(getComputedStyle(el).color).slice(0, 3));
  const b = lum(back ? rgb(getComputedStyle(back).backgroundColor).slice(0, 3) : [255, 255, 255]);
  return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
}
"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_search_results_show_the_pages_words_with_a_readable_highlight(
    make_page: Any, site_url: str, scheme: str
) -> None:
    pg = make_page(viewport=DESKTOP, color_scheme=scheme)
    pg.goto(f"{site_url}/search.html?q=mantissa")
    pg.wait_for_selector("#search-results ul.search li")
    pg.wait_for_load_state("networkidle")
    pg.wait_for_function(
        "document.querySelectorAll('#search-results ul.search li p.context').length > 0"
    )
    summaries = pg.locator("#search-results ul.search li p.context")
    texts = [summaries.nth(i).inner_text() for i in range(summaries.count())]
    assert any("mantissa" in text.lower() for text in texts)
    for text in texts:
        assert "System Settings" not in text, text  # the theme menu's words
        assert "Light Dark" not in text, text
        assert "Ctrl+K" not in text.replace(" ", ""), text
        assert "amp_lesson 0." not in text, text  # the provenance line under each title
        assert "minutes with the exercises" not in text, text  # nor the reading time
    marks = pg.locator("#search-results span.highlighted")
    assert marks.count() > 0
    ratios = [marks.nth(i).evaluate(CONTRAST_OF) for i in range(min(marks.count(), 10))]
    assert min(ratios) >= 4.5, ratios
    assert pg.console_errors == []
    assert pg.outside_requests == []


def test_every_page_names_a_favicon_that_is_served(make_page: Any, site_url: str) -> None:
    pg = make_page(viewport=DESKTOP)
    pg.goto(f"{site_url}/{PAGE}")
    href = pg.evaluate("document.querySelector('link[rel~=\"icon\"]').href")
    response = pg.request.get(href)
    assert response.status == 200
    assert "svg" in response.headers["content-type"]


# -- search: the learner's pages first, snippets from prose, a clear box -------------------

RESULTS_JS = """() => [...document.querySelectorAll('#search-results ul.search li')].map((li) => [
  li.querySelector('a').getAttribute('href'),
  (li.querySelector('p.context') || {textContent: ''}).textContent,
])"""


def _search(pg: Any, site_url: str, query: str) -> list[list[str]]:
    pg.goto(f"{site_url}/search.html?q={query}")
    pg.wait_for_selector("#search-results ul.search li")
    # Sphinx adds the results one by one, then says how many it found
    pg.wait_for_function(
        "(document.querySelector('#search-results .search-summary') || {}).textContent"
        "?.startsWith('Search finished')"
    )
    return pg.evaluate(RESULTS_JS)


def _is_reference(href: str) -> bool:
    return href.startswith(("api/", "guide/"))


@pytest.mark.parametrize(
    ("query", "expected_first"),
    [("GradScaler", "chapter/gradscaler.html"), ("no_sync", "beyond/ddp-accumulation.html")],
)
def test_search_ranks_the_learners_pages_above_the_reference(
    make_page: Any, site_url: str, query: str, expected_first: str
) -> None:
    pg = make_page(viewport=DESKTOP)
    results = _search(pg, site_url, query)
    hrefs = [href for href, _ in results]
    kinds = [_is_reference(h) for h in hrefs]
    assert False in kinds, hrefs  # learner's pages matched...
    assert True in kinds, hrefs  # ...and reference pages
    assert kinds == sorted(kinds), hrefs  # every learner's page before any reference page
    assert hrefs[0].startswith(expected_first), hrefs[:5]
    for _, snippet in results:
        assert "amp_lesson 0." not in snippet  # the provenance line under each title
        for glued in ("FalseFalse", "TrueTrue", "FalseTrue", "TrueFalse"):
            assert glued not in snippet, snippet  # table cells run together
    assert pg.console_errors == []


@pytest.mark.parametrize(
    ("query", "expected_first"),
    [
        # the page named for the query, above every page with "scaling" in some heading
        ("loss scaling", "chapter/loss-scaling-by-hand.html"),
        # the page whose section is named for both words ("Clipping before unscale_")
        ("unscale_ clip", "beyond/gradscaler-failure-modes.html"),
        ("GradScaler", "chapter/gradscaler.html"),
    ],
)
def test_search_puts_a_page_whose_title_holds_the_query_first(
    make_page: Any, site_url: str, query: str, expected_first: str
) -> None:
    pg = make_page(viewport=DESKTOP)
    results = _search(pg, site_url, query)
    hrefs = [href.split("#")[0] for href, _ in results]
    assert hrefs[0] == expected_first, hrefs[:6]
    # every page whose title holds every word of the query comes before every other page
    titles = pg.evaluate(
        "() => [...document.querySelectorAll('#search-results ul.search li a')].map(a => a.textContent)"
    )
    words = query.lower().replace("_", " ").split()
    stems = [w[:5] for w in words]  # "scaling" and "scale", "clip" and "clipping"
    named = [all(s in t.lower() for s in stems) for t in titles]
    learner = [not _is_reference(h) for h in hrefs]
    firsts = [n for n, mine in zip(named, learner, strict=True) if mine]
    assert firsts == sorted(firsts, reverse=True), list(zip(titles, named, strict=True))[:8]
    assert pg.console_errors == []


@pytest.mark.parametrize(
    ("query", "expected_first"),
    [
        # no title holds every word: the page that teaches them together comes first, by
        # how often it says each (amp_book.searchweights), not by its name in the alphabet
        ("gradscaler gradient accumulation", "chapter/recipe.html"),
        ("pytorch amp gradscaler gradient accumulation", "chapter/recipe.html"),
        ("gradscaler", "chapter/gradscaler.html"),
    ],
)
def test_search_ranks_the_page_that_teaches_the_query_first(
    make_page: Any, site_url: str, query: str, expected_first: str
) -> None:
    pg = make_page(viewport=DESKTOP)
    hrefs = [href.split("#")[0] for href, _ in _search(pg, site_url, query)]
    assert hrefs[0] == expected_first, hrefs[:8]
    assert not [h for h in hrefs if h.startswith("guide/")], hrefs  # no authors' page
    assert pg.console_errors == []


@pytest.mark.parametrize("where", ["page", "dialog"])
def test_the_search_boxs_magnifier_sits_beside_the_query(
    make_page: Any, site_url: str, where: str
) -> None:
    pg = make_page(viewport=DESKTOP)
    if where == "page":
        pg.goto(f"{site_url}/search.html?q=GradScaler")
        form = pg.locator(".bd-search-container form.bd-search")
    else:
        pg.goto(f"{site_url}/{PAGE}")
        pg.wait_for_load_state("networkidle")
        pg.keyboard.press("Control+k")
        form = pg.locator("#pst-search-dialog form.bd-search")
        form.locator("input").fill("GradScaler")
    icon = form.locator(".fa-magnifying-glass").bounding_box()
    field = form.locator("input")
    text_starts = field.evaluate(
        "el => el.getBoundingClientRect().left + parseFloat(getComputedStyle(el).paddingLeft)"
    )
    assert icon is not None
    assert icon["x"] + icon["width"] <= text_starts, (icon, text_starts)
    assert pg.console_errors == []


# -- the reading path ---------------------------------------------------------------------


def test_next_walks_the_learners_path_to_the_references_and_stops(
    make_page: Any, site_url: str
) -> None:
    pg = make_page(viewport=DESKTOP)
    pg.goto(f"{site_url}/index.html")
    visited = []
    for _ in range(60):
        visited.append(page_of(pg.url.removeprefix(site_url + "/")))
        following = pg.locator("a.right-next")
        if following.count() == 0:
            break
        following.click()
        pg.wait_for_load_state("load")
    assert visited[0] == "index.html"
    assert visited[-2:] == ["corrections.html", "references.html"]  # the path ends here
    assert "glossary.html" in visited
    assert not [v for v in visited if v.startswith(("api/", "guide/"))]
    assert len(visited) >= 20
    # and the reference pages are reached from their own entries in the sidebar
    sidebar = pg.locator("#pst-primary-sidebar")
    assert sidebar.get_by_role("link", name="API reference", exact=True).is_visible()
    # the authors' guide is reached from the README and CONTRIBUTING, not from a reader's page
    assert sidebar.get_by_role("link", name="Writing for the book", exact=True).count() == 0
    assert sidebar.get_by_role("link", name="Every wording of every claim").count() == 0
    # the API reference's first page leads nowhere back onto the learner's path
    pg.goto(f"{site_url}/api/index.html")
    assert pg.locator("a.left-prev").count() == 0
    assert pg.console_errors == []
