"""The label above each kind of self-check, read by the site and by the notebooks alike.

>>> kicker("selfcheck-choice", "eliminate")
'Eliminate the wrong options'
"""

from __future__ import annotations

KICKERS: dict[str, str] = {
    "selfcheck-choice": "Check your understanding",
    "selfcheck-choice:eliminate": "Eliminate the wrong options",
    "selfcheck-predict": "Predict first",
    "selfcheck-sort": "Sort into buckets",
    "selfcheck-step-through": "Step through it",
    "selfcheck-refill": "Refill the column",
    "selfcheck-discuss": "Discussion prompt",
}
"""By directive name, and ``name:mode`` where a mode changes the label."""


def kicker(directive: str, mode: str | None = None) -> str:
    """The label above a self-check made by ``directive`` (with ``mode``, for a choice)."""
    if mode and f"{directive}:{mode}" in KICKERS:
        return KICKERS[f"{directive}:{mode}"]
    if directive not in KICKERS:
        raise ValueError(f"directive must be one of {sorted(KICKERS)}, got {directive!r}")
    return KICKERS[directive]
