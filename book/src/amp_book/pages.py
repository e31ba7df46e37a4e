"""One reader of the book's MyST pages: front matter and cells, as MyST-NB reads them.

The build, the notebook export, the page checks and the tests all need a
page's cells: which pages run code, what a cell imports, which cell a kernel
died in. Each reading them with its own regular expression, they disagreed at
the edges (a fence of four backticks, a ``:::`` fence, a directive option block).
So they all read a page here, with MyST-NB's own reader
(:func:`myst_nb.core.read.read_myst_markdown_notebook`, which the build uses
to execute the page), and agree with the build by construction.

>>> page = read_text('''---
... file_format: mystnb
... kernelspec: {name: python3, display_name: Python 3}
... ---
... # A page
...
... ```{code-cell} ipython3
... :tags: [remove-input]
... import amp_lesson.formats
... ```
... ''')
>>> page.is_notebook, [c.kind for c in page.cells]
(True, ['markdown', 'code'])
>>> cell = page.code_cells[0]
>>> cell.source, cell.tags, cell.line
('import amp_lesson.formats', ('remove-input',), 7)
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Cell:
    """One cell of a page: ``kind`` is ``"code"``, ``"markdown"`` or ``"raw"``.

    ``line`` is the page's line (from 1) where the cell begins: for a code
    cell, its ``{code-cell}`` fence.
    """

    kind: str
    source: str
    line: int
    metadata: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def tags(self) -> tuple[str, ...]:
        return tuple(self.metadata.get("tags", ()))

    @property
    def first_line(self) -> str:
        """The cell's first line that is not blank (for naming the cell in a message)."""
        return next((ln.strip() for ln in self.source.splitlines() if ln.strip()), "")


@dataclass(frozen=True)
class Page:
    """A page: its front matter, and its cells if it is a notebook (else one markdown cell)."""

    path: Path | None
    is_notebook: bool
    metadata: dict[str, Any]
    cells: tuple[Cell, ...]

    @property
    def code_cells(self) -> tuple[Cell, ...]:
        return tuple(c for c in self.cells if c.kind == "code")

    @property
    def markdown(self) -> str:
        """The page's Markdown cells, joined (the page's text but for its code cells)."""
        return "\n".join(c.source for c in self.cells if c.kind == "markdown")


BOOK_EXTENSIONS = ("amsmath", "colon_fence", "deflist", "dollarmath")
"""The MyST extensions the book enables (``myst_enable_extensions`` in ``docs/conf.py``).

They decide where a directive or a maths block ends, and so which fences are cells.
"""


@functools.cache
def _config() -> Any:
    from myst_parser.config.main import MdParserConfig

    return MdParserConfig(enable_extensions=set(BOOK_EXTENSIONS))


@functools.cache
def markdown_parser() -> Any:
    r"""markdown-it with the book's MyST syntax, as MyST-Parser builds it for the build.

    Its tokens carry each block's lines (``token.map``): a directive is a ``fence`` or a
    ``colon_fence`` whose ``info`` is ``{name} argument``, a ``(label)=`` line a
    ``myst_target``, a ``%`` line a ``myst_line_comment``.

    >>> [(t.type, t.map) for t in markdown_parser().parse("(x)=\n# T\n") if t.level == 0][:2]
    [('myst_target', [0, 1]), ('heading_open', [1, 2])]
    """
    from markdown_it.renderer import RendererHTML
    from myst_parser.parsers.mdit import create_md_parser

    return create_md_parser(_config(), RendererHTML)


def read_text(text: str, path: str | Path | None = None) -> Page:
    """The page whose MyST source is ``text`` (``path`` only names it)."""
    from myst_nb.core.read import is_myst_markdown_notebook, read_myst_markdown_notebook

    where = None if path is None else Path(path)
    if not is_myst_markdown_notebook(text):
        return Page(where, False, {}, (Cell("markdown", text, 1),))
    nb = read_myst_markdown_notebook(
        text, _config(), add_source_map=True, path=str(path) if path else None
    )
    starts = list(nb.metadata.pop("source_map", []))
    cells = []
    for index, cell in enumerate(nb.cells):
        # MyST-NB's map: a code cell's fence line (from 1); the line a Markdown cell starts
        # after (the previous fence's end), whose blank lines its text does not keep.
        start = starts[index] if index < len(starts) else 0
        if cell.cell_type != "code":
            start += 1 + _leading_blank_lines(cell.source, text, start + 1)
        cells.append(Cell(cell.cell_type, cell.source, start, dict(cell.metadata)))
    return Page(where, True, dict(nb.metadata), tuple(cells))


def _leading_blank_lines(source: str, text: str, start: int) -> int:
    """How many blank lines of the page precede a Markdown cell's text (it starts after them)."""
    lines = text.splitlines()
    skipped = 0
    while start - 1 + skipped < len(lines) and not lines[start - 1 + skipped]:
        skipped += 1
    return skipped if source.strip() else 0


def read_notebook(notebook: dict[str, Any], path: str | Path | None = None) -> Page:
    """The page a Jupyter notebook (its JSON, as a dict) holds; ``path`` only names it.

    A stored edition's pages are notebooks (:mod:`.edition`); their cells are
    the page's, as MyST-NB read them from its source.

    >>> page = read_notebook({"metadata": {}, "cells": [
    ...     {"cell_type": "markdown", "source": ["# A page\\n", "Text."], "metadata": {}},
    ...     {"cell_type": "code", "source": "1 + 1", "metadata": {"tags": ["remove-input"]}}]})
    >>> [(c.kind, c.source, c.tags) for c in page.cells]
    [('markdown', '# A page\\nText.', ()), ('code', '1 + 1', ('remove-input',))]
    """
    cells = []
    for cell in notebook.get("cells", []):
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else str(source)
        cells.append(Cell(cell.get("cell_type", "raw"), source, 0, dict(cell.get("metadata", {}))))
    where = None if path is None else Path(path)
    return Page(where, True, dict(notebook.get("metadata", {})), tuple(cells))


def read_page(path: str | Path) -> Page:
    """The page in the file ``path``: MyST Markdown, or a Jupyter notebook (``.ipynb``)."""
    path = Path(path)
    if path.suffix == ".ipynb":
        import json

        return read_notebook(json.loads(path.read_text(encoding="utf-8")), path)
    return read_text(path.read_text(encoding="utf-8"), path)


def has_code_cells(path: str | Path) -> bool:
    """Whether the page in ``path`` is a notebook with at least one code cell."""
    path = Path(path)
    if path.suffix == ".ipynb":
        return True
    return path.suffix == ".md" and bool(read_page(path).code_cells)


def code_cell_lines(text: str, path: str | Path | None = None) -> tuple[int, ...]:
    """The lines (from 1) of the ``{code-cell}`` fences MyST-NB finds in the page ``text``.

    Whether or not its front matter makes the page a notebook: a page that has
    code cells but is no notebook is one whose cells the build never runs.

    >>> code_cell_lines("# A page\\n\\n```{code-cell} ipython3\\n1 + 1\\n```\\n")
    (3,)
    """
    from myst_nb.core.read import read_myst_markdown_notebook

    nb = read_myst_markdown_notebook(
        text, _config(), add_source_map=True, path=str(path) if path else None
    )
    starts = nb.metadata.get("source_map", [])
    return tuple(
        start for cell, start in zip(nb.cells, starts, strict=True) if cell.cell_type == "code"
    )
