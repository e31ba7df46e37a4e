"""The line under each chapter page's title: a reading time computed from the page, and what it assumes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from bs4 import BeautifulSoup
from docutils import nodes
from helpers import DOCS, build_in_process

from amp_book.deeper import deeper
from amp_book.pageinfo import (
    CODE_CELL_MINUTES,
    ROUND_TO_MINUTES,
    SELF_CHECK_MINUTES,
    WORDS_PER_MINUTE,
    ReadingTime,
    ReadingTimes,
    doctree_reading_time,
)

CHAPTER = sorted((DOCS / "chapter").glob("*.md"))


def _words(n: int) -> str:
    return " ".join(["word"] * n) + "\n\n"


# -- the computation -----------------------------------------------------------------------


def test_prose_is_read_at_the_rate_and_rounded_up_to_whole_steps() -> None:
    assert ReadingTime(WORDS_PER_MINUTE - 1, 0, 0).minutes == ROUND_TO_MINUTES
    five_minutes = ROUND_TO_MINUTES * WORDS_PER_MINUTE
    assert ReadingTime(five_minutes, 0, 0).minutes == ROUND_TO_MINUTES  # exactly 5: not 10
    assert ReadingTime(five_minutes + 1, 0, 0).minutes == 2 * ROUND_TO_MINUTES


def test_a_self_check_and_a_visible_code_cell_add_their_allowances() -> None:
    time = ReadingTime(words=40, self_checks=2, code_cells=3)
    exact = 40 / WORDS_PER_MINUTE + 2 * SELF_CHECK_MINUTES + 3 * CODE_CELL_MINUTES
    assert time.minutes == ROUND_TO_MINUTES * -(-exact // ROUND_TO_MINUTES)
    assert time.minutes == 10  # 7 minutes and a few words, rounded up


def _cell(*, shown: bool, output: str) -> nodes.container:
    """A code cell as MyST-NB puts it in the doctree: its input (unless hidden), its output."""
    cell = nodes.container(classes=["cell"])
    if shown:
        code = nodes.literal_block("x = 1 + 1", "x = 1 + 1")
        cell += nodes.container("", code, classes=["cell_input"])
    cell += nodes.container("", nodes.paragraph(output, output), classes=["cell_output"])
    return cell


def test_code_cells_count_when_their_code_shows_and_their_output_is_no_prose() -> None:
    document = nodes.section()
    document += nodes.paragraph("Three words here.", "Three words here.")
    document += _cell(shown=True, output="many words of output that nobody counts")
    document += _cell(shown=False, output="the provenance line")
    block = deeper(title="Later")
    block += _cell(shown=True, output="out")
    block += nodes.paragraph("Deep words.", "Deep words.")
    document += block
    assert doctree_reading_time(document) == ReadingTime(words=3, self_checks=0, code_cells=1)


def _reading(tmp_path: Path, body: str) -> ReadingTime:
    """The reading time the build stores for a page ``p`` of ``body``."""
    from sphinx.testing.util import SphinxTestApp

    src = _book(tmp_path, {"p": "# P\n\n```{page-info}\n```\n\n" + body})
    app = SphinxTestApp("html", srcdir=src, builddir=tmp_path / "out", confoverrides={
        "extensions": [*EXTENSIONS, "amp_book.deeper", "amp_book.selfcheck"],
        "myst_enable_extensions": ["colon_fence", "dollarmath"],
        "source_suffix": {".rst": "restructuredtext"}})  # fmt: skip
    try:
        app.build()
        return ReadingTimes.store(app.env)["p"]
    finally:
        app.cleanup()


def test_only_main_path_prose_is_counted_as_words(tmp_path: Path) -> None:
    body = (
        "(a-target)=\n"
        "One {doc}`Three more words <index>` and `code` and $x^2$.\n\n"
        "```python\nnot = prose + at * all\n```\n\n"
        "$$\ny = mx + b\n$$\n\n"
        "% a comment, not shown\n\n"
        "| a | b |\n|---|---|\n| cell | cell |\n\n"
        ":::{deeper} A derivation\nEvery one of these words is off the main path.\n:::\n\n"
        ":::{deeper} Opened\n:::\n\nSo are these.\n\n- and these\n\n:::{deeper-end}\n:::\n\n"
        ":::{selfcheck-discuss} Why is a question not counted?\n:hint: Its allowance.\n:::\n"
    )
    time = _reading(tmp_path, body)
    # P, One, Three more words, and, code, and, maths, the table's a, b, cell, cell
    assert (time.words, time.self_checks, time.code_cells) == (1 + 8 + 4, 1, 0)


# -- the chapter's pages -------------------------------------------------------------------


@pytest.mark.parametrize("page", CHAPTER, ids=lambda p: p.stem)
def test_every_chapter_page_states_its_reading_time_right_under_its_provenance(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    after = text.split("provenance()\n```\n", 1)
    assert len(after) == 2, f"{page.name}: no provenance cell"
    assert after[1].lstrip().startswith("```{page-info}\n:assumes: "), (
        f"{page.name}: the page-info line must follow the provenance cell"
    )


def test_each_chapter_page_assumes_only_pages_that_come_before_it() -> None:
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    order = re.findall(r"^chapter/([\w-]+)$", index, re.MULTILINE)
    assert sorted(order) == sorted(p.stem for p in CHAPTER)
    for page in CHAPTER:
        text = page.read_text(encoding="utf-8")
        info = re.search(r"```\{page-info\}\n:assumes: (.*)\n```", text)
        assert info, page.name
        assumed = re.findall(r"\{doc\}`(?:[^`<]*<)?([\w/.-]+?)>?`", info[1])
        here = order.index(page.stem)
        for name in assumed:
            assert order.index(name) < here, f"{page.stem} assumes {name}, which comes later"
        assert assumed or page.stem == order[0], f"{page.stem} assumes no page"


# -- the directive, in a small book ---------------------------------------------------------


EXTENSIONS = ["myst_parser", "amp_book.pageinfo"]


def _book(tmp_path: Path, pages: dict[str, str]) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text("", encoding="utf-8")
    toctree = "".join(f"{name}\n" for name in pages)
    (src / "index.md").write_text(f"# Book\n\n```{{toctree}}\n{toctree}```\n", encoding="utf-8")
    for name, body in pages.items():
        (src / f"{name}.md").parent.mkdir(parents=True, exist_ok=True)
        (src / f"{name}.md").write_text(body, encoding="utf-8")
    return src


def test_the_directive_renders_the_computed_time_and_links_the_assumed_pages(
    tmp_path: Path,
) -> None:
    later = (
        "# Later\n\n"
        "```{page-info}\n:assumes: {doc}`first`, and some patience\n```\n\n"
        + _words(1500)
        + ":::{note}\nNothing.\n:::\n"
    )
    src = _book(tmp_path, {"first": "# First steps\n\nText.\n", "later": later})
    html = build_in_process(src, tmp_path / "out", EXTENSIONS).outdir
    soup = BeautifulSoup((html / "later.html").read_text(encoding="utf-8"), "html.parser")
    (line,) = soup.select("p.amp-page-info")
    expected = ReadingTime(1500 + 5, 0, 0).minutes  # Later, the words, Nothing, Assumes: no
    assert expected == 10  # 1500 words and a few, no self-check
    assert line.select_one(".amp-page-info-time").get_text() == f"About {expected} minutes"
    assumes = line.select_one(".amp-page-info-assumes")
    assert assumes.get_text() == "Assumes: First steps, and some patience"
    assert assumes.select_one("a")["href"] == "first.html"


def test_a_page_with_exercises_says_so_and_one_that_assumes_nothing_says_nothing(
    tmp_path: Path,
) -> None:
    page = "# P\n\n```{page-info}\n```\n\nSome text.\n\n:::{selfcheck-discuss} Why?\n:::\n"
    src = _book(tmp_path, {"p": page})
    html = build_in_process(src, tmp_path / "out", [*EXTENSIONS, "amp_book.selfcheck"]).outdir
    soup = BeautifulSoup((html / "p.html").read_text(encoding="utf-8"), "html.parser")
    (line,) = soup.select("p.amp-page-info")
    assert line.get_text() == "About 5 minutes with the exercises"
    assert line.select_one(".amp-page-info-assumes") is None


def test_a_page_that_is_not_in_the_book_fails_the_build_and_says_which(tmp_path: Path) -> None:
    src = _book(
        tmp_path,
        {
            "a": "# A\n\n```{page-info}\n:assumes: {doc}`formtas`\n```\n\nText.\n",
            "b": "# B\n\n```{page-info}\n:assumes: {doc}`b`\n```\n\nText.\n",
        },
    )
    proc = build_in_process(src, tmp_path / "out", EXTENSIONS, check=False)
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "page-info: :assumes: names 'formtas', which is no page of the book" in log
    assert "page-info: :assumes: names this page itself ('b')" in log


def test_a_total_is_the_sum_of_the_times_the_pages_state(tmp_path: Path) -> None:
    pages = {
        "chapter/a": "# A\n\n```{page-info}\n```\n\n" + _words(1100),
        "chapter/b": "# B\n\n```{page-info}\n```\n\n" + _words(3000),
        "other": "# O\n\nThe chapter takes {reading-time}`chapter`.\n",
    }
    src = _book(tmp_path, pages)
    html = build_in_process(src, tmp_path / "out", EXTENSIONS).outdir
    stated = []
    for name in ("chapter/a", "chapter/b"):
        soup = BeautifulSoup((html / f"{name}.html").read_text(encoding="utf-8"), "html.parser")
        stated.append(int(soup.select_one(".amp-page-info-time").get_text().split()[1]))
    assert stated == [10, 20]  # 1100 and 3000 words and the title, rounded up
    other = BeautifulSoup((html / "other.html").read_text(encoding="utf-8"), "html.parser")
    assert other.select_one(".amp-reading-time").get_text() == "about 30 minutes"


def test_a_total_of_an_unknown_scope_fails_the_build_and_names_it(tmp_path: Path) -> None:
    src = _book(tmp_path, {"p": "# P\n\nTakes {reading-time}`chapters`.\n"})
    proc = build_in_process(src, tmp_path / "out", EXTENSIONS, check=False)
    assert proc.returncode != 0
    assert "reading-time: 'chapters' is no scope; use one of ['chapter']" in proc.stderr


def test_a_page_that_states_the_total_is_written_again_when_another_page_changes(
    tmp_path: Path,
) -> None:
    pages = {
        "chapter/a": "# A\n\n```{page-info}\n```\n\n" + _words(100),
        "other": "# O\n\nThe chapter takes {reading-time}`chapter`.\n",
    }
    src = _book(tmp_path, pages)

    def total() -> str:
        html = build_in_process(src, tmp_path / "out", EXTENSIONS).outdir
        soup = BeautifulSoup((html / "other.html").read_text(encoding="utf-8"), "html.parser")
        return soup.select_one(".amp-reading-time").get_text()

    assert total() == "about 5 minutes"
    (src / "chapter" / "a.md").write_text(pages["chapter/a"] + _words(2000), encoding="utf-8")
    assert total() == "about 15 minutes"  # other.md itself did not change
