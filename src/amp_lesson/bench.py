"""What mixed precision buys: step time, memory and achieved TFLOP/s, measured.

Mixed precision is sold on two promises: matrix products run faster in FP16
and BF16 (on GPUs with tensor cores), and the activations kept for backward
take half the bytes. This module measures both for one full training step
(forward, loss, backward, optimizer step) of two models,

- ``"linear_stack"``: ``depth`` ``Linear(width, width)`` layers with ReLU in
  between, nearly all of whose work is matrix products (GEMMs);
- ``"transformer"``: one :class:`torch.nn.TransformerEncoderLayer`
  (``batch_first``, no dropout),

under four regimes (:data:`REGIMES`):

- ``"fp32"``: plain FP32, TF32 switched off;
- ``"tf32"``: FP32 tensors with ``torch.backends.cuda.matmul.allow_tf32 =
  True`` for the run (restored after). TF32 is a tensor-core mode of NVIDIA
  GPUs from Ampere on; a CPU has no such mode, and the row says so instead of
  repeating the FP32 numbers under another name;
- ``"fp16"``: ``torch.autocast(dtype=torch.float16)`` with
  ``torch.amp.GradScaler(device.type)``;
- ``"bf16"``: ``torch.autocast(dtype=torch.bfloat16)``, no scaler.

How each number is taken, by device:

- step time: on CUDA each timed step is bracketed by CUDA events after
  warm-up steps (``timing_method="cuda_events"``); on the CPU by
  :func:`time.perf_counter` (``"perf_counter"``), ``torch.set_num_threads``
  left as it is, with the regimes' steps interleaved (one step of each in
  turn) so that load from other programs falls on all regimes alike. The
  row holds the median, minimum and maximum.
- memory: ``saved_bytes`` are the bytes autograd keeps for backward
  (:func:`amp_lesson.memory.measure_activation_memory`'s saved-tensor
  accounting), taken the same way on both devices; ``peak_bytes`` is
  ``torch.cuda.max_memory_allocated`` over the timed steps after
  ``reset_peak_memory_stats`` (weights, gradients, optimizer state and
  activations together), on CUDA only -- the CPU has no such counter, so it
  is ``None`` there.
- speed-up over FP32: on the CPU the median of the per-round ratios of
  steps timed back to back (:func:`paired_speedup`), on CUDA the ratio of
  the medians.
- FLOPs: counted from the model's shapes (:func:`linear_stack_flops`,
  :func:`transformer_flops`; checked against torch's own counter by
  :func:`torch_counted_flops`), so achieved TFLOP/s is FLOPs / median step
  time. It is set beside the GPU's datasheet peak (:data:`PEAK_TFLOPS`) when
  the GPU is known; a CPU's peak is unknown.

The sizes depend on the device (:func:`bench_sizes`: small enough on a CPU
for the book's page to run in seconds, GEMM-sized on a GPU); every size is
a multiple of 8, and a recording stores the sizes it used.

``python -m amp_lesson.bench --record`` runs everything on a CUDA GPU and
writes ``docs/_data/gpu/<gpu>.json`` with the rows and their provenance;
:func:`load_recordings` reads those files back (a CPU build of the book
shows them beside its live numbers). On the CPU ``--record`` refuses: a
recording holds GPU numbers only.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import gc
import html
import json
import math
import numbers
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from amp_lesson._checks import check_choice, check_int
from amp_lesson.device import device_name, get_device, resolve_device

__all__ = [
    "DEFAULT_FOLDER",
    "MODELS",
    "PEAK_SOURCE",
    "PEAK_TFLOPS",
    "REGIMES",
    "REGIME_LABELS",
    "SCHEMA",
    "TABLE_COLUMNS",
    "BenchRow",
    "BenchSizes",
    "Recording",
    "RecordingError",
    "RecordingsView",
    "bench_sizes",
    "bench_table",
    "cpu_features",
    "linear_stack_flops",
    "load_recordings",
    "main",
    "make_linear_stack",
    "make_train_step",
    "make_transformer_block",
    "matmul_rows",
    "measure_step",
    "paired_speedup",
    "peak_tflops",
    "plot_rows",
    "record",
    "run_benchmarks",
    "slugify",
    "step_flops",
    "torch_counted_flops",
    "transformer_flops",
    "validate_recording",
    "write_recording",
]

REGIMES: tuple[str, ...] = ("fp32", "tf32", "fp16", "bf16")
"""The precision regimes of a benchmark row, in table order."""

MODELS: tuple[str, ...] = ("linear_stack", "transformer")
"""The models of a benchmark row, in table order."""

SCHEMA = "amp_lesson.bench/1"
"""The ``schema`` field of a recording; :func:`validate_recording` checks it."""

DEFAULT_FOLDER = "docs/_data/gpu"
"""Where recordings live, relative to the repository root."""

_AUTOCAST: dict[str, torch.dtype] = {"fp16": torch.float16, "bf16": torch.bfloat16}
REGIME_LABELS: dict[str, str] = {
    "fp32": "FP32", "tf32": "TF32", "fp16": "FP16 autocast", "bf16": "BF16 autocast"
}  # fmt: skip
"""How the book's tables name each regime."""


# --------------------------------------------------------------------------- peaks

PEAK_SOURCE = (
    "NVIDIA product datasheets (dense Tensor Core figures: the datasheets' "
    "'with sparsity' figures halved); FP32 is the non-tensor-core figure"
)
"""Where :data:`PEAK_TFLOPS` comes from."""

# Peak dense TFLOP/s by GPU and format. Source: NVIDIA's datasheets --
#   H100 (SXM5 / PCIe / NVL) and H200 (SXM / NVL): "NVIDIA H100 Tensor Core GPU"
#     and "NVIDIA H200 Tensor Core GPU" datasheets: FP32 67/51/60 and 67/60; TF32
#     989*/756*/835* and 989*/835*; BF16 = FP16 1979*/1513*/1671* and 1979*/1671*,
#     where * means "with sparsity": the dense figure is half (e.g. 1979 / 2).
#   A100 (SXM and PCIe, 40 and 80 GB): "NVIDIA A100 Tensor Core GPU" datasheet:
#     FP32 19.5, TF32 156, BF16 = FP16 312 (dense; 312*/624* with sparsity).
#   A10: "NVIDIA A10 Tensor Core GPU" datasheet: FP32 31.2, TF32 62.5, BF16 = FP16 125.
#   L4: "NVIDIA L4 Tensor Core GPU" datasheet: FP32 30.3, TF32 120*, FP16 = BF16 242*.
#   L40S: "NVIDIA L40S GPU" datasheet: FP32 91.6, TF32 183 (366*), BF16 = FP16 362.05.
#   T4: "NVIDIA T4 Tensor Core GPU" datasheet: FP32 8.1, mixed FP16/FP32 65; Turing
#     has no TF32 and no BF16 tensor cores (None).
#   V100 (SXM2 / PCIe): "NVIDIA Tesla V100" datasheet: FP32 15.7 / 14, tensor
#     (FP16) 125 / 112; no TF32, no BF16.
# Peaks assume boost clocks; a real step reaches a fraction of them.
PEAK_TFLOPS: dict[str, dict[str, float | None]] = {
    "H200 NVL": {"fp32": 60.0, "tf32": 417.5, "fp16": 835.5, "bf16": 835.5},
    "H200 SXM": {"fp32": 67.0, "tf32": 494.5, "fp16": 989.5, "bf16": 989.5},
    "H100 NVL": {"fp32": 60.0, "tf32": 417.5, "fp16": 835.5, "bf16": 835.5},
    "H100 PCIe": {"fp32": 51.0, "tf32": 378.0, "fp16": 756.5, "bf16": 756.5},
    "H100 SXM": {"fp32": 67.0, "tf32": 494.5, "fp16": 989.5, "bf16": 989.5},
    "A100": {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0},
    "L40S": {"fp32": 91.6, "tf32": 183.0, "fp16": 362.05, "bf16": 362.05},
    "L4": {"fp32": 30.3, "tf32": 60.0, "fp16": 121.0, "bf16": 121.0},
    "A10": {"fp32": 31.2, "tf32": 62.5, "fp16": 125.0, "bf16": 125.0},
    "T4": {"fp32": 8.1, "tf32": None, "fp16": 65.0, "bf16": None},
    "V100 PCIe": {"fp32": 14.0, "tf32": None, "fp16": 112.0, "bf16": None},
    "V100 SXM2": {"fp32": 15.7, "tf32": None, "fp16": 125.0, "bf16": None},
}
"""Peak dense TFLOP/s per GPU and regime (``None``: the GPU has no such mode)."""

