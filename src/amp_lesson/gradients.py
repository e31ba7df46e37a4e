# One module: the digits model, its training and the histograms of the gradients it produces answer one
# question: what FP16 keeps of real gradients.
"""What real gradients look like, and what FP16 keeps of them.

The book trains a small MLP on scikit-learn's bundled 8×8 digits (no
download) and looks at every gradient value it produces. The question is
Micikevicius et al.'s (*Mixed Precision Training*, ICLR 2018, Fig. 3): how
many gradient values lie at or below half of FP16's smallest subnormal
``2**-24``, where a cast to FP16 flushes them to zero (values between
``2**-25`` and ``2**-24`` round up to ``2**-24``), and how many a loss scale
rescues. :func:`cast_shares` counts what the cast itself stores, so the
boundary is torch's rounding, not a threshold of this module.

>>> g = torch.tensor([0.0, 1e-9, 1e-6, 1e-3])
>>> shares = cast_shares(g, "fp16")
>>> # 1 of 4 is 0; 1 of the 3 others is lost
>>> shares.zero, shares.underflow, shares.subnormal
(0.25, 0.3333333333333333, 0.3333333333333333)
>>> # 1e-9 * 2**16 is a subnormal, not 0
>>> cast_shares(g, "fp16", scale=2.0**16).underflow
0.0

The module holds the data (:func:`load_digits_data`), the model
(:func:`amp_lesson.models.make_mlp` with :data:`DIGITS_HIDDEN`), the step and the loop (:func:`amp_step`,
:func:`train_digits`: FP32, or :func:`torch.autocast` with or without a
:class:`torch.amp.GradScaler`),
gradient collection (:func:`flat_grads`), the shares (:func:`cast_shares`)
and the histogram (:func:`log2_histogram`, :func:`plot_gradient_histogram`).

Why this module is long: the data, the loop, the shares and the histogram of one
experiment; half of its lines are docstrings.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from amp_lesson._checks import (
    check_input_dtype,
    check_int,
    check_optimizer,
    check_positive,
    check_seed,
    check_unscalable,
)
from amp_lesson.device import resolve_device
from amp_lesson.formats import dtype_of, format_spec
from amp_lesson.models import make_mlp

__all__ = [
    "DIGITS_HIDDEN",
    "CastShares",
    "DigitsData",
    "DigitsRun",
    "amp_step",
    "cast_shares",
    "flat_grads",
    "load_digits_data",
    "log2_histogram",
    "plot_gradient_histogram",
    "train_digits",
]

# --------------------------------------------------------------------------- data and model

DIGITS_HIDDEN: tuple[int, ...] = (128, 64)
"""The hidden widths of the digits classifier, ``make_mlp(64, DIGITS_HIDDEN, out_features=10)``."""


@dataclass(frozen=True)
class DigitsData:
    """The digits split into training and test tensors.

    Parameters
    ----------
    X_train, X_test : torch.Tensor
        float32 pixel intensities divided by 16 (so in ``[0, 1]``), 64 per image.
    y_train, y_test : torch.Tensor
        int64 class labels 0-9.
    """

    X_train: torch.Tensor
    y_train: torch.Tensor
    X_test: torch.Tensor
    y_test: torch.Tensor


def load_digits_data(
    n_test: int = 360, seed: int = 0, device: torch.device | str | None = None
) -> DigitsData:
    """Load scikit-learn's bundled digits (1797 images of 8×8 pixels), shuffled and split.

    The data ship inside scikit-learn, so nothing is downloaded. The
    shuffle is ``torch.randperm`` from a private generator.

    Parameters
    ----------
    n_test : int, default 360
        Images in the test set: the last ``n_test`` of the shuffle.
    seed : int, default 0
        Seed of the shuffle.
    device : torch.device or str, optional
        Where to put the tensors.

    Returns
    -------
    DigitsData
        The four tensors.

    Raises
    ------
    ImportError
        Without scikit-learn (it is in the ``docs`` extra).
    ValueError
        If ``n_test`` is not between 1 and the number of images, or ``seed`` outside
        ``[0, 2**64 - 1]``.

    Examples
    --------
    >>> d = load_digits_data(device="cpu")
    >>> tuple(d.X_train.shape), tuple(d.X_test.shape), float(d.X_train.max())
    ((1437, 64), (360, 64), 1.0)
    """
    try:
        from sklearn.datasets import load_digits
    except ImportError as error:  # pragma: no cover - scikit-learn is in the docs extra
        raise ImportError(
            "load_digits_data needs scikit-learn (pip install 'amp-lesson[docs]')"
        ) from error
    check_seed("seed", seed)
    digits = load_digits()
    n = len(digits.target)
    check_int("n_test", n_test, minimum=1)
    if n_test >= n:
        raise ValueError(f"n_test must be below the {n} images, got {n_test}")
    X = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target, dtype=torch.int64)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    train, test = order[: n - n_test], order[n - n_test :]
    device = resolve_device(device)
    return DigitsData(
        X[train].to(device), y[train].to(device), X[test].to(device), y[test].to(device)
    )


def flat_grads(model: nn.Module) -> torch.Tensor:
    """Every parameter's ``.grad``, flattened into one CPU tensor (a copy).

    Parameters
    ----------
    model : torch.nn.Module
        A model after ``backward()``; parameters without a gradient are skipped.

    Returns
    -------
    torch.Tensor
        One 1-d tensor in the gradients' dtype (float32 under autocast, whose
        ``.grad`` keeps the parameters' dtype), in ``model.parameters()`` order.

    Raises
    ------
    TypeError
        If ``model`` is not a module.
    ValueError
        If no parameter has a gradient.

    Examples
    --------
    >>> m = nn.Linear(2, 1)
    >>> m(torch.ones(1, 2)).sum().backward()
    >>> flat_grads(m).tolist()
    [1.0, 1.0, 1.0]
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    grads = [p.grad.detach().flatten() for p in model.parameters() if p.grad is not None]
    if not grads:
        raise ValueError("model has no gradients; call backward() first")
    return torch.cat(grads).to("cpu", copy=True)


