"""The bit explorer and the GradScaler playground in a real Chromium, on the built book.

Exactness: the explorer on the formats page is fed more than ten thousand
texts (random FP32 bit patterns and magnitudes, both sides of every format's
limits, ties, double-rounding cases, subnormal edges, signed zeros, infinities,
NaNs with payloads, E4M3 saturation, every FP8 pattern) and must show, for
each of its six formats, exactly what :func:`amp_lesson.formats.store` gives:
the stored value, the bits, the class, the event and the relative error. The
playground is fed a few hundred random schedules and settings and must give
every step exactly as :func:`amp_lesson.scaler.simulate` and a real
``torch.amp.GradScaler("cpu")`` do. Each comparison runs as one batch inside
the page (set the field, fire ``input``, read the widget), so the tests stay
quick. Then: bad input gets the Python messages inline and no console error,
the bits and steps work by keyboard, the pages work without JavaScript, fit a
phone, and axe-core finds nothing serious in either theme. Screenshots go to
``/tmp/playground-shots/`` for a person to look at.
"""

from __future__ import annotations

import json
import math
import random
import struct
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch
from audit import serious_violations

from amp_book.playground_text import (
    read_number,
    read_scaler_settings,
    steps_pattern,
)
from amp_lesson.formats import FORMATS, store
from amp_lesson.playground import (
    EVENT_TEXT,
    EXPLORER_FORMATS,
    NOT_STORED,
    class_text,
    describe_trace,
    event_text,
    explorer_rows,
    read_steps,
    scaler_trace,
)
from amp_lesson.scaler import run_torch_scaler, simulate

pytestmark = pytest.mark.browser

FORMATS_PAGE = "chapter/formats.html"
BEYOND_PAGE = "beyond/bf16-tf32-fp8.html"
MX_PAGE = "beyond/mx-block-scaling.html"
MX_PAGE_FORMATS = ("fp4_e2m1", "fp8_e4m3", "fp8_e5m2", "fp16")  # its explorer's :formats:
SCALER_PAGE = "chapter/gradscaler.html"
PAGES = (FORMATS_PAGE, BEYOND_PAGE, SCALER_PAGE)
SHOTS = Path("/tmp/playground-shots")
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}
EXPLORER_VALUES_PER_FORMAT = 10_000
SCALER_CASES = 300


def _open(pg: Any, site_url: str, rel: str, ready: str) -> None:
    pg.goto(f"{site_url}/{rel}")
    pg.wait_for_selector(ready)  # the script has built the widget


def _error_message(func: Any, *args: Any) -> str:
    """The message of the ValueError ``func(*args)`` raises (failing if it raises none)."""
    try:
        func(*args)
    except ValueError as error:
        return str(error)
    raise AssertionError(f"{func.__name__}{args!r} raised no ValueError")


def _assert_clean(pg: Any) -> None:
    assert pg.console_errors == []
    assert pg.outside_requests == []


# -- the values the explorer is checked on ----------------------------------------------


def _gap(spec: Any, magnitude: float) -> float:
    """The gap between neighbours of ``spec`` at ``magnitude`` (subnormal spacing below normal)."""
    binade = math.frexp(magnitude)[1] - 1 if magnitude else 1 - spec.bias
    return math.ldexp(1.0, max(binade, 1 - spec.bias) - spec.mantissa_bits)


def explorer_texts(seed: int = 20260) -> list[str]:
    """Texts for the explorer: random and adversarial, as a reader could type them."""
    rng = random.Random(seed)
    texts: list[str] = []
    # Random FP32 bit patterns: over all of them, and over the exponents the narrow formats span.
    texts += [f"0x{rng.getrandbits(32):08x}" for _ in range(2500)]
    texts += [
        f"0x{rng.getrandbits(1) << 31 | rng.randrange(96, 151) << 23 | rng.getrandbits(23):08x}"
        for _ in range(2000)
    ]
    # Random float64 magnitudes across FP32's range and past it, typed as decimals.
    for _ in range(2000):
        x = math.ldexp(rng.uniform(0.5, 1.0), rng.randint(-160, 135))
        texts.append(repr(-x if rng.getrandbits(1) else x))
    # Both sides of every limit, ties and a hair off them, in every format.
    for spec in FORMATS.values():
        anchors = [spec.max, spec.smallest_normal, spec.smallest_subnormal, 1.0, 2048.0]
        anchors += [spec.smallest_subnormal / 2, spec.smallest_normal - _gap(spec, 0.0)]
        for anchor in anchors:
            gap = _gap(spec, anchor)
            for halves in range(-3, 4):
                x = anchor + halves * gap / 2
                for nudge in (0.0, math.ldexp(x, -40), -math.ldexp(x, -40), math.ldexp(x, -26)):
                    for sign in (1.0, -1.0):
                        texts.append(repr(sign * (x + nudge)))
        # Midpoints between random neighbours (ties), and just off them in float64:
        # a float64 a hair above a tie can round to the tie in FP32, then to even.
        for _ in range(150):
            magnitude = math.ldexp(rng.uniform(1.0, 2.0), rng.randint(-(spec.bias - 1), spec.bias))
            magnitude = min(magnitude, spec.max)
            gap = _gap(spec, magnitude)
            tie = math.floor(magnitude / gap) * gap + gap / 2
            for nudge in (0.0, math.ldexp(tie, -45), -math.ldexp(tie, -45)):
                texts.append(repr(tie + nudge))
    # Every FP8 pattern, and random patterns of the 16-bit formats and TF32.
    texts += [f"e4m3:0x{p:02x}" for p in range(256)] + [f"e5m2:0x{p:02x}" for p in range(256)]
    texts += [f"e2m1:0x{p:x}" for p in range(16)] + ["fp4_e2m1:0xF", "E2M1 : 0x8"]
    texts += [f"fp16:0x{rng.getrandbits(16):04x}" for _ in range(400)]
    texts += [f"bf16:0x{rng.getrandbits(16):04x}" for _ in range(400)]
    texts += [f"tf32:0x{rng.getrandbits(19):05x}" for _ in range(200)]
    # NaNs with random payloads and signs, as FP32 patterns.
    texts += [
        f"0x{rng.getrandbits(1) << 31 | 0xFF << 23 | rng.randrange(1, 1 << 23):08x}"
        for _ in range(150)
    ]
    # Zeros, infinities, NaNs and E4M3's saturation, the way a reader types them.
    texts += [
        "0",
        "-0",
        "+0.0",
        "inf",
        "-inf",
        "Infinity",
        "nan",
        "-nan",
        "NaN",
        "1e400",
        "-1e-400",
    ]
    texts += ["448", "449", "464", "464.00000000001", "465", "479.9", "480", "500", "1e6", "-1e6"]
    texts += ["57344", "61439", "61440", "65504", "65519", "65519.99", "65520", "1E5", ".5", "5."]
    return texts


