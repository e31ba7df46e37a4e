"""Tests for amp_lesson.accumulation: equivalence, the mistakes, and bad input."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
from helpers import examples
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from amp_lesson import accumulation as acc
from amp_lesson.accumulation import (
    MISTAKES,
    ParamComparison,
    StepLog,
    TrainResult,
    compare_params,
    first_step_bound,
    grad_after_backward,
    make_toy_model,
    make_toy_optimizer,
    make_toy_problem,
    max_abs_diff,
    train_accumulated,
    train_amp,
    train_amp_accumulated,
    train_amp_mistake,
    train_full_batch,
)

CPU = torch.device("cpu")
LOSS = nn.BCEWithLogitsLoss()
LR = 0.1
U16 = 2.0**-11  # float16 unit roundoff: half of torch.finfo(torch.float16).eps
FP16_OVERFLOW_SCALE = 2.0**40  # the toy problem's scaled fp16 gradients overflow from 2**18 on


def toy(dtype: torch.dtype = torch.float32, device: torch.device = CPU):
    X, y = make_toy_problem(dtype=dtype, device=device)
    return X, y


def fresh(dtype: torch.dtype = torch.float32, device: torch.device = CPU):
    model = make_toy_model(dtype=dtype, device=device)
    return model, make_toy_optimizer(model, lr=LR)


def fp32_sum_bound(X: torch.Tensor, w: torch.Tensor, n_accum: int, lr: float) -> float:
    """Bound on |w_full - w_accum| after one SGD step of a linear model with mean BCE.

    The gradient is ``(1/B) sum_i (sigmoid(z_i) - y_i) x_i``; each term is at most
    ``M = max|x|`` in size (``|sigmoid - y| <= 1``). Any order of summing ``B``
    terms errs by at most ``(B - 1) u sum|t_i|`` (``u = eps / 2``), so each of the
    two gradients is within ``(B + n_accum + c) u M`` of the exact one, where ``c``
    covers sigmoid, the products and the divisions, plus ``f M |w|`` for a logit
    ``z_i`` of ``f`` features computed in a different order. Their difference is
    at most twice that; the update multiplies it by ``lr`` and adds one rounding
    of each new weight (``eps |w|``).
    """
    eps = torch.finfo(X.dtype).eps
    B, f = X.shape
    M = X.abs().max().item()
    W = w.abs().max().item()
    grad_bound = eps * M * (B + n_accum + 8 + f * M * W)
    return lr * grad_bound + eps * (W + lr * M)


# --------------------------------------------------------------------------- the toy problem


def test_toy_problem_matches_the_lesson_recipe() -> None:
    torch.manual_seed(42)
    X_ref = torch.randn(128, 2)
    y_ref = (X_ref[:, 0] + X_ref[:, 1] > 0).float()
    X, y = make_toy_problem(device=CPU)
    assert torch.equal(X, X_ref)
    assert torch.equal(y.squeeze(1), y_ref)
    X64, _ = make_toy_problem(dtype=torch.float64, device=CPU)
    assert torch.equal(X64, X_ref.double())


def test_toy_problem_leaves_global_rng_alone() -> None:
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    make_toy_problem(device=CPU)
    assert torch.equal(torch.rand(3), expected)


def test_toy_weights_reproduce_the_slides() -> None:
    X, y = toy()
    model, opt = fresh()
    result = train_full_batch(model, opt, X, y, LOSS)
    assert [round(w, 5) for w in result.weight.flatten().tolist()] == [0.03085, 0.02717]
    assert result.log[0].loss == pytest.approx(torch.log(torch.tensor(2.0)).item())


def ulps_apart(a: torch.Tensor, b: torch.Tensor) -> list[int]:
    """Units in the last place between same-signed float32 values (bit patterns)."""
    return (a.view(torch.int32).long() - b.view(torch.int32).long()).abs().flatten().tolist()


def test_toy_float32_accumulation_agrees_within_the_summation_bound() -> None:
    """4 x 32 and 128 sum the same terms in another order: equal up to float32 rounding."""
    X, y = toy()
    full = train_full_batch(*fresh(), X, y, LOSS)
    accum = train_accumulated(*fresh(), X, y, LOSS, 4)
    cmp = compare_params(full, accum)
    assert cmp.max_abs_diff <= fp32_sum_bound(X, full.weight, 4, LR)
    assert [round(w, 5) for w in accum.weight.flatten().tolist()] == [0.03085, 0.02717]


@pytest.mark.observation
def test_toy_float32_accumulation_bits_on_this_build() -> None:
    """Observed with torch 2.13 on this CPU: the two orders differ by one ulp of w[0]'s gradient.

    Which bits differ depends on how the BLAS kernel orders its sums (device,
    library version, batch size); the book's page shows what its own build saw.
    """
    X, y = toy()
    full = train_full_batch(*fresh(), X, y, LOSS)
    accum = train_accumulated(*fresh(), X, y, LOSS, 4)
    cmp = compare_params(full, accum)
    assert not cmp.bitwise_equal
    assert cmp.max_abs_diff == 2.0**-28
    assert ulps_apart(full.weight, accum.weight) == [2, 0]
    model, _ = fresh()
    g_full = grad_after_backward(model, X, y, LOSS, 1)["weight"]
    g_accum = grad_after_backward(model, X, y, LOSS, 4)["weight"]
    assert ulps_apart(g_full, g_accum) == [1, 0]


def test_toy_float64_accumulation_is_bitwise_equal() -> None:
    X, y = toy(torch.float64)
    full = train_full_batch(*fresh(torch.float64), X, y, LOSS)
    accum = train_accumulated(*fresh(torch.float64), X, y, LOSS, 4)
    assert compare_params(full, accum) == ParamComparison(max_abs_diff=0.0, bitwise_equal=True)


def test_accumulation_logs_micro_losses_that_sum_to_the_batch_loss() -> None:
    X, y = toy()
    result = train_accumulated(*fresh(), X, y, LOSS, 4, steps=3)
    assert [entry.step for entry in result.log] == [1, 2, 3]
    first = result.log[0]
    assert len(first.micro_losses) == 4
    assert first.micro_losses[0] == pytest.approx(first.loss / 4)
    assert sum(first.micro_losses) == pytest.approx(first.loss)
    assert result.log[2].loss < result.log[0].loss  # it learns
    assert all(entry.scale is None and not entry.skipped for entry in result.log)


def test_several_steps_stay_close() -> None:
    X, y = toy()
    full = train_full_batch(*fresh(), X, y, LOSS, steps=5)
    accum = train_accumulated(*fresh(), X, y, LOSS, 4, steps=5)
    # five steps: at most five one-step bounds (the BCE gradient is lr*M**2/4-Lipschitz
    # in w and lr*M**2/4 < 1 here, so earlier differences do not grow)
    assert max_abs_diff(full, accum) <= 5 * fp32_sum_bound(X, full.weight, 4, LR)


@examples(30)
@given(
    n_accum=st.integers(1, 8),
    micro=st.integers(1, 12),
    n_features=st.integers(1, 4),
    seed=st.integers(0, 2**16),
    dtype=st.sampled_from([torch.float32, torch.float64]),
)
def test_accumulation_matches_full_batch_on_random_problems(
    n_accum: int, micro: int, n_features: int, seed: int, dtype: torch.dtype
) -> None:
    g = torch.Generator().manual_seed(seed)
    B = n_accum * micro
    X = torch.randn(B, n_features, generator=g, dtype=dtype)
    y = torch.randint(0, 2, (B, 1), generator=g).to(dtype)
    w0 = torch.randn(1, n_features, generator=g, dtype=dtype) * 0.5
    results = []
    for n in (1, n_accum):
        model = nn.Linear(n_features, 1, bias=False, dtype=dtype)
        with torch.no_grad():
            model.weight.copy_(w0)
        opt = make_toy_optimizer(model, lr=LR)
        results.append(train_accumulated(model, opt, X, y, LOSS, n))
    bound = fp32_sum_bound(X, torch.cat([w0, results[0].weight]), n_accum, LR)
    assert max_abs_diff(*results) <= bound


def test_weight_by_samples_handles_uneven_micro_batches() -> None:
    X, y = make_toy_problem(n_samples=10, device=CPU)
    full = train_full_batch(*fresh(), X, y, LOSS)
    uneven = train_accumulated(*fresh(), X, y, LOSS, 4, weight_by_samples=True)  # 3,3,2,2
    assert len(uneven.log[0].micro_losses) == 4
    assert max_abs_diff(full, uneven) <= fp32_sum_bound(X, full.weight, 4, LR)
    # without weighting, the uneven split is refused
    with pytest.raises(ValueError, match=r"n_accum=4 does not divide the batch size 10"):
        train_accumulated(*fresh(), X, y, LOSS, 4)


def test_weight_by_samples_is_a_no_op_when_divisible() -> None:
    X, y = toy()
    a = train_accumulated(*fresh(), X, y, LOSS, 4)
    b = train_accumulated(*fresh(), X, y, LOSS, 4, weight_by_samples=True)
    assert compare_params(a, b).bitwise_equal


# --------------------------------------------------------------------------- raw loss


@pytest.mark.parametrize("n_accum", [2, 4, 8, 32])
def test_raw_loss_gives_exactly_n_times_the_gradient_for_powers_of_two(n_accum: int) -> None:
    # dividing by a power of two is exact in binary floating point, and so is every
    # sum of the divided terms, so the ratio is exactly n_accum
    X, y = toy()
    model, _ = fresh()
    divided = grad_after_backward(model, X, y, LOSS, n_accum)
    raw = grad_after_backward(model, X, y, LOSS, n_accum, divide=False)
    assert torch.equal(raw["weight"], n_accum * divided["weight"])
    assert model.weight.grad is None
    assert torch.equal(model.weight, torch.zeros(1, 2))


@pytest.mark.parametrize("n_accum", [3, 6, 12])
def test_raw_loss_gives_n_times_the_gradient_within_rounding(n_accum: int) -> None:
    X, y = make_toy_problem(n_samples=96, device=CPU)
    model, _ = fresh()
    divided = grad_after_backward(model, X, y, LOSS, n_accum)["weight"]
    raw = grad_after_backward(model, X, y, LOSS, n_accum, divide=False)["weight"]
    # per micro-batch gradients, to bound the rounding of "/ n_accum" and of the sums
    parts = [
        grad_after_backward(model, xb, yb, LOSS, 1)["weight"]
        for xb, yb in zip(X.tensor_split(n_accum), y.tensor_split(n_accum), strict=True)
    ]
    abs_sum = torch.stack(parts).abs().sum(0)
    eps = torch.finfo(torch.float32).eps
    # each of the n_accum terms is rounded by the division (u) and by the sums
    # (n_accum u); multiplying back by n_accum costs another u of the result
    assert ((raw - n_accum * divided).abs() <= 2 * (n_accum + 2) * eps * abs_sum).all()
    assert not torch.equal(raw, divided)


# --------------------------------------------------------------------------- AMP


def test_amp_on_cpu_logs_a_finite_loss_and_the_scale() -> None:
    X, y = toy()
    result = train_amp(*fresh(), X, y, LOSS, steps=3)
    assert [entry.scale for entry in result.log] == [65536.0] * 3
    assert result.final_scale == 65536.0
    for entry in result.log:
        assert torch.isfinite(torch.tensor(entry.loss))
        assert not entry.found_inf
        assert not entry.skipped
    assert torch.isfinite(result.weight).all()


def test_amp_loops_read_like_textbook_code() -> None:
    for loop in (train_full_batch, train_accumulated, train_amp, train_amp_accumulated):
        source = inspect.getsource(loop)
        body = source.split('"""')[-1]
        assert len(body.strip().splitlines()) <= 25, loop.__name__
    source = inspect.getsource(train_amp_accumulated)
    order = ["torch.autocast", "/ n_accum", "scaler.scale(loss).backward()",
             "scaler.unscale_", "clip_grad_norm_", "scaler.step", "scaler.update", "zero_grad()"]  # fmt: skip
    positions = [source.rindex(token) for token in order]
    assert positions == sorted(positions)
    assert "torch.cuda.amp" not in inspect.getsource(acc)
    assert "torch.cpu.amp" not in inspect.getsource(acc)


