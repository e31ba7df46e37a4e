"""What the benchmark runs: its two models, their sizes per device, and their FLOPs.

Two models stand for two kinds of network: ``"linear_stack"``, ``depth``
``Linear(width, width)`` layers with ReLU in between, nearly all of whose work
is matrix products (GEMMs); and ``"transformer"``, one
:class:`torch.nn.TransformerEncoderLayer`. The sizes depend on the device
(:func:`bench_sizes`): small enough on a CPU for the book's page to run in
seconds, GEMM-sized on a GPU. Every width is a multiple of 8, the alignment
NVIDIA's performance guides ask of FP16 matrix dimensions so that the products
can run on tensor cores (the tiles those units work on are larger).

The work of a step is counted from the shapes (:func:`step_flops`), and
checked against torch's own counter (:func:`torch_counted_flops`), so that an
achieved TFLOP/s is FLOPs over a measured time.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import torch
import torch.nn.functional as F
from torch import nn

from amp_lesson._checks import check_choice, check_int
from amp_lesson.device import resolve_device
from amp_lesson.models import make_mlp, make_transformer_block

__all__ = [
    "CPU_SIZES",
    "CUDA_SIZES",
    "MODELS",
    "BenchSizes",
    "bench_sizes",
    "build_workload",
    "linear_stack_flops",
    "step_flops",
    "torch_counted_flops",
    "transformer_flops",
]

MODELS: tuple[str, ...] = ("linear_stack", "transformer")
"""The models of a benchmark row, in table order."""


@dataclass(frozen=True)
class BenchSizes:
    """The shapes and repeat counts of a benchmark run.

    Parameters
    ----------
    batch, width, depth : int
        The Linear stack: ``depth`` layers of ``width`` on ``batch`` rows.
    tf_batch, seq_len, d_model, n_heads, ff : int
        The transformer block: ``tf_batch`` sequences of ``seq_len`` tokens,
        width ``d_model``, ``n_heads`` heads, feed-forward width ``ff``.
    warmup : int
        Untimed steps before the timed ones.
    repeats : int
        Timed steps.

    Raises
    ------
    ValueError
        If a size is below 1, a width (``batch``, ``width``, ``seq_len``,
        ``d_model``, ``ff``) is not a multiple of 8, or ``d_model`` is not
        a multiple of ``n_heads``.

    Examples
    --------
    >>> BenchSizes(batch=16, width=12)
    Traceback (most recent call last):
    ...
    ValueError: width must be a multiple of 8 (the alignment FP16 tensor cores
    ask of matrix sizes), got 12
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
                    f"{name} must be a multiple of 8 (the alignment FP16 tensor cores ask of "
                    f"matrix sizes), got {value}"
                )
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})"
            )

    def as_dict(self) -> dict[str, int]:
        """The sizes as a plain dict (what a recording stores).

        Returns
        -------
        dict
            Field name to value.
        """
        return asdict(self)


# On both devices the batch is several times the width, so the activations
# saved for backward (batch x width per layer) outweigh the half-precision
# weight copies autocast keeps (width x width per layer), as in real training.
CPU_SIZES = BenchSizes()
"""The CPU's sizes, a step of about 0.4 GFLOP, so that even FP16 autocast (slow on
CPUs without FP16 arithmetic) keeps the page's execution within seconds."""

CUDA_SIZES = BenchSizes(
    batch=16384, width=2048, depth=8, tf_batch=16, seq_len=512, d_model=1024,
    n_heads=16, ff=4096, warmup=5, repeats=20,
)  # fmt: skip
"""The GPU's sizes, with GEMMs big enough that the matrix units, not kernel launches, set the time."""


def bench_sizes(device: torch.device | str | None = None) -> BenchSizes:
    """The sizes the book uses on ``device``: :data:`CPU_SIZES` or :data:`CUDA_SIZES`.

    Parameters
    ----------
    device : torch.device or str, optional
        The device (default: the book's, :func:`amp_lesson.device.get_device`).

    Returns
    -------
    BenchSizes
        The sizes for that device type.

    Examples
    --------
    >>> s = bench_sizes("cpu")
    >>> s.width, s.batch, s.depth, s.d_model, s.repeats
    (128, 1024, 4, 128, 7)
    """
    return CUDA_SIZES if resolve_device(device).type == "cuda" else CPU_SIZES


def _check_sizes(sizes: object) -> BenchSizes:
    if not isinstance(sizes, BenchSizes):
        raise TypeError(f"sizes must be a BenchSizes, got {type(sizes).__name__}")
    return sizes


