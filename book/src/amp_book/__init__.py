"""The build of the book *Mixed precision in PyTorch*: a Sphinx extension and its tools.

Loaded from ``docs/conf.py`` as ``amp_book``, which loads each part below.
The parts that only add directives, transforms and handlers to their app
load alone too (``extensions = ["myst_parser", "amp_book.corrections"]``), as
the tests load them in an in-process Sphinx app:

- :mod:`.corrections` -- the boxes where the lesson and the run disagree,
  and the page that gathers them;
- :mod:`.selfcheck` -- the interactive self-check directives;
- :mod:`.playgrounds` -- the bit explorer and the GradScaler playground;
- :mod:`.deeper` -- "Going deeper" blocks, collapsed, off the main path;
- :mod:`.pageinfo` -- the line under a chapter page's title: its reading
  time, computed from its source, and the pages it assumes;
- :mod:`.variants` -- the authors' page that lists every wording of every
  claim, so an author reads what a build on another device prints;
- :mod:`.prose` -- the check that no sentence a reader sees types an outcome
  the run should choose;
- :mod:`.theme` -- what the book adds to and mends in the theme;
- :mod:`.mathml` -- maths as MathML, rendered at build time;
- :mod:`.buttons` -- each page's notebook: download, zip of all, Colab;
- :mod:`.provenance` -- what built a page that runs no code;
- :mod:`.printbook` -- the whole book on one page, and printed to one PDF;
- :mod:`.edition` -- the book as another device ran it (a GPU), recorded there
  and rendered beside the live build, with a switch on every page;
- :mod:`.apilinks` -- code spans that name another project's documented object link
  to it (the inventories of :mod:`.inventories`);
- :mod:`.citations` -- citations as author and year in round brackets;
- :mod:`.sitemap` -- every page in the sitemap, an incremental build's too;
- :mod:`.searchweights` -- how often each page says each word, for the search's ranking.

Executing the pages:

- :mod:`.execution` -- MyST-NB's parser with each page's key (the modules of
  ``amp_lesson`` it imports, the data it reads), and a dead kernel as a
  failure of its page;
- :mod:`.cache` -- the execution cache's folder, keyed on what every page
  depends on alike, and its pruning;
- :mod:`.scheduling` -- ``-j`` readers ordered so their kernels end together;
- :mod:`.errors` -- a page that did not run cleanly fails the build;
- :mod:`.runner` -- the only part that changes the process (environment,
  upstream patches of :mod:`.patches`, the kernel server of :mod:`.kernels`,
  signal handling of :mod:`.shutdown`), all undone when the build ends.

Besides the extension: :mod:`.export` (a page as a plain notebook, its Markdown from
:mod:`.myst`, its links from :mod:`.targets` and :mod:`.urls`),
:mod:`.pages` (a page read as the build reads it), :mod:`.kickers`.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the kernel server (.kernels) runs from this package without Sphinx
    from sphinx.application import Sphinx

STATIC_DIR = Path(__file__).resolve().parent / "static"
"""The book's scripts, styles, images and font, which every part that uses one serves."""


def add_static_path(app: Sphinx, config: Any) -> None:
    """``config-inited``: serve :data:`STATIC_DIR` once, whichever parts of the book ask for it."""
    if str(STATIC_DIR) not in map(str, config.html_static_path):
        config.html_static_path.append(str(STATIC_DIR))


PARTS = (
    "cache",
    "runner",
    "scheduling",
    "execution",
    "errors",
    "mathml",
    "buttons",
    "provenance",
    "corrections",
    "selfcheck",
    "playgrounds",
    "deeper",
    "pageinfo",
    "prose",
    "theme",
    "variants",
    "printbook",
    "edition",
    "apilinks",
    "citations",
    "sitemap",
    "searchweights",
)
"""The extensions the book loads, in this order."""


PREVIEW_SETTING = "amp_lesson_preview"
"""True in the live preview's rebuilds (``conf.py`` sets it from ``AMP_LESSON_PREVIEW``,
which :mod:`.preview` sets): a rebuild defers what only a whole build needs (the print book,
the notebooks' zip; the maths and icon fonts are written only where missing), reads and
writes a few pages in its own process, and starts a page's kernel the usual way."""


def in_preview(app: Sphinx) -> bool:
    """Whether this build is a rebuild of the live preview (:data:`PREVIEW_SETTING`)."""
    from amp_book.config import book_config

    return book_config(app).preview


def setup(app: Sphinx) -> dict[str, Any]:
    from amp_book import config

    config.setup(app)  # every amp_lesson_* setting, before the parts that read them
    # Imported here: a kernel imports this package to note what it runs (.edition.ran),
    # before the lesson's first module is imported.
    from amp_lesson import __version__

    for part in PARTS:
        importlib.import_module(f"amp_book.{part}").setup(app)
    return {"version": __version__, "parallel_read_safe": True, "parallel_write_safe": True}
