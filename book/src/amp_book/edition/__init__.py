"""The book as another device ran it: a stored edition, recorded there and shown here.

A build executes the pages where it runs (on Read the Docs, a CPU). A CUDA machine's
run of the same pages is kept in ``docs/_editions/<device>/`` and every build renders it
beside its own, under ``editions/<device>/``. Four modules, one concern each:

- :mod:`.store`: the edition's format, recording one (:func:`record`) and loading one
  (:func:`load_edition`), which refuses what is incomplete or not the book's;
- :mod:`.outputs`: each stored notebook read as untrusted data, and only what the book
  itself would show let through;
- :mod:`.ran`: what a page's run ran (noted while it runs), and whether that code is the
  book's code still: a recording stays on its page until it is not;
- :mod:`.render`: each page's state against this build, the line under its title, and
  the stored edition's sources for the build tool (``tools/build_book.py``).

The rest of the build calls :func:`setup` and the few names below, nothing else.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "EDITION_KEY": "render",
    "LIVE_INVENTORY": "render",
    "LIVE_ROOT": "render",
    "in_edition": "render",
    "live_pdf": "render",
    "live_url": "render",
    "setup": "render",
    "shows_a_run": "render",
    "EditionError": "store",
    "load_edition": "store",
    "record": "store",
    "record_provenance": "store",
}
__all__ = [
    "EDITION_KEY",
    "LIVE_INVENTORY",
    "LIVE_ROOT",
    "EditionError",
    "in_edition",
    "live_pdf",
    "live_url",
    "load_edition",
    "record",
    "record_provenance",
    "setup",
    "shows_a_run",
]


def __getattr__(name: str) -> Any:
    # Read when first asked for: a kernel that notes what it runs imports .ran alone,
    # not Sphinx (a quarter of a second at every kernel's start).
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
