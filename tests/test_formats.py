"""Tests for amp_lesson.formats: the specs against independent arithmetic, and
every stored value against torch's own cast."""

from __future__ import annotations

import dataclasses
import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
import torch
from helpers import examples
from hypothesis import example, given
from hypothesis import strategies as st

from amp_lesson.formats import (
    COLUMN_TITLES,
    FORMATS,
    FormatSpec,
    add_in,
    beyond_range,
    format_spec,
    format_table,
    round_to_tf32,
    store,
    ulp,
)

# The layouts as the formats define them (E4M3: 4 exponent, 3 mantissa bits; TF32:
# FP32's exponent with FP16's mantissa), the independent source the specs are checked against.
LAYOUT = {
    "fp32": (8, 23),
    "tf32": (8, 10),
    "fp16": (5, 10),
    "bf16": (8, 7),
    "fp8_e4m3": (4, 3),
    "fp8_e5m2": (5, 2),
}
DTYPE_NAMES = [name for name, spec in FORMATS.items() if spec.dtype is not None]
SMALL_NAMES = ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2"]  # few enough bit patterns to list
UINT = {8: torch.uint8, 16: torch.int16, 32: torch.int32}
EXAMPLES = examples(300)


def same_float(a: float, b: float) -> bool:
    """Equal as stored floats: NaN equals NaN, and -0.0 differs from 0.0."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def all_patterns(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Every bit pattern of a small format and the value it encodes, per torch."""
    spec = FORMATS[name]
    patterns = torch.arange(2**spec.bits, dtype=torch.int64)
    signed = torch.where(patterns >= 2 ** (spec.bits - 1), patterns - 2**spec.bits, patterns)
    as_uint = signed.to(UINT[spec.bits]) if spec.bits > 8 else patterns.to(torch.uint8)
    values = as_uint.view(spec.dtype).to(torch.float64)
    return patterns.numpy(), values.numpy()


def torch_cast(value: float, name: str, source: torch.dtype = torch.float32) -> float:
    return torch.tensor(value, dtype=source).to(FORMATS[name].dtype).item()


def tf32_reference(value: float) -> float:
    """TF32 rounding of a float32 value by scaling and Python's round (ties to even)."""
    if not math.isfinite(value) or value == 0:
        return value
    exponent_bits, mantissa_bits = LAYOUT["tf32"]
    bias = 2 ** (exponent_bits - 1) - 1
    largest = (2 - 2.0**-mantissa_bits) * 2.0**bias
    binade = max(math.frexp(abs(value))[1] - 1, 1 - bias)
    quantum = 2.0 ** (binade - mantissa_bits)
    rounded = round(value / quantum) * quantum
    if abs(rounded) > largest:
        return math.copysign(math.inf, value)
    return math.copysign(rounded, value) if rounded == 0 else rounded


def reference(value: float, name: str) -> float:
    """What ``name`` stores for a float32 ``value``, computed without amp_lesson."""
    if name == "tf32":
        return tf32_reference(value)
    return torch_cast(value, name)


def decode(
    sign: str, exponent: str, mantissa: str, finite_only: bool, has_nan: bool = True
) -> float:
    """The value of a sign/exponent/mantissa bit string, by the IEEE rules.

    ``finite_only`` formats (E4M3 'fn') use the all-ones exponent for numbers,
    all but the all-ones mantissa, which is NaN (a number too without ``has_nan``: E2M1).
    """
    bias = 2 ** (len(exponent) - 1) - 1
    field, fraction, m = int(exponent, 2), int(mantissa, 2), len(mantissa)
    top = 2 ** len(exponent) - 1
    if finite_only and has_nan and field == top and fraction == 2**m - 1:
        return math.nan
    if not finite_only and field == top:
        return math.nan if fraction else math.copysign(math.inf, -1.0 if sign == "1" else 1.0)
    if field == 0:
        magnitude = fraction * 2.0 ** (1 - bias - m)
    else:
        magnitude = (1 + fraction / 2**m) * 2.0 ** (field - bias)
    return -magnitude if sign == "1" else magnitude


