"""Tests for amp_lesson.autocast: op dtypes, one step's tensors, the ways to train."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from helpers import DOCS, build_one_page

from amp_lesson.autocast import (
    CHOICES,
    CUDA_RULES,
    NOT_KNOWN,
    OPS,
    compare_choices,
    cuda_autocast_dtype,
    cuda_op_dtypes,
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
        assert rows[op]["cuda"] == "float32"
        assert rows[op]["same_as_cuda"] is False
    # ... and runs the BCE that CUDA refuses.
    bce = rows["binary_cross_entropy"]
    assert (bce["produced"], bce["error"], bce["cuda"]) == ("float32", None, "refused")
    for row in rows.values():
        assert row["same_as_cuda"] == (row["produced"] == row["cuda"])


@pytest.mark.parametrize("dtype", LOW, ids=dtype_name)
def test_torch_decides_cudas_choices_as_the_amp_docs_list_them(dtype: torch.dtype) -> None:
    """The dispatcher's decisions on fake CUDA tensors, against the docs' lists, op by op."""
    decided = {row["op"]: row["cuda"] for row in cuda_op_dtypes(dtype)}
    low = dtype_name(dtype)
    from_docs = {
        op: {"lower": low, "input": low}.get(rule, rule) for op, rule in CUDA_RULES.items()
    }
    assert decided == from_docs
    bce = next(row for row in cuda_op_dtypes(dtype) if row["op"] == "binary_cross_entropy")
    assert "unsafe to autocast" in bce["error"]


def test_deciding_leaves_autocast_as_it_found_it() -> None:
    before = (torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda"))
    cuda_autocast_dtype(torch.mm, torch.ones(2, 2), torch.ones(2, 2), dtype=torch.bfloat16)
    with pytest.raises(IndexError):  # fn's own mistake propagates, autocast still restored
        cuda_autocast_dtype(lambda a: a.select(9, 9), torch.ones(2))
    assert (torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")) == before
    x = torch.ones(2, 2)
    assert (x @ x).dtype == torch.float32  # nothing on the CPU changed


def test_what_torch_cannot_decide_without_a_gpu_is_said() -> None:
    if torch.backends.cuda.is_built():
        pytest.skip("a CUDA build of torch decides batch_norm in training mode")
    choice = cuda_autocast_dtype(
        lambda x, mean, var: torch.nn.functional.batch_norm(x, mean, var, training=True),
        torch.ones(4, 3),
        torch.zeros(3),
        torch.ones(3),
    )
    assert choice.dtype == NOT_KNOWN
    assert "cuda" in choice.error.lower()


def test_decisions_take_format_names_and_refuse_bad_input() -> None:
    x = torch.ones(4, 4)
    assert cuda_autocast_dtype(torch.mm, x, x, dtype="bf16").dtype == "bfloat16"
    with pytest.raises(ValueError, match="dtype must be one of"):
        cuda_autocast_dtype(torch.mm, x, x, dtype=torch.float32)
    with pytest.raises(TypeError, match="fn must be callable, got str"):
        cuda_autocast_dtype("mm", x, x)


@pytest.mark.cuda
def test_a_real_cuda_run_does_what_torch_decides() -> None:
    """On a GPU the ops run for real: every one must match the fake-tensor decision."""
    for dtype in LOW:
        rows = op_dtypes(dtype, device="cuda")
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


@pytest.mark.book
def test_the_page_fails_when_cudas_choice_for_an_op_differs_from_its_words(
    tmp_path: Path,
) -> None:
    """The autocast page's words about CUDA are checked against torch's decisions: expect relu
    on CUDA's FP32 list (torch keeps it in its input's dtype) and the build fails, naming the
    claim."""
    page = "chapter/autocast"
    listed = 'FP32_LIST = ("softmax", '
    assert listed in (DOCS / f"{page}.md").read_text(encoding="utf-8")
    flipped = build_one_page(
        tmp_path, page, lambda text: text.replace(listed, 'FP32_LIST = ("relu", ')
    )
    assert flipped.returncode != 0
    assert "claim 'cuda_fp32_list'" in flipped.stdout + flipped.stderr
