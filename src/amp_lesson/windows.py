"""Accumulation windows of a real data loader, and what the recipe's steps should be.

:func:`amp_lesson.recipe.train_mixed_precision` steps once per *window*:
``accum_steps`` consecutive micro-batches of its loader, or what is left at
the end of an epoch. A loader's micro-batches differ in size (a default
``DataLoader`` ends on a short batch, padded sequences hold different numbers
of tokens), so each micro-batch's mean loss is weighted by its share of the
window's samples. This module checks that against arithmetic it can trust, on
the lesson's logistic regression (a linear model without bias and
``BCEWithLogitsLoss``):

- :func:`split_windows` groups micro-batches into windows as the recipe does;
- :func:`window_rows` tabulates each window and how much a sample of each
  micro-batch weighs, in the recipe and under ``loss / accum_steps``;
- :func:`reference_steps` is the float64 reference: one SGD step per window
  on the window's samples as one batch;
- :func:`recipe_bound` bounds how far a run in FP16, BF16 or FP32 may land from
  that reference, derived from the formats' unit roundoff.

Targets may hold :data:`~amp_lesson.accumulation_pitfalls.IGNORE_INDEX` at
padding positions (per-token losses): such positions are not samples.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from amp_lesson._checks import check_int, check_positive, described
from amp_lesson.accumulation_pitfalls import IGNORE_INDEX

__all__ = [
    "recipe_bound",
    "reference_steps",
    "split_windows",
    "window_rows",
]

Window = list[tuple[torch.Tensor, torch.Tensor]]  # the (x, y) micro-batches of one step


def split_windows(batches: Iterable[Any], accum_steps: int) -> list[Window]:
    """Group micro-batches into the windows :func:`~amp_lesson.recipe.train_mixed_precision` steps on.

    Parameters
    ----------
    batches : iterable of (x, y)
        One epoch of micro-batches, as a loader yields them.
    accum_steps : int
        Micro-batches per window; the last window holds what is left.

    Returns
    -------
    list of list of (x, y)
        The windows, in order.

    Raises
    ------
    ValueError
        If ``accum_steps`` is not an int >= 1.

    Examples
    --------
    >>> [len(w) for w in split_windows([(i, i) for i in range(8)], 3)]
    [3, 3, 2]
    """
    check_int("accum_steps", accum_steps, minimum=1)
    items = list(batches)
    return [items[i : i + accum_steps] for i in range(0, len(items), accum_steps)]


def _samples(window: Window) -> tuple[torch.Tensor, torch.Tensor]:
    """The window's samples as float64 rows ``(X, y)``, padding positions left out."""
    xs, ys = [], []
    for x, y in window:
        if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
            raise TypeError(
                f"a micro-batch must be a pair of tensors (x, y), got {described(x)} "
                f"and {described(y)}"
            )
        x = x.detach().double().cpu().reshape(-1, x.shape[-1])
        y = y.detach().double().cpu().reshape(-1)
        if len(x) != len(y):
            raise ValueError(
                f"y must hold one target per row of x, got {len(y)} targets for {len(x)} rows"
            )
        kept = y != IGNORE_INDEX
        xs.append(x[kept])
        ys.append(y[kept])
    return torch.cat(xs), torch.cat(ys)


def _counts(window: Window) -> list[int]:
    return [int((y != IGNORE_INDEX).sum()) for _, y in window]


def window_rows(windows: Sequence[Window], accum_steps: int) -> list[dict[str, Any]]:
    """Each window's micro-batches, and what one sample of each weighs in its step.

    A sample's weight is its share of the window's gradient: ``1 / total`` in
    the recipe (``total`` samples in the window), ``1 / (accum_steps * n)``
    when each micro-batch's mean loss (over its ``n`` samples) is divided by
    ``accum_steps``.

    Parameters
    ----------
    windows : sequence of windows
        From :func:`split_windows`.
    accum_steps : int
        The divisor of ``loss / accum_steps``.

    Returns
    -------
    list of dict
        One row per micro-batch: ``"window"``, ``"micro-batch"`` (both from
        1), ``"samples"``, the weight of one of its samples ``"weight (recipe)"``
        and ``"weight (÷ accum_steps)"``, and ``"ratio"``, the second over the
        first, rounded to 6 digits (1 is right).

    Raises
    ------
    ValueError
        If ``accum_steps`` is not an int >= 1 or a window has no sample.

    Examples
    --------
    >>> ones = [(torch.ones(n, 2), torch.ones(n, 1)) for n in (32, 32, 26)]
    >>> [r["ratio"] for r in window_rows([ones], 4)]
    [0.703125, 0.703125, 0.865385]
    """
    check_int("accum_steps", accum_steps, minimum=1)
    rows = []
    for number, window in enumerate(windows, start=1):
        counts = _counts(window)
        total = sum(counts)
        if total == 0:
            raise ValueError(f"window {number} has no sample")
        for micro, n in enumerate(counts, start=1):
            naive = 1 / (accum_steps * n) if n else 0.0
            rows.append(
                {
                    "window": number,
                    "micro-batch": micro,
                    "samples": n,
                    "weight (recipe)": 1 / total,
                    "weight (÷ accum_steps)": naive,
                    "ratio": round(naive * total, 6),
                }
            )
    return rows


