"""The code a reader sees on a page is code they would type: bookkeeping stays in hidden cells."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import DOCS

CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(?P<body>.*?)^```", re.MULTILINE | re.DOTALL)
TAGS = re.compile(r"^:tags:\s*\[(?P<tags>[^\]]*)\]", re.MULTILINE)
HIDDEN = {"remove-cell", "remove-input"}
# Gluing values into the prose and binding claims is the book's bookkeeping; printing a
# function's source as plain text is what a highlighted {literalinclude} is for.
BOOKKEEPING = {
    "glue(": "a glue call",
    "from myst_nb": "an import of myst_nb",
    "claim(": "a claim",
    "getsource(": "printed source text",
}


def pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)


def visible_cells(text: str) -> list[tuple[int, str]]:
    """(line, body) of each code cell whose input the reader sees."""
    cells = []
    for match in CELL.finditer(text):
        body = match["body"]
        tags = TAGS.search(body[:400])
        if tags and HIDDEN & {t.strip() for t in tags["tags"].split(",")}:
            continue
        cells.append((text[: match.start()].count("\n") + 1, body))
    return cells


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_visible_cells_hold_no_bookkeeping(page: Path) -> None:
    found = [
        f"line {line}: {what}"
        for line, body in visible_cells(page.read_text(encoding="utf-8"))
        for needle, what in BOOKKEEPING.items()
        if needle in body
    ]
    assert found == [], "move these into a cell tagged remove-cell:\n" + "\n".join(found)


def test_the_check_sees_a_visible_glue_and_ignores_a_hidden_one() -> None:
    page = (
        "```{code-cell} ipython3\nx = 1\nglue('x', x)\n```\n\n"
        "```{code-cell} ipython3\n:tags: [remove-cell]\nglue('y', 2)\n```\n"
    )
    assert [line for line, _ in visible_cells(page) if "glue(" in _] == [1]
