"""Tests for amp_lesson.gradients: the data, the shares against thresholds derived
from FP16's layout, and the training loop's claims (FP32 invariance under a power-of-two
loss multiplier, FP16 underflow without a scaler, its rescue with one)."""

from __future__ import annotations

import math

import matplotlib
import pytest
import torch
from helpers import examples
from hypothesis import given
from hypothesis import strategies as st

from amp_lesson.formats import FORMATS
from amp_lesson.gradients import (
    DIGITS_HIDDEN,
    amp_step,
    cast_shares,
    flat_grads,
    load_digits_data,
    log2_histogram,
    plot_gradient_histogram,
    train_digits,
)
from amp_lesson.models import make_mlp

FP16 = FORMATS["fp16"]


@pytest.fixture(scope="module")
def data():
    return load_digits_data(device="cpu")


def test_digits_split_is_a_partition_and_deterministic(data) -> None:
    assert len(data.X_train) + len(data.X_test) == 1797
    assert data.X_train.dtype == torch.float32
    assert float(data.X_train.min()) == 0.0
    assert float(data.X_train.max()) == 1.0
    again = load_digits_data(device="cpu")
    assert torch.equal(again.X_test, data.X_test)
    assert set(data.y_train.tolist()) == set(range(10))
    other = load_digits_data(seed=1, device="cpu")
    assert not torch.equal(other.X_test, data.X_test)
    with pytest.raises(ValueError, match="n_test"):
        load_digits_data(n_test=1797, device="cpu")


def test_flat_grads_order_and_errors() -> None:
    model = make_mlp(64, DIGITS_HIDDEN, out_features=10, device="cpu")
    with pytest.raises(ValueError, match="backward"):
        flat_grads(model)
    model(torch.ones(2, 64)).sum().backward()
    flat = flat_grads(model)
    assert torch.equal(flat, torch.cat([p.grad.flatten() for p in model.parameters()]))


@examples(50)
@given(st.integers(min_value=0, max_value=2**16), st.integers(min_value=0, max_value=20))
def test_cast_shares_match_fp16_thresholds(seed: int, k: int) -> None:
    g = torch.Generator().manual_seed(seed)
    x = torch.exp2(torch.empty(2000).uniform_(-45, 17, generator=g)).float()
    x *= torch.where(torch.rand(2000, generator=g) < 0.5, -1.0, 1.0)
    x[::7] = 0.0
    scale = 2.0**k
    s = cast_shares(x, "fp16", scale)
    mag = (x * scale).abs().double()
    nz = x != 0
    # FP16 flushes |v| <= 2**-25 (the tie goes to even, zero); rounds to inf from 65520 up.
    half_sub, overflow_at = FP16.smallest_subnormal / 2, FP16.max + 2.0 ** (15 - 10 - 1)
    assert s.nonzero == int(nz.sum())
    assert s.zero == pytest.approx(1 - s.nonzero / 2000)
    assert s.underflow == pytest.approx(float(((mag <= half_sub) & nz).sum()) / s.nonzero)
    assert s.overflow == pytest.approx(float(((mag >= overflow_at) & nz).sum()) / s.nonzero)
    # The tie between the largest subnormal and 2**-14 rounds up (to the even 2**-14).
    below_normal = (mag > half_sub) & (mag < FP16.smallest_normal - half_sub)
    assert s.subnormal == pytest.approx(float((below_normal & nz).sum()) / s.nonzero)


def test_cast_shares_bf16_keeps_what_fp16_loses() -> None:
    x = torch.tensor([1e-9, 1e-20, 1e-30, 1.0])
    assert cast_shares(x, "fp16").underflow == 0.75
    assert cast_shares(x, torch.bfloat16).underflow == 0.0
    with pytest.raises(ValueError, match="dtype"):
        cast_shares(x, "fp8")
    with pytest.raises(ValueError, match="scale"):
        cast_shares(x, "fp16", 0.0)


def test_log2_histogram_bins_and_total() -> None:
    x = torch.tensor([0.0, 0.0, 1.0, 1.5, 2.0**-50, 2.0**20, 0.25])
    edges, shares, zero = log2_histogram(x, -40, 10)
    assert edges[0] == -40
    assert edges[-1] == 9
    assert zero == pytest.approx(2 / 7)
    assert sum(shares) + zero == pytest.approx(1.0)
    assert shares[edges.index(0)] == pytest.approx(2 / 7)  # 1.0 and 1.5
    assert shares[0] == pytest.approx(1 / 7)  # 2**-50 clamps into the first bin
    assert shares[-1] == pytest.approx(1 / 7)  # 2**20 clamps into the last
    with pytest.raises(ValueError, match="high"):
        log2_histogram(x, 0, 0)


def test_plot_gradient_histogram_draws_both_layers() -> None:
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    x = torch.exp2(torch.linspace(-40, 0, 500))
    ax = plot_gradient_histogram(x, label="a")
    plot_gradient_histogram(x * 2.0**-10, ax, label="b", overlay=True)
    labels = ax.get_legend_handles_labels()[1]
    # FP16's bands and limits are named in the legend, not written inside a narrow band
    assert sorted(labels) == sorted([
        "a",
        "b",
        "FP16 subnormals",
        "FP16 normal numbers, to 65504",
        "FP16's limits (a cast gives 0 left of them)",
    ])  # fmt: skip
    assert ax.get_xlabel().startswith("|gradient|")
    # powers of two are labelled with Unicode exponents, at the tick labels' own size
    assert "2⁻²⁰" in [t.get_text() for t in ax.get_xticklabels()]
    plt.close(ax.figure)


