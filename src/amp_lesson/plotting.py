# One module: every figure of the book goes through this theme, legend placement and SVG writing, so a
# figure's look is decided here and nowhere else.
"""Figures that read in the book's light and dark themes, on a desktop and on a phone.

A figure is SVG (:func:`figure_svg`), set into the page itself: text stays text (sharp
at any zoom, and its size can be measured). The book's build shows it in the theme the
reader picked, light or dark. Lines take a colour-blind-safe palette and line styles that
also differ, so no distinction rests on colour alone. The text is sized for
a phone: a figure at most :data:`MAX_WIDTH_IN` inches wide, shrunk to the
:data:`PHONE_COLUMN_PX` pixels a phone's column holds, keeps every letter at
least :data:`MIN_TEXT_PX` CSS pixels tall, and a figure that would not stops
the build (:func:`check_text_size`).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "LEGEND_CLEARANCE_PT",
    "LINESTYLES",
    "MARKERS",
    "MAX_WIDTH_IN",
    "MIN_TEXT_PX",
    "PALETTE",
    "PHONE_COLUMN_PX",
    "RC",
    "apply_book_style",
    "check_text_size",
    "concept_map",
    "figure_html",
    "figure_svg",
    "label_svg",
    "place_legend",
    "plot_lines",
    "plot_scale_trace",
    "power_label",
]

# Okabe & Ito's colour-blind-safe palette.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
"""Okabe and Ito's colour-blind-safe palette, in the order lines take it."""

LINESTYLES = ("-", "--", "-.", ":")
"""Line styles that change with the colour, so no two lines differ by colour alone."""

MARKERS = ("o", "s", "^", "D", "v", "P")
"""Marker shapes :func:`plot_lines` draws hollow, so lines that coincide both stay visible."""

MAX_WIDTH_IN = 5.0
"""The widest a figure may be, in inches (480 CSS pixels at its natural size)."""

PHONE_COLUMN_PX = 342
"""The width a cell's figure gets on a phone 390 CSS pixels wide (the theme's margins and
the output's own padding take the rest), where a wider figure is shrunk to fit: measured
in Chromium."""

MIN_TEXT_PX = 10.0
"""The smallest any text of a figure may come out on that phone, in CSS pixels."""

RC: dict[str, object] = {
    "savefig.edgecolor": "none",
    "figure.dpi": 110,
    "figure.figsize": (MAX_WIDTH_IN, 3.1),
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    # 11 pt text in a figure at most 5 inches wide is over 10 CSS pixels on a phone.
    "font.size": 11,
    "legend.frameon": False,
    # SVG text stays text; the same figure always writes the same file.
    "svg.fonttype": "none",
    "svg.hashsalt": "amp-lesson",
}
"""The Matplotlib settings of the book's figures (applied by :func:`apply_book_style`)."""


def apply_book_style() -> None:
    """Apply the book's Matplotlib settings for the rest of the session (a page's first cell).

    Light grid, no top and right spines, text sized for a phone (:data:`RC`),
    and a property cycle that changes colour (Okabe and Ito's
    colour-blind-safe :data:`PALETTE`) and line style (:data:`LINESTYLES`)
    together, so no two lines differ by colour alone, on a white background, which
    reads in a notebook's dark theme too. (The book's build shows a page's figures as
    :func:`figure_svg` draws them, in the reader's theme.)

    Examples
    --------
    >>> import matplotlib as mpl
    >>> with mpl.rc_context():  # not in the book's build: Matplotlib's own figures
    ...     apply_book_style()
    ...     style = mpl.rcParams["axes.prop_cycle"].by_key()["linestyle"]
    ...     mpl.rcParams["axes.facecolor"], mpl.rcParams["svg.fonttype"], style
    ('white', 'none', ['-', '--', '-.', ':'])
    """
    import matplotlib as mpl
    from cycler import cycler

    mpl.rcParams.update(RC)
    mpl.rcParams["axes.prop_cycle"] = cycler(color=PALETTE[:4]) + cycler(linestyle=LINESTYLES)
    for key in ("figure.facecolor", "axes.facecolor", "savefig.facecolor"):
        mpl.rcParams[key] = "white"


