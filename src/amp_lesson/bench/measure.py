# One module: every regime measured by one step function and one way of timing it per device.
"""Measuring one training step per model and precision regime.

Each regime runs the same step (:func:`make_train_step`): forward and loss
under :func:`torch.autocast` for ``"fp16"`` and ``"bf16"``, backward and an
SGD step outside it, and for ``"fp16"`` a :class:`torch.amp.GradScaler`.
How each number is taken, by device:

- step time: :func:`amp_lesson.timing.time_calls` after warm-up steps (CUDA
  events on a GPU, :func:`time.perf_counter` on a CPU, with
  ``torch.set_num_threads`` left as it is). On a CPU the regimes' steps take
  turns, so that load from other programs falls on all regimes alike. The row
  holds the median, minimum and maximum.
- memory: ``saved_bytes`` are the bytes autograd keeps for backward
  (:func:`amp_lesson.memory.measure_activation_memory`), on both devices;
  ``peak_bytes`` is the most memory the regime's own tensors held at once
  (weights, gradients, optimizer state and activations together), from
  building its model through its steps, above what was allocated when the
  regime began (:class:`amp_lesson.memory.PeakAllocation`): the CUDA
  allocator's count over the timed steps on a GPU, the storages counted one
  by one over two untimed steps on a CPU. Each regime starts after the
  previous one's model, optimizer and outputs are freed, and what is still
  allocated then does not count, so no regime's figure depends on the
  regimes measured before it.
- speed-up over FP32: on the CPU the median of the per-round ratios of steps
  timed back to back (:func:`paired_speedup`), on CUDA the ratio of medians.
- TFLOP/s: counted FLOPs (:func:`amp_lesson.bench.workload.step_flops`) over
  the median time, beside the GPU's datasheet peak when the GPU is known.

Why this module is long: one step measured on two devices, sharing the row, the regimes
and the timer; half of its lines are docstrings.
"""

from __future__ import annotations

import contextlib
import gc
import statistics
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from amp_lesson._checks import check_choice, check_int
from amp_lesson.bench.peaks import peak_tflops
from amp_lesson.bench.workload import MODELS, BenchSizes, bench_sizes, build_workload, step_flops
from amp_lesson.device import device_name, resolve_device
from amp_lesson.formats import dtype_of
from amp_lesson.memory import PeakAllocation, measure_activation_memory
from amp_lesson.timing import Timing, matmul_times, time_calls

__all__ = [
    "PEAK_MEMORY_METHODS",
    "REGIMES",
    "BenchRow",
    "MatmulRow",
    "cpu_features",
    "make_train_step",
    "matmul_rows",
    "measure_step",
    "paired_speedup",
    "run_benchmarks",
]

REGIMES: tuple[str, ...] = ("fp32", "tf32", "fp16", "bf16")
"""The precision regimes of a benchmark row, in table order.

``"fp32"``: plain FP32, TF32 off. ``"tf32"``: FP32 tensors with
``torch.backends.cuda.matmul.allow_tf32 = True`` for the run (a tensor-core
mode of NVIDIA GPUs from Ampere on; a CPU has none). ``"fp16"``: autocast to
float16 with a GradScaler. ``"bf16"``: autocast to bfloat16, no scaler.
"""


def _autocast_dtype(regime: str) -> torch.dtype | None:
    """The dtype autocast runs ``regime`` in, or ``None`` for the FP32 regimes."""
    return dtype_of(regime) if regime in ("fp16", "bf16") else None


