"""Sentences that type an outcome of the run instead of gluing it (the prose check's rule).

A sentence that says two runs are "bitwise identical" states an outcome of this build; a
page must glue such words from the run (:func:`amp_lesson.claims.claim`). The prose check
(:mod:`.prose`) passes every sentence a reader sees through :func:`typed_outcomes`, and the
build fails on any it flags.
"""

from __future__ import annotations

import re

__all__ = ["OUTCOME_PHRASES", "RUN_VALUE", "sentences", "typed_outcomes"]


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
(:func:`amp_lesson.claims.claim` and ``{glue:text}``): "bitwise" (but not "bitwise equality",
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
