"""No computed number is typed into the book's prose.

A value with a decimal point or an exponent, or one of 1000 or more, can only
enter a page's text through a glue role, so that it is the output of this
build. Small counts that are inputs ("4 micro-batches of 32") may be written.
Code, outputs, inline literals, glue and other roles, and directive options are
not prose; math is.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import DOCS

FENCE = re.compile(r"^(?P<fence>`{3,}|~{3,}|:{3,})(?P<info>.*)$")
STRIP = [
    re.compile(r"\{[\w:-]+\}`[^`]*`"),  # roles: {glue:text}`key`, {ref}`x`, {doc}`y`
    re.compile(r"`+[^`]*`+"),  # inline code
    re.compile(r"\]\([^)]*\)"),  # link targets
    re.compile(r"<[^>]+>"),  # inline HTML tags and autolinks
    re.compile(r"https?://\S+"),
    re.compile(r"#\d+"),  # issue and pull-request numbers
    re.compile(
        r"\b(?:January|February|March|April|May|June|July|August|September|October|"
        r"November|December|ICLR|NeurIPS|ICML|arXiv:?)\s+\d{4}(?:\.\d+)?\b"
    ),  # dates and citations
]
NUMBER = re.compile(
    r"(?<![\w.])(?:"
    r"\d+\.\d+"  # a decimal point
    r"|\d+(?:\.\d+)?[eE][+-]?\d+"  # an exponent
    r"|\d{1,3}(?:,\d{3})+"  # 65,504
    r"|\d{4,}"  # 1000 or more
    r")(?!\w)(?!\.\d)"
)
NOT_PROSE = {"code-cell", "code-block", "code", "math", "glue:figure", "raw", "mermaid"}


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, text) of the lines of a MyST page that are prose."""
    lines = text.splitlines()
    out: list[tuple[int, str]] = []
    i = 0
    if lines and lines[0].strip() == "---":  # front matter
        i = lines.index("---", 1) + 1 if "---" in lines[1:] else len(lines)
    stack: list[tuple[str, bool]] = []  # (fence, prose inside)
    while i < len(lines):
        line = lines[i]
        m = FENCE.match(line.strip())
        if m and stack and m["fence"] == stack[-1][0] and not m["info"].strip():
            stack.pop()
        elif m and m["info"].strip():
            name = m["info"].strip().lstrip("{").split("}")[0].split()[0]
            inside_prose = (not stack or stack[-1][1]) and (
                m["info"].strip().startswith("{") and name not in NOT_PROSE
            )
            stack.append((m["fence"], inside_prose))
            # a directive's argument (its title) is prose
            if inside_prose and "}" in m["info"]:
                out.append((i + 1, m["info"].split("}", 1)[1]))
        elif m and not m["info"].strip():
            stack.append((m["fence"], False))  # a plain fenced block is code
        elif (not stack or stack[-1][1]) and not re.match(r"^\s*:[\w-]+:|^\(.*\)=\s*$", line):
            out.append((i + 1, line))
        i += 1
    return out


def offending_numbers(text: str) -> list[tuple[int, str, str]]:
    """(line, number, line text) for each typed-in number in the prose of ``text``."""
    found = []
    for lineno, line in prose_lines(text):
        cleaned = line
        for pattern in STRIP:
            cleaned = pattern.sub(" ", cleaned)
        found.extend((lineno, n, line.strip()) for n in NUMBER.findall(cleaned))
    return found


def book_pages() -> list[Path]:
    return sorted(
        p for p in DOCS.rglob("*.md") if "_build" not in p.parts and "_data" not in p.parts
    )


