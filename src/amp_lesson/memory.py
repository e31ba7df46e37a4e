# One module: the model state counted and the activations measured add up to one budget.
"""Where the bytes go: per-parameter state, and activation memory measured.

Training memory has two parts. The *model state* grows with the number of
parameters: weights, gradients, optimizer state (Adam keeps two moments,
``m`` and ``v``) and, in some mixed-precision schemes, an FP32 master copy
of the weights. :func:`bytes_per_parameter` counts it per parameter for four
regimes, deriving every number from ``torch.dtype.itemsize``:

- ``"fp32_adam"``: FP32 weights, gradients, ``m`` and ``v``: 4 + 4 + 4 + 4 = 16.
- ``"torch_amp"``: what ``torch.autocast`` + ``GradScaler`` keeps: the same
  16 bytes (parameters, gradients and optimizer state stay FP32), plus a
  *transient* half-precision copy of each autocast-eligible weight (up to 2
  bytes) that lives only during the forward/backward pass.
- ``"classic_mixed"``: the scheme of the mixed-precision and ZeRO papers:
  FP16 weights and gradients, FP32 master weights, ``m`` and ``v``:
  2 + 2 + 4 + 4 + 4 = 16.
- ``"classic_mixed_fp32_accum"``: the same plus an FP32 buffer to accumulate
  gradients across micro-batches: 20.

Mixed precision therefore saves no model-state memory with Adam; what it
saves is *activation* memory, which grows with batch size and depth and is
measured by :func:`measure_activation_memory`. :class:`PeakAllocation`
measures the whole of it, model state and activations together: the most
memory a block of code held at once, on any device.
"""

from __future__ import annotations

import gc
import numbers
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from amp_lesson._checks import (
    INT64_MAX,
    check_choice,
    check_input_dtype,
    check_int,
    check_positive,
)
from amp_lesson.device import place_model
from amp_lesson.formats import dtype_name, dtype_of

__all__ = [
    "BYTES_PER_PARAM",
    "GB",
    "REGIMES",
    "ActivationMemory",
    "BytesPerParam",
    "PeakAllocation",
    "bytes_per_parameter",
    "measure_activation_memory",
    "memory_table",
    "total_bytes",
]

REGIMES: tuple[str, ...] = ("fp32_adam", "torch_amp", "classic_mixed", "classic_mixed_fp32_accum")
"""The regimes :func:`bytes_per_parameter` knows."""

GB = 10**9
"""Bytes in a (decimal) gigabyte, the unit of :func:`memory_table`."""

_FP32 = torch.float32.itemsize
_HALF = torch.float16.itemsize


@dataclass(frozen=True)
class BytesPerParam:
    """Bytes of training state per model parameter, by what holds them.

    Parameters
    ----------
    regime : str
        One of :data:`REGIMES`.
    weights, gradients, master_weights : int
        Bytes of the weights, their gradients and an FP32 master copy.
    optimizer_m, optimizer_v : int
        Bytes of Adam's two moments.
    grad_accum_buffer : int
        Bytes of a separate buffer accumulating gradients over micro-batches.
    transient : int
        Bytes that live only during forward/backward (autocast's weight copies).
    description : str
        The regime in words.

    Examples
    --------
    >>> b = bytes_per_parameter("classic_mixed_fp32_accum")
    >>> b.weights, b.gradients, b.master_weights, b.grad_accum_buffer, b.total
    (2, 2, 4, 4, 20)
    """

    regime: str
    weights: int
    gradients: int
    master_weights: int
    optimizer_m: int
    optimizer_v: int
    grad_accum_buffer: int
    transient: int
    description: str

    @property
    def total(self) -> int:
        """Persistent bytes per parameter."""
        return (
            self.weights
            + self.gradients
            + self.master_weights
            + self.optimizer_m
            + self.optimizer_v
            + self.grad_accum_buffer
        )

    @property
    def peak(self) -> int:
        """Persistent plus transient bytes per parameter."""
        return self.total + self.transient