def test_forced_overflow_skips_the_step_and_halves_the_scale() -> None:
    X, y = toy()
    result = train_amp(*fresh(), X, y, LOSS, steps=3,
                       scaler_kwargs={"init_scale": FP16_OVERFLOW_SCALE})  # fmt: skip
    assert [entry.scale for entry in result.log] == [2.0**40, 2.0**39, 2.0**38]
    assert all(entry.found_inf and entry.skipped for entry in result.log)
    assert result.final_scale == 2.0**37
    assert torch.equal(result.weight, torch.zeros(1, 2))  # unchanged


def test_overflow_threshold_of_the_toy_problem() -> None:
    # the full batch's scaled fp16 weight gradient is about 0.31 * scale: 2**17 fits
    # below fp16's maximum 65504, 2**18 does not
    X, y = toy()
    fits = train_amp(*fresh(), X, y, LOSS, scaler_kwargs={"init_scale": 2.0**17})
    overflows = train_amp(*fresh(), X, y, LOSS, scaler_kwargs={"init_scale": 2.0**18})
    assert not fits.log[0].skipped
    assert overflows.log[0].skipped


def test_mistake_no_update_keeps_the_scale_then_raises() -> None:
    X, y = toy()
    kwargs = {"init_scale": FP16_OVERFLOW_SCALE}
    one = train_amp_mistake(*fresh(), X, y, LOSS, mistake="no_update", scaler_kwargs=kwargs)
    assert one.log[0].skipped
    assert one.final_scale == FP16_OVERFLOW_SCALE  # never halved
    assert torch.equal(one.weight, torch.zeros(1, 2))
    # torch's GradScaler refuses a second step() without update() in between
    with pytest.raises(RuntimeError, match=r"step\(\) has already been called"):
        train_amp_mistake(*fresh(), X, y, LOSS, mistake="no_update", steps=2,
                          scaler_kwargs=kwargs)  # fmt: skip


