"""The playgrounds' Python side (amp_lesson.playground) and their directives' static HTML.

The bit explorer's arithmetic runs in the browser; what it must agree with is
fixed here: the float64 a typed text stands for, what torch stores for a NaN
in each format, and the static table a reader without JavaScript sees. The
directives are built in a small book, in this process, with MyST-NB and the
playgrounds' extension alone; bad options
fail the build with the same messages the widgets show.
"""

from __future__ import annotations

import inspect
import json
import math
import random
import struct
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from bs4 import BeautifulSoup
from helpers import BadPagesBuild, build_bad_pages, build_in_process

import amp_book
from amp_book import playground_text
from amp_book.playground_text import (
    MAX_NUMBER_LENGTH,
    PATTERN_PREFIXES,
    format_parameters,
    read_number,
    read_scaler_settings,
    steps_pattern,
)
from amp_lesson import playground
from amp_lesson.formats import FORMATS, store
from amp_lesson.playground import (
    EVENT_TEXT,
    EXAMPLE_VALUES,
    EXPLORER_FORMATS,
    MAX_STEPS,
    NOT_STORED,
    class_text,
    event_text,
    every,
    explorer_rows,
    read_steps,
)
from amp_lesson.scaler import ScalerSimulator

STATIC = Path(inspect.getfile(amp_book)).parent / "static"


def _error_message(func: Any, *args: Any) -> str:
    """The message of the ValueError ``func(*args)`` raises (failing if it raises none)."""
    try:
        func(*args)
    except ValueError as error:
        return str(error)
    raise AssertionError(f"{func.__name__}{args!r} raised no ValueError")


# -- what a typed text stands for ------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["0.1", "-2.5e-8", "1e400", "-1e-400", "  65520 ", "1.", ".5", "+7", "-0", "0003.50E+02"],
)
def test_a_decimal_is_read_as_python_reads_it(text: str) -> None:
    value = read_number(text)
    assert struct.pack("<d", value) == struct.pack("<d", float(text))


@pytest.mark.parametrize("text", ["inf", "-Infinity", "+INF", "nan", "-nan", "NaN"])
def test_infinities_and_nans_are_read_with_their_sign(text: str) -> None:
    value = read_number(text)
    expected = float(text)
    assert math.isnan(value) == math.isnan(expected)
    assert math.copysign(1.0, value) == math.copysign(1.0, expected)
    if not math.isnan(expected):
        assert value == expected


def _item_of(pattern: int, dtype: torch.dtype, int_dtype: torch.dtype) -> float:
    bits = torch.finfo(dtype).bits
    signed = pattern - (1 << bits) if bits > 8 and pattern >= 1 << (bits - 1) else pattern
    return torch.tensor(signed, dtype=int_dtype).view(dtype).item()