# torch.cuda.get_device_name() -> key of PEAK_TFLOPS; first match wins.
_GPU_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"\bH200\b.*\bNVL\b", "H200 NVL"),
    (r"\bH200\b", "H200 SXM"),
    (r"\bH100\b.*\bNVL\b", "H100 NVL"),
    (r"\bH100\b.*\bPCIe\b", "H100 PCIe"),
    (r"\bH100\b", "H100 SXM"),
    (r"\bA100\b", "A100"),
    (r"\bL40S\b", "L40S"),
    (r"\bL4\b", "L4"),
    (r"\bA10\b", "A10"),
    (r"\bT4\b", "T4"),
    (r"\bV100\b.*\bPCIe\b", "V100 PCIe"),
    (r"\bV100\b", "V100 SXM2"),
)


def peak_tflops(gpu_name: str) -> tuple[str, dict[str, float | None]] | None:
    """The datasheet peaks of the GPU called ``gpu_name``, or ``None`` if unknown.

    ``gpu_name`` is what ``torch.cuda.get_device_name()`` returns; the result
    is the key of :data:`PEAK_TFLOPS` it matched and that entry. A CPU's
    name matches nothing: its peak is unknown here.

    >>> peak_tflops("NVIDIA H100 80GB HBM3")[0], peak_tflops("NVIDIA A100-SXM4-80GB")[0]
    ('H100 SXM', 'A100')
    >>> peak_tflops("NVIDIA H200")[1]["bf16"]
    989.5
    >>> peak_tflops("CPU (x86_64, 2 cores)") is None
    True
    """
    if not isinstance(gpu_name, str):
        raise TypeError(f"gpu_name must be a str, got {type(gpu_name).__name__} {gpu_name!r}")
    for pattern, key in _GPU_PATTERNS:
        if re.search(pattern, gpu_name, flags=re.IGNORECASE):
            return key, PEAK_TFLOPS[key]
    return None


# --------------------------------------------------------------------------- sizes


@dataclass(frozen=True)
class BenchSizes:
    """The shapes and repeat counts of a benchmark run.

    Every width is a multiple of 8, the size tensor cores tile matrix
    products by. ``batch``, ``width`` and ``depth`` shape the Linear stack;
    ``tf_batch``, ``seq_len``, ``d_model``, ``n_heads`` and ``ff`` the
    transformer block. ``warmup`` steps run untimed before ``repeats`` timed
    ones.

    >>> BenchSizes(batch=16, width=12)
    Traceback (most recent call last):
    ...
    ValueError: width must be a multiple of 8 (tensor cores tile by 8), got 12
    """

    batch: int = 1024
    width: int = 128
    depth: int = 4
    tf_batch: int = 8
    seq_len: int = 64
    d_model: int = 128
    n_heads: int = 4
    ff: int = 512
    warmup: int = 1
    repeats: int = 7

    def __post_init__(self) -> None:
        for f in fields(self):
            check_int(f.name, getattr(self, f.name), minimum=1)
        for name in ("batch", "width", "seq_len", "d_model", "ff"):
            value = getattr(self, name)
            if value % 8:
                raise ValueError(
                    f"{name} must be a multiple of 8 (tensor cores tile by 8), got {value}"
                )
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})"
            )

    def as_dict(self) -> dict[str, int]:
        """The sizes as a plain dict (what a recording stores)."""
        return asdict(self)


# On both devices the batch is several times the width, so the activations
# saved for backward (batch x width per layer) outweigh the half-precision
# weight copies autocast keeps (width x width per layer), as in real training.
# CPU: a step of about 0.4 GFLOP, so even FP16 autocast (slow on CPUs without
# FP16 arithmetic) keeps the page's execution within seconds on 2 cores.
_CPU_SIZES = BenchSizes()
# CUDA: GEMMs big enough that the matrix units, not kernel launches, set the time.
_CUDA_SIZES = BenchSizes(
    batch=16384, width=2048, depth=8, tf_batch=16, seq_len=512, d_model=1024,
    n_heads=16, ff=4096, warmup=5, repeats=20,
)  # fmt: skip


def bench_sizes(device: torch.device | str | None = None) -> BenchSizes:
    """The sizes the book uses on ``device``: small on a CPU, GEMM-sized on CUDA.

    >>> s = bench_sizes("cpu")
    >>> s.width, s.batch, s.depth, s.d_model, s.repeats
    (128, 1024, 4, 128, 7)
    """
    return _CUDA_SIZES if resolve_device(device).type == "cuda" else _CPU_SIZES


# --------------------------------------------------------------------------- models


def make_linear_stack(
    width: int = 256, depth: int = 4, *, seed: int = 0, device: torch.device | str | None = None
) -> nn.Sequential:
    """``depth`` layers ``Linear(width, width)`` with ReLU in between (none after the last).

    PyTorch's default initialisation drawn after ``torch.manual_seed(seed)``
    inside :func:`torch.random.fork_rng`, so the global RNG is left alone.

    >>> make_linear_stack(8, 2, device="cpu")
    Sequential(
      (0): Linear(in_features=8, out_features=8, bias=True)
      (1): ReLU()
      (2): Linear(in_features=8, out_features=8, bias=True)
    )
    """
    check_int("width", width, minimum=1)
    check_int("depth", depth, minimum=1)
    check_int("seed", seed, minimum=0)
    device = resolve_device(device)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        layers: list[nn.Module] = []
        for i in range(depth):
            if i:
                layers.append(nn.ReLU())
            layers.append(nn.Linear(width, width))
    return nn.Sequential(*layers).to(device)


