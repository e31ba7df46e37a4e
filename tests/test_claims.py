"""Outcome words are bound to the run: the run picks them, or a contradicted one fails the build."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from bs4 import BeautifulSoup
from helpers import build_one_page, one_step_bitwise

from amp_lesson.claims import ClaimContradicted, claim


def test_the_run_picks_the_words() -> None:
    assert claim("k", True, "They are identical.", "They differ.") == "They are identical."
    assert claim("k", np.bool_(False), "They are identical.", "They differ.") == "They differ."
    assert claim("k", torch.tensor(True), "identical") == "identical"
    both = torch.equal(torch.ones(2), torch.zeros(2))
    assert claim("k", both, "equal", "unequal", phrase=True) == "unequal"


@pytest.mark.parametrize(
    ("says", "otherwise", "bad"),
    [
        ("are identical", "They differ.", "says"),
        ("They are identical.", "differ", "otherwise"),
        ("They are identical.", "they differ.", "otherwise"),
        ("They are identical", "They differ.", "says"),
    ],
)
def test_two_wordings_must_each_be_a_whole_sentence(says, otherwise, bad) -> None:
    with pytest.raises(ValueError, match=rf"claim 'k': with two wordings, {bad} must be a whole"):
        claim("k", True, says, otherwise)
    assert claim("k", True, says, otherwise, phrase=True) == says  # a table cell or a label


def test_a_sentence_may_open_with_a_quote_or_a_number_and_close_with_one() -> None:
    assert claim("k", True, '"Same," it says.', "4 rows differ (of 8).") == '"Same," it says.'
    assert claim("k", False, "\u201cSame?\u201d", "2 ulps apart.") == "2 ulps apart."


def test_a_committed_claim_the_run_contradicts_raises_and_names_itself() -> None:
    with pytest.raises(ClaimContradicted, match=r"claim 'same_bits' \('bitwise identical'\)"):
        claim("same_bits", False, "bitwise identical")


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        (("1st", True, "x"), ValueError, "key must be a Python identifier"),
        (("k", 1, "x"), TypeError, "holds must be a bool"),
        (("k", torch.tensor([True, True]), "x"), TypeError, "holds must be a bool"),
        (("k", "yes", "x"), TypeError, "holds must be a bool"),
        (("k", True, ""), ValueError, "says must be a non-empty string"),
        (("k", True, None), ValueError, "says must be a non-empty string"),
        (("k", True, "x", " "), ValueError, "otherwise must be a non-empty string"),
        (("k", True, "X.", "Y.", 1), TypeError, "takes from 3 to 4 positional"),
    ],
)
def test_bad_input_is_named(args, error, message) -> None:
    with pytest.raises(error, match=message):
        claim(*args)


# --------------------------------------------------------------------------- in a real build

PAGE = "chapter/accumulation-equals-full-batch"


def _build_page(tmp_path: Path, edit=lambda text: text) -> subprocess.CompletedProcess[str]:
    """Build a one-page book holding the accumulation page, edited by ``edit``."""
    return build_one_page(tmp_path, PAGE, edit)


def _sentence(html_dir: Path, start: str) -> str:
    html = (html_dir / f"{PAGE}.html").read_text(encoding="utf-8")
    text = " ".join(BeautifulSoup(html, "html.parser").select_one("article").get_text().split())
    return re.search(re.escape(start) + r"[^.]*\.", text).group(0)


@pytest.mark.book
def test_flipping_an_outcome_changes_the_sentence_or_fails_the_build(
    built_book: Path, tmp_path: Path
) -> None:
    """Make the float32 runs compute in float64: the verdict the page prints follows the run."""
    expected = {dt: one_step_bitwise(dt) for dt in (torch.float32, torch.float64)}
    assert expected[torch.float32] != expected[torch.float64], "no outcome to flip on this device"

    def verdict(bitwise: bool) -> str:
        return "are bitwise identical" if bitwise else "are not bitwise identical"

    sentence = _sentence(built_book, "In float32 they")  # the book as it stands
    assert sentence.startswith(f"In float32 they {verdict(expected[torch.float32])}")

    def in_float64(text: str) -> str:  # the "float32" runs of the page now compute in float64
        return text.replace("(dtype=dtype)", "(dtype=torch.float64)")

    flipped = _build_page(tmp_path / "flipped", in_float64)
    assert flipped.returncode == 0, flipped.stdout + flipped.stderr
    sentence = _sentence(tmp_path / "flipped" / "html", "In float32 they")
    assert sentence.startswith(f"In float32 they {verdict(expected[torch.float64])}")

    def break_identity(text: str) -> str:  # the raw loss at S/3 is no longer the same numbers
        return text.replace(
            "backward_values(2.0**k / N_ACCUM, False", "backward_values(2.0**k / 3, False"
        )

    broken = _build_page(tmp_path / "broken", break_identity)
    assert broken.returncode != 0
    assert "claim 'same_values'" in broken.stdout + broken.stderr  # the failure names the claim
