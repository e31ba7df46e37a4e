# One module: the loops the book compares bit for bit, with the toy problem they share and the comparisons
# that read them: apart, the reader would chase one loop's pieces through three modules.
"""The training loops the book runs, and the reader copies.

Gradient accumulation trades time for memory: instead of one backward pass on
a batch of ``B`` samples, run ``N`` backward passes on micro-batches of
``B / N`` samples and step the optimizer once. ``backward()`` *adds* into
``.grad``, so dividing each micro-batch's (mean) loss by ``N`` makes the sum
of the ``N`` gradients equal to the gradient of the full batch's mean loss.

Mixed precision adds two rules: run only the forward pass and the loss under
:func:`torch.autocast`, and route ``backward``/``step`` through a
:class:`torch.amp.GradScaler`. With both, one optimizer step reads::

    xs, ys = X.tensor_split(n_accum), y.tensor_split(n_accum)
    for xb, yb in zip(xs, ys, strict=True):
        with torch.autocast(device.type, dtype=torch.float16):
            loss = loss_fn(model(xb), yb) / n_accum
        scaler.scale(loss).backward()
    scaler.unscale_(optimizer)                # only if you clip
    clip_grad_norm_(model.parameters(), 1.0)  # only if you clip
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()

This module holds

- the lesson's toy problem: :func:`make_toy_problem`, :func:`make_toy_model`,
  :func:`make_toy_optimizer`;
- the correct loops: :func:`train_full_batch`, :func:`train_accumulated`,
  :func:`train_amp`, :func:`train_amp_accumulated`;
- the wrong loop the book warns about, one mistake at a time:
  :func:`train_amp_mistake` (see :data:`MISTAKES`);
- :func:`grad_after_backward` (the gradient one accumulation cycle leaves in
  ``.grad``) and :func:`compare_params` / :func:`max_abs_diff` to compare
  two runs bit for bit.

Every loop records one :class:`StepLog` per optimizer step and returns a
:class:`TrainResult`. The loops run on the device the model's parameters are
on (pass ``device=`` to move model and data first), on CPU and CUDA alike.

Why this module is long: the toy problem, the loops that must stand side by side (so
that each mistake is visibly one branch of the correct loop) and the bound they are tested
against; more than half of its lines are docstrings, whose examples run as tests.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import nn
from torch.nn.utils import clip_grad_norm_

from amp_lesson._checks import (
    check_bool,
    check_choice,
    check_dtype,
    check_finite,
    check_input_dtype,
    check_int,
    check_optimizer,
    check_positive,
    check_scaler_kwargs,
    check_seed,
    check_unscalable,
)
from amp_lesson.device import place_model, resolve_device
from amp_lesson.formats import dtype_of

__all__ = [
    "MISTAKES",
    "TOY_MAX_VALUES",
    "ParamComparison",
    "StepLog",
    "TrainResult",
    "compare_params",
    "first_step_bound",
    "grad_after_backward",
    "make_toy_model",
    "make_toy_optimizer",
    "make_toy_problem",
    "max_abs_diff",
    "train_accumulated",
    "train_amp",
    "train_amp_accumulated",
    "train_amp_mistake",
    "train_full_batch",
]

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

MISTAKES: tuple[str, ...] = (
    "raw_loss",
    "no_update",
    "new_scaler_each_step",
    "optimizer_step",
    "clip_before_unscale",
)
"""The mistakes :func:`train_amp_mistake` can make, one at a time.

- ``"raw_loss"``: the micro-batch loss is not divided by ``n_accum``, so the
  accumulated gradient is ``n_accum`` times too large.
- ``"no_update"``: ``scaler.update()`` is never called. The first step's
  scale is never shrunk after an overflow; the *second* ``scaler.step()``
  raises ``RuntimeError: step() has already been called since the last
  update()``, so this mistake is loud from the second step on.
- ``"new_scaler_each_step"``: a fresh ``GradScaler`` every optimizer step,
  so the scale never learns: each step starts from ``init_scale`` again, and
  if that overflows every step is skipped -- quietly, forever.
- ``"optimizer_step"``: ``optimizer.step()`` instead of ``scaler.step(optimizer)``:
  the optimizer applies the *scaled* gradients, and steps even when they hold
  ``inf``/``NaN``. (``scaler.update()`` has to go too: without a
  ``scaler.step`` it raises ``AssertionError: No inf checks were recorded``.)
- ``"clip_before_unscale"``: ``clip_grad_norm_`` runs on the scaled
  gradients, so the threshold is compared with ``scale`` times the true norm.
