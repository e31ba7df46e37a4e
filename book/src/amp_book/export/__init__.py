"""The book's pages as plain Jupyter notebooks and scripts: the download on every page, the
twins Colab opens (``notebooks/``) and the notebook zip.

Three modules, one package:

- :mod:`.notebook`: a page's executed notebook (MyST-NB's) as a plain notebook
  (:func:`export_notebook`) or script (:func:`export_script`), with the run's glued values
  (:func:`read_glue`);
- :mod:`.markdown`: a MyST Markdown cell as plain Markdown (:func:`myst_to_markdown`):
  roles, directives, glue, cross-references;
- :mod:`.targets`: the titles and labels of the book's pages, read from their sources as
  Sphinx reads them (:func:`titles_and_labels`), which the cross-references resolve to.

The names below are the package's API, for the build (``amp_book.buttons``) and the tools
(``tools/notebooks.py``). Inside the package the modules share, besides, the reading
context of a cell (:class:`.markdown.Context`), the block tokens of a page
(:func:`.targets.blocks`) and its directive syntax (:data:`.targets.DIRECTIVE_INFO`,
:func:`.targets.split_options`); nothing outside it uses them.
"""

from __future__ import annotations

from amp_book.export.markdown import DEEPER, myst_to_markdown
from amp_book.export.notebook import (
    BOOK_CELL_TITLE,
    COLAB_GPU,
    GPU_RUNTIME,
    INSTALL_CELL_TAG,
    OPENED_HERE,
    OPENS_HERE_ID,
    OPENS_HERE_TAG,
    PARAGRAPH,
    TEXT_CELL_TAG,
    TEXT_CELL_TITLE,
    build_device,
    build_label,
    export_notebook,
    export_script,
    fold_book_cells,
    glue_keys,
    markdown_blocks,
    opens_on,
    read_glue,
    rewrite_glue_imports,
    split_passages,
    text_cell,
)
from amp_book.export.targets import TERM_PREFIX, book_titles_and_labels, titles_and_labels

__all__ = [
    "BOOK_CELL_TITLE",
    "COLAB_GPU",
    "DEEPER",
    "GPU_RUNTIME",
    "INSTALL_CELL_TAG",
    "OPENED_HERE",
    "OPENS_HERE_ID",
    "OPENS_HERE_TAG",
    "PARAGRAPH",
    "TERM_PREFIX",
    "TEXT_CELL_TAG",
    "TEXT_CELL_TITLE",
    "book_titles_and_labels",
    "build_device",
    "build_label",
    "export_notebook",
    "export_script",
    "fold_book_cells",
    "glue_keys",
    "markdown_blocks",
    "myst_to_markdown",
    "opens_on",
    "read_glue",
    "rewrite_glue_imports",
    "split_passages",
    "text_cell",
    "titles_and_labels",
]
