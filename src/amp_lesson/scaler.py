# One module: the simulator and the real GradScaler it is checked against, step for step, side by side.
"""Dynamic loss scaling, exactly as :class:`torch.amp.GradScaler` does it.

Small gradients underflow in float16: a value at or below ``2**-25`` (about
``3e-8``, half the smallest subnormal ``2**-24``) is stored as zero, and the
gradient is lost; one between ``2**-25`` and ``2**-24`` rounds up to ``2**-24``. Loss scaling multiplies the loss
by a factor ``S`` before ``backward()``; by the chain rule every gradient is
multiplied by ``S`` too, which lifts the small ones back into fp16's range.
Before the optimizer step the gradients are divided by ``S`` again (in
float32, where they fit).

Too large an ``S`` makes some scaled gradient overflow to ``inf``. PyTorch's
``GradScaler`` therefore chooses ``S`` *dynamically*: a step whose scaled
gradients contain ``inf`` or ``NaN`` is skipped and ``S`` shrinks; after
``growth_interval`` good steps in a row ``S`` grows again.

This module holds

- :class:`ScalerSimulator` and :func:`simulate` -- a pure-Python model of the
  scale in GradScaler's float32 arithmetic, which the tests compare bit for
  bit with the real scaler;
- :func:`run_torch_scaler` -- the same schedule driven through a *real*
  ``torch.amp.GradScaler``, a one-parameter model and SGD, so the book can
  show that the model and PyTorch agree;
- :func:`follow_gradient` -- one gradient value followed through scaling,
  fp16 storage and unscaling (the book's "loss scaling by hand" table);
- :func:`step_skipped` -- whether a real ``scaler.step`` skipped the step;
- :func:`max_safe_scale` -- the largest power-of-two scale that keeps a
  given gradient below the format's largest value.

Why this module is long: the pure-Python model and the real GradScaler it is compared with
bit for bit stand side by side; more than half of its lines are docstrings.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from amp_lesson._checks import (
    check_backoff_factor,
    check_finite,
    check_growth_factor,
    check_growth_interval,
    check_positive,
    check_scale,
)
from amp_lesson.device import resolve_device
from amp_lesson.formats import dtype_of, format_spec

__all__ = [
    "GradientRow",
    "ScaleStep",
    "ScalerSimulator",
    "follow_gradient",
    "max_safe_scale",
    "run_torch_scaler",
    "simulate",
    "step_skipped",
]

_FP32_MAX = float(np.finfo(np.float32).max)


def _to_f32(value: float) -> float:
    """Round a Python float (a double) to the nearest float32, as C++'s cast does.

    Out-of-range values become ``±inf`` and tiny ones become float32
    subnormals or zero, with round-to-nearest-even throughout.
    """
    with np.errstate(over="ignore", under="ignore"):
        return float(np.float32(value))


def _check_bool(name: str, value: Any) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(
        f"{name} must be a bool (True if the step's scaled gradients had inf/NaN), "
        f"got {type(value).__name__} {value!r}"
    )


def _check_sequence(found_inf_sequence: Any) -> list[bool]:
    name = "found_inf_sequence"
    if isinstance(found_inf_sequence, (str, bytes)) or not isinstance(found_inf_sequence, Iterable):
        raise TypeError(
            f"{name} must be an iterable of bools (one per step), "
            f"got {type(found_inf_sequence).__name__} {found_inf_sequence!r}"
        )
    return [_check_bool(f"{name}[{i}]", v) for i, v in enumerate(found_inf_sequence)]


class ScalerSimulator:
    """A pure-Python model of the scale inside :class:`torch.amp.GradScaler`.

    After every iteration GradScaler's ``update()`` does this (the CPU and
    CUDA kernels are the same):

    - if the step's scaled gradients held an ``inf`` or ``NaN``
      (``found_inf``): the optimizer step was skipped, the scale is
      multiplied by ``backoff_factor`` and the growth tracker is reset to 0;
    - otherwise the tracker counts one more good step; when it reaches
      ``growth_interval`` the scale is multiplied by ``growth_factor`` --
      unless that would overflow float32 to ``inf``, in which case the scale
      stays put -- and the tracker is reset to 0.

    :attr:`last_change` records what the last update did (``"backoff"``, ``"count"``,
    ``"grow"`` or ``"capped"``), so that nothing else works the rule out again: the book's
    GradScaler playground takes its Python trace from :func:`simulate`, and its script in
    the reader's browser (``amp_book/static/amp-scaler-playground.js``, a JavaScript copy
    of this rule) is run on the same schedules as this class, step for step, by
    ``tests/test_playgrounds_browser.py``.

    The scale lives in a float32 tensor. Each product is formed in double
    precision (``float * double`` in the kernel) and rounded to float32, so
    :attr:`scale` is always a float32 value; repeated backoff walks it down
    through the float32 subnormals to exactly ``0.0``, as PyTorch does
    (``2**16`` halved 166 times). A zero scale never grows back (``0 × 2``
    is 0), and GradScaler then unscales with ``inv_scale = 1/0 = inf``, so
    every "good" step applies ``NaN`` gradients: a run whose scale backs off
    that far is broken, which is why a collapsing scale is a red flag.

    Why start as high as ``2**16``? A scale that is too high costs one
    skipped step per halving and is corrected within a few steps; a scale
    that is too low costs ``growth_interval`` (default 2000) good steps per
    doubling, during which small gradients are silently lost. Erring high is
    cheap, erring low is slow.

    Parameters
    ----------
    init_scale : float, default 2.0**16
        The first scale; it must be representable in float32: at most
        float32's largest value ``3.4028234663852886e+38``, which torch
        refuses to exceed, and not so small that it rounds to 0.
    growth_factor : float, default 2.0
        Factor the scale grows by (``> 1``).
    backoff_factor : float, default 0.5
        Factor the scale shrinks by (in ``(0, 1)``).
    growth_interval : int, default 2000
        Good steps in a row before the scale grows, from 1 to ``2**63 - 1``
        (GradScaler's kernel takes a 64-bit int).

    Raises
    ------
    TypeError
        If a setting is not a number (``growth_interval``: not an int).
    ValueError
        If a setting is out of range, infinite or NaN, or an int too large
        for a float (GradScaler itself would only assert, or fail later in
        torch's conversion to float32).

    Examples
    --------
    >>> s = ScalerSimulator(init_scale=1024.0, growth_interval=2)
    >>> s.update(True)                 # overflow: skip the step, halve the scale
    >>> s.scale, s.growth_tracker
    (512.0, 0)
    >>> s.update(False); s.scale, s.growth_tracker
    (512.0, 1)
    >>> s.update(False); s.scale, s.growth_tracker   # 2nd good step in a row: grow
    (1024.0, 0)
    """

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
    ) -> None:
        self._init_scale = check_scale("init_scale", init_scale)
        self._growth_factor = check_growth_factor("growth_factor", growth_factor)
        self._backoff_factor = check_backoff_factor("backoff_factor", backoff_factor)
        self._growth_interval = check_growth_interval("growth_interval", growth_interval)
        self._scale = _to_f32(self._init_scale)
        self._growth_tracker = 0
        self._last_change: str | None = None

    @property
    def scale(self) -> float:
        """The current scale, a Python float holding a float32 value."""
        return self._scale

    @property
    def growth_tracker(self) -> int:
        """Good steps in a row since the last skip or growth."""
        return self._growth_tracker

    @property
    def init_scale(self) -> float:
        """The scale asked for at construction (before rounding to float32)."""
        return self._init_scale

    @property
    def growth_factor(self) -> float:
        """Factor the scale grows by after ``growth_interval`` good steps."""
        return self._growth_factor

    @property
    def backoff_factor(self) -> float:
        """Factor the scale shrinks by after a step with inf/NaN gradients."""
        return self._backoff_factor

    @property
    def growth_interval(self) -> int:
        """Good steps in a row needed before the scale grows."""
        return self._growth_interval

    def update(self, found_inf: bool) -> None:
        """Advance one iteration, as ``GradScaler.update()`` does.

        Parameters
        ----------
        found_inf : bool
            Whether that iteration's scaled gradients held an ``inf`` or ``NaN``
            (and so whether its optimizer step was skipped).

        Raises
        ------
        TypeError
            If ``found_inf`` is not a bool (an int 1 is refused: a schedule of
            0 and 1 is easy to mistake for scales).

        Examples
        --------
        >>> s = ScalerSimulator(init_scale=3.0, growth_interval=1)
        >>> s.update(False); s.scale
        6.0
        >>> s.update(1)
        Traceback (most recent call last):
        ...
        TypeError: found_inf must be a bool (True if the step's scaled gradients
        had inf/NaN), got int 1
        """
        if _check_bool("found_inf", found_inf):
            self._scale = _to_f32(self._scale * self._backoff_factor)
            self._growth_tracker = 0
            self._last_change = "backoff"
            return
        successful = self._growth_tracker + 1
        if successful == self._growth_interval:
            grown = _to_f32(self._scale * self._growth_factor)
            if math.isfinite(grown):
                self._scale = grown
                self._last_change = "grow"
            else:
                self._last_change = "capped"
            self._growth_tracker = 0
        else:
            self._growth_tracker = successful
            self._last_change = "count"

    @property
    def last_change(self) -> str | None:
        """What the last :meth:`update` did to the scale; ``None`` before the first.

        ``"backoff"`` (an overflow: scale × ``backoff_factor``), ``"count"`` (one more
        good step, the scale kept), ``"grow"`` (scale × ``growth_factor``) or
        ``"capped"`` (growth would have overflowed float32: the scale kept).

        >>> s = ScalerSimulator(init_scale=2.0**127, growth_interval=1)
        >>> s.last_change, (s.update(False), s.last_change)[1], s.scale == 2.0**127
        (None, 'capped', True)
        """
        return self._last_change

    def __repr__(self) -> str:
        return (
            f"ScalerSimulator(scale={self._scale!r}, growth_tracker={self._growth_tracker}, "
            f"growth_factor={self._growth_factor!r}, backoff_factor={self._backoff_factor!r}, "
            f"growth_interval={self._growth_interval})"
        )


@dataclass(frozen=True)
class ScaleStep:
    """One iteration of dynamic loss scaling.

    Parameters
    ----------
    step : int
        The iteration, from 1.
    scale_used : float
        The scale the loss was multiplied by.
    found_inf : bool
        Whether the scaled gradients held inf/NaN.
    skipped : bool
        Whether the optimizer step was skipped.
    scale_after : float
        The scale after ``update()``.
    growth_tracker_after : int
        Good steps in a row after ``update()``.
    change : str, default ""
        What ``update()`` did (:attr:`ScalerSimulator.last_change`); ``""`` where
        nobody recorded it (a real GradScaler's trace, :func:`run_torch_scaler`). Left out
        when steps are compared: a simulated step equals the real one it predicts.

    Examples
    --------
    >>> ScaleStep(1, 8.0, True, True, 4.0, 0).scale_after
    4.0
    >>> ScaleStep(1, 8.0, True, True, 4.0, 0).inv_scale
    0.125
    """

    step: int
    scale_used: float
    found_inf: bool
    skipped: bool
    scale_after: float
    growth_tracker_after: int
    change: str = field(default="", compare=False)  # a record of the rule, not GradScaler's state

    @property
    def inv_scale(self) -> float:
        """The float32 reciprocal GradScaler unscales the gradients with.

        ``1 / scale_used`` formed in double precision and rounded to float32; ``inf`` for
        a scale of 0.
        """
        return _to_f32(1 / self.scale_used) if self.scale_used else math.inf


def simulate(
    found_inf_sequence: Iterable[bool],
    *,
    init_scale: float = 2.0**16,
    growth_factor: float = 2.0,
    backoff_factor: float = 0.5,
    growth_interval: int = 2000,
) -> list[ScaleStep]:
    """Run :class:`ScalerSimulator` over a schedule of overflows.

    A step is skipped exactly when it overflows.

    Parameters
    ----------
    found_inf_sequence : iterable of bool
        One bool per step: ``True`` where that step's scaled gradients overflow.
    init_scale, growth_factor, backoff_factor, growth_interval
        GradScaler's settings (see :class:`ScalerSimulator`).

    Returns
    -------
    list of ScaleStep
        One per step.

    Raises
    ------
    TypeError
        If the schedule is not an iterable of bools, or a setting not a number.
    ValueError
        If a setting is out of range (see :class:`ScalerSimulator`).

    Examples
    --------
    >>> for r in simulate([True, False, False], init_scale=8.0, growth_interval=2):
    ...     print(r.step, r.scale_used, r.skipped, r.scale_after,
    ...           r.growth_tracker_after)
    1 8.0 True 4.0 0
    2 4.0 False 4.0 1
    3 4.0 False 8.0 0
    """
    sim = ScalerSimulator(
        init_scale=init_scale,
        growth_factor=growth_factor,
        backoff_factor=backoff_factor,
        growth_interval=growth_interval,
    )
    trace = []
    for i, found_inf in enumerate(_check_sequence(found_inf_sequence), start=1):
        used = sim.scale
        sim.update(found_inf)
        after = (sim.scale, sim.growth_tracker, sim.last_change or "")
        trace.append(ScaleStep(i, used, found_inf, found_inf, *after))
    return trace


def step_skipped(scaler: torch.amp.GradScaler, optimizer: torch.optim.Optimizer) -> bool:
    """Call ``scaler.step(optimizer)`` and say whether it skipped the step.

    ``GradScaler`` does not report a skip; this compares every parameter of
    ``optimizer`` bit for bit before and after the step. Bits, not values:
    a NaN weight equals nothing, not even itself, and a step that writes the
    same value is still a step that ran, but the question asked here is
    whether the weights moved.

    Parameters
    ----------
    scaler : torch.amp.GradScaler
        The scaler whose ``step`` to call, after ``scaler.scale(loss).backward()``.
    optimizer : torch.optim.Optimizer
        The optimizer to step.

    Returns
    -------
    bool
        True if no parameter changed a bit.

    Examples
    --------
    An infinite gradient makes the scaler skip:

    >>> w = torch.nn.Parameter(torch.ones(2))
    >>> opt = torch.optim.SGD([w], lr=0.1)
    >>> scaler = torch.amp.GradScaler("cpu")
    >>> scaler.scale((w * torch.tensor([1.0, float("inf")])).sum()).backward()
    >>> step_skipped(scaler, opt)
    True
    """
    params = [p for group in optimizer.param_groups for p in group["params"]]
    before = [p.detach().clone() for p in params]
    scaler.step(optimizer)
    return all(_same_bits(a, p.detach()) for a, p in zip(before, params, strict=True))


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


def run_torch_scaler(
    found_inf_sequence: Iterable[bool],
    device: torch.device | str | None = None,
    *,
    init_scale: float = 2.0**16,
    growth_factor: float = 2.0,
    backoff_factor: float = 0.5,
    growth_interval: int = 2000,
) -> list[ScaleStep]:
    """Drive a real :class:`torch.amp.GradScaler` through a schedule of overflows.

    The model is one float32 parameter ``w`` with loss ``w * x`` and plain
    SGD (``lr=1``). On a step marked ``True`` ``x`` is ``inf``, so the scaled
    gradient ``S * x`` is ``inf`` (``NaN`` if the scale has backed off to 0);
    otherwise ``x = 1``. Each step runs the real
    ``scaler.scale(loss).backward()``, ``scaler.step(opt)``,
    ``scaler.update()``. ``w`` is reset to 1 before every step, so each step
    is judged on its own. The scaler is built with the device's type, never
    with GradScaler's default ``"cuda"`` (which disables itself on a machine
    without CUDA).

    Parameters
    ----------
    found_inf_sequence : iterable of bool
        One bool per step: ``True`` where that step overflows.
    device : torch.device or str, optional
        Where to run (see :func:`amp_lesson.device.resolve_device`).
    init_scale, growth_factor, backoff_factor, growth_interval
        GradScaler's settings.

    Returns
    -------
    list of ScaleStep
        Per step: ``scale_used`` (``scaler.get_scale()`` after ``scale()``),
        ``found_inf`` (the scaled gradient checked the way GradScaler checks
        it), ``skipped`` (:func:`step_skipped`), and ``scale_after`` and
        ``growth_tracker_after`` (``get_scale()`` and the state dict's
        ``_growth_tracker`` after ``update()``).

    Raises
    ------
    TypeError
        If the schedule is not an iterable of bools, or a setting not a number.
    ValueError
        If a setting is out of range (checked as :class:`ScalerSimulator`
        checks it, before GradScaler's bare assertions or torch's conversion
        to float32 could fail).

    Examples
    --------
    >>> schedule = [True, False, False, True, False]
    >>> trace = run_torch_scaler(schedule, "cpu", init_scale=8.0, growth_interval=2)
    >>> [(r.scale_used, r.skipped) for r in trace]
    [(8.0, True), (4.0, False), (4.0, False), (8.0, True), (4.0, False)]
    >>> trace == simulate(schedule, init_scale=8.0, growth_interval=2)
    True
    """
    schedule = _check_sequence(found_inf_sequence)
    # Validate with our messages before GradScaler's bare assertions can fire.
    ScalerSimulator(init_scale, growth_factor, backoff_factor, growth_interval)
    dev = resolve_device(device)

    scaler = torch.amp.GradScaler(
        dev.type,
        init_scale=init_scale,
        growth_factor=growth_factor,
        backoff_factor=backoff_factor,
        growth_interval=growth_interval,
    )
    w = torch.nn.Parameter(torch.ones((), dtype=torch.float32, device=dev))
    opt = torch.optim.SGD([w], lr=1.0)
    trace = []
    for i, overflow in enumerate(schedule, start=1):
        with torch.no_grad():
            w.fill_(1.0)
        opt.zero_grad(set_to_none=True)
        x = torch.tensor(math.inf if overflow else 1.0, dtype=torch.float32, device=dev)
        scaler.scale(w * x).backward()
        scale_used = scaler.get_scale()
        grad = w.grad if w.grad is not None else torch.zeros_like(w)
        found_inf = not bool(torch.isfinite(grad).all())
        skipped = step_skipped(scaler, opt)
        scaler.update()
        trace.append(
            ScaleStep(
                step=i,
                scale_used=scale_used,
                found_inf=found_inf,
                skipped=skipped,
                scale_after=scaler.get_scale(),
                growth_tracker_after=int(scaler.state_dict()["_growth_tracker"]),
            )
        )
    return trace


def _check_f32_value(name: str, value: Any) -> float:
    value = check_finite(name, value)
    if not math.isfinite(_to_f32(value)):
        raise ValueError(f"{name} must fit in float32 (|{name}| <= {_FP32_MAX:.7g}), got {value!r}")
    return value


@dataclass(frozen=True)
class GradientRow:
    """One row of :func:`follow_gradient`'s table.

    Parameters
    ----------
    label : str
        What the row holds, e.g. ``"stored in fp16"``.
    value : float
        What the format really holds.
    is_zero, is_inf : bool
        Flags for underflow and overflow.
    rel_error : float
        ``|value - ideal| / |ideal|``, where ``ideal`` is the exact value the
        row stands for (the fp32 gradient for gradient rows, the exact product
        ``g × S`` for scaled rows).

    Examples
    --------
    >>> GradientRow("fp32 gradient", 0.5, False, False, 0.0).value
    0.5
    """

    label: str
    value: float
    is_zero: bool
    is_inf: bool
    rel_error: float


def _rel_error(value: float, ideal: float) -> float:
    if ideal == 0.0:
        return 0.0 if value == 0.0 else math.inf
    if not math.isfinite(value):
        return math.inf
    return abs(value - ideal) / abs(ideal)


def follow_gradient(
    grad: float, scale: float = 2.0**16, dtype: str | torch.dtype = "fp16"
) -> list[GradientRow]:
    """Follow one gradient value through loss scaling, step by step.

    Parameters
    ----------
    grad : float
        The gradient; it must fit in float32.
    scale : float, default 2.0**16
        The loss scale ``S``.
    dtype : {"fp16", "bf16"} or torch.dtype, default "fp16"
        The half-precision format the scaled gradient is stored in.

    Returns
    -------
    list of GradientRow
        In order: ``"fp32 gradient"`` (``grad`` as float32 stores it);
        ``"scaled (× S) in fp32"``; ``"stored in fp16"`` (that value cast by
        torch); ``"unscaled back to fp32"`` (the stored value times
        ``inv_scale = float32(1 / float64(S))`` in float32, which is how
        GradScaler unscales); ``"without scaling, stored in fp16"`` (the fp32
        gradient cast directly, for comparison). The last two rows'
        ``rel_error`` are the relative error of the recovered gradient with
        and without loss scaling.

    Raises
    ------
    ValueError
        If ``grad`` does not fit in float32, ``scale`` is not a positive
        float32 value, or ``dtype`` is not a half format.

    Examples
    --------
    >>> rows = follow_gradient(1e-8, 2.0**16)
    >>> for r in rows:
    ...     print(f"{r.label:32} {r.value:.6e} zero={r.is_zero}")
    fp32 gradient                    1.000000e-08 zero=False
    scaled (× S) in fp32             6.553600e-04 zero=False
    stored in fp16                   6.551743e-04 zero=False
    unscaled back to fp32            9.997166e-09 zero=False
    without scaling, stored in fp16  0.000000e+00 zero=True
    >>> f"{rows[3].rel_error:.1e}", rows[4].rel_error
    ('2.8e-04', 1.0)
    """
    grad = _check_f32_value("grad", grad)
    scale = check_scale("scale", scale)
    low = dtype_of(dtype)
    name = format_spec(low).name

    g32 = torch.tensor(grad, dtype=torch.float32)
    s32 = torch.tensor(scale, dtype=torch.float32)
    scaled = g32 * s32
    stored = scaled.to(low)
    inv_scale = s32.double().reciprocal().float()
    unscaled = stored.float() * inv_scale
    direct = g32.to(low)

    g = g32.item()
    exact_scaled = g * s32.item()  # exact: a float32 times a float32 fits in a double
    rows = [
        ("fp32 gradient", g, g),
        ("scaled (× S) in fp32", scaled.item(), exact_scaled),
        (f"stored in {name}", stored.item(), exact_scaled),
        ("unscaled back to fp32", unscaled.item(), g),
        (f"without scaling, stored in {name}", direct.item(), g),
    ]
    return [
        GradientRow(label, value, value == 0.0, math.isinf(value), _rel_error(value, ideal))
        for label, value, ideal in rows
    ]


def max_safe_scale(max_abs_grad: float, dtype: str | torch.dtype = "fp16") -> float:
    """Return the largest power of two ``S`` with ``S × max_abs_grad`` below the format's max.

    This is the rule of Micikevicius et al. (2018): choose the scale so that
    its product with the largest absolute gradient stays below the largest
    finite value (65504 for fp16). The comparison is strict, as in the paper.

    Parameters
    ----------
    max_abs_grad : float
        The largest absolute gradient (``> 0``).
    dtype : {"fp16", "bf16"} or torch.dtype, default "fp16"
        The half-precision format.

    Returns
    -------
    float
        The scale, capped at ``2**127``, the largest power of two a float32
        scale can hold.

    Raises
    ------
    ValueError
        If ``max_abs_grad`` is not a positive number or ``dtype`` not a half format.

    Examples
    --------
    >>> max_safe_scale(1.0)           # 2**15 = 32768 < 65504 <= 2**16
    32768.0
    >>> max_safe_scale(1e-3)
    33554432.0
    >>> max_safe_scale(100.0, "bf16") == 2.0**121  # bf16 reaches about 3.39e38
    True
    """
    m = check_positive("max_abs_grad", max_abs_grad)
    limit = float(torch.finfo(dtype_of(dtype)).max)
    k = math.floor(math.log2(limit) - math.log2(m))
    # log2 may be off by one near powers of two; settle k exactly.
    while math.ldexp(m, k) >= limit:
        k -= 1
    while math.ldexp(m, k + 1) < limit:
        k += 1
    return math.ldexp(1.0, min(k, 127))