def concept_map(
    boxes: dict[str, tuple[float, float, str]],
    arrows: list[tuple[str, str, str]],
    *,
    figsize: tuple[float, float] = (MAX_WIDTH_IN, 6.6),
    box_width: int = 16,
    label_width: int = 20,
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
        ``(source, target, label)``: an arrow from one box to another, clipped
        at the boxes' edges, with its label (wrapped to ``label_width``) on a
        patch of the background at the arrow's middle; a fourth item, between
        0 and 1, puts the label that far along the arrow instead.
    figsize : tuple of float, default (5.0, 6.6)
        The figure's size in inches.
    box_width : int, default 16
        Characters per line of a box's text (set at 11 pt).
    label_width : int, default 20
        Characters per line of an arrow's label (set at 10.5 pt).

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
    >>> # the boxes' and the arrow's text; an arrow itself has none
    >>> [t.get_text() for t in fig.axes[0].texts if t.get_text()]
    ['Range', 'Scaling', 'underflow needs']
    >>> plt.close(fig)
    >>> concept_map({"a": (0.5, 0.5, "A")}, [("a", "z", "?")])
    Traceback (most recent call last):
    ...
    ValueError: arrow ('a', 'z', '?') names a box that is not in boxes: 'z'
    (boxes: 'a')
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
        if len(arrow) not in (3, 4) or (len(arrow) == 4 and not 0 < arrow[3] < 1):
            raise ValueError(
                f"arrow must be (source, target, label) or (source, target, label, at) "
                f"with 0 < at < 1, got {arrow!r}"
            )
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
            x, y, textwrap.fill(text, box_width), ha="center", va="center", fontsize=11,
            fontweight="bold", zorder=3,
            bbox={"boxstyle": "round,pad=0.6", "facecolor": PALETTE[i % 6] + "33",
                  "edgecolor": "#222222", "linewidth": 1.2},
        )  # fmt: skip
    for source, target, label, *where in arrows:
        ax.annotate(
            "", xy=boxes[target][:2], xytext=boxes[source][:2], zorder=4,
            arrowprops={"arrowstyle": "-|>", "color": "#222222", "linewidth": 1.3,
                        "mutation_scale": 14, "shrinkA": 0, "shrinkB": 0,
                        "patchA": artists[source].get_bbox_patch(),
                        "patchB": artists[target].get_bbox_patch()},
        )  # fmt: skip
        (x0, y0), (x1, y1) = boxes[source][:2], boxes[target][:2]
        at = where[0] if where else 0.5
        ax.text(
            x0 + at * (x1 - x0), y0 + at * (y1 - y0), textwrap.fill(label, label_width),
            ha="center",
            va="center", fontsize=10.5, fontstyle="italic", zorder=5,
            bbox={"boxstyle": "round,pad=0.25", "facecolor": "white", "edgecolor": "none"},
        )  # fmt: skip
    return fig


def _check_series(name: str, series: Any) -> dict[str, list[float]]:
    """``series`` as a dict of lists of floats, or a ValueError that names ``name``."""
    if not isinstance(series, Mapping) or not series:
        raise ValueError(
            f"{name} must map a label to its values and hold at least one, got {series!r}"
        )
    out = {}
    for label, values in series.items():
        try:
            floats = [float(v) for v in values]
        except (TypeError, ValueError):
            raise ValueError(
                f"{name}[{label!r}] must be a sequence of numbers, got {values!r}"
            ) from None
        if not floats:
            raise ValueError(f"{name}[{label!r}] holds no values")
        out[str(label)] = floats
    return out