# --------------------------------------------------------------------------- shares


@dataclass(frozen=True)
class CastShares:
    """What casting gradient values (times ``scale``) to a half format does.

    Parameters
    ----------
    format : str
        ``"fp16"`` or ``"bf16"``.
    scale : float
        The factor the values were multiplied by first.
    n : int
        Values.
    nonzero : int
        Non-zero values.
    zero : float
        Share of *all* values that are exactly zero before any cast.
    underflow : float
        Share of the non-zero values that become zero.
    subnormal : float
        Share of the non-zero values that become non-zero subnormals (fewer
        significant bits).
    overflow : float
        Share of the non-zero values that become ``±inf``.

    Examples
    --------
    >>> CastShares("fp16", 1.0, 4, 3, 0.25, 0.0, 0.0, 0.0).nonzero
    3
    """

    format: str
    scale: float
    n: int
    nonzero: int
    zero: float
    underflow: float
    subnormal: float
    overflow: float


def cast_shares(
    values: torch.Tensor, dtype: str | torch.dtype = "fp16", scale: float = 1.0
) -> CastShares:
    """Cast ``values * scale`` (in FP32) to ``dtype`` with torch and count what happened.

    Parameters
    ----------
    values : torch.Tensor
        Gradient values, any floating dtype.
    dtype : {"fp16", "bf16"} or torch.dtype, default "fp16"
        The half format.
    scale : float, default 1.0
        A loss scale to apply first.

    Returns
    -------
    CastShares
        The shares.

    Raises
    ------
    TypeError
        If ``values`` is not a floating-point tensor.
    ValueError
        If it is empty, ``scale`` is not positive or ``dtype`` not a half format.

    Examples
    --------
    >>> g = torch.tensor([1.0, 2.0**-25, 2.0**-20, 7e4])
    >>> cast_shares(g, "fp16").underflow
    0.25
    >>> s = cast_shares(g, "fp16", 2.0**10)
    >>> s.underflow, s.subnormal, s.overflow
    (0.0, 0.25, 0.25)
    """
    low = dtype_of(dtype)
    if not isinstance(values, torch.Tensor) or not values.is_floating_point():
        raise TypeError(f"values must be a floating-point torch.Tensor, got {values!r}")
    if values.numel() == 0:
        raise ValueError("values must hold at least one value, got an empty tensor")
    scale = check_positive("scale", scale)
    x = values.detach().flatten().float()
    stored = (x * torch.tensor(scale, dtype=torch.float32, device=x.device)).to(low).float()
    nonzero = x != 0
    count = int(nonzero.sum())
    spec = format_spec(low)

    def share(mask: torch.Tensor) -> float:
        return int((mask & nonzero).sum()) / count if count else 0.0

    mag = stored.abs()
    return CastShares(
        format=spec.name,
        scale=scale,
        n=x.numel(),
        nonzero=count,
        zero=1 - count / x.numel(),
        underflow=share(stored == 0),
        subnormal=share((mag > 0) & (mag < spec.smallest_normal)),
        overflow=share(torch.isinf(stored)),
    )


