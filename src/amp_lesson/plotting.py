"""Figures that read the same in the book's light and dark themes.

Figures are drawn with Matplotlib's default inline backend on a white
background (the book frames them as a white card in both themes), with a
colour-blind-safe palette and line styles that also differ, so no
distinction rests on colour alone.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LINESTYLES", "PALETTE", "RC", "apply_book_style", "concept_map"]

# Okabe & Ito's colour-blind-safe palette.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
"""Okabe and Ito's colour-blind-safe palette, in the order lines take it."""

LINESTYLES = ("-", "--", "-.", ":")
"""Line styles that change with the colour, so no two lines differ by colour alone."""

RC: dict[str, object] = {
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
"""The Matplotlib settings of the book's figures (applied by :func:`apply_book_style`)."""


def apply_book_style() -> None:
    """Apply the book's Matplotlib settings for the rest of the session (a page's first cell).

    White background (the book frames figures as a white card in both
    themes), light grid, no top and right spines, and a property cycle that
    changes colour (Okabe and Ito's colour-blind-safe :data:`PALETTE`) and
    line style (:data:`LINESTYLES`) together, so no two lines differ by
    colour alone.

    Examples
    --------
    >>> import matplotlib as mpl
    >>> with mpl.rc_context():
    ...     apply_book_style()
    ...     mpl.rcParams["axes.facecolor"], mpl.rcParams["axes.prop_cycle"].by_key()["linestyle"]
    ('white', ['-', '--', '-.', ':'])
    """
    import matplotlib as mpl
    from cycler import cycler

    mpl.rcParams.update(RC)
    mpl.rcParams["axes.prop_cycle"] = cycler(color=PALETTE[:4]) + cycler(linestyle=LINESTYLES)


def concept_map(
    boxes: dict[str, tuple[float, float, str]],
    arrows: list[tuple[str, str, str]],
    *,
    figsize: tuple[float, float] = (7.2, 5.4),
    box_width: int = 22,
    label_width: int = 26,
) -> Any:
    """Draw a concept map: labelled boxes joined by labelled arrows.

    Boxes are drawn in the book's palette with a dark outline, arrows in
    black, so nothing rests on colour alone. Arrows are drawn after the boxes
    (a higher ``zorder``), because an arrow is clipped at a box's outline only
    once that outline has been placed.

    Parameters
    ----------
    boxes : dict
        Maps a key to ``(x, y, text)``: the centre of the box in axes
        coordinates (0 to 1) and its text, wrapped to ``box_width`` characters.
    arrows : list of tuple
        ``(source, target, label)`` triples: an arrow from one box to another,
        clipped at the boxes' edges, with its label (wrapped to
        ``label_width``) on a white patch at the arrow's middle.
    figsize : tuple of float, default (7.2, 5.4)
        The figure's size in inches.
    box_width : int, default 22
        Characters per line of a box's text.
    label_width : int, default 26
        Characters per line of an arrow's label.

    Returns
    -------
    matplotlib.figure.Figure
        The figure.

    Raises
    ------
    ValueError
        If there is no box, a box is not ``(x, y, text)`` inside the axes, or
        an arrow names a box that does not exist.

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> fig = concept_map({"a": (0.2, 0.5, "Range"), "b": (0.8, 0.5, "Scaling")},
    ...                   [("a", "b", "underflow needs")])
    >>> [t.get_text() for t in fig.axes[0].texts if t.get_text()]  # arrows have no text
    ['Range', 'Scaling', 'underflow needs']
    >>> plt.close(fig)
    >>> concept_map({"a": (0.5, 0.5, "A")}, [("a", "z", "?")])
    Traceback (most recent call last):
    ...
    ValueError: arrow ('a', 'z', '?') names a box that is not in boxes: 'z' (boxes: 'a')
    """
    import textwrap

    import matplotlib.pyplot as plt

    if not boxes:
        raise ValueError("boxes must name at least one box")
    for key, spec in boxes.items():
        if len(spec) != 3 or not all(0 <= float(v) <= 1 for v in spec[:2]):
            raise ValueError(
                f"box {key!r} must be (x, y, text) with x and y in [0, 1], got {spec!r}"
            )
    for arrow in arrows:
        if len(arrow) != 3:
            raise ValueError(f"arrow must be (source, target, label), got {arrow!r}")
        missing = [k for k in arrow[:2] if k not in boxes]
        if missing:
            names = ", ".join(repr(k) for k in boxes)
            raise ValueError(
                f"arrow {arrow!r} names a box that is not in boxes: "
                f"{', '.join(repr(k) for k in missing)} (boxes: {names})"
            )

    fig, ax = plt.subplots(figsize=figsize)
    ax.set_axis_off()
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    artists = {}
    for i, (key, (x, y, text)) in enumerate(boxes.items()):
        artists[key] = ax.text(
            x, y, textwrap.fill(text, box_width), ha="center", va="center", fontsize=10,
            fontweight="bold", zorder=3,
            bbox={"boxstyle": "round,pad=0.6", "facecolor": PALETTE[i % 6] + "33",
                  "edgecolor": "#222222", "linewidth": 1.2},
        )  # fmt: skip
    for source, target, label in arrows:
        ax.annotate(
            "", xy=boxes[target][:2], xytext=boxes[source][:2], zorder=4,
            arrowprops={"arrowstyle": "-|>", "color": "#222222", "linewidth": 1.3,
                        "mutation_scale": 14, "shrinkA": 0, "shrinkB": 0,
                        "patchA": artists[source].get_bbox_patch(),
                        "patchB": artists[target].get_bbox_patch()},
        )  # fmt: skip
        (x0, y0), (x1, y1) = boxes[source][:2], boxes[target][:2]
        ax.text(
            (x0 + x1) / 2, (y0 + y1) / 2, textwrap.fill(label, label_width), ha="center",
            va="center", fontsize=8.5, fontstyle="italic", zorder=5,
            bbox={"boxstyle": "round,pad=0.25", "facecolor": "white", "edgecolor": "none"},
        )  # fmt: skip
    return fig
