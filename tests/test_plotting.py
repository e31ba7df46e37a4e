"""Tests for amp_lesson.plotting: the book style, the concept map and the line and scale plots."""

from __future__ import annotations

import matplotlib as mpl
import matplotlib.pyplot as plt
import pytest

from amp_lesson.plotting import (
    LINESTYLES,
    MIN_TEXT_PX,
    PALETTE,
    PHONE_COLUMN_PX,
    apply_book_style,
    check_text_size,
    concept_map,
    figure_html,
    figure_svg,
    label_svg,
    plot_lines,
    plot_scale_trace,
    power_label,
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
        assert plt.rcParams["svg.fonttype"] == "none"  # text stays text
        # white, which reads in a dark notebook theme too (the book's build draws its
        # figures on a transparent background: amp_book.figures)
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


def test_figure_html_holds_the_svg_named_by_its_alt_text_and_escaped_caption() -> None:
    import xml.dom.minidom

    fig, _ = plt.subplots(figsize=(4, 2))
    try:
        html = figure_html(fig, alt='Bars "<" a line.', caption="FP16 & FP32.").data
    finally:
        plt.close(fig)
    svg = html[html.index("<svg") : html.index("</svg>") + len("</svg>")]
    root = xml.dom.minidom.parseString(svg).documentElement  # well-formed
    assert root.getAttribute("role") == "img"
    assert root.getAttribute("aria-label") == 'Bars "<" a line.'
    assert root.getElementsByTagName("title")[0].firstChild.data == 'Bars "<" a line.'
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


# -- figures in both themes and on a phone ---------------------------------------------------


def _svg_of(fig: object) -> str:
    try:
        return figure_svg(fig)
    finally:
        plt.close(fig)


def test_figure_svg_is_a_standalone_element_whose_ids_no_other_figure_shares() -> None:
    import re

    with mpl.rc_context():
        apply_book_style()
        fig, ax = plt.subplots(figsize=(4, 2.5))
        ax.plot([1, 2, 3], [1, 4, 9], label="a line", marker="o")
        ax.legend()
        one = _svg_of(fig)
        fig, ax = plt.subplots(figsize=(4, 2.5))
        ax.plot([1, 2, 3], [9, 4, 1], label="another", marker="o")
        two = _svg_of(fig)
    for svg in (one, two):
        assert svg.startswith('<svg class="amp-svg"')
        assert "<?xml" not in svg
        assert "<metadata" not in svg
        assert "<text" in svg  # text stays text
        assert "light-dark(" not in svg  # the book's build themes it as it writes the page
    ids_one = set(re.findall(r'id="([^"]+)"', one))
    ids_two = set(re.findall(r'id="([^"]+)"', two))
    assert ids_one
    assert not ids_one & ids_two  # two figures on one page share no id
    for svg, ids in ((one, ids_one), (two, ids_two)):
        refs = set(re.findall(r"url\(#([^)]+)\)", svg)) | set(re.findall(r'href="#([^"]+)"', svg))
        assert refs
        assert refs <= ids  # every reference still finds its element


def test_label_svg_names_the_figure_and_refuses_what_is_not_svg() -> None:
    labelled = label_svg('<svg class="amp-svg" width="2pt"><g/></svg>', "A plot.")
    assert labelled.startswith('<svg class="amp-svg" width="2pt" role="img" aria-label="A plot.">')
    assert "<title>A plot.</title><g/>" in labelled
    with pytest.raises(ValueError, match="svg holds no <svg> element"):
        label_svg("<g/>", "x")


def test_check_text_size_measures_the_smallest_text_as_a_phone_shows_it() -> None:
    fig, ax = plt.subplots(figsize=(3, 2))  # narrower than a phone's column: not shrunk
    try:
        ax.tick_params(labelsize=11)
        ax.set_xlabel("step", fontsize=12)
        assert check_text_size(fig) == pytest.approx(11 * 4 / 3)
        ax.set_ylabel("$2^{-14}$", fontsize=12)  # a maths exponent is set at 70 %
        assert check_text_size(fig) == pytest.approx(12 * 4 / 3 * 0.7)
        ax.set_ylabel("2⁻¹⁴", fontsize=12)  # a Unicode exponent at the label's size
        assert check_text_size(fig) == pytest.approx(11 * 4 / 3)
        fig.set_size_inches(8, 2)  # now wider than the column: shrunk, and too small
        with pytest.raises(ValueError, match=r"figure text '.*' would be .* CSS pixels"):
            check_text_size(fig)
    finally:
        plt.close(fig)
    assert PHONE_COLUMN_PX < 390
    assert MIN_TEXT_PX == 10


def test_figure_svg_refuses_a_figure_too_small_to_read_on_a_phone() -> None:
    fig, ax = plt.subplots(figsize=(7.2, 3.6))
    ax.set_xlabel("step", fontsize=8)
    with pytest.raises(ValueError, match="make it at most 5 inches wide"):
        _svg_of(fig)
    with pytest.raises(TypeError, match="fig must be a matplotlib Figure"):
        figure_svg("a figure")


def test_log_axes_are_labelled_with_unicode_exponents() -> None:
    with mpl.rc_context():
        apply_book_style()
        ax = plot_scale_trace({"run": [2.0**10, 2.0**12, 2.0**16]})
        svg = _svg_of(ax.figure)
    assert "2¹⁶" in svg
    assert "mathdefault" not in svg
    assert power_label(2, -14) == "2⁻¹⁴"
    assert power_label(10, 0) == "10⁰"


def test_a_figure_too_small_for_a_phone_fails_the_build_naming_the_text(sphinx, tmp_path) -> None:
    """The display refuses the figure; the traceback IPython puts among the cell's outputs
    (the cell itself did not raise) fails the build, naming the page and the text."""
    from helpers import mini_book

    body = (
        "```{code-cell} ipython3\n"
        "import matplotlib.pyplot as plt\n"
        "from amp_lesson.plotting import apply_book_style\n\n"
        "apply_book_style()\n"
        "fig, ax = plt.subplots(figsize=(9, 3))\n"
        'ax.set_title("a title in 6 pt", fontsize=6)\n'
        "plt.show()\n"
        "```\n"
    )
    src = mini_book(tmp_path, body)
    proc = sphinx(src, tmp_path / "html", check=False)
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "a cell's output is a traceback, though the cell did not raise" in log
    assert "figure text 'a title in 6 pt' would be" in log
    assert "page.md" in log


def test_the_same_figure_shown_twice_gets_ids_of_its_own_each_time() -> None:
    import re

    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([1, 2], [1, 2], marker="o")
    try:
        first, second = figure_svg(fig), figure_svg(fig)
    finally:
        plt.close(fig)
    assert set(re.findall(r'id="([^"]+)"', first)).isdisjoint(re.findall(r'id="([^"]+)"', second))


def test_a_log_axis_within_one_power_keeps_its_minor_labels() -> None:
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([2.0, 3.0], [1, 2])
    ax.set_xscale("log")
    ax.set_xlim(2, 9)  # less than one power of ten: no major tick inside
    try:
        figure_svg(fig)
        labels = [t.get_text() for t in ax.xaxis.get_ticklabels(minor=True) if t.get_text()]
    finally:
        plt.close(fig)
    assert labels  # still labelled


# -- legends clear of the data -------------------------------------------------------------


def _legend_hits(ax: object) -> list[str]:
    """The lines whose drawn points the axes' legend covers, in display coordinates.

    Each line is sampled densely along what is drawn (its steps, for a step line) and at its
    markers, grown by the marker's half size; the legend's box is the one drawn."""
    import itertools

    import numpy as np

    fig = ax.figure
    fig.canvas.draw()
    box = ax.get_legend().get_window_extent()
    hits = []
    for line in ax.get_lines():
        if not len(line.get_xydata()):
            continue
        points = [line.get_transform().transform(line.get_xydata())]
        if line.get_linestyle() not in ("None", "none", ""):
            drawn = line.get_transform().transform(line.get_path().vertices)
            for (x0, y0), (x1, y1) in itertools.pairwise(drawn):
                t = np.linspace(0.0, 1.0, 60)[:, None]
                points.append(np.hstack([x0 + t * (x1 - x0), y0 + t * (y1 - y0)]))
        xy = np.vstack(points)
        grow = line.get_markersize() * fig.dpi / 72 / 2 if line.get_marker() != "None" else 0
        inside = (
            (xy[:, 0] >= box.x0 - grow) & (xy[:, 0] <= box.x1 + grow)
            & (xy[:, 1] >= box.y0 - grow) & (xy[:, 1] <= box.y1 + grow)
        )  # fmt: skip
        if inside.any():
            hits.append(line.get_label())
    return hits


def _gradscaler_trace_figure() -> object:
    """The GradScaler chapter's trace, as its page draws it: a step line, crosses on the
    overflows, the legend put in the lower right by hand."""
    from amp_lesson.scaler import simulate

    trace = simulate([s in {1, 2, 3, 14, 15, 27} for s in range(1, 41)], growth_interval=4)
    fig, ax = plt.subplots()
    ax.step([r.step for r in trace], [r.scale_used for r in trace], where="post",
            label="scale used")  # fmt: skip
    bad = [r for r in trace if r.found_inf]
    ax.plot([r.step for r in bad], [r.scale_used for r in bad], "X", markersize=9,
            linestyle="none", label="overflow: step skipped")  # fmt: skip
    ax.set_yscale("log", base=2)
    ax.legend(loc="lower right")
    return fig


def _memory_figure() -> object:
    """The memory chapter's figure, as its page draws it (its numbers from one run): three
    lines on log axes and Matplotlib's "best" legend."""
    fig, ax = plt.subplots()
    batches = [16, 64, 256, 1024, 4096]
    kib = {
        "FP32": [47.0, 189.0, 756.0, 3024.0, 12096.0],
        "AMP (FP16): activations + copies": [281.0, 362.0, 686.0, 1982.0, 7166.0],
        "AMP (FP16): activations only": [26.0, 104.0, 416.0, 1664.0, 6656.0],
    }
    for (label, values), marker in zip(kib.items(), "os^", strict=True):
        ax.plot(batches, values, marker=marker, label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.legend()
    return fig


@pytest.mark.parametrize("make", [_gradscaler_trace_figure, _memory_figure])
def test_the_book_moves_a_legend_off_the_data(make) -> None:
    with mpl.rc_context():
        apply_book_style()
        fig = make()
        try:
            ax = fig.axes[0]
            assert _legend_hits(ax)  # as the page places it, the legend covers a line
            figure_svg(fig)  # what the book shows
            assert _legend_hits(ax) == []
            entries = [t.get_text() for t in ax.get_legend().get_texts()]
            assert entries == [line.get_label() for line in ax.get_lines()]  # nothing lost
            # the figure still fits a phone's column with its text large enough
            assert check_text_size(fig) >= MIN_TEXT_PX
        finally:
            plt.close(fig)


def test_a_legend_with_no_clear_place_inside_goes_above_the_axes() -> None:
    import numpy as np

    from amp_lesson.plotting import place_legend

    fig, ax = plt.subplots()
    x = np.linspace(0, 1, 200)
    for k in range(8):  # lines filling the whole box: no corner is clear
        ax.plot(x, (x * (k + 1) * 7.3) % 1, label=f"line {k}")
    try:
        legend = place_legend(ax)
        fig.canvas.draw()
        assert _legend_hits(ax) == []
        assert legend.get_window_extent().y0 >= ax.get_window_extent().y1  # above the axes
        assert legend.get_window_extent().width <= ax.get_window_extent().width + 1
    finally:
        plt.close(fig)


def test_a_clear_legend_stays_where_it_is_and_an_axes_without_labels_gets_none() -> None:
    from amp_lesson.plotting import place_legend

    fig, (top, bottom) = plt.subplots(2, 1)
    top.plot([0, 1], [0, 1], label="rising")
    top.legend(loc="upper left")
    bottom.plot([0, 1], [1, 0])
    try:
        before = top.get_legend()
        assert place_legend(top) is before
        box, axes = before.get_window_extent(), top.get_window_extent()
        assert box.x0 - axes.x0 < 20  # upper left, still
        assert axes.y1 - box.y1 < 20
        assert place_legend(bottom) is None
        assert bottom.get_legend() is None
    finally:
        plt.close(fig)


def test_plot_lines_and_plot_scale_trace_keep_their_legends_off_the_lines() -> None:
    with mpl.rc_context():
        apply_book_style()
        # zigzags that cross the whole box: Matplotlib's "best" has no clear place left
        zig = [9.0 * (i % 2) for i in range(30)]
        ax = plot_lines({"zig": zig, "zag": [9.0 - v for v in zig], "mid": [4.5] * 30})
        try:
            assert _legend_hits(ax) == []
        finally:
            plt.close(ax.figure)
        ax = plot_scale_trace({"run": [2.0 ** (16 - (i % 5)) for i in range(40)]},
                              {"run": [i % 5 == 4 for i in range(40)]})  # fmt: skip
        try:
            assert _legend_hits(ax) == []
        finally:
            plt.close(ax.figure)


def test_under_another_axes_a_crowded_legend_goes_below_never_beside() -> None:
    import numpy as np

    from amp_lesson.plotting import place_legend

    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(5, 4.8))
    x = np.linspace(0, 1, 200)
    for ax in (top, bottom):
        for k in range(6):
            ax.plot(x, (x * (k + 1) * 7.3) % 1, label=f"line {k}")
    bottom.set_xlabel("step")
    try:
        fig.canvas.draw()
        width = fig.get_tightbbox().width
        legend = place_legend(bottom)
        fig.canvas.draw()
        assert _legend_hits(bottom) == []
        box = legend.get_window_extent()
        assert not box.overlaps(top.get_tightbbox())  # not over the axes above
        assert box.y1 <= bottom.xaxis.label.get_window_extent().y0  # under the x label
        assert fig.get_tightbbox().width <= width + 0.05  # and the figure no wider
    finally:
        plt.close(fig)