def _bits64(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


@pytest.mark.parametrize(
    ("prefix", "dtype", "int_dtype"),
    [
        ("", torch.float32, torch.int32),
        ("fp16:", torch.float16, torch.int16),
        ("bf16:", torch.bfloat16, torch.int16),
        ("e4m3:", torch.float8_e4m3fn, torch.uint8),
        ("e5m2:", torch.float8_e5m2, torch.uint8),
    ],
)
def test_a_bit_pattern_stands_for_what_torch_reads_from_it(
    prefix: str, dtype: torch.dtype, int_dtype: torch.dtype
) -> None:
    bits = torch.finfo(dtype).bits
    rng = random.Random(bits)
    patterns = {0, 1, (1 << bits) - 1, 1 << (bits - 1)} | {
        rng.getrandbits(bits) for _ in range(300)
    }
    for pattern in patterns:
        value = read_number(f"{prefix}0x{pattern:x}")
        # bit for bit, NaN payloads included
        assert _bits64(value) == _bits64(_item_of(pattern, dtype, int_dtype)), hex(pattern)


def test_an_e2m1_pattern_stands_for_what_ml_dtypes_reads_from_it() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")  # in the test extra: a skip here is news
    every = np.arange(16, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float64)
    for pattern, expected in enumerate(every):
        for prefix in ("e2m1", "fp4_e2m1", "E2M1 "):
            assert _bits64(read_number(f"{prefix}:0x{pattern:x}")) == _bits64(float(expected))
        assert read_number(f"e2m1:0x{pattern:x}") == store(float(expected), "fp4_e2m1").stored
    assert "4 bits: the largest pattern is 0xf" in _error_message(read_number, "e2m1:0x10")


def test_a_tf32_pattern_is_the_fp32_one_with_its_low_bits_zero() -> None:
    assert read_number("tf32:0x1fc00") == 1.0  # 0 01111111 0000000000
    assert read_number("tf32:0x1fc01") == 1 + 2**-10
    assert math.isnan(read_number("TF32 : 0x7ffff"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "Type a number: type a decimal such as 0.1"),
        ("   ", "Type a number:"),
        ("abc", "“abc” is not a number: type a decimal"),
        ("1_000", "“1_000” is not a number"),
        ("0x", "“0x” is not a bit pattern: after 0x come hex digits, 0-9 and a-f."),
        ("0xZZ", "“0xZZ” is not a bit pattern"),
        (
            "fp12:0x1",
            "“fp12” is not a format: a bit pattern may start with one of fp32, tf32, bf16",
        ),
        (
            "0x1ffffffff",
            "0x1ffffffff does not fit in FP32's 32 bits: the largest pattern is 0xffffffff.",
        ),
        (
            "e4m3:0x100",
            "e4m3:0x100 does not fit in FP8 E4M3's 8 bits: the largest pattern is 0xff.",
        ),
        ("tf32:0x80000", "does not fit in TF32's 19 bits: the largest pattern is 0x7ffff."),
    ],
)
def test_text_that_is_not_a_number_gets_a_message_saying_what_is(text: str, message: str) -> None:
    assert message in _error_message(read_number, text)


def test_a_text_longer_than_any_number_is_refused_with_the_limit() -> None:
    # A run of digits and one more character used to take seconds (regex backtracking).
    message = _error_message(read_number, "1" * 12000 + "x")
    assert message.startswith(
        f"text must be at most {MAX_NUMBER_LENGTH} characters long, got 12001"
    )
    assert "type a decimal such as 0.1" in message
    assert read_number("  " + "1" * MAX_NUMBER_LENGTH + "  ") == math.inf  # spaces do not count


def test_a_long_text_within_the_limit_is_read_or_refused_as_a_short_one_is() -> None:
    longest = format(Decimal(2.0**-1074), "f")  # the longest exact decimal of a float64
    assert len(longest) == 1076
    assert read_number("-" + longest) == -(2.0**-1074)
    almost = "1" * (MAX_NUMBER_LENGTH - 1) + "x"
    assert "” is not a number: type a decimal such as 0.1" in _error_message(read_number, almost)
    field = "1" * 12000 + "x"  # the scaler playground's fields go through the same pattern
    message = _error_message(read_scaler_settings, {**GOOD, "init_scale": field})
    assert message.startswith("init_scale must be a number such as 2 or 0.5")


def test_the_scripts_read_decimals_with_the_same_pattern_and_length_limit() -> None:
    static = STATIC
    floats, scaler = (
        (static / name).read_text(encoding="utf-8")
        for name in ("amp-floats.js", "amp-scaler-playground.js")
    )
    assert f"var MAX_NUMBER_LENGTH = {MAX_NUMBER_LENGTH};" in floats
    for text in (floats, scaler):  # the one without backtracking
        assert f"var DECIMAL = /^{playground_text.DECIMAL.pattern}$/;" in text


def test_read_number_wants_a_string() -> None:
    with pytest.raises(TypeError, match="text must be a str"):
        read_number(0.1)  # type: ignore[arg-type]


def test_the_explorer_casts_from_float64_through_float32_as_torch_does() -> None:
    # 1 + 2**-11 + 2**-40: one rounding to FP16 gives 1 + 2**-10; torch rounds to FP32
    # first (1 + 2**-11, a tie) and then to FP16 (to even: 1.0).
    value = read_number(repr(1 + 2**-11 + 2**-40))
    assert store(value, "fp16").stored == 1.0
    assert torch.tensor(value, dtype=torch.float64).to(torch.float16).item() == 1.0