def make_transformer_block(
    d_model: int = 128,
    n_heads: int = 4,
    ff: int = 512,
    *,
    seed: int = 0,
    device: torch.device | str | None = None,
) -> nn.TransformerEncoderLayer:
    """One ``TransformerEncoderLayer(d_model, n_heads, ff)``, ``batch_first``, no dropout.

    >>> block = make_transformer_block(16, 2, 32, device="cpu")
    >>> block.self_attn.embed_dim, block.linear1.out_features, block.self_attn.batch_first
    (16, 32, True)
    """
    for name, value in (("d_model", d_model), ("n_heads", n_heads), ("ff", ff), ("seed", seed)):
        check_int(name, value, minimum=0 if name == "seed" else 1)
    if d_model % n_heads:
        raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
    device = resolve_device(device)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        block = nn.TransformerEncoderLayer(
            d_model, n_heads, dim_feedforward=ff, dropout=0.0, batch_first=True
        )
    return block.to(device)


# --------------------------------------------------------------------------- FLOPs


def linear_stack_flops(width: int, depth: int, batch: int, *, input_grad: bool = False) -> int:
    """FLOPs of the matrix products of one training step of the Linear stack.

    A ``Linear(n_in, n_out)`` on ``batch`` rows does ``batch * n_in * n_out``
    multiply-accumulates (MACs), 2 FLOPs each, forward. Backward does two
    products of the same size: the weight gradient (``x^T @ grad_out``) and
    the input gradient (``grad_out @ W``). So a training step costs 6 FLOPs
    per MAC -- 2 forward, 4 backward -- which is the familiar rule
    ``6 * params * batch``, with ``params`` the weight-matrix entries (biases
    and the elementwise work are left out: they are not matrix products).

    Autograd skips the first layer's input gradient when the input does not
    require grad (the usual case, and the benchmark's), which takes
    ``2 * batch * n_in * n_out`` off; ``input_grad=True`` counts it.

    >>> linear_stack_flops(8, 2, 4, input_grad=True) == 6 * (2 * 8 * 8) * 4
    True
    >>> linear_stack_flops(8, 2, 4)  # 3072 minus the skipped 2 * 4 * 8 * 8
    2560
    """
    check_int("width", width, minimum=1)
    check_int("depth", depth, minimum=1)
    check_int("batch", batch, minimum=1)
    if not isinstance(input_grad, bool):
        raise TypeError(f"input_grad must be True or False, got {input_grad!r}")
    macs = batch * width * width  # per layer
    return 6 * macs * depth - (0 if input_grad else 2 * macs)


def transformer_flops(
    batch: int, seq_len: int, d_model: int, ff: int, *, input_grad: bool = False
) -> int:
    """FLOPs of the matrix products of one training step of a transformer encoder layer.

    Per token, forward: the Q, K, V and output projections are ``4 d^2``
    MACs, the feed-forward ``2 d ff``; attention scores ``Q K^T`` and the
    weighted sum ``A V`` are ``2 L d`` (``L = seq_len``; the head count does
    not change the total). At 2 FLOPs per MAC and 3 times forward for a
    training step (as for :func:`linear_stack_flops`), minus the Q/K/V input
    gradient (``3 d^2`` MACs per token) that autograd skips when the input
    does not require grad (``input_grad=False``).

    >>> transformer_flops(2, 16, 32, 64)
    1572864
    >>> transformer_flops(2, 16, 32, 64, input_grad=True) - transformer_flops(2, 16, 32, 64)
    196608
    """
    for name, value in (("batch", batch), ("seq_len", seq_len), ("d_model", d_model), ("ff", ff)):
        check_int(name, value, minimum=1)
    if not isinstance(input_grad, bool):
        raise TypeError(f"input_grad must be True or False, got {input_grad!r}")
    tokens = batch * seq_len
    forward_macs = tokens * (4 * d_model**2 + 2 * d_model * ff + 2 * seq_len * d_model)
    skipped = 0 if input_grad else tokens * 3 * d_model**2
    return 2 * (3 * forward_macs - skipped)


def step_flops(model: str, sizes: BenchSizes) -> int:
    """FLOPs of one training step of ``model`` (one of :data:`MODELS`) at ``sizes``.

    >>> step_flops("linear_stack", bench_sizes("cpu")) == linear_stack_flops(128, 4, 1024)
    True
    """
    check_choice("model", model, MODELS)
    if not isinstance(sizes, BenchSizes):
        raise TypeError(f"sizes must be a BenchSizes, got {type(sizes).__name__}")
    if model == "linear_stack":
        return linear_stack_flops(sizes.width, sizes.depth, sizes.batch)
    return transformer_flops(sizes.tf_batch, sizes.seq_len, sizes.d_model, sizes.ff)


# --------------------------------------------------------------------------- one step


def make_train_step(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, regime: str
) -> Callable[[], None]:
    """One full training step of ``regime``, as a function that takes no arguments.

    Forward and loss run under ``torch.autocast`` for ``"fp16"`` and
    ``"bf16"`` (plain FP32 for ``"fp32"`` and ``"tf32"``: TF32 is switched on
    outside, for the whole measurement); backward and the optimizer step run
    outside it. ``"fp16"`` routes backward and step through
    ``torch.amp.GradScaler(device.type)``; for the other regimes the scaler is
    built disabled, so ``scale`` is the identity and ``step`` a plain
    ``optimizer.step()``. The optimizer is SGD with momentum.

    >>> model = make_linear_stack(8, 2, device="cpu")
    >>> step = make_train_step(model, torch.ones(4, 8), torch.zeros(4, 8), "bf16")
    >>> step(); model[0].weight.grad is None
    True
    """
    check_choice("regime", regime, REGIMES)
    device = next(model.parameters()).device
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    low = _AUTOCAST.get(regime, torch.float16)
    use_autocast = regime in _AUTOCAST  # fp16, bf16; not fp32, tf32
    scaler = torch.amp.GradScaler(device.type, enabled=regime == "fp16")

    def step() -> None:
        with torch.autocast(device.type, dtype=low, enabled=use_autocast):
            loss = F.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)

    return step


@contextlib.contextmanager
def _tf32(enabled: bool) -> Iterator[None]:
    """Set TF32 for matmul and cuDNN for the block, and restore both after."""
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = matmul
        torch.backends.cudnn.allow_tf32 = cudnn


def _build(
    model: str, sizes: BenchSizes, device: torch.device
) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    if model == "linear_stack":
        net: nn.Module = make_linear_stack(sizes.width, sizes.depth, device=device)
        shape: tuple[int, ...] = (sizes.batch, sizes.width)
    else:
        net = make_transformer_block(sizes.d_model, sizes.n_heads, sizes.ff, device=device)
        shape = (sizes.tf_batch, sizes.seq_len, sizes.d_model)
    x = torch.randn(shape, generator=g).to(device)
    y = torch.randn(shape, generator=g).to(device)
    return net, x, y


def _unavailable(regime: str, device: torch.device) -> str | None:
    """Why ``regime`` cannot run on ``device``, or ``None`` if it can."""
    if device.type == "cpu":
        return "not available on CPU" if regime == "tf32" else None
    major, _ = torch.cuda.get_device_capability(device)
    if regime == "tf32" and major < 8:
        return "not available: TF32 needs compute capability 8.0 (Ampere) or newer"
    if regime == "bf16":
        try:
            ok = torch.cuda.is_bf16_supported(including_emulation=False)
        except TypeError:  # older torch without the keyword
            ok = torch.cuda.is_bf16_supported()
        if not ok:
            return "not available: this GPU has no native BF16"
    return None


