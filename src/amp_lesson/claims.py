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
the book's build can tell a bound outcome from a typed one: it reads every
sentence a reader sees (page prose, self-checks, captions, the API reference's
docstrings) and fails on any that types an outcome phrase instead of gluing it
(the book's authors' guide lists the phrases).

>>> claim("same_weights", 0.1 + 0.2 == 0.3, "The sums are bitwise identical.",
...       "The sums differ in the last bit.")
'The sums differ in the last bit.'
>>> claim("power_of_two_exact", (0.1 * 4) / 4 == 0.1, "exact")
'exact'
>>> claim("addition_associates", (0.1 + 0.2) + 0.3 == 0.1 + (0.2 + 0.3),
...       "associative")
Traceback (most recent call last):
...
amp_lesson.claims.ClaimContradicted: claim 'addition_associates'
('associative') is contradicted by this run
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = [
    "CLAIM_RECORD_PREFIX",
    "ClaimContradicted",
    "claim",
]

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


CLAIM_RECORD_PREFIX = "amp_lesson_claim__"
"""Glue key prefix of the record :func:`claim` keeps of every wording it was given.

Under ``CLAIM_RECORD_PREFIX + key`` it glues a JSON object with the claim's
``key``, ``says``, ``otherwise`` (``null`` for a one-wording claim) and
``holds``; the book's authors' guide lists every wording of every claim from
these records, so an author reads what a build on another device would print.
"""


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
    """Glue ``text`` under ``key``: for the page's notebook, and for the book when it builds."""
    from amp_lesson import notebook

    notebook.glue(key, text, display=False)  # the notebook prints its sentences from these
    try:
        from myst_nb import glue
    except ImportError:  # a notebook run outside the book
        return
    glue(key, text, display=False)


_SENTENCE = re.compile(r"[\"\u201c(]?[A-Z0-9].*[.!?][\"\u201d)]?", re.DOTALL)


def claim(
    key: str, holds: Any, says: str, otherwise: str | None = None, *, phrase: bool = False
) -> str:
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
    phrase
        The two wordings are phrases, not sentences: a table cell, a label,
        words quoted inside a question. Without it, a claim with two
        wordings gives each as a whole sentence (a capital letter or digit
        first, ``.``, ``!`` or ``?`` last), because a sentence assembled
        around a glued fragment reads wrong on one of the outcomes.

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
    >>> claim("order", 1.0 + 2.0**-60 == 1.0, "The tiny term is absorbed.",
    ...       "It survives.")
    'The tiny term is absorbed.'
    >>> claim("cell", 1.0 + 2.0**-60 == 1.0, "yes", "no", phrase=True)
    'yes'
    """
    if not isinstance(key, str) or not _KEY.match(key):
        raise ValueError(f"key must be a Python identifier (the glue key), got {key!r}")
    for name, text in (("says", says), ("otherwise", otherwise)):
        if (text is not None or name == "says") and not (isinstance(text, str) and text.strip()):
            raise ValueError(f"{name} must be a non-empty string, got {text!r}")
    if not isinstance(phrase, bool):
        raise TypeError(f"phrase must be a bool, got {phrase!r}")
    if otherwise is not None and not phrase:
        for name, text in (("says", says), ("otherwise", otherwise)):
            if not _SENTENCE.fullmatch(text.strip()):
                raise ValueError(
                    f"claim {key!r}: with two wordings, {name} must be a whole sentence (a "
                    f"capital letter or digit first, '.', '!' or '?' last), got {text!r}; "
                    "pass phrase=True for a table cell or a label"
                )
    held = _as_bool(holds)
    if held:
        words = says
    elif otherwise is not None:
        words = otherwise
    else:
        raise ClaimContradicted(f"claim {key!r} ({says!r}) is contradicted by this run")
    _glue(key, words)
    record = {"key": key, "says": says, "otherwise": otherwise, "holds": held}
    _glue(CLAIM_RECORD_PREFIX + key, json.dumps(record))
    return words