def test_mistake_new_scaler_each_step_keeps_skipping_quietly() -> None:
    X, y = toy()
    result = train_amp_mistake(*fresh(), X, y, LOSS, mistake="new_scaler_each_step", steps=4,
                               scaler_kwargs={"init_scale": FP16_OVERFLOW_SCALE})  # fmt: skip
    assert [entry.scale for entry in result.log] == [FP16_OVERFLOW_SCALE] * 4
    assert all(entry.skipped for entry in result.log)
    assert torch.equal(result.weight, torch.zeros(1, 2))


def test_mistake_optimizer_step_applies_inf_and_scaled_gradients() -> None:
    X, y = toy()
    bad = train_amp_mistake(*fresh(), X, y, LOSS, mistake="optimizer_step",
                            scaler_kwargs={"init_scale": FP16_OVERFLOW_SCALE})  # fmt: skip
    assert bad.log[0].found_inf
    assert not bad.log[0].skipped
    assert not torch.isfinite(bad.weight).any()
    # without overflow it applies the scaled gradient: scale times the right step
    good = train_amp(*fresh(), X, y, LOSS)
    scaled = train_amp_mistake(*fresh(), X, y, LOSS, mistake="optimizer_step")
    ratio = scaled.weight / good.weight
    # same fp16 gradient both times; only the rounding of lr * g differs (2 eps)
    assert torch.allclose(ratio, torch.full_like(ratio, 65536.0), rtol=4 * 2.0**-23)


