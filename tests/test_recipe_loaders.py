"""The recipe on the loaders an engineer has, against a float64 reference that steps per window.

Each case trains :func:`amp_lesson.recipe.train_mixed_precision` on a real loader
(``recipe_loaders.CASES``) and compares the final weights with
:func:`amp_lesson.windows.reference_steps`, which steps once per window on the
window's samples as one batch, within :func:`amp_lesson.windows.recipe_bound`
for the run's dtype. The loop the recipe replaced (each micro-batch's mean
loss divided by ``accum_steps``) is run beside it and must land outside the
FP32 bound wherever its weighting is wrong, so the comparison can fail.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Mapping

import pytest
import torch
from recipe_loaders import (
    CASES,
    DDP_ACCUM,
    DDP_SIZES,
    LR,
    PAD,
    as_pair,
    count_tokens,
    ddp_batches,
    ddp_token_batches,
    ddp_worker,
    run_case,
)

from amp_lesson.distributed import free_port, start_ranks
from amp_lesson.recipe import train_mixed_precision
from amp_lesson.windows import recipe_bound, reference_steps, split_windows

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def reference_and_bound(case, dtype, param_dtype=torch.float32):
    windows = split_windows([as_pair(batch) for batch in case.make()], case.accum_steps)
    steps = reference_steps(torch.zeros(1, 2), windows, LR, epochs=case.epochs)
    return steps, recipe_bound(windows, steps, LR, dtype, param_dtype)


def distance(weight, reference):
    return float(torch.linalg.vector_norm(weight.double() - reference))


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("name", CASES)
def test_the_recipe_lands_within_the_derived_bound_of_the_float64_reference(name, dtype):
    case = CASES[name]
    weight, scale = run_case(train_mixed_precision, case, dtype)
    steps, bound = reference_and_bound(case, dtype)
    assert distance(weight, steps[-1]) <= bound
    # The bound assumes no skipped step: FP16's scale never backed off; BF16 and FP32 scale nothing.
    assert scale == (65536.0 if dtype == torch.float16 else 1.0)
    assert distance(steps[-1], steps[0]) > 2 * bound  # it trained further than the bound allows


@pytest.mark.parametrize("name", CASES)
def test_in_float64_the_recipe_is_the_reference_up_to_float64_rounding(name):
    case = CASES[name]
    weight, _ = run_case(train_mixed_precision, case, torch.float32, param_dtype=torch.float64)
    steps, bound = reference_and_bound(case, torch.float32, torch.float64)
    assert weight.dtype == torch.float64
    assert distance(weight, steps[-1]) <= bound < 1e-13


def divided_by_accum_steps(model, loader, loss_fn, optimizer, *, accum_steps, epochs, dtype,
                           count=len):  # fmt: skip
    """The loop before: each micro-batch's mean loss divided by accum_steps; windows as above."""
    del count
    scaler = torch.amp.GradScaler("cpu", enabled=dtype == torch.float16)
    for _ in range(epochs):
        batches = iter(loader)
        while window := list(itertools.islice(batches, accum_steps)):
            for batch in window:
                with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
                    if isinstance(batch, Mapping):  # model(**batch), as Hugging Face's loops
                        out = model(**batch)
                        own = (
                            out["loss"] if isinstance(out, Mapping) else getattr(out, "loss", None)
                        )
                        loss = own if loss_fn is None else loss_fn(out, batch)
                    else:
                        x, y = batch
                        loss = loss_fn(model(x), y)
                    loss = loss / accum_steps
                scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    return scaler


@pytest.mark.parametrize(("dtype", "margin"), [(torch.float16, 1.5), (torch.float32, 1000)])
@pytest.mark.parametrize("name", CASES)
def test_dividing_by_accum_steps_lands_outside_the_bound_on_these_loaders(name, dtype, margin):
    case = CASES[name]
    weight, _ = run_case(divided_by_accum_steps, case, dtype)
    steps, bound = reference_and_bound(case, dtype)
    assert distance(weight, steps[-1]) > margin * bound


