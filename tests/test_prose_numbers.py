"""No computed number is typed into the book's prose, and no outcome into any text it shows.

A value with a decimal point or an exponent, or one of 1000 or more, can only
enter a page's text through a glue role, so that it is the output of this
build. Small counts that are inputs ("4 micro-batches of 32") may be written.
Code, outputs, inline literals, glue and other roles, and directive options are
not prose; math, self-check texts and figure captions are.

Outcome words ("bitwise identical", "slower here") are refused by the build
itself, wherever a reader sees them (:mod:`amp_book.prose`); the
last part of this file tests its rules and plants one in a self-check, a
caption and a docstring to see the build fail.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest
from helpers import DOCS, FRONT_MATTER, build_in_process, mini_book

from amp_book.outcomes import typed_outcomes
from amp_book.pages import read_text

FENCE = re.compile(r"^(?P<fence>`{3,}|~{3,}|:{3,})(?P<info>.*)$")
STRIP = [
    re.compile(r"\{[\w:-]+\}`[^`]*`"),  # roles: {glue:text}`key`, {ref}`x`, {doc}`y`
    re.compile(r"`+[^`]*`+"),  # inline code
    re.compile(r"\]\([^)]*\)"),  # link targets
    re.compile(r"<[^>]+>"),  # inline HTML tags and autolinks
    re.compile(r"https?://\S+"),
    re.compile(r"#\d+"),  # issue and pull-request numbers
    re.compile(r"\b\d{4}-\d{2}-\d{2}\b"),  # the date a source was read
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
    """(line number, text) of the lines of a MyST page that are prose.

    The page is read as the build reads it (:mod:`amp_book.pages`):
    its code cells are not prose, and each Markdown cell is scanned here for the
    directives and blocks in it that are not prose either.
    """
    page = read_text(text)
    out: list[tuple[int, str]] = []
    for cell in page.cells:
        if cell.kind != "markdown":
            continue
        lines = cell.source.splitlines()
        skip = 0
        if not page.is_notebook and lines and lines[0].strip() == "---":
            # front matter of a page that is no notebook (the reader keeps it in the text)
            skip = lines.index("---", 1) + 1 if "---" in lines[1:] else len(lines)
        out.extend((cell.line + i, line) for i, line in _prose_in(lines, skip))
    return out


def _prose_in(lines: list[str], start: int = 0) -> list[tuple[int, str]]:
    """(index, text) of the prose lines of a Markdown cell's ``lines``, from ``start``."""
    out: list[tuple[int, str]] = []
    stack: list[tuple[str, bool]] = []  # (fence, prose inside)
    for i in range(start, len(lines)):
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
                out.append((i, m["info"].split("}", 1)[1]))
        elif m and not m["info"].strip():
            stack.append((m["fence"], False))  # a plain fenced block is code
        elif (not stack or stack[-1][1]) and not re.match(r"^\s*:[\w-]+:|^\(.*\)=\s*$", line):
            out.append((i, line))
    return out


# A cell's figure caption is MyST, so a computed number can be glued into it; its alt text is a
# plain string (it describes the axes, whose ranges are the plot's inputs).
CAPTION = re.compile(r"^\s*caption:")


def caption_lines(text: str) -> list[tuple[int, str]]:
    """(line number, text) of the figure captions in code cells' metadata.

    The caption is the cell's ``mystnb.figure.caption`` as MyST-NB reads it; its
    line is the ``caption:`` line of the cell's option block (else the fence's).
    """
    lines = text.splitlines()
    found = []
    for cell in read_text(text).code_cells:
        caption = ((cell.metadata.get("mystnb") or {}).get("figure") or {}).get("caption")
        if not caption:
            continue
        options = _option_lines(lines, cell.line - 1)
        line = next((i + 1 for i in options if CAPTION.match(lines[i])), cell.line)
        found.append((line, str(caption)))
    return found


def _option_lines(lines: list[str], fence: int) -> range:
    """Indices of the option block of the cell whose fence is ``lines[fence]``."""
    first = fence + 1
    if first < len(lines) and lines[first].strip() == "---":  # a YAML block
        end = next((j for j in range(first + 1, len(lines)) if lines[j].strip() == "---"), first)
        return range(first + 1, end)
    end = first
    while end < len(lines) and re.match(r"^:[\w-]+:", lines[end].strip()):
        end += 1
    return range(first, end)


def offending_numbers(text: str) -> list[tuple[int, str, str]]:
    """(line, number, line text) for each typed-in number in the prose of ``text``.

    Prose includes the captions of figures made by cells.
    """
    found = []
    for lineno, line in sorted(prose_lines(text) + caption_lines(text)):
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
        (
            '```{code-cell} ipython3\n---\nmystnb:\n  figure:\n    caption: "Up 1.5 times"\n---\n```',
            ["1.5"],
        ),
    ],
)
def test_the_scanner_finds_what_it_should(text: str, numbers: list[str]) -> None:
    assert [n for _, n, _ in offending_numbers(FRONT_MATTER + text)] == numbers