def plot_lines(
    series: Mapping[str, Sequence[float]],
    x: Sequence[float] | None = None,
    *,
    ax: Any = None,
    xlabel: str = "step",
    ylabel: str = "",
    log2x: bool = False,
) -> Any:
    """Draw one line per series against a shared x, told apart by colour, line style and marker.

    Each line takes the next colour and line style of the book's cycle (see
    :func:`apply_book_style`) and a hollow marker of its own shape
    (:data:`MARKERS`), at most about a dozen per line, so two lines that lie
    on top of each other both stay visible. A legend names the lines.

    Parameters
    ----------
    series : dict of str to sequence of float
        Maps each line's legend label to its y values.
    x : sequence of float, optional
        The x values, shared by every line (default: 1, 2, ... as many as the
        first line has values).
    ax : matplotlib.axes.Axes, optional
        Where to draw (default: new axes).
    xlabel : str, default "step"
        The x axis's label.
    ylabel : str, default ""
        The y axis's label.
    log2x : bool, default False
        Draw the x axis on a base-2 log scale, ticks at the given x values
        (for counts that double: micro-batches, batch sizes).

    Returns
    -------
    matplotlib.axes.Axes
        The axes drawn on.

    Raises
    ------
    ValueError
        If ``series`` is empty, a line holds no values or something that is not
        a number, a line's length differs from ``x``'s, or ``log2x`` is asked
        for with an ``x`` that is not positive.

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> weights = {"FP32": [1.0, 0.9, 0.8], "FP16": [1.0, 1.0, 1.0]}
    >>> ax = plot_lines(weights, ylabel="weight")
    >>> [line.get_label() for line in ax.get_lines()], ax.get_xlabel()
    (['FP32', 'FP16'], 'step')
    >>> plt.close(ax.figure)
    >>> plot_lines({"a": [1.0, 2.0]}, x=[1, 2, 3])
    Traceback (most recent call last):
    ...
    ValueError: series['a'] has 2 values but x has 3
    """
    import matplotlib.pyplot as plt

    lines = _check_series("series", series)
    if x is None:
        xs = [float(i) for i in range(1, len(next(iter(lines.values()))) + 1)]
    else:
        xs = _check_series("x", {"x": x})["x"]
    for label, values in lines.items():
        if len(values) != len(xs):
            raise ValueError(f"series[{label!r}] has {len(values)} values but x has {len(xs)}")
    if log2x and min(xs) <= 0:
        raise ValueError(f"x must be positive for log2x=True, got {min(xs)!r}")
    if ax is None:
        _, ax = plt.subplots()
    every = max(1, math.ceil(len(xs) / 12))
    for i, (label, values) in enumerate(lines.items()):
        ax.plot(
            xs, values, label=label, marker=MARKERS[i % len(MARKERS)], markersize=6,
            markerfacecolor="none", markevery=(i * every // len(lines), every),
        )  # fmt: skip
    if log2x:
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [f"{v:g}" for v in xs])
        ax.minorticks_off()
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    place_legend(ax)
    return ax


