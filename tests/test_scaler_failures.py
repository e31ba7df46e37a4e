"""Tests for amp_lesson.scaler_failures: each GradScaler failure shows, and each fix removes it."""

from __future__ import annotations

import math

import pytest
import torch

from amp_lesson.scaler import simulate
from amp_lesson.scaler_failures import (
    clipping_rows,
    collapse_then_good_step,
    scaler_extra_calls,
    scaler_on_bf16_params,
    scheduler_after_skipped_step,
)

CPU = torch.device("cpu")


# --------------------------------------------------------------------------- GradScaler


def test_scale_collapses_and_a_clean_step_then_poisons_the_weights() -> None:
    zero_at = next(r.step for r in simulate([True] * 200) if r.scale_after == 0.0)
    rows = collapse_then_good_step(n_bad=zero_at + 1, n_good=2, device=CPU)
    bad, first_clean = rows[: zero_at + 1], rows[zero_at + 1]
    assert all(r.nan_data and r.found_inf and not r.weights_changed for r in bad)
    assert [r.scale for r in bad[:3]] == [2.0**16, 2.0**15, 2.0**14]
    assert bad[-1].scale == 0.0
    assert math.isinf(bad[-1].inv_scale)
    assert first_clean.scale == 0.0
    assert not first_clean.nan_data
    assert not first_clean.found_inf  # the check runs on the scaled (zero) gradient
    assert first_clean.weights_changed
    assert not first_clean.weights_finite


def test_inv_scale_overflows_before_the_scale_reaches_zero() -> None:
    rows = collapse_then_good_step(n_bad=150, n_good=1, device=CPU)
    assert rows[-1].scale > 0.0
    assert math.isinf(rows[-1].inv_scale)
    assert not rows[-1].weights_finite


def test_clipping_before_unscale_clips_the_wrong_norm() -> None:
    rows = clipping_rows(clip_norm=0.1, init_scales=(2.0**16, 2.0**-4), device=CPU)
    right_big, wrong_big, right_small, wrong_small = rows
    for right in (right_big, right_small):
        assert right["applied grad norm"] == pytest.approx(right["should apply"], rel=1e-4)
    # scale > 1: clipped far too hard (by the scale); scale < 1: not clipped at all
    assert wrong_big["applied grad norm"] == pytest.approx(0.1 / 2.0**16, rel=1e-3)
    assert wrong_small["applied grad norm"] == pytest.approx(
        wrong_small["true grad norm"], rel=1e-4
    )


def test_scaler_under_bf16_changes_nothing_but_adds_calls() -> None:
    extra, same = scaler_extra_calls(torch.bfloat16, CPU)
    assert same  # the weights are bitwise those of the run without a scaler
    assert extra  # yet the enabled scaler made calls the disabled one did not
    assert all(count >= 1 for count in extra.values())


@pytest.mark.observation
def test_scaler_extra_calls_on_this_build() -> None:
    """Observed with torch 2.13 on the CPU: GradScaler's private kernels, one call each.

    The names are torch internals (the page quotes them); a torch release
    may rename or fuse them without anything being wrong here.
    """
    extra, _ = scaler_extra_calls(torch.bfloat16, CPU)
    assert extra["_amp_foreach_non_finite_check_and_unscale_"] == 1
    assert extra["_amp_update_scale_"] == 1
    assert extra["item"] == 1


def test_scaler_accepts_bf16_grads_on_cpu() -> None:
    result = scaler_on_bf16_params(CPU)
    assert result == {"device": "cpu", "ok": True, "error": None, "weights changed": True}


@pytest.mark.cuda
def test_scaler_refuses_bf16_grads_on_cuda() -> None:
    result = scaler_on_bf16_params("cuda")
    assert not result["ok"]
    assert "not implemented for 'BFloat16'" in result["error"]


def test_scheduler_warning_after_a_skipped_first_step() -> None:
    rows, warned = scheduler_after_skipped_step(guard=False, device=CPU)
    assert rows[0]["skipped"]
    assert not any(r["skipped"] for r in rows[1:])
    assert rows[0]["lr after"] == pytest.approx(0.05)  # decayed although nothing was stepped
    assert len(warned) == 1
    assert warned[0].startswith("Detected call of `lr_scheduler.step()`")
    rows, warned = scheduler_after_skipped_step(guard=True, device=CPU)
    assert warned == []
    assert rows[0]["lr after"] == pytest.approx(0.1)
    assert [r["lr used"] for r in rows[1:]] == pytest.approx([0.1, 0.05, 0.025])


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_scaler_extra_calls_refuses_a_dtype_autocast_would_ignore(dtype) -> None:
    # autocast only warned, switched itself off and the run went on in float32
    with pytest.raises(ValueError, match=r"^dtype must be one of 'fp16', 'bf16'"):
        scaler_extra_calls(dtype, device=CPU)
