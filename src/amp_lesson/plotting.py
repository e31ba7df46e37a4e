"""Figures that read the same in the book's light and dark themes.

Figures are drawn with Matplotlib's default inline backend on a white
background (the book frames them as a white card in both themes), with a
colour-blind-safe palette and line styles that also differ, so no
distinction rests on colour alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "LINESTYLES",
    "MARKERS",
    "PALETTE",
    "RC",
    "apply_book_style",
    "concept_map",
    "figure_html",
    "plot_lines",
    "plot_scale_trace",
]

# Okabe & Ito's colour-blind-safe palette.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
"""Okabe and Ito's colour-blind-safe palette, in the order lines take it."""

LINESTYLES = ("-", "--", "-.", ":")
"""Line styles that change with the colour, so no two lines differ by colour alone."""

MARKERS = ("o", "s", "^", "D", "v", "P")
"""Marker shapes :func:`plot_lines` draws hollow, so lines that coincide both stay visible."""

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
    >>> ax = plot_lines({"FP32": [1.0, 0.9, 0.8], "FP16": [1.0, 1.0, 1.0]}, ylabel="weight")
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
    ax.legend()
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
    >>> ax = plot_scale_trace({"run": [2.0**17, 2.0**16, 2.0**16]}, {"run": [True, False, False]})
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
    ax.legend()
    return ax


def figure_html(fig: Any, *, alt: str, caption: str) -> Any:
    """Return ``fig`` as an HTML figure, image and caption, that another page can paste.

    MyST-NB pastes a value glued on one page into another only as plain
    output, without a caption or alt text. This HTML holds both: the PNG
    (drawn as the inline backend draws it, tight around the axes) inline, the
    alt text on the image and the caption under it, in the markup Sphinx gives
    a figure, so the book's styles (the white card in the dark theme) apply.

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
    >>> fig, ax = plt.subplots()
    >>> html = figure_html(fig, alt="An empty plot.", caption="Nothing yet.")
    >>> html.data.startswith('<figure class="align-default">'), 'alt="An empty plot."' in html.data
    (True, True)
    >>> plt.close(fig)
    >>> figure_html(fig, alt=" ", caption="Nothing yet.")
    Traceback (most recent call last):
    ...
    ValueError: alt must describe the figure, got ' '
    """
    import base64
    import html
    import io

    from IPython.display import HTML
    from matplotlib.figure import Figure

    if not isinstance(fig, Figure):
        raise TypeError(f"fig must be a matplotlib Figure, got {type(fig).__name__}")
    for name, text in (("alt", alt), ("caption", caption)):
        if not isinstance(text, str) or not text.strip():
            what = "describe the figure" if name == "alt" else "say what the figure shows"
            raise ValueError(f"{name} must {what}, got {text!r}")
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", bbox_inches="tight", dpi="figure")
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return HTML(
        '<figure class="align-default">'
        f'<img src="data:image/png;base64,{data}" alt="{html.escape(alt)}" />'
        f'<figcaption><p><span class="caption-text">{html.escape(caption)}</span></p>'
        "</figcaption></figure>"
    )
