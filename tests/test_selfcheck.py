"""The self-check directives' static HTML, and the build errors bad input causes.

A small book is built in a temporary folder, in this process, with MyST-NB and
the self-check extension alone (``helpers.build_in_process``). The
page without JavaScript must be complete: every question, every option, the
right answer and every note, with the answers inside native ``<details>``.
Input a directive cannot make sense of must fail the (``-W``) build with a
message that names the problem.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from bs4 import BeautifulSoup, Tag
from helpers import FRONT_MATTER, BadPagesBuild, build_bad_pages, build_in_process

WIDGETS_PAGE = (
    FRONT_MATTER
    + """
# Widgets

(cast-cell)=

```{code-cell} ipython3
from myst_nb import glue

glue("stored", 0.0)
```

:::{selfcheck-choice} A gradient of `1e-8` is cast to FP16. What is the stored value?
:id: underflow

Before you answer, recall the cast:

```python
torch.tensor(1e-8).half()
```

- [x] `0.0`: it underflows
  : FP16 stores {glue:text}`stored`, as the {ref}`executed cell <cast-cell>` shows.
- [ ] `1.0e-08`: stored exactly

  Why it tempts: small numbers feel cheap.

  ```python
  print("a nested code block")
  ```
- [ ] `inf`: it overflows

  Why it tempts: overflow is the other failure.

Loss scaling keeps such gradients alive.
:::

:::{selfcheck-choice} A gradient of `1e-8` is cast to FP16. What is the stored value?
:mode: eliminate

- [x] zero
  : Nothing rules it out.
- [ ] exactly itself
  : Ruled out by the range.
- [ ] infinity
  : Ruled out: that is overflow.
:::

:::{selfcheck-choice} Which live in FP32?
:id: fp32-copies
:mode: multiple

- [x] master weights
  : Small updates would round away.
- [x] optimizer state
  : Running averages of small numbers.
- [ ] activations
  : Recomputed every step, so FP16 is fine.
:::

:::{selfcheck-predict} What comes out of the round trip?
:id: round-trip
:answer: `1.00e-08`, recovered

Scaling lifts the value into range first.
:::

:::{selfcheck-sort} Which dtype does each live in?
:id: dtypes
:buckets: FP16 | FP32

- [FP16] activations
  : Computed by FP16 kernels.
- [FP32] master weights

Volume goes to half precision.
:::

:::{selfcheck-step-through} Step through the shrinking gradient.
:id: shrink
:next: What would the next row be?

1. gradient `1.0e-04`
2. gradient `6.1e-05`
3. gradient `1.0e-08`

It would be zero again.
:::

:::{selfcheck-step-through} Step through the epochs.
:id: constant-column
:next: Which column stayed the same in every row?
:answer-label: Your  column,  and why

1. loss `0.69`, scale `65536`
2. loss `0.68`, scale `65536`

The scale: nothing overflowed.
:::

:::{selfcheck-refill} Refill the exponent bits.
:id: bits
:column: exponent bits

| format | exponent bits | mantissa bits |
|---|---|---|
| FP16 | 5 | 10 |
| FP32 | 8 | 23 |

FP32 spends its extra bits mostly on the mantissa.
:::

:::{selfcheck-discuss} Explain accumulation by analogy.
:id: analogy
:hint: Find where the analogy breaks.
:::
"""
)


EXTENSIONS = ["myst_nb", "amp_book.selfcheck"]
CONF = {"myst_enable_extensions": ["colon_fence", "deflist", "dollarmath"]}


def _book(root: Path, page: str) -> Path:
    """A book in ``root/docs`` with ``page`` as its one page (an empty conf.py)."""
    src = root / "docs"
    src.mkdir(parents=True)
    (src / "conf.py").write_text("")
    (src / "index.md").write_text("# Book\n\n```{toctree}\npage\n```\n", encoding="utf-8")
    (src / "page.md").write_text(page, encoding="utf-8")
    return src


@pytest.fixture(scope="module")
def widgets_html(tmp_path_factory: pytest.TempPathFactory) -> BeautifulSoup:
    """The widgets page, its cell executed by MyST-NB's own kernel."""
    root = tmp_path_factory.mktemp("selfcheck")
    html = build_in_process(_book(root, WIDGETS_PAGE), root / "out", EXTENSIONS, **CONF).outdir
    return BeautifulSoup((html / "page.html").read_text(encoding="utf-8"), "html.parser")