@dataclass(frozen=True)
class BenchRow:
    """One measured (or unavailable) training step: a model under a regime on a device.

    Times are milliseconds; ``tflops`` is ``flops / step_ms`` in TFLOP/s;
    ``peak_tflops`` the datasheet peak for the regime (``None`` when unknown,
    as for every CPU) and ``pct_of_peak`` the share of it achieved;
    ``speedup`` is how many times faster than FP32 the step ran (filled in by
    :func:`run_benchmarks`): on a CPU the :func:`paired_speedup` of steps
    timed back to back, on CUDA the FP32 median over this row's median. An unavailable row has ``available=False``, a
    ``note`` saying why, and ``None`` for every measurement.

    >>> row = BenchRow("linear_stack", "tf32", "cpu", available=False, note="not available on CPU")
    >>> row.step_ms is None, row.label
    (True, 'TF32')
    """

    model: str
    regime: str
    device_type: str
    available: bool = True
    note: str | None = None
    step_ms: float | None = None
    step_ms_min: float | None = None
    step_ms_max: float | None = None
    n_timed: int | None = None
    flops: int | None = None
    tflops: float | None = None
    peak_tflops: float | None = None
    pct_of_peak: float | None = None
    speedup: float | None = None
    saved_bytes: int | None = None
    peak_bytes: int | None = None
    timing_method: str | None = None
    memory_method: str | None = None

    @property
    def label(self) -> str:
        """The regime as the book's tables name it."""
        return REGIME_LABELS[self.regime]

    def as_dict(self) -> dict[str, Any]:
        """The row as a plain dict (what a recording stores)."""
        return asdict(self)


def _time_steps(step: Callable[[], None], sizes: BenchSizes, device: torch.device) -> list[float]:
    """Run ``sizes.warmup`` untimed then ``sizes.repeats`` timed steps; milliseconds each."""
    for _ in range(sizes.warmup):
        step()
    times = []
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(sizes.repeats)
        ]
        for start, end in events:
            start.record()
            step()
            end.record()
        torch.cuda.synchronize(device)
        times = [start.elapsed_time(end) for start, end in events]
    else:
        for _ in range(sizes.repeats):
            t0 = time.perf_counter()
            step()
            times.append((time.perf_counter() - t0) * 1e3)
    return times


def _row(
    model: str,
    regime: str,
    device: torch.device,
    flops: int,
    times: list[float],
    saved: int,
    peak_bytes: int | None,
) -> BenchRow:
    """A measured row from the step times (ms), saved bytes and CUDA peak."""
    on_cuda = device.type == "cuda"
    median = statistics.median(times)
    achieved = flops / (median * 1e-3) / 1e12
    peak = peak_tflops(device_name(device)) if on_cuda else None
    peak_value = None if peak is None else peak[1].get(regime)
    return BenchRow(
        model,
        regime,
        device.type,
        step_ms=median,
        step_ms_min=min(times),
        step_ms_max=max(times),
        n_timed=len(times),
        flops=flops,
        tflops=achieved,
        peak_tflops=peak_value,
        pct_of_peak=None if peak_value is None else 100.0 * achieved / peak_value,
        saved_bytes=int(saved),
        peak_bytes=peak_bytes,
        timing_method="cuda_events" if on_cuda else "perf_counter",
        memory_method="saved_tensors + cuda_max_memory_allocated" if on_cuda else "saved_tensors",
    )


def _saved_bytes(net: nn.Module, x: torch.Tensor, regime: str) -> int:
    from amp_lesson.memory import measure_activation_memory

    # The default loss (a sum) saves nothing, so the target y is not counted.
    return measure_activation_memory(net, x, autocast_dtype=_AUTOCAST.get(regime)).saved_bytes


def _measure_cuda(
    model: str, regime: str, device: torch.device, sizes: BenchSizes, flops: int
) -> BenchRow:
    """One regime on the GPU: its own model, TF32 set for the run, the allocator's peak."""
    net, x, y = _build(model, sizes, device)
    with _tf32(regime == "tf32"):
        step = make_train_step(net, x, y, regime)
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        times = _time_steps(step, sizes, device)
        peak_bytes = int(torch.cuda.max_memory_allocated(device))
        saved = _saved_bytes(net, x, regime)
    del net, x, y, step
    gc.collect()
    torch.cuda.empty_cache()
    return _row(model, regime, device, flops, times, saved, peak_bytes)


def paired_speedup(reference_ms: Sequence[float], times_ms: Sequence[float]) -> float:
    """Median over rounds of ``reference / time``: the speed-up of steps timed back to back.

    Round ``i`` timed ``reference_ms[i]`` and ``times_ms[i]`` one right after
    the other, so load from other programs hit both alike; the median of the
    per-round ratios is steadier than the ratio of the two medians.

    >>> paired_speedup([4.0, 40.0, 4.2], [2.0, 20.0, 2.0])
    2.0
    """
    if len(reference_ms) != len(times_ms) or not times_ms:
        raise ValueError(
            f"reference_ms and times_ms must be equally long and non-empty, got "
            f"{len(reference_ms)} and {len(times_ms)}"
        )
    return statistics.median(r / t for r, t in zip(reference_ms, times_ms, strict=True))


def _measure_cpu(
    model: str, regimes: Sequence[str], device: torch.device, sizes: BenchSizes, flops: int
) -> dict[str, BenchRow]:
    """The regimes on the CPU, their timed steps interleaved round-robin.

    Each regime gets its own copy of the model. After every regime's warm-up,
    round ``i`` times step ``i`` of each regime in turn, so a burst of load
    from other programs on the machine slows all regimes alike instead of
    one regime's whole block. With FP32 among several regimes, each row's
    ``speedup`` is :func:`paired_speedup` against FP32.
    """
    built = {regime: _build(model, sizes, device) for regime in regimes}
    steps = {regime: make_train_step(*built[regime], regime) for regime in regimes}
    for regime in regimes:
        for _ in range(sizes.warmup):
            steps[regime]()
    times: dict[str, list[float]] = {regime: [] for regime in regimes}
    for _ in range(sizes.repeats):
        for regime in regimes:
            t0 = time.perf_counter()
            steps[regime]()
            times[regime].append((time.perf_counter() - t0) * 1e3)
    rows = {}
    for regime in regimes:
        row = _row(
            model, regime, device, flops, times[regime],
            _saved_bytes(built[regime][0], built[regime][1], regime), None,
        )  # fmt: skip
        if "fp32" in times and len(times) > 1:
            speedup = paired_speedup(times["fp32"], times[regime])
            row = BenchRow(**{**row.as_dict(), "speedup": speedup})
        rows[regime] = row
    return rows


def _measure_model(
    model: str, regimes: Sequence[str], device: torch.device, sizes: BenchSizes
) -> list[BenchRow]:
    flops = step_flops(model, sizes)
    rows: dict[str, BenchRow] = {}
    runnable = []
    for regime in regimes:
        why_not = _unavailable(regime, device)
        if why_not is None:
            runnable.append(regime)
        else:
            rows[regime] = BenchRow(
                model, regime, device.type, available=False, note=why_not, flops=flops
            )
    if device.type == "cuda":
        for regime in runnable:
            rows[regime] = _measure_cuda(model, regime, device, sizes, flops)
    elif runnable:
        rows.update(_measure_cpu(model, runnable, device, sizes, flops))
    return [rows[regime] for regime in regimes]


