"""The pages talk to the reader: the lesson in front, the book's machinery behind.

Counted on the built pages (what a reader reads, glued sentences included) and on the
pages' sources (the code a reader sees).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from bs4 import BeautifulSoup
from helpers import DOCS

from amp_book.pages import read_page

LEARNER_PAGES = sorted(
    p.relative_to(DOCS).with_suffix("").as_posix()
    for folder in ("chapter", "beyond")
    for p in (DOCS / folder).glob("*.md")
)
BUILD_TALK = re.compile(r"\bthis (?:run|build)\b", re.IGNORECASE)
MOST_BUILD_TALK = 3
"""At most this many "this run"/"this build" on a page: only where the outcome is the device's."""

# A cell calls the PyTorch the pages teach: a torch function or class, a functional op, a
# module, backward, an optimizer's or a scaler's method, a cast, or a tensor's dtype or grad.
PYTORCH = re.compile(
    r"\btorch\.(?!float|bfloat|half|device\b)[\w.]+\(|\btorch\.amp\.GradScaler\b|\bF\.\w+\("
    r"|\bnn\.\w+\(|\.backward\(|\boptimizer\.\w+\(|\bscaler\.\w+\(|\.half\(\)|\.to\("
    r"|\btorch\.finfo\b|\.grad\b|\.dtype\b"
)


def _article_text(html: Path) -> str:
    soup = BeautifulSoup(html.read_text(encoding="utf-8"), "html.parser")
    article = soup.select_one("article")
    for node in article.select("script, style, div.highlight"):
        node.decompose()  # code is not prose
    return " ".join(article.get_text(" ").split())


@pytest.mark.book
def test_pages_talk_to_the_reader_not_about_the_build(built_book: Path) -> None:
    counts = {}
    for doc in LEARNER_PAGES:
        text = _article_text(built_book / f"{doc}.html")
        counts[doc] = len(BUILD_TALK.findall(text))
        assert "the lesson says" not in text.lower(), f"{doc}: argues with slides never shown"
    over = {doc: n for doc, n in counts.items() if n > MOST_BUILD_TALK}
    assert not over, f"'this run'/'this build' more than {MOST_BUILD_TALK} times: {over}"
    assert sum(counts.values()) > 0  # the device's outcomes are still said to be the device's


def _visible_code(doc: str) -> list[str]:
    cells = read_page(DOCS / f"{doc}.md").cells
    hidden = {"remove-cell", "remove-input", "hide-input"}
    return [
        c.source for c in cells if c.kind == "code" and not hidden & set(c.metadata.get("tags", []))
    ]


def test_every_chapter_page_opens_with_pytorch_and_most_cells_show_it() -> None:
    chapter = [doc for doc in LEARNER_PAGES if doc.startswith("chapter/")]
    first_not = [doc for doc in chapter if not PYTORCH.search(_visible_code(doc)[0])]
    assert not first_not, f"the first code a reader sees is not PyTorch: {first_not}"
    cells = [source for doc in chapter for source in _visible_code(doc)]
    calling = sum(bool(PYTORCH.search(source)) for source in cells)
    assert 2 * calling >= len(cells), f"{calling} of {len(cells)} visible cells show PyTorch"


def test_the_pytorch_pattern_tells_pytorch_from_the_books_helpers() -> None:
    assert PYTORCH.search("with torch.autocast('cpu'):\n    y = model(x)")
    assert PYTORCH.search("scaler.scale(loss).backward()")
    assert not PYTORCH.search("rows = op_dtypes(torch.float16, device=device)\nTable(rows)")
