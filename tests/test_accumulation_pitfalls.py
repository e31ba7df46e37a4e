"""Tests for amp_lesson.accumulation_pitfalls: each pitfall shows, and each fix removes it."""

from __future__ import annotations

import math

import pytest
import torch

from amp_lesson.accumulation_pitfalls import (
    IGNORE_INDEX,
    compare_norm_split,
    lr_trajectory,
    make_token_batch,
    summation_order_rows,
    token_loss_and_grad,
    token_weight_rows,
    ulp_distance,
    window_rows,
)
from amp_lesson.models import make_mlp


def make_token_model() -> torch.nn.Sequential:
    """The page's one-layer language model over 16 tokens."""
    return make_mlp(8, depth=0, out_features=16, vocab=16)


# --------------------------------------------------------------------------- BatchNorm


def test_batchnorm_sees_the_micro_batch() -> None:
    bn = compare_norm_split("batch", n_accum=4)
    assert bn.batches_tracked == (1, 4)
    assert bn.output_diff > 0.1
    assert bn.grad_diff > 1e-3
    assert bn.running_mean_diff > 0
    assert bn.running_var_diff > 0
    assert bn.eval_output_diff > 0


def test_one_micro_batch_is_the_full_batch() -> None:
    bn = compare_norm_split("batch", n_accum=1)
    assert bn.batches_tracked == (1, 1)
    assert bn.output_diff == 0.0
    assert bn.running_mean_diff == 0.0


def test_layernorm_does_not_care_how_the_batch_is_cut() -> None:
    ln = compare_norm_split("layer", n_accum=4)
    assert ln.output_diff < 1e-6
    assert ln.grad_diff < 1e-6
    assert ln.eval_output_diff < 1e-6
    assert ln.batches_tracked is None
    assert math.isnan(ln.running_mean_diff)


def test_compare_norm_split_checks_its_arguments() -> None:
    with pytest.raises(ValueError, match="norm must be one of"):
        compare_norm_split("group")
    with pytest.raises(ValueError, match="seed"):
        compare_norm_split("batch", seed=-1)


# --------------------------------------------------------------------------- token losses


def test_token_batch_pads_with_the_ignore_index() -> None:
    batch = make_token_batch(lengths=(2, 5), vocab=4)
    assert batch.labels.shape == (2, 5)
    assert (batch.labels[0, 2:] == IGNORE_INDEX).all()
    assert (batch.labels[1] != IGNORE_INDEX).all()
    assert batch.n_tokens == 7
    with pytest.raises(ValueError, match="at least one"):
        make_token_batch(lengths=())
    with pytest.raises(ValueError, match="device must be one of"):
        make_token_batch(device="mps")


def test_mean_of_means_is_wrong_and_the_global_count_is_right() -> None:
    model, batch = make_token_model(), make_token_batch()
    full_loss, full_grad = token_loss_and_grad(model, batch, 4, "full_batch")
    naive_loss, naive_grad = token_loss_and_grad(model, batch, 4, "mean_of_means")
    fixed_loss, fixed_grad = token_loss_and_grad(model, batch, 4, "global_count")
    assert abs(naive_loss - full_loss) > 1e-3
    assert (naive_grad - full_grad).norm() / full_grad.norm() > 0.05
    assert abs(fixed_loss - full_loss) < 1e-6
    torch.testing.assert_close(fixed_grad, full_grad, rtol=0, atol=1e-6)
    assert all(p.grad is None for p in model.parameters())


def test_equal_lengths_make_the_mean_of_means_right() -> None:
    model, batch = make_token_model(), make_token_batch(lengths=(6,) * 8)
    full_loss, full_grad = token_loss_and_grad(model, batch, 4, "full_batch")
    naive_loss, naive_grad = token_loss_and_grad(model, batch, 4, "mean_of_means")
    assert abs(naive_loss - full_loss) < 1e-6
    torch.testing.assert_close(naive_grad, full_grad, rtol=0, atol=1e-6)


def test_token_weights_sum_to_one_for_the_true_mean() -> None:
    batch = make_token_batch()
    rows = token_weight_rows(batch, 4)
    assert sum(r["tokens"] for r in rows) == batch.n_tokens
    true = sum(r["tokens"] * r["weight per token, true mean"] for r in rows)
    naive = sum(r["tokens"] * r["weight per token, mean of means"] for r in rows)
    assert true == pytest.approx(1.0)
    assert naive == pytest.approx(1.0)
    assert len({r["weight per token, mean of means"] for r in rows}) > 1


def test_token_loss_rejects_unknown_methods() -> None:
    with pytest.raises(ValueError, match="method must be one of"):
        token_loss_and_grad(make_token_model(), make_token_batch(), 4, "median")


# --------------------------------------------------------------------------- windows


@pytest.mark.parametrize(("n_micro", "n_accum"), [(10, 4), (9, 4), (7, 3), (8, 4)])
def test_last_window_is_too_small_by_its_share(n_micro: int, n_accum: int) -> None:
    rows = window_rows(n_micro=n_micro, n_accum=n_accum)
    assert sum(r["micro-batches"] for r in rows) == n_micro
    for r in rows:
        assert r["divide by window"] == pytest.approx(1.0, abs=1e-5)
        assert r["divide by n_accum"] == pytest.approx(r["micro-batches"] / n_accum, abs=1e-5)


# --------------------------------------------------------------------------- summation order


def test_ulp_distance_counts_representable_steps() -> None:
    x = torch.tensor([1.0, -1.0, 0.0])
    up = torch.nextafter(torch.nextafter(x, x + 10), x + 10)
    assert ulp_distance(x, up).tolist() == [2, 2, 2]
    tiny = torch.tensor([math.ldexp(1.0, -149)])
    assert ulp_distance(-tiny, tiny).tolist() == [2]
    with pytest.raises(TypeError, match=r"a must be a float32 tensor, got a torch\.float64 tensor"):
        ulp_distance(x.double(), x.double())
    with pytest.raises(TypeError, match="b must be a float32 tensor, got list"):
        ulp_distance(x, [1.0])


def test_summation_order_changes_bits_but_not_accuracy() -> None:
    rows = {r["order"]: r for r in summation_order_rows()}
    assert rows["forward"]["bitwise equal to forward"]
    assert not all(r["bitwise equal to forward"] for r in rows.values())
    assert all(r["max |error| vs float64"] < 1e-6 for r in rows.values())


# --------------------------------------------------------------------------- schedulers


def test_scheduler_per_micro_batch_decays_n_times_too_fast() -> None:
    good, good_warnings = lr_trajectory(20, 4)
    bad, bad_warnings = lr_trajectory(20, 4, per_micro_batch=True)
    assert good_warnings == []
    assert len(bad_warnings) == 1
    assert "lr_scheduler.step()" in bad_warnings[0]
    # the bad run's optimizer step k used the good schedule's value at 4k (cosine, period 2*T)
    assert bad[0] == pytest.approx(good[4])
    assert min(bad) == pytest.approx(0.0, abs=1e-12)
    assert good == sorted(good, reverse=True)


@pytest.mark.parametrize(
    "func", [compare_norm_split, make_token_batch, summation_order_rows], ids=lambda f: f.__name__
)
def test_a_seed_beyond_torchs_range_is_named(func) -> None:
    # torch's own message was "Overflow when unpacking long long"
    with pytest.raises(ValueError, match=r"^seed must be an integer in \[0, 2\*\*64 - 1\]"):
        func(seed=2**64)