def _build(regime: str) -> BytesPerParam:
    adam = {"optimizer_m": _FP32, "optimizer_v": _FP32}
    if regime == "fp32_adam":
        return BytesPerParam(
            regime, weights=_FP32, gradients=_FP32, master_weights=0, **adam,
            grad_accum_buffer=0, transient=0,
            description="FP32 weights, gradients and Adam m, v",
        )  # fmt: skip
    if regime == "torch_amp":
        return BytesPerParam(
            regime, weights=_FP32, gradients=_FP32, master_weights=0, **adam,
            grad_accum_buffer=0, transient=_HALF,
            description="torch.autocast: FP32 state as fp32_adam, plus transient "
            "FP16/BF16 copies of autocast-eligible weights during forward/backward",
        )  # fmt: skip
    if regime == "classic_mixed":
        return BytesPerParam(
            regime, weights=_HALF, gradients=_HALF, master_weights=_FP32, **adam,
            grad_accum_buffer=0, transient=0,
            description="FP16 weights and gradients, FP32 master weights and Adam m, v",
        )  # fmt: skip
    return BytesPerParam(
        regime, weights=_HALF, gradients=_HALF, master_weights=_FP32, **adam,
        grad_accum_buffer=_FP32, transient=0,
        description="classic_mixed plus an FP32 buffer accumulating gradients over micro-batches",
    )  # fmt: skip


BYTES_PER_PARAM: dict[str, BytesPerParam] = {regime: _build(regime) for regime in REGIMES}
""":class:`BytesPerParam` for each regime of :data:`REGIMES`."""


def bytes_per_parameter(regime: str) -> BytesPerParam:
    """Return the per-parameter breakdown of ``regime``.

    Parameters
    ----------
    regime : str
        One of :data:`REGIMES`.

    Returns
    -------
    BytesPerParam
        Its entry of :data:`BYTES_PER_PARAM`.

    Raises
    ------
    ValueError
        If ``regime`` is unknown.

    Examples
    --------
    >>> [bytes_per_parameter(r).total for r in REGIMES]
    [16, 16, 16, 20]
    >>> bytes_per_parameter("torch_amp").peak
    18
    >>> bytes_per_parameter("fp8")
    Traceback (most recent call last):
    ...
    ValueError: regime must be one of 'fp32_adam', 'torch_amp', 'classic_mixed',
    'classic_mixed_fp32_accum'; got 'fp8'
    """
    return BYTES_PER_PARAM[check_choice("regime", regime, REGIMES)]


def _check_n_params(n_params: Any) -> int:
    if isinstance(n_params, bool) or not isinstance(n_params, numbers.Real):
        raise TypeError(
            f"n_params must be a positive whole number (int, or float like 7e9), "
            f"got {type(n_params).__name__} {n_params!r}"
        )
    if isinstance(n_params, numbers.Integral):
        return check_int("n_params", int(n_params), minimum=1, maximum=INT64_MAX, why=_N_PARAMS_WHY)
    value = check_positive("n_params", n_params)
    if not value.is_integer():
        raise ValueError(f"n_params must be a whole number of parameters, got {n_params!r}")
    return check_int("n_params", int(value), minimum=1, maximum=INT64_MAX, why=_N_PARAMS_WHY)


_N_PARAMS_WHY = "the most elements torch can count"


def total_bytes(n_params: float, regime: str, *, include_transient: bool = False) -> int:
    """Return the bytes of training state for ``n_params`` parameters under ``regime``.

    Parameters
    ----------
    n_params : int or float
        The parameter count; an integral float such as ``7e9`` is fine.
    regime : str
        One of :data:`REGIMES`.
    include_transient : bool, default False
        Add the transient autocast copies (``torch_amp``).

    Returns
    -------
    int
        Bytes.

    Raises
    ------
    TypeError
        If ``n_params`` is not a number or ``include_transient`` not a bool.
    ValueError
        If ``n_params`` is not a whole number >= 1 or ``regime`` is unknown.

    Examples
    --------
    >>> total_bytes(7e9, "fp32_adam") / GB
    112.0
    >>> total_bytes(0, "fp32_adam")
    Traceback (most recent call last):
    ...
    ValueError: n_params must be an integer >= 1, got 0
    """
    if not isinstance(include_transient, bool):
        raise TypeError(f"include_transient must be True or False, got {include_transient!r}")
    per_param = bytes_per_parameter(regime)
    n = _check_n_params(n_params)
    return n * (per_param.peak if include_transient else per_param.total)