# -- the formats' parameters ----------------------------------------------------------------


def test_format_parameters_are_the_formats_own() -> None:
    entries = format_parameters(list(FORMATS))
    assert [e["name"] for e in entries] == list(FORMATS)
    for entry in entries:
        spec = FORMATS[entry["name"]]
        for field in ("label", "bits", "exponent_bits", "mantissa_bits", "bias", "max",
                      "smallest_normal", "smallest_subnormal", "eps", "has_inf", "saturates",
                      "has_nan"):  # fmt: skip
            assert entry[field] == getattr(spec, field), (entry["name"], field)
        assert PATTERN_PREFIXES[entry["prefix"]] == spec.name
        assert (entry["nan"] is None) == (not spec.has_nan)
        assert entry["fp32_top_bits"] == (spec.name == "tf32")
    json.dumps(entries, allow_nan=False)  # JSON as the page needs it: no inf or nan


def _nan_from_rule(entry: dict, sign: int, payload32: int) -> int:
    """The NaN pattern the explorer's script computes (amp-floats.js, nanPattern)."""
    rule, bits, m = entry["nan"], entry["bits"], entry["mantissa_bits"]
    sign_place = 1 << (bits - 1)
    if rule["keeps_payload"]:
        ones = (1 << entry["exponent_bits"]) - 1
        body = (ones << m) | (payload32 >> (23 - m))
    else:
        body = rule["pattern"] & (sign_place - 1)
    sign_bit = sign if rule["keeps_sign"] else rule["pattern"] >> (bits - 1)
    return sign_bit * sign_place + body


def test_the_nan_rule_the_script_follows_is_what_torch_stores() -> None:
    rng = random.Random(0)
    entries = format_parameters(list(FORMATS))
    for _ in range(200):
        sign = rng.getrandbits(1)
        mantissa = (1 << 51) | rng.getrandbits(51)  # a quiet NaN with a random payload
        value = struct.unpack("<d", struct.pack("<Q", sign << 63 | 0x7FF << 52 | mantissa))[0]
        for entry in entries:
            if entry["nan"] is None:  # FP4 E2M1: no NaN to store
                with pytest.raises(ValueError, match="has none"):
                    store(value, entry["name"])
                continue
            stored = store(value, entry["name"])
            assert int(stored.bits, 2) == _nan_from_rule(entry, sign, mantissa >> 29), entry["name"]


def test_format_parameters_rejects_bad_names() -> None:
    with pytest.raises(ValueError, match="names must be one of"):
        format_parameters(["fp12"])
    with pytest.raises(TypeError, match="names must be a sequence"):
        format_parameters("fp16")
    with pytest.raises(ValueError, match="at least one"):
        format_parameters([])


# -- the static table -----------------------------------------------------------------------


def test_explorer_rows_rejects_values_that_are_not_numbers() -> None:
    with pytest.raises(TypeError, match=r"values must hold real numbers, got '0\.1'"):
        explorer_rows(["0.1"], ["fp16"])
    with pytest.raises(TypeError, match="values must be a sequence of numbers"):
        explorer_rows(0.1, ["fp16"])
    with pytest.raises(ValueError, match="names must be one of"):
        explorer_rows([0.1], ["fp12"])


def test_explorer_rows_are_stores_results_as_text() -> None:
    rows = explorer_rows(EXAMPLE_VALUES, EXPLORER_FORMATS)
    assert len(rows) == len(EXAMPLE_VALUES) * len(EXPLORER_FORMATS)
    for row, (value, name) in zip(
        rows, ((v, n) for v in EXAMPLE_VALUES for n in EXPLORER_FORMATS), strict=True
    ):
        s = store(value, name)
        assert row["value"] == repr(value)
        assert row["format"] == FORMATS[name].label
        assert row["stored"] == repr(s.stored)
        assert row["bits"].replace(" ", "") == s.bits
        assert row["event"] == event_text(s)
        assert row["class"] == class_text(s)
        assert row["relative error"] == format(s.rel_error, ".3g")
    by_key = {(r["value"], r["format"]): r for r in rows}
    assert by_key[("65520.0", "FP16")]["event"] == "overflow to inf"
    assert by_key[("inf", "FP8 E4M3")]["stored"] == "448.0"
    assert by_key[("inf", "FP8 E4M3")]["class"] == "saturated"
    assert by_key[("-0.0", "BF16")]["bits"] == "1 00000000 0000000"