@dataclass(frozen=True)
class BenchRow:
    """One measured (or unavailable) training step: a model under a regime on a device.

    Parameters
    ----------
    model : str
        One of :data:`~amp_lesson.bench.workload.MODELS`.
    regime : str
        One of :data:`REGIMES`.
    device_type : str
        ``"cpu"`` or ``"cuda"``.
    available : bool, default True
        False when the regime cannot run on the device; then ``note`` says
        why and every measurement is ``None``.
    note : str, optional
        Why the row is unavailable.
    step_ms, step_ms_min, step_ms_max : float, optional
        Median, fastest and slowest step time, in milliseconds.
    n_timed : int, optional
        Timed steps.
    flops : int, optional
        FLOPs of one step.
    tflops : float, optional
        Achieved TFLOP/s: ``flops`` over the median time.
    peak_tflops : float, optional
        The datasheet peak for the regime (``None`` when unknown, as for every CPU).
    pct_of_peak : float, optional
        The share of the peak achieved, in percent.
    speedup : float, optional
        How many times faster than FP32 the step ran (filled in by
        :func:`run_benchmarks`).
    saved_bytes : int, optional
        Bytes autograd kept for backward.
    peak_bytes : int, optional
        The most memory the regime's tensors held at once, above what was
        allocated before the regime began (see ``memory_method``).
    timing_method, memory_method : str, optional
        How the time and the memory were taken.

    Examples
    --------
    >>> row = BenchRow("linear_stack", "tf32", "cpu", available=False,
    ...                note="not available on CPU")
    >>> row.step_ms is None, row.available
    (True, False)
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

    def as_dict(self) -> dict[str, Any]:
        """The row as a plain dict (what a recording stores).

        Returns
        -------
        dict
            Field name to value.
        """
        return asdict(self)


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
    ``optimizer.step()``: one piece of code runs every regime.

    Parameters
    ----------
    model : torch.nn.Module
        The model; its parameters' device is the device of the step.
    x, y : torch.Tensor
        Input and MSE target.
    regime : str
        One of :data:`REGIMES`.

    Returns
    -------
    callable
        ``step()``: forward, loss, backward, SGD (momentum 0.9) step, ``zero_grad``.

    Raises
    ------
    ValueError
        If ``regime`` is unknown.

    Examples
    --------
    >>> sizes = BenchSizes(batch=16, width=8, depth=2)
    >>> net, x, y = build_workload("linear_stack", sizes, "cpu")
    >>> step = make_train_step(net, x, y, "bf16")
    >>> step(); net[0].weight.grad is None
    True
    """
    check_choice("regime", regime, REGIMES)
    device = next(model.parameters()).device
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    low = _autocast_dtype(regime)  # None for fp32 and tf32
    scaler = torch.amp.GradScaler(device.type, enabled=regime == "fp16")

    def step() -> None:
        on = low is not None
        with torch.autocast(device.type, dtype=low or torch.float16, enabled=on):
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


def _unavailable(regime: str, device: torch.device) -> str | None:
    """Why ``regime`` cannot run on ``device``, or ``None`` if it can."""
    if device.type == "cpu":
        return "not available on CPU" if regime == "tf32" else None
    major, _ = torch.cuda.get_device_capability(device)
    if regime == "tf32" and major < 8:
        return "not available: TF32 needs compute capability 8.0 (Ampere) or newer"
    if regime == "bf16" and not torch.cuda.is_bf16_supported(including_emulation=False):
        return "not available: this GPU has no native BF16"
    return None


PEAK_MEMORY_METHODS: frozenset[str] = frozenset(
    {"saved_tensors + cuda_peak_above_start", "saved_tensors + storage_peak_above_start"}
)
"""The ``memory_method`` of rows whose ``peak_bytes`` count each regime alone.

Recordings made before the book measured this way have ``"saved_tensors +
cuda_max_memory_allocated"``: the allocator's peak since
``reset_peak_memory_stats``, which also counts what earlier regimes left
allocated, so the book does not show their ``peak_bytes``.
"""


