"""The code a reader sees on a page is code they would type: bookkeeping stays in hidden cells."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import DOCS, FRONT_MATTER

from amp_lesson.sphinxext.pages import read_text

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
    """(line, source) of each code cell whose input the reader sees, as the build reads the page."""
    return [
        (cell.line, cell.source)
        for cell in read_text(text).code_cells
        if not HIDDEN & set(cell.tags)
    ]


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
    top = FRONT_MATTER.count("\n")
    page = FRONT_MATTER + (
        "```{code-cell} ipython3\nx = 1\nglue('x', x)\n```\n\n"
        "```{code-cell} ipython3\n:tags: [remove-cell]\nglue('y', 2)\n```\n\n"
        # hidden by a YAML option block, and a four-backtick fence: the old regex saw neither
        "```{code-cell} ipython3\n---\ntags: [remove-input]\n---\nglue('z', 3)\n```\n\n"
        "````{code-cell} ipython3\nglue('w', 4)\n````\n"
    )
    assert [line for line, body in visible_cells(page) if "glue(" in body] == [top + 1, top + 18]