def test_a_nan_in_a_format_without_one_is_a_row_that_says_so() -> None:
    rows = explorer_rows([math.nan, 7.0], ["fp16", "fp4_e2m1"])
    nan_fp16, nan_e2m1, seven_fp16, seven_e2m1 = rows
    assert (nan_fp16["stored"], nan_fp16["event"]) == ("nan", "exact")
    assert nan_e2m1 == {
        "value": "nan",
        "format": "FP4 E2M1",
        "stored": NOT_STORED,
        "bits": NOT_STORED,
        "class": NOT_STORED,
        "event": EVENT_TEXT["no_nan"],
        "relative error": NOT_STORED,
    }
    assert (seven_e2m1["stored"], seven_e2m1["bits"], seven_e2m1["event"]) == (
        "6.0",
        "0 11 1",
        "saturated to max",
    )
    assert seven_fp16["event"] == "exact"


# -- the GradScaler playground's input ------------------------------------------------------


def test_steps_patterns_round_trip_and_fill() -> None:
    schedule = [True, False, False, True]
    assert read_steps(steps_pattern(schedule)) == schedule
    assert read_steps(" x . \n X") == [True, False, True]
    assert every(4, 8) == [False, False, False, True] * 2
    assert len(read_steps("." * MAX_STEPS)) == MAX_STEPS


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("", "steps: type at least one step, . for a clean step or x for an overflow."),
        ("  ", "steps: type at least one step, . for a clean step or x for an overflow."),
        ("..o", "steps: character 3 is “o”; use . for a clean step and x for an overflow."),
        ("." * (MAX_STEPS + 1), f"steps: at most {MAX_STEPS} steps, got {MAX_STEPS + 1}."),
    ],
)
def test_a_bad_pattern_says_what_is_wrong(pattern: str, message: str) -> None:
    with pytest.raises(ValueError, match="steps") as caught:
        read_steps(pattern)
    assert str(caught.value) == message


GOOD = {
    "init_scale": "65536",
    "growth_factor": "2",
    "backoff_factor": "0.5",
    "growth_interval": "4",
}


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("init_scale", "0"),
        ("init_scale", "-1"),
        ("init_scale", "1e-50"),
        ("init_scale", "1e39"),
        ("init_scale", "3.4028235e38"),  # rounds down to float32's largest, but torch refuses it
        ("init_scale", "1e999"),
        ("init_scale", "abc"),
        ("growth_factor", "1"),
        ("growth_factor", "0.5"),
        ("backoff_factor", "1"),
        ("backoff_factor", "0"),
        ("backoff_factor", "1e999"),
        ("growth_interval", "0"),
        ("growth_interval", "2.5"),
        ("growth_interval", "99999999999999999999"),
    ],
)
def test_bad_settings_get_scaler_simulators_messages(name: str, text: str) -> None:
    with pytest.raises(ValueError, match=name) as caught:
        read_scaler_settings({**GOOD, name: text})
    message = str(caught.value)
    assert message.startswith(name)
    try:  # where the text is a number, the message is ScalerSimulator's own
        value = int(text) if name == "growth_interval" else float(text)
    except ValueError:
        return
    settings = {k: (int(v) if k == "growth_interval" else float(v)) for k, v in GOOD.items()}
    if name == "growth_interval" and value > 2**53:
        return  # the page's own limit, beyond which JavaScript cannot count exactly
    assert _error_message(lambda: ScalerSimulator(**{**settings, name: value})) == message