def _row(
    model: str,
    regime: str,
    device: torch.device,
    flops: int,
    timing: Timing,
    saved: int,
    memory: PeakAllocation,
) -> BenchRow:
    """A measured row from the step times, the saved bytes and the regime's peak memory."""
    on_cuda = device.type == "cuda"
    achieved = flops / (timing.median * 1e-3) / 1e12
    peak = peak_tflops(device_name(device)) if on_cuda else None
    peak_value = None if peak is None else peak[1].get(regime)
    return BenchRow(
        model,
        regime,
        device.type,
        step_ms=timing.median,
        step_ms_min=timing.min,
        step_ms_max=timing.max,
        n_timed=len(timing.times_ms),
        flops=flops,
        tflops=achieved,
        peak_tflops=peak_value,
        pct_of_peak=None if peak_value is None else 100.0 * achieved / peak_value,
        saved_bytes=int(saved),
        peak_bytes=memory.bytes,
        timing_method=timing.method,
        memory_method=f"saved_tensors + {memory.method}",
    )


def _saved_bytes(net: nn.Module, x: torch.Tensor, regime: str) -> int:
    # The default loss (a sum) saves nothing, so the target y is not counted.
    return measure_activation_memory(net, x, autocast_dtype=_autocast_dtype(regime)).bytes


def _measure_cuda(
    model: str, regime: str, device: torch.device, sizes: BenchSizes, flops: int
) -> BenchRow:
    """One regime on the GPU: its own model, TF32 set for the run, its own peak memory."""
    with _tf32(regime == "tf32"):
        with PeakAllocation(device) as peak:
            net, x, y = build_workload(model, sizes, device)
            step = make_train_step(net, x, y, regime)
            timing = time_calls({regime: step}, device, warmup=sizes.warmup, repeats=sizes.repeats)
        saved = _saved_bytes(net, x, regime)
    del net, x, y, step  # the next regime starts with this one's memory freed
    gc.collect()
    torch.cuda.empty_cache()
    return _row(model, regime, device, flops, timing[regime], saved, peak)


def _peak_memory(
    model: str, regime: str, device: torch.device, sizes: BenchSizes
) -> PeakAllocation:
    """The regime's peak memory on the CPU: its model built and two steps run, untimed.

    The second step runs with the optimizer state the first one made, as
    every later step does.
    """
    with PeakAllocation(device) as peak:
        net, x, y = build_workload(model, sizes, device)
        step = make_train_step(net, x, y, regime)
        step()
        step()
    return peak


