"""The line under each chapter page's title: a reading time computed from the page, and what it assumes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from bs4 import BeautifulSoup
from helpers import DOCS, FRONT_MATTER, build_in_process

from amp_book.pageinfo import (
    CODE_CELL_MINUTES,
    ROUND_TO_MINUTES,
    SELF_CHECK_MINUTES,
    WORDS_PER_MINUTE,
    ReadingTime,
    reading_minutes,
    reading_time,
)

CHAPTER = sorted((DOCS / "chapter").glob("*.md"))


def _cell(source: str, tags: str = "") -> str:
    tag_line = f":tags: [{tags}]\n" if tags else ""
    return f"```{{code-cell}} ipython3\n{tag_line}{source}\n```\n\n"


def _words(n: int) -> str:
    return " ".join(["word"] * n) + "\n\n"


# -- the computation -----------------------------------------------------------------------


def test_prose_is_read_at_the_rate_and_rounded_up_to_whole_steps() -> None:
    assert reading_minutes("# A\n\n" + _words(WORDS_PER_MINUTE - 1)) == ROUND_TO_MINUTES
    five_minutes = ROUND_TO_MINUTES * WORDS_PER_MINUTE
    assert reading_minutes(_words(five_minutes)) == ROUND_TO_MINUTES  # exactly 5: not 10
    assert reading_minutes(_words(five_minutes + 1)) == 2 * ROUND_TO_MINUTES
    assert reading_time(_words(123)).words == 123


def test_a_self_check_and_a_visible_code_cell_add_their_allowances() -> None:
    check = ":::{selfcheck-discuss} Why?\n:hint: Think.\n:::\n\n"
    page = FRONT_MATTER + "# A\n\n" + check * 2 + _cell("1 + 1") * 3
    time = reading_time(page)
    assert (time.self_checks, time.code_cells) == (2, 3)
    exact = time.words / WORDS_PER_MINUTE + 2 * SELF_CHECK_MINUTES + 3 * CODE_CELL_MINUTES
    assert time.minutes == ROUND_TO_MINUTES * -(-exact // ROUND_TO_MINUTES)
    assert time.minutes == 10  # 7 minutes and a few words, rounded up


def test_hidden_cells_count_nothing_and_folded_ones_count() -> None:
    page = (
        FRONT_MATTER
        + "# A\n\n"
        + _cell("provenance()", "remove-input")
        + _cell("glue('x', 1)", "remove-cell")
        + _cell("solution()", "hide-input")
        + _cell("shown()")
    )
    assert reading_time(page).code_cells == 2


def test_only_prose_is_counted_as_words() -> None:
    page = (
        FRONT_MATTER + "# Two words\n\n"
        "(a-target)=\n"
        "One {glue:text}`key` and {doc}`Three more words <other>` and `code` and $x^2$.\n\n"
        "```python\nnot = prose + at * all\n```\n\n"
        "$$\ny = mx + b\n$$\n\n"
        "% a comment, not shown\n\n"
        "```{literalinclude} ../src/file.py\n:language: python\n```\n\n"
        "| a | b |\n|---|---|\n| cell | cell |\n\n" + _cell("x = 1 " * 100)
    )
    # 2 + (One, role, and, Three more words, and, code, and, maths) + table (a, b, cell, cell)
    assert reading_time(page).words == 2 + 10 + 4


def test_directive_bodies_are_prose_but_not_their_options() -> None:
    page = (
        "# T\n\n"
        "::::{dropdown} Open me\n"
        ":open:\n\n"
        ":::{selfcheck-predict} What now?\n"
        ":id: predict-one\n"
        ":answer: A long answer that is not counted as prose words at all.\n\n"
        "An explanation of five.\n"
        ":::\n"
        "::::\n"
    )
    time = reading_time(page)
    # T, Open me, What now, An explanation of five: the nested self-check is found too
    assert (time.words, time.self_checks) == (1 + 2 + 2 + 4, 1)


def test_bad_input_is_refused_with_a_message_that_says_what_to_pass() -> None:
    with pytest.raises(TypeError, match="source of a page as a str, got bytes"):
        reading_minutes(b"# A page")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"got \w*Path; read the file first"):
        reading_minutes(DOCS / "chapter" / "formats.md")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=re.escape("not its file name: got 'docs/chapter/x.md'")):
        reading_minutes("docs/chapter/x.md")
    with pytest.raises(ValueError, match="holds nothing to read"):
        reading_minutes("")
    with pytest.raises(ValueError, match="holds nothing to read"):
        reading_minutes(FRONT_MATTER + _cell("setup()", "remove-cell") + "(target)=\n")


def test_a_reading_time_is_a_whole_number_of_rounding_steps() -> None:
    for words, checks, cells in [(1, 0, 0), (0, 1, 0), (0, 0, 1), (4000, 7, 12)]:
        minutes = ReadingTime(words, checks, cells).minutes
        assert minutes > 0
        assert minutes % ROUND_TO_MINUTES == 0


# -- the chapter's pages -------------------------------------------------------------------


@pytest.mark.parametrize("page", CHAPTER, ids=lambda p: p.stem)
def test_every_chapter_page_states_its_reading_time_right_under_its_provenance(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    after = text.split("provenance()\n```\n", 1)
    assert len(after) == 2, f"{page.name}: no provenance cell"
    assert after[1].lstrip().startswith("```{page-info}\n:assumes: "), (
        f"{page.name}: the page-info line must follow the provenance cell"
    )
    assert 0 < reading_minutes(text) <= 90


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
    expected = reading_minutes(later)
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
