"""Draw the book's social card, ``docs/_static/social-card.png`` (1200 x 630 pixels).

The image a link to the book shows in a chat or a feed (``docs/conf.py``'s ``ogp_image``):
the title, what the book teaches, and the formats' bit layouts, in the book's palette.
Drawn once and committed, so the build needs neither the network nor a font cache.

    python tools/social_card.py [OUT]
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle

from amp_lesson.plotting import PALETTE

OUT = Path(__file__).resolve().parents[1] / "docs" / "_static" / "social-card.png"
LAYOUTS = [("FP32", 1, 8, 23), ("BF16", 1, 8, 7), ("FP16", 1, 5, 10), ("FP8 E4M3", 1, 4, 3)]
"""Each format's sign, exponent and mantissa bits, drawn as one row of cells."""


def draw(out: Path = OUT) -> Path:
    fig = plt.figure(figsize=(12, 6.3), dpi=100)
    fig.patch.set_facecolor("white")
    fig.text(0.05, 0.84, "Mixed precision in PyTorch", fontsize=44, weight="bold", color="#1a1a1a")
    fig.text(
        0.05,
        0.74,
        "FP16, BF16, FP8 and MX against FP32 · loss scaling · gradient accumulation",
        fontsize=21,
        color="#333333",
    )
    fig.text(
        0.05, 0.07, "An executable book: every number in it is computed by its build",
        fontsize=18, color="#555555",
    )  # fmt: skip
    ax = fig.add_axes((0.05, 0.16, 0.9, 0.5))
    ax.set_xlim(0, 40)
    ax.set_ylim(0, len(LAYOUTS))
    ax.axis("off")
    colours = (PALETTE[0], PALETTE[1], PALETTE[2])
    for row, (name, *bits) in enumerate(reversed(LAYOUTS)):
        x = 7.0
        ax.text(0, row + 0.45, name, fontsize=20, va="center", color="#1a1a1a")
        for colour, count in zip(colours, bits, strict=True):
            for _ in range(count):
                ax.add_patch(Rectangle((x, row + 0.15), 0.9, 0.6, color=colour, lw=0))
                x += 1.0
    for i, (colour, word) in enumerate(zip(colours, ("sign", "exponent", "mantissa"), strict=True)):
        ax.add_patch(Rectangle((26.0, 1.3 - 0.45 * i), 0.9, 0.3, color=colour, lw=0))
        ax.text(27.3, 1.45 - 0.45 * i, word, fontsize=18, va="center", color="#333333")
    fig.savefig(out, dpi=100, facecolor="white", metadata={"Software": None})
    plt.close(fig)
    return out


if __name__ == "__main__":
    print(draw(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT))