def paired_speedup(reference_ms: Sequence[float], times_ms: Sequence[float]) -> float:
    """Median over rounds of ``reference / time``: the speed-up of steps timed back to back.

    Round ``i`` timed ``reference_ms[i]`` and ``times_ms[i]`` one right after
    the other, so load from other programs hit both alike; the median of the
    per-round ratios is steadier than the ratio of the two medians.

    Parameters
    ----------
    reference_ms, times_ms : sequence of float
        The reference's (FP32's) and the other regime's times, one per round.

    Returns
    -------
    float
        The median ratio; above 1 is faster than the reference.

    Raises
    ------
    ValueError
        If the two differ in length or are empty.

    Examples
    --------
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
    """The regimes on the CPU, each with its own copy of the model, timed taking turns.

    With FP32 among several regimes, each row's ``speedup`` is
    :func:`paired_speedup` against FP32.
    """
    built = {regime: build_workload(model, sizes, device) for regime in regimes}
    steps = {regime: make_train_step(*built[regime], regime) for regime in regimes}
    timings = time_calls(steps, device, warmup=sizes.warmup, repeats=sizes.repeats)
    saved = {regime: _saved_bytes(built[regime][0], built[regime][1], regime) for regime in regimes}
    del built, steps  # the peaks are measured one regime at a time, with nothing else alive
    rows = {}
    for regime in regimes:
        row = _row(
            model, regime, device, flops, timings[regime], saved[regime],
            _peak_memory(model, regime, device, sizes),
        )  # fmt: skip
        if "fp32" in timings and len(timings) > 1:
            fp32 = timings["fp32"].times_ms
            row = replace(row, speedup=paired_speedup(fp32, timings[regime].times_ms))
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


def _sizes_for(sizes: Any, device: torch.device) -> BenchSizes:
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

    ``speedup`` is left ``None``: it needs the FP32 row, which
    :func:`run_benchmarks` measures alongside.

    Parameters
    ----------
    model : str
        One of :data:`~amp_lesson.bench.workload.MODELS`.
    regime : str
        One of :data:`REGIMES`.
    device : torch.device or str, optional
        Where to measure (default: the book's device).
    sizes : BenchSizes, optional
        Default: :func:`~amp_lesson.bench.workload.bench_sizes` for the device.

    Returns
    -------
    BenchRow
        The measured row, or an unavailable one saying why.

    Raises
    ------
    TypeError
        If ``sizes`` is not a :class:`~amp_lesson.bench.workload.BenchSizes`.
    ValueError
        If ``model`` or ``regime`` is unknown.

    Examples
    --------
    >>> tiny = BenchSizes(batch=16, width=16, depth=2, tf_batch=2, seq_len=8,
    ...                   d_model=16, n_heads=2, ff=32, warmup=1, repeats=2)
    >>> row = measure_step("linear_stack", "bf16", "cpu", tiny)
    >>> row.timing_method, row.memory_method, row.peak_bytes > row.saved_bytes > 0
    ('perf_counter', 'saved_tensors + storage_peak_above_start', True)
    >>> measure_step("linear_stack", "tf32", "cpu", tiny).note
    'not available on CPU'
    """
    check_choice("model", model, MODELS)
    check_choice("regime", regime, REGIMES)
    device = resolve_device(device)
    return _measure_model(model, [regime], device, _sizes_for(sizes, device))[0]


def _with_speedups(rows: Sequence[BenchRow]) -> list[BenchRow]:
    """Fill each missing ``speedup`` with the FP32 row's median time over this row's."""
    base = {r.model: r.step_ms for r in rows if r.regime == "fp32" and r.step_ms}
    out = []
    for r in rows:
        ref = base.get(r.model)
        if r.speedup is None and ref and r.step_ms:
            r = replace(r, speedup=ref / r.step_ms)
        out.append(r)
    return out


def _check_subset(name: str, values: Any, allowed: Sequence[str]) -> list[str]:
    if isinstance(values, str) or not isinstance(values, Iterable):
        raise TypeError(f"{name} must be a list of names from {list(allowed)}, got {values!r}")
    chosen = [check_choice(name, v, allowed) for v in values]
    if not chosen:
        raise ValueError(f"{name} must name at least one of {list(allowed)}")
    return [a for a in allowed if a in chosen]  # table order, no repeats


def run_benchmarks(
    device: torch.device | str | None = None,
    sizes: BenchSizes | None = None,
    *,
    models: Iterable[str] = MODELS,
    regimes: Iterable[str] = REGIMES,
) -> list[BenchRow]:
    """Measure every model under every regime.

    ``speedup`` compares each row with the FP32 row of its model (when that
    was measured). On a CPU the regimes of a model are timed taking turns,
    so that load from other programs falls on all of them alike; on CUDA
    each regime runs as its own block (TF32 is a global switch). Each
    regime's peak memory is its own (see :class:`amp_lesson.memory.PeakAllocation`).

    Parameters
    ----------
    device : torch.device or str, optional
        Where to measure (default: the book's device).
    sizes : BenchSizes, optional
        Default: :func:`~amp_lesson.bench.workload.bench_sizes` for the device.
    models : iterable of str
        Models to run, from :data:`~amp_lesson.bench.workload.MODELS`.
    regimes : iterable of str
        Regimes to run, from :data:`REGIMES`.

    Returns
    -------
    list of BenchRow
        In models x regimes order, each list in its table order.

    Raises
    ------
    TypeError
        If ``models`` or ``regimes`` is a string or not iterable, or
        ``sizes`` is not a :class:`~amp_lesson.bench.workload.BenchSizes`.
    ValueError
        If a name is unknown or a list is empty.

    Examples
    --------
    >>> tiny = BenchSizes(batch=16, width=16, depth=2, tf_batch=2, seq_len=8,
    ...                   d_model=16, n_heads=2, ff=32, warmup=1, repeats=2)
    >>> rows = run_benchmarks("cpu", tiny, models=["linear_stack"])
    >>> [(r.regime, r.available) for r in rows]
    [('fp32', True), ('tf32', False), ('fp16', True), ('bf16', True)]
    >>> rows[0].speedup
    1.0
    """
    models = _check_subset("models", models, MODELS)
    regimes = _check_subset("regimes", regimes, REGIMES)
    device = resolve_device(device)
    sizes = _sizes_for(sizes, device)
    rows = [row for m in models for row in _measure_model(m, regimes, device, sizes)]
    return _with_speedups(rows)