def log2_histogram(
    values: torch.Tensor, low: int = -40, high: int = 0
) -> tuple[list[int], list[float], float]:
    """Return the histogram of ``log2|values|`` in unit bins, with zeros counted apart.

    Parameters
    ----------
    values : torch.Tensor
        The values.
    low : int, default -40
        The first bin's exponent; values below ``2**low`` fall in it.
    high : int, default 0
        One past the last bin's exponent; values from ``2**high`` up fall in the last.

    Returns
    -------
    edges : list of int
        Bin ``i`` holds the non-zero values with ``2**edges[i] <= |v| < 2**(edges[i] + 1)``.
    shares : list of float
        Fractions of *all* values, so ``sum(shares) + zero_share == 1``.
    zero_share : float
        The fraction of zeros.

    Raises
    ------
    ValueError
        If ``high <= low``.

    Examples
    --------
    >>> g = torch.tensor([0.0, 0.3, 0.5, 2.0**-30])
    >>> edges, shares, zero = log2_histogram(g, -32, 0)
    >>> (zero, shares[edges.index(-2)], shares[edges.index(-1)],
    ...  shares[edges.index(-30)])
    (0.25, 0.25, 0.25, 0.25)
    """
    check_int("low", low)
    check_int("high", high)
    if high <= low:
        raise ValueError(f"high must be above low, got low={low}, high={high}")
    mag = values.detach().flatten().double().abs().cpu()
    n = mag.numel()
    nonzero = mag[mag > 0]
    exponents = torch.floor(torch.log2(nonzero)).clamp(low, high - 1).long() - low
    counts = torch.bincount(exponents, minlength=high - low)
    edges = list(range(low, high))
    return edges, [int(c) / n for c in counts], (n - nonzero.numel()) / n