def build_workload(
    model: str, sizes: BenchSizes, device: torch.device | str | None = None
) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """The model, an input batch and a regression target, seeded.

    Parameters
    ----------
    model : {"linear_stack", "transformer"}
        Which model (:data:`MODELS`).
    sizes : BenchSizes
        Its shapes.
    device : torch.device or str, optional
        Where to put model and data.

    Returns
    -------
    net : torch.nn.Module
        The model, PyTorch's default initialisation under seed 0.
    x, y : torch.Tensor
        Input and target of one shape, drawn from a generator seeded with 1.

    Raises
    ------
    TypeError
        If ``sizes`` is not a :class:`BenchSizes`.
    ValueError
        If ``model`` is unknown.

    Examples
    --------
    >>> sizes = BenchSizes(batch=16, width=8, depth=2)
    >>> net, x, y = build_workload("linear_stack", sizes, "cpu")
    >>> tuple(x.shape), net(x).shape == y.shape
    ((16, 8), True)
    """
    check_choice("model", model, MODELS)
    sizes = _check_sizes(sizes)
    device = resolve_device(device)
    g = torch.Generator().manual_seed(1)
    if model == "linear_stack":
        w = sizes.width
        net: nn.Module = make_mlp(w, w, sizes.depth - 1, w, device=device)
        shape: tuple[int, ...] = (sizes.batch, w)
    else:
        net = make_transformer_block(sizes.d_model, sizes.n_heads, sizes.ff, device=device)
        shape = (sizes.tf_batch, sizes.seq_len, sizes.d_model)
    x = torch.randn(shape, generator=g).to(device)
    y = torch.randn(shape, generator=g).to(device)
    return net, x, y


def linear_stack_flops(width: int, depth: int, batch: int, *, input_grad: bool = False) -> int:
    """FLOPs of the matrix products of one training step of the Linear stack.

    A ``Linear(n_in, n_out)`` on ``batch`` rows does ``batch * n_in * n_out``
    multiply-accumulates (MACs), 2 FLOPs each, forward. Backward does two
    products of the same size: the weight gradient (``x^T @ grad_out``) and
    the input gradient (``grad_out @ W``). So a training step costs 6 FLOPs
    per MAC -- 2 forward, 4 backward -- which is the familiar rule
    ``6 * params * batch``, with ``params`` the weight-matrix entries (biases
    and the elementwise work are left out: they are not matrix products).

    Parameters
    ----------
    width, depth, batch : int
        The stack's shape and the rows of the batch.
    input_grad : bool, default False
        Count the first layer's input gradient too. Autograd skips it when
        the input does not require grad (the usual case, and the
        benchmark's), which takes ``2 * batch * width * width`` off.

    Returns
    -------
    int
        The FLOPs.

    Raises
    ------
    TypeError
        If ``input_grad`` is not a bool or a size not an int.
    ValueError
        If a size is below 1.

    Examples
    --------
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
    training step (as for :func:`linear_stack_flops`).

    Parameters
    ----------
    batch, seq_len, d_model, ff : int
        Sequences, tokens per sequence, model width and feed-forward width.
    input_grad : bool, default False
        Count the Q/K/V input gradient (``3 d^2`` MACs per token) that
        autograd skips when the input does not require grad.

    Returns
    -------
    int
        The FLOPs.

    Raises
    ------
    TypeError
        If ``input_grad`` is not a bool or a size not an int.
    ValueError
        If a size is below 1.

    Examples
    --------
    >>> flops = transformer_flops(2, 16, 32, 64)
    >>> flops
    1572864
    >>> transformer_flops(2, 16, 32, 64, input_grad=True) - flops
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
    """FLOPs of one training step of ``model`` at ``sizes``.

    Parameters
    ----------
    model : {"linear_stack", "transformer"}
        Which model (:data:`MODELS`).
    sizes : BenchSizes
        Its shapes.

    Returns
    -------
    int
        :func:`linear_stack_flops` or :func:`transformer_flops` of the shapes.

    Raises
    ------
    TypeError
        If ``sizes`` is not a :class:`BenchSizes`.
    ValueError
        If ``model`` is unknown.

    Examples
    --------
    >>> sizes = bench_sizes("cpu")
    >>> step_flops("linear_stack", sizes) == linear_stack_flops(128, 4, 1024)
    True
    """
    check_choice("model", model, MODELS)
    sizes = _check_sizes(sizes)
    if model == "linear_stack":
        return linear_stack_flops(sizes.width, sizes.depth, sizes.batch)
    return transformer_flops(sizes.tf_batch, sizes.seq_len, sizes.d_model, sizes.ff)


def torch_counted_flops(model: str, sizes: BenchSizes) -> int:
    """The FLOPs of one training step as torch's ``FlopCounterMode`` counts them.

    An independent check of :func:`step_flops`: builds ``model`` at ``sizes``
    on the CPU and runs forward, loss and backward under the counter, with
    attention forced onto the math backend (whose batched products the
    counter sees; it does not count every fused attention kernel).

    Parameters
    ----------
    model : {"linear_stack", "transformer"}
        Which model (:data:`MODELS`).
    sizes : BenchSizes
        Its shapes.

    Returns
    -------
    int
        The total FLOPs the counter saw.

    Raises
    ------
    TypeError
        If ``sizes`` is not a :class:`BenchSizes`.
    ValueError
        If ``model`` is unknown.

    Examples
    --------
    >>> tiny = BenchSizes(batch=16, width=16, depth=2, tf_batch=2, seq_len=8,
    ...                   d_model=16, n_heads=2, ff=32)
    >>> [torch_counted_flops(m, tiny) == step_flops(m, tiny) for m in MODELS]
    [True, True]
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    net, x, y = build_workload(model, sizes, "cpu")
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        F.mse_loss(net(x), y).backward()
    return int(counter.get_total_flops())