def test_mistake_clip_before_unscale_clips_the_scaled_gradient() -> None:
    X, y = toy()
    clip = 0.1  # the true gradient norm is 0.41
    right = train_amp(*fresh(), X, y, LOSS, clip_norm=clip)
    wrong = train_amp_mistake(*fresh(), X, y, LOSS, mistake="clip_before_unscale", clip_norm=clip)
    scale = right.log[0].scale
    # right: the step has norm lr * clip; wrong: lr * clip / scale (clip_grad_norm_'s
    # 1e-6 in the denominator and fp16 rounding are far inside 1e-3)
    assert right.weight.norm().item() == pytest.approx(LR * clip, rel=1e-3)
    assert wrong.weight.norm().item() == pytest.approx(LR * clip / scale, rel=1e-3)
    # and with amp_accumulated the right clipping is the same as without accumulation
    accum = train_amp_accumulated(*fresh(), X, y, LOSS, 4, clip_norm=clip)
    assert accum.weight.norm().item() == pytest.approx(LR * clip, rel=1e-3)


def test_mistake_raw_loss_multiplies_the_step() -> None:
    X, y = toy()
    good = train_amp_accumulated(*fresh(), X, y, LOSS, 4)
    raw = train_amp_mistake(*fresh(), X, y, LOSS, mistake="raw_loss", n_accum=4)
    assert torch.equal(raw.weight, 4 * good.weight)  # powers of two scale exactly
    assert raw.log[0].loss == pytest.approx(good.log[0].loss)
    assert raw.log[0].grad_norm == pytest.approx(4 * good.log[0].grad_norm)


def amp_vs_fp32_bound(X: torch.Tensor, lr: float) -> float:
    """Bound on |w_amp - w_fp32| after one step from w = 0 on the toy problem.

    At ``w = 0`` the logits are exactly 0 and ``dL/dz = +-0.5 / B`` times the
    scale, a power of two, exact in fp16. What rounds is ``x`` (cast to fp16,
    relative error ``u16``) and each micro-batch's weight gradient (the fp16
    GEMM's result, ``u16``, with fp32 accumulation inside the GEMM), so the
    gradient is within ``2 u16 (1/B) sum_i |0.5 x_i|`` of the FP32 one; we allow
    twice that, for the FP32 side and the unscale/sum.
    """
    sum_abs_terms = (0.5 * X.abs()).mean(0).max().item()
    return lr * 4 * U16 * sum_abs_terms


@pytest.mark.parametrize("n_accum", [1, 4])
def test_amp_accumulation_is_close_to_fp32_full_batch(n_accum: int) -> None:
    X, y = toy()
    fp32 = train_full_batch(*fresh(), X, y, LOSS)
    amp = train_amp_accumulated(*fresh(), X, y, LOSS, n_accum)
    diff = max_abs_diff(fp32, amp)
    assert 0 < diff <= amp_vs_fp32_bound(X, LR)


def test_amp_with_bfloat16() -> None:
    X, y = toy()
    result = train_amp_accumulated(*fresh(), X, y, LOSS, 4, dtype=torch.bfloat16)
    fp32 = train_full_batch(*fresh(), X, y, LOSS)
    # bfloat16 keeps 8 significant bits: u = 2**-8
    assert max_abs_diff(fp32, result) <= amp_vs_fp32_bound(X, LR) * 2.0**3


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_amp_accumulation_matches_fp32() -> None:
    cuda = torch.device("cuda")
    X, y = toy(device=cuda)
    fp32 = train_full_batch(*fresh(device=cuda), X, y, LOSS)
    amp = train_amp_accumulated(*fresh(device=cuda), X, y, LOSS, 4)
    assert amp.log[0].scale == 65536.0
    assert not amp.log[0].skipped
    assert max_abs_diff(fp32, amp) <= amp_vs_fp32_bound(X.cpu(), LR)
    overflow = train_amp_accumulated(*fresh(device=cuda), X, y, LOSS, 4,
                                     scaler_kwargs={"init_scale": FP16_OVERFLOW_SCALE})  # fmt: skip
    assert overflow.log[0].skipped
    assert overflow.final_scale == FP16_OVERFLOW_SCALE / 2


