"""The self-checks in a real Chromium, on the guide page of the built book.

Each widget is answered right and wrong, by mouse and by keyboard; answers
survive a reload and are cleared by the resets; with JavaScript off every
answer is one ``<details>`` away; a phone-width page does not scroll sideways;
(axe-core's audit of every page, this one with some widgets answered, is in
test_site_browser's one visit per page). Screenshots of every widget go to
``/tmp/selfcheck-shots/`` for a person to look at.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PIL import Image

pytestmark = pytest.mark.browser

GUIDE = "guide/selfchecks.html"
SHOTS = Path("/tmp/selfcheck-shots")
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}


# -- helpers ------------------------------------------------------------------------


def _open_guide(pg: Any, site_url: str) -> None:
    pg.goto(f"{site_url}/{GUIDE}")
    pg.wait_for_selector(".sc-page-bar")  # the script has upgraded every widget


def _widget(pg: Any, widget_id: str) -> Any:
    return pg.locator(f"#sc-{widget_id}")


def _feedback(widget: Any) -> Any:
    return widget.locator(".sc-feedback").first


def _focused_class(pg: Any) -> str:
    return pg.evaluate("document.activeElement.className")


def _assert_clean(pg: Any) -> None:
    assert pg.console_errors == []
    assert pg.outside_requests == []


# -- multiple choice ------------------------------------------------------------------


def test_choice_wrong_then_right(page: Any, site_url: str) -> None:
    _open_guide(page, site_url)
    widget = _widget(page, "fp16-underflow")
    assert widget.locator("fieldset legend").inner_text().startswith("A gradient of")
    assert widget.locator('input[type="radio"]').count() == 4
    feedback = _feedback(widget)
    assert feedback.get_attribute("aria-live") == "polite"

    widget.get_by_label("B. 1.0e-08").check()
    widget.get_by_role("button", name="Check").click()
    text = feedback.inner_text()
    assert "Not quite." in text
    assert "\u2717" in text
    assert "Why B tempts" in text
    assert "trouble is range, not digits" in text  # the chosen option's own note
    assert "Why C tempts" not in text
    assert "Why D tempts" not in text
    assert "Not this one" in widget.locator(".sc-option.sc-wrong").inner_text()
    assert "sc-feedback" in _focused_class(page)  # focus moved to the feedback

    widget.get_by_label("A. 0.0").check()
    assert feedback.inner_text() == ""  # a changed answer clears the old verdict
    widget.get_by_role("button", name="Check").click()
    text = feedback.inner_text()
    assert "Correct." in text
    assert "\u2713" in text
    assert "rounds to zero" in text  # the explanation, with the glued value
    assert "Loss scaling exists for exactly this" in text
    _assert_clean(page)


def test_choose_all_that_apply(page: Any, site_url: str) -> None:
    _open_guide(page, site_url)
    widget = _widget(page, "fp32-copies")
    assert widget.locator('input[type="checkbox"]').count() == 3
    widget.get_by_label("A. the master weights").check()
    widget.get_by_label("C. the activations").check()
    widget.get_by_role("button", name="Check").click()
    text = _feedback(widget).inner_text()
    assert "Not quite. 1 of 2 right options ticked, and 1 that should not be." in text
    assert "Why C tempts" in text
    assert "Should not be ticked" in widget.locator(".sc-option.sc-wrong").inner_text()

    widget.get_by_label("C. the activations").uncheck()
    widget.get_by_label("B. Adam").check()
    widget.get_by_role("button", name="Check").click()
    assert "Correct. You ticked every right option and no other." in _feedback(widget).inner_text()
    _assert_clean(page)


def test_eliminate_the_wrong_options(page: Any, site_url: str) -> None:
    _open_guide(page, site_url)
    widget = _widget(page, "accumulation-backward")
    assert not widget.locator("details.sc-answer").is_visible()  # no shortcut to the survivor
    strike = {key: widget.get_by_role("button", name=f"Strike {key}") for key in "ABCD"}
    assert all(button.is_disabled() for button in strike.values())  # say why first
    reason = widget.get_by_label("What rules an option out?")

    reason.fill("it looks too simple")
    strike["A"].click()  # the right option cannot be struck
    assert "Not quite. Nothing rules out A." in _feedback(widget).inner_text()
    assert widget.locator(".sc-struck").count() == 0

    reasons = {
        "B": "four times the gradient",
        "C": "overflow while accumulating",
        "D": "keeps every graph alive",
    }
    for key, why in reasons.items():
        reason.fill(why)
        strike[key].click()
        assert "sc-feedback" in _focused_class(page)
        assert reason.input_value() == ""  # ready for the next reason
    assert widget.locator(".sc-struck").count() == 3
    struck_b = widget.locator('.sc-option[data-sc-key="B"]').inner_text()
    assert "Struck out." in struck_b
    assert "four times the gradient" in struck_b
    assert "What rules out B" in struck_b  # the book's reason beside the reader's
    text = _feedback(widget).inner_text()
    assert "Only A is left standing." in text
    assert "Survives elimination: A." in text
    assert "The survivor." in widget.locator(".sc-survivor").inner_text()
    assert not reason.is_visible()
    _assert_clean(page)


VERDICT_COLOURS = """(widget) => [...widget.querySelectorAll('.sc-verdict')]
  .filter((v) => v.offsetParent !== null)
  .map((v) => [v.closest('.sc-struck-info') ? 'struck' : v.closest('.sc-feedback') ? 'feedback' : 'other',
               v.querySelector('.sc-icon').textContent, getComputedStyle(v.querySelector('.sc-icon')).color,
               v.className])"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_a_right_strike_reads_as_right_beside_its_feedback(
    make_page: Any, site_url: str, scheme: str
) -> None:
    """Striking a wrong option is a right move: the struck option says so with the tick and
    the colour of the feedback beside it, never a red cross."""
    pg = make_page(viewport=DESKTOP, color_scheme=scheme)
    _open_guide(pg, site_url)
    widget = _widget(pg, "accumulation-backward")
    widget.get_by_label("What rules an option out?").fill("four times the gradient")
    widget.get_by_role("button", name="Strike B").click()
    shown = widget.evaluate(VERDICT_COLOURS)
    struck = [v for v in shown if v[0] == "struck"]
    feedback = [v for v in shown if v[0] == "feedback"]
    assert len(struck) == 1, shown
    assert len(feedback) == 1, shown
    assert feedback[0][1] == "\u2713"  # "Struck B." is a right move...
    assert struck[0][1] == "\u2713", struck  # ...and the struck option agrees
    assert "sc-verdict-ok" in struck[0][3]
    assert struck[0][2] == feedback[0][2]  # in the same colour
    text = widget.locator('.sc-option[data-sc-key="B"] .sc-struck-info').inner_text()
    assert "Struck out." in text
    assert "four times the gradient" in text
    assert "\u2717" not in widget.locator(".sc-options").inner_text()  # no red cross anywhere
    # a wrong move (the survivor struck) is still the red cross, in the feedback only
    widget.get_by_label("What rules an option out?").fill("it looks too simple")
    widget.get_by_role("button", name="Strike A").click()
    shown = widget.evaluate(VERDICT_COLOURS)
    assert [v[1] for v in shown if v[0] == "feedback"] == ["\u2717"]
    assert [v[1] for v in shown if v[0] == "struck"] == ["\u2713"]
    wrong = next(v[2] for v in shown if v[0] == "feedback")
    assert wrong != struck[0][2]  # red for the wrong move, not for the right strike
    _assert_clean(pg)


