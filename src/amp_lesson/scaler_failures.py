"""How GradScaler fails, and what each failure looks like.

:class:`torch.amp.GradScaler` is quiet by design: it skips a step and
shrinks its scale without a word. Each function here provokes one failure
with the real scaler on the book's toy problem, small enough to run in a
second:

- :func:`collapse_then_good_step` -- a persistent NaN drives the scale to 0,
  and the next good step writes NaN into the weights;
- :func:`clipping_rows` -- clipping before ``unscale_``;
- :func:`scaler_extra_calls` and :func:`scaler_on_bf16_params` -- a scaler
  with bf16;
- :func:`scheduler_after_skipped_step` -- the scheduler warning when
  GradScaler skips the first step, and the guard that avoids it.

Where gradient accumulation itself goes wrong is the other page's subject
(:mod:`amp_lesson.accumulation_pitfalls`).
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from amp_lesson._checks import check_int, check_positive
from amp_lesson.accumulation import (
    make_toy_model,
    make_toy_optimizer,
    make_toy_problem,
    train_amp,
    train_amp_mistake,
)
from amp_lesson.device import resolve_device
from amp_lesson.formats import dtype_of
from amp_lesson.scaler import step_skipped
from amp_lesson.timing import one_thread

__all__ = [
    "CollapseStep",
    "clipping_rows",
    "collapse_then_good_step",
    "scaler_extra_calls",
    "scaler_on_bf16_params",
    "scheduler_after_skipped_step",
]


# --------------------------------------------------------------------------- GradScaler


@dataclass(frozen=True)
class CollapseStep:
    """One iteration of :func:`collapse_then_good_step`.

    Parameters
    ----------
    step : int
        The iteration, from 1.
    nan_data : bool
        Whether this step's data held the NaN.
    scale : float
        The scale the loss was multiplied by.
    inv_scale : float
        The factor ``unscale_`` multiplies the gradients by,
        ``float32(1 / float64(scale))``: ``inf`` once ``1 / scale`` leaves
        float32's range.
    found_inf : bool
        Whether the *scaled* gradients held an inf or NaN (GradScaler's test).
    weights_changed : bool
        Whether the step moved the weights (:func:`amp_lesson.scaler.step_skipped`).
    weights_finite : bool
        Whether every weight is still finite after the step.
    weights : tuple of float
        The weights after the step.
    """

    step: int
    nan_data: bool
    scale: float
    inv_scale: float
    found_inf: bool
    weights_changed: bool
    weights_finite: bool
    weights: tuple[float, ...]


def collapse_then_good_step(
    n_bad: int = 170, n_good: int = 2, device: torch.device | str | None = None
) -> list[CollapseStep]:
    """A real GradScaler fed ``n_bad`` steps of NaN data, then ``n_good`` clean ones.

    A NaN in the data makes every step's gradients NaN, so GradScaler skips
    every step and halves the scale each time: it cannot tell a persistent
    bug from an overflow. After enough halvings ``1 / scale`` is no longer a
    float32, ``unscale_`` multiplies by ``inf``, and the first clean step
    writes NaN into the weights.

    The toy model and problem run under fp16 autocast with
    ``GradScaler(device.type)`` (default settings); the first sample's
    feature is NaN during the bad steps.

    Parameters
    ----------
    n_bad : int, default 170
        Steps with a NaN in the data (``>= 0``).
    n_good : int, default 2
        Clean steps after them (``>= 0``).
    device : torch.device or str, optional
        Where to run.

    Returns
    -------
    list of CollapseStep
        One per iteration.

    Raises
    ------
    ValueError
        If a count is negative.

    Examples
    --------
    >>> rows = collapse_then_good_step(n_bad=3, n_good=1, device="cpu")
    >>> [(r.nan_data, r.scale, r.found_inf, r.weights_finite) for r in rows]
    [(True, 65536.0, True, True), (True, 32768.0, True, True),
     (True, 16384.0, True, True), (False, 8192.0, False, True)]
    """
    check_int("n_bad", n_bad, minimum=0)
    check_int("n_good", n_good, minimum=0)
    device = resolve_device(device)
    X, y = make_toy_problem(device=device)
    X_bad = X.clone()
    X_bad[0, 0] = math.nan
    model = make_toy_model(device=device)
    optimizer = make_toy_optimizer(model)
    scaler = torch.amp.GradScaler(device.type)
    loss_fn = nn.BCEWithLogitsLoss()
    rows = []
    with one_thread():
        for step in range(1, n_bad + n_good + 1):
            bad = step <= n_bad
            with torch.autocast(device.type, dtype=torch.float16):
                loss = loss_fn(model(X_bad if bad else X), y)
            scaler.scale(loss).backward()
            scale = scaler.get_scale()
            inv_scale = float(torch.tensor(scale, dtype=torch.float64).reciprocal().float())
            # GradScaler's own test: any inf/NaN in the *scaled* gradients.
            found = not all(bool(torch.isfinite(p.grad).all()) for p in model.parameters())
            skipped = step_skipped(scaler, optimizer)
            scaler.update()
            optimizer.zero_grad()
            after = model.weight.detach()
            rows.append(
                CollapseStep(
                    step=step,
                    nan_data=bad,
                    scale=scale,
                    inv_scale=inv_scale,
                    found_inf=found,
                    weights_changed=not skipped,
                    weights_finite=bool(torch.isfinite(after).all()),
                    weights=tuple(after.flatten().tolist()),
                )
            )
    return rows


def clipping_rows(
    clip_norm: float = 0.1,
    init_scales: Sequence[float] = (2.0**16, 2.0**-4),
    device: torch.device | str | None = None,
) -> list[dict[str, Any]]:
    """Run one fp16 AMP step on the toy problem with gradient clipping, right and wrong.

    Between ``backward()`` and ``scaler.step()`` the gradients are
    multiplied by the scale, so a clip before ``unscale_`` compares the wrong
    norm: it clips far too hard for a scale above 1 and not at all below.
    For each initial scale this runs the correct loop (``unscale_`` then
    clip, :func:`~amp_lesson.accumulation.train_amp`) and the mistake
    ``"clip_before_unscale"`` of :func:`~amp_lesson.accumulation.train_amp_mistake`.
    The model starts at zero and SGD has ``lr = 0.1``, so the gradient the
    step applied is ``|w| / lr``.

    Parameters
    ----------
    clip_norm : float, default 0.1
        The clipping threshold.
    init_scales : sequence of float, default (2.0**16, 2.0**-4)
        The GradScaler's initial scales to try.
    device : torch.device or str, optional
        Where to run.

    Returns
    -------
    list of dict
        Per scale and loop: ``"loop"``, ``"scale"``, ``"true grad norm"``,
        ``"clip_norm"``, ``"applied grad norm"`` and ``"should apply"``
        (``min(true norm, clip_norm)``, what a correct clip applies).

    Raises
    ------
    ValueError
        If ``clip_norm`` is not a positive number.

    Examples
    --------
    >>> rows = clipping_rows(device="cpu")
    >>> [(r["loop"], r["scale"]) for r in rows][:2]
    [('unscale_, then clip', 65536.0), ('clip, then step (no unscale_)', 65536.0)]
    """
    check_positive("clip_norm", clip_norm)
    device = resolve_device(device)
    X, y = make_toy_problem(device=device)
    loss_fn = nn.BCEWithLogitsLoss()
    rows = []
    for init_scale in init_scales:
        for loop in ("unscale_, then clip", "clip, then step (no unscale_)"):
            model = make_toy_model(device=device)
            optimizer = make_toy_optimizer(model)
            kwargs = {"scaler_kwargs": {"init_scale": init_scale}, "clip_norm": clip_norm}
            if loop.startswith("unscale_"):
                result = train_amp(model, optimizer, X, y, loss_fn, **kwargs)
            else:
                result = train_amp_mistake(
                    model, optimizer, X, y, loss_fn, mistake="clip_before_unscale", **kwargs
                )
            lr = optimizer.param_groups[0]["lr"]
            rows.append(
                {
                    "loop": loop,
                    "scale": result.log[0].scale,
                    "true grad norm": result.log[0].grad_norm,
                    "clip_norm": clip_norm,
                    "applied grad norm": float(result.weight.norm()) / lr,
                    "should apply": min(result.log[0].grad_norm, clip_norm),
                }
            )
    return rows


class _CallCounter(TorchFunctionMode):
    """Counts the ``torch`` functions and tensor methods called inside it."""

    IGNORED = ("__get__", "__set__", "_set_grad_enabled", "_record_function")

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        name = getattr(func, "__name__", str(func))
        if not name.startswith(self.IGNORED):
            self.calls[name] += 1
        return func(*args, **(kwargs or {}))


def scaler_extra_calls(
    dtype: torch.dtype = torch.bfloat16, device: torch.device | str | None = None
) -> tuple[dict[str, int], bool]:
    """Count the torch calls a GradScaler adds to one AMP step, and whether it changed the result.

    Runs two steps of the toy problem under ``autocast(dtype)`` with an
    enabled and a disabled ``GradScaler(device.type)`` and counts the torch
    calls of the second step (the first creates the scaler's tensors). Under
    bf16 the scaler has nothing to rescue, yet it still runs.

    Parameters
    ----------
    dtype : {"fp16", "bf16"} or torch.dtype, default torch.bfloat16
        The autocast dtype.
    device : torch.device or str, optional
        Where to run.

    Returns
    -------
    extra : dict of str to int
        The calls only the enabled scaler made, by name, with their counts.
    same : bool
        Whether the two runs' weights are bitwise equal.

    Raises
    ------
    ValueError
        If ``dtype`` is not a half format (autocast would quietly switch
        itself off for any other) or ``device`` is unknown.

    Examples
    --------
    >>> extra, same = scaler_extra_calls(device="cpu")
    >>> same, "_amp_foreach_non_finite_check_and_unscale_" in extra, extra["item"]
    (True, True, 1)
    """
    dtype = dtype_of(dtype)
    device = resolve_device(device)
    X, y = make_toy_problem(device=device)
    loss_fn = nn.BCEWithLogitsLoss()
    counts, weights = [], []
    for enabled in (True, False):
        model = make_toy_model(device=device)
        optimizer = make_toy_optimizer(model)
        scaler = torch.amp.GradScaler(device.type, enabled=enabled)
        for _ in range(2):
            with _CallCounter() as counter:
                with torch.autocast(device.type, dtype=dtype):
                    loss = loss_fn(model(X), y)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
        counts.append(counter.calls)
        weights.append(model.weight.detach().cpu())
    extra = counts[0] - counts[1]
    return dict(sorted(extra.items())), torch.equal(weights[0], weights[1])


def scaler_on_bf16_params(device: torch.device | str | None = None) -> dict[str, Any]:
    """Run GradScaler on a model whose parameters (and so gradients) are bf16.

    On the CPU the unscale kernel accepts bf16 gradients and the step runs;
    on CUDA ``scaler.step`` raises ``NotImplementedError`` (its kernel covers
    only float32, float64 and float16).

    Parameters
    ----------
    device : torch.device or str, optional
        Where to run.

    Returns
    -------
    dict
        ``"device"``, ``"ok"`` (the step ran), ``"error"`` (the message of the
        ``NotImplementedError``, else ``None``) and ``"weights changed"``.

    Examples
    --------
    >>> scaler_on_bf16_params("cpu")["ok"]
    True
    """
    device = resolve_device(device)
    X, y = make_toy_problem(device=device)
    model = make_toy_model(device=device).to(torch.bfloat16)
    optimizer = make_toy_optimizer(model)
    scaler = torch.amp.GradScaler(device.type)
    loss = nn.BCEWithLogitsLoss()(model(X.bfloat16()), y.bfloat16())
    scaler.scale(loss).backward()
    before = model.weight.detach().clone()
    try:
        scaler.step(optimizer)
        scaler.update()
    except NotImplementedError as error:
        return {"device": device.type, "ok": False, "error": str(error), "weights changed": False}
    changed = not torch.equal(before, model.weight.detach())
    return {"device": device.type, "ok": True, "error": None, "weights changed": changed}


def scheduler_after_skipped_step(
    guard: bool, steps: int = 4, device: torch.device | str | None = None
) -> tuple[list[dict[str, Any]], list[str]]:
    """Run an AMP loop with ``ExponentialLR(gamma=0.5)`` whose first step GradScaler skips.

    ``init_scale=2**18`` makes the toy problem's scaled fp16 gradients
    overflow on step 1 (and only there), so GradScaler skips it and halves
    the scale. An unguarded scheduler advances anyway, and PyTorch warns.

    Parameters
    ----------
    guard : bool
        ``False``: the scheduler steps every iteration. ``True``: only when
        the scale did not drop in ``update()`` (i.e. the optimizer really
        stepped). Accelerate tells a skipped step another way, by a flag its
        wrapped ``optimizer.step`` sets (version 1.15.0.dev0, read on 2026-12-01).
    steps : int, default 4
        Iterations.
    device : torch.device or str, optional
        Where to run.

    Returns
    -------
    rows : list of dict
        Per step: ``"step"``, ``"scale"``, ``"skipped"``, ``"lr used"`` and
        ``"lr after"``.
    warnings : list of str
        The warnings raised.

    Raises
    ------
    TypeError
        If ``guard`` is not a bool.
    ValueError
        If ``steps`` is below 1.

    Examples
    --------
    >>> rows, warned = scheduler_after_skipped_step(guard=False, device="cpu")
    >>> [(r["skipped"], r["lr after"]) for r in rows], len(warned)
    ([(True, 0.05), (False, 0.025), (False, 0.0125), (False, 0.00625)], 1)
    >>> rows, warned = scheduler_after_skipped_step(guard=True, device="cpu")
    >>> [(r["skipped"], r["lr after"]) for r in rows], len(warned)
    ([(True, 0.1), (False, 0.05), (False, 0.025), (False, 0.0125)], 0)
    """
    if not isinstance(guard, bool):
        raise TypeError(f"guard must be True or False, got {guard!r}")
    check_int("steps", steps, minimum=1)
    device = resolve_device(device)
    X, y = make_toy_problem(device=device)
    model = make_toy_model(device=device)
    optimizer = make_toy_optimizer(model)
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.5)
    scaler = torch.amp.GradScaler(device.type, init_scale=2.0**18)
    rows = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(1, steps + 1):
            lr_used = optimizer.param_groups[0]["lr"]
            with torch.autocast(device.type, dtype=torch.float16):
                loss = nn.BCEWithLogitsLoss()(model(X), y)
            scaler.scale(loss).backward()
            before = model.weight.detach().clone()
            scale_before = scaler.get_scale()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
            if not guard or scaler.get_scale() >= scale_before:
                scheduler.step()  # guard: only after a real step
            rows.append(
                {
                    "step": step,
                    "scale": scale_before,
                    "skipped": torch.equal(before, model.weight.detach()),
                    "lr used": lr_used,
                    "lr after": optimizer.param_groups[0]["lr"],
                }
            )
    return rows, [str(w.message) for w in caught]
