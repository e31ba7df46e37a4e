"""Training with weights and optimizer state in BF16: no FP32 master copy, and two remedies.

Mixed precision keeps an FP32 copy of the weights because an update much
smaller than a weight is lost when the sum is rounded to 16 bits: in BF16,
``1 + 1e-3`` is ``1``. Dropping the FP32 copy (and storing the optimizer's
moments in BF16 too) halves the bytes per parameter, and two techniques win
back the small updates:

- **stochastic rounding**: round the new weight up or down at random, with
  the probabilities that make the expected stored value equal the exact sum,
  so small updates survive on average;
- **Kahan-compensated summation**: keep, per weight, the part of each update
  that the rounding dropped (a BF16 *compensation* buffer) and add it back
  at the next update.

This module runs both on the book's digits classifier with an Adam optimizer
written out (:func:`adam_direction`), so every run makes the same decisions
except where it stores the result: :func:`train_digits_bf16`.

>>> accumulate(1.0, 1e-3, 100, "bf16")
1.0
>>> accumulate(1.0, 1e-3, 100, "bf16_kahan")
1.1015625
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field

import torch
from torch import nn

from amp_lesson._checks import (
    check_choice,
    check_finite,
    check_int,
    check_positive,
    check_seed,
    described,
)
from amp_lesson.gradients import DIGITS_HIDDEN, DigitsData
from amp_lesson.models import make_mlp

__all__ = [
    "BYTES_PER_PARAM",
    "MODES",
    "BF16Run",
    "accumulate",
    "adam_direction",
    "apply_update",
    "stochastic_round_bf16",
    "train_digits_bf16",
]

MODES: tuple[str, ...] = ("fp32", "bf16", "bf16_stochastic", "bf16_kahan")
"""The ways a run stores its weights, in order FP32, BF16 rounded to nearest, BF16
rounded stochastically, and BF16 with a BF16 Kahan compensation buffer."""

BYTES_PER_PARAM: dict[str, dict[str, int]] = {
    "fp32": {"weight": 4, "gradient": 4, "Adam m and v": 8, "compensation": 0},
    "bf16": {"weight": 2, "gradient": 2, "Adam m and v": 4, "compensation": 0},
    "bf16_stochastic": {"weight": 2, "gradient": 2, "Adam m and v": 4, "compensation": 0},
    "bf16_kahan": {"weight": 2, "gradient": 2, "Adam m and v": 4, "compensation": 2},
}
"""Bytes each parameter costs in each mode, with Adam (activations not counted)."""


def stochastic_round_bf16(
    x: torch.Tensor, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Round float32 values to BF16 up or down at random, unbiased.

    BF16 is the top 16 bits of a float32. Adding a uniform random integer in
    ``[0, 2**16)`` to the float32 bit pattern and dropping the low 16 bits
    rounds away from zero with probability equal to the dropped fraction of
    an ulp, so the expected result is ``x`` itself (for ``x`` below BF16's
    largest finite value, where the next step up is not infinity).

    Parameters
    ----------
    x : torch.Tensor
        Float32 values (finite).
    generator : torch.Generator, optional
        The source of randomness (on ``x``'s device).

    Returns
    -------
    torch.Tensor
        BF16, the shape of ``x``.

    Raises
    ------
    TypeError
        If ``x`` is not a float32 tensor.

    Examples
    --------
    >>> g = torch.Generator().manual_seed(0)
    >>> x = torch.full((100000,), 1.001)
    >>> r = stochastic_round_bf16(x, g)
    >>> sorted(set(r.float().tolist())), round(r.float().mean().item(), 3)
    ([1.0, 1.0078125], 1.001)
    """
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float32:
        raise TypeError(f"x must be a float32 tensor, got {described(x)}")
    noise = torch.randint(
        0, 1 << 16, x.shape, generator=generator, device=x.device, dtype=torch.int32
    )
    bits = (x.view(torch.int32) + noise) & ~0xFFFF
    return bits.view(torch.float32).to(torch.bfloat16)


