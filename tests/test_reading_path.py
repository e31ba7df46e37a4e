"""The chapter a student finishes: its main path's length, its stated times, nothing of the book.

Counted on the built site, as a reader gets it: the words of a page's article that are on
its main path (no Going deeper block, no code, no cell output, no self-check, no line under
the title), an inline code span or formula as one word. The count is made here on the HTML,
apart from the build's own count on the doctree, so the estimates each page states are
checked against what the reader is shown.
"""

from __future__ import annotations

import json
import math
import re
import zipfile
from pathlib import Path

import pytest
from bs4 import BeautifulSoup, Tag
from helpers import DOCS

from amp_book.pageinfo import (
    CODE_CELL_MINUTES,
    ROUND_TO_MINUTES,
    SELF_CHECK_MINUTES,
    WORDS_PER_MINUTE,
)

pytestmark = pytest.mark.book

CHAPTER_WORDS = 15_000
"""The chapter's main path, at most (its prose was 28,300 words as rendered before)."""
PAGE_WORDS = {"recipe": 2_000}
"""Pages with a target of their own."""

_WORD = re.compile(r"[^\W_]+(?:['\u2019-][^\W_]+)*")
NOT_MAIN = (
    "details.amp-deeper, div.cell_output, div.cell_input, div.highlight, pre, div.math, "
    "math[display=block], .sc, .amp-page-info, .amp-provenance, .amp-edition-line, "
    ".amp-playground, a.headerlink, script, style, .amp-scroll-cue"
)


def chapter_pages() -> list[str]:
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    return re.findall(r"^chapter/([\w-]+)$", index, re.MULTILINE)


def _article(built: Path, page: str) -> Tag:
    soup = BeautifulSoup((built / page).read_text(encoding="utf-8"), "html.parser")
    article = soup.select_one("article.bd-article")
    assert article is not None, page
    return article


def main_path(article: Tag) -> tuple[int, int, int]:
    """(words, self-checks, code cells that show their code) on the main path of ``article``."""
    checks = sum(1 for sc in article.select(".sc") if not sc.find_parent("details", "amp-deeper"))
    cells = sum(
        1
        for cell in article.select("div.cell")
        if cell.select_one("div.cell_input") and not cell.find_parent("details", "amp-deeper")
    )
    article = BeautifulSoup(str(article), "html.parser")
    for node in article.select(NOT_MAIN):
        node.decompose()
    for node in article.select("code, math"):  # one word each
        node.replace_with(" x ")
    return len(_WORD.findall(article.get_text(" "))), checks, cells


def _minutes(words: int, checks: int, cells: int) -> int:
    exact = words / WORDS_PER_MINUTE + checks * SELF_CHECK_MINUTES + cells * CODE_CELL_MINUTES
    return math.ceil(exact / ROUND_TO_MINUTES) * ROUND_TO_MINUTES


def test_the_chapter_and_the_recipe_stay_within_their_main_path_words(
    built_book: Path, report
) -> None:
    words = {p: main_path(_article(built_book, f"chapter/{p}.html"))[0] for p in chapter_pages()}
    report("Main-path words per chapter page", ", ".join(f"{p} {n}" for p, n in words.items()))
    report("Main-path words, chapter", str(sum(words.values())))
    assert len(words) == 14
    for page, limit in PAGE_WORDS.items():
        assert words[page] <= limit, (page, words[page])
    assert sum(words.values()) <= CHAPTER_WORDS, words


def test_each_page_states_the_time_its_main_path_takes_and_the_totals_add_up(
    built_book: Path,
) -> None:
    stated = {}
    for page in chapter_pages():
        article = _article(built_book, f"chapter/{page}.html")
        line = article.select_one(".amp-page-info-time")
        assert line is not None, page
        found = re.fullmatch(r"About (\d+) minutes( with the exercises)?", line.get_text())
        assert found, (page, line.get_text())
        words, checks, cells = main_path(article)
        assert int(found[1]) == _minutes(words, checks, cells), (page, words, checks, cells)
        assert bool(found[2]) == bool(checks), page
        stated[page] = int(found[1])
    total = sum(stated.values())
    hours, rest = divmod(total, 60)
    said = "about " + " ".join(
        [f"{hours} hour{'s' if hours > 1 else ''}"] * bool(hours) + [f"{rest} minutes"] * bool(rest)
    )
    for page in ("index.html", "chapter/start.html"):
        totals = _article(built_book, page).select(".amp-reading-time")
        assert totals, f"{page} states no total"
        assert {t.get_text() for t in totals} == {said}, page


def _reader_pages(built: Path) -> list[Path]:
    pages = [built / "index.html", *sorted((built / "chapter").glob("*.html"))]
    return pages + sorted((built / "beyond").glob("*.html"))


def test_no_page_opens_on_the_switch_and_no_article_talks_about_the_build(
    built_book: Path,
) -> None:
    forbidden = re.compile(r"built this page|this build|\.json\b|nvidia-h200", re.IGNORECASE)
    found = []
    for path in _reader_pages(built_book):
        soup = BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")
        article = soup.select_one("article.bd-article")
        switch = soup.select_one(".amp-edition-line")
        heading = article.find("h1") if article else None
        if switch is not None and heading is not None:
            assert heading in switch.find_all_previous("h1"), f"{path.name}: switch above the title"
        for node in article.select("script, style, .amp-edition-line"):
            node.decompose()
        found += [f"{path.relative_to(built_book)}: {m}" for m in
                  forbidden.findall(article.get_text(" "))]  # fmt: skip
    assert not found


def test_the_authors_guide_is_in_no_readers_navigation_search_or_zip(built_book: Path) -> None:
    for path in _reader_pages(built_book):
        soup = BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")
        nav = soup.select("nav.bd-docs-nav a, .bd-sidenav a, .prev-next-area a, .bd-header a")
        assert not [a["href"] for a in nav if "guide/" in a.get("href", "")], path.name
    text = (built_book / "searchindex.js").read_text(encoding="utf-8")
    index = json.loads(text[text.index("(") + 1 : text.rindex(")")])
    guide = {i for i, d in enumerate(index["docnames"]) if d.startswith("guide/")}
    assert guide
    assert "chapter/recipe" in index["docnames"]
    for kind in ("terms", "titleterms"):
        hits = {
            i for docs in index[kind].values() for i in ([docs] if isinstance(docs, int) else docs)
        }
        assert not hits & guide, f"a guide page is found through the search's {kind}"
    assert not [t for t, found in index["alltitles"].items() if {f[0] for f in found} & guide]
    with zipfile.ZipFile(built_book / "amp-lesson-notebooks.zip") as archive:
        names = archive.namelist()
    assert "amp-lesson/chapter/recipe.ipynb" in names
    assert not [n for n in names if "/guide/" in n]
    assert (built_book / "guide" / "index.html").is_file()  # built, for its authors