def _check_sizes(sizes: Any, device: torch.device) -> BenchSizes:
    sizes = bench_sizes(device) if sizes is None else sizes
    if not isinstance(sizes, BenchSizes):
        raise TypeError(f"sizes must be a BenchSizes or None, got {type(sizes).__name__}")
    return sizes


def measure_step(
    model: str,
    regime: str,
    device: torch.device | str | None = None,
    sizes: BenchSizes | None = None,
) -> BenchRow:
    """Measure one training step of ``model`` under ``regime`` on ``device``.

    ``device=None`` is the book's device (:func:`amp_lesson.device.get_device`);
    ``sizes=None`` is :func:`bench_sizes` for it. See the module docstring for
    how time, memory and FLOPs are taken. ``speedup`` is left ``None`` (it
    needs the FP32 row; :func:`run_benchmarks` fills it in).

    >>> tiny = BenchSizes(batch=16, width=16, depth=2, tf_batch=2, seq_len=8, d_model=16,
    ...                   n_heads=2, ff=32, warmup=1, repeats=2)
    >>> row = measure_step("linear_stack", "bf16", "cpu", tiny)
    >>> row.timing_method, row.memory_method, row.step_ms > 0, row.saved_bytes > 0
    ('perf_counter', 'saved_tensors', True, True)
    >>> measure_step("linear_stack", "tf32", "cpu", tiny).note
    'not available on CPU'
    """
    check_choice("model", model, MODELS)
    check_choice("regime", regime, REGIMES)
    device = resolve_device(device)
    return _measure_model(model, [regime], device, _check_sizes(sizes, device))[0]


def _with_speedups(rows: Sequence[BenchRow]) -> list[BenchRow]:
    """Fill each missing ``speedup`` with the FP32 row's median time over this row's."""
    base = {r.model: r.step_ms for r in rows if r.regime == "fp32" and r.step_ms}
    out = []
    for r in rows:
        ref = base.get(r.model)
        if r.speedup is None and ref and r.step_ms:
            r = BenchRow(**{**r.as_dict(), "speedup": ref / r.step_ms})
        out.append(r)
    return out


def run_benchmarks(
    device: torch.device | str | None = None,
    sizes: BenchSizes | None = None,
    *,
    models: Iterable[str] = MODELS,
    regimes: Iterable[str] = REGIMES,
) -> list[BenchRow]:
    """Measure every model under every regime; rows in :data:`MODELS` x :data:`REGIMES` order.

    ``speedup`` compares each row with the FP32 row of its model (when that
    was measured). On a CPU the regimes of a model are timed interleaved,
    one step of each in turn, so that load from other programs falls on all
    of them alike; on CUDA each regime runs as its own block (TF32 is a
    global switch, and the allocator's peak is taken per regime).

    >>> tiny = BenchSizes(batch=16, width=16, depth=2, tf_batch=2, seq_len=8, d_model=16,
    ...                   n_heads=2, ff=32, warmup=1, repeats=2)
    >>> rows = run_benchmarks("cpu", tiny, models=["linear_stack"])
    >>> [(r.regime, r.available) for r in rows]
    [('fp32', True), ('tf32', False), ('fp16', True), ('bf16', True)]
    >>> rows[0].speedup
    1.0
    """
    models = _check_subset("models", models, MODELS)
    regimes = _check_subset("regimes", regimes, REGIMES)
    device = resolve_device(device)
    sizes = _check_sizes(sizes, device)
    rows = [row for m in models for row in _measure_model(m, regimes, device, sizes)]
    return _with_speedups(rows)


def _check_subset(name: str, values: Any, allowed: Sequence[str]) -> list[str]:
    if isinstance(values, str) or not isinstance(values, Iterable):
        raise TypeError(f"{name} must be a list of names from {list(allowed)}, got {values!r}")
    chosen = [check_choice(name, v, allowed) for v in values]
    if not chosen:
        raise ValueError(f"{name} must name at least one of {list(allowed)}")
    return [a for a in allowed if a in chosen]  # table order, no repeats


def cpu_features() -> dict[str, bool] | None:
    """Which half-precision instructions the CPU has, from ``/proc/cpuinfo`` (Linux).

    ``avx512_bf16`` and ``amx_bf16`` multiply BF16 in hardware;
    ``avx512_fp16`` and ``amx_fp16`` do the same for FP16. A CPU without the
    FP16 ones has to convert FP16 operands before it can multiply them.
    ``None`` where ``/proc/cpuinfo`` cannot be read (not Linux).

    >>> features = cpu_features()
    >>> features is None or sorted(features) == ["amx_bf16", "amx_fp16", "avx512_bf16", "avx512_fp16"]
    True
    """
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    flags: set[str] = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
    return {name: name in flags for name in ("avx512_bf16", "amx_bf16", "avx512_fp16", "amx_fp16")}


def torch_counted_flops(model: str, sizes: BenchSizes) -> int:
    """The FLOPs of one training step as :class:`torch.utils.flop_counter.FlopCounterMode` counts them.

    An independent check of :func:`step_flops`: builds ``model`` at ``sizes``
    on the CPU and runs forward, loss and backward under the counter, with
    attention forced onto the math backend (whose batched products the
    counter sees; it does not count every fused attention kernel).

    >>> tiny = BenchSizes(batch=16, width=16, depth=2, tf_batch=2, seq_len=8, d_model=16,
    ...                   n_heads=2, ff=32)
    >>> [torch_counted_flops(m, tiny) == step_flops(m, tiny) for m in MODELS]
    [True, True]
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    check_choice("model", model, MODELS)
    if not isinstance(sizes, BenchSizes):
        raise TypeError(f"sizes must be a BenchSizes, got {type(sizes).__name__}")
    net, x, y = _build(model, sizes, torch.device("cpu"))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        F.mse_loss(net(x), y).backward()
    return int(counter.get_total_flops())


def plot_rows(rows: Sequence[BenchRow], *, title: str | None = None) -> Any:
    """Two panels: each regime's speed relative to FP32 (log scale), and MB saved for backward.

    One group of bars per model, one bar per measured regime, told apart by
    hatching as well as colour. Returns the Matplotlib figure.
    """
    import matplotlib.pyplot as plt
    import numpy as np

    measured = [r for r in rows if r.available and r.speedup is not None]
    if not measured:
        raise ValueError("rows must hold at least one measured row with a speedup")
    models = [m for m in MODELS if any(r.model == m for r in measured)]
    regimes = [g for g in REGIMES if any(r.regime == g for r in measured)]
    by = {(r.model, r.regime): r for r in measured}
    hatches = {"fp32": "", "tf32": "..", "fp16": "//", "bf16": "xx"}
    fig, (ax_time, ax_mem) = plt.subplots(1, 2, figsize=(7.2, 3.2), layout="constrained")
    at = np.arange(len(models))
    width = 0.8 / len(regimes)
    for i, regime in enumerate(regimes):
        rs = [by.get((m, regime)) for m in models]
        speed = [np.nan if r is None else r.speedup for r in rs]
        saved = [np.nan if r is None else r.saved_bytes / 1e6 for r in rs]
        for ax, values in ((ax_time, speed), (ax_mem, saved)):
            ax.bar(at + i * width, values, width, label=REGIME_LABELS[regime],
                   hatch=hatches[regime], edgecolor="black", linewidth=0.6)  # fmt: skip
    ax_time.axhline(1, color="black", linewidth=0.8)
    ax_time.set_yscale("log")
    ax_time.set_ylabel("speed relative to FP32 (log)")
    ax_mem.set_ylabel("saved for backward (MB)")
    names = {"linear_stack": "Linear stack", "transformer": "transformer"}
    for ax in (ax_time, ax_mem):
        ax.set_xticks(at + width * (len(regimes) - 1) / 2, [names[m] for m in models])
    ax_mem.legend(loc="upper left", fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def _time_once(fn: Callable[[], Any], device: torch.device) -> float:
    """Milliseconds of one call of ``fn`` (CUDA events on a GPU, perf_counter on a CPU)."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize(device)
        return start.elapsed_time(end)
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def matmul_rows(
    n: int = 256, device: torch.device | str | None = None, *, repeats: int = 9
) -> list[dict[str, Any]]:
    """One ``n x n`` matrix product in FP32, BF16 and FP16: fastest time, and time relative to FP32.

    The three formats take turns, one product each per round, after two
    warm-up rounds; each format's time is its fastest of ``repeats``, the
    run least disturbed by other programs on the machine (extra load only
    ever adds time to a kernel this small).

    >>> [row["format"] for row in matmul_rows(32, "cpu", repeats=2)]
    ['FP32', 'BF16', 'FP16']
    """
    check_int("n", n, minimum=1)
    check_int("repeats", repeats, minimum=1)
    device = resolve_device(device)
    formats = {"FP32": torch.float32, "BF16": torch.bfloat16, "FP16": torch.float16}
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
    operands = {name: (a.to(device, dt), b.to(device, dt)) for name, dt in formats.items()}
    times: dict[str, list[float]] = {name: [] for name in formats}
    for round_ in range(2 + repeats):
        for name, (x, y) in operands.items():
            ms = _time_once(lambda x=x, y=y: torch.mm(x, y), device)
            if round_ >= 2:
                times[name].append(ms)
    best = {name: min(t) for name, t in times.items()}
    return [
        {"format": name, f"{n}×{n} matmul, ms": t, "time vs FP32": t / best["FP32"]}
        for name, t in best.items()
    ]


