"""FSDP2 with mixed-precision policies on two real gloo processes (one launch for every check)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from amp_lesson.accumulation import compare_params
from amp_lesson.distributed import reference_full_batch
from amp_lesson.sharded import (
    BF16_REDUCTION,
    POLICIES,
    FSDPRun,
    run_fsdp,
    shard_model,
    train_fsdp_accumulated,
)

STEPS, N_ACCUM = 2, 4


@pytest.fixture(scope="module")
def fsdp_run() -> FSDPRun:
    return run_fsdp(world_size=2, n_accum=N_ACCUM, steps=STEPS)


def test_the_policy_sets_the_gathered_and_the_reduced_dtype(fsdp_run: FSDPRun) -> None:
    for name, (param_dtype, reduce_dtype) in POLICIES.items():
        p = fsdp_run.policies[name]
        assert p["gathered"] == [f"torch.{param_dtype or 'float32'}"]
        assert p["reduced"] == [f"torch.{reduce_dtype or 'float32'}"]
        assert p["output"] == f"torch.{param_dtype or 'float32'}"
        assert p["weight in forward"].startswith(f"torch.{param_dtype or 'float32'}")
        # the stored shards and their gradients keep FP32, half the rows on each of 2 ranks
        assert p["parameter"] == "DTensor torch.float32"
        assert p["gradient shard"] == "torch.float32 (4, 2) of (8, 2)"


def test_communication_counts(fsdp_run: FSDPRun) -> None:
    # 2 units; each gathered for forward and again for backward, on each of 4 micro-batches
    assert all(p["calls per step"] == [2 * 2 * N_ACCUM, 2] for p in fsdp_run.policies.values())
    acc = fsdp_run.accumulation
    assert acc["FSDP2, set_requires_gradient_sync"]["reductions per step"] == 2
    assert acc["FSDP2, sync every micro-batch"]["reductions per step"] == 2 * N_ACCUM
    assert acc["DDP, no_sync"]["reductions per step"] == 1


def test_results_against_the_unsharded_run(fsdp_run: FSDPRun) -> None:
    ref = reference_full_batch(steps=STEPS)
    gap = {n: compare_params(ref, fsdp_run.params(n)).max_abs_diff for n in POLICIES}
    assert gap["no policy (FP32)"] < 1e-6
    assert 1e-5 < gap["param BF16, reduce FP32"] < 1e-2
    for name in fsdp_run.accumulation:
        assert compare_params(ref, fsdp_run.params(name)).max_abs_diff < 1e-6


def test_bf16_accumulation_and_bf16_reduction_are_measured_apart(fsdp_run: FSDPRun) -> None:
    runs = fsdp_run.bf16_reduction
    assert list(runs) == list(BF16_REDUCTION)
    counts = {name: r["reductions per step"] for name, r in runs.items()}
    # with the sync on at every micro-batch, one reduce-scatter per unit and micro-batch
    assert counts == {
        "accumulated FP32, reduced FP32": 2,
        "accumulated BF16, reduced BF16": 2,
        "accumulated FP32, reduced BF16": 2 * N_ACCUM,
    }
    exact = fsdp_run.first_gradient("accumulated FP32, reduced FP32")
    assert {k: (g.dtype, tuple(g.shape)) for k, g in exact.items()} == {
        "0.weight": (torch.float32, (4, 2)),
        "0.bias": (torch.float32, (4,)),
        "2.weight": (torch.float32, (1, 8)),  # a single row: rank 0 holds it, rank 1 none
        "2.bias": (torch.float32, (1,)),
    }

    def error(name: str) -> float:
        g = fsdp_run.first_gradient(name)
        return max(((g[k] - exact[k]).abs().max() / exact[k].abs().max()).item() for k in exact)

    reduce_only, both = (
        error("accumulated FP32, reduced BF16"),
        error("accumulated BF16, reduced BF16"),
    )
    assert 0 < reduce_only < both < 2**-7  # within a few BF16 roundings, and the accumulation adds
    with pytest.raises(ValueError, match="name must be one of"):
        fsdp_run.first_gradient("no policy (FP32)")


def test_unknown_names_and_bad_settings_are_refused(fsdp_run: FSDPRun) -> None:
    with pytest.raises(ValueError, match="name must be one of"):
        fsdp_run.params("FSDP1")
    with pytest.raises(ValueError, match="world_size"):
        run_fsdp(world_size=1)
    with pytest.raises(ValueError, match="start_method"):
        run_fsdp(start_method="fork")
    with pytest.raises(ValueError, match="fewer than n_accum=65"):
        run_fsdp(world_size=2, n_accum=65)
    with pytest.raises(TypeError, match=r"model must be an nn\.Sequential, got Linear"):
        shard_model(nn.Linear(2, 1), None)
    X, y = torch.zeros(3, 2), torch.zeros(3, 1)
    with pytest.raises(ValueError, match="n_accum must be at most the 3 samples"):
        train_fsdp_accumulated(nn.Linear(2, 1), None, X, y, nn.MSELoss(), n_accum=5)
    with pytest.raises(ValueError, match="n_accum"):
        train_fsdp_accumulated(nn.Linear(2, 1), None, X, y, nn.MSELoss(), n_accum=0)
