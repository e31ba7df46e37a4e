"""The shared page reader (:mod:`amp_book.pages`) reads a page as the build does.

Where the hand-written scanners disagreed (a fence of four backticks, a
``:::`` fence, a ``---`` option block, a page without notebook front matter),
the reader is held to what the build itself reads: MyST-NB's reader with the
book's own MyST settings from ``docs/conf.py``. No book is built.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import runpy
from pathlib import Path
from typing import Any

import pytest
from helpers import DOCS

from amp_book.pages import (
    Cell,
    code_cell_lines,
    has_code_cells,
    read_page,
    read_text,
)

FRONT = "---\nfile_format: mystnb\nkernelspec: {name: python3, display_name: Python 3}\n---\n"
TOP = FRONT.count("\n")  # the front matter's lines: a page's line n is TOP + n of its body


@functools.cache
def _book_config() -> Any:
    """The MyST settings the book's build parses with (``myst_*`` of docs/conf.py)."""
    from myst_parser.config.main import MdParserConfig

    conf = runpy.run_path(str(DOCS / "conf.py"))
    names = {f.name for f in dataclasses.fields(MdParserConfig)}
    return MdParserConfig(
        **{k.removeprefix("myst_"): v for k, v in conf.items() if k.removeprefix("myst_") in names}
    )