def test_the_scanner_reads_cells_as_the_build_does_and_names_the_right_lines() -> None:
    """Code cells of any fence (four backticks, an option block) are skipped, not the prose."""
    body = [
        "# Title",  # 1
        "",
        "````{code-cell} ipython3",  # 3: a four-backtick fence, a plain fence inside
        "```",
        "x = 1.5",
        "```",
        "````",
        "After 2.5 steps.",  # 8
        "",
        "```{code-cell} ipython3",  # 10
        "---",
        "tags: [remove-input]",
        "mystnb:",
        "  figure:",
        "    caption: Up 3.5 times",  # 15
        "---",
        "y = 4.5",
        "```",
        "",
        "+++",
        "",
        ":::{note} Note 6.5",  # 22
        "Inside 7.5 too.",
        ":::",
    ]
    top = FRONT_MATTER.count("\n")
    found = offending_numbers(FRONT_MATTER + "\n".join(body) + "\n")
    assert [(line - top, n) for line, n, _ in found] == [
        (8, "2.5"),
        (15, "3.5"),
        (22, "6.5"),
        (23, "7.5"),
    ]


def test_a_page_that_is_no_notebook_has_no_cells_to_skip() -> None:
    """Without notebook front matter the page is one Markdown cell: its front matter and a
    code-cell directive in it (which the build never runs) are still no prose."""
    text = "---\norphan: true\n---\n# Plain 1.5\n\n```{code-cell} ipython3\nx = 2.5\n```\n"
    assert [(line, n) for line, n, _ in offending_numbers(text)] == [(4, "1.5")]


# --------------------------------------------------------------------------- outcomes
# The build itself refuses a typed outcome (amp_book.prose), in everything a reader
# sees; these tests hold the rules of amp_book.outcomes.typed_outcomes and the build to them.


@pytest.mark.parametrize(
    ("text", "flagged"),
    [
        ("The two runs are bitwise identical.", True),
        ("FP16 is slower here than FP32.", True),
        ("Here FP16 without a scaler trains as well as FP32.", True),
        ("The scales stay in step too.", True),
        ("From then on every step is skipped.", True),
        ("The two runs are ⟦run⟧.", False),
        ("The lesson says the runs are bitwise identical.", False),
        ("Are they bitwise identical?", False),
        ("Dividing by four is exact, so the gradients agree.", False),
        ("The tests compare the two bit for bit.", False),
        ("Bitwise equality depends on the order of the sums.", False),
        ("Suppose your runs agree to six decimals but not bitwise.", False),
        ("Bitwise identical: ⟦run⟧.", False),
        ("FP16 trains as well as FP32: ⟦run⟧ against ⟦run⟧.", True),
        ("A sentence that says “bitwise identical” states an outcome.", False),
    ],
)
def test_the_outcome_rules_flag_what_they_should(text: str, flagged: bool) -> None:
    assert bool(typed_outcomes(text)) is flagged


PLANTED_PAGE = """\
# Planted

Are the two runs bitwise identical? The lesson says they are bitwise identical.

:::{selfcheck-choice} Which loop gives the full batch's weights?
:id: planted

- [x] the divided one

  The two runs are bitwise identical.
- [ ] the raw one

  Its gradient is four times too large.
:::

```{figure} dot.png
:alt: a white dot

FP16 is slower here than FP32.
```

A request for this is open as pytorch/pytorch#152279.

The black circle marks the first run; a red cross marks a skipped step.
"""

PLANTED_MODULE = '''\
"""A module whose docstring types an outcome."""


def compare():
    """Compare two runs.

    On this machine the two runs are bit for bit the same.
    """
'''


def test_the_build_fails_on_a_typed_outcome_in_a_self_check_a_caption_or_a_docstring(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plant one of each, an undated issue state and a grey mark; the build fails and names
    every one."""
    src = mini_book(tmp_path, PLANTED_PAGE, front_matter="")
    (src / "conf.py").write_text("")  # the prose check alone, with what the page uses
    (src / "index.md").write_text("# Mini\n\n```{toctree}\npage\napi\n```\n")
    (src / "api.md").write_text(
        "# API\n\n```{eval-rst}\n.. automodule:: planted_outcome\n   :members:\n```\n"
    )
    (src / "dot.png").write_bytes(base64.b64decode(PNG_1X1))
    (tmp_path / "planted_outcome.py").write_text(PLANTED_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    extensions = ["myst_nb", "sphinx.ext.autodoc", "amp_book.selfcheck", "amp_book.prose"]
    proc = build_in_process(src, tmp_path / "out", extensions, check=False)
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0, log[-3000:]
    warnings = [line for line in log.splitlines() if "WARNING" in line]
    page = PLANTED_PAGE.splitlines()

    def line_of(text: str) -> int:
        # mini_book writes an empty line, "# Page" and an empty line before the body
        return next(i for i, ln in enumerate(page, 1) if text in ln) + 3

    expected = {
        f"page.md:{line_of('The two runs are bitwise identical.')}": "typed_outcome",
        f"page.md:{line_of('FP16 is slower here')}": "typed_outcome",
        f"page.md:{line_of('is open as pytorch')}": "undated_issue_state",
        f"page.md:{line_of('The black circle marks')}": "theme_bound_colour",
        f"page.md:{line_of('{figure} dot.png')}": "theme_bound_colour",  # its alt text
        "docstring of planted_outcome.compare": "typed_outcome",
    }
    for where, subtype in expected.items():
        assert any(where in w and subtype in w for w in warnings), (where, warnings)
    assert len(warnings) == len(expected), warnings  # the question and the lesson's words pass


PNG_1X1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