def plot_scale_trace(
    scales: Mapping[str, Sequence[float]],
    skipped: Mapping[str, Sequence[bool]] | None = None,
    *,
    ax: Any = None,
) -> Any:
    """Draw the loss scale each step used, one step line per run, with a cross on each skipped step.

    The y axis is base 2, where a scaler's halvings and doublings are even
    steps. Each run takes the next colour and line style of the book's cycle;
    its skipped steps get a cross in its colour (runs that skip the same step
    put their crosses side by side), and the legend says what a cross means.

    Parameters
    ----------
    scales : dict of str to sequence of float
        Maps each run's legend label to the scale of its steps 1, 2, ...
        (``StepLog.scale``).
    skipped : dict of str to sequence of bool, optional
        For some or all of the runs, whether each step was skipped
        (``StepLog.skipped``).
    ax : matplotlib.axes.Axes, optional
        Where to draw (default: new axes).

    Returns
    -------
    matplotlib.axes.Axes
        The axes drawn on.

    Raises
    ------
    ValueError
        If ``scales`` is empty, a scale is not a positive finite number, or
        ``skipped`` names a run that ``scales`` does not or has another number
        of steps.

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> ax = plot_scale_trace({"run": [2.0**17, 2.0**16, 2.0**16]},
    ...                       {"run": [True, False, False]})
    >>> [text.get_text() for text in ax.get_legend().get_texts()]
    ['run', 'step skipped (a cross)']
    >>> plt.close(ax.figure)
    >>> plot_scale_trace({"run": [1.0, 0.0]})
    Traceback (most recent call last):
    ...
    ValueError: scales['run'] must hold positive finite scales, got 0.0
    """
    import matplotlib.pyplot as plt

    runs = _check_series("scales", scales)
    for label, values in runs.items():
        bad = next((v for v in values if not (math.isfinite(v) and v > 0)), None)
        if bad is not None:
            raise ValueError(f"scales[{label!r}] must hold positive finite scales, got {bad!r}")
    skipped = dict(skipped or {})
    for label, flags in skipped.items():
        if label not in runs:
            raise ValueError(f"skipped names {label!r}, which is not a run in scales: {list(runs)}")
        if len(flags) != len(runs[label]):
            raise ValueError(
                f"skipped[{label!r}] has {len(flags)} steps but scales[{label!r}] has "
                f"{len(runs[label])}"
            )
    if ax is None:
        _, ax = plt.subplots()
    crossed = False
    for i, (label, values) in enumerate(runs.items()):
        steps = list(range(1, len(values) + 1))
        (line,) = ax.step(steps, values, where="mid", label=label, linewidth=1.8)
        # runs that skip the same step put their crosses side by side, not on top of each other
        shift = 0.2 * (i - (len(runs) - 1) / 2)
        flags = skipped.get(label, ())
        hits = [(s + shift, v) for s, v, f in zip(steps, values, flags, strict=False) if f]
        if hits:
            crossed = True
            ax.plot(*zip(*hits, strict=True), "X", color=line.get_color(), markersize=9,
                    markeredgecolor="black", markeredgewidth=0.6, linestyle="none")  # fmt: skip
    if crossed:
        ax.plot([], [], "X", color="white", markeredgecolor="black", markersize=9,
                linestyle="none", label="step skipped (a cross)")  # fmt: skip
    ax.set_yscale("log", base=2)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss scale (log2 axis)")
    place_legend(ax)
    return ax


_INSIDE = (
    "upper left",
    "upper right",
    "lower right",
    "lower left",
    "upper center",
    "lower center",
    "center left",
    "center right",
)
"""Where :func:`place_legend` tries a legend inside the axes, in this order."""

LEGEND_CLEARANCE_PT = 3.0
"""The least gap :func:`place_legend` leaves between a legend and the data, in points."""


def place_legend(ax: Any, **kwargs: Any) -> Any:
    """Give ``ax`` a legend that covers none of its data: inside where a corner is clear, else above.

    The legend stays where it is (or Matplotlib's ``"best"``) when it covers
    no line, marker or text of the axes, at least :data:`LEGEND_CLEARANCE_PT`
    clear of them. Otherwise it moves to the first clear place of the
    corners and edges inside the axes; where none is clear, it goes above the
    axes, its entries side by side in as many columns as fit the axes' width,
    or, where another axes or a title is above, below the x axis's label. It
    never goes beside the axes: a wider figure is shrunk more on a phone, and
    its text with it. Lines are taken as drawn: a step line by its steps, a
    marker by its size.

    :func:`figure_svg` does this for every legend of a figure the book shows,
    so a legend placed by hand (``ax.legend(loc="lower right")``) that lands
    on the data moves too.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        The axes.
    **kwargs
        Passed to ``ax.legend`` (a new legend is made with them); none: the
        axes' legend, or a new one of its labelled artists.

    Returns
    -------
    matplotlib.legend.Legend or None
        The legend, or ``None`` where nothing in the axes has a label.

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> fig, ax = plt.subplots()
    >>> _ = ax.plot([0, 1, 2, 3], [0, 1, 2, 3], label="rising")
    >>> legend = place_legend(ax)
    >>> _legend_overlaps(ax, legend)
    False
    >>> plt.close(fig)
    """
    handles, labels = ax.get_legend_handles_labels()
    legend = ax.get_legend()
    if kwargs or legend is None:
        if not labels and "handles" not in kwargs and "labels" not in kwargs:
            return legend  # nothing to name: no legend (ax.legend() would warn)
        legend = ax.legend(**kwargs)
    fig = ax.figure
    fig.draw_without_rendering()
    if not _legend_overlaps(ax, legend):
        return legend
    for loc in _INSIDE:
        legend.set_loc(loc)
        fig.draw_without_rendering()
        if not _legend_overlaps(ax, legend):
            return legend
    return _legend_outside(ax, legend, handles, labels)