def plot_gradient_histogram(
    values: torch.Tensor | None,
    ax: Any = None,
    *,
    low: int = -40,
    high: int = 17,
    label: str | None = None,
    dtype: str | torch.dtype = "fp16",
    overlay: bool = False,
    histogram: tuple[list[int], list[float], float] | None = None,
) -> Any:
    """Plot :func:`log2_histogram` with the FP16 (or BF16) limits marked.

    The zero bin is drawn apart, hatched, left of a break at ``low - 1.5``.
    The format's subnormal range is shaded lightly and its normal range
    darker, each labelled; dotted lines mark half the smallest subnormal (at
    or below it a cast gives zero), the smallest subnormal, the smallest
    normal and the largest value.

    Parameters
    ----------
    values : torch.Tensor
        Gradient values.
    ax : matplotlib.axes.Axes, optional
        Where to draw (default: new axes).
    low, high : int
        The histogram's range of exponents (see :func:`log2_histogram`).
    label : str, optional
        The legend label.
    dtype : {"fp16", "bf16"} or torch.dtype, default "fp16"
        The format whose limits to mark.
    overlay : bool, default False
        Draw a dashed step outline and a hollow zero marker on axes that
        already hold a histogram, instead of bars and limits.
    histogram : (edges, shares, zero_share), optional
        A histogram :func:`log2_histogram` made already (``values`` is then
        ``None``, and ``low``/``high`` are read from ``edges``).

    Returns
    -------
    matplotlib.axes.Axes
        The axes drawn on.
    """
    import matplotlib.pyplot as plt

    from amp_lesson.plotting import power_label

    spec = format_spec(dtype_of(dtype))
    if ax is None:
        _, ax = plt.subplots()
    if histogram is not None:
        edges, shares, zero = histogram
        low, high = edges[0], edges[-1] + 1
    else:
        edges, shares, zero = log2_histogram(values, low, high)
    pct = [100 * s for s in shares]
    zero_x = low - 3
    if overlay:
        ax.step(
            [*edges, high],
            [*pct, pct[-1]],
            where="post",
            color="#D55E00",
            linestyle="--",
            linewidth=1.4,
            label=label,
        )
        ax.plot(
            [zero_x],
            [100 * zero],
            marker="o",
            markersize=7,
            markerfacecolor="none",
            markeredgewidth=1.4,
            color="#D55E00",
            linestyle="none",
        )
        return ax
    ax.bar([e + 0.5 for e in edges], pct, width=1.0, color="#0072B2", alpha=0.85, label=label)
    ax.bar([zero_x], [100 * zero], width=1.6, color="#0072B2", alpha=0.85, hatch="//")
    sub_low, normal_low = math.log2(spec.smallest_subnormal), math.log2(spec.smallest_normal)
    top = math.log2(spec.max)
    largest = f"{spec.max:.0f}" if spec.max < 1e6 else power_label(2, round(top))
    # The bands and limits are named in the legend: words inside a band an inch wide
    # were too small to read on a phone.
    ax.axvspan(sub_low, normal_low, color="#E69F00", alpha=0.18, lw=0,
               label=f"{spec.label} subnormals")  # fmt: skip
    ax.axvspan(normal_low, top, color="#009E73", alpha=0.12, lw=0,
               label=f"{spec.label} normal numbers, to {largest}")  # fmt: skip
    limits = f"{spec.label}'s limits (a cast gives 0 left of them)"
    for i, x in enumerate((sub_low - 1, sub_low, normal_low, top)):
        ax.axvline(x, color="black", linestyle=":", linewidth=0.9,
                   label=None if i else limits)  # fmt: skip
    ax.axvline(low - 1.5, color="grey", linewidth=0.8)
    step = 10 if high - low <= 80 else 40
    first = low - low % step + step  # leave room for the zero bin's label
    ticks = list(range(first, high + 1, step))
    ax.set_xticks([zero_x, *ticks], ["0", *(power_label(2, t) for t in ticks)])
    ax.set_xlim(zero_x - 1.5, high)
    ax.set_xlabel("|gradient|, a bar per power of two (zeros at left)")
    ax.set_ylabel("% of all values")
    return ax


# --------------------------------------------------------------------------- training


@dataclass(frozen=True)
class DigitsRun:
    """What one :func:`train_digits` run did.

    Parameters
    ----------
    losses : list of float
        Each step's training loss (before ``loss_multiplier``).
    epoch_losses : list of float
        Their mean per epoch.
    test_accuracy : float
        Measured in FP32 after training.
    skipped : int
        Steps a GradScaler skipped.
    final_scale : float or None
        The scaler's last scale (``None`` without one).
    grads : dict of int to torch.Tensor
        For the steps asked for (numbered from 1), :func:`flat_grads` taken
        just before the optimizer step and unscaled by the GradScaler (so they
        are the gradients of ``loss * loss_multiplier``).
    params : dict of str to torch.Tensor
        The final parameters (CPU copies).
    """

    losses: list[float]
    epoch_losses: list[float]
    test_accuracy: float
    skipped: int
    final_scale: float | None
    grads: dict[int, torch.Tensor] = field(default_factory=dict)
    params: dict[str, torch.Tensor] = field(default_factory=dict)