def edges(name: str, kind: type = np.float32) -> list[float]:
    """Values at the rounding edges of a format, as floats of ``kind``.

    Around max: max, the midpoint to the next (missing) value and its neighbours.
    Around zero: half the smallest subnormal and its neighbours.
    """
    mantissa_bits = LAYOUT[name][1]
    spec = FORMATS[name]
    gap_at_max = 2.0 ** (math.frexp(spec.max)[1] - 1 - mantissa_bits)
    half_subnormal = spec.smallest_subnormal / 2
    out = []
    with np.errstate(over="ignore"):  # BF16's and TF32's missing next value is beyond float32
        for centre in (spec.max, spec.max + gap_at_max / 2, spec.max + gap_at_max, half_subnormal):
            c = kind(centre)
            for v in (np.nextafter(c, kind(-np.inf)), c, np.nextafter(c, kind(np.inf))):
                out += [float(v), -float(v)]
    info = np.finfo(kind)
    return [*out, float(info.max), float(info.smallest_subnormal), 0.0, -0.0, math.inf, -math.inf]


def float32s_for(name: str) -> st.SearchStrategy[float]:
    spec = FORMATS[name]
    return st.one_of(
        st.floats(width=32),
        st.floats(min_value=-spec.smallest_normal, max_value=spec.smallest_normal, width=32),
        st.sampled_from(edges(name) if name in LAYOUT else e2m1_probes()),
    )


# --- the specs --------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(LAYOUT))
def test_spec_layout_and_formulae(name: str) -> None:
    spec = FORMATS[name]
    e, m = LAYOUT[name]
    assert (spec.name, spec.sign_bits, spec.exponent_bits, spec.mantissa_bits) == (name, 1, e, m)
    assert spec.bits == 1 + e + m
    assert spec.bias == 2 ** (e - 1) - 1
    assert spec.eps == 2.0**-m
    assert spec.smallest_normal == 2.0 ** (1 - spec.bias)
    assert spec.smallest_subnormal == 2.0 ** (1 - spec.bias - m)
    assert all(type(getattr(spec, f)) is float for f in ("max", "smallest_normal", "eps"))


@pytest.mark.parametrize("name", DTYPE_NAMES)
def test_spec_matches_torch_finfo(name: str) -> None:
    spec = FORMATS[name]
    finfo = torch.finfo(spec.dtype)
    assert (spec.bits, spec.max, spec.eps) == (finfo.bits, finfo.max, finfo.eps)
    assert spec.smallest_normal == finfo.smallest_normal
    assert torch.empty((), dtype=spec.dtype).element_size() * 8 == spec.bits
    smallest_pattern = torch.tensor(1, dtype=UINT[spec.bits]).view(spec.dtype)
    assert smallest_pattern.item() == spec.smallest_subnormal


def test_spec_known_limits() -> None:
    # Each max is the largest mantissa at the largest exponent: (2 - 2**-m) * 2**emax.
    assert FORMATS["fp16"].max == 65504 == (2 - 2**-10) * 2**15
    assert FORMATS["fp16"].smallest_subnormal == 2**-24
    assert FORMATS["fp8_e5m2"].max == 57344 == (2 - 2**-2) * 2**15
    # E4M3fn gives its top exponent (15 - 7 = 8) to numbers, but 1.111b * 2**8 is NaN.
    assert FORMATS["fp8_e4m3"].max == 448 == (2 - 2**-2) * 2**8
    assert FORMATS["bf16"].eps == 2**-7
    assert FORMATS["tf32"].eps == 2**-10
    assert FORMATS["tf32"].max == (2 - 2**-10) * 2**127
    assert FORMATS["tf32"].dtype is None
    assert FORMATS["bf16"].smallest_normal == FORMATS["fp32"].smallest_normal  # same exponent


@pytest.mark.parametrize("name", SMALL_NAMES)
def test_spec_matches_every_bit_pattern(name: str) -> None:
    spec = FORMATS[name]
    patterns, values = all_patterns(name)
    finite = values[np.isfinite(values)]
    assert finite.max() == spec.max
    assert finite[finite > 0].min() == spec.smallest_subnormal
    exponent_field = (patterns >> spec.mantissa_bits) & (2**spec.exponent_bits - 1)
    normal = values[(exponent_field > 0) & np.isfinite(values) & (values > 0)]
    assert normal.min() == spec.smallest_normal
    assert bool(np.isinf(values).any()) == spec.has_inf
    assert np.isnan(values).any()