def memory_table(n_params: float | None = None) -> list[dict[str, Any]]:
    """Return the rows of the book's bytes-per-parameter table, one per regime.

    Parameters
    ----------
    n_params : int or float, optional
        With a parameter count, each row also gets ``total_gb`` and
        ``peak_gb`` for that many parameters (decimal GB).

    Returns
    -------
    list of dict
        Each row holds the regime, the breakdown, ``total`` and ``peak`` bytes
        per parameter and the description.

    Raises
    ------
    TypeError
        If ``n_params`` is not a number.
    ValueError
        If ``n_params`` is not a whole number >= 1.

    Examples
    --------
    >>> [(row["regime"], row["total"], row["total_gb"])
    ...  for row in memory_table(7e9)]  # doctest: +NORMALIZE_WHITESPACE
    [('fp32_adam', 16, 112.0), ('torch_amp', 16, 112.0),
     ('classic_mixed', 16, 112.0), ('classic_mixed_fp32_accum', 20, 140.0)]
    """
    n = None if n_params is None else _check_n_params(n_params)
    rows = []
    for regime in REGIMES:
        b = BYTES_PER_PARAM[regime]
        row: dict[str, Any] = {
            "regime": regime,
            "weights": b.weights,
            "gradients": b.gradients,
            "master_weights": b.master_weights,
            "optimizer_m": b.optimizer_m,
            "optimizer_v": b.optimizer_v,
            "grad_accum_buffer": b.grad_accum_buffer,
            "transient": b.transient,
            "total": b.total,
            "peak": b.peak,
            "description": b.description,
        }
        if n is not None:
            row["total_gb"] = n * b.total / GB
            row["peak_gb"] = n * b.peak / GB
        rows.append(row)
    return rows


# --------------------------------------------------------------------------- activations


@dataclass(frozen=True)
class ActivationMemory:
    """Activation memory of one forward pass plus loss, kept for backward.

    The bytes are counted the same way on every device: each tensor autograd
    saved is counted once by its storage (``untyped_storage().data_ptr()``);
    storages of the model's parameters and of the input ``x`` are not counted
    (they exist anyway).

    Parameters
    ----------
    bytes : int
        The bytes of the tensors autograd saved for backward:
        ``activation_bytes + weight_copy_bytes``.
    activation_bytes : int
        Saved bytes other than autocast's half-precision copies of parameters.
    weight_copy_bytes : int
        Saved bytes of those copies.
    n_saved : int
        Pack-hook calls (all saved tensors, duplicates and parameters included).
    dtype_counts, bytes_by_dtype : dict
        Count and bytes of the counted (unique, non-parameter, non-input)
        storages per dtype name.
    autocast_dtype : str, optional
        The autocast dtype's name, ``None`` for FP32.
    device : str, default "cpu"
        Where it was measured.
    allocator_peak_bytes : int, optional
        On CUDA, the caching allocator's peak during the forward pass minus
        what was allocated before it: ``bytes`` plus the temporary buffers
        the pass freed again. ``None`` on the CPU, which has no such counter.

    Examples
    --------
    >>> from amp_lesson.models import make_mlp
    >>> model = make_mlp(4, 8, 2, device="cpu")
    >>> m = measure_activation_memory(model, torch.ones(16, 4))
    >>> m.bytes, m.dtype_counts, m.allocator_peak_bytes
    (1024, {'float32': 2}, None)
    """

    bytes: int
    activation_bytes: int
    weight_copy_bytes: int
    n_saved: int
    dtype_counts: dict[str, int] = field(default_factory=dict)
    bytes_by_dtype: dict[str, int] = field(default_factory=dict)
    autocast_dtype: str | None = None
    device: str = "cpu"
    allocator_peak_bytes: int | None = None


_VIEW_NODES = frozenset(
    {
        "ToCopyBackward0",
        "TBackward0",
        "TransposeBackward0",
        "PermuteBackward0",
        "ViewBackward0",
        "UnsafeViewBackward0",
        "ExpandBackward0",
        "AliasBackward0",
    }
)


def _copies_param(tensor: torch.Tensor, param_ids: set[int]) -> bool:
    """Whether ``tensor`` is a cast (or a view of a cast) of a parameter."""
    node = tensor.grad_fn
    for _ in range(6):
        if node is None:
            return False
        name = type(node).__name__
        if name == "AccumulateGrad":
            return id(node.variable) in param_ids
        if name not in _VIEW_NODES or not node.next_functions:
            return False
        node = node.next_functions[0][0]
    return False