# --------------------------------------------------------------------------- display


def _ms(x: Any) -> str:
    return "—" if x is None else f"{x:.3g}"


def _mb(x: Any) -> str:
    return "—" if x is None else f"{x / 1e6:.3g}"


def _ratio(x: Any) -> str:
    return "—" if x is None else f"{x:.2f}×"


def _tf(x: Any) -> str:
    return "—" if x is None else f"{x:.3g}"


def _pct(x: Any) -> str:
    return "—" if x is None else f"{x:.2g} %"


TABLE_COLUMNS: tuple[str, ...] = (
    "model", "regime", "step ms", "range ms", "vs FP32", "TFLOP/s", "peak TFLOP/s",
    "% of peak", "saved MB", "peak alloc MB", "note",
)  # fmt: skip
"""The columns of :func:`bench_table`, in order."""


def bench_table(
    rows: Sequence[BenchRow],
    *,
    columns: Sequence[str] | None = None,
    drop_empty: bool = False,
    caption: str | None = None,
) -> Any:
    """The rows as the book's table (:class:`amp_lesson.display.Table`).

    Columns (:data:`TABLE_COLUMNS`; ``columns`` picks some): model, regime,
    median step time (ms) with its min-max, speed relative to FP32 (the FP32
    step time over this row's), achieved and peak TFLOP/s, the share of peak,
    the MB saved for backward, the CUDA peak allocated (MB) and a note. A
    dash is a value that was not measured or is not known; ``drop_empty``
    leaves out the columns that hold nothing but dashes (on a CPU: the peak
    columns and the allocator's peak).

    >>> rows = [BenchRow("linear_stack", "fp32", "cpu", step_ms=2.0, step_ms_min=1.9,
    ...                  step_ms_max=2.5, tflops=0.05, speedup=1.0, saved_bytes=3_000_000),
    ...         BenchRow("linear_stack", "tf32", "cpu", available=False, note="not available")]
    >>> print(bench_table(rows))  # doctest: +NORMALIZE_WHITESPACE
    model         regime  step ms  range ms  vs FP32  TFLOP/s  peak TFLOP/s  % of peak
      saved MB  peak alloc MB  note
    linear_stack  FP32    2        1.9–2.5     1.00×    0.05     —             —
      3         —              —
    linear_stack  TF32    —        —           —        —        —             —
      —         —              not available
    """
    from amp_lesson.display import Table

    if isinstance(rows, BenchRow) or not isinstance(rows, Sequence):
        raise TypeError(f"rows must be a sequence of BenchRow, got {type(rows).__name__}")
    for i, r in enumerate(rows):
        if not isinstance(r, BenchRow):
            raise TypeError(f"rows[{i}] must be a BenchRow, got {type(r).__name__}")
    table_rows = [
        {
            "model": r.model,
            "regime": r.label,
            "step ms": _ms(r.step_ms),
            "range ms": "—"
            if r.step_ms_min is None
            else f"{_ms(r.step_ms_min)}–{_ms(r.step_ms_max)}",
            "vs FP32": _ratio(r.speedup),
            "TFLOP/s": _tf(r.tflops),
            "peak TFLOP/s": "—" if r.peak_tflops is None else f"{r.peak_tflops:.5g}",
            "% of peak": _pct(r.pct_of_peak),
            "saved MB": _mb(r.saved_bytes),
            "peak alloc MB": _mb(r.peak_bytes),
            "note": r.note or "—",
        }
        for r in rows
    ]
    if columns is None:
        columns = TABLE_COLUMNS
    elif isinstance(columns, str) or not isinstance(columns, Sequence):
        raise TypeError(f"columns must be a list of names from TABLE_COLUMNS, got {columns!r}")
    columns = [check_choice("columns", c, TABLE_COLUMNS) for c in columns]
    if not isinstance(drop_empty, bool):
        raise TypeError(f"drop_empty must be True or False, got {drop_empty!r}")
    if drop_empty:
        columns = [c for c in columns if any(row[c] != "—" for row in table_rows)]
    return Table(table_rows, columns=columns, caption=caption)


# --------------------------------------------------------------------------- recordings


class RecordingError(ValueError):
    """A recording file does not follow the schema; the message names the file and field."""


_PROVENANCE_STR = ("gpu_name", "torch_version", "date")
_PROVENANCE_OPT_STR = ("driver_version", "cuda_version", "cudnn_version", "compute_capability")
_ROW_INT_OPT = ("n_timed", "flops", "saved_bytes", "peak_bytes")
_ROW_FLOAT_OPT = (
    "step_ms", "step_ms_min", "step_ms_max", "tflops", "peak_tflops", "pct_of_peak", "speedup",
)  # fmt: skip