def _legend_outside(ax: Any, legend: Any, handles: list[Any], labels: list[str]) -> Any:
    """``legend`` again, above ``ax``, or below its x label where something is above; where
    something is in the way both times, back inside at Matplotlib's ``"best"``. Never beside
    the axes: a wider figure is shrunk further on a phone, its text with it."""
    texts = [text.get_text() for text in legend.get_texts()]
    if labels != texts:  # the legend was given its own entries
        handles, labels = list(legend.legend_handles), texts
    title = legend.get_title().get_text() or None
    legend.remove()
    fig = ax.figure
    width = ax.get_window_extent().width
    in_the_way = [other.get_tightbbox() for other in fig.axes if other is not ax]
    in_the_way += [t.get_window_extent() for t in (ax.title, ax._left_title, ax._right_title)
                   if t.get_text().strip()]  # fmt: skip
    in_the_way += [t.get_window_extent() for t in fig.texts if t.get_text().strip()]
    in_the_way += [other.get_window_extent() for other in fig.legends]
    below = ax.get_tightbbox()
    pad = LEGEND_CLEARANCE_PT * fig.dpi / 72
    below_y = ax.transAxes.inverted().transform((0.0, below.y0 - pad))[1] if below else -0.2
    for loc, anchor in (("lower left", (0.0, 1.02)), ("upper left", (0.0, below_y))):
        for ncols in range(len(labels), 0, -1):
            outside = ax.legend(handles, labels, loc=loc, bbox_to_anchor=anchor,
                                borderaxespad=0.0, ncols=ncols, title=title)  # fmt: skip
            fig.draw_without_rendering()
            box = outside.get_window_extent()
            if box.width <= width + 0.5 or ncols == 1:
                break
            outside.remove()
        if not any(box.overlaps(other) for other in in_the_way if other is not None):
            return outside
        outside.remove()
    return ax.legend(handles, labels, loc="best", title=title)


def _legend_overlaps(ax: Any, legend: Any) -> bool:
    """Whether ``legend`` (drawn) covers, or comes within :data:`LEGEND_CLEARANCE_PT` of, a
    line, a marker or a text of ``ax`` that is inside the axes."""
    import numpy as np
    from matplotlib.transforms import Bbox

    pad = LEGEND_CLEARANCE_PT * ax.figure.dpi / 72
    box = legend.get_window_extent()
    inside = Bbox.intersection(box, ax.get_window_extent())
    if inside is None or inside.width <= 0 or inside.height <= 0:
        return False  # outside the axes, where nothing of the axes is drawn
    near = inside.padded(pad)
    for line in ax.get_lines():
        if not line.get_visible() or len(line.get_xydata()) == 0:
            continue
        if line.get_linestyle() not in ("None", "none", "", " "):
            path = line.get_transform().transform_path(line.get_path())
            if path.intersects_bbox(near, filled=False):
                return True
        if line.get_marker() not in (None, "None", "none", "", " "):
            points = line.get_transform().transform(line.get_xydata())
            radius = line.get_markersize() * ax.figure.dpi / 72 / 2
            grown = near.padded(radius)
            x, y = points[:, 0], points[:, 1]
            hit = (x >= grown.x0) & (x <= grown.x1) & (y >= grown.y0) & (y <= grown.y1)
            if bool(np.any(hit & np.isfinite(x) & np.isfinite(y))):
                return True
    for collection in ax.collections:
        offsets = collection.get_offsets()
        if collection.get_visible() and len(offsets):
            points = collection.get_offset_transform().transform(offsets)
            x, y = points[:, 0], points[:, 1]
            if bool(np.any((x >= near.x0) & (x <= near.x1) & (y >= near.y0) & (y <= near.y1))):
                return True
    return any(
        text.get_visible() and text.get_text().strip() and text.get_window_extent().overlaps(near)
        for text in ax.texts
    )