# -- predict first and step-through -----------------------------------------------------


def test_predict_first(page: Any, site_url: str) -> None:
    _open_guide(page, site_url)
    widget = _widget(page, "amp-step-order-predict")
    reveal = widget.get_by_role("button", name="Reveal the answer")
    box = widget.get_by_label("Your prediction")
    assert reveal.is_disabled()
    assert not widget.locator("details.sc-answer").is_visible()
    box.fill("   ")
    assert reveal.is_disabled()  # blank is not a prediction
    box.fill("zero_grad, forward, backward, step")
    assert reveal.is_enabled()
    reveal.click()
    compare = widget.locator(".sc-compare")
    assert compare.locator(".sc-committed").inner_text() == "zero_grad, forward, backward, step"
    assert "scaler.scale(loss).backward()" in compare.locator(".sc-compare-answer").inner_text()
    assert not box.is_visible()
    assert not reveal.is_visible()
    assert "sc-feedback" in _focused_class(page)
    _assert_clean(page)


def test_step_through_rows_then_the_next_row(page: Any, site_url: str) -> None:
    _open_guide(page, site_url)
    widget = _widget(page, "underflow-steps")
    rows = widget.locator("table tbody tr")
    more = widget.get_by_role("button", name="Show the next row")

    def visible_rows() -> int:
        return sum(rows.nth(i).is_visible() for i in range(rows.count()))

    assert rows.count() == 3
    assert visible_rows() == 1
    assert not widget.locator(".sc-next").is_visible()
    more.focus()
    page.keyboard.press("Enter")  # by keyboard: focus stays on the button for the next press
    assert visible_rows() == 2
    assert page.evaluate("document.activeElement.textContent") == "Show the next row"
    progress = widget.locator(".sc-progress")
    assert progress.get_attribute("aria-live") == "polite"
    assert "Row 2 of 3 shown." in progress.inner_text()
    # the new row is read out from the live region, its cells named by their columns
    heads = widget.locator("table thead th").all_inner_texts()
    cells = rows.nth(1).locator("td").all_inner_texts()
    spoken = progress.text_content()
    assert all(f"{h.strip()}: {c.strip()}" in spoken for h, c in zip(heads, cells, strict=True))
    page.keyboard.press("Enter")
    assert visible_rows() == 3
    assert not more.is_visible()
    # the button is gone with the last row: focus goes on to the closing question
    assert page.evaluate("document.activeElement.classList.contains('sc-next')")
    assert widget.locator(".sc-next").is_visible()
    assert "What would the row after the last one show" in widget.locator(".sc-next").inner_text()
    # The progress line asks the page's own closing question.
    progress = widget.locator(".sc-progress").text_content()
    assert progress.startswith("Row 3 of 3 shown. ")
    assert " Now: What would the row after the last one show" in progress
    # Heard with the progress, not shown twice: the question itself is visible just below.
    spoken = widget.locator(".sc-progress .sc-visually-hidden")
    assert spoken.count() == 1
    assert spoken.evaluate("el => getComputedStyle(el).position") == "absolute"
    reveal = widget.get_by_role("button", name="Reveal the answer")
    assert reveal.is_disabled()
    widget.get_by_label("Your next row").fill("zero, and the weight stops learning")
    reveal.click()
    compare = widget.locator(".sc-compare")
    assert "zero, and the weight stops learning" in compare.inner_text()
    assert compare.locator(".sc-compare-title").first.text_content() == "Your next row"
    assert "Zero again" in compare.locator(".sc-compare-answer").inner_text()
    _assert_clean(page)