def test_good_settings_are_read_as_python_numbers() -> None:
    assert read_scaler_settings({**GOOD, "init_scale": "1e-45"})["init_scale"] == 1e-45
    with pytest.raises(ValueError, match="missing growth_interval"):
        read_scaler_settings({k: v for k, v in GOOD.items() if k != "growth_interval"})


# -- the directives, in a small book -------------------------------------------------------

PAGE = """\
# Playgrounds

:::{bit-explorer}
:value: 65520
:examples: 0.1, 65520, inf
:formats: fp32 fp16 fp8_e4m3
:show: fp16 fp32

Without JavaScript, this table.
:::

:::{scaler-playground}
:growth-interval: 3
:steps: xx.. ..x

Without JavaScript, see {ref}`the trace <trace>`.
:::

(trace)=
## The trace

Text.
"""


EXTENSIONS = ["myst_nb", "amp_book.playgrounds"]


def _conf(root: Path) -> dict[str, Any]:
    """The playgrounds store what they compute beside the execution cache, as in the book."""
    return {"nb_execution_cache_path": str(root / ".jupyter_cache")}


def _book(root: Path, page: str) -> Path:
    src = root / "docs"
    src.mkdir(parents=True)
    (src / "conf.py").write_text("")
    (src / "index.md").write_text("# Book\n\n```{toctree}\npage\nplain\n```\n", encoding="utf-8")
    (src / "page.md").write_text(page, encoding="utf-8")
    (src / "plain.md").write_text("# Plain\n\nNo playground here.\n", encoding="utf-8")
    return src


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("playgrounds")
    return build_in_process(_book(root, PAGE), root / "out", EXTENSIONS, **_conf(root)).outdir


@pytest.fixture(scope="module")
def page_html(built: Path) -> BeautifulSoup:
    return BeautifulSoup((built / "page.html").read_text(encoding="utf-8"), "html.parser")


def test_the_explorer_carries_its_formats_and_a_static_table(page_html: BeautifulSoup) -> None:
    root = page_html.select_one("div.amp-playground.amp-bx")
    assert root is not None
    assert root.parent.name != "div" or "amp-bx" not in root.parent.get("class", [])
    data = json.loads(root.select_one("script.amp-bx-data").string)
    assert data["formats"] == format_parameters(list(FORMATS))
    assert data["show"] == ["fp32", "fp16", "fp8_e4m3"]
    assert data["shown"] == ["fp16", "fp32"]  # shown at first; the rest a click away
    assert data["examples"] == ["0.1", "65520", "inf"]  # offered as buttons, as typed
    assert data["initial"] == "65520"
    static = root.select_one(".amp-bx-static")
    assert "Without JavaScript, this table." in static.get_text()
    # a group of rows per value, under the value, for the formats shown at first
    groups = static.select("tbody")
    expected = explorer_rows([0.1, 65520.0, math.inf], ["fp32", "fp16"])
    assert [g.select_one('th[scope="rowgroup"]').get_text() for g in groups] == [
        "0.1",
        "65520.0",
        "inf",
    ]
    cells = [[td.get_text() for td in tr.find_all("td")] for tr in static.select("tbody tr")]
    cells = [row for row in cells if row]  # the heading rows hold a th
    assert cells == [[v for k, v in row.items() if k != "value"] for row in expected]
    wrap = static.select_one(".amp-bx-table-wrap")
    assert wrap["tabindex"] == "0"
    assert wrap["role"] == "region"
    assert wrap["aria-label"]