@pytest.mark.parametrize("page", book_pages(), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_prose_has_no_typed_in_numbers(page: Path) -> None:
    problems = offending_numbers(page.read_text(encoding="utf-8"))
    assert problems == [], "numbers that must come from glue:\n" + "\n".join(
        f"  line {n}: {num!r} in {text!r}" for n, num, text in problems
    )


@pytest.mark.parametrize(
    ("text", "numbers"),
    [
        ("FP16 tops out at 65504.", ["65504"]),
        ("Its epsilon is 9.77e-4, about 0.001.", ["9.77e-4", "0.001"]),
        ("Written 65,504 here.", ["65,504"]),
        ("Use 4 micro-batches of 32 and a scale of 2^16.", []),
        ("The max is {glue:text}`fp16_max` and `1e-8` is a literal.", []),
        ("See pytorch#98828 (October 2024) and [x](https://a.b/1.5).", []),
        ("```{code-cell} ipython3\nx = 1e-8\n```\nAfter 1.5 steps.", ["1.5"]),
        (":::{selfcheck-choice} Is 1e-8 stored?\n:id: q1\n- [x] no\n:::", ["1e-8"]),
        ("$$\nx = 0.5\n$$\nmath is prose too", ["0.5"]),
    ],
)
def test_the_scanner_finds_what_it_should(text: str, numbers: list[str]) -> None:
    assert [n for _, n, _ in offending_numbers(text)] == numbers


# --------------------------------------------------------------------------- outcomes

# Words that state an outcome of this build. In prose they must come through glue (the run
# chooses or checks them: amp_lesson.claims.claim), never be typed, so that a build on another
# device cannot print a sentence its own run contradicts.
OUTCOME = re.compile(
    r"\bbitwise\b|\bto the bit\b|\bbit for bit\b|\b(?:slower|faster) (?:here|on this)\b"
    r"|\bevery step (?:is |was )?skipped\b|\bskipped only\b",
    re.IGNORECASE,
)
# Reporting what the lesson asserts is not an outcome of this build.
QUOTING_THE_LESSON = re.compile(
    r"\bthe lesson (?:says|claims|writes|lists|asserts)\b", re.IGNORECASE
)
QUESTION = re.compile(r"^\s*(?:`{3,}|:{3,})\{selfcheck-[\w-]+\}")


def unbound_outcomes(text: str) -> list[tuple[int, str]]:
    """(line, sentence) for each sentence of prose that types an outcome word."""
    lines = text.splitlines()
    found: list[tuple[int, str]] = []
    sentence, start = "", 0
    for lineno, line in prose_lines(text):
        if QUESTION.match(lines[lineno - 1]):  # an exercise's prompt poses, it does not report
            sentence = ""
            continue
        cleaned = line
        for pattern in STRIP:
            cleaned = pattern.sub(" ", cleaned)
        if not cleaned.strip():
            sentence = ""
            continue
        if not sentence:
            start = lineno
        sentence += " " + cleaned
        *complete, sentence = re.split(r"(?<=[.!?;:])\s+", sentence)
        for part in complete:
            if OUTCOME.search(part) and not QUOTING_THE_LESSON.search(part):
                found.append((start, part.strip()))
            start = lineno
    if OUTCOME.search(sentence) and not QUOTING_THE_LESSON.search(sentence):
        found.append((start, sentence.strip()))
    return found


@pytest.mark.parametrize("page", book_pages(), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_prose_types_no_outcome_the_run_should_choose(page: Path) -> None:
    problems = unbound_outcomes(page.read_text(encoding="utf-8"))
    assert problems == [], (
        "outcome words typed into prose; bind them to the run with amp_lesson.claims.claim "
        "and {glue:text}:\n" + "\n".join(f"  line {n}: {s!r}" for n, s in problems)
    )


@pytest.mark.parametrize(
    ("text", "flagged"),
    [
        ("The two runs are bitwise identical.", True),
        ("FP16 is slower here than FP32.", True),
        ("The two runs are {glue:text}`same_bits`.", False),
        ("The lesson says the runs are bitwise identical.", False),
        (":::{selfcheck-predict} Are they bitwise identical?\n:answer: see below\n:::", False),
        ("Dividing by four is exact, so the gradients agree.", False),
    ],
)
def test_the_outcome_scanner_finds_what_it_should(text: str, flagged: bool) -> None:
    assert bool(unbound_outcomes(text)) is flagged