"""

# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class StepLog:
    """What one optimizer step did.

    Parameters
    ----------
    step : int
        The optimizer step, from 1.
    loss : float
        The loss of the whole effective batch (the value a full-batch loop
        would report), before any loss scaling.
    micro_losses : tuple of float
        The per-micro-batch values that were back-propagated, i.e.
        ``loss / n_accum`` (the lesson's "scaled_loss" column; loss scaling by
        the GradScaler is *not* included).
    scale : float or None
        The GradScaler's scale during this step's backward passes (``None``
        without a scaler).
    found_inf : bool
        Whether the gradient held an ``inf`` or ``NaN``.
    skipped : bool
        Whether the optimizer step was not applied (GradScaler skips exactly
        the steps with ``found_inf``).
    grad_norm : float
        The 2-norm of the unscaled gradient before any clipping.
    clipped_norm : float, optional
        The norm ``clip_grad_norm_`` measured (and clipped to ``clip_norm``),
        after unscaling; ``None`` when the loop did not clip.

    Examples
    --------
    >>> log = StepLog(step=1, loss=0.69, micro_losses=(0.69,), scale=None,
    ...               found_inf=False, skipped=False, grad_norm=0.3)
    >>> log.step, log.skipped
    (1, False)
    """

    step: int
    loss: float
    micro_losses: tuple[float, ...]
    scale: float | None
    found_inf: bool
    skipped: bool
    grad_norm: float
    clipped_norm: float | None = None


@dataclass(frozen=True)
class TrainResult:
    """Final parameters and the per-step log of a loop.

    Parameters
    ----------
    params : dict of str to torch.Tensor
        The final parameters by name (detached CPU copies).
    log : list of StepLog
        One entry per optimizer step.
    final_scale : float, optional
        The GradScaler's scale at the end (``None`` without a scaler).

    Examples
    --------
    >>> X, y = make_toy_problem(device="cpu")
    >>> model = make_toy_model(device="cpu")
    >>> loss_fn = nn.BCEWithLogitsLoss()
    >>> result = train_full_batch(model, make_toy_optimizer(model), X, y, loss_fn)
    >>> [round(w, 5) for w in result.weight.flatten().tolist()]
    [0.03085, 0.02717]
    >>> len(result.log), result.final_scale is None
    (1, True)
    """

    params: dict[str, torch.Tensor]
    log: list[StepLog] = field(default_factory=list)
    final_scale: float | None = None

    @property
    def weight(self) -> torch.Tensor:
        """The parameter called ``weight`` (the toy model's only parameter)."""
        if "weight" not in self.params:
            raise AttributeError(
                f"this model has no parameter named 'weight'; its parameters are {list(self.params)}"
            )
        return self.params["weight"]

    @property
    def losses(self) -> list[float]:
        """The effective-batch loss of each step."""
        return [entry.loss for entry in self.log]


@dataclass(frozen=True)
class ParamComparison:
    """How far apart two sets of parameters are.

    Parameters
    ----------
    max_abs_diff : float
        The largest absolute difference over all parameters (``nan`` if
        either side holds a ``NaN``).
    bitwise_equal : bool
        ``torch.equal`` on every parameter.

    Examples
    --------
    >>> a = {"w": torch.tensor([1.0, 2.0])}
    >>> compare_params(a, {"w": torch.tensor([1.0, 2.5])})
    ParamComparison(max_abs_diff=0.5, bitwise_equal=False)
    """

    max_abs_diff: float
    bitwise_equal: bool


# --------------------------------------------------------------------------- the toy problem


TOY_MAX_VALUES = 2**28
"""The most values :func:`make_toy_problem` draws (``n_samples * n_features``): 1 GiB in
float32, all drawn at once."""

_TOY_WHY = "the toy problem is drawn in memory at once, 1 GiB of float32 at most"


def make_toy_problem(
    seed: int = 42,
    n_samples: int = 128,
    n_features: int = 2,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the lesson's toy data: ``X ~ N(0, 1)`` and the label ``y = (sum of the features > 0)``.

    The numbers are those of ``torch.manual_seed(seed); X = torch.randn(n, f)``
    (drawn from a private generator, so the global RNG is left alone), drawn
    in float32 and then converted to ``dtype``, so the float64 problem holds
    the same samples.

    Parameters
    ----------
    seed : int, default 42
        The seed, from 0 to ``2**64 - 1`` (the seeds torch's generators take).
    n_samples : int, default 128
        Rows.
    n_features : int, default 2
        Features per row.
    dtype : torch.dtype, default torch.float32
        float32 or float64.
    device : torch.device or str, optional
        Where to put the data.

    Returns
    -------
    X : torch.Tensor
        Shape ``(n_samples, n_features)``.
    y : torch.Tensor
        Shape ``(n_samples, 1)``, like the model's output, so
        ``loss_fn(model(X), y)`` needs no reshaping.

    Raises
    ------
    TypeError
        If ``dtype`` is not a torch dtype, or ``seed`` or a count not an int.
    ValueError
        If a count or ``seed`` is out of range (the counts' product at most
        :data:`TOY_MAX_VALUES`) or ``dtype`` is neither float32 nor float64.

    Examples
    --------
    >>> X, y = make_toy_problem(device="cpu")
    >>> tuple(X.shape), tuple(y.shape), y.sum().item()
    ((128, 2), (128, 1), 69.0)
    """
    check_seed("seed", seed)
    check_int("n_samples", n_samples, minimum=1, maximum=TOY_MAX_VALUES, why=_TOY_WHY)
    check_int("n_features", n_features, minimum=1, maximum=TOY_MAX_VALUES, why=_TOY_WHY)
    if n_samples * n_features > TOY_MAX_VALUES:
        raise ValueError(
            f"n_samples * n_features must be at most 2**28 ({_TOY_WHY}), got "
            f"{n_samples} * {n_features} = {n_samples * n_features}"
        )
    check_dtype("dtype", dtype, (torch.float32, torch.float64))
    device = resolve_device(device)
    generator = torch.Generator().manual_seed(seed)
    X = torch.randn(n_samples, n_features, generator=generator)
    y = (X.sum(dim=1, keepdim=True) > 0).float()
    return X.to(device=device, dtype=dtype), y.to(device=device, dtype=dtype)


def make_toy_model(
    n_features: int = 2,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> nn.Linear:
    """Return the toy problem's model: ``Linear(n_features, 1, bias=False)`` with a zero weight.

    A zero start makes the first step's weights a scaled gradient, which the
    lesson's tables read off directly.

    Parameters
    ----------
    n_features : int, default 2
        Inputs.
    dtype : torch.dtype, default torch.float32
        float32 or float64.
    device : torch.device or str, optional
        Where the model lives.

    Returns
    -------
    torch.nn.Linear
        The model.

    Raises
    ------
    TypeError
        If ``dtype`` is not a torch dtype.
    ValueError
        If ``n_features`` is below 1 or ``dtype`` is neither float32 nor float64.

    Examples
    --------
    >>> make_toy_model(device="cpu").weight
    Parameter containing:
    tensor([[0., 0.]], requires_grad=True)
    """
    check_int("n_features", n_features, minimum=1)
    check_dtype("dtype", dtype, (torch.float32, torch.float64))
    model = nn.Linear(n_features, 1, bias=False, device=resolve_device(device), dtype=dtype)
    with torch.no_grad():
        model.weight.zero_()
    return model


def make_toy_optimizer(model: nn.Module, lr: float = 0.1) -> torch.optim.SGD:
    """Return the toy problem's optimizer: plain SGD with learning rate ``lr``.

    Parameters
    ----------
    model : torch.nn.Module
        The model whose parameters to optimise.
    lr : float, default 0.1
        The learning rate.

    Returns
    -------
    torch.optim.SGD
        The optimizer.

    Raises
    ------
    TypeError
        If ``model`` is not a module.
    ValueError
        If ``lr`` is not a positive finite number.

    Examples
    --------
    >>> make_toy_optimizer(make_toy_model(device="cpu")).param_groups[0]["lr"]
    0.1
    >>> make_toy_optimizer(make_toy_model(device="cpu"), lr=float("nan"))
    Traceback (most recent call last):
    ...
    ValueError: lr must be a finite number, got nan
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    return torch.optim.SGD(model.parameters(), lr=check_positive("lr", lr))


# --------------------------------------------------------------------------- helpers


def _prepare(
    model: Any,
    optimizer: Any,
    X: Any,
    y: Any,
    loss_fn: Any,
    *,
    steps: Any = 1,
    n_accum: Any = 1,
    weight_by_samples: Any = False,
    device: Any = None,
    autocast_dtype: Any = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.device]:
    """Check the common arguments, move model and data to one device."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    params = list(model.parameters())
    if not params:
        raise ValueError("model must have at least one parameter")
    if optimizer is not None:
        check_optimizer("optimizer", optimizer, model)
        for group in optimizer.param_groups:
            if not isinstance(group.get("lr"), torch.Tensor):
                check_finite("optimizer lr", group.get("lr"))
    for name, value in (("X", X), ("y", y)):
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
        if value.dim() == 0:
            raise ValueError(f"{name} must have a batch dimension, got a 0-d tensor")
    if len(X) != len(y):
        raise ValueError(f"X and y must hold the same number of samples, got {len(X)} and {len(y)}")
    if len(X) == 0:
        raise ValueError("X must hold at least one sample, got an empty batch")
    check_input_dtype("X", X, model, autocast_dtype)
    if not callable(loss_fn):
        raise TypeError(f"loss_fn must be callable, got {type(loss_fn).__name__}")
    check_int("steps", steps, minimum=1)
    check_int("n_accum", n_accum, minimum=1)
    check_bool("weight_by_samples", weight_by_samples)
    if n_accum > len(X):
        raise ValueError(
            f"n_accum must be <= the batch size ({len(X)}) so no micro-batch is empty, "
            f"got n_accum={n_accum}"
        )
    if len(X) % n_accum and not weight_by_samples:
        raise ValueError(
            f"n_accum={n_accum} does not divide the batch size {len(X)}: micro-batches "
            "would differ in size and loss / n_accum would weight their samples unequally; "
            "pick an n_accum that divides the batch size or pass weight_by_samples=True"
        )
    device = place_model(model, device)
    return X.to(device), y.to(device), device


def _make_scaler(device: torch.device, scaler_kwargs: Any) -> torch.amp.GradScaler:
    return torch.amp.GradScaler(device.type, **check_scaler_kwargs("scaler_kwargs", scaler_kwargs))


def _check_amp_args(dtype: Any, clip_norm: Any) -> torch.dtype:
    if clip_norm is not None:
        check_positive("clip_norm", clip_norm)
    return dtype_of(dtype)


def _record(
    step: int,
    micro: list[torch.Tensor],
    model: nn.Module,
    scaler: torch.amp.GradScaler | None = None,
    *,
    steps_on_inf: bool = False,
    loss_divisor: int = 1,
) -> StepLog:
    """Log the step whose gradient ``model`` now holds (call before clipping/stepping)."""
    scale = None if scaler is None else float(scaler.get_scale())
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    found_inf = not all(bool(torch.isfinite(g).all()) for g in grads)
    norm = math.sqrt(sum(float(g.double().square().sum()) for g in grads))
    micro_losses = tuple(float(v) for v in torch.stack([m.float() for m in micro]).tolist())
    total: Any = 0.0
    for m in micro:  # in float32, in order, as the recipe adds its window's losses
        total = total + m.detach().float()
    return StepLog(
        step=step,
        loss=float(total) / loss_divisor,
        micro_losses=micro_losses,
        scale=scale,
        found_inf=found_inf,
        skipped=found_inf and not steps_on_inf,
        grad_norm=norm / (scale or 1.0),
    )


def _result(
    model: nn.Module, log: list[StepLog], scaler: torch.amp.GradScaler | None = None
) -> TrainResult:
    params = {name: p.detach().to("cpu", copy=True) for name, p in model.named_parameters()}
    final_scale = None if scaler is None else float(scaler.get_scale())
    return TrainResult(params=params, log=log, final_scale=final_scale)


# --------------------------------------------------------------------------- the loops


def train_full_batch(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    X: torch.Tensor,
    y: torch.Tensor,
    loss_fn: LossFn,
    *,
    steps: int = 1,
    device: torch.device | str | None = None,
) -> TrainResult:
    """Train in plain FP32: one forward, backward and step on the whole batch per step.

    Parameters
    ----------
    model : torch.nn.Module
        The model.
    optimizer : torch.optim.Optimizer
        Its optimizer; it must hold every trainable parameter of ``model``
        (freeze one with ``requires_grad_(False)``, not by leaving it out).
    X, y : torch.Tensor
        The batch and its targets; ``X`` in the dtype of the model's parameters.
    loss_fn : callable
        ``loss_fn(output, target)``, a mean loss.
    steps : int, default 1
        Optimizer steps.
    device : torch.device or str, optional
        Move model and data there first (default: the model's device).

    Returns
    -------
    TrainResult
        The final parameters and one :class:`StepLog` per step.

    Raises
    ------
    TypeError, ValueError
        If an argument is of the wrong kind or out of range (the message names it),
        among them an ``optimizer`` that misses some of the model's trainable
        parameters (one built over another model's would train nothing) and an
        ``X`` whose dtype the model's parameters cannot take.

    Examples
    --------
    >>> X, y = make_toy_problem(device="cpu")
    >>> model = make_toy_model(device="cpu")
    >>> loss_fn = nn.BCEWithLogitsLoss()
    >>> r = train_full_batch(model, make_toy_optimizer(model), X, y, loss_fn)
    >>> round(r.log[0].loss, 5), [round(w, 5) for w in r.weight.flatten().tolist()]
    (0.69315, [0.03085, 0.02717])
    """
    X, y, device = _prepare(model, optimizer, X, y, loss_fn, steps=steps, device=device)
    log = []
    optimizer.zero_grad()
    for step in range(1, steps + 1):
        loss = loss_fn(model(X), y)
        loss.backward()
        log.append(_record(step, [loss.detach()], model))  # bookkeeping for the book
        optimizer.step()
        optimizer.zero_grad()
    return _result(model, log)


def train_accumulated(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    X: torch.Tensor,
    y: torch.Tensor,
    loss_fn: LossFn,
    n_accum: int,
    *,
    steps: int = 1,
    weight_by_samples: bool = False,
    device: torch.device | str | None = None,
) -> TrainResult:
    """Train in FP32 with gradient accumulation: ``n_accum`` micro-batches per optimizer step.

    The batch is cut into ``n_accum`` contiguous micro-batches
    (``tensor_split``; the same as ``chunk`` when ``n_accum`` divides the batch
    size). Each micro-batch's loss is divided by ``n_accum`` and
    back-propagated; ``backward()`` adds into ``.grad``, so the optimizer,
    stepping once the last one is done, sees the full batch's gradient.

    Parameters
    ----------
    model : torch.nn.Module
        The model.
    optimizer : torch.optim.Optimizer
        Its optimizer; it must hold every trainable parameter of ``model``
        (freeze one with ``requires_grad_(False)``, not by leaving it out).
    X, y : torch.Tensor
        The batch and its targets; ``X`` in the dtype of the model's parameters.
    loss_fn : callable
        ``loss_fn(output, target)``, a mean loss.
    n_accum : int
        Micro-batches per optimizer step.
    steps : int, default 1
        Optimizer steps.
    weight_by_samples : bool, default False
        If ``n_accum`` does not divide the batch size this function raises,
        unless this is true: then each micro-batch's loss is divided by
        ``batch_size / micro_batch_size`` instead, i.e. weighted by its share of
        the samples, which again gives the full batch's mean loss.
    device : torch.device or str, optional
        Move model and data there first (default: the model's device).

    Returns
    -------
    TrainResult
        The final parameters and one :class:`StepLog` per step.

    Raises
    ------
    TypeError, ValueError
        If an argument is of the wrong kind or out of range (the message names it),
        among them an ``optimizer`` that misses some of the model's trainable
        parameters (one built over another model's would train nothing) and an
        ``X`` whose dtype the model's parameters cannot take.

    Examples
    --------
    >>> X, y = make_toy_problem(device="cpu")
    >>> model = make_toy_model(device="cpu")
    >>> loss_fn = nn.BCEWithLogitsLoss()
    >>> r = train_accumulated(model, make_toy_optimizer(model), X, y, loss_fn, 4)
    >>> [round(v, 5) for v in r.log[0].micro_losses]
    [0.17329, 0.17329, 0.17329, 0.17329]
    >>> [round(w, 5) for w in r.weight.flatten().tolist()]
    [0.03085, 0.02717]
    """
    X, y, device = _prepare(
        model, optimizer, X, y, loss_fn, steps=steps, n_accum=n_accum,
        weight_by_samples=weight_by_samples, device=device,
    )  # fmt: skip
    log = []
    optimizer.zero_grad()
    for step in range(1, steps + 1):
        micro = []
        for xb, yb in zip(X.tensor_split(n_accum), y.tensor_split(n_accum), strict=True):
            divisor = len(X) / len(xb) if weight_by_samples else n_accum
            loss = loss_fn(model(xb), yb) / divisor
            loss.backward()  # adds into .grad
            micro.append(loss.detach())
        log.append(_record(step, micro, model))  # bookkeeping for the book
        optimizer.step()
        optimizer.zero_grad()
    return _result(model, log)


# What the three AMP loops share of their documentation, written once: each docstring names
# a piece as {piece}, filled in at import (so help(), the API reference and the docstring
# checks read the whole text).
_AMP_DOCS = {
    "amp_inputs": """\
model : torch.nn.Module
    The model (FP32 parameters).
optimizer : torch.optim.Optimizer
    Its optimizer; it must hold every trainable parameter of ``model``
    (freeze one with ``requires_grad_(False)``, not by leaving it out).
X, y : torch.Tensor
    The batch and its targets; ``X`` in the dtype of the model's parameters
    (or float16/bfloat16, which autocast casts too).
loss_fn : callable
    ``loss_fn(output, target)``, a mean loss.
""",
    "amp_scaler": """\
scaler_kwargs : dict, optional
    Passed to ``GradScaler(device.type, **scaler_kwargs)``: ``init_scale``
    (a float32 value > 0), ``growth_factor`` (> 1), ``backoff_factor`` (in
    ``(0, 1)``), ``growth_interval`` (an int from 1 to ``2**63 - 1``) and
    ``enabled`` (a bool), checked as :class:`~amp_lesson.scaler.ScalerSimulator`
    checks its settings.
dtype : {"fp16", "bf16"} or torch.dtype, default torch.float16
    The autocast dtype.
""",
    "amp_device_returns": """\
device : torch.device or str, optional
    Move model and data there first (default: the model's device).

Returns
-------
TrainResult
    The final parameters, one :class:`StepLog` per step and the final scale.
""",
    "amp_raises": """\
TypeError, ValueError
    If an argument is of the wrong kind or out of range (the message names it),
    among them an ``optimizer`` that misses some of the model's trainable
    parameters (one built over another model's would train nothing), an ``X``
    whose dtype the model's parameters cannot take, float16 parameters with
    an enabled scaler (GradScaler refuses to unscale them), and
    ``scaler_kwargs`` that GradScaler would refuse, or misread (an
    ``init_scale`` beyond float32, an ``enabled`` that is not a bool).
""",
}


def _amp_docs(func: Callable[..., Any]) -> Callable[..., Any]:
    """Fill in the shared pieces (:data:`_AMP_DOCS`) of ``func``'s docstring."""
    doc = func.__doc__ or ""
    for name, text in _AMP_DOCS.items():
        doc = doc.replace("    {" + name + "}\n", textwrap.indent(text, "    "))
    func.__doc__ = doc
    return func


@_amp_docs
def train_amp(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    X: torch.Tensor,
    y: torch.Tensor,
    loss_fn: LossFn,
    *,
    steps: int = 1,
    scaler_kwargs: Mapping[str, Any] | None = None,
    dtype: torch.dtype = torch.float16,
    clip_norm: float | None = None,
    device: torch.device | str | None = None,
) -> TrainResult:
    """Train in mixed precision on the whole batch: autocast and ``torch.amp.GradScaler``.

    The same loop as :func:`train_amp_accumulated` with one micro-batch per
    step. Only the forward pass and the loss run under autocast; ``backward``
    runs outside it.

    Parameters
    ----------
    {amp_inputs}
    steps : int, default 1
        Optimizer steps.
    {amp_scaler}
    clip_norm : float, optional
        Clip the gradient's 2-norm to it, after unscaling, so the threshold
        applies to the true gradient.
    {amp_device_returns}

    Raises
    ------
    {amp_raises}

    Examples
    --------
    >>> X, y = make_toy_problem(device="cpu")
    >>> model = make_toy_model(device="cpu")
    >>> loss_fn = nn.BCEWithLogitsLoss()
    >>> r = train_amp(model, make_toy_optimizer(model), X, y, loss_fn)
    >>> weights = [round(w, 4) for w in r.weight.flatten().tolist()]
    >>> r.log[0].scale, r.log[0].skipped, weights
    (65536.0, False, [0.0309, 0.0272])
    """
    return train_amp_accumulated(
        model, optimizer, X, y, loss_fn, 1, steps=steps, scaler_kwargs=scaler_kwargs,
        dtype=dtype, clip_norm=clip_norm, device=device,
    )  # fmt: skip


@_amp_docs
def train_amp_accumulated(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    X: torch.Tensor,
    y: torch.Tensor,
    loss_fn: LossFn,
    n_accum: int,
    *,
    steps: int = 1,
    scaler_kwargs: Mapping[str, Any] | None = None,
    dtype: torch.dtype = torch.float16,
    clip_norm: float | None = None,
    device: torch.device | str | None = None,
) -> TrainResult:
    """Train in mixed precision with gradient accumulation: the canonical recipe.

    Each micro-batch: forward and ``loss / n_accum`` under autocast, then
    ``scaler.scale(loss).backward()``. At the boundary: [``unscale_`` + clip],
    ``scaler.step``, ``scaler.update``, ``zero_grad`` -- once per optimizer
    step, never per micro-batch, because the scaler's inf check and its scale
    belong to the whole accumulated gradient.

    Parameters
    ----------
    {amp_inputs}
    n_accum : int
        Micro-batches per optimizer step; it must divide the batch size.
    steps : int, default 1
        Optimizer steps.
    {amp_scaler}
    clip_norm : float, optional
        Clip the gradient's 2-norm to it, after unscaling.
    {amp_device_returns}

    Raises
    ------
    {amp_raises}

    Examples
    --------
    >>> X, y = make_toy_problem(device="cpu")
    >>> model = make_toy_model(device="cpu")
    >>> r = train_amp_accumulated(model, make_toy_optimizer(model), X, y,
    ...                           nn.BCEWithLogitsLoss(), 4)
    >>> len(r.log[0].micro_losses), r.final_scale
    (4, 65536.0)
    """
    dtype = _check_amp_args(dtype, clip_norm)
    X, y, device = _prepare(
        model, optimizer, X, y, loss_fn, steps=steps, n_accum=n_accum, device=device,
        autocast_dtype=dtype,
    )  # fmt: skip
    scaler = _make_scaler(device, scaler_kwargs)
    check_unscalable("model", model, scaler)
    log = []
    optimizer.zero_grad()
    for step in range(1, steps + 1):
        micro = []
        for xb, yb in zip(X.tensor_split(n_accum), y.tensor_split(n_accum), strict=True):
            with torch.autocast(device.type, dtype=dtype):  # forward and loss only
                loss = loss_fn(model(xb), yb) / n_accum
            scaler.scale(loss).backward()  # adds the scaled gradient into .grad
            micro.append(loss.detach())
        log.append(_record(step, micro, model, scaler))  # bookkeeping for the book
        if clip_norm is not None:
            scaler.unscale_(optimizer)  # once, at the boundary, before clipping
            norm = clip_grad_norm_(model.parameters(), clip_norm)
            log[-1] = replace(log[-1], clipped_norm=float(norm))  # the norm it measured
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    return _result(model, log, scaler)


@_amp_docs
def train_amp_mistake(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    X: torch.Tensor,
    y: torch.Tensor,
    loss_fn: LossFn,
    *,
    mistake: str,
    n_accum: int = 1,
    steps: int = 1,
    scaler_kwargs: Mapping[str, Any] | None = None,
    dtype: torch.dtype = torch.float16,
    clip_norm: float | None = None,
    device: torch.device | str | None = None,
) -> TrainResult:
    """Run :func:`train_amp_accumulated` with one deliberate mistake (see :data:`MISTAKES`).

    Each mistake is one ``if mistake ...`` branch, commented with what it
    leaves out or replaces; everything else is the correct recipe.
    ``StepLog.skipped`` is ``False`` on an overflowing step under
    ``"optimizer_step"``, because the step is applied anyway (``found_inf`` is
    still ``True``).

    Parameters
    ----------
    {amp_inputs}
    mistake : str
        One of :data:`MISTAKES`.
    n_accum : int, default 1
        Micro-batches per step; ``"raw_loss"`` only shows with ``n_accum > 1``.
    steps : int, default 1
        Optimizer steps.
    {amp_scaler}
    clip_norm : float, optional
        Clip threshold; ``"clip_before_unscale"`` needs it.
    {amp_device_returns}

    Raises
    ------
    RuntimeError
        From GradScaler itself under ``"no_update"``, on the second step.
    {amp_raises}

    Examples
    --------
    >>> X, y = make_toy_problem(device="cpu")
    >>> model = make_toy_model(device="cpu")
    >>> loss_fn = nn.BCEWithLogitsLoss()
    >>> r = train_amp_mistake(model, make_toy_optimizer(model), X, y, loss_fn,
    ...                       mistake="new_scaler_each_step", steps=3,
    ...                       scaler_kwargs={"init_scale": 2.0**40})
    >>> [(entry.scale, entry.skipped) for entry in r.log]
    [(1099511627776.0, True), (1099511627776.0, True), (1099511627776.0, True)]
    >>> train_amp_mistake(model, make_toy_optimizer(model), X, y, loss_fn,
    ...                   mistake="no_update", steps=2)
    Traceback (most recent call last):
    ...
    RuntimeError: step() has already been called since the last update().
    """
    check_choice("mistake", mistake, MISTAKES)
    dtype = _check_amp_args(dtype, clip_norm)
    if mistake == "clip_before_unscale" and clip_norm is None:
        raise ValueError("mistake='clip_before_unscale' needs clip_norm (a number > 0), got None")
    X, y, device = _prepare(
        model, optimizer, X, y, loss_fn, steps=steps, n_accum=n_accum, device=device,
        autocast_dtype=dtype,
    )  # fmt: skip
    scaler = _make_scaler(device, scaler_kwargs)
    check_unscalable("model", model, scaler)
    log = []
    optimizer.zero_grad()
    for step in range(1, steps + 1):
        if mistake == "new_scaler_each_step":
            scaler = _make_scaler(device, scaler_kwargs)  # WRONG: forgets the scale it learnt
        micro = []
        for xb, yb in zip(X.tensor_split(n_accum), y.tensor_split(n_accum), strict=True):
            with torch.autocast(device.type, dtype=dtype):
                loss = loss_fn(model(xb), yb)
                if mistake != "raw_loss":
                    loss = loss / n_accum  # 'raw_loss' omits this: n_accum x the gradient
            scaler.scale(loss).backward()
            micro.append(loss.detach())
        log.append(
            _record(step, micro, model, scaler, steps_on_inf=mistake == "optimizer_step",
                    loss_divisor=n_accum if mistake == "raw_loss" else 1)
        )  # fmt: skip
        if clip_norm is not None:
            if mistake != "clip_before_unscale":
                scaler.unscale_(optimizer)  # 'clip_before_unscale' omits this
            clip_grad_norm_(model.parameters(), clip_norm)
        if mistake == "optimizer_step":
            optimizer.step()  # WRONG: applies scaled gradients, and steps on inf/NaN
        else:
            scaler.step(optimizer)
        if mistake not in ("no_update", "optimizer_step"):
            scaler.update()  # 'no_update' omits this: the next scaler.step raises
        optimizer.zero_grad()
    return _result(model, log, scaler)


# --------------------------------------------------------------------------- inspection


def grad_after_backward(
    model: nn.Module,
    X: torch.Tensor,
    y: torch.Tensor,
    loss_fn: LossFn,
    n_accum: int,
    divide: bool = True,
) -> dict[str, torch.Tensor]:
    """Return the gradient one accumulation cycle leaves in ``.grad`` (FP32, no step).

    The model's parameters are not changed; its ``.grad`` is reset to ``None``
    before and after.

    Parameters
    ----------
    model : torch.nn.Module
        The model.
    X, y : torch.Tensor
        The batch and its targets.
    loss_fn : callable
        ``loss_fn(output, target)``, a mean loss.
    n_accum : int
        Micro-batch backward passes.
    divide : bool, default True
        Divide each micro-batch's loss by ``n_accum`` (the correct loop).

    Returns
    -------
    dict of str to torch.Tensor
        Detached CPU copies of the accumulated gradients, by parameter name.

    Raises
    ------
    TypeError, ValueError
        If an argument is of the wrong kind or out of range (the message names it).

    Examples
    --------
    >>> X, y = make_toy_problem(device="cpu")
    >>> model = make_toy_model(device="cpu")
    >>> loss_fn = nn.BCEWithLogitsLoss()
    >>> good = grad_after_backward(model, X, y, loss_fn, 4)
    >>> raw = grad_after_backward(model, X, y, loss_fn, 4, divide=False)
    >>> (raw["weight"] / good["weight"]).tolist()
    [[4.0, 4.0]]
    """
    check_bool("divide", divide)
    X, y, _ = _prepare(model, None, X, y, loss_fn, n_accum=n_accum)
    model.zero_grad(set_to_none=True)
    for xb, yb in zip(X.tensor_split(n_accum), y.tensor_split(n_accum), strict=True):
        loss = loss_fn(model(xb), yb)
        (loss / n_accum if divide else loss).backward()
    grads = {
        name: (torch.zeros_like(p) if p.grad is None else p.grad).detach().to("cpu", copy=True)
        for name, p in model.named_parameters()
    }
    model.zero_grad(set_to_none=True)
    return grads


def _as_params(name: str, value: Any) -> Mapping[str, torch.Tensor]:
    if isinstance(value, TrainResult):
        return value.params
    if isinstance(value, Mapping) and all(isinstance(t, torch.Tensor) for t in value.values()):
        return value
    raise TypeError(
        f"{name} must be a TrainResult or a dict of tensors, got {type(value).__name__}"
    )


def compare_params(
    a: TrainResult | Mapping[str, torch.Tensor], b: TrainResult | Mapping[str, torch.Tensor]
) -> ParamComparison:
    """Return the largest absolute difference of two runs' parameters, and whether they are bitwise equal.

    Parameters
    ----------
    a, b : TrainResult or dict of str to torch.Tensor
        The two runs, or their parameters by name; the names and shapes must match.

    Returns
    -------
    ParamComparison
        The difference and the bitwise verdict.

    Raises
    ------
    TypeError
        If ``a`` or ``b`` is neither.
    ValueError
        If their parameter names or shapes differ.

    Examples
    --------
    >>> X, y = make_toy_problem(device="cpu")
    >>> loss_fn = nn.BCEWithLogitsLoss()
    >>> m1, m2 = make_toy_model(device="cpu"), make_toy_model(device="cpu")
    >>> full = train_full_batch(m1, make_toy_optimizer(m1), X, y, loss_fn)
    >>> accum = train_accumulated(m2, make_toy_optimizer(m2), X, y, loss_fn, 4)
    >>> compare_params(full, accum).max_abs_diff < 1e-8
    True
    """
    pa, pb = _as_params("a", a), _as_params("b", b)
    if set(pa) != set(pb):
        raise ValueError(f"a and b must have the same parameters, got {list(pa)} and {list(pb)}")
    diffs = [0.0]
    equal = True
    for name in pa:
        ta, tb = pa[name].detach().cpu(), pb[name].detach().cpu()
        if ta.shape != tb.shape:
            raise ValueError(
                f"parameter {name!r} has shape {tuple(ta.shape)} in a and {tuple(tb.shape)} in b"
            )
        equal = equal and torch.equal(ta, tb)
        if ta.numel():
            common = torch.promote_types(ta.dtype, tb.dtype)
            diffs.append(float((ta.to(common) - tb.to(common)).abs().max()))
    diff = math.nan if any(math.isnan(d) for d in diffs) else max(diffs)
    return ParamComparison(max_abs_diff=diff, bitwise_equal=equal)


def max_abs_diff(
    a: TrainResult | Mapping[str, torch.Tensor], b: TrainResult | Mapping[str, torch.Tensor]
) -> float:
    """Return the largest absolute difference between two runs' parameters.

    Parameters
    ----------
    a, b : TrainResult or dict of str to torch.Tensor
        The two runs, as :func:`compare_params` takes them.

    Returns
    -------
    float
        ``compare_params(a, b).max_abs_diff``.

    Examples
    --------
    >>> max_abs_diff({"w": torch.tensor([1.0])}, {"w": torch.tensor([0.75])})
    0.25
    """
    return compare_params(a, b).max_abs_diff


# --------------------------------------------------------------------------- error bound


def first_step_bound(
    X: torch.Tensor,
    y: torch.Tensor,
    lr: float,
    n_accum: int = 1,
) -> torch.Tensor:
    """A bound on how far one FP16 AMP step can land from the FP32 step, per weight.

    The setting is the toy problem's first step: a linear model without bias
    starting at zero weights, ``BCEWithLogitsLoss`` (mean), plain SGD with
    learning rate ``lr``, the batch ``X`` cut into ``n_accum`` micro-batches of
    ``m`` samples, FP16 autocast and a power-of-two loss scale under which the
    scaled gradient terms neither overflow nor leave FP16's normal range. At zero weights every logit is exactly ``0``,
    so the gradient of weight ``j`` is ``g_j = sum_i d_i X_ij`` with
    ``d_i = (1/2 - y_i) / B``.

    Under autocast three roundings to FP16 reach it: ``X`` for the matrix
    multiply, the gradient arriving at the logits, and the product's result;
    each is off by at most ``u = 2**-11`` of what it rounds. The multiply then
    adds ``m`` terms, which a kernel may do in FP16: at most
    ``gamma = (m - 1) u / (1 - (m - 1) u)`` of the sum of their magnitudes
    (Higham's bound for a sum). All of these are relative to
    ``A_j = sum_i |d_i X_ij|``, not to ``|g_j|``: the terms have both signs, and
    where they cancel, ``|g_j|`` is far smaller than the error they carry.
    So, to first order in ``u``::

        |w_amp_j - w_fp32_j| <= lr (3u + gamma) A_j  +  FP32 rounding,

    where the FP32 part (the reference's own sum, the ``+=`` into ``.grad``,
    the product with ``lr``) adds ``(B + n_accum + 4) 2**-24`` of the same
    scale. The bound holds whatever precision the kernel accumulates in; one
    that accumulates in FP32 stays near ``2u``. Later steps are not covered:
    once the weights are non-zero the logits are rounded to FP16 too.

    Parameters
    ----------
    X, y
        The batch: ``X`` of shape ``(B, features)``, ``y`` of ``B`` labels.
    lr
        SGD's learning rate.
    n_accum
        Micro-batches per step; it must divide ``B``.

    Returns
    -------
    torch.Tensor
        The bound for each weight, shape ``(1, features)``, float64.

    Examples
    --------
    >>> X, y = make_toy_problem(device="cpu")
    >>> bound = first_step_bound(X, y, lr=0.1, n_accum=4)
    >>> model = make_toy_model(device="cpu")
    >>> loss_fn = nn.BCEWithLogitsLoss()
    >>> amp = train_amp_accumulated(
    ...     model, make_toy_optimizer(model), X, y, loss_fn, 4
    ... )
    >>> model = make_toy_model(device="cpu")
    >>> fp32 = train_full_batch(model, make_toy_optimizer(model), X, y, loss_fn)
    >>> bool(((amp.weight - fp32.weight).abs() <= bound).all())
    True
    """
    for name, value in (("X", X), ("y", y)):
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if X.dim() != 2 or len(X) == 0:
        raise ValueError(
            f"X must have shape (batch, features) with batch >= 1, got {tuple(X.shape)}"
        )
    if y.numel() != len(X):
        raise ValueError(f"y must hold one label per sample ({len(X)}), got {y.numel()}")
    lr = check_positive("lr", lr)
    check_int("n_accum", n_accum, minimum=1)
    batch = len(X)
    if batch % n_accum:
        raise ValueError(f"n_accum must divide the batch size {batch}, got {n_accum}")
    u16, u32 = 2.0**-11, 2.0**-24
    m = batch // n_accum
    gamma = (m - 1) * u16 / (1 - (m - 1) * u16)
    d = (0.5 - y.detach().double().reshape(-1, 1).cpu()) / batch
    magnitude = (d.abs() * X.detach().double().cpu().abs()).sum(dim=0, keepdim=True)
    # An input below FP16's normal range is rounded to a step of 2**-24, not relative to it.
    subnormal = d.abs().sum() * 2.0**-25
    return lr * (magnitude * (3 * u16 + gamma + (batch + n_accum + 4) * u32) + subnormal)