def _clear_legends(fig: Any) -> None:
    """Move every axes legend of ``fig`` that covers its data (:func:`place_legend`)."""
    for ax in fig.axes:
        if ax.get_legend() is not None:
            place_legend(ax)


def figure_html(fig: Any, *, alt: str, caption: str) -> Any:
    """Return ``fig`` as an HTML figure, image and caption, that another page can paste.

    MyST-NB pastes a value glued on one page into another only as plain
    output, without a caption or alt text. This HTML holds both: the SVG of
    :func:`figure_svg`, named by the alt text, and the caption under it, in
    the markup Sphinx gives a figure, so the book's styles apply.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure.
    alt : str
        The image's alt text: what the figure shows, for a reader who cannot see it.
    caption : str
        The caption, plain text.

    Returns
    -------
    IPython.display.HTML
        The figure, for ``glue(name, figure_html(...), display=False)``.

    Raises
    ------
    TypeError
        If ``fig`` is not a Matplotlib figure.
    ValueError
        If ``alt`` or ``caption`` is blank.

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> fig, ax = plt.subplots(figsize=(4, 2))
    >>> html = figure_html(fig, alt="An empty plot.", caption="Nothing yet.")
    >>> html.data.startswith('<figure class="align-default">')
    True
    >>> 'aria-label="An empty plot."' in html.data
    True
    >>> plt.close(fig)
    >>> figure_html(fig, alt=" ", caption="Nothing yet.")
    Traceback (most recent call last):
    ...
    ValueError: alt must describe the figure, got ' '
    """
    import html

    from IPython.display import HTML
    from matplotlib.figure import Figure

    if not isinstance(fig, Figure):
        raise TypeError(f"fig must be a matplotlib Figure, got {type(fig).__name__}")
    for name, text in (("alt", alt), ("caption", caption)):
        if not isinstance(text, str) or not text.strip():
            what = "describe the figure" if name == "alt" else "say what the figure shows"
            raise ValueError(f"{name} must {what}, got {text!r}")
    return HTML(
        '<figure class="align-default">'
        + figure_svg(fig, alt=alt)
        + f'<figcaption><p><span class="caption-text">{html.escape(caption)}</span></p>'
        "</figcaption></figure>"
    )


_FIGURES_DRAWN = itertools.count()
_ID = re.compile(r'\bid="([^"]+)"')


def _standalone_svg(svg: str, *, alt: str | None = None) -> str:
    """Matplotlib's SVG made fit to set into a page or a notebook beside others.

    The XML prologue and metadata go; every ``id`` gets a prefix made of the figure's
    content and a count, so two figures on one page never share one (Matplotlib numbers
    them alike); the element is marked ``class="amp-svg"`` (the book's build sets such a
    figure into its page in the reader's theme); with ``alt`` it is an image named by it
    (:func:`label_svg`).

    >>> svg = ('<?xml version="1.0"?><svg width="10pt" viewBox="0 0 10 10">'
    ...        '<g id="a"><path style="fill: #000000" clip-path="url(#a)"/>'
    ...        '</g></svg>')
    >>> print(_standalone_svg(svg, alt="A dot."))  # doctest: +ELLIPSIS
    <svg class="amp-svg" width="10pt" viewBox="0 0 10 10" role="img" aria-label="A dot."><title>A
    dot.</title><g id="f...-a"><path style="fill: #000000" clip-path="url(#f...-a)"/></g></svg>
    """
    import hashlib

    start = svg.find("<svg")
    if start < 0:
        raise ValueError("svg holds no <svg> element")
    svg = svg[start:]
    svg = re.sub(r"\s*<metadata>.*?</metadata>", "", svg, flags=re.DOTALL)
    # The content, and a count: the same figure shown twice on a page (displayed, and
    # glued) still gets ids of its own.
    prefix = f"f{hashlib.sha256(svg.encode()).hexdigest()[:8]}{next(_FIGURES_DRAWN)}-"
    for name in set(_ID.findall(svg)):
        svg = svg.replace(f'id="{name}"', f'id="{prefix}{name}"')
        svg = svg.replace(f"#{name})", f"#{prefix}{name})")
        svg = svg.replace(f'href="#{name}"', f'href="#{prefix}{name}"')
    svg = re.sub(r"<svg\b", '<svg class="amp-svg"', svg, count=1)
    return label_svg(svg.strip(), alt) if alt is not None else svg.strip()


