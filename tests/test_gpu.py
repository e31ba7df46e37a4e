"""What the book claims about CUDA, checked on a CUDA GPU.

Every test is marked ``cuda``: tests/conftest.py skips them, with a reason,
when ``torch.cuda.is_available()`` is False. ``tools/gpu_check.sh`` runs them
(with the recording) on a GPU machine.

- autocast's CUDA per-op dtypes are the ones the PyTorch AMP documentation
  lists (https://pytorch.org/docs/stable/amp.html, "CUDA Ops that can
  autocast to float16 / to float32 / promote to the widest input type", and
  "Prefer binary_cross_entropy_with_logits over binary_cross_entropy");
- ``torch.amp.GradScaler("cuda")`` follows :func:`amp_lesson.scaler.simulate`;
- gradient accumulation equals the full batch within the bound the CPU tests
  state (tests/test_accumulation.py);
- the token-loss functions give the CPU's numbers on CUDA, for a batch made on either;
- autocast FP16 makes the GEMM-heavy training step faster than FP32;
- ``amp_lesson.bench.record`` writes a recording that loads back.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from test_accumulation import LOSS, LR, amp_vs_fp32_bound, fp32_sum_bound
from torch import nn

from amp_lesson import bench
from amp_lesson.accumulation import (
    compare_params,
    make_toy_model,
    make_toy_optimizer,
    make_toy_problem,
    max_abs_diff,
    train_accumulated,
    train_amp_accumulated,
    train_full_batch,
)
from amp_lesson.accumulation_pitfalls import (
    TOKEN_METHODS,
    make_token_batch,
    token_loss_and_grad,
    token_weight_rows,
)
from amp_lesson.models import make_mlp
from amp_lesson.scaler import run_torch_scaler, simulate

CUDA = torch.device("cuda")
# Small sizes for the record round trip: the point is the file, not the numbers.
SMALL = bench.BenchSizes(
    batch=256, width=64, depth=2, tf_batch=2, seq_len=32, d_model=64, n_heads=4, ff=128,
    warmup=1, repeats=3,
)  # fmt: skip


def _low_dtypes() -> list[torch.dtype]:
    dtypes = [torch.float16]
    if torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False):
        dtypes.append(torch.bfloat16)
    return dtypes


def _tensors(dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """FP32 inputs, and a half-precision ``h`` made by an autocast matmul."""
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(8, 16, device=CUDA, generator=g)
    b = torch.randn(16, 16, device=CUDA, generator=g)
    with torch.autocast("cuda", dtype=dtype):
        h = a @ b
    assert h.dtype == dtype
    return {"a": a, "b": b, "h": h}


# --------------------------------------------------------------------------- per-op dtypes

# "CUDA Ops that can autocast to float16" (also what they run in under bfloat16).
LOWER = {
    "mm": lambda t: torch.mm(t["a"], t["b"]),
    "matmul": lambda t: t["a"] @ t["b"],
    "bmm": lambda t: torch.bmm(t["a"][None], t["b"][None]),
    "addmm": lambda t: torch.addmm(t["b"][0], t["a"], t["b"]),
    "linear": lambda t: F.linear(t["a"], t["b"]),
    "conv2d": lambda t: F.conv2d(t["a"][None, None], t["b"][None, None, :3, :3]),
    "conv1d": lambda t: F.conv1d(t["a"][None], t["b"][:, :8, None].contiguous()),
}

# "CUDA Ops that can autocast to float32": given half-precision input, they return FP32.
FLOAT32 = {
    "softmax": lambda t: torch.softmax(t["h"], dim=-1),
    "log_softmax": lambda t: F.log_softmax(t["h"], dim=-1),
    "layer_norm": lambda t: F.layer_norm(t["h"], (16,)),
    "sum": lambda t: t["h"].sum(),
    "exp": lambda t: torch.exp(t["h"]),
    "log": lambda t: torch.log(t["h"].abs() + 1),
    "pow": lambda t: torch.pow(t["h"], 2),
    "mse_loss": lambda t: F.mse_loss(t["h"], torch.zeros_like(t["h"])),
    "cross_entropy": lambda t: F.cross_entropy(
        t["h"], torch.zeros(8, dtype=torch.long, device=CUDA)
    ),
    "binary_cross_entropy_with_logits": lambda t: F.binary_cross_entropy_with_logits(
        t["h"], torch.ones_like(t["h"])
    ),
}


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", _low_dtypes(), ids=str)
@pytest.mark.parametrize("op", list(LOWER))
def test_cuda_autocast_runs_matrix_ops_in_lower_precision(op: str, dtype: torch.dtype) -> None:
    t = _tensors(dtype)
    with torch.autocast("cuda", dtype=dtype):
        out = LOWER[op](t)
    assert out.dtype == dtype


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", _low_dtypes(), ids=str)
@pytest.mark.parametrize("op", list(FLOAT32))
def test_cuda_autocast_runs_reductions_norms_and_losses_in_float32(
    op: str, dtype: torch.dtype
) -> None:
    t = _tensors(dtype)
    with torch.autocast("cuda", dtype=dtype):
        out = FLOAT32[op](t)
    assert out.dtype == torch.float32


@pytest.mark.cuda
@pytest.mark.parametrize("call", ["functional", "module"])
def test_cuda_autocast_refuses_binary_cross_entropy(call: str) -> None:
    t = _tensors(torch.float16)
    p = torch.sigmoid(t["h"])
    target = torch.ones_like(p)
    loss = F.binary_cross_entropy if call == "functional" else nn.BCELoss()
    with (
        torch.autocast("cuda", dtype=torch.float16),
        pytest.raises(
            RuntimeError,
            match=r"torch\.nn\.functional\.binary_cross_entropy and torch\.nn\.BCELoss are "
            r"unsafe to autocast",
        ),
    ):
        loss(p, target)


@pytest.mark.cuda
def test_cuda_addcmul_promotes_to_the_widest_input() -> None:
    t = _tensors(torch.float16)
    h = t["h"]
    with torch.autocast("cuda", dtype=torch.float16):
        mixed = torch.addcmul(t["a"], h, h)  # FP32 + FP16 inputs
        low = torch.addcmul(h, h, h)  # FP16 inputs only
    assert mixed.dtype == torch.float32
    assert low.dtype == torch.float16


@pytest.mark.cuda
def test_cuda_autocast_leaves_parameters_and_grads_in_float32() -> None:
    model = nn.Linear(16, 16).to(CUDA)
    with torch.autocast("cuda", dtype=torch.float16):
        out = model(torch.randn(8, 16, device=CUDA))
    out.float().sum().backward()
    assert out.dtype == torch.float16
    assert model.weight.dtype == torch.float32
    assert model.weight.grad.dtype == torch.float32


# --------------------------------------------------------------------------- GradScaler


def _schedules() -> list[tuple[list[bool], dict]]:
    rng = random.Random(0)
    return [
        (
            [True, False, False, True, False, False, False],
            {"init_scale": 8.0, "growth_interval": 2},
        ),
        ([rng.random() < 0.3 for _ in range(60)], {"init_scale": 2.0**10, "growth_interval": 3}),
        ([True] * 20 + [False] * 6, {"growth_interval": 2}),  # default init 2**16
        ([False] * 12, {"init_scale": 2.0**120, "growth_interval": 1}),  # growth capped at FP32
        (
            [True, False, False, False, True],
            {"init_scale": 3.0, "growth_factor": 3.0, "backoff_factor": 0.25, "growth_interval": 1},
        ),
    ]


@pytest.mark.cuda
@pytest.mark.parametrize(("schedule", "kwargs"), _schedules())
def test_cuda_grad_scaler_matches_the_simulator(schedule: list[bool], kwargs: dict) -> None:
    assert run_torch_scaler(schedule, device="cuda", **kwargs) == simulate(schedule, **kwargs)


# --------------------------------------------------------------------------- accumulation


def _fresh():
    model = make_toy_model(device=CUDA)
    return model, make_toy_optimizer(model, lr=LR)


@pytest.mark.cuda
@pytest.mark.parametrize("n_accum", [2, 4, 8])
def test_cuda_accumulation_matches_full_batch_within_the_stated_bound(n_accum: int) -> None:
    X, y = make_toy_problem(device=CUDA)
    full = train_full_batch(*_fresh(), X, y, LOSS)
    accum = train_accumulated(*_fresh(), X, y, LOSS, n_accum)
    diff = compare_params(full, accum).max_abs_diff
    assert diff <= fp32_sum_bound(X.cpu(), full.weight, n_accum, LR)
    assert [round(w, 5) for w in accum.weight.flatten().tolist()] == [0.03085, 0.02717]


@pytest.mark.cuda
@pytest.mark.parametrize("n_accum", [1, 4])
def test_cuda_amp_accumulation_is_close_to_fp32_full_batch(n_accum: int) -> None:
    X, y = make_toy_problem(device=CUDA)
    fp32 = train_full_batch(*_fresh(), X, y, LOSS)
    amp = train_amp_accumulated(*_fresh(), X, y, LOSS, n_accum)
    assert max_abs_diff(fp32, amp) <= amp_vs_fp32_bound(X.cpu(), LR)
    assert amp.final_scale == 2.0**16


@pytest.mark.cuda
@pytest.mark.parametrize("method", TOKEN_METHODS)
def test_cuda_token_losses_match_the_cpu_run_wherever_the_batch_was_made(method: str) -> None:
    def token_model(device: torch.device | str) -> nn.Module:
        return make_mlp(8, depth=0, out_features=16, vocab=16, device=device)

    cpu_loss, cpu_grad = token_loss_and_grad(
        token_model("cpu"), make_token_batch(device="cpu"), 4, method
    )
    on_cuda = make_token_batch(device=CUDA)
    assert on_cuda.labels.device.type == "cuda"
    assert token_weight_rows(on_cuda, 4) == token_weight_rows(make_token_batch(device="cpu"), 4)
    # a batch made on the CPU is moved to the model, as the page's first version did
    for batch in (make_token_batch(device="cpu"), on_cuda):
        loss, grad = token_loss_and_grad(token_model(CUDA), batch, 4, method)
        assert loss == pytest.approx(cpu_loss, rel=1e-5)
        torch.testing.assert_close(grad, cpu_grad, rtol=1e-4, atol=1e-6)


# --------------------------------------------------------------------------- bench


@pytest.mark.cuda
def test_cuda_fp16_beats_fp32_on_the_gemm_heavy_step() -> None:
    rows = bench.run_benchmarks(CUDA, models=["linear_stack"], regimes=["fp32", "fp16"])
    fp32, fp16 = rows
    assert (fp32.regime, fp16.regime) == ("fp32", "fp16")
    for r in rows:
        assert r.timing_method == "cuda_events"
        assert r.peak_bytes > r.saved_bytes > 0
    assert fp16.step_ms < fp32.step_ms, (fp16.step_ms, fp32.step_ms)
    assert fp16.speedup > 1
    assert fp16.saved_bytes < fp32.saved_bytes


@pytest.mark.cuda
def test_cuda_measurement_restores_the_tf32_flags() -> None:
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    for regime in bench.REGIMES:
        bench.measure_step("linear_stack", regime, CUDA, SMALL)
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == before


@pytest.mark.cuda
def test_cuda_record_writes_a_recording_that_loads_back(tmp_path: Path) -> None:
    data = bench.record(CUDA, SMALL)
    path = bench.write_recording(data, tmp_path / "gpu.json")
    (rec,) = bench.load_recordings(tmp_path)
    assert rec.path == path
    assert rec.gpu_name == torch.cuda.get_device_name(CUDA)
    assert rec.provenance["torch_version"] == torch.__version__
    assert rec.provenance["cuda_version"] == torch.version.cuda
    assert rec.sizes == SMALL
    assert [(r.model, r.regime) for r in rec.rows] == [
        (m, g) for m in bench.MODELS for g in bench.REGIMES
    ]
    major, _ = torch.cuda.get_device_capability(CUDA)
    tf32 = next(r for r in rec.rows if r.regime == "tf32")
    assert tf32.available is (major >= 8)
    known = bench.peak_tflops(rec.gpu_name)
    for r in rec.rows:
        if r.available:
            assert r.device_type == "cuda"
            assert r.step_ms > 0
            assert r.peak_bytes > 0
            if known is not None and known[1][r.regime] is not None:
                assert 0 < r.pct_of_peak < 100