def _widget(soup: BeautifulSoup, widget_id: str) -> Tag:
    found = soup.select_one(f"#sc-{widget_id}")
    assert found is not None, f"no widget with id {widget_id!r}"
    return found


def _text(node: Tag) -> str:
    return " ".join(node.get_text(" ").split())


def _in_details(node: Tag, text: str) -> bool:
    """Whether ``text`` appears inside some ``<details>`` within ``node``."""
    return any(text in _text(details) for details in node.find_all("details"))


# -- the static page -----------------------------------------------------------------


def test_multiple_choice_is_complete_without_javascript(widgets_html: BeautifulSoup) -> None:
    widget = _widget(widgets_html, "underflow")
    assert widget["data-sc-kind"] == "choice"
    assert "is cast to FP16. What is the stored value?" in _text(widget)
    assert "recall the cast" in _text(widget.select_one(".sc-question"))
    options = [_text(li) for li in widget.select(".sc-options > li")]
    assert options == [
        "A. 0.0 : it underflows",
        "B. 1.0e-08 : stored exactly",
        "C. inf : it overflows",
    ]
    assert [li["data-sc-correct"] for li in widget.select(".sc-options > li")] == [
        "true",
        "false",
        "false",
    ]
    details = widget.select_one("details.sc-answer")
    assert _text(details.summary) == "Show answer"
    assert "Answer: A. 0.0 : it underflows" in _text(details)
    # The right option's note and the explanation after the list are the explanation.
    explanation = _text(details.select_one(".sc-explanation"))
    assert "Loss scaling keeps such gradients alive." in explanation
    # Every wrong option's note, titled, inside the details.
    for letter, note in [("B", "small numbers feel cheap"), ("C", "overflow is the other failure")]:
        block = details.select_one(f'.sc-note[data-sc-for="{letter}"]')
        assert f"Why {letter} tempts" in _text(block)
        assert note in _text(block)


def test_notes_hold_glue_references_and_nested_code(widgets_html: BeautifulSoup) -> None:
    details = _widget(widgets_html, "underflow").select_one("details.sc-answer")
    explanation = details.select_one(".sc-explanation")
    assert "FP16 stores 0.0" in _text(explanation)  # the glued value, executed at build
    link = explanation.find("a", class_="reference")
    assert link is not None
    assert _text(link) == "executed cell"
    target = link["href"].lstrip("#")
    assert widgets_html.find(id=target) is not None
    nested_code = details.select_one('.sc-note[data-sc-for="B"] div.highlight pre')
    assert nested_code is not None
    assert "a nested code block" in nested_code.get_text()


def test_eliminate_mode_shows_the_survivor_and_what_rules_out_each(
    widgets_html: BeautifulSoup,
) -> None:
    widget = widgets_html.select_one('.sc[data-sc-mode="eliminate"]')
    assert widget is not None
    assert _text(widget.select_one(".sc-kicker")) == "Eliminate the wrong options"
    assert re.fullmatch(r"choice-[0-9a-f]{8}", widget["data-sc-id"])  # derived from the question
    assert widget["data-sc-id"] != "underflow"
    details = widget.select_one("details.sc-answer")
    assert _text(details.summary) == "Show the survivor"
    assert "Survives elimination: A. zero" in _text(details)
    assert "What rules out B Ruled out by the range." in _text(details)
    assert "What rules out C Ruled out: that is overflow." in _text(details)