def _default_loss(output: torch.Tensor) -> torch.Tensor:
    return output.float().sum()


def measure_activation_memory(
    model: nn.Module,
    x: torch.Tensor,
    *,
    loss_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
    autocast_dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> ActivationMemory:
    """Measure the memory a forward pass (plus loss) keeps for backward.

    Runs ``loss_fn(model(x))`` in FP32, or under ``torch.autocast`` with
    ``autocast_dtype``, without calling backward, and counts what autograd
    saved (see :class:`ActivationMemory`).

    Parameters
    ----------
    model : torch.nn.Module
        The model.
    x : torch.Tensor
        The input batch.
    loss_fn : callable, optional
        Maps the output to a loss (default: the output's sum, which saves
        nothing itself).
    autocast_dtype : {None, "fp16", "bf16"} or torch.dtype, optional
        Run under autocast to this dtype; ``None`` is FP32.
    device : torch.device or str, optional
        ``None`` uses the model's device; otherwise model and ``x`` are moved
        there first.

    Returns
    -------
    ActivationMemory
        What was kept, by kind and dtype.

    Raises
    ------
    TypeError
        If ``model``, ``x`` or ``loss_fn`` has the wrong type.
    ValueError
        If ``autocast_dtype`` is not a half format, ``x``'s dtype is not one
        the model's parameters take (without autocast, theirs), or ``device``
        is unknown.

    Examples
    --------
    >>> from amp_lesson.models import make_mlp
    >>> mlp = make_mlp(64, 128, 3, device="cpu")
    >>> x = torch.randn(256, 64)
    >>> fp32 = measure_activation_memory(mlp, x)
    >>> fp16 = measure_activation_memory(mlp, x, autocast_dtype=torch.float16)
    >>> fp32.bytes, fp16.activation_bytes, fp16.weight_copy_bytes
    (393216, 229376, 65792)
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if autocast_dtype is not None:
        autocast_dtype = dtype_of(autocast_dtype, name="autocast_dtype")
    if loss_fn is None:
        loss_fn = _default_loss
    elif not callable(loss_fn):
        raise TypeError(f"loss_fn must be callable or None, got {type(loss_fn).__name__}")
    check_input_dtype("x", x, model, autocast_dtype)
    device = place_model(model, device)
    x = x.to(device)
    return measure_saved(model, lambda: loss_fn(model(x)), [x], autocast_dtype, device)


def measure_saved(
    model: nn.Module,
    run: Callable[[], torch.Tensor],
    inputs: list[torch.Tensor],
    autocast_dtype: torch.dtype | None,
    device: torch.device,
) -> ActivationMemory:
    """What ``run()`` (a forward pass and its loss, on ``device``) keeps for backward.

    The storages of ``model``'s parameters and of ``inputs`` are not counted;
    see :func:`measure_activation_memory`, which checks the arguments first.
    """
    params = list(model.parameters())
    param_ids = {id(p) for p in params}
    exclude = {t.untyped_storage().data_ptr() for t in [*params, *inputs]}

    def forward() -> torch.Tensor:
        with torch.autocast(
            device.type, dtype=autocast_dtype or torch.float16, enabled=autocast_dtype is not None
        ):
            return run()

    on_cuda = device.type == "cuda"
    baseline = peak = 0
    if on_cuda:  # a warm-up pass, so one-off allocations (cuBLAS workspace) are not counted
        with torch.enable_grad():
            forward()
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        baseline = torch.cuda.memory_allocated(device)

    seen: dict[int, tuple[int, torch.dtype, bool]] = {}
    n_saved = 0

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal n_saved
        n_saved += 1
        storage = tensor.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in exclude and ptr not in seen:
            seen[ptr] = (storage.nbytes(), tensor.dtype, _copies_param(tensor, param_ids))
        return tensor

    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = forward()
    if on_cuda:
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device) - baseline
    del loss

    activation = sum(n for n, _, is_copy in seen.values() if not is_copy)
    copies = sum(n for n, _, is_copy in seen.values() if is_copy)
    counts: Counter[str] = Counter()
    by_dtype: Counter[str] = Counter()
    for nbytes, dtype, _ in seen.values():
        counts[dtype_name(dtype)] += 1
        by_dtype[dtype_name(dtype)] += nbytes
    return ActivationMemory(
        bytes=activation + copies,
        activation_bytes=activation,
        weight_copy_bytes=copies,
        n_saved=n_saved,
        dtype_counts=dict(counts),
        bytes_by_dtype=dict(by_dtype),
        autocast_dtype=None if autocast_dtype is None else dtype_name(autocast_dtype),
        device=str(device),
        allocator_peak_bytes=peak if on_cuda else None,
    )


class _StorageTracker(TorchDispatchMode):
    """Counts the bytes of the tensor storages that ops create inside it, while they live.

    A storage is new when an op returns it and it is none of the op's inputs'
    (a view or an in-place result is not new). Its bytes count from then
    until the storage is freed, which a finalizer on torch's storage object
    reports (torch keeps one Python object per storage for as long as the
    storage lives).
    """

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._sizes: dict[int, int] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        given = {
            t.untyped_storage().data_ptr()
            for t in tree_leaves((args, kwargs))
            if isinstance(t, torch.Tensor)
        }
        for tensor in tree_leaves(out):
            if not isinstance(tensor, torch.Tensor):
                continue
            storage = tensor.untyped_storage()
            key = id(storage)
            if key in self._sizes or (storage.nbytes() and storage.data_ptr() in given):
                continue
            self._sizes[key] = storage.nbytes()
            self.live += storage.nbytes()
            self.peak = max(self.peak, self.live)
            weakref.finalize(storage, self._freed, key)
        return out

    def _freed(self, key: int) -> None:
        self.live -= self._sizes.pop(key)


class PeakAllocation:
    """The most memory the tensors of a block held at once, above what was allocated before it.

    Use it as a context manager around the code to measure; afterwards
    ``bytes`` holds the peak. Memory allocated before the block does not
    count, even if it stays allocated (a model of an earlier measurement
    that something still refers to), and neither does its release during the
    block, so the figure of one block does not depend on what ran before it.

    - On CUDA it is the caching allocator's own count:
      ``torch.cuda.max_memory_allocated`` after the block minus
      ``torch.cuda.memory_allocated`` at its start, with the peak statistics
      reset at the start (``method`` ``"cuda_peak_above_start"``).
    - On the CPU, which keeps no such count, every storage that an operation
      creates inside the block is counted from its creation until it is
      freed, by a dispatch mode (torch's private ``TorchDispatchMode``)
      (``method`` ``"storage_peak_above_start"``). It counts each storage's
      bytes, not the allocator's rounding of them, and only tensors made by
      torch operations.

    On CUDA, garbage is collected before the block starts, so that an
    earlier measurement's unreachable tensors are freed first (on the CPU
    they do not count either way).

    Parameters
    ----------
    device : torch.device or str
        The device whose memory to measure: ``"cpu"`` or a CUDA device.

    Attributes
    ----------
    bytes : int or None
        The peak, in bytes, once the block has ended (``None`` before).
    method : str
        How it was measured, as above.

    Raises
    ------
    ValueError
        If ``device`` is neither the CPU nor a CUDA device.

    Examples
    --------
    >>> kept = torch.ones(1000)  # allocated before: not counted
    >>> with PeakAllocation("cpu") as peak:
    ...     a = torch.ones(256)            # 1 KiB
    ...     b = a * 2                      # 1 KiB more: the peak, 2 KiB
    ...     del a, b
    ...     c = torch.ones(128)            # 512 bytes, below the peak
    >>> peak.bytes, peak.method
    (2048, 'storage_peak_above_start')
    """

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        if self.device.type not in ("cpu", "cuda"):
            raise ValueError(f"device must be the CPU or a CUDA device, got {device!r}")
        self.method = (
            "cuda_peak_above_start" if self.device.type == "cuda" else "storage_peak_above_start"
        )
        self.bytes: int | None = None
        self._start = 0
        self._tracker: _StorageTracker | None = None

    def __enter__(self) -> Self:
        if self.device.type == "cuda":
            gc.collect()  # an earlier measurement's unreachable tensors, freed before the start
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._start = torch.cuda.memory_allocated(self.device)
        else:
            self._tracker = _StorageTracker()
            self._tracker.__enter__()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.bytes = int(torch.cuda.max_memory_allocated(self.device)) - self._start
        else:
            assert self._tracker is not None
            self._tracker.__exit__(kind, error, trace)
            self.bytes = self._tracker.peak