def test_device_argument_moves_model_and_data() -> None:
    X, y = toy()
    model, opt = fresh()
    result = train_full_batch(model, opt, X, y, LOSS, device="cpu")
    assert result.weight.device.type == "cpu"


# --------------------------------------------------------------------------- results


def test_train_result_weight_and_losses() -> None:
    log = [StepLog(1, 0.5, (0.5,), None, False, False, 1.0)]
    result = TrainResult(params={"bias": torch.zeros(1)}, log=log)
    assert result.losses == [0.5]
    with pytest.raises(AttributeError, match="no parameter named 'weight'"):
        _ = result.weight


def test_compare_params_accepts_dicts_and_results() -> None:
    X, y = toy()
    result = train_full_batch(*fresh(), X, y, LOSS)
    assert compare_params(result, dict(result.params)).bitwise_equal
    assert max_abs_diff(result, {"weight": torch.zeros(1, 2)}) == pytest.approx(0.030850956)
    nan = {"weight": torch.tensor([[float("nan"), 0.0]])}
    assert math.isnan(max_abs_diff(result, nan))
    assert not compare_params(nan, nan).bitwise_equal  # NaN != NaN, as torch.equal says


# --------------------------------------------------------------------------- bad input


LOOPS = [
    ("full", lambda m, o, X, y, **kw: train_full_batch(m, o, X, y, LOSS, **kw)),
    ("accum", lambda m, o, X, y, **kw: train_accumulated(m, o, X, y, LOSS, 4, **kw)),
    ("amp", lambda m, o, X, y, **kw: train_amp(m, o, X, y, LOSS, **kw)),
    ("amp_accum", lambda m, o, X, y, **kw: train_amp_accumulated(m, o, X, y, LOSS, 4, **kw)),
    ("mistake", lambda m, o, X, y, **kw: train_amp_mistake(m, o, X, y, LOSS, mistake="raw_loss",
                                                           **kw)),
]  # fmt: skip


@pytest.mark.parametrize(("name", "loop"), LOOPS)
def test_every_loop_rejects_bad_steps_and_inputs(name: str, loop) -> None:
    X, y = toy()
    with pytest.raises(ValueError, match=r"steps must be an integer >= 1, got 0"):
        loop(*fresh(), X, y, steps=0)
    with pytest.raises(TypeError, match=r"steps must be an integer"):
        loop(*fresh(), X, y, steps=1.0)
    with pytest.raises(TypeError, match=r"X must be a torch.Tensor"):
        loop(*fresh(), X.numpy(), y)
    with pytest.raises(ValueError, match=r"X and y must hold the same number of samples"):
        loop(*fresh(), X, y[:-1])
    with pytest.raises(TypeError, match=r"model must be a torch.nn.Module"):
        loop("model", fresh()[1], X, y)
    with pytest.raises(TypeError, match=r"optimizer must be a torch.optim.Optimizer"):
        loop(fresh()[0], "sgd", X, y)
    model = make_toy_model(device=CPU)
    nan_opt = torch.optim.SGD(model.parameters(), lr=float("nan"))
    with pytest.raises(ValueError, match=r"optimizer lr must be a finite number"):
        loop(model, nan_opt, X, y)
    with pytest.raises(ValueError, match=r"device must be one of"):
        loop(*fresh(), X, y, device="tpu")


@pytest.mark.parametrize("loop", [train_accumulated, train_amp_accumulated])
def test_accumulating_loops_reject_bad_n_accum(loop) -> None:
    X, y = toy()
    with pytest.raises(ValueError, match=r"n_accum must be an integer >= 1, got 0"):
        loop(*fresh(), X, y, LOSS, 0)
    with pytest.raises(ValueError, match=r"n_accum=3 does not divide the batch size 128"):
        loop(*fresh(), X, y, LOSS, 3)
    with pytest.raises(ValueError, match=r"n_accum must be <= the batch size \(128\)"):
        loop(*fresh(), X, y, LOSS, 256)
    with pytest.raises(TypeError, match=r"loss_fn must be callable"):
        loop(*fresh(), X, y, "bce", 4)


def test_train_accumulated_rejects_non_bool_weight_by_samples() -> None:
    X, y = toy()
    with pytest.raises(TypeError, match=r"weight_by_samples must be True or False"):
        train_accumulated(*fresh(), X, y, LOSS, 4, weight_by_samples="yes")