@dataclass(frozen=True)
class Recording:
    """One GPU's recorded benchmark: where it came from, the sizes, and its rows.

    ``provenance`` holds ``gpu_name``, ``driver_version``, ``cuda_version``,
    ``cudnn_version``, ``compute_capability``, ``torch_version``,
    ``amp_lesson_version``, ``python_version`` and ``date`` (ISO, UTC).
    """

    path: Path
    provenance: dict[str, Any]
    sizes: BenchSizes
    rows: list[BenchRow] = field(default_factory=list)
    peak_source: str | None = None

    @property
    def gpu_name(self) -> str:
        """The GPU the rows were measured on."""
        return str(self.provenance["gpu_name"])

    def describe(self) -> str:
        """One line of provenance: GPU, driver, CUDA, torch, date.

        >>> p = {"gpu_name": "NVIDIA H200", "driver_version": "580.1", "cuda_version": "13.0",
        ...      "torch_version": "2.11.0", "date": "2026-11-20"}
        >>> Recording(Path("h200.json"), p, BenchSizes()).describe()
        'NVIDIA H200 — driver 580.1, CUDA 13.0, torch 2.11.0, recorded 2026-11-20 (h200.json)'
        """
        p = self.provenance
        driver = p.get("driver_version") or "unknown"
        cuda = p.get("cuda_version") or "unknown"
        return (
            f"{p['gpu_name']} — driver {driver}, CUDA {cuda}, torch {p['torch_version']}, "
            f"recorded {p['date']} ({self.path.name})"
        )


def _fail(source: str, where: str, message: str) -> RecordingError:
    return RecordingError(f"{source}: {where} {message}")


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def validate_recording(data: Any, source: str = "<recording>") -> Recording:
    """Check a recording's parsed JSON against the schema and build a :class:`Recording`.

    ``source`` names the file in every error. A recording must say
    ``"schema": "amp_lesson.bench/1"``, hold GPU (``device_type == "cuda"``)
    rows only, a provenance with the GPU's name, the torch version and an ISO
    date, the sizes used, and at least one row; a measured row has positive
    times, an unavailable one a note and no measurements.

    >>> validate_recording({"schema": "amp_lesson.bench/1"}, "x.json")
    Traceback (most recent call last):
    ...
    amp_lesson.bench.RecordingError: x.json: provenance must be an object, got NoneType
    """
    if not isinstance(source, str):
        raise TypeError(f"source must be a str, got {type(source).__name__}")
    if not isinstance(data, Mapping):
        raise _fail(source, "the file", f"must hold a JSON object, got {type(data).__name__}")
    if data.get("schema") != SCHEMA:
        raise _fail(source, "schema", f"must be {SCHEMA!r}, got {data.get('schema')!r}")
    prov = data.get("provenance")
    if not isinstance(prov, Mapping):
        raise _fail(source, "provenance", f"must be an object, got {type(prov).__name__}")
    for key in _PROVENANCE_STR:
        if not isinstance(prov.get(key), str) or not prov[key].strip():
            raise _fail(
                source, f"provenance.{key}", f"must be a non-empty string, got {prov.get(key)!r}"
            )
    for key in _PROVENANCE_OPT_STR:
        if prov.get(key) is not None and not isinstance(prov[key], str):
            raise _fail(source, f"provenance.{key}", f"must be a string or null, got {prov[key]!r}")
    try:
        _dt.date.fromisoformat(prov["date"][:10])
    except ValueError:
        raise _fail(
            source, "provenance.date", f"must be an ISO date (YYYY-MM-DD), got {prov['date']!r}"
        ) from None
    raw_sizes = data.get("sizes")
    if not isinstance(raw_sizes, Mapping):
        raise _fail(source, "sizes", f"must be an object, got {type(raw_sizes).__name__}")
    known = {f.name for f in fields(BenchSizes)}
    if set(raw_sizes) != known:
        raise _fail(
            source, "sizes", f"must have exactly the keys {sorted(known)}, got {sorted(raw_sizes)}"
        )
    try:
        sizes = BenchSizes(**raw_sizes)
    except (TypeError, ValueError) as error:
        raise _fail(source, "sizes", f"are invalid: {error}") from None
    raw_rows = data.get("rows")
    if not isinstance(raw_rows, list) or not raw_rows:
        raise _fail(source, "rows", f"must be a non-empty list, got {raw_rows!r:.60}")
    rows = [_validate_row(source, i, r) for i, r in enumerate(raw_rows)]
    peak_source = data.get("peak_source")
    if peak_source is not None and not isinstance(peak_source, str):
        raise _fail(source, "peak_source", f"must be a string or null, got {peak_source!r}")
    return Recording(Path(source), dict(prov), sizes, rows, peak_source)


def _validate_row(source: str, i: int, row: Any) -> BenchRow:
    where = f"rows[{i}]"
    if not isinstance(row, Mapping):
        raise _fail(source, where, f"must be an object, got {type(row).__name__}")
    known = {f.name for f in fields(BenchRow)}
    unknown = sorted(set(row) - known)
    if unknown:
        raise _fail(source, where, f"has unknown keys {unknown}")
    for key in ("model", "regime", "device_type", "available"):
        if key not in row:
            raise _fail(source, where, f"lacks {key!r}")
    if row["model"] not in MODELS:
        raise _fail(
            source, f"{where}.model", f"must be one of {list(MODELS)}, got {row['model']!r}"
        )
    if row["regime"] not in REGIMES:
        raise _fail(
            source, f"{where}.regime", f"must be one of {list(REGIMES)}, got {row['regime']!r}"
        )
    if row["device_type"] != "cuda":
        raise _fail(
            source,
            f"{where}.device_type",
            f"must be 'cuda' (a recording holds GPU numbers only), got {row['device_type']!r}",
        )
    if not isinstance(row["available"], bool):
        raise _fail(
            source, f"{where}.available", f"must be true or false, got {row['available']!r}"
        )
    for key in ("note", "timing_method", "memory_method"):
        if row.get(key) is not None and not isinstance(row[key], str):
            raise _fail(source, f"{where}.{key}", f"must be a string or null, got {row[key]!r}")
    for key in _ROW_INT_OPT:
        value = row.get(key)
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < 0
        ):
            raise _fail(source, f"{where}.{key}", f"must be an integer >= 0 or null, got {value!r}")
    for key in _ROW_FLOAT_OPT:
        value = row.get(key)
        if value is not None and (not _is_number(value) or not math.isfinite(value) or value <= 0):
            raise _fail(
                source, f"{where}.{key}", f"must be a finite number > 0 or null, got {value!r}"
            )
    if row["available"]:
        for key in ("step_ms", "tflops", "saved_bytes", "timing_method"):
            if row.get(key) is None:
                raise _fail(source, f"{where}.{key}", "must be set on a measured (available) row")
    else:
        if not row.get("note"):
            raise _fail(source, f"{where}.note", "must say why an unavailable row was not measured")
        measured = [
            k for k in ("step_ms", "tflops", "saved_bytes", "peak_bytes") if row.get(k) is not None
        ]
        if measured:
            raise _fail(source, where, f"is marked unavailable but holds measurements {measured}")
    return BenchRow(**{f.name: row.get(f.name, f.default) for f in fields(BenchRow)})


