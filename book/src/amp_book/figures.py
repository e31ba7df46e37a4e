"""The book's figures in the reader's theme, light or dark (a figure is the lesson's SVG,
:func:`amp_lesson.plotting.figure_svg`).

- In the book's kernels (:func:`show_figures_as_svg`, from their start-up file) a figure a
  cell draws is that SVG, on a transparent background, instead of a PNG.
- As a page is written, every such figure is themed (:func:`themed_svg`): its colours
  follow the page's ``color-scheme``. A figure glued as HTML is themed too
  (:func:`theme_figures_in`).

A reader's notebook is left alone: its figures are Matplotlib's own, on white.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "INLINE_SVG_MARK",
    "dark_colour",
    "show_figures_as_svg",
    "theme_figures_in",
    "theme_figures_within",
    "themed_svg",
]

_FONT_FAMILY = re.compile(r"font-family: [^;\"]*")
_COLOUR = re.compile(r"(fill|stroke|stop-color|color): (#[0-9a-fA-F]{6})")
_FIGURE = re.compile(r'<svg class="amp-svg".*?</svg>', re.DOTALL)
INLINE_SVG_MARK = '<svg class="amp-svg"'
"""How a figure the lesson drew begins (:func:`amp_lesson.plotting.figure_svg`)."""


def dark_colour(colour: str) -> str:
    """The colour that plays ``colour``'s part on the dark theme's background.

    A grey is inverted (black text becomes near-white, a white patch dark); a
    hue keeps its hue and saturation and is made at least as light as it is
    dark, so the palette's lines stay apart and stand out against the dark
    background.

    Parameters
    ----------
    colour : str
        ``#rrggbb``.

    Returns
    -------
    str
        ``#rrggbb``.

    Raises
    ------
    ValueError
        If ``colour`` is not ``#rrggbb``.

    Examples
    --------
    >>> dark_colour("#000000"), dark_colour("#ffffff"), dark_colour("#0072b2")
    ('#ffffff', '#000000', '#4dbfff')
    """
    import colorsys

    if not isinstance(colour, str) or not re.fullmatch(r"#[0-9a-fA-F]{6}", colour):
        raise ValueError(f"colour must be #rrggbb, got {colour!r}")
    r, g, b = (int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5))
    hue, lightness, saturation = colorsys.rgb_to_hls(r, g, b)
    # a grey (or near enough) is inverted; a hue made at least as light as it is dark
    lightness = 1 - lightness if saturation < 0.15 else max(lightness, 1 - lightness)
    channels = colorsys.hls_to_rgb(hue, lightness, saturation)
    return "#" + "".join(f"{round(c * 255):02x}" for c in channels)


def themed_svg(svg: str) -> str:
    """A figure's ``<svg>`` element (:func:`amp_lesson.plotting.figure_svg`) in the light
    or the dark theme, whichever the reader picked.

    - Every colour becomes ``light-dark(colour, dark_colour(colour))`` (after the plain
      colour, for a browser without ``light-dark()``), so the figure follows the page's
      ``color-scheme``.
    - Text falls back to a sans-serif font where DejaVu Sans is missing.
    - Text Matplotlib leaves without a colour (black) gets the SVG's own default, themed
      like the rest.

    A figure already themed (a stored edition's, recorded when the kernels themed them)
    is left as it is.

    >>> print(themed_svg('<svg class="amp-svg" width="10pt"><path style="fill: #000000"/></svg>'))
    <svg class="amp-svg" style="fill: #000000; fill: light-dark(#000000, #ffffff)"
    width="10pt"><path style="fill: #000000; fill: light-dark(#000000, #ffffff)"/></svg>
    >>> themed_svg(themed_svg('<svg class="amp-svg"><g/></svg>')).count("light-dark")
    1
    """
    if "light-dark(" in svg:
        return svg

    def light_dark(match: re.Match[str]) -> str:
        prop, colour = match.group(1), match.group(2).lower()
        return f"{prop}: {colour}; {prop}: light-dark({colour}, {dark_colour(colour)})"

    svg = _COLOUR.sub(light_dark, svg)
    svg = _FONT_FAMILY.sub(
        lambda m: (
            m.group(0).rstrip() + ", 'Bitstream Vera Sans', Verdana, sans-serif"
            if "sans-serif" not in m.group(0)
            else m.group(0)
        ),
        svg,
    )
    # Matplotlib leaves black text without a fill: the SVG's own default, themed too.
    return svg.replace(
        '<svg class="amp-svg"',
        '<svg class="amp-svg" style="fill: #000000; fill: light-dark(#000000, #ffffff)"',
        1,
    )


def theme_figures_in(html: str) -> str:
    """``html`` with every figure's ``<svg class="amp-svg">`` element in it themed
    (:func:`themed_svg`): a figure glued into a page as HTML
    (:func:`amp_lesson.plotting.figure_html`).

    >>> theme_figures_in('<figure><svg class="amp-svg"><path style="fill: #ffffff"/></svg></figure>')
    '<figure><svg class="amp-svg" style="fill: #000000; fill: light-dark(#000000, #ffffff)"><path style="fill: #ffffff; fill: light-dark(#ffffff, #000000)"/></svg></figure>'
    """
    return _FIGURE.sub(lambda m: themed_svg(m.group(0)), html)


def theme_figures_within(value: Any) -> Any:
    """``value`` (a notebook's outputs, metadata or glued values: JSON) with every figure in
    it themed (:func:`theme_figures_in`); a string split in lines (a notebook's way) is
    joined where it holds one.

    >>> theme_figures_within({"a": ['<svg class="amp-svg">', "</svg>"], "b": 1})
    {'a': '<svg class="amp-svg" style="fill: #000000; fill: light-dark(#000000, #ffffff)"></svg>', 'b': 1}
    """
    if isinstance(value, str):
        return theme_figures_in(value) if INLINE_SVG_MARK in value else value
    if isinstance(value, list):
        if all(isinstance(v, str) for v in value) and INLINE_SVG_MARK in "".join(value):
            return theme_figures_in("".join(value))
        return [theme_figures_within(v) for v in value]
    if isinstance(value, dict):
        return {k: theme_figures_within(v) for k, v in value.items()}
    return value


def show_figures_as_svg(shell: Any = None) -> bool:
    """In the IPython ``shell`` (by default the running one), show every Matplotlib figure
    as :func:`amp_lesson.plotting.figure_svg` draws it, alone (no PNG), on a transparent
    background; return whether there was a shell to set.

    The book's kernels call it as they start (their IPython start-up file,
    :data:`amp_book.execution.STARTUP`): a figure's SVG is then themed as the page is
    written (:func:`themed_svg`). A reader's notebook keeps Matplotlib's own figures.
    """
    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return False
        shell = get_ipython()
    if getattr(shell, "display_formatter", None) is None:  # no shell, or none that displays
        return False
    # The inline backend registers a PNG formatter of its own when pyplot first loads it
    # (at the first figure): load it now, so that this one, registered after, stays.
    import matplotlib as mpl
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    from amp_lesson.plotting import figure_svg

    plt.close(plt.figure())
    # The figure sits on the page's own background, light or dark.
    mpl.rcParams["savefig.transparent"] = True
    formatters = shell.display_formatter.formatters
    for mime in ("image/png", "image/jpeg", "application/pdf", "image/svg+xml"):
        formatters[mime].pop(Figure, None)
    formatters["image/svg+xml"].for_type(Figure, figure_svg)
    return True