@pytest.mark.parametrize("loop", [train_amp, train_amp_accumulated])
def test_amp_loops_reject_bad_amp_arguments(loop) -> None:
    X, y = toy()
    extra = (4,) if loop is train_amp_accumulated else ()
    with pytest.raises(ValueError, match=r"dtype must be one of"):
        loop(*fresh(), X, y, LOSS, *extra, dtype=torch.float32)
    with pytest.raises(ValueError, match=r"dtype must be one of 'fp16', 'bf16'"):
        loop(*fresh(), X, y, LOSS, *extra, dtype="float16")
    by_name = loop(*fresh(), X, y, LOSS, *extra, dtype="bf16")  # a format name works too
    assert torch.equal(
        by_name.weight, loop(*fresh(), X, y, LOSS, *extra, dtype=torch.bfloat16).weight
    )
    with pytest.raises(ValueError, match=r"clip_norm must be a finite number > 0"):
        loop(*fresh(), X, y, LOSS, *extra, clip_norm=-1.0)
    with pytest.raises(ValueError, match=r"scaler_kwargs key must be one of"):
        loop(*fresh(), X, y, LOSS, *extra, scaler_kwargs={"init_scal": 2.0})
    with pytest.raises(ValueError, match=r"scaler_kwargs\['init_scale'\] must be a finite"):
        loop(*fresh(), X, y, LOSS, *extra, scaler_kwargs={"init_scale": 0.0})
    with pytest.raises(ValueError, match=r"growth_interval'\] must be an integer >= 1"):
        loop(*fresh(), X, y, LOSS, *extra, scaler_kwargs={"growth_interval": 0})
    with pytest.raises(TypeError, match=r"scaler_kwargs must be a dict or None"):
        loop(*fresh(), X, y, LOSS, *extra, scaler_kwargs=[("init_scale", 2.0)])


def test_train_amp_mistake_rejects_bad_mistakes() -> None:
    X, y = toy()
    allowed = ", ".join(repr(m) for m in MISTAKES)
    with pytest.raises(ValueError, match=rf"mistake must be one of {allowed}; got 'typo'"):
        train_amp_mistake(*fresh(), X, y, LOSS, mistake="typo")
    with pytest.raises(ValueError, match=r"mistake='clip_before_unscale' needs clip_norm"):
        train_amp_mistake(*fresh(), X, y, LOSS, mistake="clip_before_unscale")
    with pytest.raises(ValueError, match=r"n_accum must be an integer >= 1, got 0"):
        train_amp_mistake(*fresh(), X, y, LOSS, mistake="raw_loss", n_accum=0)


FLOAT32_MAX = float(torch.finfo(torch.float32).max)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        # beyond float32: GradScaler's torch.full(..., dtype=float32) raised a bare RuntimeError
        ({"init_scale": 1e60}, ValueError, r"\['init_scale'\] must be representable in float32"),
        ({"init_scale": 3.4028235e38}, ValueError, r"\['init_scale'\] must be representable"),
        (
            {"init_scale": 10**400},
            ValueError,
            r"\['init_scale'\] must be a finite number within a float's range",
        ),
        ({"growth_factor": 0.5}, ValueError, r"\['growth_factor'\] must be a finite number > 1"),
        ({"growth_factor": 1.0}, ValueError, r"\['growth_factor'\] must be a finite number > 1"),
        ({"backoff_factor": 1.5}, ValueError, r"\['backoff_factor'\] must be in the open interv"),
        ({"backoff_factor": 0.0}, ValueError, r"\['backoff_factor'\] must be in the open interv"),
        ({"backoff_factor": -0.5}, ValueError, r"\['backoff_factor'\] must be in the open inter"),
        ({"growth_interval": 2**63}, ValueError, r"\['growth_interval'\] must be an integer in \["),
        ({"enabled": "no"}, TypeError, r"\['enabled'\] must be True or False, got 'no'"),
        ({"enabled": 1}, TypeError, r"\['enabled'\] must be True or False, got 1"),
    ],
)
@pytest.mark.parametrize("loop", [train_amp, train_amp_mistake])
def test_scaler_kwargs_get_a_message_naming_the_setting(kwargs, error, message, loop) -> None:
    X, y = toy()
    extra = {"mistake": "raw_loss"} if loop is train_amp_mistake else {}
    with pytest.raises(error, match=rf"^scaler_kwargs{message}"):
        loop(*fresh(), X, y, LOSS, scaler_kwargs=kwargs, **extra)


def test_scaler_kwargs_take_what_gradscaler_takes_up_to_its_limits() -> None:
    X, y = toy()
    edge = {"init_scale": FLOAT32_MAX, "growth_interval": 2**63 - 1, "backoff_factor": 1e-30}
    result = train_amp(*fresh(), X, y, LOSS, scaler_kwargs=edge)
    assert result.log[0].scale == FLOAT32_MAX  # taken as it is
    assert result.log[0].skipped  # and it overflows, as a scale that large does
    off = train_amp(*fresh(), X, y, LOSS, scaler_kwargs={"enabled": False, "init_scale": 1})
    assert off.final_scale == 1.0  # a disabled GradScaler reports a scale of 1
    with pytest.raises(RuntimeError, match="cannot be converted to type float without overflow"):
        torch.full((), 3.4028235e38, dtype=torch.float32)  # why init_scale stops at FLOAT32_MAX