def build_cells(text: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(kind, source, metadata) of each cell the build reads in ``text``; [] if no notebook.

    As MyST-NB's Sphinx parser does: a Markdown page is a notebook only with
    notebook front matter, and is then read with the book's MyST settings.
    """
    from myst_nb.core.read import is_myst_markdown_notebook, read_myst_markdown_notebook

    if not is_myst_markdown_notebook(text):
        return []
    nb = read_myst_markdown_notebook(text, _book_config(), add_source_map=True)
    return [(c.cell_type, c.source, dict(c.metadata)) for c in nb.cells]


def reader_cells(text: str) -> list[tuple[str, str, dict[str, Any]]]:
    page = read_text(text)
    return [(c.kind, c.source, c.metadata) for c in page.cells] if page.is_notebook else []


def body_line(cell: Cell) -> int:
    return cell.line - TOP


# -- where the old scanners disagreed ---------------------------------------------------------

FOUR_BACKTICKS = FRONT + (
    "# Four backticks\n"  # 1
    "\n"
    "````{code-cell} ipython3\n"  # 3: a fence that can hold a ``` fence
    ":tags: [remove-input]\n"
    "text = '''\n"
    "```\n"
    "'''\n"
    "````\n"
    "\n"
    "After the cell.\n"  # 10
)


def test_a_four_backtick_fence_is_one_code_cell_with_the_inner_fence_in_its_source() -> None:
    page = read_text(FOUR_BACKTICKS)
    assert page.is_notebook
    assert [c.kind for c in page.cells] == ["markdown", "code", "markdown"]
    first, cell, after = page.cells
    assert cell.source == "text = '''\n```\n'''"
    assert cell.tags == ("remove-input",)
    assert [body_line(c) for c in page.cells] == [1, 3, 10]
    assert (first.source, after.source) == ("# Four backticks", "After the cell.")
    assert reader_cells(FOUR_BACKTICKS) == build_cells(FOUR_BACKTICKS)
    # the regex tests/test_pages.py used saw no cell here, and cut one at an inner ``` fence
    old = re.compile(r"^```\{code-cell\}[^\n]*\n(?P<body>.*?)^```", re.MULTILINE | re.DOTALL)
    assert not old.search(FOUR_BACKTICKS)


COLON_FENCE = FRONT + (
    "# Colon fence\n"  # 1
    "\n"
    ":::{code-cell} ipython3\n"  # 3
    "x = 1\n"
    ":::\n"
)


def test_a_colon_fence_is_no_code_cell_for_myst_nb() -> None:
    """MyST-NB takes cells from backtick (or tilde) fences only: ``:::{code-cell}`` never runs.

    The build's own check (``_CODE_CELL`` in book.py) counted it as a cell; the
    reader, like the build's execution, finds none.
    """
    page = read_text(COLON_FENCE)
    assert page.is_notebook
    assert page.code_cells == ()
    assert [(c.kind, body_line(c)) for c in page.cells] == [("markdown", 1)]
    assert page.markdown == "# Colon fence\n\n:::{code-cell} ipython3\nx = 1\n:::"
    assert reader_cells(COLON_FENCE) == build_cells(COLON_FENCE)
    assert code_cell_lines(COLON_FENCE) == ()


YAML_OPTIONS = FRONT + (
    "# Options\n"  # 1
    "\n"
    "```{code-cell} ipython3\n"  # 3
    "---\n"
    "tags: [remove-cell, hide-output]\n"
    "mystnb:\n"
    "  figure:\n"
    "    caption: 'A caption: with a colon'\n"
    "    name: fig-x\n"
    "---\n"
    "import math\n"
    "```\n"
    "\n"
    '+++ {"tags": ["remove-cell"]}\n'
    "\n"
    "A hidden paragraph.\n"  # 16
)


def test_a_yaml_option_block_is_the_cells_metadata_not_its_source() -> None:
    page = read_text(YAML_OPTIONS)
    assert [c.kind for c in page.cells] == ["markdown", "code", "markdown"]
    _, cell, hidden = page.cells
    assert cell.source == "import math"
    assert cell.tags == ("remove-cell", "hide-output")
    assert cell.metadata["mystnb"] == {
        "figure": {"caption": "A caption: with a colon", "name": "fig-x"}
    }
    assert cell.first_line == "import math"
    assert (hidden.source, hidden.tags) == ("A hidden paragraph.", ("remove-cell",))
    assert [body_line(c) for c in page.cells] == [1, 3, 16]
    assert reader_cells(YAML_OPTIONS) == build_cells(YAML_OPTIONS)


NO_NOTEBOOK = (
    "---\n"
    "kernelspec: {name: python3, display_name: Python 3}\n"  # a kernelspec alone: no notebook
    "---\n"
    "# Not a notebook\n"
    "\n"
    "```{code-cell} ipython3\n"  # 6
    "1 + 1\n"
    "```\n"
)


def test_a_page_without_notebook_front_matter_has_no_cells(tmp_path: Path) -> None:
    page = read_text(NO_NOTEBOOK)
    assert not page.is_notebook
    assert page.metadata == {}
    assert page.cells == (Cell("markdown", NO_NOTEBOOK, 1),)
    assert page.code_cells == ()
    assert build_cells(NO_NOTEBOOK) == []
    path = tmp_path / "page.md"
    path.write_text(NO_NOTEBOOK, encoding="utf-8")
    assert not has_code_cells(path)  # the build runs none of it ...
    assert code_cell_lines(NO_NOTEBOOK) == (6,)  # ... though it is written as a cell


def test_front_matter_is_the_pages_metadata_and_a_tilde_fence_a_cell() -> None:
    text = FRONT + "~~~{code-cell} ipython3\nx = 1\n~~~\n"
    page = read_text(text)
    assert page.metadata["kernelspec"] == {"name": "python3", "display_name": "Python 3"}
    assert page.metadata["file_format"] == "mystnb"
    assert [(c.kind, c.source, body_line(c)) for c in page.cells] == [("code", "x = 1", 1)]
    assert reader_cells(text) == build_cells(text)


NESTED = FRONT + (":::{note}\nA note.\n\n```{code-cell} ipython3\nx = 1\n```\n:::\n")


def test_a_code_cell_inside_a_colon_directive_is_read_as_the_build_reads_it() -> None:
    assert build_cells(NESTED) == [("markdown", NESTED.removeprefix(FRONT).strip(), {})]
    assert reader_cells(NESTED) == build_cells(NESTED)


def test_the_reader_enables_the_extensions_the_book_enables() -> None:
    from amp_book.pages import BOOK_EXTENSIONS

    conf = runpy.run_path(str(DOCS / "conf.py"))
    assert sorted(conf["myst_enable_extensions"]) == sorted(BOOK_EXTENSIONS)


# -- the book's own pages ---------------------------------------------------------------------

CODE_CELL_FENCE = re.compile(r"^(`{3,}|~{3,})\{code-cell\}")


def book_pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)


@pytest.mark.parametrize("path", book_pages(), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_every_cell_of_a_page_is_where_its_line_says(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    page = read_page(path)
    for cell in page.code_cells:
        assert CODE_CELL_FENCE.match(lines[cell.line - 1]), (cell.line, cell.first_line)
    for cell in page.cells:
        if cell.kind == "markdown" and cell.source:
            assert lines[cell.line - 1] == cell.source.splitlines()[0], cell.line
    assert reader_cells(text) == build_cells(text)
    assert code_cell_lines(text) == tuple(c.line for c in page.code_cells)


def test_the_book_has_pages_with_code_cells_and_option_blocks() -> None:
    """The per-page test above is not vacuous: the book has such cells, with YAML options."""
    cells = [c for p in book_pages() for c in read_page(p).code_cells]
    assert len(cells) > 100
    assert any("mystnb" in c.metadata for c in cells)
    assert any("remove-cell" in c.tags for c in cells)
