"""Figures that read the same in the book's light and dark themes.

Figures are drawn with Matplotlib's default inline backend on a white
background (the book frames them as a white card in both themes), with a
colour-blind-safe palette and line styles that also differ, so no
distinction rests on colour alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# Okabe & Ito's colour-blind-safe palette.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
LINESTYLES = ("-", "--", "-.", ":")

RC = {
    "figure.facecolor": "white",
    "axes.facecolor": "white",
    "savefig.facecolor": "white",
    "figure.dpi": 110,
    "figure.figsize": (6.4, 3.6),
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "font.size": 10,
    "legend.frameon": False,
}


@contextmanager
def book_style() -> Iterator[None]:
    """Matplotlib settings of the book's figures, as a context manager.

    >>> import matplotlib.pyplot as plt
    >>> with book_style():
    ...     plt.rcParams["axes.facecolor"]
    'white'
    """
    import matplotlib as mpl
    from cycler import cycler

    rc: dict[str, Any] = dict(RC)
    rc["axes.prop_cycle"] = cycler(color=PALETTE[:4]) + cycler(linestyle=LINESTYLES)
    with mpl.rc_context(rc):
        yield


def apply_book_style() -> None:
    """Apply :func:`book_style`'s settings for the rest of the session (a page's first cell)."""
    import matplotlib as mpl
    from cycler import cycler

    mpl.rcParams.update(RC)
    mpl.rcParams["axes.prop_cycle"] = cycler(color=PALETTE[:4]) + cycler(linestyle=LINESTYLES)