@pytest.mark.parametrize(("name", "loop"), LOOPS)
def test_every_loop_refuses_an_optimizer_over_another_models_parameters(name, loop) -> None:
    X, y = toy()
    model, other = make_toy_model(device=CPU), make_toy_model(device=CPU)
    with pytest.raises(ValueError, match=r"^optimizer must hold the model's trainable param"):
        loop(model, make_toy_optimizer(other), X, y)
    assert torch.equal(model.weight, torch.zeros(1, 2))  # refused before anything ran


@pytest.mark.parametrize(("name", "loop"), LOOPS)
def test_every_loop_wants_every_trainable_parameter_in_the_optimizer(name, loop) -> None:
    from amp_lesson.models import make_mlp

    X, y = toy()
    model = make_mlp(2, 4, depth=1, device=CPU)
    partial = torch.optim.SGD([p for n, p in model.named_parameters() if n != "2.bias"], lr=LR)
    with pytest.raises(ValueError, match=r"^optimizer must hold every trainable .* misses '2.b"):
        loop(model, partial, X, y)
    model[2].bias.requires_grad_(False)  # frozen, it may be left out
    loop(model, partial, X, y)
    extra = nn.Linear(1, 1)  # and the optimizer may hold more than the model's
    loop(model, torch.optim.SGD([*model.parameters(), *extra.parameters()], lr=LR), X, y)


@pytest.mark.parametrize(("name", "loop"), LOOPS)
def test_every_loop_refuses_an_x_whose_dtype_the_model_cannot_take(name, loop) -> None:
    X, y = toy()
    with pytest.raises(ValueError, match=r"^X must have the dtype of the model's parameters, "):
        loop(*fresh(), X.double(), y)
    with pytest.raises(ValueError, match=r"^X must have .* torch\.float64; got torch\.float32"):
        loop(*fresh(torch.float64), X, y)
    with pytest.raises(ValueError, match=r"^X must have the dtype of the model's parameters"):
        loop(*fresh(), X.int(), y)
    with pytest.raises(ValueError, match=r"^X must have the dtype of the model's parameters"):
        grad_after_backward(fresh()[0], X.double(), y, LOSS, 4)


@pytest.mark.parametrize("loop", [train_amp, train_amp_accumulated])
def test_amp_loops_take_an_x_autocast_casts_and_refuse_float16_weights(loop) -> None:
    X, y = toy()
    extra = (4,) if loop is train_amp_accumulated else ()
    loop(*fresh(), X.half(), y, LOSS, *extra)  # autocast casts it, as it casts float32
    model = make_toy_model(device=CPU).half()
    with pytest.raises(ValueError, match=r"^model must keep its parameters out of float16"):
        loop(model, make_toy_optimizer(model), X, y, LOSS, *extra)
    model = make_toy_model(device=CPU).half()  # without a scaler, float16 weights do train
    off = loop(
        model, make_toy_optimizer(model), X, y, LOSS, *extra, scaler_kwargs={"enabled": False}
    )
    assert off.weight.dtype == torch.float16


def test_the_toy_problem_takes_every_seed_torch_takes_and_names_the_rest() -> None:
    X, _ = make_toy_problem(seed=2**64 - 1, device=CPU)
    assert torch.equal(X, torch.randn(128, 2, generator=torch.Generator().manual_seed(2**64 - 1)))
    with pytest.raises(ValueError, match=r"^seed must be an integer in \[0, 2\*\*64 - 1\]"):
        make_toy_problem(seed=2**64)
    with pytest.raises(ValueError, match=r"^seed must be an integer in .* an integer of about 401"):
        make_toy_problem(seed=10**400)


def test_toy_factories_reject_bad_input() -> None:
    with pytest.raises(ValueError, match=r"seed must be an integer >= 0"):
        make_toy_problem(seed=-1)
    with pytest.raises(ValueError, match=r"n_samples must be an integer >= 1"):
        make_toy_problem(n_samples=0)
    with pytest.raises(ValueError, match=r"n_features must be an integer >= 1"):
        make_toy_problem(n_features=0)
    with pytest.raises(ValueError, match=r"dtype must be one of"):
        make_toy_problem(dtype=torch.float16)
    with pytest.raises(TypeError, match=r"device must be a str"):
        make_toy_problem(device=0)
    with pytest.raises(ValueError, match=r"n_features must be an integer >= 1"):
        make_toy_model(n_features=0)
    with pytest.raises(TypeError, match=r"dtype must be a torch.dtype"):
        make_toy_model(dtype="float32")
    with pytest.raises(ValueError, match=r"lr must be a finite number > 0"):
        make_toy_optimizer(make_toy_model(device=CPU), lr=0.0)
    with pytest.raises(TypeError, match=r"model must be a torch.nn.Module"):
        make_toy_optimizer("model")


def test_grad_after_backward_rejects_bad_input() -> None:
    X, y = toy()
    model, _ = fresh()
    with pytest.raises(ValueError, match=r"n_accum must be an integer >= 1, got 0"):
        grad_after_backward(model, X, y, LOSS, 0)
    with pytest.raises(ValueError, match=r"n_accum=5 does not divide the batch size 128"):
        grad_after_backward(model, X, y, LOSS, 5)
    with pytest.raises(TypeError, match=r"divide must be True or False"):
        grad_after_backward(model, X, y, LOSS, 4, divide=1)


