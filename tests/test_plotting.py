"""Tests for amp_lesson.plotting: the book style and the concept-map helper."""

from __future__ import annotations

import matplotlib as mpl
import matplotlib.pyplot as plt
import pytest

from amp_lesson.plotting import LINESTYLES, PALETTE, apply_book_style, concept_map

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