def test_the_scaler_playground_carries_its_settings_and_fallback(
    page_html: BeautifulSoup,
) -> None:
    root = page_html.select_one("div.amp-playground.amp-sp")
    assert root is not None
    data = json.loads(root.select_one("script.amp-sp-data").string)
    params = inspect.signature(torch.amp.GradScaler).parameters
    assert data["init_scale"] == repr(params["init_scale"].default)  # GradScaler's defaults
    assert data["growth_factor"] == repr(params["growth_factor"].default)
    assert data["growth_interval"] == "3"
    assert data["steps"] == "xx.. ..x"
    assert data["max_steps"] == MAX_STEPS
    assert data["change_text"] == dict(playground.CHANGE_TEXT)
    static = root.select_one(".amp-sp-static")
    link = static.select_one("a")
    assert link is not None
    assert link["href"].endswith("#trace")
    # without JavaScript: the starting point worked through, computed when the page was built
    settings = read_scaler_settings({k: data[k] for k in SETTINGS})
    rows = playground.scaler_trace(settings, read_steps("xx.. ..x"))
    table = static.select_one("table.amp-sp-table")
    assert [th.get_text() for th in table.select("thead th")] == list(playground.TRACE_COLUMNS)
    cells = [[td.get_text() for td in tr.find_all("td")] for tr in table.select("tbody tr")]
    assert cells == [list(row.values()) for row in rows]
    assert static.select_one(".amp-sp-summary").get_text() == playground.describe_trace(rows)
    assert "growth_interval=3" in static.select_one(".amp-sp-call").get_text()


def test_assets_are_local_deferred_and_only_where_needed(
    built: Path, page_html: BeautifulSoup
) -> None:
    scripts = [
        s["src"]
        for s in page_html.find_all("script")
        if s.get("src", "").startswith("_static/amp-")
    ]
    assert [s.split("?")[0] for s in scripts] == [
        "_static/amp-floats.js",
        "_static/amp-bit-explorer.js",
        "_static/amp-scaler-playground.js",
    ]
    for tag in page_html.find_all("script", src=True):
        if tag["src"].startswith("_static/amp-"):
            assert tag.has_attr("defer")
    styles = [link["href"] for link in page_html.find_all("link", rel="stylesheet")]
    assert any(href.startswith("_static/amp-playgrounds.css") for href in styles)
    plain = (built / "plain.html").read_text(encoding="utf-8")
    assert "amp-floats.js" not in plain
    assert "amp-playgrounds.css" not in plain
    assert (built / "_static" / "amp-floats.js").is_file()


BAD_OPTIONS = {
    "unreadable-value": (":::{bit-explorer}\n:value: 0xZZ\n:::\n", "“0xZZ” is not a bit pattern"),
    "unknown-format": (":::{bit-explorer}\n:formats: fp16 fp12\n:::\n", "'fp12' is not a format"),
    "shown-not-offered": (
        ":::{bit-explorer}\n:formats: fp16 bf16\n:show: fp32\n:::\n",
        "show: fp32 not among the formats offered (fp16, bf16)",
    ),
    "format-twice": (
        ":::{bit-explorer}\n:formats: fp16 fp16\n:::\n",
        "formats: name each format once",
    ),
    "bad-example": (":::{bit-explorer}\n:examples: 1, two\n:::\n", "“two” is not a number"),
    "bad-steps": (
        ":::{scaler-playground}\n:steps: x.y\n\nFallback.\n:::\n",
        "steps: character 3 is “y”",
    ),
    "bad-backoff": (
        ":::{scaler-playground}\n:backoff-factor: 2\n\nFallback.\n:::\n",
        "backoff_factor must be in the open interval (0, 1), got 2.0",
    ),
    "no-fallback": (":::{scaler-playground}\n:::\n", "scaler-playground needs a body"),
}


@pytest.fixture(scope="module")
def bad_options_build(tmp_path_factory: pytest.TempPathFactory) -> BadPagesBuild:
    """One build of a book with a page per bad option, not a build per case."""
    root = tmp_path_factory.mktemp("bad")
    bodies = {key: body for key, (body, _) in BAD_OPTIONS.items()}
    return build_bad_pages(_book(root, "# Fine\n"), root / "out", bodies, EXTENSIONS)


@pytest.mark.parametrize("case", list(BAD_OPTIONS))
def test_bad_options_fail_the_build_naming_the_problem(
    bad_options_build: BadPagesBuild, case: str
) -> None:
    # the warning names the page (and line) and says what is wrong
    bad_options_build.assert_warned(case, BAD_OPTIONS[case][1])