def cpu_features(cpuinfo: str | Path = "/proc/cpuinfo") -> dict[str, bool] | None:
    """Which half-precision instructions the CPU has, from ``/proc/cpuinfo`` (Linux).

    ``avx512_bf16`` and ``amx_bf16`` multiply BF16 in hardware;
    ``avx512_fp16`` and ``amx_fp16`` do the same for FP16. A CPU without the
    FP16 ones has to convert FP16 operands before it can multiply them.

    Parameters
    ----------
    cpuinfo : str or Path, default "/proc/cpuinfo"
        The file to read.

    Returns
    -------
    dict or None
        Flag name to presence, or ``None`` where the file cannot be read
        (not Linux).

    Examples
    --------
    >>> features = cpu_features()
    >>> half_flags = ["amx_bf16", "amx_fp16", "avx512_bf16", "avx512_fp16"]
    >>> features is None or sorted(features) == half_flags
    True
    """
    try:
        text = Path(cpuinfo).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    flags: set[str] = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
    return {name: name in flags for name in ("avx512_bf16", "amx_bf16", "avx512_fp16", "amx_fp16")}


@dataclass(frozen=True)
class MatmulRow:
    """One dtype's time for one square matrix product (:func:`matmul_rows`).

    Parameters
    ----------
    dtype : torch.dtype
        The dtype of both operands.
    n : int
        The matrices are ``n x n``.
    ms : float
        The fastest of the timed products, in milliseconds.
    vs_fp32 : float
        ``ms`` over float32's: above 1 is slower than FP32.
    """

    dtype: torch.dtype
    n: int
    ms: float
    vs_fp32: float


def matmul_rows(
    n: int = 256, device: torch.device | str | None = None, *, repeats: int = 9
) -> list[MatmulRow]:
    """One ``n x n`` matrix product in FP32, BF16 and FP16, timed by :func:`amp_lesson.timing.matmul_times`.

    Each dtype keeps its fastest of ``repeats`` products, the run least
    disturbed by other programs on the machine (extra load only ever adds
    time to a kernel this small).

    Parameters
    ----------
    n : int, default 256
        Size of the square matrices.
    device : torch.device or str, optional
        Where the product runs.
    repeats : int, default 9
        Timed products per dtype.

    Returns
    -------
    list of MatmulRow
        FP32, BF16, FP16, in that order.

    Raises
    ------
    ValueError
        If ``n`` or ``repeats`` is below 1.

    Examples
    --------
    >>> [str(row.dtype) for row in matmul_rows(32, "cpu", repeats=2)]
    ['torch.float32', 'torch.bfloat16', 'torch.float16']
    """
    check_int("repeats", repeats, minimum=1)
    times = matmul_times(n, (torch.float32, torch.bfloat16, torch.float16), device, repeats=repeats)
    fp32 = times[torch.float32].min
    return [MatmulRow(dtype, n, t.min, t.min / fp32) for dtype, t in times.items()]