def load_recordings(folder: str | Path = DEFAULT_FOLDER) -> list[Recording]:
    """Read and validate every ``*.json`` recording in ``folder``, sorted by file name.

    A folder with no recording gives ``[]``; a folder that does not exist is
    an error (a wrong path must not pass for "no GPU recording yet"); a file
    that breaks the schema raises :class:`RecordingError` naming the file.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     load_recordings(tmp)
    []
    >>> load_recordings("no/such/folder")
    Traceback (most recent call last):
    ...
    FileNotFoundError: folder 'no/such/folder' does not exist (recordings live in docs/_data/gpu)
    """
    if not isinstance(folder, (str, Path)):
        raise TypeError(f"folder must be a str or Path, got {type(folder).__name__}")
    path = Path(folder)
    if not path.is_dir():
        raise FileNotFoundError(
            f"folder {str(folder)!r} does not exist (recordings live in {DEFAULT_FOLDER})"
        )
    recordings = []
    for file in sorted(path.glob("*.json")):
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise RecordingError(f"{file}: not valid JSON ({error})") from None
        recordings.append(validate_recording(data, str(file)))
    return recordings


@dataclass(frozen=True)
class RecordingsView:
    """Recorded GPU tables with their provenance, or a notice that there are none.

    Displays as HTML in the book and as text in a terminal.

    >>> print(RecordingsView([]))
    No GPU recording yet. Run `python -m amp_lesson.bench --record` on a CUDA machine and commit the JSON file it writes to docs/_data/gpu/.
    """

    recordings: Sequence[Recording]

    NOTICE_TITLE = "No GPU recording yet"
    NOTICE = (
        "Run `python -m amp_lesson.bench --record` on a CUDA machine and commit the JSON "
        "file it writes to docs/_data/gpu/."
    )

    def __str__(self) -> str:
        if not self.recordings:
            return f"{self.NOTICE_TITLE}. {self.NOTICE}"
        return "\n\n".join(
            f"{r.describe()}\n{bench_table(r.rows, drop_empty=True)}" for r in self.recordings
        )

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))

    def _repr_html_(self) -> str:
        if not self.recordings:
            notice = re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(self.NOTICE))
            return (
                '<div class="admonition note amp-no-recording">'
                f'<p class="admonition-title">{html.escape(self.NOTICE_TITLE)}</p>'
                f"<p>{notice}</p></div>"
            )
        parts = []
        for r in self.recordings:
            parts.append(f'<p class="amp-recording">{html.escape(r.describe())}</p>')
            parts.append(bench_table(r.rows, drop_empty=True)._repr_html_())
        return "\n".join(parts)


# --------------------------------------------------------------------------- recording


def slugify(name: str) -> str:
    """A file-name slug of a device name: lower case, runs of other characters as ``-``.

    >>> slugify("NVIDIA H100 80GB HBM3"), slugify("Tesla T4")
    ('nvidia-h100-80gb-hbm3', 'tesla-t4')
    >>> slugify("  ")
    Traceback (most recent call last):
    ...
    ValueError: name must contain a letter or digit, got '  '
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    if not slug:
        raise ValueError(f"name must contain a letter or digit, got {name!r}")
    return slug


def _driver_version() -> str | None:
    """The NVIDIA driver version from ``nvidia-smi`` (or NVML), or ``None``."""
    exe = shutil.which("nvidia-smi")
    if exe:
        try:
            out = subprocess.run(
                [exe, "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=30, check=True,
            )  # fmt: skip
            first = out.stdout.strip().splitlines()
            if first and first[0].strip():
                return first[0].strip()
        except (OSError, subprocess.SubprocessError):
            pass
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
    except (pynvml.NVMLError, OSError):
        return None
    return version.decode() if isinstance(version, bytes) else str(version)


def _provenance(device: torch.device) -> dict[str, Any]:
    from amp_lesson import __version__

    major, minor = torch.cuda.get_device_capability(device)
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "gpu_name": torch.cuda.get_device_name(device),
        "driver_version": _driver_version(),
        "cuda_version": torch.version.cuda,
        "cudnn_version": None if cudnn is None else str(cudnn),
        "compute_capability": f"{major}.{minor}",
        "torch_version": torch.__version__,
        "amp_lesson_version": __version__,
        "python_version": platform.python_version(),
        "date": _dt.datetime.now(_dt.timezone.utc).date().isoformat(),
    }


def record(device: torch.device | str | None = None, sizes: BenchSizes | None = None) -> dict:
    """Measure everything on a CUDA ``device`` and return the recording (a JSON-ready dict).

    Raises ``RuntimeError`` on a CPU: a recording holds GPU numbers only.

    >>> record("cpu")
    Traceback (most recent call last):
    ...
    RuntimeError: a recording needs a CUDA GPU, but the device is 'cpu'; \
run `python -m amp_lesson.bench --record` on a CUDA machine
    """
    device = resolve_device(device)
    if device.type != "cuda":
        raise RuntimeError(
            f"a recording needs a CUDA GPU, but the device is {device.type!r}; "
            "run `python -m amp_lesson.bench --record` on a CUDA machine"
        )
    sizes = bench_sizes(device) if sizes is None else sizes
    rows = run_benchmarks(device, sizes)
    data = {
        "schema": SCHEMA,
        "provenance": _provenance(device),
        "sizes": sizes.as_dict(),
        "peak_source": PEAK_SOURCE,
        "rows": [r.as_dict() for r in rows],
    }
    validate_recording(data, "<new recording>")  # never write what cannot be read back
    return data


def write_recording(data: Mapping[str, Any], out: str | Path | None = None) -> Path:
    """Validate ``data`` and write it as JSON to ``out``; return the path written.

    ``out=None`` is ``docs/_data/gpu/<slug of the GPU name>.json``.
    """
    validate_recording(data, "<recording to write>")
    path = Path(DEFAULT_FOLDER) / f"{slugify(data['provenance']['gpu_name'])}.json"
    path = path if out is None else Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: print the live table, or ``--record`` a GPU's results.

    ``python -m amp_lesson.bench`` measures on the book's device and prints
    the table. ``--record [--out PATH]`` (CUDA only) writes the recording,
    by default to ``docs/_data/gpu/<gpu>.json``; on a CPU it exits with
    status 2 and says why.
    """
    parser = argparse.ArgumentParser(
        prog="python -m amp_lesson.bench",
        description="Measure what mixed precision buys on this device; --record saves a GPU's "
        "results for the book.",
    )
    parser.add_argument("--record", action="store_true", help="on CUDA: write the JSON recording")
    parser.add_argument(
        "--out", type=Path, default=None,
        help=f"where --record writes (default: {DEFAULT_FOLDER}/<gpu name>.json)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.out is not None and not args.record:
        parser.error("--out only makes sense with --record")
    try:
        device = get_device()
    except RuntimeError as error:  # AMP_LESSON_DEVICE=cuda on a machine without one
        parser.exit(2, f"error: {error}\n")
    if args.record:
        if device.type != "cuda":
            parser.exit(
                2,
                f"error: --record needs a CUDA GPU, but the device is {device.type!r} "
                f"(torch {torch.__version__}, torch.cuda.is_available() = "
                f"{torch.cuda.is_available()}). A recording holds GPU numbers only; run it on a "
                "CUDA machine (tools/gpu_check.sh).\n",
            )
        data = record(device)
        path = write_recording(data, args.out)
        print(Recording(path, data["provenance"], BenchSizes(**data["sizes"])).describe())
        print(bench_table([BenchRow(**r) for r in data["rows"]]))
        print(f"wrote {path}")
        return 0
    print(f"{device_name(device)}, sizes {bench_sizes(device).as_dict()}")
    print(bench_table(run_benchmarks(device)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