def test_a_playgrounds_data_is_computed_once_per_execution_key(built: Path) -> None:
    # Stored beside the execution cache, one file a playground: a later read of the page
    # takes it from there (no torch in the Sphinx process), as this marked copy shows.
    root = built.parents[1]
    stored = sorted((root / ".jupyter_cache").glob("playgrounds/*.json"))
    assert len(stored) == 2
    explorer = next(p for p in stored if "table" in json.loads(p.read_text(encoding="utf-8")))
    original = explorer.read_text(encoding="utf-8")
    marked = json.loads(original)
    marked["table"] = "<p>read from the stored copy</p>"
    explorer.write_text(json.dumps(marked), encoding="utf-8")
    try:
        again = build_in_process(root / "docs", root / "again", EXTENSIONS, **_conf(root)).outdir
        assert "read from the stored copy" in (again / "page.html").read_text(encoding="utf-8")
    finally:
        explorer.write_text(original, encoding="utf-8")


SETTINGS = ("init_scale", "growth_factor", "backoff_factor", "growth_interval")
"""GradScaler's four settings, as a playground's data names them."""


# -- the playground's trace, as a reader without JavaScript sees it ---------------------------


def test_the_trace_simulates_steps_with_gradscalers_inverse_and_what_update_did() -> None:
    settings = read_scaler_settings(
        {"init_scale": "8", "growth_factor": "2", "backoff_factor": "0.5", "growth_interval": "2"}
    )
    rows = playground.scaler_trace(settings, read_steps("x...."))
    assert list(rows[0]) == list(playground.TRACE_COLUMNS)
    assert [r["scale used"] for r in rows] == ["8.0", "4.0", "4.0", "8.0", "8.0"]
    assert [r["what happened"] for r in rows] == [
        playground.CHANGE_TEXT["backoff"], "", playground.CHANGE_TEXT["grow"], "",
        playground.CHANGE_TEXT["grow"],
    ]  # fmt: skip
    # inv_scale is what GradScaler unscales with: scale.double().reciprocal().float()
    for row in rows:
        used = torch.tensor(float(row["scale used"]), dtype=torch.float32)
        assert row["inv_scale"] == repr(used.double().reciprocal().float().item())
    assert playground.describe_trace(rows) == (
        "5 steps, 1 skipped. The scale went from 8.0 to 16.0; the growth tracker ends at 0."
    )
    one = playground.scaler_trace(settings, read_steps("."))
    assert playground.describe_trace(one).startswith("1 step, 0 skipped.")


def test_the_trace_names_the_corners_a_scale_can_reach() -> None:
    top = read_scaler_settings({"init_scale": "3e38", "growth_factor": "2",
                                "backoff_factor": "0.5", "growth_interval": "1"})  # fmt: skip
    capped = playground.scaler_trace(top, read_steps(".."))
    assert capped[0]["what happened"] == playground.CHANGE_TEXT["capped"]
    assert "At step 1 growth would have overflowed float32" in playground.describe_trace(capped)
    low = read_scaler_settings({"init_scale": "1", "growth_factor": "2",
                                "backoff_factor": "0.001", "growth_interval": "5"})  # fmt: skip
    down = playground.scaler_trace(low, read_steps("x" * 20))
    text = playground.describe_trace(down)
    assert "overflows float32 to inf" in text
    assert "the scale is 0, and it cannot grow back" in text
    assert any(r["inv_scale"] == "inf" for r in down)
    with pytest.raises(ValueError, match="rows must hold at least one step"):
        playground.describe_trace([])


def test_the_scripts_trace_columns_are_the_pythons() -> None:
    """The live playground's headings are amp_lesson.playground.TRACE_COLUMNS (a soft hyphen
    aside), so the worked example and the widget read alike."""
    import re

    script = (STATIC / "amp-scaler-playground.js").read_text(encoding="utf-8")
    block = script[
        script.index("var COLUMNS = [") : script.index("];", script.index("var COLUMNS"))
    ]
    headings = [h.replace("\\u00ad", "") for h in re.findall(r'\["([^"]+)", \d+\]', block)]
    assert headings == list(playground.TRACE_COLUMNS)