def _reference(text: str, names: tuple[str, ...] = EXPLORER_FORMATS) -> tuple[str, list[list[str]]]:
    """What the explorer must show for ``text``: the float64, then per format its fields."""
    value = read_number(text)
    rows = []
    for name in names:
        if math.isnan(value) and not FORMATS[name].has_nan:  # FP4 E2M1: store refuses it
            no_nan = EVENT_TEXT["no_nan"]
            rows.append(
                [name, NOT_STORED, "", "none", "no_nan", *[NOT_STORED] * 3, no_nan, NOT_STORED]
            )
            continue
        s = store(value, name)
        rows.append(
            [
                name,
                repr(s.stored),
                s.bits,
                s.kind,
                s.event,
                repr(s.rel_error),
                format(s.rel_error, ".3g"),
                class_text(s),
                event_text(s),
                repr(s.stored),
            ]
        )
    return repr(value), rows


# One batch inside the page: JSON in and out (Playwright's own serialization of
# ten thousand nested arrays costs more than the widget's work).
READ_EXPLORER = """
(textsJson) => {
  const root = document.querySelector('.amp-bx');
  const input = root.querySelector('input.amp-bx-input');
  const error = root.querySelector('.amp-bx-error');
  const items = [...root.querySelectorAll('li.amp-bx-fmt')];
  return JSON.stringify(JSON.parse(textsJson).map((text) => {
    input.value = text;
    input.dispatchEvent(new Event('input', {bubbles: true}));
    if (!error.hidden) return ['error: ' + error.textContent, []];
    return [root.dataset.value, items.map((li) => [
      li.dataset.format, li.dataset.stored, li.dataset.bits, li.dataset.kind, li.dataset.event,
      li.dataset.rel, li.querySelector('.amp-bx-rel').textContent, li.dataset.class,
      li.querySelector('.amp-bx-event').textContent, li.querySelector('.amp-bx-stored').textContent,
    ])];
  }));
}
"""


def _read_explorer(pg: Any, texts: list[str]) -> list[Any]:
    return json.loads(pg.evaluate(READ_EXPLORER, json.dumps(texts)))