def test_choose_all_that_apply_lists_every_right_option(widgets_html: BeautifulSoup) -> None:
    widget = _widget(widgets_html, "fp32-copies")
    assert widget["data-sc-mode"] == "multiple"
    assert "Answer: A. master weights; B. optimizer state" in _text(widget.select_one("details"))
    assert _in_details(widget, "Recomputed every step")


def test_predict_hides_the_answer_and_explanation_in_details(widgets_html: BeautifulSoup) -> None:
    widget = _widget(widgets_html, "round-trip")
    assert "What comes out of the round trip?" in _text(widget.select_one(".sc-question"))
    assert _in_details(widget, "Answer: 1.00e-08 , recovered")
    assert _in_details(widget, "Scaling lifts the value into range first.")
    assert "1.00e-08" not in _text(widget.select_one(".sc-question"))


def test_sort_lists_items_and_buckets_with_the_answer_in_details(
    widgets_html: BeautifulSoup,
) -> None:
    widget = _widget(widgets_html, "dtypes")
    assert [_text(b) for b in widget.select(".sc-buckets .sc-bucket-name")] == ["FP16", "FP32"]
    items = widget.select(".sc-items > li")
    assert [(_text(li), li["data-sc-bucket"]) for li in items] == [
        ("activations", "FP16"),
        ("master weights", "FP32"),
    ]
    details = widget.select_one("details.sc-answer")
    groups = [_text(group) for group in details.select(".sc-bucket-answer")]
    assert groups[0].startswith("FP16 activations")
    assert "Computed by FP16 kernels." in groups[0]
    assert groups[1].startswith("FP32 master weights")
    assert "Volume goes to half precision." in _text(details)


def test_step_through_shows_every_row_and_hides_the_next_rows_answer(
    widgets_html: BeautifulSoup,
) -> None:
    widget = _widget(widgets_html, "shrink")
    rows = [_text(li) for li in widget.select(".sc-rows > li")]
    assert rows == ["gradient 1.0e-04", "gradient 6.1e-05", "gradient 1.0e-08"]
    assert "Next: What would the next row be?" in _text(widget.select_one(".sc-next"))
    assert _in_details(widget, "It would be zero again.")
    assert widget["data-sc-answer-label"] == "Your next row"  # the default


def test_step_through_names_its_answer_box_with_answer_label(widgets_html: BeautifulSoup) -> None:
    widget = _widget(widgets_html, "constant-column")
    # The label is for the script's answer box; its whitespace collapses.
    assert widget["data-sc-answer-label"] == "Your column, and why"
    assert "Next: Which column stayed the same in every row?" in _text(
        widget.select_one(".sc-next")
    )
    # Without JavaScript there is no answer box, so the label is not in the page's text,
    # and the answer is still one <details> away.
    assert "Your column" not in _text(widget)
    assert _in_details(widget, "The scale: nothing overflowed.")


def test_refill_puts_each_true_value_behind_its_own_details(widgets_html: BeautifulSoup) -> None:
    widget = _widget(widgets_html, "bits")
    header = [_text(th) for th in widget.select("thead th")]
    assert header == ["format", "exponent bits", "mantissa bits"]
    assert "sc-refill-header" in widget.select("thead th")[1]["class"]
    slots = widget.select(".sc-refill-slot")
    assert [slot["data-sc-label"] for slot in slots] == [
        "FP16, exponent bits",
        "FP32, exponent bits",
    ]
    assert [_text(slot.select_one("details .sc-truth")) for slot in slots] == ["5", "8"]
    # The other columns stay plain cells, each number marked to keep to one line.
    assert [_text(tr.find_all("td")[2]) for tr in widget.select("tbody tr")] == ["10", "23"]
    assert all("sc-number" in tr.find_all("td")[2]["class"] for tr in widget.select("tbody tr"))
    assert all(
        "sc-number" not in tr.find_all("td")[0].get("class", []) for tr in widget.select("tbody tr")
    )
    assert _in_details(widget, "FP32 spends its extra bits mostly on the mantissa.")