def test_has_inf_and_saturates() -> None:
    assert [n for n, s in FORMATS.items() if not s.has_inf] == ["fp8_e4m3", "fp4_e2m1"]
    assert [n for n, s in FORMATS.items() if not s.has_nan] == ["fp4_e2m1"]
    for name in DTYPE_NAMES:
        beyond = 4 * FORMATS[name].max  # far past the range, still a finite float64
        cast = torch_cast(beyond, name, torch.float64)
        assert FORMATS[name].saturates == math.isfinite(cast), name
    assert FORMATS["tf32"].saturates is False


def test_formats_are_read_only() -> None:
    with pytest.raises(TypeError):
        FORMATS["fp64"] = FORMATS["fp32"]  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        FORMATS["fp16"].max = 1.0  # type: ignore[misc]


# --- stored values against torch ------------------------------------------------------------


@pytest.mark.parametrize("name", list(LAYOUT))
@EXAMPLES
@given(data=st.data())
def test_stored_matches_torch_cast_of_float32(name: str, data: st.DataObject) -> None:
    value = data.draw(float32s_for(name))
    stored = store(value, name).stored
    assert same_float(stored, reference(value, name)), (value, stored)


@pytest.mark.parametrize("name", list(LAYOUT))
@examples(200)
@given(value=st.floats())
@example(value=1 + 2**-11 + 2**-40)  # just above an FP16 tie; float32 rounds it onto the tie
@example(value=1 + 2**-8 + 2**-40)  # the same for BF16
def test_stored_matches_torch_cast_of_float64(name: str, value: float) -> None:
    if name == "tf32":
        expected = tf32_reference(torch.tensor(value, dtype=torch.float64).float().item())
    else:
        expected = torch_cast(value, name, torch.float64)
    assert same_float(store(value, name).stored, expected)


@pytest.mark.parametrize("name", ["fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2"])
def test_edges_of_fp32_and_small_formats(name: str) -> None:
    # fp32's edges need float64 neighbours; the others are float32 values.
    kind = np.float64 if name == "fp32" else np.float32
    source = torch.float64 if name == "fp32" else torch.float32
    for value in edges(name, kind):
        assert same_float(store(value, name).stored, torch_cast(value, name, source)), value


@pytest.mark.parametrize("name", ["fp8_e4m3", "fp8_e5m2"])
def test_every_fp8_value_and_midpoint(name: str) -> None:
    _, values = all_patterns(name)
    finite = np.unique(values[np.isfinite(values)])
    midpoints = (finite[1:] + finite[:-1]) / 2  # exact: fp8 values have 4 significant bits
    probes = [*finite, *midpoints]
    probes += [
        float(np.nextafter(np.float32(v), np.float32(s))) for v in midpoints for s in (-1, 1)
    ]
    for value in probes:
        s = store(float(value), name)
        assert same_float(s.stored, torch_cast(float(value), name)), value
        if value in finite:
            assert s.event == "exact"


# --- FP4 E2M1, against ml_dtypes (torch 2.13 has no cast to it) --------------------------