def reference_steps(
    weight: torch.Tensor, windows: Sequence[Window], lr: float, epochs: int = 1
) -> list[torch.Tensor]:
    """The float64 reference: one SGD step per window on the window's samples as one batch.

    The model is the lesson's logistic regression, ``logits = x @ weight.T``
    with ``BCEWithLogitsLoss`` (the mean over the window's samples), and SGD
    without momentum.

    Parameters
    ----------
    weight : torch.Tensor
        The starting weight, shape ``(1, features)``.
    windows : sequence of windows
        One epoch of windows (:func:`split_windows`); targets 0 or 1, or
        :data:`~amp_lesson.accumulation_pitfalls.IGNORE_INDEX` for padding.
    lr : float
        The learning rate.
    epochs : int, default 1
        Passes over ``windows``.

    Returns
    -------
    list of torch.Tensor
        The float64 weight before each step, and after the last one.

    Raises
    ------
    ValueError
        If ``lr`` is not a number > 0, ``epochs`` not an int >= 1, or a
        window has no sample.

    Examples
    --------
    >>> x = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    >>> y = torch.tensor([[1.0], [0.0]])
    >>> reference_steps(torch.zeros(1, 2), [[(x, y)]], lr=2.0)[-1]
    tensor([[ 0.5000, -0.5000]], dtype=torch.float64)
    """
    lr = check_positive("lr", lr)
    check_int("epochs", epochs, minimum=1)
    w = weight.detach().double().cpu().reshape(1, -1).clone()
    trajectory = [w.clone()]
    for _ in range(epochs):
        for number, window in enumerate(windows, start=1):
            X, y = _samples(window)
            if len(y) == 0:
                raise ValueError(f"window {number} has no sample")
            w.requires_grad_(True)
            loss = F.binary_cross_entropy_with_logits((X @ w.T).reshape(-1), y)
            (grad,) = torch.autograd.grad(loss, w)
            w = (w - lr * grad).detach()
            trajectory.append(w.clone())
    return trajectory


def _unit_roundoff(dtype: torch.dtype) -> tuple[float, float]:
    """``(u, half the smallest subnormal)`` of a floating-point dtype."""
    info = torch.finfo(dtype)
    return info.eps / 2, info.smallest_normal * info.eps / 2


def _gamma(n: int, u: float) -> float:
    """Higham's ``gamma_n = n u / (1 - n u)``: ``n`` roundings err by at most it, relatively."""
    if n * u >= 1:
        raise ValueError(f"{n} roundings of unit roundoff {u} are beyond what gamma_n can bound")
    return n * u / (1 - n * u)


