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
the book's build can tell a bound outcome from a typed one: it passes every
sentence a reader sees (page prose, self-checks, captions, the API
reference's docstrings) through :func:`typed_outcomes`, and fails on any
sentence that types an outcome phrase of :data:`OUTCOME_PHRASES` instead of
gluing it.

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
    "OUTCOME_PHRASES",
    "RUN_VALUE",
    "ClaimContradicted",
    "claim",
    "sentences",
    "typed_outcomes",
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


OUTCOME_PHRASES = re.compile(
    r"\bbitwise\b(?! (?:equality|identity|tests?|comparisons?|verdicts?|checks?)\b)"
    r"|\bto the bit\b|\bbit for bit\b|\b(?:slower|faster) (?:here|on this)\b"
    r"|\bevery step (?:is |was )?skipped\b|\bskipped only\b"
    r"|\btrains? (?:just )?as well as\b|\b(?:stay|stays|stayed|kept) in step\b"
    r"|\b(?:is|are|was|were) (?:just )?noise\b",
    re.IGNORECASE,
)
"""Phrases that state how a run turned out, which a build on another device may contradict.

Typed into a sentence a reader sees, each must instead come from the run
(:func:`claim` and ``{glue:text}``): "bitwise" (but not "bitwise equality",
"identity", "test", "comparison", "verdict" or "check", which name a kind of
comparison), "to the bit", "bit for bit", "slower here", "faster on this
...", "every step (is/was) skipped", "skipped only", "trains as well as",
"stay(s/ed) in step", "kept in step", "is/are/was/were noise".
"""

RUN_VALUE = "\u27e6run\u27e7"
"""What :func:`typed_outcomes` reads where the run put a value into the text (glue)."""

# Saying what the lesson or a paper asserts is not an outcome of this build.
_REPORTS_A_SOURCE = re.compile(
    r"\bthe (?:lesson|paper)(?:'s [\w ]+)? (?:says|claims|writes|lists|asserts|states|reports)\b",
    re.IGNORECASE,
)
# "Whether the runs are bitwise identical", "if they are", "suppose your run ...": a
# condition, not an outcome; "compares them bit for bit": a method, not its result.
_BEFORE_THE_PHRASE = re.compile(r"\b(?:whether|if|suppose|imagine|compar\w*)\b", re.IGNORECASE)
# A quoted phrase is mentioned, not used: "a sentence that says 'bitwise identical'".
_QUOTED = re.compile(r"\u201c[^\u201d]*\u201d|\"[^\"]*\"")
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+")


def sentences(text: str) -> list[str]:
    """Cut ``text`` into sentences at ``.``, ``!``, ``?`` and ``;``, whitespace collapsed.

    Parameters
    ----------
    text : str
        Prose.

    Returns
    -------
    list of str
        The sentences, in order.

    Examples
    --------
    >>> sentences("One.  Two?   Three")
    ['One.', 'Two?', 'Three']
    """
    return _SENTENCE_END.split(" ".join(text.split()))


def typed_outcomes(text: str) -> list[str]:
    """The sentences of ``text`` that type an outcome phrase instead of taking it from the run.

    ``text`` is what a reader sees, with :data:`RUN_VALUE` where the run put a
    value (the book's build writes it for each glued value, and leaves code
    out). A sentence is flagged when it holds one of :data:`OUTCOME_PHRASES`,
    unless it is a question (an exercise poses, it does not report), reports
    what the lesson or a paper says, quotes the phrase, puts a condition
    ("whether", "if", "suppose") or a comparison ("compare ... bit for bit")
    before it, or opens with it as the label of a value of the run
    ("Bitwise identical: <value>").

    Parameters
    ----------
    text : str
        Prose, one paragraph or more.

    Returns
    -------
    list of str
        The flagged sentences, whitespace collapsed, in order.

    Raises
    ------
    TypeError
        If ``text`` is not a string.

    Examples
    --------
    >>> typed_outcomes("The two runs are bitwise identical. FP16 is slower here.")
    ['The two runs are bitwise identical.', 'FP16 is slower here.']
    >>> typed_outcomes("Are the two runs bitwise identical? "
    ...                "The lesson says they are bitwise equal.")
    []
    >>> typed_outcomes("It records whether the weights are bitwise identical.")
    []
    >>> typed_outcomes("They are bitwise identical, as if nothing had happened.")
    ['They are bitwise identical, as if nothing had happened.']
    >>> typed_outcomes(f"The two runs are {RUN_VALUE}. "
    ...                f"Bitwise identical: {RUN_VALUE}.")
    []
    >>> typed_outcomes(
    ...     f"FP16 trains as well as FP32: {RUN_VALUE} against {RUN_VALUE}."
    ... )
    ['FP16 trains as well as FP32: … against ….']
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    found = []
    for sentence in sentences(text):
        words = _QUOTED.sub(" ", sentence)
        phrase = OUTCOME_PHRASES.search(words)
        if phrase is None or sentence.rstrip().endswith("?"):
            continue
        if _REPORTS_A_SOURCE.search(words) or _BEFORE_THE_PHRASE.search(words[: phrase.start()]):
            continue
        label = not words[: phrase.start()].strip()
        if label and re.match(r"[\w ]{0,30}:\s*" + RUN_VALUE, words[phrase.end() :]):
            continue  # "Bitwise identical: <value>": the run's value is the verdict
        found.append(sentence.replace(RUN_VALUE, "…"))
    return found