def test_compare_params_rejects_mismatches() -> None:
    a = {"weight": torch.zeros(1, 2)}
    with pytest.raises(ValueError, match=r"a and b must have the same parameters"):
        compare_params(a, {"bias": torch.zeros(1)})
    with pytest.raises(ValueError, match=r"parameter 'weight' has shape \(1, 2\) in a"):
        compare_params(a, {"weight": torch.zeros(2)})
    with pytest.raises(TypeError, match=r"b must be a TrainResult or a dict of tensors"):
        max_abs_diff(a, [0.0, 0.0])


# --------------------------------------------------------------------------- the first-step bound


@examples(60)
@given(
    seed=st.integers(0, 2**31 - 1),
    log2_batch=st.integers(3, 8),
    log2_accum=st.integers(0, 3),
    features=st.integers(1, 6),
    spread=st.floats(0.1, 10.0),
    lr=st.floats(1e-3, 1.0),
)
def test_the_first_amp_step_stays_within_its_derived_bound(
    seed, log2_batch, log2_accum, features, spread, lr
):
    """Random problems, batch sizes and splits: the FP16 step never leaves the bound."""
    batch, n_accum = 2**log2_batch, 2 ** min(log2_accum, log2_batch)
    generator = torch.Generator().manual_seed(seed)
    X = torch.randn(batch, features, generator=generator) * spread
    y = (torch.rand(batch, 1, generator=generator) < 0.5).float()
    loss_fn = nn.BCEWithLogitsLoss()
    # The bound assumes no overflow: the largest power-of-two scale whose scaled
    # per-micro-batch gradient stays below half of FP16's max.
    worst = X.abs().max().item() * (batch // n_accum) / (2 * batch)
    scale = 2.0 ** min(16, math.floor(math.log2(32768 / worst)))
    m1, m2 = make_toy_model(features, device=CPU), make_toy_model(features, device=CPU)
    amp = train_amp_accumulated(
        m1, make_toy_optimizer(m1, lr), X, y, loss_fn, n_accum,
        scaler_kwargs={"init_scale": scale},
    )  # fmt: skip
    fp32 = train_full_batch(m2, make_toy_optimizer(m2, lr), X, y, loss_fn)
    assert not amp.log[0].skipped
    bound = first_step_bound(X, y, lr, n_accum)
    assert ((amp.weight.double() - fp32.weight.double()).abs() <= bound).all()


def test_a_bound_relative_to_the_gradient_itself_fails_where_terms_cancel():
    """Feature 1's terms nearly cancel: the error is far above 3u |g|, yet within the bound."""
    a = torch.randn(64, 1, generator=torch.Generator().manual_seed(0))
    X = torch.cat([torch.cat([a, a], 1), torch.cat([-a, a + 1e-4], 1)])
    y = torch.cat([torch.ones(64, 1), torch.zeros(64, 1)])
    m1, m2 = make_toy_model(device=CPU), make_toy_model(device=CPU)
    amp = train_amp_accumulated(m1, make_toy_optimizer(m1), X, y, LOSS, 4)
    fp32 = train_full_batch(m2, make_toy_optimizer(m2), X, y, LOSS)
    diff = (amp.weight - fp32.weight).abs().double()
    grad = grad_after_backward(make_toy_model(device=CPU), X, y, LOSS, 1)["weight"].double()
    assert diff[0, 1] > 3 * U16 * LR * grad[0, 1].abs()  # "off by at most 3u of its size": no
    assert (diff <= first_step_bound(X, y, LR, 4)).all()


def test_the_bound_rejects_bad_input():
    X, y = make_toy_problem(device=CPU)
    with pytest.raises(ValueError, match="n_accum must divide the batch size 128"):
        first_step_bound(X, y, 0.1, 3)
    with pytest.raises(ValueError, match="lr must be"):
        first_step_bound(X, y, -0.1)
    with pytest.raises(ValueError, match="y must hold one label per sample"):
        first_step_bound(X, y[:5], 0.1)
    with pytest.raises(TypeError, match=r"X must be a torch\.Tensor"):
        first_step_bound(X.tolist(), y, 0.1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_samples": 2**62}, r"n_samples must be an integer in \[1, 268435456\] \(the toy"),
        ({"n_features": 2**40}, r"n_features must be an integer in \[1, 268435456\]"),
        ({"n_samples": 2**20, "n_features": 2**9}, r"n_samples \* n_features must be at most"),
    ],
)
def test_a_toy_problem_too_large_to_draw_is_named_before_torch_allocates(kwargs, message) -> None:
    """Before: torch's ``Storage size calculation overflowed with sizes=[...]``."""
    with pytest.raises(ValueError, match=message):
        make_toy_problem(**kwargs)
