"""A float16 job checkpointed mid-window resumes to the bit; the mistakes each change the run."""

from __future__ import annotations

import io

import pytest
import torch

from amp_lesson.training_job import (
    CUSTOM_FUNCTION_VARIANTS,
    compare_compiled,
    dtypes_in_custom_function,
    load_checkpoint,
    make_job,
    micro_batch,
    penalty_step,
    save_checkpoint,
    train_micro_batches,
    train_two_models,
)

TOTAL = 40


def _same(a, b) -> bool:
    return all(
        torch.equal(x, y) for x, y in zip(a.model.parameters(), b.model.parameters(), strict=True)
    )


@pytest.fixture(scope="module")
def uninterrupted():
    job = make_job()
    return job, train_micro_batches(job, 0, TOTAL)


def test_the_scaler_has_a_history_a_checkpoint_must_keep(uninterrupted) -> None:
    job, trace = uninterrupted
    assert trace[0]["skipped"]
    assert trace[0]["scale"] == 2.0**16
    assert job.scaler.get_scale() < 2.0**16
    assert not trace[-1]["skipped"]


@pytest.mark.parametrize("stop", [8, 13, 22, 31])  # at a window boundary and inside windows
def test_a_resumed_run_is_bitwise_the_uninterrupted_one(uninterrupted, stop: int) -> None:
    full, _ = uninterrupted
    first = make_job()
    train_micro_batches(first, 0, stop)
    resumed, start = load_checkpoint(save_checkpoint(first, stop))
    assert start == stop
    assert not _same(resumed, make_job(seed=1))  # the fresh model's weights were replaced
    train_micro_batches(resumed, start, TOTAL)
    assert _same(full, resumed)
    assert resumed.scaler.state_dict() == full.scaler.state_dict()
    for a, b in zip(full.optimizer.state.values(), resumed.optimizer.state.values(), strict=True):
        assert all(torch.equal(a[k], b[k]) for k in ("exp_avg", "exp_avg_sq", "step"))


def test_without_the_scaler_state_the_scale_restarts_and_skips_again(uninterrupted) -> None:
    full, trace = uninterrupted
    first = make_job()
    train_micro_batches(first, 0, 22)
    resumed, start = load_checkpoint(save_checkpoint(first, 22, with_scaler=False))
    after = train_micro_batches(resumed, start, TOTAL)
    assert after[0]["scale"] == 2.0**16
    assert sum(r["skipped"] for r in after) > sum(
        r["skipped"] for r in trace if r["micro-batch"] >= 22
    )
    assert not _same(full, resumed)


def test_without_the_window_position_the_windows_shift(uninterrupted) -> None:
    full, _ = uninterrupted
    first = make_job()
    train_micro_batches(first, 0, 22)
    resumed, start = load_checkpoint(save_checkpoint(first, 22))
    resumed.optimizer.zero_grad()
    after = train_micro_batches(resumed, start, TOTAL, window_start=start)
    assert [r["micro-batch"] for r in after] == [25, 29, 33, 37]
    assert not _same(full, resumed)


def test_the_checkpoint_holds_the_scaled_window_gradients() -> None:
    job = make_job()
    train_micro_batches(job, 0, 6)
    checkpoint = torch.load(io.BytesIO(save_checkpoint(job, 6)))
    grads = checkpoint["grads"]
    assert all(g is not None for g in grads)
    assert checkpoint["scaler"]["scale"] == job.scaler.get_scale()


def test_one_scaler_lets_one_optimizer_skip_while_the_other_steps() -> None:
    rows = train_two_models(steps=6)
    assert any(r["model 0 stepped"] and not r["model 1 stepped"] for r in rows)
    assert all(r["model 0 stepped"] for r in rows)
    scales = [r["scale"] for r in rows]
    skips = [not r["model 1 stepped"] for r in rows]
    # one update per iteration: the scale halves once per iteration with an overflow
    for a, b, skipped in zip(scales, scales[1:], skips, strict=False):
        assert b == (a / 2 if skipped else a)


def test_a_penalty_from_unscaled_gradients_matches_fp32_and_from_scaled_ones_does_not() -> None:
    ref, right, wrong = (penalty_step(v, steps=6) for v in ("fp32", "unscaled", "scaled"))
    assert right["first penalty"] == pytest.approx(ref["first penalty"], rel=1e-3)
    assert right["skipped"] == 0
    assert wrong["first penalty"] == pytest.approx(2.0**16 * ref["first penalty"], rel=1e-3)
    assert wrong["skipped"] > 0
    gap = max((right["params"][k] - ref["params"][k]).abs().max().item() for k in ref["params"])
    assert gap < 1e-3


def test_custom_function_dtypes_with_and_without_the_decorators() -> None:
    seen = {v: dtypes_in_custom_function(v) for v in CUSTOM_FUNCTION_VARIANTS}
    assert seen["plain"]["autocast in forward"]
    assert not seen["plain"]["autocast in backward"]
    assert seen["plain"]["backward"].startswith("RuntimeError")
    assert seen["custom_fwd"]["autocast in backward"]
    assert seen["custom_fwd"]["grad of a in backward"] == "torch.bfloat16"
    cast = seen["custom_fwd(cast_inputs=float32)"]
    assert cast["forward inputs"] == "torch.float32, torch.float32"
    assert cast["output"] == "torch.float32"


def test_micro_batches_repeat_after_an_epoch() -> None:
    assert torch.equal(micro_batch(0)[0], micro_batch(16)[0])
    assert not torch.equal(micro_batch(0)[0], micro_batch(1)[0])


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: micro_batch(-1), ValueError, "i"),
        (lambda: train_micro_batches(make_job(), 5, 3), ValueError, "stop"),
        (lambda: train_micro_batches(make_job(), 0, 4, n_accum=0), ValueError, "n_accum"),
        (lambda: save_checkpoint(make_job(), -2), ValueError, "micro_step"),
        (lambda: penalty_step("halfway"), ValueError, "variant"),
        (lambda: dtypes_in_custom_function("decorated"), ValueError, "variant"),
        (lambda: compare_compiled(dtype=torch.float32), ValueError, "dtype"),
        (lambda: make_job(seed=-1), ValueError, "seed"),
        (
            lambda: train_micro_batches(make_job(), 0, 4, window_start=1.5),
            TypeError,
            "window_start must be an integer",
        ),
        (
            lambda: dtypes_in_custom_function("plain", dtype=torch.float32),
            ValueError,
            "dtype",
        ),
        (
            lambda: dtypes_in_custom_function("plain", dtype="bfloat16"),
            TypeError,
            "dtype must be a torch.dtype",
        ),
    ],
)
def test_bad_input_is_named(call, error, message) -> None:
    with pytest.raises(error, match=message):
        call()
