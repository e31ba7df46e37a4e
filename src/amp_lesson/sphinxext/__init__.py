"""The book's Sphinx extension.

Loaded from ``docs/conf.py`` as ``amp_lesson.sphinxext``. It wires up:

- :mod:`.book` -- the execution cache keyed on the package's source, the
  check that every page really executed, MathML math (no CDN), and the
  notebook download and Colab buttons;
- :mod:`.corrections` -- the boxes where the lesson and the run disagree,
  and the page that gathers them;
- :mod:`.selfcheck` -- the interactive self-check directives;
- :mod:`.playgrounds` -- the bit explorer and the GradScaler playground;
- :mod:`.pageinfo` -- the line under a chapter page's title: its reading
  time, computed from its source, and the pages it assumes;
- :mod:`.variants` -- the authors' page that lists every wording of every
  claim, so an author reads what a build on another device prints;
- :mod:`.prose` -- the check that no sentence a reader sees types an outcome
  the run should choose;
- :mod:`.theme` -- what the book adds to and mends in the theme (templates,
  accessible names, the reading path, the maths font, colours without
  JavaScript, figures set into the page);
- :mod:`.printbook` -- the whole book on one page, and printed to one PDF;
- :mod:`.edition` -- the book as another device ran it (a GPU), recorded there
  and rendered beside the live build, with a switch on every page.

This is the only part of ``amp_lesson`` that imports Sphinx.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from amp_lesson import __version__

if TYPE_CHECKING:  # the kernel server (.kernels) runs from this package without Sphinx
    from sphinx.application import Sphinx


def setup(app: Sphinx) -> dict[str, Any]:
    from amp_lesson.sphinxext import (
        book,
        corrections,
        edition,
        pageinfo,
        playgrounds,
        printbook,
        prose,
        selfcheck,
        theme,
        variants,
    )

    book.setup(app)
    corrections.setup(app)
    selfcheck.setup(app)
    playgrounds.setup(app)
    pageinfo.setup(app)
    prose.setup(app)
    theme.setup(app)
    variants.setup(app)
    printbook.setup(app)
    edition.setup(app)
    return {"version": __version__, "parallel_read_safe": True, "parallel_write_safe": True}