def test_bf16_runs_without_a_scaler_and_fp16_with_one():
    case = CASES["drop_last=False, short last batch"]
    scalers = {}

    def keep(*args, **kwargs):
        scalers[kwargs["dtype"]] = train_mixed_precision(*args, **kwargs)
        return scalers[kwargs["dtype"]]

    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        run_case(keep, case, dtype)
    assert [s.is_enabled() for s in scalers.values()] == [True, False, False]


def test_a_plain_model_is_not_asked_to_skip_a_sync():
    class Watched(torch.nn.Linear):
        def no_sync(self):  # called for all but each window's last micro-batch
            calls.append(True)
            return contextlib.nullcontext()

    calls: list[bool] = []
    model = Watched(2, 1, bias=False)
    batches = [(torch.ones(4, 2), torch.ones(4, 1))] * 7
    train_mixed_precision(
        model, batches, torch.nn.BCEWithLogitsLoss(), torch.optim.SGD(model.parameters()),
        accum_steps=3,
    )  # fmt: skip
    assert len(calls) == 2 + 2 + 0  # windows of 3, 3 and 1
    plain = torch.nn.Linear(2, 1)
    assert not hasattr(plain, "no_sync")


def ddp_results(tmp_path, source=None, tokens=False):
    tmp_path.mkdir(parents=True, exist_ok=True)
    start_ranks(ddp_worker, (2, free_port(), str(tmp_path), source, tokens), 2, "forkserver")
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]


def ddp_reference():
    """Both ranks' window t together: DDP averages equal-sized ranks into the global mean."""
    per_rank = [split_windows(ddp_batches(rank), DDP_ACCUM) for rank in range(2)]
    windows = [a + b for a, b in zip(*per_rank, strict=True)]
    steps = reference_steps(torch.zeros(1, 2), windows, LR, epochs=2)
    return steps, recipe_bound(windows, steps, LR, torch.float16)


def test_under_ddp_the_recipe_all_reduces_once_per_window_and_matches_the_reference(tmp_path):
    ranks = ddp_results(tmp_path)
    windows = -(-len(DDP_SIZES) // DDP_ACCUM)  # 7 micro-batches a rank: windows of 3, 3, 1
    assert [r["calls"] for r in ranks] == [2 * windows] * 2  # two epochs, one bucket
    assert ranks[0]["weight"] == ranks[1]["weight"]
    assert [r["scale"] for r in ranks] == [65536.0] * 2
    steps, bound = ddp_reference()
    assert distance(torch.tensor([ranks[0]["weight"]]), steps[-1]) <= bound


def test_under_ddp_a_token_count_weighs_every_token_of_every_rank_alike(tmp_path):
    """The ranks' windows hold different numbers of tokens; DDP averages the ranks alike, so
    the recipe divides by the mean over the ranks of their windows' counts. In FP32 its
    weights land within FP32's bound of the float64 reference that steps on both ranks'
    windows as one batch; weighting each rank by its own count would land far outside it."""
    ranks = ddp_results(tmp_path, tokens=True)
    assert ranks[0]["weight"] == ranks[1]["weight"]
    per_rank = [split_windows(ddp_token_batches(rank), 2) for rank in range(2)]
    counts = [[sum(count_tokens(y) for _, y in w) for w in windows] for windows in per_rank]
    assert all(a != b for a, b in zip(*counts, strict=True))  # the ranks' counts differ
    windows = [a + b for a, b in zip(*per_rank, strict=True)]
    steps = reference_steps(torch.zeros(1, 2), windows, LR, epochs=2)
    bound = recipe_bound(windows, steps, LR, torch.float32)
    assert distance(torch.tensor([ranks[0]["weight"]]), steps[-1]) <= bound
    # each rank's window weighted by its own count: the mean of the ranks' window means
    w = torch.zeros(1, 2, dtype=torch.float64)
    for _ in range(2):
        for pair in zip(*per_rank, strict=True):
            grads = []
            for window in pair:
                X, y = [], []
                for x, t in window:
                    real = (t != PAD).squeeze(-1)
                    X.append(x[real].double())
                    y.append(t[real].double())
                X, y = torch.cat(X), torch.cat(y)
                grads.append(X.T @ (torch.sigmoid(X @ w.T) - y) / len(y))
            w = w - LR * torch.stack(grads).mean(0).T
    assert distance(w, steps[-1]) > 100 * bound
