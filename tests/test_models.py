"""Tests for amp_lesson.models: the one seeded factory every page's models come from."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from amp_lesson.models import make_mlp, make_transformer_block, seeded


def linear_shapes(model: nn.Module) -> list[tuple[int, int]]:
    return [(m.in_features, m.out_features) for m in model if isinstance(m, nn.Linear)]


def test_make_mlp_is_seeded_and_leaves_global_rng() -> None:
    torch.manual_seed(1)
    expected = torch.rand(2)
    torch.manual_seed(1)
    a, b = make_mlp(4, 8, 2, seed=3, device="cpu"), make_mlp(4, 8, 2, seed=3, device="cpu")
    assert torch.equal(torch.rand(2), expected)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    c = make_mlp(4, 8, 2, seed=4, device="cpu")
    assert not torch.equal(a[0].weight, c[0].weight)


@pytest.mark.parametrize(
    ("kwargs", "shapes"),
    [
        ({"in_features": 4, "width": 8, "depth": 3}, [(4, 8), (8, 8), (8, 8), (8, 1)]),
        ({"in_features": 64, "width": (128, 64), "out_features": 10},
         [(64, 128), (128, 64), (64, 10)]),
        ({"in_features": 16, "width": 16, "depth": 3, "out_features": 16}, [(16, 16)] * 4),
        ({"in_features": 5, "depth": 0, "out_features": 2}, [(5, 2)]),
    ],
)  # fmt: skip
def test_make_mlp_shapes(kwargs: dict, shapes: list[tuple[int, int]]) -> None:
    model = make_mlp(**kwargs, device="cpu")
    assert linear_shapes(model) == shapes
    # a ReLU after every hidden layer and none after the head
    assert [type(m) for m in model].count(nn.ReLU) == len(shapes) - 1
    assert isinstance(model[-1], nn.Linear)


def test_make_mlp_draws_like_the_layers_built_by_hand() -> None:
    """The factory draws the same weights as its layers built in order under the same seed."""
    with seeded(5):
        by_hand = [nn.Embedding(16, 8), nn.Linear(8, 8), nn.Linear(8, 16)]
    model = make_mlp(8, 8, 1, 16, vocab=16, seed=5, device="cpu")
    built = [m for m in model if isinstance(m, (nn.Embedding, nn.Linear))]
    for a, b in zip(by_hand, built, strict=True):
        assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


@pytest.mark.parametrize(("norm", "layer"), [("batch", nn.BatchNorm1d), ("layer", nn.LayerNorm)])
def test_make_mlp_norm_goes_before_each_relu(norm: str, layer: type) -> None:
    model = make_mlp(2, 8, 2, 1, norm=norm, device="cpu")
    kinds = [type(m) for m in model]
    assert kinds == [nn.Linear, layer, nn.ReLU, nn.Linear, layer, nn.ReLU, nn.Linear]


def test_make_mlp_with_vocab_takes_token_ids() -> None:
    model = make_mlp(8, depth=0, out_features=16, vocab=16, device="cpu")
    assert isinstance(model[0], nn.Embedding)
    assert model(torch.zeros(2, 5, dtype=torch.long)).shape == (2, 5, 16)


def test_make_mlp_dtype() -> None:
    assert make_mlp(4, 8, 1, dtype=torch.float64, device="cpu")[0].weight.dtype == torch.float64


def test_make_mlp_rejects_bad_input() -> None:
    for name in ("in_features", "width", "out_features"):
        with pytest.raises(ValueError, match=rf"{name} must be an integer >= 1, got 0"):
            make_mlp(**{name: 0}, device="cpu")
    with pytest.raises(ValueError, match=r"depth must be an integer >= 0, got -1"):
        make_mlp(depth=-1, device="cpu")
    with pytest.raises(ValueError, match=r"depth must be the number of widths \(2\)"):
        make_mlp(4, (8, 8), depth=3, device="cpu")
    with pytest.raises(TypeError, match=r"width must be an int or a sequence"):
        make_mlp(4, 8.0, device="cpu")
    with pytest.raises(ValueError, match=r"norm must be one of 'batch', 'layer'"):
        make_mlp(norm="group", device="cpu")
    with pytest.raises(ValueError, match=r"seed must be an integer >= 0"):
        make_mlp(seed=-1, device="cpu")
    with pytest.raises(ValueError, match=r"dtype must be one of"):
        make_mlp(dtype=torch.int64, device="cpu")
    with pytest.raises(TypeError, match=r"dtype must be a torch.dtype"):
        make_mlp(dtype="float32", device="cpu")
    with pytest.raises(TypeError, match=r"device must be a str"):
        make_mlp(device=1)


def test_transformer_block_is_seeded_and_checks_heads() -> None:
    a, b = (
        make_transformer_block(16, 2, 32, device="cpu"),
        make_transformer_block(16, 2, 32, device="cpu"),
    )
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    assert a.dropout.p == 0.0
    with pytest.raises(ValueError, match="divisible by n_heads"):
        make_transformer_block(30, 4, 8)


SEED_BEYOND = (
    r"^seed must be an integer in \[0, 2\*\*64 - 1\] \(the seeds torch's generators take\)"
)


def test_every_seed_torch_takes_is_taken_and_draws_as_torch_draws() -> None:
    top = 2**64 - 1  # torch's largest seed (it reads -1 as this one)
    with seeded(top):
        ours = torch.rand(3)
    assert torch.equal(ours, torch.rand(3, generator=torch.Generator().manual_seed(top)))
    assert make_mlp(2, 4, 1, seed=top, device="cpu")[0].weight.shape == (4, 2)


@pytest.mark.parametrize(
    "make",
    [
        lambda seed: seeded(seed).__enter__(),
        lambda seed: make_mlp(2, 4, 1, seed=seed, device="cpu"),
        lambda seed: make_transformer_block(16, 2, 32, seed=seed, device="cpu"),
    ],
    ids=["seeded", "make_mlp", "make_transformer_block"],
)
def test_a_seed_beyond_torchs_range_gets_the_range_not_an_overflow(make) -> None:
    # torch's own message was "Overflow when unpacking long long"
    with pytest.raises(ValueError, match=SEED_BEYOND + ", got 18446744073709551616$"):
        make(2**64)
    with pytest.raises(ValueError, match=SEED_BEYOND + ", got an integer of about 401 digits$"):
        make(10**400)
    with pytest.raises(ValueError, match=r"^seed must be an integer >= 0, got -1$"):
        make(-1)


def test_seeding_a_model_leaves_every_gpus_generator_alone(monkeypatch) -> None:
    reseeded = []
    monkeypatch.setattr(torch.cuda, "manual_seed_all", lambda seed: reseeded.append(seed))
    with seeded(5):
        a = torch.rand(3)
    assert reseeded == []
    torch.manual_seed(5)  # the CPU stream is the one torch.manual_seed would give
    assert torch.equal(a, torch.rand(3))
    assert reseeded == [5]  # (the patch sees what torch.manual_seed does)