def label_svg(svg: str, alt: str) -> str:
    """``svg`` as an image named by ``alt``: ``role="img"``, ``aria-label`` and a ``<title>``.

    Parameters
    ----------
    svg : str
        An ``<svg>`` element.
    alt : str
        What the figure shows, for a reader who cannot see it.

    Returns
    -------
    str
        The element, labelled.

    Raises
    ------
    ValueError
        If ``svg`` holds no ``<svg>`` element.

    Examples
    --------
    >>> print(label_svg('<svg width="1pt"><g/></svg>', "A & B"))
    <svg width="1pt" role="img" aria-label="A &amp; B"><title>A &amp;
    B</title><g/></svg>
    """
    import html

    text = html.escape(alt.strip(), quote=True)
    opening = re.search(r"<svg\b[^>]*>", svg)
    if opening is None:
        raise ValueError("svg holds no <svg> element")
    named = opening.group(0)[:-1] + f' role="img" aria-label="{text}"><title>{text}</title>'
    return svg[: opening.start()] + named + svg[opening.end() :]


def check_text_size(fig: Any) -> float:
    """The size of the figure's smallest text on a phone, in CSS pixels; too small raises.

    A figure wider than :data:`PHONE_COLUMN_PX` is shrunk to that width on a
    phone, its text with it. The smallest text is the smallest font size of
    the figure's visible texts (tick labels, labels, legends, annotations),
    an exponent in Matplotlib's maths (``$2^{-14}$``) counted at the 70 % it
    is set in. Measured on the figure as it will be saved (tight around what
    it draws, with savefig's margin).

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure, drawn.

    Returns
    -------
    float
        The smallest text's height on the phone, in CSS pixels.

    Raises
    ------
    ValueError
        If that is below :data:`MIN_TEXT_PX`: the message names the text and
        says how wide the figure is.

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> fig, ax = plt.subplots(figsize=(5, 2))
    >>> ax.tick_params(labelsize=11)
    >>> _ = ax.set_xlabel("step", fontsize=11)
    >>> round(check_text_size(fig), 1)  # 11 pt is 14.7 px, shrunk to 342 px wide
    11.5
    >>> _ = ax.set_title("tiny", fontsize=7)
    >>> check_text_size(fig)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: figure text 'tiny' would be 7.3 CSS pixels on a phone (at least 10
    needed): the figure is 4.55 inches wide; ...
    >>> plt.close(fig)
    """
    import matplotlib as mpl
    from matplotlib.text import Text

    fig.draw_without_rendering()  # lays the figure out, whatever its canvas
    # as savefig(bbox_inches="tight") saves it: tight, plus a margin each side
    pad = float(mpl.rcParams["savefig.pad_inches"])
    width_px = (float(fig.get_tightbbox().width) + 2 * pad) * 96  # inches to CSS pixels
    shrink = min(1.0, PHONE_COLUMN_PX / width_px)
    smallest, which = math.inf, ""
    for text in fig.findobj(Text):
        content = text.get_text()
        if not (content.strip() and text.get_visible()):
            continue
        size = text.get_fontsize() * 4 / 3  # points to CSS pixels
        if "$" in content and ("^" in content or "_" in content):
            size *= 0.7  # mathtext sets sub- and superscripts at 70 %
        if size * shrink < smallest:
            smallest, which = size * shrink, content
    if smallest < MIN_TEXT_PX:
        raise ValueError(
            f"figure text {which!r} would be {smallest:.1f} CSS pixels on a phone (at least "
            f"{MIN_TEXT_PX:g} needed): the figure is {width_px / 96:.2f} inches wide; make it "
            f"at most {MAX_WIDTH_IN:g} inches wide and its text at least 11 pt, or write "
            "powers as 2⁻¹⁴ rather than $2^{-14}$"
        )
    return float(smallest)


