"""amp_lesson.display: number formatting, tables, and source without docstrings."""

from __future__ import annotations

import pytest

from amp_lesson.accumulation import train_amp
from amp_lesson.display import source_without_docstring


def _documented(x):
    """A docstring
    over two lines."""
    # a comment that stays
    return x + 1


def _bare(x):
    return x


def test_source_without_docstring_drops_only_the_docstring() -> None:
    text = source_without_docstring(_documented)
    assert "docstring" not in text
    assert "# a comment that stays" in text
    assert text.splitlines()[0] == "def _documented(x):"
    compile(text, "<source>", "exec")  # what is left is still valid code


def test_source_without_docstring_keeps_a_function_without_one() -> None:
    assert source_without_docstring(_bare) == "def _bare(x):\n    return x\n"


def test_source_without_docstring_shows_the_amp_loop_in_order() -> None:
    text = source_without_docstring(train_amp)
    calls = [
        "torch.autocast",
        "scaler.scale(loss).backward()",
        "scaler.step(optimizer)",
        "scaler.update()",
        "optimizer.zero_grad()",
    ]
    positions = [text.index(call) for call in calls]
    assert positions[:4] == sorted(positions[:4])
    assert ">>>" not in text


def test_source_without_docstring_refuses_what_is_not_a_function() -> None:
    with pytest.raises(TypeError, match="func must be a function"):
        source_without_docstring(42)