def test_step_through_answer_label_names_the_answer_box(page: Any, site_url: str) -> None:
    _open_guide(page, site_url)
    widget = _widget(page, "lost-row-steps")
    more = widget.get_by_role("button", name="Show the next row")
    more.click()
    more.click()
    progress = widget.locator(".sc-progress").text_content()
    assert "Now: Which row lost its gradient, and what would bring it back?" in progress
    assert "next row be" not in progress
    assert widget.get_by_label("Your next row").count() == 0  # the question is not a next row
    widget.get_by_label("Your row, and why").fill("the last; scale the loss")
    widget.get_by_role("button", name="Reveal the answer").click()
    compare = widget.locator(".sc-compare")
    assert compare.locator(".sc-compare-title").first.text_content() == "Your row, and why"
    assert "the last; scale the loss" in compare.inner_text()
    assert "default scale" in compare.locator(".sc-compare-answer").inner_text()
    _assert_clean(page)


# -- sort ---------------------------------------------------------------------------


def test_sort_with_the_mouse(page: Any, site_url: str) -> None:
    _open_guide(page, site_url)
    widget = _widget(page, "dtype-sort")
    items = widget.locator(".sc-item")
    assert items.count() == 4
    for index, bucket in enumerate(["FP16", "FP16", "FP32", "FP16"]):  # the last is wrong
        items.nth(index).locator("label", has_text=bucket).click()
    widget.get_by_role("button", name="Check").click()
    verdicts = [items.nth(i).locator(".sc-mark").inner_text() for i in range(4)]
    assert all("Correct: it goes in" in v for v in verdicts[:3])
    assert "Not quite: it goes in FP32, not FP16." in verdicts[3]
    assert "running averages are small" in verdicts[3]  # the item's note
    assert "Not quite. 3 of 4 items are in the right bucket." in _feedback(widget).inner_text()
    _assert_clean(page)