def ml_e2m1(values: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """What ml_dtypes stores in E2M1 for float32 ``values``: the values and the 4-bit patterns."""
    ml_dtypes = pytest.importorskip("ml_dtypes")  # in the test extra: a skip here is news
    cast = np.array(values, dtype=np.float32).astype(ml_dtypes.float4_e2m1fn)
    return cast.astype(np.float64), cast.view(np.uint8) & 0xF


def e2m1_probes() -> list[float]:
    """Every E2M1 value, every midpoint between neighbours and the float32s beside them,
    the midpoint past max, and values far past it and below the smallest subnormal."""
    spec = FORMATS["fp4_e2m1"]
    ml_dtypes = pytest.importorskip("ml_dtypes")
    every = np.arange(16, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float64)
    finite = np.unique(np.abs(every))
    beyond = spec.max + ulp(spec.max, "fp4_e2m1")  # the next value if the exponent went on
    midpoints = (np.append(finite[1:], beyond) + finite) / 2
    probes = [*finite, *midpoints]
    probes += [
        float(np.nextafter(np.float32(v), np.float32(d))) for v in midpoints for d in (-9, 9)
    ]
    probes += [1e-30, 1e30, 3.4e38, math.inf]
    return [sign * v for v in probes for sign in (1.0, -1.0)]


def test_e2m1_spec_is_what_its_sixteen_patterns_hold() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    spec = FORMATS["fp4_e2m1"]
    every = np.arange(16, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float64)
    assert np.isfinite(every).all()  # no inf, no NaN
    assert (spec.has_inf, spec.has_nan, spec.dtype) == (False, False, None)
    assert (spec.exponent_bits, spec.mantissa_bits, spec.bits) == (2, 1, 4)
    assert every.max() == spec.max == 6.0
    assert every[every > 0].min() == spec.smallest_subnormal == 0.5
    assert every[(np.arange(16) >> 1 & 0b11) > 0].__abs__().min() == spec.smallest_normal == 1.0
    for pattern, value in enumerate(every):
        s = store(float(value), "fp4_e2m1")
        assert same_float(s.stored, float(value)), pattern
        assert (int(s.bits, 2), s.event) == (pattern, "exact"), pattern


def test_e2m1_stores_what_ml_dtypes_stores_at_every_tie_and_edge() -> None:
    probes = e2m1_probes()
    values, patterns = ml_e2m1(probes)
    for probe, value, pattern in zip(probes, values, patterns, strict=True):
        s = store(probe, "fp4_e2m1")
        assert same_float(s.stored, float(value)), probe
        assert int(s.bits, 2) == int(pattern), probe
        assert same_float(decode(s.sign, s.exponent, s.mantissa, True, False), s.stored)


@EXAMPLES
@given(value=st.floats(width=32))
def test_e2m1_stores_what_ml_dtypes_and_round_to_element_store(value: float) -> None:
    if math.isnan(value):
        with pytest.raises(ValueError, match="value is a NaN, and FP4 E2M1 has none"):
            store(value, "fp4_e2m1")
        return
    s = store(value, "fp4_e2m1")
    (expected,), (pattern,) = ml_e2m1([value])
    assert same_float(s.stored, float(expected)), value
    assert int(s.bits, 2) == int(pattern), value
    if math.isfinite(value):
        from amp_lesson.mx import round_to_element

        assert s.stored == round_to_element(torch.tensor([value]), "e2m1").item()


def test_e2m1_goes_through_float32_as_the_narrow_casts_do() -> None:
    # 0.25 + 2**-40 is past the tie 0.25 in float64, but the tie itself in float32: to even, 0.
    assert torch.tensor(0.25 + 2**-40, dtype=torch.float64).float().item() == 0.25
    assert store(0.25 + 2**-40, "fp4_e2m1").stored == 0.0
    assert store(0.25 + 2**-20, "fp4_e2m1").stored == 0.5


def test_tensor_input_is_cast_from_its_own_dtype() -> None:
    half = torch.tensor(0.1, dtype=torch.float16)
    s = store(half, "bf16")
    assert s.value == half.item()
    assert s.stored == half.to(torch.bfloat16).item()
    assert store(torch.tensor(0.1, dtype=torch.float64), "fp16") == store(0.1, "fp16")
    assert store(np.float32(0.1), "fp16").stored == torch_cast(0.1, "fp16")


def test_fmt_may_be_name_spec_or_dtype() -> None:
    for name in DTYPE_NAMES:
        spec = FORMATS[name]
        assert store(0.3, name) == store(0.3, spec) == store(0.3, spec.dtype)


# --- bits ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(LAYOUT))
@EXAMPLES
@given(data=st.data())
def test_bits_decode_to_stored_value(name: str, data: st.DataObject) -> None:
    value = data.draw(float32s_for(name))
    s = store(value, name)
    e, m = LAYOUT[name]
    assert (len(s.sign), len(s.exponent), len(s.mantissa)) == (1, e, m)
    assert s.bits == s.sign + s.exponent + s.mantissa
    assert same_float(decode(s.sign, s.exponent, s.mantissa, name == "fp8_e4m3"), s.stored)
    if name != "tf32":  # the pattern is the stored tensor's own
        cast = torch.tensor(value, dtype=torch.float32).to(FORMATS[name].dtype)
        assert int(s.bits, 2) == cast.view(UINT[e + m + 1]).item() % 2 ** (e + m + 1)
    # kind, from the bits rather than the value
    if s.exponent == "0" * e:
        assert s.kind == ("zero" if s.mantissa == "0" * m else "subnormal")
    elif math.isnan(s.stored):
        assert s.kind == "nan"
    elif math.isinf(s.stored):
        assert s.kind == "inf"
        assert (s.exponent, s.mantissa) == ("1" * e, "0" * m)
    else:
        assert s.kind == "normal"


@pytest.mark.parametrize(
    "value",
    [1 / 3, 1 + 2**-11, 1 + 2**-10 + 2**-11, 1 + 2**-11 + 2**-20, 2 - 2**-11, -(2 - 2**-12)],
)
def test_tf32_bits_round_the_fp32_bits(value: float) -> None:
    s32, s19 = store(value, "fp32"), store(value, "tf32")
    # Round to nearest on the bit strings: keep 10 mantissa bits, look at the 13 dropped.
    kept, dropped = int(s32.mantissa[:10], 2), s32.mantissa[10:]
    half = "1" + "0" * 12
    up = dropped > half or (dropped == half and kept % 2 == 1)
    exponent, mantissa = int(s32.exponent, 2), kept + up
    if mantissa == 2**10:  # the carry moves into the exponent
        exponent, mantissa = exponent + 1, 0
    assert s19.sign == s32.sign
    assert (s19.exponent, s19.mantissa) == (f"{exponent:08b}", f"{mantissa:010b}")


# --- events ----------------------------------------------------------------------------------


def test_events() -> None:
    fp16 = FORMATS["fp16"]
    s = store(1e-8, "fp16")
    assert (s.stored, s.event, s.rel_error) == (0.0, "underflow", 1.0)
    assert fp16.smallest_subnormal / 2 > 1e-8  # why it underflows
    s = store(1e-8, "bf16")
    assert s.stored != 0
    assert s.event == "rounded"
    # FP16's max is 65504 and the gap there is 32: 65520 is the tie, and it goes up to inf.
    s = store(65520, "fp16")
    assert (s.stored, s.event, s.rel_error) == (math.inf, "overflow", math.inf)
    assert (store(65519, "fp16").stored, store(65519, "fp16").event) == (fp16.max, "rounded")
    assert store(1.0, "fp16").event == "exact"
    assert store(0.1, "fp16").event == "rounded"
    assert store(0.1, "fp32").event == "rounded"  # a Python 0.1 is a float64
    assert store(-0.0, "fp16").event == "exact"


def test_e4m3_beyond_max_follows_torch() -> None:
    spec = FORMATS["fp8_e4m3"]
    for value in (500.0, 1e6, math.inf, -math.inf):
        cast = torch_cast(value, "fp8_e4m3")
        s = store(value, "fp8_e4m3")
        assert same_float(s.stored, cast)
        if abs(cast) == spec.max:
            assert s.event == "saturated"
        else:
            assert s.event == "overflow"
    # 464 is the midpoint between max = 1.110b * 2**8 and 1.111b * 2**8 (NaN): ties go to
    # the even mantissa 110, so 464 is an ordinary rounding, and anything above it saturates.
    midpoint = spec.max + 2.0 ** (8 - 3) / 2
    assert store(midpoint, "fp8_e4m3").event == "rounded"
    above = float(np.nextafter(np.float32(midpoint), np.float32(np.inf)))
    assert store(above, "fp8_e4m3").event == "saturated"


def test_special_values() -> None:
    for name in LAYOUT:
        nan = store(math.nan, name)
        assert (nan.kind, nan.event, nan.rel_error) == ("nan", "exact", 0.0)
        if FORMATS[name].has_inf:
            assert store(-math.inf, name).stored == -math.inf
            assert store(-math.inf, name).event == "exact"
    saturated = store(math.inf, "fp8_e4m3")
    assert saturated.event == "saturated"
    assert math.isnan(saturated.rel_error)


@pytest.mark.parametrize("name", list(LAYOUT))
def test_nan_with_only_low_payload_bits_stays_nan(name: str) -> None:
    # Clearing FP32's low 13 bits for TF32 would turn this NaN into inf if done blindly.
    low_payload_nan = torch.tensor(0x7F800001, dtype=torch.int32).view(torch.float32)
    assert math.isnan(low_payload_nan.item())
    s = store(low_payload_nan, name)
    assert (s.kind, s.event) == ("nan", "exact")


@pytest.mark.parametrize("name", [*LAYOUT, "fp4_e2m1"])
@EXAMPLES
@given(data=st.data())
def test_event_and_rel_error_agree_with_stored(name: str, data: st.DataObject) -> None:
    value = data.draw(float32s_for(name))
    if math.isnan(value) and not FORMATS[name].has_nan:
        return  # refused: test_e2m1_stores_what_ml_dtypes_and_round_to_element_store
    s = store(value, name)
    spec = FORMATS[name]
    if same_float(s.stored, value):
        assert (s.event, s.rel_error) == ("exact", 0.0)
    elif math.isfinite(value) and math.isinf(s.stored):
        assert (s.event, s.rel_error) == ("overflow", math.inf)
    elif value != 0 and s.stored == 0:
        assert (s.event, s.rel_error) == ("underflow", 1.0)
    elif s.event == "saturated":
        assert spec.saturates
        assert abs(s.stored) == spec.max < abs(value)
    else:
        assert s.event == "rounded"
        exact_error = abs(Fraction(s.stored) - Fraction(value)) / abs(Fraction(value))
        assert s.rel_error == pytest.approx(float(exact_error), rel=1e-12)
        assert s.rel_error <= spec.eps / 2 or abs(value) < spec.smallest_normal


def test_rel_error_of_one_tenth() -> None:
    expected = abs(float(np.float16(0.1)) - 0.1) / 0.1  # numpy's float16: independent rounding
    assert store(0.1, "fp16").rel_error == expected


def test_str_names_format_and_event() -> None:
    text = str(store(65520, "fp16"))
    for word in ("65520", "FP16", "inf", "overflow", "0 11111 0000000000"):
        assert word in text


# --- ulp and add_in --------------------------------------------------------------------------


@pytest.mark.parametrize("name", SMALL_NAMES)
def test_ulp_is_the_gap_to_the_next_pattern(name: str) -> None:
    # Positive patterns are ordered like their values: pattern + 1 is the next number up.
    _, values = all_patterns(name)
    half = 2 ** (FORMATS[name].bits - 1)
    positive = values[:half]
    for here, above in itertools.pairwise(positive):
        if np.isfinite(above):
            assert ulp(float(here), name) == above - here, here


def test_ulp_known_values() -> None:
    for name in LAYOUT:
        m = LAYOUT[name][1]
        assert ulp(1.0, name) == 2.0**-m == FORMATS[name].eps
        assert ulp(0.0, name) == FORMATS[name].smallest_subnormal
        assert ulp(-(2.0 ** (m + 1)), name) == 2.0  # above 2**(m+1) integers are skipped
    assert ulp(2048, "fp16") == 2.0
    with pytest.raises(ValueError, match="value must be within"):
        ulp(65520, "fp16")
    with pytest.raises(ValueError, match="value must be a finite number"):
        ulp(math.nan, "fp16")


@pytest.mark.parametrize("name", ["fp16", "bf16"])
def test_integer_plus_one_stops_changing(name: str) -> None:
    # With m mantissa bits, integers are exact up to 2**(m+1); beyond it the gap is 2,
    # so n + 1 is a tie that rounds to the even neighbour n.
    n = 2.0 ** (LAYOUT[name][1] + 1)
    assert add_in(n - 1, 1, name) == n
    assert add_in(n, 1, name) == n
    assert add_in(n, 2, name) == n + 2
    assert FORMATS[name].dtype is not None
    assert add_in(n, 1, FORMATS[name].dtype) == n


@pytest.mark.parametrize("name", ["fp16", "bf16", "fp32"])
@EXAMPLES
@given(data=st.data())
def test_add_in_is_the_correctly_rounded_sum(name: str, data: st.DataObject) -> None:
    # Bounded magnitudes keep a + b exact in float64, and a float32 intermediate cannot
    # double-round the sum of two values of a narrower format (24 >= 2 * 11 + 2).
    magnitudes = st.floats(min_value=2.0**-14, max_value=2.0**15, width=32)
    signed = st.tuples(magnitudes, st.sampled_from([-1.0, 1.0])).map(lambda t: t[0] * t[1])
    a = store(data.draw(signed), name).stored
    b = store(data.draw(signed), name).stored
    exact = Fraction(a) + Fraction(b)
    assert float(exact) == exact
    with np.errstate(over="ignore"):  # numpy rounds float64 to half or single directly
        if name == "fp16":
            expected = float(np.float16(float(exact)))
        elif name == "fp32":
            expected = float(np.float32(float(exact)))
        else:
            expected = store(float(exact), name).stored
    assert same_float(add_in(a, b, name), expected)


def test_add_in_rejects_formats_without_arithmetic() -> None:
    for name in ("tf32", "fp8_e4m3", "fp8_e5m2"):
        with pytest.raises(ValueError, match="fmt must be one of 'fp32', 'fp16', 'bf16'"):
            add_in(1.0, 1.0, name)
    with pytest.raises(TypeError, match="a must be a real number"):
        add_in("1", 1.0, "fp16")
    with pytest.raises(TypeError, match="b must be a real number"):
        add_in(1.0, None, "fp16")


# --- format_table ----------------------------------------------------------------------------


def test_format_table_default_rows() -> None:
    rows = format_table()
    assert [row["label"] for row in rows] == ["FP32", "FP16"]
    fp16 = rows[1]
    assert fp16["max"] == (2 - 2**-10) * 2**15
    assert (fp16["bits"], fp16["exponent_bits"], fp16["mantissa_bits"]) == (16, 5, 10)
    expected_keys = ["label", "bits", "sign_bits", "exponent_bits", "mantissa_bits", "bias"]
    expected_keys += ["max", "smallest_normal", "smallest_subnormal", "eps"]
    assert list(fp16) == expected_keys


def test_format_table_every_column_is_plain() -> None:
    all_columns = [f.name for f in dataclasses.fields(FormatSpec)]
    assert set(COLUMN_TITLES) == set(all_columns)
    rows = format_table(list(FORMATS), all_columns)
    assert len(rows) == len(FORMATS)
    for row, spec in zip(rows, FORMATS.values(), strict=True):
        assert list(row) == all_columns
        for column, cell in row.items():
            assert type(cell) in (int, float, str, bool, type(None)), (column, cell)
            if column != "dtype":
                assert cell == getattr(spec, column)
        assert row["dtype"] == (None if spec.dtype is None else str(spec.dtype))


def test_format_table_accepts_dtypes_and_column_order() -> None:
    rows = format_table([torch.bfloat16], ["eps", "label"])
    assert rows == [{"eps": 2.0**-7, "label": "BF16"}]


# --- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "error"),
    [
        ("fp64", ValueError),
        ("FP16", ValueError),
        (torch.float64, ValueError),
        (16, ValueError),
        (None, ValueError),
        (dataclasses.replace(FORMATS["fp16"], max=1.0), ValueError),
    ],
)
def test_bad_fmt(fmt: object, error: type[Exception]) -> None:
    with pytest.raises(error, match=r"fmt must be one of 'fp32', 'tf32', 'fp16'"):
        store(1.0, fmt)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        ("1.0", TypeError, "value must be a real number"),
        (True, TypeError, "value must be a real number"),
        (None, TypeError, "value must be a real number"),
        (1 + 2j, TypeError, "value must be a real number"),
        (10**400, ValueError, "value is too large"),
        (torch.ones(3), ValueError, "value must be a 0-dim tensor"),
        (torch.tensor(1), TypeError, "value must be a floating-point tensor"),
    ],
)
def test_bad_value(value: object, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        store(value, "fp16")  # type: ignore[arg-type]


def test_format_table_bad_arguments() -> None:
    with pytest.raises(TypeError, match="names must be a sequence"):
        format_table("fp16")  # a str is iterable, but of characters, not formats
    with pytest.raises(ValueError, match="names must be one of"):
        format_table(["fp16", "fp64"])
    with pytest.raises(ValueError, match="names must name at least one format"):
        format_table([])
    with pytest.raises(ValueError, match="columns must be one of"):
        format_table(columns=["colour"])
    with pytest.raises(TypeError, match="columns must be a sequence"):
        format_table(columns="max")


# --- round_to_tf32 -------------------------------------------------------------------


@EXAMPLES
@given(st.lists(float32s_for("tf32"), min_size=1, max_size=64))
def test_round_to_tf32_matches_inspect_elementwise(values: list[float]) -> None:
    out = round_to_tf32(torch.tensor(values, dtype=torch.float32)).tolist()
    for value, got in zip(values, out, strict=True):
        assert same_float(got, tf32_reference(value)) or (math.isnan(got) and math.isnan(value))
        assert same_float(got, store(value, "tf32").stored)


def test_round_to_tf32_keeps_shape_device_and_rejects_integers() -> None:
    x = torch.randn(3, 4, dtype=torch.float64)
    out = round_to_tf32(x)
    assert out.shape == x.shape
    assert out.dtype == torch.float32
    assert out.device == x.device
    assert torch.equal(round_to_tf32(out), out)  # idempotent
    with pytest.raises(TypeError, match="floating-point"):
        round_to_tf32(torch.tensor([1, 2]))


def test_an_int_too_long_to_print_is_described_not_printed() -> None:
    # repr itself raised "Exceeds the limit (4300 digits) for integer string conversion"
    with pytest.raises(ValueError, match=r"^value is too large to be a float: an integer of about"):
        store(10**5000, "fp16")


@pytest.mark.parametrize(
    ("magnitude", "error", "message"),
    [
        (None, TypeError, r"magnitude must be a real number or a tensor, got NoneType None"),
        ("abc", TypeError, r"magnitude must be a real number or a tensor, got str 'abc'"),
        (True, TypeError, r"magnitude must be a real number or a tensor, got bool True"),
        ([1.0, 7e4], TypeError, r"got list \[1.0, 70000.0\]; pass torch.tensor\(...\)"),
        (-1e6, ValueError, r"magnitude must be a non-negative number, got -1000000.0"),
        (math.nan, ValueError, r"magnitude must be a non-negative number, got nan"),
        (-(10**400), ValueError, r"non-negative number, got a negative integer of about 401"),
        (torch.tensor([1.0, -2.0]), ValueError, r"magnitude must hold non-negative values"),
        (torch.tensor([True]), TypeError, r"magnitude must be a real tensor, got a torch.bool"),
        (torch.ones(2, device="meta"), ValueError, r"magnitude is a meta tensor"),
    ],
)
def test_beyond_range_names_a_bad_magnitude(magnitude, error, message) -> None:
    with pytest.raises(error, match=message):
        beyond_range(magnitude, "fp16")


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp32", "fp8_e4m3", "fp8_e5m2"])
def test_beyond_range_compares_any_python_number_exactly(fmt: str) -> None:
    """An int of any size, a Fraction or a float is compared with the midpoint exactly: one
    unit either side of it lands on either side (an int past float64's range is beyond)."""
    spec = format_spec(fmt)
    gap = Fraction(2) ** (math.frexp(spec.max)[1] - 1 - spec.mantissa_bits)
    midpoint = Fraction(spec.max) + gap / 2
    ties_up = int(Fraction(spec.max) / gap) % 2 == 1
    tiny = Fraction(1, 2**200)
    assert beyond_range(midpoint + tiny, fmt).item() is True
    assert beyond_range(midpoint - tiny, fmt).item() is False
    assert beyond_range(midpoint, fmt).item() is ties_up
    assert beyond_range(10**400, fmt).item() is True
    assert beyond_range(math.inf, fmt).item() is True
    assert beyond_range(0, fmt).item() is False
    # a tensor of the same values, in float64, agrees where float64 holds them
    values = torch.tensor([float(midpoint), spec.max, math.inf], dtype=torch.float64)
    assert beyond_range(values, fmt).tolist() == [ties_up, False, True]


def test_store_names_a_meta_tensor() -> None:
    with pytest.raises(ValueError, match=r"value is a meta tensor, which has a shape but no"):
        store(torch.ones((), device="meta"), "fp16")