def test_fp32_is_unchanged_by_a_power_of_two_loss_multiplier(data) -> None:
    a = train_digits(data, epochs=1)
    b = train_digits(data, epochs=1, loss_multiplier=2.0**-20)
    assert a.losses == b.losses
    for name in a.params:
        assert torch.equal(a.params[name], b.params[name])


def test_fp16_without_scaler_loses_tiny_gradients_and_the_scaler_rescues_them(data) -> None:
    tiny = 2.0**-20
    fp32 = train_digits(data, epochs=1, loss_multiplier=tiny, record_grads_at=[1])
    fp16 = train_digits(
        data, epochs=1, autocast_dtype=torch.float16, loss_multiplier=tiny, record_grads_at=[1]
    )
    scaled = train_digits(
        data,
        epochs=1,
        autocast_dtype=torch.float16,
        scaler=True,
        loss_multiplier=tiny,
        record_grads_at=[1],
    )
    # FP32 holds the tiny gradients; FP16 without scaling flushes nearly all of them.
    assert cast_shares(fp32.grads[1]).zero < 0.5
    assert cast_shares(fp16.grads[1]).zero > 0.95
    assert cast_shares(scaled.grads[1]).zero < 0.5
    assert fp16.losses[-1] > 2.25  # no learning: about log(10)
    assert scaled.losses[-1] == pytest.approx(fp32.losses[-1], abs=0.01)
    assert scaled.final_scale == 2.0**16
    assert scaled.skipped == 0


def test_autocast_gradients_pass_through_fp16_but_are_stored_fp32(data) -> None:
    run = train_digits(data, epochs=1, autocast_dtype=torch.float16, record_grads_at=[1, 5])
    for g in run.grads.values():
        assert g.dtype == torch.float32
        assert torch.equal(g, g.half().float())


def test_bf16_is_unchanged_by_a_power_of_two_loss_multiplier(data) -> None:
    a = train_digits(data, epochs=1, autocast_dtype=torch.bfloat16)
    b = train_digits(data, epochs=1, autocast_dtype=torch.bfloat16, loss_multiplier=2.0**-30)
    assert a.losses == b.losses


def test_amp_step_reports_a_skipped_step_on_overflow(data) -> None:
    model = make_mlp(64, DIGITS_HIDDEN, out_features=10, device="cpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    before = [p.detach().clone() for p in model.parameters()]
    X, y = data.X_train[:64], data.y_train[:64]
    loss, skipped, grads = amp_step(
        model,
        opt,
        scaler,
        X,
        y,
        autocast_dtype=torch.float16,
        loss_multiplier=2.0**10,
        keep_grads=True,
    )
    assert math.isfinite(loss)
    assert skipped
    assert grads is not None
    assert scaler.get_scale() == 2.0**15
    for p, q in zip(before, model.parameters(), strict=True):
        assert torch.equal(p, q)


def test_train_digits_bad_arguments(data) -> None:
    with pytest.raises(ValueError, match="dtype"):
        train_digits(data, autocast_dtype=torch.float64)
    with pytest.raises(TypeError, match="scaler"):
        train_digits(data, scaler=1)
    with pytest.raises(ValueError, match="loss_multiplier"):
        train_digits(data, loss_multiplier=0.0)


def test_a_seed_beyond_torchs_range_is_named() -> None:
    with pytest.raises(ValueError, match=r"^seed must be an integer in \[0, 2\*\*64 - 1\]"):
        load_digits_data(seed=2**64)
    with pytest.raises(ValueError, match=r"^seed must be an integer in \[0, 2\*\*64 - 1\]"):
        train_digits(load_digits_data(device="cpu"), seed=2**64)


def _digits_step_parts():
    data = load_digits_data(n_test=100, device="cpu")
    model = make_mlp(64, DIGITS_HIDDEN, out_features=10, device="cpu")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return model, optimizer, torch.amp.GradScaler("cpu"), data.X_train[:32], data.y_train[:32]


def test_amp_step_refuses_an_optimizer_over_another_models_parameters() -> None:
    model, _, scaler, X, y = _digits_step_parts()
    other = torch.optim.SGD(make_mlp(64, DIGITS_HIDDEN, out_features=10).parameters(), lr=0.1)
    # GradScaler's own message was "No inf checks were recorded for this optimizer."
    with pytest.raises(ValueError, match=r"^optimizer must hold the model's trainable param"):
        amp_step(model, other, scaler, X, y)


def test_amp_step_refuses_dtypes_autocast_would_ignore_or_the_model_cannot_take() -> None:
    model, optimizer, scaler, X, y = _digits_step_parts()
    for dtype in (torch.int32, torch.float32):  # autocast warned and switched itself off
        with pytest.raises(ValueError, match=r"^autocast_dtype must be one of 'fp16', 'bf16'"):
            amp_step(model, optimizer, scaler, X, y, autocast_dtype=dtype)
    with pytest.raises(ValueError, match=r"^X must have the dtype of the model's parameters"):
        amp_step(model, optimizer, scaler, X.double(), y)
    loss, _, _ = amp_step(model, optimizer, scaler, X, y, autocast_dtype="bf16")  # a name works
    assert math.isfinite(loss)