def _compare_explorer(
    pg: Any, texts: list[str], names: tuple[str, ...]
) -> tuple[list[Any], list[Any], list[Any]]:
    """What the page's explorer shows for ``texts``, what it must show for ``names``, and the
    texts where the two differ. Python works out the reference while Chromium runs the batch
    (two processes, two cores)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(lambda: [_reference(text, names) for text in texts])
        shown = _read_explorer(pg, texts)
        expected = pending.result()
    differences = [
        (text, got, want)
        for text, got, want in zip(texts, shown, expected, strict=True)
        if [got[0], got[1]] != [want[0], want[1]]
    ]
    return shown, expected, differences


def test_the_bit_explorer_stores_what_torch_stores(page: Any, site_url: str) -> None:
    texts = explorer_texts()
    assert len(texts) >= EXPLORER_VALUES_PER_FORMAT
    _open(page, site_url, FORMATS_PAGE, ".amp-bx-ready")
    shown, expected, differences = _compare_explorer(page, texts, EXPLORER_FORMATS)
    assert differences[:10] == []
    compared = {
        name: sum(len(rows) > i for _, rows in shown) for i, name in enumerate(EXPLORER_FORMATS)
    }
    assert all(n >= EXPLORER_VALUES_PER_FORMAT for n in compared.values()), compared
    events = {row[4] for _, rows in expected for row in rows}
    kinds = {row[3] for _, rows in expected for row in rows}
    assert events == {"exact", "rounded", "underflow", "overflow", "saturated"}
    assert kinds == {"normal", "subnormal", "zero", "inf", "nan"}
    _assert_clean(page)


def test_the_explorer_on_the_mx_page_stores_what_store_gives_in_e2m1(
    page: Any, site_url: str
) -> None:
    """The same texts on the MX page's explorer, whose formats start with FP4 E2M1 (no torch
    cast: :func:`amp_lesson.formats.store` is checked against ml_dtypes in test_formats)."""
    texts = explorer_texts()
    _open(page, site_url, MX_PAGE, ".amp-bx-ready")
    names = page.eval_on_selector_all("li.amp-bx-fmt", "e => e.map(li => li.dataset.format)")
    assert tuple(names) == MX_PAGE_FORMATS
    _, expected, differences = _compare_explorer(page, texts, MX_PAGE_FORMATS)
    assert differences[:10] == []
    e2m1 = [rows[0] for _, rows in expected]
    assert {row[4] for row in e2m1} == {"exact", "rounded", "underflow", "saturated", "no_nan"}
    assert {row[2] for row in e2m1} >= {format(p, "04b") for p in range(16)}  # every pattern
    # A NaN leaves no bits and says why; flipping a bit from there starts at zero.
    page.fill("input.amp-bx-input", "nan")
    row = page.locator('li.amp-bx-fmt[data-format="fp4_e2m1"]')
    assert row.get_attribute("data-event") == "no_nan"
    assert page.locator(".amp-bx-headline").text_content() == (
        f"FP4 E2M1 stores nothing ({EVENT_TEXT['no_nan']})"
    )
    row.locator("button.amp-bx-bit").nth(3).click()
    assert page.input_value("input.amp-bx-input") == "e2m1:0x1"
    assert row.get_attribute("data-stored") == "0.5"
    _assert_clean(page)


def test_the_explorer_on_the_bf16_page_is_the_same_widget(page: Any, site_url: str) -> None:
    _open(page, site_url, BEYOND_PAGE, ".amp-bx-ready")
    texts = ["1e-8", "500", "61440", "0x3f800001", "-nan"]
    assert _read_explorer(page, texts) == [[value, rows] for value, rows in map(_reference, texts)]
    _assert_clean(page)


# -- bad input ------------------------------------------------------------------------


BAD_TEXTS = ["", "abc", "1_000", "0x", "0xZZ", "fp12:0x1", "0x1ffffffff", "e4m3:0x100", "--1", "1e"]


def test_bad_input_gets_pythons_message_inline_and_no_console_error(
    page: Any, site_url: str
) -> None:
    _open(page, site_url, FORMATS_PAGE, ".amp-bx-ready")
    root = page.locator(".amp-bx")
    box = root.get_by_label("Your number")
    error = root.locator(".amp-bx-error")
    for text in BAD_TEXTS:
        message = _error_message(read_number, text)
        box.fill(text)
        assert error.is_visible(), text
        assert error.inner_text() == message
        assert box.get_attribute("aria-invalid") == "true"
        assert error.get_attribute("id") in box.get_attribute("aria-describedby")
        assert "amp-bx-stale" in root.locator(".amp-bx-results").get_attribute("class")
    box.fill("0.1")
    assert not error.is_visible()
    assert box.get_attribute("aria-invalid") is None
    summary = root.locator(".amp-bx-summary")
    assert summary.get_attribute("aria-live") == "polite"
    page.wait_for_function(
        "document.querySelector('.amp-bx-summary').textContent.startsWith('0.1: FP16 rounded')"
    )
    _assert_clean(page)


# -- keyboard -------------------------------------------------------------------------


def test_bits_flip_by_keyboard_with_one_tab_stop_per_format(page: Any, site_url: str) -> None:
    _open(page, site_url, FORMATS_PAGE, ".amp-bx-ready")
    root = page.locator(".amp-bx")
    box = root.get_by_label("Your number")
    box.fill("1")
    shown = root.locator("li.amp-bx-fmt:not([hidden])").evaluate_all(
        "items => items.map(li => li.dataset.format)"
    )
    assert shown == ["fp16", "bf16", "fp32"]  # the page's :show:, FP16 first
    root.locator('li[data-format="fp16"] button.amp-bx-bit').first.focus()
    page.keyboard.press("Shift+Tab")  # back out of FP16's bits, onto what comes before
    stops = []
    for _ in shown:
        page.keyboard.press("Tab")
        stops.append(
            page.evaluate("document.activeElement.closest('li.amp-bx-fmt').dataset.format")
        )
    assert stops == shown  # one Tab stop per shown format's bits
    fp16 = root.locator('li[data-format="fp16"]')
    fp16.locator("button.amp-bx-bit").first.focus()
    page.keyboard.press("ArrowRight")  # to the first exponent bit
    assert "FP16 exponent bit 1 of 5" in page.evaluate("document.activeElement.textContent")
    page.keyboard.press("End")
    page.keyboard.press("Space")  # flip the last mantissa bit of 1.0: 0x3c01
    assert box.input_value() == "fp16:0x3c01"
    assert fp16.get_attribute("data-stored") == repr(1 + 2**-10)
    assert page.evaluate("document.activeElement.dataset.index") == "15"  # focus stays put
    assert root.locator('li[data-format="fp32"]').get_attribute("data-stored") == repr(1 + 2**-10)
    page.keyboard.press("Home")
    page.keyboard.press("Enter")  # the sign bit
    assert box.input_value() == "fp16:0xbc01"
    assert fp16.get_attribute("data-stored") == repr(-(1 + 2**-10))
    root.get_by_role("checkbox", name="FP8 E4M3").check()  # a format the reader adds
    root.locator('li[data-format="fp8_e4m3"] button.amp-bx-bit').nth(4).click()  # by mouse
    assert box.input_value().startswith("e4m3:0x")
    _assert_clean(page)


# -- the GradScaler playground ------------------------------------------------------------


def scaler_cases(seed: int = 2026) -> list[dict[str, str]]:
    """Random settings (as a reader would type them) and schedules."""
    rng = random.Random(seed)
    cases = []
    for i in range(SCALER_CASES):
        init = rng.choice(
            [
                "65536.0",
                repr(math.ldexp(1.0, rng.randint(-30, 127))),
                repr(rng.uniform(0.5, 1e6)),
                "3e38",
                "1e-40",
                "1e-45",
                repr(math.ldexp(rng.uniform(1, 2), rng.randint(-149, -120))),
            ]
        )
        growth = rng.choice(["2.0", "1.5", "3", "10", "1.0001", repr(rng.uniform(1.01, 8.0))])
        backoff = rng.choice(["0.5", "0.25", "0.01", "0.999", repr(rng.uniform(0.001, 0.99))])
        interval = rng.choice(["1", "2", "3", "4", "7", "2000"])
        length = rng.randint(150, 260) if i % 40 == 0 else rng.randint(1, 40)
        density = rng.choice([0.0, 0.05, 0.2, 0.5, 0.9, 1.0])
        pattern = steps_pattern(rng.random() < density for _ in range(length))
        cases.append(
            {
                "init_scale": init,
                "growth_factor": growth,
                "backoff_factor": backoff,
                "growth_interval": interval,
                "steps": pattern,
            }
        )
    return cases


def _trace_rows(trace: list[Any]) -> list[list[str]]:
    return [
        [
            str(r.step),
            repr(r.scale_used),
            # GradScaler unscales with scale.double().reciprocal().float()
            repr(
                torch.tensor(r.scale_used, dtype=torch.float32).double().reciprocal().float().item()
            ),
            str(r.found_inf).lower(),
            str(r.skipped).lower(),
            repr(r.scale_after),
            str(r.growth_tracker_after),
            r.change,  # what update() did: the simulator records it, GradScaler does not
        ]
        for r in trace
    ]


READ_SCALER = """
async (casesJson) => {
  const root = document.querySelector('.amp-sp');
  const field = (name) => root.querySelector('input.amp-sp-' + name);
  const pattern = root.querySelector('textarea.amp-sp-pattern');
  const out = [];
  for (const c of JSON.parse(casesJson)) {
    for (const name of ['init_scale', 'growth_factor', 'backoff_factor', 'growth_interval']) {
      field(name).value = c[name];
    }
    pattern.value = c.steps;
    pattern.dispatchEvent(new Event('input', {bubbles: true}));
    if (root.dataset.state !== 'ok') { out.push('invalid'); continue; }
    // A long trace's later rows follow the first ones in chunks.
    while (root.dataset.drawn !== 'all') await new Promise((r) => setTimeout(r, 0));
    out.push([...root.querySelectorAll('.amp-sp-live .amp-sp-table tbody tr')].map((tr) => [
      tr.dataset.step, tr.dataset.scaleUsed, tr.dataset.invScale, tr.dataset.foundInf,
      tr.dataset.skipped, tr.dataset.scaleAfter, tr.dataset.growthTracker, tr.dataset.change,
    ]));
  }
  return JSON.stringify(out);
}
"""


def test_the_scaler_playground_steps_as_gradscaler_does(page: Any, site_url: str) -> None:
    cases = scaler_cases()

    def references() -> tuple[list[Any], list[Any]]:
        model, real = [], []
        for case in cases:
            settings = read_scaler_settings(case)
            schedule = read_steps(case["steps"])
            model.append(_trace_rows(simulate(schedule, **settings)))
            real.append(_trace_rows(run_torch_scaler(schedule, "cpu", **settings)))
        return model, real

    _open(page, site_url, SCALER_PAGE, ".amp-sp-ready")
    # The real GradScaler runs while Chromium runs the batch (two processes, two cores).
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(references)
        shown = json.loads(page.evaluate(READ_SCALER, json.dumps(cases)))
        model, real = pending.result()
    # The simulator is exact to torch on these very cases (all but the change it records).
    assert [[row[:7] for row in rows] for rows in model] == [
        [row[:7] for row in rows] for rows in real
    ]
    assert {row[7] for rows in model for row in rows} == {"backoff", "count", "grow", "capped"}
    differences = [(c, s, m) for c, s, m in zip(cases, shown, model, strict=True) if s != m]
    assert differences[:5] == []
    steps = sum(len(rows) for rows in model)
    assert steps > 5000
    # The cases reach the corners: a scale of zero, an infinite inv_scale, capped growth.
    flat = [row for rows in model for row in rows]
    assert any(row[5] == "0.0" for row in flat)
    assert any(row[2] == "inf" and row[1] != "0.0" for row in flat)
    capped = [
        r for c in cases for r in simulate(read_steps(c["steps"]), **read_scaler_settings(c))
        if not r.found_inf and r.growth_tracker_after == 0 and r.scale_after == r.scale_used
        and r.scale_used > 1e38
    ]  # fmt: skip
    assert capped
    _assert_clean(page)


def test_the_playground_starts_from_the_pages_executed_trace(page: Any, site_url: str) -> None:
    _open(page, site_url, SCALER_PAGE, ".amp-sp-ready")
    executed = page.evaluate(
        """() => [...document.querySelector('#gradscaler-trace table.amp-table')
                  .querySelectorAll('tbody tr')].map((tr) =>
                  [...tr.querySelectorAll('td')].map((td) => td.textContent.trim()))"""
    )
    live = page.evaluate(
        """() => [...document.querySelectorAll('.amp-sp-live .amp-sp-table tbody tr')].map((tr) =>
                  [tr.dataset.step, tr.dataset.scaleUsed, tr.dataset.foundInf, tr.dataset.skipped,
                   tr.dataset.scaleAfter, tr.dataset.growthTracker])"""
    )
    assert len(executed) >= 10
    for shown, row in zip(executed, live, strict=False):
        step, used, overflow, skipped, after, tracker = shown
        assert row[0] == step
        assert float(row[1]) == float(used)
        assert row[2] == overflow.lower()
        assert row[3] == skipped.lower()
        assert float(row[4]) == float(after)
        assert row[5] == tracker
    _assert_clean(page)


def test_bad_settings_get_pythons_messages_beside_their_fields(page: Any, site_url: str) -> None:
    _open(page, site_url, SCALER_PAGE, ".amp-sp-ready")
    root = page.locator(".amp-sp")
    good = {
        name: root.locator(f"input.amp-sp-{name}").input_value()
        for name in ("init_scale", "growth_factor", "backoff_factor", "growth_interval")
    }
    bad = [
        ("init_scale", "0"),
        ("init_scale", "1e-50"),
        ("init_scale", "lots"),
        ("growth_factor", "1"),
        ("backoff_factor", "1.5"),
        ("growth_interval", "0"),
        ("growth_interval", "2.5"),
    ]
    for name, text in bad:
        message = _error_message(read_scaler_settings, {**good, name: text})
        box = root.locator(f"input.amp-sp-{name}")
        box.fill(text)
        error = root.locator(f"#{box.get_attribute('aria-describedby')}")
        assert error.is_visible()
        assert error.inner_text() == message
        assert box.get_attribute("aria-invalid") == "true"
        assert root.get_attribute("data-state") == "invalid"
        box.fill(good[name])
        assert not error.is_visible()
    pattern = root.get_by_label("Pattern: x an overflow, . a clean step")
    for text in ["", "x.y", "x" * 1001]:
        message = _error_message(read_steps, text)
        pattern.fill(text)
        assert root.locator(".amp-sp-steps .amp-sp-error").first.inner_text() == message
    pattern.fill("x.x")
    assert root.get_attribute("data-state") == "ok"
    root.get_by_label("Overflow every").fill("0")
    root.get_by_role("button", name="Fill the pattern").click()
    assert "Overflow every must be an integer >= 1, got 0" in root.inner_text()
    assert pattern.input_value() == "x.x"  # nothing filled from a bad request
    _assert_clean(page)


def test_steps_toggle_by_mouse_and_keyboard_and_fill(page: Any, site_url: str) -> None:
    _open(page, site_url, SCALER_PAGE, ".amp-sp-ready")
    root = page.locator(".amp-sp")
    pattern = root.get_by_label("Pattern: x an overflow, . a clean step")
    pattern.fill("....")
    step3 = root.get_by_role("button", name="Step 3")
    assert step3.get_attribute("aria-pressed") == "false"
    step3.click()
    assert pattern.input_value() == "..x."
    assert step3.get_attribute("aria-pressed") == "true"
    assert root.locator('.amp-sp-live tr[data-step="3"]').get_attribute("data-skipped") == "true"
    page.keyboard.press("ArrowRight")  # focus stayed on step 3; move to step 4
    page.keyboard.press("Space")
    assert pattern.input_value() == "..xx"
    assert page.evaluate("document.activeElement.dataset.step") == "4"
    toolbar_stops = page.evaluate(
        "[...document.querySelectorAll('.amp-sp-toggle')].filter((b) => b.tabIndex === 0).length"
    )
    assert toolbar_stops == 1
    root.get_by_label("Overflow every").fill("3")
    root.get_by_label("Run length").fill("9")
    root.get_by_role("button", name="Fill the pattern").click()
    assert pattern.input_value() == "..x..x..x"
    assert root.locator(".amp-sp-live .amp-sp-table tbody tr").count() == 9
    page.wait_for_function(
        "document.querySelector('.amp-sp-live .amp-sp-summary').textContent.startsWith('9 steps, 3 skipped.')"
    )
    _assert_clean(page)


# -- without JavaScript ----------------------------------------------------------------------


def test_without_javascript_the_static_versions_stand_in(browser: Any, site_url: str) -> None:
    context = browser.new_context(java_script_enabled=False)
    try:
        pg = context.new_page()
        pg.goto(f"{site_url}/{FORMATS_PAGE}")
        static = pg.locator(".amp-bx .amp-bx-static")
        assert static.is_visible()
        assert pg.locator(".amp-bx-live").count() == 0
        cells = static.locator("tbody tr").evaluate_all(
            "rows => rows.filter(r => r.querySelector('td'))"
            ".map(r => [...r.cells].map(c => c.textContent))"
        )
        values = [65519.0, 65520.0, 6.1e-5, 1e-8, -0.0, 0.1]  # the page's :examples:
        expected = explorer_rows(values, ["fp16", "bf16", "fp32"])
        assert cells == [[v for k, v in row.items() if k != "value"] for row in expected]
        pg.goto(f"{site_url}/{SCALER_PAGE}")
        fallback = pg.locator(".amp-sp .amp-sp-static")
        assert fallback.is_visible()
        assert fallback.locator('a[href="#gradscaler-trace"]').count() == 1
        assert pg.locator("#gradscaler-trace table.amp-table").is_visible()
        # not a single link: the playground's starting point, worked through
        settings = read_scaler_settings({"init_scale": "65536.0", "growth_factor": "2.0",
                                         "backoff_factor": "0.5", "growth_interval": "4"})  # fmt: skip
        rows = scaler_trace(settings, read_steps("xxx..........xx...........x............."))
        shown = fallback.locator("table tbody tr").evaluate_all(
            "rows => rows.map(r => [...r.cells].map(c => c.textContent))"
        )
        assert shown == [list(row.values()) for row in rows]
        assert fallback.locator(".amp-sp-summary").inner_text() == describe_trace(rows)
    finally:
        context.close()


# -- phone, themes, accessibility, screenshots --------------------------------------------------


def _exercise(pg: Any, rel: str) -> None:
    """Put the page's widget into a state with every part showing."""
    if rel == SCALER_PAGE:
        pg.locator("input.amp-sp-backoff_factor").fill("0.01")
    else:
        pg.locator("input.amp-bx-input").fill("-65520.000000001")


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_widgets_fit_a_phone(make_page: Any, site_url: str, scheme: str) -> None:
    pg = make_page(viewport=PHONE, color_scheme=scheme)
    for rel in PAGES:
        _open(pg, site_url, rel, ".amp-sp-ready" if rel == SCALER_PAGE else ".amp-bx-ready")
        _exercise(pg, rel)
        scroll, client = pg.evaluate(
            "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        )
        assert scroll <= client, rel
        widget = pg.locator(".amp-playground").first.bounding_box()
        assert widget is not None
        assert widget["x"] + widget["width"] <= PHONE["width"], rel
    _assert_clean(pg)


THIRD_PARTY_EXCLUDES = [  # markup the theme and MyST-NB write, not this book (see test_selfcheck_browser)
    ".search-button-field",
    'details.hide > summary[aria-label="Toggle hidden content"]',
]


def _serious_violations(pg: Any) -> list[str]:
    """axe-core's serious and critical findings in the page's playgrounds.

    The whole of every page is audited by test_site_browser; this audits the widgets
    again in the states that test does not reach (results, error messages).
    """
    return serious_violations(pg, include=[".amp-playground"], exclude=THIRD_PARTY_EXCLUDES)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_axe_finds_nothing_serious_on_the_playground_pages(
    make_page: Any, site_url: str, scheme: str
) -> None:
    pg = make_page(viewport=DESKTOP, color_scheme=scheme)
    problems = {}
    for rel in PAGES:
        _open(pg, site_url, rel, ".amp-sp-ready" if rel == SCALER_PAGE else ".amp-bx-ready")
        assert pg.evaluate("document.documentElement.dataset.theme") == scheme
        _exercise(pg, rel)
        found = _serious_violations(pg)
        # and with an error message showing
        if rel == SCALER_PAGE:
            pg.locator("input.amp-sp-growth_factor").fill("1")
            pg.locator("textarea.amp-sp-pattern").fill("x?")
        else:
            pg.locator("input.amp-bx-input").fill("0xZZ")
        found += _serious_violations(pg)
        if found:
            problems[rel] = found
    assert problems == {}
    _assert_clean(pg)


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("size", ["desktop", "phone"])
def test_screenshots_of_both_widgets(make_page: Any, site_url: str, scheme: str, size: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    pg = make_page(viewport=DESKTOP if size == "desktop" else PHONE, color_scheme=scheme)
    for rel, name in ((FORMATS_PAGE, "bit-explorer"), (SCALER_PAGE, "scaler-playground")):
        _open(pg, site_url, rel, ".amp-sp-ready" if rel == SCALER_PAGE else ".amp-bx-ready")
        # The theme's sticky header would cover the top of a widget scrolled into view.
        pg.add_style_tag(
            content=(
                ".bd-header, .bd-header-article { position: static !important; }"
                " .skip-link { display: none !important; }"
            )
        )
        _exercise(pg, rel)
        pg.wait_for_timeout(500)  # the summary line is written after a pause in typing
        pg.evaluate("document.activeElement && document.activeElement.blur()")
        path = SHOTS / f"{name}-{scheme}-{size}.png"
        widget = pg.locator(".amp-playground").first
        widget.scroll_into_view_if_needed()
        pg.wait_for_timeout(300)  # let the theme's scroll-linked layout settle
        widget.screenshot(path=str(path))
        assert path.stat().st_size > 0
    _assert_clean(pg)


def test_exactness_inputs_cover_what_they_claim() -> None:
    """The value list reaches each format's edges (a check on the list, not the widget)."""
    values = [read_number(t) for t in explorer_texts()]
    finite = [abs(v) for v in values if math.isfinite(v)]
    for spec in FORMATS.values():
        assert any(v == spec.max for v in finite), spec.name
        assert any(spec.max < v < 2 * spec.max for v in finite), spec.name  # past the top
        assert any(0 < v < spec.smallest_subnormal for v in finite), spec.name  # under the bottom
    nans = [struct.pack("<d", v) for v in values if math.isnan(v)]
    assert len(set(nans)) > 100  # NaNs with many payloads


# -- nothing clipped, nothing slow ------------------------------------------------------------

INPUT_BOXES_JS = """() => {
  const grid = document.querySelector('.amp-sp-settings').getBoundingClientRect();
  return Object.fromEntries(
    ['init_scale', 'growth_factor', 'backoff_factor', 'growth_interval'].map((name) => {
      const box = document.querySelector('input.amp-sp-' + name).getBoundingClientRect();
      return [name, [Math.round(box.x - grid.x), Math.round(box.y - grid.y)]];
    }));
}"""


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_an_error_message_moves_no_setting_sideways(
    make_page: Any, site_url: str, viewport: dict[str, int]
) -> None:
    pg = make_page(viewport=viewport)
    _open(pg, site_url, SCALER_PAGE, ".amp-sp-ready")
    before = pg.evaluate(INPUT_BOXES_JS)
    # the longest message a field gives, under the first field
    pg.locator("input.amp-sp-init_scale").fill("1e-50")
    error = pg.locator(
        "#" + pg.locator("input.amp-sp-init_scale").get_attribute("aria-describedby")
    )
    assert error.is_visible()
    after = pg.evaluate(INPUT_BOXES_JS)
    for name, (x, y) in before.items():
        assert after[name][0] == x, (name, before, after)  # no field moves sideways
        if y <= before["init_scale"][1]:
            assert after[name][1] == y, (name, before, after)  # nor one on its row up
    box = error.bounding_box()
    settings = pg.locator(".amp-sp-settings").bounding_box()
    assert box["x"] + box["width"] <= settings["x"] + settings["width"] + 1  # the message wraps
    scroll, client = pg.evaluate(
        "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert scroll <= client
    _assert_clean(pg)


TICKS_JS = """() => {
  const svg = document.querySelector('.amp-sp-plot svg');
  const labels = [...svg.querySelectorAll('text.amp-sp-tick')]
    .filter((t) => t.querySelector('tspan'))
    .map((t) => Number(t.querySelector('tspan').textContent));
  const used = [...document.querySelectorAll('.amp-sp-live .amp-sp-table tbody tr')]
    .map((tr) => Number(tr.dataset.scaleUsed)).filter((s) => s > 0).map(Math.log2);
  return {labels, top: Math.max(...used), bottom: Math.min(...used)};
}"""


@pytest.mark.parametrize(
    "settings",
    [
        {"init_scale": "3e38", "growth_factor": "10", "backoff_factor": "0.001"},
        {"init_scale": "1e-40", "growth_factor": "1.5", "backoff_factor": "0.999"},
        {"init_scale": "65536", "growth_factor": "7", "backoff_factor": "0.2"},
    ],
)
def test_the_plots_axis_is_labelled_above_the_highest_scale(
    page: Any, site_url: str, settings: dict[str, str]
) -> None:
    _open(page, site_url, SCALER_PAGE, ".amp-sp-ready")
    for name, text in settings.items():
        page.locator(f"input.amp-sp-{name}").fill(text)
    page.locator("input.amp-sp-growth_interval").fill("3")
    page.locator("textarea.amp-sp-pattern").fill("x..x......xx....x...." * 3)
    page.wait_for_function("document.querySelector('.amp-sp').dataset.drawn === 'all'")
    ticks = page.evaluate(TICKS_JS)
    assert ticks["labels"], ticks
    assert max(ticks["labels"]) >= ticks["top"], ticks  # a labelled line at or above the top
    assert min(ticks["labels"]) <= ticks["bottom"], ticks
    _assert_clean(page)


AXES_JS = """() => {
  const svg = document.querySelector('.amp-sp-plot svg');
  const width = svg.viewBox.baseVal.width;
  const ticks = [...svg.querySelectorAll('text.amp-sp-tick')];
  const powers = ticks.filter((t) => t.querySelector('tspan')).map((t) => t.querySelector('tspan').textContent);
  const steps = ticks.filter((t) => !t.querySelector('tspan') && /^\\d+$/.test(t.textContent)
    && Number(t.getAttribute('y')) > 220);  // under the axis, not the y axis's 0
  return {
    powers,
    steps: steps.map((t) => t.textContent),
    stepsInside: steps.every((t) => { const b = t.getBBox(); return b.x >= 0 && b.x + b.width <= width + 0.5; }),
    cells: [...document.querySelectorAll('.amp-sp-live .amp-sp-table tbody tr')].map((tr) =>
      [1, 2, 5].map((i) => tr.cells[i].textContent)),
    exact: [...document.querySelectorAll('.amp-sp-live .amp-sp-table tbody tr')].map((tr) =>
      [tr.dataset.scaleUsed, tr.dataset.invScale, tr.dataset.scaleAfter]),
  };
}"""


def _significant(text: str) -> int:
    """The significant digits of a number as the table writes it (2^k counts as one)."""
    if text.startswith("2^") or text in ("0", "inf"):
        return 1
    mantissa = text.split("e")[0].replace("-", "").replace(".", "").lstrip("0")
    return len(mantissa.rstrip("0")) or 1


@pytest.mark.parametrize("width", [PHONE["width"], DESKTOP["width"]])
def test_after_a_thousand_overflows_the_axes_and_the_table_stay_readable(
    make_page: Any, site_url: str, width: int
) -> None:
    """A thousand overflows walk the scale from 2^16 down past float32's last subnormal to 0.
    The y axis is labelled at a few round powers (2^0, 2^-50, ...), the x axis at step 1 and
    round steps, every label inside the plot; the table writes 2^k, not 16-digit decimals,
    and any other number to at most five significant digits; each row keeps the exact value."""
    pg = make_page(viewport={"width": width, "height": 900})
    _open(pg, site_url, SCALER_PAGE, ".amp-sp-ready")
    pg.locator("textarea.amp-sp-pattern").fill("x" * 1000)
    pg.wait_for_function("document.querySelector('.amp-sp').dataset.drawn === 'all'")
    axes = pg.evaluate(AXES_JS)
    powers = [int(p.replace("\u2212", "-")) for p in axes["powers"]]
    assert 2 <= len(powers) <= 6, powers
    assert all(p % 10 == 0 for p in powers), powers  # round powers: 2^-50, not 2^-63 or 2^-93
    assert min(powers) <= -149, powers  # from float32's last subnormal...
    assert max(powers) >= 16, powers  # ...to the scale it started at
    steps = [int(s) for s in axes["steps"]]
    assert steps[0] == 1, steps
    assert steps[-1] <= 1000, steps
    assert all(s % 10 == 0 for s in steps[1:]), steps  # 1, then round steps
    assert axes["stepsInside"]  # no label runs off the plot's edge
    cells = [cell for row in axes["cells"] for cell in row]
    assert "2^\u2212100" in cells  # a power of two as 2^k (the caret is for reading aloud)
    assert max(len(cell) for cell in cells) <= 8, max(cells, key=len)
    for shown, exact in zip(axes["cells"][:150], axes["exact"][:150], strict=True):
        for text, value in zip(shown, exact, strict=True):  # the same number, shorter
            if text.startswith("2^"):
                assert float(value) == 2.0 ** int(text[2:].replace("\u2212", "-"))
            else:
                assert float(value) == float(text)
    # not a power of two: five significant digits at most, the row's data attribute exact
    pg.locator("input.amp-sp-backoff_factor").fill("0.01")
    pg.wait_for_function("document.querySelector('.amp-sp').dataset.drawn === 'all'")
    axes = pg.evaluate(AXES_JS)
    cells = [cell for row in axes["cells"] for cell in row]
    assert max(_significant(cell) for cell in cells) <= 5, cells[:12]
    assert any(len(value) > 12 for row in axes["exact"] for value in row)  # the exact ones
    _assert_clean(pg)


@pytest.mark.parametrize("text", ["1e400", "-1e400", "inf"])
def test_what_reads_as_infinity_overflows_and_only_finite_values_are_exact(
    page: Any, site_url: str, text: str
) -> None:
    """1e400 is past float64's range: Python reads it as inf, and FP16 stores it as inf by
    overflowing, not exactly; "exact" is for a finite value stored as it is."""
    _open(page, site_url, FORMATS_PAGE, ".amp-bx-ready")
    root = page.locator(".amp-bx")
    root.get_by_label("Your number").fill(text)
    sign = "-" if text.startswith("-") else ""
    headline = root.locator(".amp-bx-headline").inner_text()
    assert headline == f"FP16 stores {sign}inf (overflow to inf)"
    events = root.locator("li.amp-bx-fmt .amp-bx-event").all_inner_texts()
    assert "exact" not in events, events
    if text != "inf":
        assert "past float64's largest value" in root.locator(".amp-bx-source").inner_text()
    root.get_by_label("Your number").fill("65504")  # a finite value stored as it is
    assert root.locator(".amp-bx-headline").inner_text() == "FP16 stores 65504.0 (exact)"
    assert "past float64" not in root.locator(".amp-bx-source").inner_text()
    _assert_clean(page)


CUE_JS = """(selector) => {
  const box = document.querySelector(selector);
  const style = getComputedStyle(box);
  return {overflowY: box.scrollHeight > box.clientHeight, overflowX: box.scrollWidth > box.clientWidth,
          image: style.backgroundImage, attachment: style.backgroundAttachment};
}"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_trace_table_shows_it_scrolls_and_fits_a_desktop(
    make_page: Any, site_url: str, scheme: str
) -> None:
    pg = make_page(viewport=DESKTOP, color_scheme=scheme)
    _open(pg, site_url, SCALER_PAGE, ".amp-sp-ready")
    cue = pg.evaluate(CUE_JS, ".amp-sp-live .amp-sp-table-wrap")
    assert cue["overflowY"]  # forty steps: it scrolls down...
    assert not cue["overflowX"]  # ...and every column fits the desktop column
    assert cue["image"].count("radial-gradient") == 4, cue  # a shadow for each edge
    assert cue["attachment"].startswith("local, local, local, local"), cue
    # the header row stays in view while the rows scroll under it
    pg.locator(".amp-sp-live .amp-sp-table-wrap").evaluate("el => { el.scrollTop = 200; }")
    head = pg.locator(".amp-sp-live .amp-sp-table thead th").first.bounding_box()
    wrap = pg.locator(".amp-sp-live .amp-sp-table-wrap").bounding_box()
    assert abs(head["y"] - wrap["y"]) < 3
    _assert_clean(pg)


REDRAW_JS = """() => {
  window.__redraw = null;
  const box = document.querySelector('input.amp-sp-growth_interval');
  const plot = document.querySelector('.amp-sp-plot svg');
  const body = document.querySelector('.amp-sp-live .amp-sp-table tbody');
  let start = 0;
  box.addEventListener('keydown', () => { start = performance.now(); }, {once: true});
  const watch = new MutationObserver(() => {
    watch.disconnect();
    window.__rowsWithPlot = body.rows.length;  // what came in the same task as the plot
    // the next frame painted after the plot changed
    requestAnimationFrame(() => requestAnimationFrame(() => {
      window.__redraw = performance.now() - start;
    }));
  });
  watch.observe(plot, {childList: true});
}"""


def test_the_playground_redraws_within_a_frame_or_two_of_a_key(
    page: Any, site_url: str, report: Any
) -> None:
    """Input to the redrawn plot and table, as the reader waits for it, at the longest schedule
    the playground takes (reported, not limited: the machine's speed is not the page's)."""
    from amp_lesson.playground import MAX_STEPS

    _open(page, site_url, SCALER_PAGE, ".amp-sp-ready")
    timings = {}
    for steps in (40, 200, MAX_STEPS):
        page.locator("textarea.amp-sp-pattern").fill(steps_pattern(every_tenth(steps)))
        box = page.locator("input.amp-sp-growth_interval")
        box.fill("4")
        times = []
        for i in range(6):
            box.focus()
            page.keyboard.press("End")
            page.evaluate(REDRAW_JS)
            page.keyboard.press("0" if i % 2 == 0 else "Backspace")  # 4 -> 40 -> 4 -> ...
            page.wait_for_function("window.__redraw !== null")
            times.append(page.evaluate("window.__redraw"))
            # the table's first rows came with the plot, a long table's rest after it
            assert page.evaluate("window.__rowsWithPlot") == min(steps, 60)
        page.wait_for_function("document.querySelector('.amp-sp').dataset.drawn === 'all'")
        assert page.locator(".amp-sp-live .amp-sp-table tbody tr").count() == steps
        timings[steps] = sorted(times)[len(times) // 2]
    report(
        "input to redraw, median of 6 key presses",
        ", ".join(f"{n} steps {ms:.0f} ms" for n, ms in timings.items()),
    )
    _assert_clean(page)


def every_tenth(n: int) -> list[bool]:
    return [step % 10 == 0 for step in range(1, n + 1)]


# -- the bit explorer for the format a reader came for --------------------------------------


def test_the_explorer_shows_fp16_first_and_the_formats_the_reader_picks(
    page: Any, site_url: str
) -> None:
    _open(page, site_url, FORMATS_PAGE, ".amp-bx-ready")
    root = page.locator(".amp-bx")
    visible = "items => items.filter(li => !li.hidden).map(li => li.dataset.format)"
    assert root.locator("li.amp-bx-fmt").evaluate_all(visible) == ["fp16", "bf16", "fp32"]
    root.get_by_role("checkbox", name="TF32", exact=True).check()
    root.get_by_role("checkbox", name="BF16", exact=True).uncheck()
    assert root.locator("li.amp-bx-fmt").evaluate_all(visible) == ["fp16", "fp32", "tf32"]
    lines = root.locator(".amp-bx-line-row:not(.amp-bx-line-axis)").evaluate_all(
        "rows => rows.filter(r => !r.hidden).map(r => r.textContent)"
    )
    assert lines == ["FP16", "FP32", "TF32"]  # the number line follows
    # a suggested value is a button that types it; FP16's answer is in the line under the input
    root.get_by_role("button", name="Try 65520").click()
    assert root.get_by_label("Your number").input_value() == "65520"
    assert root.locator(".amp-bx-headline").inner_text() == "FP16 stores inf (overflow to inf)"
    root.get_by_role("checkbox", name="FP16", exact=True).uncheck()
    assert root.locator(".amp-bx-headline").inner_text().startswith("FP32 stores 65520.0")
    _assert_clean(page)


def test_on_a_phone_the_input_and_fp16s_answer_stay_in_view(make_page: Any, site_url: str) -> None:
    pg = make_page(viewport=PHONE, is_mobile=True, has_touch=True)
    _open(pg, site_url, FORMATS_PAGE, ".amp-bx-ready")
    root = pg.locator(".amp-bx")
    root.get_by_role("button", name="Try 65520").tap()
    # scroll to the last format shown, two screens below the input on a phone
    root.locator('li[data-format="fp32"] .amp-bx-facts').scroll_into_view_if_needed()
    box = root.get_by_label("Your number").bounding_box()
    answer = root.locator(".amp-bx-headline").bounding_box()
    assert box["y"] >= 0
    assert box["y"] + box["height"] <= PHONE["height"]
    assert answer["y"] >= 0
    assert answer["y"] + answer["height"] <= PHONE["height"]
    assert root.locator(".amp-bx-headline").inner_text() == "FP16 stores inf (overflow to inf)"
    # and it covers nothing it should not: the theme's header stays above it
    header = pg.locator(".bd-header-article").bounding_box()
    assert box["y"] >= header["y"] + header["height"] - 1
    _assert_clean(pg)


CLIPPED_CELLS = """() => [...document.querySelectorAll('.amp-bx-table th, .amp-bx-table td')]
  .filter((cell) => cell.scrollWidth > cell.clientWidth)
  .map((cell) => [cell.textContent, cell.scrollWidth, cell.clientWidth])"""
"""The cells of the explorer's static table whose text is wider than the cell (and so runs
into the next one)."""


def test_without_javascript_the_explorers_table_fits_a_desktop_and_scrolls_on_a_phone(
    browser: Any, site_url: str
) -> None:
    from helpers import recording_page

    for viewport, fits in ((DESKTOP, True), (PHONE, False)):
        pg = recording_page(browser, site_url, viewport=viewport, java_script_enabled=False)
        try:
            for rel in (BEYOND_PAGE, MX_PAGE):  # six formats; FP4 E2M1 first: no cell clipped
                pg.goto(f"{site_url}/{rel}", wait_until="load")
                clipped = pg.evaluate(CLIPPED_CELLS)
                assert clipped == [], (rel, viewport, clipped)
            pg.goto(f"{site_url}/{FORMATS_PAGE}", wait_until="load")
            assert pg.evaluate(CLIPPED_CELLS) == []
            wrap = pg.locator(".amp-bx-static .amp-bx-table-wrap")
            sizes = wrap.evaluate(
                "el => [el.scrollWidth, el.clientWidth, el.querySelector('caption').scrollWidth,"
                " el.querySelector('caption').clientWidth, getComputedStyle(el).backgroundImage]"
            )
            assert sizes[2] <= sizes[3]  # the caption wraps, never cut
            if fits:
                assert sizes[0] <= sizes[1], sizes  # "relative error" and all, in the column
            else:
                assert sizes[0] > sizes[1]
                assert sizes[4].count("radial-gradient") == 4  # ...with a cue that it scrolls
            scroll, client = pg.evaluate(
                "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
            )
            assert scroll <= client
        finally:
            pg.context.close()


@pytest.mark.parametrize(
    "case",
    [
        {"init_scale": "3e38", "growth_factor": "2", "backoff_factor": "0.5",
         "growth_interval": "1", "steps": "...."},
        {"init_scale": "1", "growth_factor": "2", "backoff_factor": "0.001",
         "growth_interval": "5", "steps": "x" * 20 + "..."},
        {"init_scale": "65536", "growth_factor": "2", "backoff_factor": "0.5",
         "growth_interval": "4", "steps": "."},
    ],
)  # fmt: skip
def test_the_live_summary_says_what_the_worked_example_says(
    page: Any, site_url: str, case: dict[str, str]
) -> None:
    """The widget's summary is amp_lesson.playground.describe_trace's, corners included
    (capped growth, an infinite inverse, a zero scale, a single step)."""
    _open(page, site_url, SCALER_PAGE, ".amp-sp-ready")
    for name in ("init_scale", "growth_factor", "backoff_factor", "growth_interval"):
        page.locator(f"input.amp-sp-{name}").fill(case[name])
    page.locator("textarea.amp-sp-pattern").fill(case["steps"])
    settings = read_scaler_settings(case)
    expected = describe_trace(scaler_trace(settings, read_steps(case["steps"])))
    assert page.locator(".amp-sp-live .amp-sp-summary").inner_text() == expected
    shown = page.locator(".amp-sp-live .amp-sp-table tbody tr").evaluate_all(
        "rows => rows.map(r => [...r.cells].map(c => c.textContent))"
    )
    exact = page.locator(".amp-sp-live .amp-sp-table tbody tr").evaluate_all(
        "rows => rows.map(r => [r.dataset.scaleUsed, r.dataset.invScale, r.dataset.scaleAfter])"
    )
    expected_rows = [list(r.values()) for r in scaler_trace(settings, read_steps(case["steps"]))]
    # The cells print numbers compactly (2^k, five digits); the rows keep the exact values.
    numeric = (1, 2, 5)
    assert exact == [[row[i] for i in numeric] for row in expected_rows]
    words = [[c for i, c in enumerate(row) if i not in numeric] for row in shown]
    assert words == [[c for i, c in enumerate(row) if i not in numeric] for row in expected_rows]
    _assert_clean(page)
