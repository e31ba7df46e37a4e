"""The start page's map of the chapter matches the chapter's table of contents."""

from __future__ import annotations

import re

from helpers import DOCS

WORDS = {
    "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14,
    "fifteen": 15, "sixteen": 16,
}  # fmt: skip


def _chapter_pages() -> list[str]:
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    for block in index.split("```{toctree}")[1:]:
        body = block.split("```", 1)[0]
        if ":caption: The chapter" in body:
            return [line.strip() for line in body.splitlines() if line.strip()[:1].isalpha()]
    raise AssertionError("docs/index.md has no toctree captioned 'The chapter'")


def test_the_start_page_lists_every_later_chapter_page_in_order() -> None:
    pages = _chapter_pages()
    assert pages[0] == "chapter/start"
    later = [p.removeprefix("chapter/") for p in pages[1:]]
    text = (DOCS / "chapter" / "start.md").read_text(encoding="utf-8")
    section = text.split("## What the chapter teaches", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^\d+\. \{doc\}`([\w-]+)`", section, re.MULTILINE)
    assert listed == later
    assert not re.search(r"\b(\w+) pages follow", section)  # no count typed beside the list