def test_sort_with_the_keyboard_alone(page: Any, site_url: str) -> None:
    _open_guide(page, site_url)
    widget = _widget(page, "holds-or-breaks")
    # Start on the control just before the widget, then use keys only. Tab
    # passes the example's source block (the theme makes scrollable code
    # focusable) and lands on the first item's first bucket.
    _widget(page, "dtype-sort").locator("details.sc-answer > summary").focus()
    for _ in range(10):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.closest('#sc-holds-or-breaks') !== null"):
            break
    assert page.evaluate("document.activeElement.name") == "sc-holds-or-breaks-item-1"
    page.keyboard.press("Space")  # item 1: the first bucket, "Holds up"
    page.keyboard.press("Tab")
    page.keyboard.press("Space")  # item 2: "Holds up"
    page.keyboard.press("Tab")
    page.keyboard.press("ArrowRight")  # item 3: arrow to "Breaks", which selects it
    page.keyboard.press("Tab")
    page.keyboard.press("ArrowRight")  # item 4: "Breaks"
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Check"
    page.keyboard.press("Enter")
    assert "Correct. All 4 items are in the right bucket." in _feedback(widget).inner_text()
    assert "sc-feedback" in _focused_class(page)
    assert widget.locator(".sc-item.sc-right").count() == 4
    _assert_clean(page)


# -- refill -------------------------------------------------------------------------


def test_refill_the_column(page: Any, site_url: str) -> None:
    _open_guide(page, site_url)
    widget = _widget(page, "format-bits")
    assert widget.locator("details.sc-cell-answer").first.is_hidden()
    typed = {
        "FP16, exponent bits": "5 bits",  # a unit is fine
        "FP16, largest finite value": "65,504",  # so is a thousands separator
        "BF16, exponent bits": "7",  # wrong: that is BF16's mantissa
        "BF16, largest finite value": "3.39e38",
        "FP32, exponent bits": " 8 ",
        # FP32's largest finite value is left blank
    }
    for label, value in typed.items():
        widget.get_by_label(label, exact=True).fill(value)
    widget.get_by_role("button", name="Check").click()

    def result(label: str) -> str:
        slot = widget.locator(f'.sc-refill-slot[data-sc-label="{label}"]')
        return slot.locator(".sc-cell-result").inner_text()

    matching = [
        "FP16, exponent bits",
        "FP16, largest finite value",
        "BF16, largest finite value",
        "FP32, exponent bits",
    ]
    for label in matching:
        assert "\u2713 Match" in result(label), label
    assert "\u2717 Differs" in result("BF16, exponent bits")
    assert "Blank" in result("FP32, largest finite value")
    feedback = _feedback(widget)
    assert "Not quite. 4 of 6 cells match. Try the others again" in feedback.inner_text()
    # The first check gives verdicts only: no true value is on show yet.
    assert widget.locator(".sc-true-value").count() == 0
    assert "true:" not in widget.locator("form").inner_text()
    assert widget.locator("details.sc-cell-answer").first.is_hidden()

    # A second check after a fix still shows no values.
    widget.get_by_label("BF16, exponent bits", exact=True).fill("8")
    assert widget.locator(".sc-cell-result").first.is_hidden()  # editing clears the verdicts
    widget.get_by_role("button", name="Check").click()
    assert "\u2713 Match" in result("BF16, exponent bits")
    assert widget.locator(".sc-true-value").count() == 0

    # Only the deliberate second action reveals them, beside every cell.
    reveal = widget.get_by_role("button", name="Show the true values")
    assert reveal.is_visible()
    reveal.click()
    assert "true: 8" in result("BF16, exponent bits")
    assert "true: 65504" in result("FP16, largest finite value").replace(",", "")
    assert "true:" in result("FP32, largest finite value")  # the blank cell's value too
    assert widget.locator(".sc-true-value").count() == 6
    assert not reveal.is_visible()
    assert "the true value is beside each cell" in feedback.inner_text()
    assert "sc-feedback" in _focused_class(page)

    # Typing again hides the values: the next check is a fresh attempt.
    widget.get_by_label("FP32, largest finite value", exact=True).fill("3.4e38")
    assert widget.locator(".sc-true-value").count() == 0
    widget.get_by_role("button", name="Check").click()
    assert "Correct. All 6 cells match." in feedback.inner_text()
    assert not reveal.is_visible()  # nothing left to reveal
    _assert_clean(page)


def test_refill_reveal_survives_a_reload(page: Any, site_url: str) -> None:
    _open_guide(page, site_url)
    widget = _widget(page, "format-bits")
    widget.get_by_label("FP16, exponent bits", exact=True).fill("4")
    widget.get_by_role("button", name="Check").click()
    page.reload()
    page.wait_for_selector(".sc-page-bar")
    widget = _widget(page, "format-bits")
    assert "\u2717 Differs" in widget.locator(".sc-refill-slot").first.inner_text()
    assert widget.locator(".sc-true-value").count() == 0
    widget.get_by_role("button", name="Show the true values").click()
    page.reload()
    page.wait_for_selector(".sc-page-bar")
    assert _widget(page, "format-bits").locator(".sc-true-value").count() == 6
    _assert_clean(page)