def figure_svg(fig: Any, alt: str | None = None) -> str:
    """The figure as an ``<svg>`` element to set into a page or a notebook.

    Saved tight around what it draws, as the notebook's inline backend does,
    after :func:`check_text_size` has checked its text (``ValueError`` if
    too small). Log axes label their ticks with Unicode exponents (2⁻¹⁴), set
    at the size of the tick labels, not Matplotlib's 70 % maths exponents. A
    legend that covers the data moves clear of it (:func:`place_legend`).

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure.
    alt : str, optional
        What the figure shows, for a reader who cannot see it (:func:`label_svg`).

    Returns
    -------
    str
        The ``<svg>`` element.

    Raises
    ------
    TypeError
        If ``fig`` is not a Matplotlib figure.
    ValueError
        If its text would be too small on a phone.

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> fig, ax = plt.subplots(figsize=(4, 2))
    >>> _ = ax.plot([1, 2], [1, 4])
    >>> svg = figure_svg(fig, alt="A line.")
    >>> svg.startswith('<svg class="amp-svg"'), 'aria-label="A line."' in svg
    (True, True)
    >>> plt.close(fig)
    """
    import io

    from matplotlib.figure import Figure

    if not isinstance(fig, Figure):
        raise TypeError(f"fig must be a matplotlib Figure, got {type(fig).__name__}")
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            _unicode_exponents(axis)
    _clear_legends(fig)
    check_text_size(fig)
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    return _standalone_svg(buffer.getvalue(), alt=alt)


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def power_label(base: float, exponent: int) -> str:
    """``base`` to the power ``exponent`` as a label, the exponent in Unicode superscripts.

    Set at the label's own size, where Matplotlib's maths (``$2^{-14}$``)
    shrinks an exponent to 70 %, too small to read on a phone.

    Parameters
    ----------
    base : float
        The base.
    exponent : int
        The exponent.

    Returns
    -------
    str
        The label.

    Examples
    --------
    >>> power_label(2, -14), power_label(10, 3)
    ('2⁻¹⁴', '10³')
    """
    return f"{base:g}" + str(int(exponent)).translate(_SUPERSCRIPT)


def _unicode_exponents(axis: Any) -> None:
    """Label a log axis's major ticks base and Unicode exponent (2⁻¹⁴), if Matplotlib's
    own maths labels are still in place."""
    from matplotlib.ticker import FuncFormatter, LogFormatterSciNotation

    if axis.get_scale() != "log" or not isinstance(
        axis.get_major_formatter(), LogFormatterSciNotation
    ):
        return
    base = axis.get_transform().base  # as set_yscale("log", base=...) gave it

    def label(value: float, _position: Any) -> str:
        if value <= 0:
            return ""
        power = math.log(value, base)
        if abs(power - round(power)) > 1e-9:
            return ""
        return power_label(base, round(power))

    class PlainMinor(LogFormatterSciNotation):
        """Matplotlib's choice of minor ticks to label, each as a plain number (3, 50)."""

        def __call__(self, x: float, pos: Any = None) -> str:
            return f"{x:g}" if super().__call__(x, pos) else ""

    axis.set_major_formatter(FuncFormatter(label))
    minor = PlainMinor(base=base)
    minor.labelOnlyBase = False
    axis.set_minor_formatter(minor)