def test_discuss_puts_the_hint_in_details(widgets_html: BeautifulSoup) -> None:
    widget = _widget(widgets_html, "analogy")
    hint = widget.select_one("details.sc-hint")
    assert _text(hint.summary) == "Hint"
    assert "Find where the analogy breaks." in _text(hint)


def test_every_widget_is_a_labelled_group(widgets_html: BeautifulSoup) -> None:
    widgets = widgets_html.select(".sc[data-sc-kind]")
    assert len(widgets) == 9
    ids = [w["data-sc-id"] for w in widgets]
    assert len(set(ids)) == len(ids)
    for widget in widgets:
        assert widget["role"] == "group"
        title = widgets_html.find(id=widget["aria-labelledby"])
        assert title is not None
        assert _text(title)


def test_script_and_style_are_local_deferred_and_only_where_needed(
    widgets_html: BeautifulSoup,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    scripts = [s for s in widgets_html.find_all("script") if "selfcheck" in s.get("src", "")]
    assert len(scripts) == 1
    assert scripts[0]["src"].startswith("_static/selfcheck.js")
    assert scripts[0].has_attr("defer")
    styles = [link["href"] for link in widgets_html.find_all("link", rel="stylesheet")]
    assert any(href.startswith("_static/selfcheck.css") for href in styles)
    for url in [*(s.get("src", "") for s in widgets_html.find_all("script")), *styles]:
        assert not url.startswith(("http:", "https:", "//")), url
    assert not any(s.string and "selfcheck" in s.string for s in widgets_html.find_all("script"))


def test_the_script_needs_no_syntax_newer_than_es5_and_no_lookbehind() -> None:
    """An engine that cannot compile one regex or one arrow function drops the whole script.

    The script is written in ES5 syntax (its newest needs are DOM methods,
    which an old engine lacks one widget at a time, not all at once), and its
    regexes avoid ES2018 lookbehind. A browser test runs it with a RegExp that
    refuses lookbehind.
    """
    from amp_book import STATIC_DIR
    from amp_book.selfcheck import SCRIPT

    code = (STATIC_DIR / SCRIPT).read_text(encoding="utf-8")
    without_comments = re.sub(r"/\*.*?\*/|(?<![:\\])//[^\n]*", "", code, flags=re.DOTALL)
    assert "(?<=" not in code
    assert "(?<!" not in code
    for newer in ("=>", "${", "let ", "const ", "class ", "async ", "..."):
        assert newer not in without_comments, newer


def test_pages_without_a_self_check_do_not_load_its_assets(tmp_path: Path) -> None:
    src = _book(tmp_path, "# Plain\n\nNo exercises here.\n")
    out = build_in_process(src, tmp_path / "out", EXTENSIONS, **CONF).outdir
    html = (out / "page.html").read_text(encoding="utf-8")
    assert "selfcheck.js" not in html
    assert "selfcheck.css" not in html
    assert (out / "_static" / "selfcheck.js").is_file()


# -- bad input fails the build --------------------------------------------------------

BAD_INPUT = {
    "no-correct-option": (
        ":::{selfcheck-choice} Which?\n- [ ] one\n  : tempts\n- [ ] two\n  : tempts\n:::\n",
        "no correct option; mark the right one with '[x]'",
    ),
    "two-correct-in-single-mode": (
        ":::{selfcheck-choice} Which?\n- [x] one\n  : right\n- [x] two\n  : right\n:::\n",
        "2 options are marked correct (A, B) but mode 'single' has a single answer",
    ),
    "two-correct-in-eliminate-mode": (
        ":::{selfcheck-choice} Which?\n:mode: eliminate\n- [x] one\n  : right\n- [x] two\n  : right\n:::\n",
        "2 options are marked correct (A, B) but mode 'eliminate' has a single answer",
    ),
    "no-options": (
        ":::{selfcheck-choice} Which?\nJust prose.\n:::\n",
        "no options; write them as a bullet list",
    ),
    "wrong-option-without-note": (
        ":::{selfcheck-choice} Which?\n- [x] one\n  : right\n- [ ] two\n:::\n",
        "wrong option B ('two') has no note saying why it tempts",
    ),
    "predict-without-answer": (
        ":::{selfcheck-predict} What comes out?\nBecause.\n:::\n",
        "needs :answer:",
    ),
    "unknown-bucket": (
        ":::{selfcheck-sort} Sort.\n:buckets: FP16 | FP32\n- [FP16] activations\n- [BF16] weights\n:::\n",
        "item 2 ('weights') is in unknown bucket 'BF16'; the buckets are FP16 | FP32",
    ),
    "item-without-bucket": (
        ":::{selfcheck-sort} Sort.\n:buckets: FP16 | FP32\n- [FP16] activations\n- weights\n:::\n",
        "item 2 ('weights') does not start with its bucket in brackets",
    ),
    "empty-steps": (
        ":::{selfcheck-step-through} Step through.\nThe answer.\n:::\n",
        "has no steps; write the rows as a numbered list or a table",
    ),
    "steps-without-answer": (
        ":::{selfcheck-step-through} Step through.\n1. one\n2. two\n:::\n",
        "has no answer to its next-row question",
    ),
    "steps-empty-answer-label": (
        ":::{selfcheck-step-through} Step through.\n:answer-label:\n1. one\n2. two\n\nThree.\n:::\n",
        ":answer-label: is empty; give the label of the box the reader answers",
    ),
    "steps-long-answer-label": (
        ":::{selfcheck-step-through} Step through.\n:answer-label: "
        + "x" * 61
        + "\n1. one\n2. two\n\nThree.\n:::\n",
        ":answer-label: is 61 characters long; a label of the answer box takes at most 60",
    ),
    "refill-without-column-option": (
        ":::{selfcheck-refill} Refill.\n| a | b |\n|---|---|\n| x | 1 |\n:::\n",
        "has no answer column; name the column the reader refills with ':column:'",
    ),
    "refill-unknown-column": (
        ":::{selfcheck-refill} Refill.\n:column: bits\n| a | b |\n|---|---|\n| x | 1 |\n:::\n",
        "its table has no answer column 'bits' (its columns are: a | b)",
    ),
    "refill-without-table": (
        ":::{selfcheck-refill} Refill.\n:column: bits\nNo table.\n:::\n",
        "has no table",
    ),
    "duplicate-ids": (
        ":::{selfcheck-discuss} One?\n:id: same\n:::\n\n:::{selfcheck-discuss} Two?\n:id: same\n:::\n",
        "duplicate id 'same' on this page (first used on line",
    ),
    "duplicate-derived-ids": (
        ":::{selfcheck-discuss} The same question?\n:::\n\n:::{selfcheck-discuss} The same question?\n:::\n",
        "give each self-check its own :id:",
    ),
    "malformed-id": (
        ":::{selfcheck-discuss} One?\n:id: 2 words\n:::\n",
        "must start with a letter and hold only letters, digits",
    ),
}


@pytest.fixture(scope="module")
def bad_input_build(tmp_path_factory: pytest.TempPathFactory) -> BadPagesBuild:
    """One build of a book with a page per bad input, not a build per case."""
    root = tmp_path_factory.mktemp("bad")
    bodies = {key: body for key, (body, _) in BAD_INPUT.items()}
    return build_bad_pages(_book(root, "# Fine\n"), root / "out", bodies, EXTENSIONS)


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_fails_the_build_naming_the_problem(
    bad_input_build: BadPagesBuild, case: str
) -> None:
    # the warning names the page and the line, says what is wrong, and is a self-check warning
    bad_input_build.assert_warned(case, BAD_INPUT[case][1], "[selfcheck.")
