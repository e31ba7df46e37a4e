"""Tests for amp_lesson.autocast: op dtypes, one step's tensors, the ways to train."""

from __future__ import annotations

import math

import pytest
import torch

from amp_lesson.autocast import (
    CHOICES,
    CUDA_RULES,
    OPS,
    compare_choices,
    make_regression_problem,
    op_dtypes,
    step_dtypes,
    train_choice,
)
from amp_lesson.formats import dtype_name

LOW = [torch.float16, torch.bfloat16]


def test_cuda_rules_cover_every_op() -> None:
    assert set(CUDA_RULES) == set(OPS)
    assert set(CUDA_RULES.values()) <= {"lower", "input", "float32", "refused"}


@pytest.mark.parametrize("dtype", LOW, ids=dtype_name)
def test_op_dtypes_on_cpu(dtype: torch.dtype) -> None:
    rows = {row["op"]: row for row in op_dtypes(dtype, device="cpu")}
    assert list(rows) == list(OPS)
    low = dtype_name(dtype)
    for op in ("linear", "matmul", "conv2d", "relu"):
        assert rows[op]["produced"] == low
    for op in ("cross_entropy", "mse_loss", "binary_cross_entropy_with_logits"):
        assert rows[op]["produced"] == "float32"
    # CPU keeps these in the autocast dtype where CUDA runs them in FP32 ...
    for op in ("softmax", "layer_norm", "sum"):
        assert rows[op]["produced"] == low
        assert rows[op]["cuda_rule"] == "float32"
        assert rows[op]["same_as_cuda"] is False
    # ... and runs the BCE that CUDA refuses.
    bce = rows["binary_cross_entropy"]
    assert (bce["produced"], bce["error"], bce["cuda_rule"]) == ("float32", None, "refused")
    for row in rows.values():
        assert row["same_as_cuda"] == (row["produced"] == row["cuda_rule"])


@pytest.mark.cuda
def test_op_dtypes_on_cuda_follow_the_docs() -> None:
    rows = op_dtypes(torch.float16, device="cuda")
    assert all(row["same_as_cuda"] for row in rows), rows
    bce = next(row for row in rows if row["op"] == "binary_cross_entropy")
    assert "unsafe to autocast" in bce["error"]


def test_op_dtypes_rejects_fp32_and_takes_format_names() -> None:
    with pytest.raises(ValueError, match="dtype must be one of 'fp16', 'bf16'"):
        op_dtypes(torch.float32, device="cpu")
    with pytest.raises(ValueError, match="dtype must be one of"):
        op_dtypes("fp32", device="cpu")
    assert op_dtypes("fp16", device="cpu") == op_dtypes(torch.float16, device="cpu")


@pytest.mark.parametrize("dtype", LOW, ids=dtype_name)
def test_step_dtypes(dtype: torch.dtype) -> None:
    rows = {row["tensor"]: row["dtype"] for row in step_dtypes(dtype, device="cpu")}
    low = dtype_name(dtype)
    assert rows == {
        "parameters (weights, biases)": "float32",
        "activations (layer outputs)": low,
        "loss": "float32",
        "activation gradients": low,
        "weight gradients, as computed": low,
        "weight gradients in .grad": "float32",
        "Adam exp_avg (m)": "float32",
        "Adam exp_avg_sq (v)": "float32",
    }


def test_regression_problem_is_deterministic_and_leaves_the_global_rng() -> None:
    state = torch.random.get_rng_state()
    X1, y1 = make_regression_problem(device="cpu")
    X2, y2 = make_regression_problem(device="cpu")
    assert torch.equal(X1, X2)
    assert torch.equal(y1, y2)
    assert torch.equal(state, torch.random.get_rng_state())
    assert not torch.equal(X1, make_regression_problem(seed=1, device="cpu")[0])


def test_train_choice_outcomes() -> None:
    rows = {row["choice"]: row for row in compare_choices(steps=30, device="cpu")}
    assert list(rows) == list(CHOICES.values())
    fp32, half, half_scaler, amp16, bf16 = rows.values()
    assert fp32["trained"]
    assert amp16["trained"]
    assert bf16["trained"]
    assert (fp32["params"], amp16["params"], bf16["params"]) == ("float32",) * 3
    assert half["params"] == half_scaler["params"] == "float16"
    assert (amp16["scaler"], bf16["scaler"], half_scaler["scaler"]) == (True, False, True)
    # Pure FP16 Adam: eps=1e-8 is 0 in FP16 and v underflows, so a step divides by zero.
    assert not half["trained"]
    assert half["nonfinite_at"] is not None
    assert half["error"] is None
    assert math.isnan(half["final_loss"])
    assert half_scaler["error"] == "ValueError: Attempting to unscale FP16 gradients."
    assert half_scaler["steps_done"] == 0
    assert half_scaler["final_loss"] is None
    # Same weights and data: the first losses agree to the precision of each forward.
    for row in (amp16, bf16, half):
        assert row["first_loss"] == pytest.approx(fp32["first_loss"], rel=1e-2)
    assert amp16["final_loss"] == pytest.approx(fp32["final_loss"], rel=2e-2)


def test_train_choice_checks_its_arguments() -> None:
    with pytest.raises(ValueError, match="choice must be one of"):
        train_choice("fp8", device="cpu")
    with pytest.raises(ValueError, match="steps must be an integer >= 1"):
        train_choice("fp32", steps=0, device="cpu")


def test_a_seed_beyond_torchs_range_is_named() -> None:
    with pytest.raises(ValueError, match=r"^seed must be an integer in \[0, 2\*\*64 - 1\]"):
        make_regression_problem(seed=2**64)
    X, _ = make_regression_problem(seed=2**64 - 1, device="cpu")  # torch's largest seed
    assert X.shape == (256, 16)