def recipe_bound(
    windows: Sequence[Window],
    trajectory: Sequence[torch.Tensor],
    lr: float,
    dtype: torch.dtype = torch.float16,
    param_dtype: torch.dtype = torch.float32,
) -> float:
    """A bound on the 2-norm distance from the recipe's weights to :func:`reference_steps`'.

    The run is :func:`~amp_lesson.recipe.train_mixed_precision` on the
    lesson's logistic regression with SGD, with no skipped step and IEEE
    FP32 matrix products (no TF32). Its step ``t`` differs from the exact
    step at its own weights ``w~`` by ``lr`` times the error of its gradient,
    plus the rounding of the update.

    The gradient of weight ``j`` sums ``d_i X_ij`` over the window's ``B``
    samples, with ``|d_i| = |sigma(z_i) - y_i| / B <= 1 / B``. In ``dtype``
    (unit roundoff ``u``) ``X`` and ``d`` are rounded, and the matrix multiply
    adds the ``m`` products of a micro-batch, rounding each product and sum
    (a kernel that adds in FP16) or only its result (one that adds in FP32):
    either way each term is off by at most ``gamma_(m+3)`` of its magnitude
    (Higham's ``gamma_n = n u / (1 - n u)``), so the gradient by at most
    ``gamma_(m+3) A_j`` with ``A_j = sum_i |X_ij| / B``. The logits
    ``z = X w~`` are rounded the same way, by at most
    ``gamma_(F+3) sum_k |X_ik| |w~_k|`` over ``F`` features; ``sigma`` moves
    by at most a quarter of that, and the error it causes in ``d`` passes
    through the same rounded product, so it is counted ``1 + gamma_(m+3)``
    times. Values below ``dtype``'s normal range are rounded by up to half its
    smallest subnormal, ``tiny``, absolutely: the logits allow
    ``tiny (1 + sum_k |w~_k| + sum_k |X_ik|)``, the gradient
    ``tiny (1 + m + sum_i |X_ij|)``. The work in ``param_dtype`` (the
    sigmoid and the loss's gradient, the weights ``1 / n`` and ``share``,
    adding micro-batches into ``.grad``, and the float64 reference's own sum)
    is allowed ``(B + n + 8)`` of its roundings of ``A_j``, more than it
    makes, on purpose; the update ``w - lr g`` two more.

    Errors do not grow from step to step: a gradient step on a convex loss
    whose gradient is ``L``-Lipschitz moves two points no further apart when
    ``lr <= 2 / L``, and for this loss ``L`` is the largest eigenvalue of
    ``X^T X / (4B)``; each window's loss is checked on its own. So the
    distance after the last step is at most the sum of every step's error,
    each evaluated with ``|w~_k|`` bounded by the reference's ``|w_k|`` plus
    the distance so far.

    Parameters
    ----------
    windows : sequence of windows
        One epoch of windows (:func:`split_windows`), repeated for as many
        epochs as ``trajectory`` has steps.
    trajectory : sequence of torch.Tensor
        :func:`reference_steps`' weights.
    lr : float
        The learning rate.
    dtype : torch.dtype, default torch.float16
        The autocast dtype, ``torch.float16`` or ``torch.bfloat16``;
        ``torch.float32`` (no autocast) computes in ``param_dtype``.
    param_dtype : torch.dtype, default torch.float32
        The dtype of the model's parameters, gradients and loss.

    Returns
    -------
    float
        The bound on ``||w_run - w_reference||_2`` after the last step.

    Raises
    ------
    ValueError
        If ``lr`` is not a number > 0 or above ``2 / L`` for some window
        (errors could then grow), ``trajectory`` has no step, its steps are
        not a whole number of epochs, or a micro-batch is too long for
        ``dtype``'s ``gamma`` to bound its sum (``(m + 3) u >= 1``: over 253
        rows in BF16, over 2045 in FP16).

    Examples
    --------
    >>> from amp_lesson.accumulation import make_toy_problem
    >>> X, y = make_toy_problem(n_samples=100, device="cpu")
    >>> windows = split_windows(zip(X.split(32), y.split(32)), 3)
    >>> steps = reference_steps(torch.zeros(1, 2), windows, lr=0.1)
    >>> f"{recipe_bound(windows, steps, lr=0.1):.2e}"  # 2 steps in FP16
    '2.34e-03'
    >>> f"{recipe_bound(windows, steps, lr=0.1, dtype=torch.float32):.2e}"
    '1.12e-06'
    """
    lr = check_positive("lr", lr)
    if not windows or len(trajectory) < 2 or (len(trajectory) - 1) % len(windows):
        raise ValueError(
            f"trajectory must hold the starting weight and one per step of whole epochs of "
            f"{len(windows)} windows, got {len(trajectory)} weights"
        )
    u, tiny = _unit_roundoff(param_dtype if dtype == torch.float32 else dtype)
    u_acc, _ = _unit_roundoff(param_dtype)
    distance = 0.0
    for step, w_ref in enumerate(trajectory[:-1]):
        window = windows[step % len(windows)]
        X, _ = _samples(window)
        B, features = X.shape
        m = max(x.reshape(-1, x.shape[-1]).shape[0] for x, _ in window)
        smooth = float(torch.linalg.eigvalsh(X.T @ X / (4 * B))[-1])
        if lr * smooth > 2:
            raise ValueError(
                f"lr must be <= 2 / L = {2 / smooth:.4g} for window {step % len(windows) + 1}, "
                f"or errors can grow from step to step; got {lr}"
            )
        w = w_ref.abs().reshape(-1) + distance  # |w~_k| can be no larger
        absX = X.abs()
        A = absX.mean(dim=0)
        grad_gamma = _gamma(m + 3, u)
        logit_err = _gamma(features + 3, u) * (absX @ w) + tiny * (1 + w.sum() + absX.sum(dim=1))
        from_logits = (absX * logit_err[:, None]).mean(dim=0) / 4 * (1 + grad_gamma)
        grad_err = grad_gamma * A + from_logits + tiny * (1 + m + absX.sum(dim=0))
        grad_err = grad_err + (B + len(window) + 8) * u_acc * A
        update_err = 2 * u_acc * (w + lr * A)
        distance += float(torch.linalg.vector_norm(lr * grad_err + update_err))
    return distance
