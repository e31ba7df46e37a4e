"""Tests for amp_lesson.plotting: the book style, the concept map and the line and scale plots."""

from __future__ import annotations

import matplotlib as mpl
import matplotlib.pyplot as plt
import pytest

from amp_lesson.plotting import (
    LINESTYLES,
    PALETTE,
    apply_book_style,
    concept_map,
    figure_html,
    plot_lines,
    plot_scale_trace,
)

BOXES = {
    "a": (0.2, 0.8, "FP16 and FP32: what they can hold"),
    "b": (0.8, 0.8, "Loss scaling"),
    "c": (0.5, 0.2, "Your turn"),
}
ARROWS = [("a", "b", "small gradients underflow"), ("b", "c", "scale per window")]


def test_concept_map_draws_every_box_and_label() -> None:
    fig = concept_map(BOXES, ARROWS)
    try:
        ax = fig.axes[0]
        texts = [t.get_text().replace("\n", " ") for t in ax.texts if t.get_text()]
        assert texts == [spec[2] for spec in BOXES.values()] + [label for *_, label in ARROWS]
        assert len([c for c in ax.get_children() if type(c).__name__ == "Annotation"]) == 2
        assert not ax.axison
        fig.canvas.draw()  # the arrows clip at the boxes' patches without error
    finally:
        plt.close(fig)


def test_concept_map_wraps_long_text() -> None:
    fig = concept_map({"a": (0.5, 0.5, "word " * 12)}, [], box_width=10)
    try:
        assert max(len(line) for line in fig.axes[0].texts[0].get_text().splitlines()) <= 10
    finally:
        plt.close(fig)


@pytest.mark.parametrize(
    ("boxes", "arrows", "message"),
    [
        ({}, [], "at least one box"),
        ({"a": (1.5, 0.5, "A")}, [], "x and y in"),
        ({"a": (0.5, 0.5)}, [], "must be"),
        ({"a": (0.5, 0.5, "A")}, [("a", "b", "x")], "'b'"),
        ({"a": (0.5, 0.5, "A")}, [("a", "a")], "source, target, label"),
    ],
)
def test_concept_map_rejects_bad_input(boxes, arrows, message) -> None:
    with pytest.raises(ValueError, match=message):
        concept_map(boxes, arrows)


def test_book_style_palette_is_colour_blind_safe_okabe_ito() -> None:
    assert PALETTE[:3] == ("#0072B2", "#D55E00", "#009E73")
    with mpl.rc_context():
        apply_book_style()
        assert plt.rcParams["figure.facecolor"] == "white"
        cycle = plt.rcParams["axes.prop_cycle"].by_key()
        # colour and line style change together: no two lines differ by colour alone
        assert len(set(zip(cycle["color"], cycle["linestyle"], strict=True))) == len(LINESTYLES)


def test_plot_lines_gives_each_line_its_own_style_and_marker() -> None:
    with mpl.rc_context():
        apply_book_style()
        ax = plot_lines({"full": [1.0, 2.0, 3.0], "accumulated": [1.0, 2.0, 3.0]}, ylabel="w")
    try:
        full, acc = ax.get_lines()
        assert list(full.get_xdata()) == [1.0, 2.0, 3.0]  # x defaults to steps from 1
        # the two lines coincide; colour, line style and marker each tell them apart
        assert full.get_color() != acc.get_color()
        assert full.get_linestyle() != acc.get_linestyle()
        assert full.get_marker() != acc.get_marker()
        assert [t.get_text() for t in ax.get_legend().get_texts()] == ["full", "accumulated"]
        assert (ax.get_xlabel(), ax.get_ylabel()) == ("step", "w")
    finally:
        plt.close(ax.figure)


def test_plot_lines_puts_a_doubling_count_on_a_log2_axis() -> None:
    ax = plot_lines({"fp32": [0, 2, 2, 1]}, x=[1, 2, 4, 8], log2x=True, xlabel="N")
    try:
        assert ax.get_xscale() == "log"
        assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "4", "8"]
    finally:
        plt.close(ax.figure)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"series": {}}, "series must map"),
        ({"series": {"a": []}}, r"series\['a'\] holds no values"),
        ({"series": {"a": ["x"]}}, r"series\['a'\] must be a sequence of numbers"),
        ({"series": {"a": [1.0, 2.0]}, "x": [1.0]}, r"series\['a'\] has 2 values but x has 1"),
        ({"series": {"a": [1.0, 2.0]}, "x": [0.0, 1.0], "log2x": True}, "x must be positive"),
    ],
)
def test_plot_lines_rejects_bad_input(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        plot_lines(**kwargs)


def test_plot_scale_trace_crosses_exactly_the_skipped_steps() -> None:
    scales = {"a": [2.0**18, 2.0**17, 2.0**17], "b": [2.0**18, 2.0**17, 2.0**16]}
    ax = plot_scale_trace(scales, {"a": [True, False, False], "b": [True, False, True]})
    try:
        crosses = [line for line in ax.get_lines() if line.get_marker() == "X"]
        points = [list(zip(c.get_xdata(), c.get_ydata(), strict=True)) for c in crosses]
        # a's and b's crosses at step 1 sit side by side, each on its own run's scale
        assert points[:2] == [[(0.9, 2.0**18)], [(1.1, 2.0**18), (3.1, 2.0**16)]]
        assert ax.get_yscale() == "log"
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        assert legend == ["a", "b", "step skipped (a cross)"]
    finally:
        plt.close(ax.figure)


def test_plot_scale_trace_without_skips_has_no_cross_in_its_legend() -> None:
    ax = plot_scale_trace({"a": [4.0, 8.0]})
    try:
        assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a"]
    finally:
        plt.close(ax.figure)


@pytest.mark.parametrize(
    ("scales", "skipped", "message"),
    [
        ({}, None, "scales must map"),
        ({"a": [1.0, float("inf")]}, None, "positive finite"),
        ({"a": [1.0, -2.0]}, None, "positive finite"),
        ({"a": [1.0]}, {"b": [True]}, "skipped names 'b'"),
        ({"a": [1.0]}, {"a": [True, False]}, r"skipped\['a'\] has 2 steps"),
    ],
)
def test_plot_scale_trace_rejects_bad_input(scales, skipped, message) -> None:
    with pytest.raises(ValueError, match=message):
        plot_scale_trace(scales, skipped)


def test_figure_html_holds_the_image_alt_text_and_escaped_caption() -> None:
    import base64
    import re

    fig, _ = plt.subplots()
    try:
        html = figure_html(fig, alt='Bars "<" a line.', caption="FP16 & FP32.").data
    finally:
        plt.close(fig)
    png = re.search(r'src="data:image/png;base64,([^"]+)"', html).group(1)
    assert base64.b64decode(png).startswith(b"\x89PNG")
    assert 'alt="Bars &quot;&lt;&quot; a line."' in html
    assert '<span class="caption-text">FP16 &amp; FP32.</span>' in html


@pytest.mark.parametrize(
    ("fig", "alt", "caption", "error", "message"),
    [
        ("not a figure", "a", "b", TypeError, "fig must be a matplotlib Figure"),
        (None, "", "b", ValueError, "alt must describe"),
        (None, "a", "  ", ValueError, "caption must say"),
    ],
)
def test_figure_html_rejects_bad_input(fig, alt, caption, error, message) -> None:
    figure = plt.figure() if fig is None else fig
    try:
        with pytest.raises(error, match=message):
            figure_html(figure, alt=alt, caption=caption)
    finally:
        if fig is None:
            plt.close(figure)
