"""Every box that checks a common statement against a run is on one page, linked both ways."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from bs4 import BeautifulSoup
from helpers import DOCS, build_in_process, built_soup, live_pages

from amp_book.corrections import TITLE

CORRECTIONS_PAGE = "corrections.html"
# A box is read on the corrections page, away from its own: it states the claim it checks
# itself, and points at nothing around it ("the table above").
LEANS_ON_ITS_PAGE = re.compile(r"\bThe lesson says\b|\babove\b", re.IGNORECASE)


def _soup(path: Path) -> BeautifulSoup:
    return built_soup(path)


def _boxes_on_pages(html: Path) -> dict[str, list[str]]:
    """Page -> ids of its correction boxes, for every page but the one that gathers them."""
    found = {}
    for page in live_pages(html):
        if page == CORRECTIONS_PAGE:
            continue
        ids = [box["id"] for box in _soup(html / page).select("article div.lesson-correction")]
        if ids:
            found[page] = ids
    return found


@pytest.mark.book
def test_the_corrections_page_lists_every_box_and_links_back(built_book: Path) -> None:
    on_pages = _boxes_on_pages(built_book)
    assert sum(map(len, on_pages.values())) >= 10, on_pages  # the chapter's boxes at least
    listed = _soup(built_book / CORRECTIONS_PAGE).select("article div.lesson-correction")
    back_links = [box.select_one("p.lesson-correction-back a")["href"] for box in listed]
    expected = [f"{page}#{box_id}" for page, ids in on_pages.items() for box_id in ids]
    assert sorted(back_links) == sorted(expected)
    for link in back_links:  # each back link lands on its box
        page, anchor = link.split("#")
        assert _soup(built_book / page).find(id=anchor) is not None, link
    for box in listed:  # each box reads on its own, away from its page
        text = " ".join(box.get_text(" ").split())
        assert not LEANS_ON_ITS_PAGE.search(text), text


def test_no_page_writes_a_correction_box_by_hand() -> None:
    """A hand-made admonition would be left off the corrections page; use the directive."""
    by_hand = re.compile(
        r"\{admonition\}\s*(?:Where the lesson|" + re.escape(TITLE) + ")", re.IGNORECASE
    )
    pages = [p for p in DOCS.rglob("*.md") if "_build" not in p.parts]
    offenders = [p.name for p in pages if by_hand.search(p.read_text(encoding="utf-8"))]
    assert offenders == []


EXTENSIONS = ["myst_parser", "amp_book.corrections"]


def test_a_box_added_to_any_page_appears_on_the_list(tmp_path: Path) -> None:
    """In a small book built in parallel, boxes from two pages are listed in reading order."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text("")
    (src / "index.md").write_text("# Book\n\n```{toctree}\nb\na\nlist\n```\n", encoding="utf-8")
    for name, claim in (("a", "Alpha"), ("b", "Beta")):
        (src / f"{name}.md").write_text(
            f"# Page {name}\n\n(sec-{name})=\n## Part\n\n"
            f":::{{lesson-correction}} {claim}\n"
            f"A common statement: {claim}; see {{ref}}`sec-{name}`.\n:::\n",
            encoding="utf-8",
        )
    (src / "list.md").write_text("# All\n\n```{lesson-corrections}\n```\n", encoding="utf-8")
    html = build_in_process(src, tmp_path / "out", EXTENSIONS, parallel=2).outdir
    listed = _soup(html / "list.html").select("div.lesson-correction")
    titles = [box.select_one("p.admonition-title").get_text() for box in listed]
    assert titles == [f"{TITLE}: Beta", f"{TITLE}: Alpha"]
    assert "lesson" not in TITLE.lower()  # the reader never saw a lesson's slides
    ref = listed[0].select_one("a.reference.internal")
    assert ref["href"] == "b.html#sec-b"  # a {ref} in a copied box resolves from the list page
    back = listed[0].select_one("p.lesson-correction-back a")["href"]
    page, anchor = back.split("#")
    assert page == "b.html"
    assert _soup(html / page).find(id=anchor).select_one("p.admonition-title") is not None


def test_a_box_without_a_body_fails_the_build(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text("")
    (src / "index.md").write_text("# Book\n\n:::{lesson-correction}\n:::\n", encoding="utf-8")
    proc = build_in_process(src, tmp_path / "out", EXTENSIONS, check=False)
    assert proc.returncode != 0
    assert "lesson-correction needs a body" in proc.stdout + proc.stderr
