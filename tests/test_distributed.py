"""Tests for amp_lesson.distributed: two real gloo processes on the CPU.

These tests start processes (a few seconds each, most of it importing torch
in the children); one launch serves all the checks of the main run.
"""

from __future__ import annotations

import socket

import pytest
import torch
from torch import nn

from amp_lesson.accumulation import compare_params
from amp_lesson.distributed import (
    SYNC_MODES,
    CallCounter,
    DDPRun,
    counting_allreduce_hook,
    free_port,
    reference_full_batch,
    run_ddp_accumulation,
    train_ddp_accumulated,
)

STEPS = 2
N_ACCUM = 4


@pytest.fixture(scope="module")
def ddp_run() -> DDPRun:
    """All three sync modes, 2 ranks, 4 micro-batches, 2 optimizer steps (one launch)."""
    return run_ddp_accumulation(world_size=2, n_accum=N_ACCUM, steps=STEPS, poison_rank=1)


def test_run_shape(ddp_run: DDPRun) -> None:
    assert set(ddp_run.results) == set(SYNC_MODES)
    assert (ddp_run.world_size, ddp_run.n_accum, ddp_run.steps) == (2, N_ACCUM, STEPS)
    assert ddp_run.micro_batch_size == 128 // 2 // N_ACCUM


def test_allreduce_calls_per_optimizer_step(ddp_run: DDPRun) -> None:
    res = ddp_run.results
    buckets = res["no_sync"].buckets
    assert buckets == 1  # the tiny MLP fits in DDP's first bucket
    assert res["every_micro_batch"].calls_per_step == (N_ACCUM * buckets,) * STEPS
    assert res["no_sync"].calls_per_step == (buckets,) * STEPS
    assert res["require_backward_grad_sync"].calls_per_step == (buckets,) * STEPS
    # no_sync() around backward() alone does nothing: the forward pass armed the all-reduce
    assert res["forward_outside_no_sync"].calls_per_step == (N_ACCUM * buckets,) * STEPS


def test_ranks_end_with_identical_weights(ddp_run: DDPRun) -> None:
    assert all(r.ranks_agree for r in ddp_run.results.values())


def test_every_mode_matches_the_single_process_full_batch(ddp_run: DDPRun) -> None:
    ref = reference_full_batch(steps=STEPS)
    for result in ddp_run.results.values():
        comparison = compare_params(ref, result.tensors())
        # Only the order of float32 additions differs: a few ulps of weights of size ~0.5.
        assert comparison.max_abs_diff < 1e-6, (result.mode, comparison)


def test_no_sync_and_the_flag_are_the_same_computation(ddp_run: DDPRun) -> None:
    a = ddp_run.results["no_sync"].tensors()
    b = ddp_run.results["require_backward_grad_sync"].tensors()
    assert compare_params(a, b).bitwise_equal


def test_a_nan_on_one_rank_makes_every_rank_skip(ddp_run: DDPRun) -> None:
    rows = ddp_run.scaler_check
    assert rows is not None
    assert [r["NaN in this rank's data"] for r in rows] == [False, True]
    assert [r["own loss finite"] for r in rows] == [True, False]
    assert not any(r["gradients finite after the all-reduce"] for r in rows)
    assert all(r["step skipped"] for r in rows)
    assert len({r["scale after"] for r in rows}) == 1


def test_free_port_can_be_bound() -> None:
    port = free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))


def test_call_counter_counts_buckets() -> None:
    counter = CallCounter()
    counter.calls.extend([0, 0, 1])
    assert counter.buckets == 2


def test_the_hook_has_the_annotations_ddp_accepts() -> None:
    import inspect

    import torch.distributed as dist

    sig = inspect.signature(counting_allreduce_hook)
    assert sig.parameters["bucket"].annotation is dist.GradBucket
    assert sig.return_annotation == torch.futures.Future[torch.Tensor]


def test_reference_full_batch_is_deterministic() -> None:
    a, b = reference_full_batch(steps=1), reference_full_batch(steps=1)
    assert compare_params(a, b).bitwise_equal
    assert not compare_params(a, reference_full_batch(steps=2)).bitwise_equal


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"world_size": 0}, ValueError, "world_size"),
        ({"n_accum": 0}, ValueError, "n_accum"),
        ({"steps": 0}, ValueError, "steps"),
        ({"lr": -1.0}, ValueError, "lr"),
        ({"modes": []}, ValueError, "at least one"),
        ({"modes": ["sometimes"]}, ValueError, "mode must be one of"),
        ({"start_method": "thread"}, ValueError, "start_method"),
        ({"start_method": "fork"}, ValueError, "start_method"),
        ({"bucket_cap_mb": 0.0}, ValueError, "bucket_cap_mb"),
        ({"world_size": 64, "n_accum": 4}, ValueError, "fewer than n_accum"),
        ({"poison_rank": 2}, ValueError, "poison_rank must be < world_size"),
        ({"poison_rank": -1}, ValueError, "poison_rank"),
    ],
)
def test_bad_arguments_fail_before_any_process_starts(kwargs, error, match) -> None:
    with pytest.raises(error, match=match):
        run_ddp_accumulation(**kwargs)


def test_train_ddp_accumulated_rejects_an_unknown_sync_mode() -> None:
    model = nn.Linear(2, 1)
    with pytest.raises(ValueError, match="sync must be one of"):
        train_ddp_accumulated(
            model,  # type: ignore[arg-type]
            torch.optim.SGD(model.parameters(), lr=0.1),
            torch.zeros(4, 2),
            torch.zeros(4, 1),
            nn.MSELoss(),
            2,
            sync="never",
        )


def test_a_seed_beyond_torchs_range_is_named_before_any_process_starts() -> None:
    with pytest.raises(ValueError, match=r"^seed must be an integer in \[0, 2\*\*64 - 1\]"):
        run_ddp_accumulation(seed=2**64)
    with pytest.raises(ValueError, match=r"^seed must be an integer in \[0, 2\*\*64 - 1\]"):
        reference_full_batch(seed=2**64)