def apply_update(
    weight: torch.Tensor,
    update: torch.Tensor,
    mode: str,
    compensation: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> None:
    """Add ``update`` to ``weight`` in place, stored as ``mode`` stores it.

    The sum is formed in float32, as a BF16 add on hardware forms it, and
    then stored: rounded to nearest (``"fp32"``, ``"bf16"``), rounded
    stochastically (``"bf16_stochastic"``), or rounded to nearest with the
    rounding error kept in ``compensation`` and subtracted from the next
    update (``"bf16_kahan"``).

    Parameters
    ----------
    weight : torch.Tensor
        Float32 for ``"fp32"``, BF16 otherwise; updated in place.
    update : torch.Tensor
        Float32, the shape of ``weight``.
    mode : {"fp32", "bf16", "bf16_stochastic", "bf16_kahan"}
        How the result is stored.
    compensation : torch.Tensor, optional
        BF16, the shape of ``weight``; required by ``"bf16_kahan"`` and
        updated in place.
    generator : torch.Generator, optional
        Randomness for ``"bf16_stochastic"``.

    Raises
    ------
    TypeError
        If ``update`` is not a float32 tensor.
    ValueError
        If ``mode`` is unknown, the weight's dtype does not match it,
        ``update`` does not have the weight's shape, or ``"bf16_kahan"`` has
        no BF16 compensation buffer of that shape.

    Examples
    --------
    >>> w, c = torch.ones(1, dtype=torch.bfloat16), torch.zeros(1, dtype=torch.bfloat16)
    >>> for _ in range(10):
    ...     apply_update(w, torch.tensor([1e-3]), "bf16_kahan", c)
    >>> w.item(), c.item()
    (1.0078125, -0.0022125244140625)
    """
    check_choice("mode", mode, MODES)
    want = torch.float32 if mode == "fp32" else torch.bfloat16
    if weight.dtype != want:
        raise ValueError(f"weight must be {want} for mode {mode!r}, got {weight.dtype}")
    if not isinstance(update, torch.Tensor) or update.dtype != torch.float32:
        raise TypeError(f"update must be a float32 tensor, got {described(update)}")
    if update.shape != weight.shape:
        raise ValueError(
            f"update must have the weight's shape {tuple(weight.shape)}, got {tuple(update.shape)}"
        )
    if mode == "fp32":
        weight.add_(update)
    elif mode == "bf16":
        weight.copy_(weight.float() + update)
    elif mode == "bf16_stochastic":
        weight.copy_(stochastic_round_bf16(weight.float() + update, generator))
    else:
        if (
            compensation is None
            or compensation.shape != weight.shape
            or compensation.dtype != torch.bfloat16
        ):
            raise ValueError(
                "compensation must be a BF16 tensor of the weight's shape for 'bf16_kahan'"
            )
        y = update - compensation.float()
        total = weight.float() + y
        stored = total.to(torch.bfloat16)
        compensation.copy_((stored.float() - weight.float()) - y)
        weight.copy_(stored)


def accumulate(start: float, update: float, steps: int, mode: str, seed: int = 0) -> float:
    """Add ``update`` to a single weight ``steps`` times, stored as ``mode`` stores it.

    Parameters
    ----------
    start, update : float
        The weight's first value and the update added each step.
    steps : int
        Updates (``>= 0``).
    mode : {"fp32", "bf16", "bf16_stochastic", "bf16_kahan"}
        How the weight is stored (:func:`apply_update`).
    seed : int, default 0
        Seed of the stochastic rounding.

    Returns
    -------
    float
        The weight after the last update.

    Raises
    ------
    ValueError
        If ``start`` or ``update`` is not finite in ``mode``'s dtype, the result
        overflows it, ``steps`` is negative, or ``mode`` unknown.

    Examples
    --------
    >>> accumulate(1.0, 1e-3, 100, "fp32"), accumulate(1.0, 1e-3, 100, "bf16")
    (1.1000046730041504, 1.0)
    """
    check_choice("mode", mode, MODES)
    dtype = torch.float32 if mode == "fp32" else torch.bfloat16
    w = torch.tensor([check_finite("start", start)], dtype=dtype)
    u = torch.tensor([check_finite("update", update)])
    for name, stored in (("start", w), ("update", u)):
        if not bool(torch.isfinite(stored).all()):
            raise ValueError(f"{name} must be finite in {dtype}, got {stored.item()}")
    c = torch.zeros(1, dtype=torch.bfloat16)
    g = torch.Generator().manual_seed(check_seed("seed", seed))
    for _ in range(check_int("steps", steps, minimum=0)):
        apply_update(w, u, mode, c, g)
    if not bool(torch.isfinite(w).all()):
        raise ValueError(f"the weight overflowed {dtype} after adding update {update} repeatedly")
    return w.item()


def adam_direction(
    grad: torch.Tensor,
    m: torch.Tensor,
    v: torch.Tensor,
    step: int,
    lr: float,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
) -> torch.Tensor:
    """Update Adam's moments in place (in their own dtype) and return the step, in float32.

    ``m <- b1 m + (1 - b1) g``, ``v <- b2 v + (1 - b2) g**2``, stored in the
    moments' dtype; the step ``-lr * m_hat / (sqrt(v_hat) + eps)``, with the
    bias corrections of step ``step`` (from 1), is computed in float32.

    Parameters
    ----------
    grad, m, v : torch.Tensor
        The gradient and the two moments, one shape.
    step : int
        The step's number, from 1.
    lr : float
        Learning rate.
    betas : tuple of float, default (0.9, 0.999)
        Decay of the moments.
    eps : float, default 1e-8
        Added to the denominator.

    Returns
    -------
    torch.Tensor
        The update to add to the weight, float32.

    Raises
    ------
    ValueError
        If ``step`` is below 1, ``lr`` not positive, or ``betas`` not two
        numbers in ``[0, 1)``.

    Examples
    --------
    >>> g = torch.tensor([2.0, -0.5])
    >>> m, v = torch.zeros(2), torch.zeros(2)
    >>> adam_direction(g, m, v, step=1, lr=0.1).tolist()  # first step: -lr * sign(g)
    [-0.10000000149011612, 0.10000000149011612]
    """
    step = check_int("step", step, minimum=1)
    lr = check_positive("lr", lr)
    if (
        not isinstance(betas, (tuple, list))
        or len(betas) != 2
        or not all(isinstance(b, numbers.Real) and 0.0 <= b < 1.0 for b in betas)
    ):
        raise ValueError(f"betas must be two numbers in [0, 1), got {betas!r}")
    b1, b2 = betas
    m.mul_(b1).add_(grad.to(m.dtype), alpha=1 - b1)
    v.mul_(b2).addcmul_(grad.to(v.dtype), grad.to(v.dtype), value=1 - b2)
    m_hat = m.float() / (1 - b1**step)
    v_hat = v.float() / (1 - b2**step)
    return -lr * m_hat / (v_hat.sqrt() + eps)


@dataclass
class BF16Run:
    """What one :func:`train_digits_bf16` run did.

    Parameters
    ----------
    mode : str
        One of :data:`MODES`.
    losses : list of float
        Each step's training loss.
    test_accuracy : float
        After training, computed in float32 from the stored weights.
    params : dict of str to torch.Tensor
        The final weights, as float32 copies.
    bytes_per_param : int
        Weight, gradient, Adam's moments and compensation (:data:`BYTES_PER_PARAM`).
    rounded_away : float
        Of all updates to single weights with a non-zero update, the share that left the
        stored weight unchanged.
    """

    mode: str
    losses: list[float] = field(default_factory=list)
    test_accuracy: float = 0.0
    params: dict[str, torch.Tensor] = field(default_factory=dict)
    bytes_per_param: int = 0
    rounded_away: float = 0.0


def train_digits_bf16(
    data: DigitsData,
    mode: str,
    *,
    steps: int = 150,
    batch_size: int = 64,
    lr: float = 1e-4,
    seed: int = 0,
) -> BF16Run:
    """Train the digits classifier with Adam, weights and moments stored as ``mode`` stores them.

    In the BF16 modes the model's parameters are BF16, so the forward and
    backward passes run in BF16 and the gradients are BF16; the loss is
    computed in float32 from the BF16 logits. Adam's moments have the
    weights' dtype. Every mode sees the same batches in the same order
    (seeded) and starts from the same weights (BF16 ones rounded from them).

    Parameters
    ----------
    data : DigitsData
        The data (:func:`amp_lesson.gradients.load_digits_data`).
    mode : {"fp32", "bf16", "bf16_stochastic", "bf16_kahan"}
        How weights are stored (:func:`apply_update`).
    steps : int, default 150
        Optimizer steps.
    batch_size : int, default 64
        Images per step.
    lr : float, default 1e-4
        Adam's learning rate.
    seed : int, default 0
        Seeds the weights, the batches and the stochastic rounding.

    Returns
    -------
    BF16Run
        The losses, test accuracy, weights and bytes per parameter.

    Raises
    ------
    ValueError
        If a setting is out of range or ``mode`` unknown.

    Examples
    --------
    >>> from amp_lesson.gradients import load_digits_data
    >>> data = load_digits_data()
    >>> run = train_digits_bf16(data, "bf16_kahan", steps=3)
    >>> len(run.losses), run.bytes_per_param, run.params["0.weight"].dtype
    (3, 10, torch.float32)
    """
    check_choice("mode", mode, MODES)
    steps = check_int("steps", steps, minimum=1)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    lr = check_positive("lr", lr)
    seed = check_seed("seed", seed)
    device = data.X_train.device
    dtype = torch.float32 if mode == "fp32" else torch.bfloat16
    model = make_mlp(64, DIGITS_HIDDEN, out_features=10, seed=seed, device=device).to(dtype)
    params = list(model.parameters())
    moments = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]
    compensation = [torch.zeros_like(p, dtype=torch.bfloat16) for p in params]
    batches = torch.Generator(device="cpu").manual_seed(seed)
    rounding = torch.Generator(device=device).manual_seed(seed)
    loss_fn = nn.CrossEntropyLoss()
    run = BF16Run(mode, bytes_per_param=sum(BYTES_PER_PARAM[mode].values()))
    n = len(data.X_train)
    unchanged = nonzero = 0
    for step in range(1, steps + 1):
        idx = torch.randint(0, n, (batch_size,), generator=batches).to(device)
        loss = loss_fn(model(data.X_train[idx].to(dtype)).float(), data.y_train[idx])
        model.zero_grad(set_to_none=True)
        loss.backward()
        with torch.no_grad():
            for p, (m, v), c in zip(params, moments, compensation, strict=True):
                update = adam_direction(p.grad, m, v, step, lr)
                before = p.detach().clone()
                apply_update(p, update, mode, c, rounding)
                moved = update != 0
                nonzero += int(moved.sum())
                unchanged += int((moved & (p == before)).sum())
        run.losses.append(loss.item())
    with torch.no_grad():
        model.float()
        predicted = model(data.X_test).argmax(1)
        run.test_accuracy = (predicted == data.y_test).float().mean().item()
    run.params = {k: p.detach().float().cpu().clone() for k, p in model.named_parameters()}
    run.rounded_away = unchanged / max(nonzero, 1)
    return run
