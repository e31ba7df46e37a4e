"""The book's figures in the reader's theme (amp_book.figures)."""

from __future__ import annotations

import matplotlib as mpl
import matplotlib.pyplot as plt
import pytest

from amp_book.figures import dark_colour, show_figures_as_svg, theme_figures_in, themed_svg
from amp_lesson.plotting import PALETTE, apply_book_style, figure_html, figure_svg


def _svg_of(fig: object) -> str:
    try:
        return figure_svg(fig)
    finally:
        plt.close(fig)


def test_dark_colour_inverts_greys_and_lightens_hues_keeping_them_apart() -> None:
    import colorsys

    def hls(colour: str) -> tuple[float, float, float]:
        return colorsys.rgb_to_hls(*(int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)))

    assert dark_colour("#000000") == "#ffffff"
    assert dark_colour("#ffffff") == "#000000"
    assert dark_colour("#333333") == "#cccccc"
    darks = [dark_colour(c.lower()) for c in PALETTE[:6]]
    assert len(set(darks)) == 6  # the palette stays six colours
    for light, dark in zip(PALETTE[:6], darks, strict=True):
        assert hls(dark)[1] >= 0.5 - 1e-9  # at least as light as dark: it stands out on black
        assert abs(hls(dark)[0] - hls(light)[0]) < 0.01  # the same hue
    with pytest.raises(ValueError, match="colour must be #rrggbb, got 'red'"):
        dark_colour("red")


def test_themed_svg_writes_every_colour_for_both_themes() -> None:
    import re

    with mpl.rc_context():
        apply_book_style()
        fig, ax = plt.subplots(figsize=(4, 2.5))
        ax.plot([1, 2, 3], [1, 4, 9], label="a line", marker="o")
        ax.axvspan(1.5, 2, color=PALETTE[4], alpha=0.2)
        ax.legend()
        one = themed_svg(_svg_of(fig))
        fig, ax = plt.subplots(figsize=(4, 2.5))
        ax.plot([1, 2, 3], [9, 4, 1], label="another", marker="o")
        two = themed_svg(_svg_of(fig))
    for svg in (one, two):
        plain = re.findall(r"(?:fill|stroke): (#[0-9a-f]{6})", svg)
        themed = re.findall(r"(?:fill|stroke): light-dark\((#[0-9a-f]{6}), (#[0-9a-f]{6})\)", svg)
        assert plain
        # every colour is written twice: plain (for an older browser), then for both themes
        assert sorted(plain) == sorted(light for light, _ in themed)
        assert all(dark == dark_colour(light) for light, dark in themed)
        assert "<?xml" not in svg
        assert "<metadata" not in svg
        assert "<text" in svg  # text stays text
        assert "sans-serif" in svg
    assert themed_svg(one) == one  # themed once only (a stored edition's figures were)


def test_the_kernels_show_figures_as_the_lessons_svg_only_on_a_transparent_background() -> None:
    """In a real IPython shell set up as the book's kernels are: a figure's display is the
    lesson's SVG, with no PNG beside it, and no background of its own."""
    from IPython.core.interactiveshell import InteractiveShell
    from matplotlib.figure import Figure

    shell = InteractiveShell.instance()
    try:
        with mpl.rc_context():
            assert show_figures_as_svg(shell)
            apply_book_style()
            fig, ax = plt.subplots(figsize=(4, 2))
            ax.plot([1, 2], [2, 1])
            data, _ = shell.display_formatter.format(fig)
            plt.close(fig)
    finally:
        shell.display_formatter.formatters["image/svg+xml"].pop(Figure, None)
        InteractiveShell.clear_instance()
    assert "image/png" not in data
    svg = data["image/svg+xml"]
    assert svg.startswith('<svg class="amp-svg"')
    assert "fill: #ffffff" not in svg  # transparent: the page's own background shows


def test_a_figure_glued_as_html_is_themed_too() -> None:
    fig, ax = plt.subplots(figsize=(4, 2))
    ax.plot([1, 2], [2, 1])
    html = figure_html(fig, alt="A line.", caption="Down.").data
    plt.close(fig)
    assert "light-dark(" not in html
    themed = theme_figures_in(html)
    assert themed.startswith('<figure class="align-default"><svg class="amp-svg" style=')
    assert "light-dark(" in themed
    assert themed.endswith("</figcaption></figure>")