YOUR_TURN = "chapter/your-turn.html"
ACCUMULATION = "chapter/accumulation-equals-full-batch.html"
FORMATS = "chapter/formats.html"


def _open_page(pg: Any, site_url: str, rel: str) -> None:
    pg.goto(f"{site_url}/{rel}")
    pg.wait_for_selector(".sc-page-bar")


def _cell_result(widget: Any, label: str) -> str:
    slot = widget.locator(f'.sc-refill-slot[data-sc-label="{label}"]')
    return slot.locator(".sc-cell-result").inner_text()


def test_refill_reads_numbers_as_people_write_them_and_says_why_one_differs(
    page: Any, site_url: str
) -> None:
    """A whole number or a power of two must be exact (65535 is not 65536), any other number
    is within the stated tolerance; 2^16, 64k, 16k and ln2/4 are numbers; a cell that differs
    says why, and names the true value only once the true values are shown."""
    _open_page(page, site_url, YOUR_TURN)
    scale = page.locator(".sc[data-sc-kind=refill]").first  # the scale a GradScaler uses
    assert "Numbers must be exact." in scale.locator(".sc-instructions").inner_text()
    typed = {
        "1, expected scale": "65535",  # 65536, off by one
        "2, expected scale": "2^16",  # 65536
        "3, expected scale": "lots",
        "4, expected scale": "32k",  # 32768: a k of 1024
        "8, expected scale": "16k",  # 16384
        "9, expected scale": "2**14",  # 16384
        "10, expected scale": "1.6384e4",  # 16384
    }
    for label, value in typed.items():
        scale.get_by_label(label, exact=True).fill(value)
    scale.get_by_role("button", name="Check").click()
    for label in ("2, expected scale", "4, expected scale", "8, expected scale",
                  "9, expected scale", "10, expected scale"):  # fmt: skip
        assert "\u2713 Match" in _cell_result(scale, label), label
    off_by_one = _cell_result(scale, "1, expected scale")
    assert "\u2717 Differs" in off_by_one
    assert "Must be exact." in off_by_one
    assert "65536" not in off_by_one  # no answer before the reader asks for it
    assert "Could not read \u201clots\u201d as a number." in _cell_result(
        scale, "3, expected scale"
    )
    scale.get_by_role("button", name="Show the true values").click()
    assert "65535 is not 65536: this answer must be exact." in _cell_result(
        scale, "1, expected scale"
    )

    _open_page(page, site_url, ACCUMULATION)
    loss = page.locator(".sc[data-sc-kind=refill]").first  # ln 2 / 4 in each cell
    assert "within 0.5 %" in loss.locator(".sc-instructions").inner_text()
    inputs = loss.locator("input.sc-refill-input")
    for i, value in enumerate(["ln2/4", "ln(2) / 4", "0.1733", "0.17"]):
        inputs.nth(i).fill(value)
    loss.get_by_role("button", name="Check").click()
    results = loss.locator(".sc-cell-result").all_inner_texts()
    assert all("\u2713 Match" in r for r in results[:3]), results
    assert "\u2717 Differs" in results[3]
    assert "Must be within 0.5 %." in results[3]
    _assert_clean(page)


