"""The code a reader sees on a page is code they would type: bookkeeping stays in hidden cells.

And every chapter page shows a result as a figure, or says in its source why it has none.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import DOCS, FRONT_MATTER

from amp_book.pages import read_text

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


@pytest.mark.parametrize("source", pages(), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_visible_cells_hold_no_bookkeeping(source: Path) -> None:
    found = [
        f"line {line}: {what}"
        for line, body in visible_cells(source.read_text(encoding="utf-8"))
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


# A figure: a code cell that draws with Matplotlib or one of the book's plotting helpers, or a
# figure directive in the text. A page without one says why near its top.
PLOTTING = re.compile(r"\bplt\.\w+\(|\bplot_\w+\(|\bconcept_map\(")
FIGURE_DIRECTIVE = re.compile(r"^\s*(?:`{3,}|:{3,})\{(?:figure|glue:figure)\}", re.MULTILINE)
NO_FIGURE = re.compile(r"^% no figure: \S", re.MULTILINE)


def figure_or_reason(text: str) -> str | None:
    """How the page ``text`` meets the rule: "figure", "reason", or None when it does not."""
    page = read_text(text)
    if any(PLOTTING.search(cell.source) for cell in page.code_cells):
        return "figure"
    if FIGURE_DIRECTIVE.search(page.markdown):
        return "figure"
    if NO_FIGURE.search(page.markdown):
        return "reason"
    return None


# Not "page": that is Playwright's fixture, and conftest.py would mark the test a browser test.
@pytest.mark.parametrize(
    "source", sorted((DOCS / "chapter").glob("*.md")), ids=lambda p: p.relative_to(DOCS).as_posix()
)
def test_every_chapter_page_has_a_figure_or_says_why_not(source: Path) -> None:
    assert figure_or_reason(source.read_text(encoding="utf-8")) is not None, (
        f"{source.relative_to(DOCS)} draws no figure: draw a result that is a trend or a "
        "comparison (a code cell that plots, or a {figure} / {glue:figure}), or say why the "
        "page has none in a comment near its top: % no figure: <reason>"
    )


def test_the_figure_check_tells_a_figure_from_a_reason_and_from_neither() -> None:
    plot = "```{code-cell} ipython3\n:tags: [remove-cell]\nfig = concept_map(boxes, [])\n```\n"
    lines = "```{code-cell} ipython3\nplot_lines({'a': [1, 2]})\nplt.show()\n```\n"
    glued = "```{glue:figure} concept_map\n:alt: A map.\n\nA caption.\n```\n"
    table = "```{code-cell} ipython3\nTable(rows)  # plt. is not a call\n```\n"
    assert figure_or_reason(FRONT_MATTER + "# A\n\n" + plot) == "figure"
    assert figure_or_reason(FRONT_MATTER + "# A\n\n" + lines) == "figure"
    assert figure_or_reason(FRONT_MATTER + "# A\n\n" + glued) == "figure"
    assert figure_or_reason(FRONT_MATTER + "# A\n\n% no figure: one run.\n\n" + table) == "reason"
    assert figure_or_reason(FRONT_MATTER + "# A\n\n" + table) is None
    # a reason needs words, and a plotting call inside a literal block in the text is not a cell
    assert figure_or_reason(FRONT_MATTER + "# A\n\n% no figure:\n\n" + table) is None
    assert figure_or_reason(FRONT_MATTER + "# A\n\n```python\nplt.show()\n```\n") is None


# What each chapter page teaches of PyTorch's API, as patterns that a visible cell must run: a
# reader learns PyTorch by seeing it, so no chapter page hides it behind the book's package.
# (The recipe page shows its loop with a {literalinclude} of the function its cell runs.)
TEACHES = {
    "start": [r"\.backward\(", r"\.step\(", r"\.zero_grad\("],
    "formats": [r"torch\.finfo\(", r"\.to\(torch\.float16\)"],
    "why-mixed-precision": [r"torch\.autocast\(", r"\.grad\.dtype", r"exp_avg"],
    "underflow": [r"torch\.float16|\.half\(\)", r"\.grad\b"],
    "loss-scaling-by-hand": [r"\*\s*S\b", r"\.backward\(", r"\.grad\.float\(\)\s*/\s*S"],
    "gradscaler": [
        r"torch\.amp\.GradScaler\(",
        r"scaler\.scale\(",
        r"scaler\.step\(",
        r"scaler\.update\(",
    ],
    "autocast": [r"torch\.autocast\(", r"\.dtype\b"],
    "amp-training-loop": [
        r"torch\.autocast\(",
        r"scaler\.scale\(",
        r"scaler\.step\(",
        r"scaler\.update\(",
    ],
    "memory": [r"torch\.autocast\(", r"element_size\(\)", r"exp_avg_sq"],
    "why-accumulate": [r"\.backward\(", r"\.grad\b"],
    "accumulation-equals-full-batch": [r"loss\w*\s*/\s*\w+", r"\.backward\(", r"\.step\("],
    "recipe": [
        r"train_mixed_precision\(",
        r"torch\.optim\.",
        r"scheduler=",
        r"on_step=",
        r"with watch\(",
    ],
    "your-turn": [r"torch\.autocast\(", r"scaler\.scale\("],
    "review": [r"torch\.autocast\(", r"\.backward\("],
}


def test_every_chapter_page_is_taught_and_none_is_missed() -> None:
    chapter = {p.stem for p in (DOCS / "chapter").glob("*.md")}
    assert set(TEACHES) == chapter


@pytest.mark.parametrize("name", sorted(TEACHES))
def test_each_chapter_page_runs_the_pytorch_it_teaches_in_a_visible_cell(name: str) -> None:
    text = (DOCS / "chapter" / f"{name}.md").read_text(encoding="utf-8")
    shown = "\n".join(source for _, source in visible_cells(text))
    missing = [pattern for pattern in TEACHES[name] if not re.search(pattern, shown)]
    assert missing == [], f"{name}: no visible cell runs {missing}"
