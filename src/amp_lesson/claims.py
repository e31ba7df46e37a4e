"""Words the run chooses: sentences that state an outcome are bound to it.

A page's numbers come from its cells; so must its verdicts. A sentence that
says two runs are "bitwise identical", that a step "was skipped" or that FP16
is "slower here" states an outcome of this build, and a build on another
device may see the opposite. :func:`claim` binds such words to the run:

- with two wordings, the run picks one, and the page shows the one that is
  true on the device that built it;
- with one wording, the page commits to it, and a run that contradicts it
  raises :class:`ClaimContradicted`, which fails the build and names the claim.

Either way the words reach the page through glue, ``{glue:text}`key```, so
the prose scanner of the test suite can tell a bound outcome from a typed one.

>>> claim("same_weights", 0.1 + 0.2 == 0.3, "are bitwise identical", "differ in the last bit")
'differ in the last bit'
>>> claim("power_of_two_exact", (0.1 * 4) / 4 == 0.1, "exact")
'exact'
>>> claim("addition_associates", (0.1 + 0.2) + 0.3 == 0.1 + (0.2 + 0.3), "associative")
Traceback (most recent call last):
...
amp_lesson.claims.ClaimContradicted: claim 'addition_associates' ('associative') is contradicted by this run
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["ClaimContradicted", "claim"]

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ClaimContradicted(AssertionError):
    """A sentence of the page states an outcome that this run did not produce."""


def _as_bool(holds: Any) -> bool:
    """``holds`` as a bool: a bool, a NumPy bool or a one-element boolean tensor."""
    if isinstance(holds, bool):
        return holds
    dtype = str(getattr(holds, "dtype", ""))
    count = holds.numel() if hasattr(holds, "numel") else getattr(holds, "size", None)
    if dtype in ("bool", "torch.bool") and count == 1:
        return bool(holds)
    raise TypeError(f"holds must be a bool or a one-element boolean array or tensor, got {holds!r}")


def _glue(key: str, text: str) -> None:
    """Glue ``text`` under ``key`` when the page runs inside the book."""
    try:
        from myst_nb import glue
    except ImportError:  # a notebook run outside the book: nothing to glue into
        return
    glue(key, text, display=False)


def claim(key: str, holds: Any, says: str, otherwise: str | None = None) -> str:
    """Bind the words of a sentence to what the run did, and glue them under ``key``.

    Parameters
    ----------
    key
        The glue key the page's prose uses, ``{glue:text}`key```: a Python
        identifier, unique on the page.
    holds
        Whether the outcome that ``says`` describes happened in this run: a
        bool, a NumPy bool, or a one-element boolean tensor.
    says
        The words for the outcome when it holds.
    otherwise
        The words for the outcome when it does not. Without them the page
        commits to ``says``, and a run where it does not hold fails.

    Returns
    -------
    str
        The words glued under ``key``.

    Raises
    ------
    ClaimContradicted
        If ``holds`` is false and there is no ``otherwise``: the page's
        sentence would be false on this device, so the build must stop.
    TypeError, ValueError
        If an argument is not of the kind described above.

    Examples
    --------
    >>> claim("order", 1.0 + 2.0**-60 == 1.0, "is absorbed", "survives")
    'is absorbed'
    """
    if not isinstance(key, str) or not _KEY.match(key):
        raise ValueError(f"key must be a Python identifier (the glue key), got {key!r}")
    for name, text in (("says", says), ("otherwise", otherwise)):
        if (text is not None or name == "says") and not (isinstance(text, str) and text.strip()):
            raise ValueError(f"{name} must be a non-empty string, got {text!r}")
    if _as_bool(holds):
        words = says
    elif otherwise is not None:
        words = otherwise
    else:
        raise ClaimContradicted(f"claim {key!r} ({says!r}) is contradicted by this run")
    _glue(key, words)
    return words
