"""Stochastic rounding and Kahan summation in BF16, and the four digits runs."""

from __future__ import annotations

import pytest
import torch

from amp_lesson.formats import add_in
from amp_lesson.gradients import load_digits_data
from amp_lesson.pure_bf16 import (
    BYTES_PER_PARAM,
    MODES,
    accumulate,
    adam_direction,
    apply_update,
    stochastic_round_bf16,
    train_digits_bf16,
)


def test_stochastic_rounding_picks_a_neighbour_and_is_unbiased() -> None:
    g = torch.Generator().manual_seed(3)
    x = torch.full((200_000,), 1.0 + 3 * 2.0**-10)  # 3/8 of the way from 1 to the next BF16
    r = stochastic_round_bf16(x, g).float()
    assert set(r.unique().tolist()) == {1.0, 1.0 + 2.0**-7}
    share_up = (r > 1).float().mean().item()
    assert share_up == pytest.approx(3 / 8, abs=0.005)  # ~6 standard deviations


def test_stochastic_rounding_keeps_bf16_values_and_signs() -> None:
    x = torch.tensor([1.5, -0.25, 0.0, -3.0]).bfloat16().float()
    assert torch.equal(stochastic_round_bf16(x).float(), x)
    neg = stochastic_round_bf16(torch.full((1000,), -1.001)).float()
    assert set(neg.unique().tolist()) == {-1.0, -1.0078125}


def test_stochastic_rounding_refuses_what_is_not_float32() -> None:
    with pytest.raises(
        TypeError, match=r"x must be a float32 tensor, got a torch\.bfloat16 tensor"
    ):
        stochastic_round_bf16(torch.ones(2, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="x must be a float32 tensor, got float"):
        stochastic_round_bf16(1.0)


def test_round_to_nearest_matches_the_books_add_in() -> None:
    w = 1.0
    for _ in range(100):
        w = add_in(w, 1e-3, "bf16")
    assert accumulate(1.0, 1e-3, 100, "bf16") == w == 1.0


def test_kahan_tracks_the_exact_sum() -> None:
    w = torch.ones(1, dtype=torch.bfloat16)
    c = torch.zeros(1, dtype=torch.bfloat16)
    for _ in range(1000):
        apply_update(w, torch.tensor([1e-3]), "bf16_kahan", c)
    exact = 1.0 + 1000 * torch.tensor(1e-3).item()
    assert abs(w.item() - exact) <= 2.0**-6  # within one BF16 step at 2
    # the BF16 compensation rounds too: the weight minus it is exact to well under 1 % of the
    # thousand updates' sum, where round-to-nearest loses all of it
    assert abs((w.float() - c.float()).item() - exact) < 1e-2
    assert accumulate(1.0, 1e-3, 1000, "bf16") == 1.0


def test_adam_direction_equals_torchs_adam() -> None:
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(5, 3))
    ref = torch.nn.Parameter(p.detach().clone())
    opt = torch.optim.Adam([ref], lr=1e-2, foreach=False)
    m, v = torch.zeros_like(p), torch.zeros_like(p)
    for step in range(1, 6):
        grad = torch.randn(5, 3)
        ref.grad = grad.clone()
        opt.step()
        with torch.no_grad():
            p.add_(adam_direction(grad, m, v, step, lr=1e-2))
    torch.testing.assert_close(p, ref, rtol=0, atol=1e-6)


@pytest.fixture(scope="module")
def runs():
    data = load_digits_data()
    return {mode: train_digits_bf16(data, mode, steps=120, lr=1e-4) for mode in MODES}


def test_small_updates_stall_bf16_and_the_remedies_recover_fp32(runs) -> None:
    tail = {m: sum(r.losses[-10:]) / 10 for m, r in runs.items()}
    assert tail["bf16"] - tail["fp32"] > 0.05
    assert abs(tail["bf16_stochastic"] - tail["fp32"]) < 0.02
    assert abs(tail["bf16_kahan"] - tail["fp32"]) < 0.02
    assert runs["bf16"].rounded_away > 0.5 > runs["fp32"].rounded_away


def test_the_runs_store_what_their_mode_says(runs) -> None:
    assert {m: r.bytes_per_param for m, r in runs.items()} == {
        m: sum(parts.values()) for m, parts in BYTES_PER_PARAM.items()
    }
    assert runs["fp32"].bytes_per_param == 16
    assert runs["bf16"].bytes_per_param == 8
    for m, r in runs.items():
        w = r.params["0.weight"]
        assert torch.equal(w, w.bfloat16().float()) == (m != "fp32")


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: stochastic_round_bf16(torch.ones(2, dtype=torch.float64)),
            TypeError,
            "x must be a float32",
        ),
        (lambda: apply_update(torch.ones(1), torch.ones(1), "bf16"), ValueError, "weight must be"),
        (
            lambda: apply_update(torch.ones(1, dtype=torch.bfloat16), torch.ones(1), "bf16_kahan"),
            ValueError,
            "compensation",
        ),
        (
            lambda: apply_update(torch.ones(2), torch.ones(2, dtype=torch.float64), "fp32"),
            TypeError,
            "update must be a float32 tensor, got a torch.float64 tensor",
        ),
        (
            lambda: apply_update(torch.ones(2), torch.ones(3), "fp32"),
            ValueError,
            "update must have the weight's shape",
        ),
        (
            lambda: apply_update(
                torch.ones(1, dtype=torch.bfloat16), torch.ones(1), "bf16_kahan", torch.zeros(1)
            ),
            ValueError,
            "compensation",
        ),
        (lambda: accumulate(1.0, 1e-3, -1, "bf16"), ValueError, "steps"),
        (lambda: accumulate(1.0, float("nan"), 1, "bf16"), ValueError, "update"),
        (lambda: accumulate(1.0, 1e-3, 1, "fp8"), ValueError, "mode"),
        (lambda: accumulate(1e300, 1e-3, 3, "bf16"), ValueError, "start must be finite"),
        (lambda: accumulate(3e38, 3e38, 3, "fp32"), ValueError, "overflowed"),
        (
            lambda: adam_direction(torch.ones(1), torch.zeros(1), torch.zeros(1), 0, 1e-3),
            ValueError,
            "step",
        ),
        (
            lambda: adam_direction(
                torch.ones(1), torch.zeros(1), torch.zeros(1), 1, 1e-3, betas=(0.9, 1.0)
            ),
            ValueError,
            "betas",
        ),
        (
            lambda: adam_direction(
                torch.ones(1), torch.zeros(1), torch.zeros(1), 1, 1e-3, betas=0.9
            ),
            ValueError,
            "betas",
        ),
        (lambda: train_digits_bf16(load_digits_data(), "bf16", lr=0), ValueError, "lr"),
    ],
)
def test_bad_input_is_named(call, error, message) -> None:
    with pytest.raises(error, match=message):
        call()