def _check_step(
    model: Any, optimizer: Any, scaler: Any, X: Any, autocast_dtype: Any
) -> torch.dtype | None:
    """:func:`amp_step`'s arguments, checked; returns the autocast dtype (``None``: FP32)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    check_optimizer("optimizer", optimizer, model)
    if not isinstance(scaler, torch.amp.GradScaler):
        raise TypeError(f"scaler must be a torch.amp.GradScaler, got {type(scaler).__name__}")
    check_unscalable("model", model, scaler)
    if not isinstance(X, torch.Tensor):
        raise TypeError(f"X must be a torch.Tensor, got {type(X).__name__}")
    if autocast_dtype is not None:
        autocast_dtype = dtype_of(autocast_dtype, name="autocast_dtype")
    check_input_dtype("X", X, model, autocast_dtype)
    return autocast_dtype


def amp_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    X: torch.Tensor,
    y: torch.Tensor,
    *,
    autocast_dtype: torch.dtype | None = None,
    loss_multiplier: float = 1.0,
    keep_grads: bool = False,
) -> tuple[float, bool, torch.Tensor | None]:
    """One training step; a disabled scaler makes it a plain FP32 step.

    Parameters
    ----------
    model : torch.nn.Module
        The classifier.
    optimizer : torch.optim.Optimizer
        Its optimizer.
    scaler : torch.amp.GradScaler
        The scaler (``enabled=False`` for no loss scaling).
    X, y : torch.Tensor
        The batch and its labels.
    autocast_dtype : torch.dtype, optional
        Run forward and loss under autocast to it; ``None`` is FP32.
    loss_multiplier : float, default 1.0
        Multiplies the loss before backward.
    keep_grads : bool, default False
        Return the unscaled gradients.

    Returns
    -------
    loss : float
        The step's loss.
    skipped : bool
        Whether the scaler skipped the step (its scale dropped).
    grads : torch.Tensor or None
        :func:`flat_grads` after ``unscale_``, with ``keep_grads``.

    Raises
    ------
    TypeError
        If an argument is of the wrong kind.
    ValueError
        If ``optimizer`` misses some of the model's trainable parameters
        (one built over another model's would train nothing),
        ``autocast_dtype`` is not a half format, ``X``'s dtype is not one
        the model takes, or the scaler would refuse float16 gradients.
    """
    autocast_dtype = _check_step(model, optimizer, scaler, X, autocast_dtype)
    optimizer.zero_grad(set_to_none=True)
    on = autocast_dtype is not None
    low = autocast_dtype or torch.float16  # the dtype autocast uses when on
    with torch.autocast(X.device.type, dtype=low, enabled=on):
        loss = nn.functional.cross_entropy(model(X), y)  # forward and loss only
    scaler.scale(loss * loss_multiplier).backward()  # backward outside autocast
    scaler.unscale_(optimizer)  # only to look at (or clip) the true gradients
    grads = flat_grads(model) if keep_grads else None
    scale = scaler.get_scale()
    scaler.step(optimizer)  # skips the step if a gradient is inf or NaN
    scaler.update()
    return float(loss.detach()), scaler.get_scale() < scale, grads


def _accuracy(model: nn.Module, X: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float((model(X).argmax(dim=1) == y).float().mean())


def train_digits(
    data: DigitsData,
    *,
    autocast_dtype: torch.dtype | None = None,
    scaler: bool = False,
    loss_multiplier: float = 1.0,
    epochs: int = 10,
    batch_size: int = 64,
    lr: float = 0.1,
    momentum: float = 0.9,
    seed: int = 0,
    record_grads_at: Iterable[int] = (),
) -> DigitsRun:
    """Train the digits MLP (:data:`DIGITS_HIDDEN`) on ``data`` with SGD and momentum.

    Each step is :func:`amp_step`. Parameters, their gradients and the
    optimizer state stay FP32 whatever the autocast dtype.

    Parameters
    ----------
    data : DigitsData
        The split data.
    autocast_dtype : {None, "fp16", "bf16"} or torch.dtype, optional
        Run the forward pass and the loss under :func:`torch.autocast` to it;
        ``None`` trains in FP32.
    scaler : bool, default False
        Add a ``torch.amp.GradScaler`` for the data's device type, with its defaults.
    loss_multiplier : float, default 1.0
        Multiplies the loss before ``backward`` and divides the learning rate,
        so FP32 training is unchanged (exactly, for a power of two) while
        every gradient is that many times smaller: a stand-in for a model
        whose gradients are tiny.
    epochs : int, default 10
        Passes over the training set.
    batch_size : int, default 64
        Images per step.
    lr : float, default 0.1
        Learning rate (before ``loss_multiplier``).
    momentum : float, default 0.9
        SGD momentum.
    seed : int, default 0
        Seeds the model and the shuffling, so runs with one seed see the same
        batches in the same order.
    record_grads_at : iterable of int, default ()
        Steps (from 1) whose gradients to keep.

    Returns
    -------
    DigitsRun
        Losses, accuracy, skipped steps, kept gradients and final parameters.

    Raises
    ------
    TypeError
        If ``scaler`` is not a bool.
    ValueError
        If a number is out of range or ``autocast_dtype`` is not a half format.

    Examples
    --------
    >>> d = load_digits_data(device="cpu")
    >>> run = train_digits(d, epochs=2, record_grads_at=[1])
    >>> len(run.losses), run.skipped, run.grads[1].numel(), run.test_accuracy > 0.8
    (46, 0, 17226, True)
    """
    if autocast_dtype is not None:
        autocast_dtype = dtype_of(autocast_dtype, name="autocast_dtype")
    if not isinstance(scaler, bool):
        raise TypeError(f"scaler must be True or False, got {scaler!r}")
    loss_multiplier = check_positive("loss_multiplier", loss_multiplier)
    check_seed("seed", seed)
    check_int("epochs", epochs, minimum=1)
    check_int("batch_size", batch_size, minimum=1)
    record = set(record_grads_at)
    device = data.X_train.device
    model = make_mlp(64, DIGITS_HIDDEN, out_features=10, seed=seed, device=device)
    lr = check_positive("lr", lr) / loss_multiplier
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    grad_scaler = torch.amp.GradScaler(device.type, enabled=scaler)
    order = torch.Generator().manual_seed(seed)
    losses, epoch_losses, grads, skipped = [], [], {}, 0
    for _ in range(epochs):
        epoch = []
        for batch in torch.randperm(len(data.X_train), generator=order).split(batch_size):
            step = len(losses) + 1
            loss, was_skipped, g = amp_step(
                model,
                optimizer,
                grad_scaler,
                data.X_train[batch],
                data.y_train[batch],
                autocast_dtype=autocast_dtype,
                loss_multiplier=loss_multiplier,
                keep_grads=step in record,
            )
            losses.append(loss)
            epoch.append(loss)
            skipped += was_skipped
            if g is not None:
                grads[step] = g
        epoch_losses.append(sum(epoch) / len(epoch))
    return DigitsRun(
        losses=losses,
        epoch_losses=epoch_losses,
        test_accuracy=_accuracy(model, data.X_test, data.y_test),
        skipped=int(skipped),
        final_scale=float(grad_scaler.get_scale()) if scaler else None,
        grads=grads,
        params={k: v.detach().to("cpu", copy=True) for k, v in model.named_parameters()},
    )
