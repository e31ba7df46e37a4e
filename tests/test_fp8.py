"""Tests for amp_lesson.fp8: casts against torch, shares against independent counts,
and DelayedScaler against Transformer Engine's history-and-roll formulation."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import examples
from hypothesis import given
from hypothesis import strategies as st

from amp_lesson.formats import FORMATS
from amp_lesson.fp8 import (
    FP8_FORMATS,
    DelayedScaler,
    cast_report,
    compare_scalings,
    quantize,
    scale_for,
    sweep_single_scale,
)

EXAMPLES = examples(100)


def te_delayed_scales(amaxes: list[float], fp8_max: float, length: int, margin: int) -> list[float]:
    """The scale each step uses, computed the way Transformer Engine does it.

    A zero-initialised history of ``length`` slots; slot 0 receives the
    step's amax; after the step the scale becomes ``fp8_max / max(history) /
    2**margin`` (kept if that max is 0 or not finite), then the history is
    rolled by one and slot 0 zeroed.
    """
    history = torch.zeros(length, dtype=torch.float64)
    scale = 1.0
    used = []
    for amax in amaxes:
        used.append(scale)
        history[0] = amax
        largest = float(history.max())
        if largest > 0 and math.isfinite(largest):
            scale = min(fp8_max / largest / 2.0**margin, torch.finfo(torch.float32).max)
        history = torch.roll(history, -1, 0)
        history[0] = 0.0
    return used


@pytest.mark.parametrize("name", FP8_FORMATS)
def test_quantize_without_scale_is_torchs_cast(name: str) -> None:
    x = torch.randn(1000) * torch.logspace(-12, 6, 1000)
    expected = x.to(FORMATS[name].dtype).float()
    assert torch.equal(quantize(x, name), expected)
    assert torch.equal(quantize(x, FORMATS[name].dtype), expected)


@EXAMPLES
@given(st.sampled_from(FP8_FORMATS), st.integers(min_value=-40, max_value=40))
def test_power_of_two_scale_shifts_exactly(name: str, k: int) -> None:
    x = torch.randn(256, generator=torch.Generator().manual_seed(k + 100))
    scaled = quantize(x, name, 2.0**k)
    direct = (x * 2.0**k).to(FORMATS[name].dtype).float() * 2.0**-k
    assert torch.equal(scaled, direct)


def test_scale_for_formula_margin_and_clamp() -> None:
    assert scale_for(448.0, "fp8_e4m3") == 1.0
    assert scale_for(2.0, "fp8_e5m2", margin=3) == 57344 / 2 / 8
    assert scale_for(1e-45, "fp8_e4m3") == torch.finfo(torch.float32).max
    with pytest.raises(ValueError, match="amax"):
        scale_for(0.0)
    with pytest.raises(ValueError, match="margin"):
        scale_for(1.0, margin=-1)
    with pytest.raises(ValueError, match="fmt must be one of"):
        scale_for(1.0, "fp16")


def test_cast_report_range_edges() -> None:
    # E4M3: 464 is the tie between 448 and the missing 480, rounds to even 448: in range.
    assert cast_report(torch.tensor([464.0]), "fp8_e4m3").saturated == 0.0
    assert cast_report(torch.tensor([464.5]), "fp8_e4m3").saturated == 1.0
    # E5M2: 61440 is the tie between 57344 and the missing 65536; it rounds up, to inf.
    r = cast_report(torch.tensor([61440.0, 61439.0]), "fp8_e5m2")
    assert r.saturated == 0.5
    assert r.rel_error == math.inf
    # Half the smallest subnormal is a tie with zero: zero wins (even).
    half = FORMATS["fp8_e4m3"].smallest_subnormal / 2
    assert cast_report(torch.tensor([half, half * 1.01]), "fp8_e4m3").underflow == 0.5


@pytest.mark.parametrize("name", FP8_FORMATS)
def test_cast_report_agrees_with_an_independent_count(name: str) -> None:
    spec = FORMATS[name]
    x = torch.randn(5000, generator=torch.Generator().manual_seed(1)) * 10.0 ** torch.linspace(
        -8, 6, 5000
    )
    x[::50] = 0.0
    r = cast_report(x, name, 4.0)
    stored = (x * 4).to(spec.dtype).float()
    nz = x != 0
    assert r.nonzero == int(nz.sum())
    assert r.n == 5000
    assert r.underflow == pytest.approx(float(((stored == 0) & nz).sum()) / r.nonzero)
    sub = (stored.abs() > 0) & (stored.abs() < spec.smallest_normal)
    assert r.subnormal == pytest.approx(float(sub.sum()) / r.nonzero)
    at_or_past_max = (stored.abs() >= spec.max) & ((x * 4).abs() > spec.max)
    # every value beyond the rounding midpoint is stored as max or inf
    assert r.saturated <= float(at_or_past_max.sum()) / r.nonzero
    assert r.lost == r.underflow + r.saturated


def test_cast_report_zero_tensor_and_bad_input() -> None:
    r = cast_report(torch.zeros(4))
    assert (r.nonzero, r.underflow, r.rel_error) == (0, 0.0, 0.0)
    with pytest.raises(ValueError, match="finite"):
        cast_report(torch.tensor([math.inf]))
    with pytest.raises(TypeError, match="floating-point"):
        cast_report(torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="empty"):
        quantize(torch.tensor([]))
    with pytest.raises(ValueError, match="scale"):
        quantize(torch.ones(2), "fp8_e4m3", 0.0)


@EXAMPLES
@given(
    st.sampled_from(FP8_FORMATS),
    st.integers(min_value=1, max_value=6),
    st.integers(min_value=0, max_value=3),
    st.lists(
        st.one_of(st.just(0.0), st.floats(min_value=1e-12, max_value=1e6)),
        min_size=1,
        max_size=20,
    ),
)
def test_delayed_scaler_matches_transformer_engine(
    name: str, length: int, margin: int, amaxes: list[float]
) -> None:
    scaler = DelayedScaler(name, amax_history_len=length, margin=margin)
    used = []
    for amax in amaxes:
        used.append(scaler.scale)
        scaler.update(amax)
    expected = te_delayed_scales(amaxes, FORMATS[name].max, length, margin)
    assert used == pytest.approx(expected, rel=1e-12)
    assert len(scaler.amax_history) == min(length, len(amaxes))


def test_delayed_scaler_quantize_uses_then_records() -> None:
    scaler = DelayedScaler("fp8_e4m3", amax_history_len=3)
    x = torch.tensor([0.5, -2.0])
    assert torch.equal(scaler.quantize(x), quantize(x, "fp8_e4m3", 1.0))
    assert scaler.amax_history == (2.0,)
    assert scaler.scale == 224.0
    assert torch.equal(scaler.quantize(x), quantize(x, "fp8_e4m3", 224.0))
    assert "scale=224.0" in repr(scaler)
    with pytest.raises(ValueError, match="amax"):
        scaler.update(-1.0)
    with pytest.raises(ValueError, match="amax_history_len"):
        DelayedScaler(amax_history_len=0)


def test_compare_scalings_rows_agree_with_cast_report() -> None:
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(512, generator=g) * 10.0**-k for k in range(6)]
    rows = compare_scalings(xs, "fp8_e5m2", fixed_scale=2.0**10, amax_history_len=2)
    expected_scales = te_delayed_scales(
        [float(x.abs().max()) for x in xs], FORMATS["fp8_e5m2"].max, 2, 0
    )
    for row, x, scale in zip(rows, xs, expected_scales, strict=True):
        assert row["scale_delayed"] == pytest.approx(scale, rel=1e-12)
        assert row["lost_fixed"] == cast_report(x, "fp8_e5m2", 2.0**10).lost
        assert row["rel_error_none"] == cast_report(x, "fp8_e5m2").rel_error
    with pytest.raises(ValueError, match="at least one"):
        compare_scalings([], fixed_scale=1.0)


def test_sweep_single_scale_rows_match_cast_report() -> None:
    g = torch.Generator().manual_seed(2)
    tensors = {"a": torch.randn(256, generator=g) * 100, "b": torch.randn(256, generator=g) * 1e-6}
    rows = sweep_single_scale(tensors, "fp8_e4m3", range(-5, 30, 5))
    assert [r["log2_scale"] for r in rows] == list(range(-5, 30, 5))
    for r in rows:
        for name, t in tensors.items():
            assert r["reports"][name] == cast_report(t, "fp8_e4m3", 2.0 ** r["log2_scale"])
        assert r["lost_total"] == sum(rep.lost for rep in r["reports"].values())
    # The two tensors are 2**27 apart, more than E4M3 spans: no scale keeps both.
    assert min(r["lost_total"] for r in rows) > 0.5
    with pytest.raises(TypeError, match="mapping"):
        sweep_single_scale({}, "fp8_e4m3")
    with pytest.raises(ValueError, match="at least one"):
        sweep_single_scale(tensors, "fp8_e4m3", [])