ROOM_JS = """(widget) => {
  const box = widget.querySelector('.sc-scroll');
  const frame = box.closest('.sc-scroll-frame');
  const edge = box.getBoundingClientRect();
  return {
    room: box.scrollWidth - box.clientWidth,
    tabindex: box.tabIndex,
    role: box.getAttribute('role'),
    name: box.getAttribute('aria-label'),
    frame: frame.className,
    rightShadow: getComputedStyle(frame, '::after').opacity,
    leftShadow: getComputedStyle(frame, '::before').opacity,
    clipped: [...widget.querySelectorAll('input.sc-refill-input')]
      .map((input) => input.getBoundingClientRect())
      .filter((r) => r.left < edge.left - 0.5 || r.right > edge.right + 0.5).length,
    hint: widget.querySelector('.sc-scroll-hint').hidden ? '' : widget.querySelector('.sc-scroll-hint').textContent,
  };
}"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_refill_tables_at_phone_width_show_the_column_to_fill_or_say_they_scroll(
    make_page: Any, site_url: str, scheme: str
) -> None:
    """At 390 px the your-turn and accumulation tables fit, every input whole, before and after
    a check; a table that cannot fit (the formats' six columns) scrolls inside a named region a
    keyboard can focus, with a shadow on the side that has more and a line saying which way."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    pg = make_page(viewport=PHONE, color_scheme=scheme, is_mobile=True, has_touch=True)
    for rel in (YOUR_TURN, ACCUMULATION):
        _open_page(pg, site_url, rel)
        widgets = pg.locator(".sc[data-sc-kind=refill]")
        assert widgets.count() >= 1
        for i in range(widgets.count()):
            widget = widgets.nth(i)
            room = widget.evaluate(ROOM_JS)
            assert room["role"] == "region", room
            assert room["name"].startswith("Table to fill in: "), room
            assert room["room"] <= 1, (rel, room)  # the columns to fill are on the screen
            assert room["clipped"] == 0, (rel, room)  # and no input is cut at an edge
            assert room["hint"] == ""
            widget.locator("input.sc-refill-input").first.fill("not a number at all")
            widget.get_by_role("button", name="Check").click()
            after = widget.evaluate(ROOM_JS)  # the verdicts and reasons wrap in their cells
            assert after["room"] <= 1, (rel, after)
            assert after["clipped"] == 0, (rel, after)
            widget.screenshot(
                path=str(SHOTS / f"refill-{rel.split('/')[-1][:-5]}-{i}-{scheme}-phone.png")
            )
    _open_page(pg, site_url, FORMATS)
    widget = _widget(pg, "formats-bits")
    room = widget.evaluate(ROOM_JS)
    assert room["room"] > 1, room  # six columns do not fit a phone...
    assert room["tabindex"] == 0  # ...so the box is a tab stop
    assert room["name"] == "Table to fill in: sign, exponent, mantissa"
    assert "sc-more-right" in room["frame"]
    assert "sc-more-left" not in room["frame"]
    assert room["rightShadow"] == "1"
    assert room["leftShadow"] == "0"
    assert room["hint"].startswith("More columns to the right")
    widget.locator(".sc-scroll").focus()
    for _ in range(40):  # the arrow keys scroll the focused box, to its far edge
        pg.keyboard.press("ArrowRight")
        if "sc-more-right" not in widget.evaluate(ROOM_JS)["frame"]:
            break
    room = widget.evaluate(ROOM_JS)
    assert "sc-more-right" not in room["frame"], room
    assert room["leftShadow"] == "1"
    assert room["hint"].startswith("\u2190 More columns to the left")
    _assert_clean(pg)


# -- an older engine ----------------------------------------------------------------------


def test_the_script_compiles_no_regex_an_older_engine_cannot(make_page: Any, site_url: str) -> None:
    """An engine without ES2018 lookbehind still gets every widget.

    Chromium has lookbehind, so the page is given a RegExp that refuses it the
    way such an engine does (a SyntaxError), before any script runs.
    """
    pg = make_page(viewport=DESKTOP)
    pg.add_init_script("""
        const NativeRegExp = RegExp;
        window.RegExp = function (source, flags) {
          if (/\\(\\?<[=!]/.test(String(source))) {
            throw new SyntaxError("Invalid regular expression: lookbehind is not supported");
          }
          return new NativeRegExp(source, flags);
        };
        window.RegExp.prototype = NativeRegExp.prototype;
    """)
    _open_guide(pg, site_url)
    assert pg.locator(".sc.sc-live").count() == 12
    widget = _widget(pg, "format-bits")
    widget.get_by_label("FP16, largest finite value", exact=True).fill("65,504")
    widget.get_by_role("button", name="Check").click()
    assert "\u2713 Match" in widget.locator(".sc-refill-slot").nth(1).inner_text()
    _assert_clean(pg)


# -- storage and reset ----------------------------------------------------------------


def _answer_some(pg: Any) -> None:
    choice = _widget(pg, "fp16-underflow")
    choice.get_by_label("A. 0.0").check()
    choice.get_by_role("button", name="Check").click()
    predict = _widget(pg, "amp-step-order-predict")
    predict.get_by_label("Your prediction").fill("my guess")
    predict.get_by_role("button", name="Reveal the answer").click()
    _widget(pg, "dtype-sort").locator(".sc-item").first.locator("label", has_text="FP16").click()
    _widget(pg, "format-bits").get_by_label("FP16, exponent bits").fill("5")
    _widget(pg, "accumulation-analogy").get_by_label("Your answer").fill("like a tip jar")


def test_answers_survive_a_reload_and_the_resets_clear_them(page: Any, site_url: str) -> None:
    _open_guide(page, site_url)
    _answer_some(page)
    keys = page.evaluate("Object.keys(localStorage)")
    assert f"amp-lesson:selfcheck:v1:/{GUIDE}#fp16-underflow" in keys

    page.reload()
    page.wait_for_selector(".sc-page-bar")
    choice = _widget(page, "fp16-underflow")
    assert choice.get_by_label("A. 0.0").is_checked()
    assert "Correct." in _feedback(choice).inner_text()
    assert (
        _widget(page, "amp-step-order-predict").locator(".sc-committed").inner_text() == "my guess"
    )
    assert _widget(page, "dtype-sort").locator(".sc-item").first.get_by_label("FP16").is_checked()
    assert _widget(page, "format-bits").get_by_label("FP16, exponent bits").input_value() == "5"
    assert _widget(page, "accumulation-analogy").get_by_label("Your answer").input_value() == (
        "like a tip jar"
    )

    # The widget's own Reset clears that widget only, in the page and in storage.
    choice.get_by_role("button", name="Reset this question").click()
    assert not choice.get_by_label("A. 0.0").is_checked()
    assert _feedback(choice).inner_text() == ""
    page.reload()
    page.wait_for_selector(".sc-page-bar")
    assert not _widget(page, "fp16-underflow").get_by_label("A. 0.0").is_checked()
    assert _widget(page, "amp-step-order-predict").locator(".sc-committed").count() == 1

    # "Reset my answers" clears the whole page.
    page.get_by_role("button", name="Reset my answers").click()
    assert "cleared" in page.locator(".sc-page-status").inner_text()
    assert _widget(page, "amp-step-order-predict").get_by_label("Your prediction").is_visible()
    page.reload()
    page.wait_for_selector(".sc-page-bar")
    stored = page.evaluate("Object.keys(localStorage).filter(k => k.includes('selfcheck'))")
    assert stored == []
    assert _widget(page, "format-bits").get_by_label("FP16, exponent bits").input_value() == ""
    assert _widget(page, "amp-step-order-predict").locator(".sc-committed").count() == 0
    _assert_clean(page)


def test_blocked_storage_still_works_for_the_visit(make_page: Any, site_url: str) -> None:
    pg = make_page(viewport=DESKTOP)
    # Make storage throw for this feature's keys, as a full or locked-down
    # browser does (only ours: the theme's own scripts do not guard theirs).
    pg.add_init_script("""
        for (const name of ["getItem", "setItem", "removeItem"]) {
          const original = Storage.prototype[name];
          Storage.prototype[name] = function (key, ...rest) {
            if (String(key).startsWith("amp-lesson:selfcheck")) {
              throw new DOMException("blocked", "SecurityError");
            }
            return original.call(this, key, ...rest);
          };
        }
    """)
    _open_guide(pg, site_url)
    assert "not keeping answers" in pg.locator(".sc-page-bar").inner_text()
    choice = _widget(pg, "fp16-underflow")
    choice.get_by_label("A. 0.0").check()
    choice.get_by_role("button", name="Check").click()
    assert "Correct." in _feedback(choice).inner_text()
    _assert_clean(pg)


# -- without JavaScript ---------------------------------------------------------------


def test_every_answer_is_reachable_without_javascript(make_page: Any, site_url: str) -> None:
    pg = make_page(viewport=DESKTOP, java_script_enabled=False)
    pg.goto(f"{site_url}/{GUIDE}")
    widgets = pg.locator(".sc[data-sc-kind]")
    assert widgets.count() == 12
    assert pg.locator(".sc-live, .sc-page-bar, .sc input, .sc textarea").count() == 0
    details = pg.locator(".sc details")
    assert details.count() >= 17  # one answer per widget, and one per refill cell
    for index in range(details.count()):
        item = details.nth(index)
        body = item.locator(":scope > :not(summary)").first
        assert not body.is_visible()  # answers start hidden...
        item.locator(":scope > summary").click()
        assert body.is_visible()  # ...and one click shows them
    text = pg.locator("article").inner_text()
    for expected in [
        "Answer: A. 0.0",  # multiple choice
        "Why D tempts",
        "What rules out C",  # eliminate
        "Survives elimination: A.",
        "Answer: optimizer.zero_grad()",  # predict
        "running averages are small",  # a sort item's note
        "Zero again",  # the step-through's next row
        "The last one: 1e-8 is stored",  # a step-through with its own closing question
        "65504",  # a refill cell's true value
        "Find the seam",  # a discussion hint
    ]:
        assert expected in text, expected
    assert pg.outside_requests == []


# -- layout ---------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_phone_width_has_no_horizontal_overflow(make_page: Any, site_url: str, scheme: str) -> None:
    pg = make_page(viewport=PHONE, color_scheme=scheme, is_mobile=True, has_touch=True)
    _open_guide(pg, site_url)
    _answer_some(pg)  # feedback and comparisons showing
    _widget(pg, "format-bits").get_by_role("button", name="Check").click()
    for _ in range(2):
        _widget(pg, "underflow-steps").get_by_role("button", name="Show the next row").click()
    widths = pg.evaluate(
        "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert widths[0] <= widths[1], widths
    _assert_clean(pg)


# -- screenshots for a person to look at -----------------------------------------------


# The widgets _show_feedback answers and checks, so each shows its feedback.
SHOWN_FEEDBACK = (
    "fp16-underflow",
    "fp32-copies",
    "accumulation-backward",
    "dtype-sort",
    "format-bits",
)


def _show_feedback(pg: Any) -> None:
    """Put each widget in a state that shows its feedback."""
    _answer_some(pg)
    wrong = _widget(pg, "fp32-copies")
    wrong.get_by_label("C. the activations").check()
    wrong.get_by_role("button", name="Check").click()
    eliminate = _widget(pg, "accumulation-backward")
    eliminate.get_by_label("What rules an option out?").fill("four times the gradient")
    eliminate.get_by_role("button", name="Strike B").click()
    eliminate.get_by_label("What rules an option out?").fill("it looks too simple")
    eliminate.get_by_role("button", name="Strike A").click()
    sort = _widget(pg, "dtype-sort")
    sort.locator(".sc-item").nth(3).locator("label", has_text="FP16").click()
    sort.get_by_role("button", name="Check").click()
    refill = _widget(pg, "format-bits")
    refill.get_by_label("BF16, exponent bits").fill("7")
    refill.get_by_label("FP16, largest finite value").fill("65,504")
    refill.get_by_role("button", name="Check").click()
    steps = _widget(pg, "underflow-steps")
    steps.get_by_role("button", name="Show the next row").click()
    steps.get_by_role("button", name="Show the next row").click()
    steps.get_by_label("Your next row").fill("zero again")
    steps.get_by_role("button", name="Reveal the answer").click()


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("size", ["desktop", "phone"])
def test_screenshots_of_every_widget(make_page: Any, site_url: str, scheme: str, size: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    pg = make_page(viewport=DESKTOP if size == "desktop" else PHONE, color_scheme=scheme)
    _open_guide(pg, site_url)
    assert pg.evaluate("document.documentElement.dataset.theme") == scheme
    _show_feedback(pg)
    # The theme's sticky header would cover the top of a widget scrolled into view.
    pg.add_style_tag(
        content=(
            ".bd-header, .bd-header-article { position: static !important; }"
            " .skip-link { display: none !important; }"
        )
    )
    pg.evaluate("document.activeElement && document.activeElement.blur()")
    ids = pg.eval_on_selector_all(".sc[data-sc-kind]", "nodes => nodes.map(n => n.dataset.scId)")
    assert len(ids) >= len(SHOWN_FEEDBACK)
    width = (DESKTOP if size == "desktop" else PHONE)["width"]
    for widget_id in ids:
        widget = _widget(pg, widget_id)
        path = SHOTS / f"{widget_id}-{scheme}-{size}.png"
        widget.screenshot(path=str(path))
        # What a person looks for in the picture: the whole widget inside the page's width,
        # nothing inside it cut off at its right edge, and feedback where an answer was given.
        box = widget.bounding_box()
        assert box is not None, widget_id
        assert box["x"] >= 0, (widget_id, box)
        assert box["x"] + box["width"] <= width, (widget_id, box)
        assert widget.evaluate("el => el.scrollWidth <= el.clientWidth + 1"), widget_id
        if widget_id in SHOWN_FEEDBACK:
            assert _feedback(widget).inner_text().strip(), widget_id
        with Image.open(path) as shot:
            assert shot.getcolors(maxcolors=1) is None, f"{path} is a blank image"
    _assert_clean(pg)
