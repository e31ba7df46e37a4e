"""The loop the book builds toward: mixed precision with gradient accumulation.

:func:`train_mixed_precision` is written to be read and copied. It needs nothing
but ``torch``, keeps no records, and the chapter shows it exactly as it stands
here, from ``import torch`` to the end of :func:`check_recipe_arguments`: that
part of the file is what the page's copy button copies, and it runs alone. The
tables on the book's pages come from its instrumented twin,
:func:`amp_lesson.accumulation.train_amp_accumulated`, which logs every step;
the test suite compares the two bit for bit, weights and scales.

>>> import torch
>>> X = torch.randn(128, 2, generator=torch.Generator().manual_seed(0))
>>> y = (X.sum(dim=1, keepdim=True) > 0).float()
>>> dataset = torch.utils.data.TensorDataset(X, y)
>>> loader = torch.utils.data.DataLoader(dataset, batch_size=32)
>>> model = torch.nn.Linear(2, 1)
>>> optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
>>> loss_fn = torch.nn.BCEWithLogitsLoss()
>>> scaler = train_mixed_precision(model, loader, loss_fn, optimizer,
...                                accum_steps=4, epochs=3)
>>> scaler.get_scale()  # no overflow, and far fewer than growth_interval steps
65536.0
"""

from __future__ import annotations

__all__ = ["check_recipe_arguments", "train_mixed_precision"]

# The recipe, as the chapter shows it and its copy button copies it.
import torch


def train_mixed_precision(
    model: torch.nn.Module,
    loader: torch.utils.data.DataLoader,
    loss_fn: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    *,
    accum_steps: int = 1,
    max_norm: float | None = None,
    dtype: torch.dtype = torch.float16,
    epochs: int = 1,
) -> torch.amp.GradScaler:
    """Mixed-precision training, accum_steps micro-batches per step."""
    check_recipe_arguments(model, loader, optimizer, accum_steps, dtype, epochs)
    device = next(model.parameters()).device
    scaler = torch.amp.GradScaler(device.type)
    model.train()
    optimizer.zero_grad()
    for _ in range(epochs):
        for i, (x, y) in enumerate(loader):
            x, y = x.to(device), y.to(device)
            # autocast: the forward pass and the loss only
            with torch.autocast(device.type, dtype=dtype):
                # each micro-batch's share of the window's loss
                loss = loss_fn(model(x), y) / accum_steps
            scaler.scale(loss).backward()  # scaled gradients add up in .grad
            if (i + 1) % accum_steps != 0:
                continue  # the window is not complete: keep accumulating
            if max_norm is not None:
                # clip the true gradient, not the scaled one
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.step(optimizer)  # skipped if the gradient holds inf or NaN
            scaler.update()  # back off after an overflow, grow after a streak
            optimizer.zero_grad()
    return scaler


def check_recipe_arguments(
    model: torch.nn.Module,
    loader: torch.utils.data.DataLoader,
    optimizer: torch.optim.Optimizer,
    accum_steps: int,
    dtype: torch.dtype,
    epochs: int,
) -> None:
    """Refuse the arguments the loop would misuse without a word."""
    whole = isinstance(accum_steps, int) and accum_steps >= 1
    if not (whole and len(loader) % accum_steps == 0):
        # A window that ran across two epochs would mix their gradients.
        needed = f"accum_steps must be an int >= 1 dividing {len(loader)=}"
        raise ValueError(f"{needed}, got {accum_steps!r}")
    if not (isinstance(epochs, int) and epochs >= 1):
        raise ValueError(f"epochs must be an int >= 1, got {epochs!r}")
    if dtype not in (torch.float16, torch.bfloat16):  # else autocast is off
        raise ValueError(f"dtype must be float16 or bfloat16, got {dtype}")
    held = {id(p) for g in optimizer.param_groups for p in g["params"]}
    if any(id(p) not in held for p in model.parameters() if p.requires_grad):
        # One built over another model's parameters would train nothing.
        raise ValueError("optimizer must hold every trainable parameter")


# End of the recipe. The reference below is what the API reference shows; the page
# leaves it out so that the loop is the first thing its reader sees.

train_mixed_precision.__doc__ = """Train with autocast, a GradScaler and ``accum_steps`` micro-batches per optimizer step.

    Parameters
    ----------
    model : torch.nn.Module
        The model, FP32 parameters, on the device to train on.
    loader : torch.utils.data.DataLoader
        Each batch is one micro-batch ``(x, y)``.
    loss_fn : torch.nn.Module
        A mean loss, ``loss_fn(output, y)``.
    optimizer : torch.optim.Optimizer
        The model's optimizer; it must hold every trainable parameter of
        ``model`` (freeze one with ``requires_grad_(False)``, not by leaving
        it out).
    accum_steps : int, default 1
        Micro-batches per optimizer step; the step's gradient is that of
        their combined mean loss. It must divide ``len(loader)``.
    max_norm : float, optional
        Clip the gradient's 2-norm to it, after unscaling.
    dtype : torch.dtype, default torch.float16
        The autocast dtype, ``torch.float16`` or ``torch.bfloat16``.
    epochs : int, default 1
        Passes over ``loader``.

    Returns
    -------
    torch.amp.GradScaler
        The scaler; its ``get_scale()`` is the loss scale it ended with.

    Raises
    ------
    ValueError
        If ``accum_steps`` or ``epochs`` is out of range, ``dtype`` is not
        a half dtype (autocast would quietly switch itself off), or
        ``optimizer`` misses a trainable parameter of ``model`` (one built
        over another model's parameters would train nothing, without a word);
        see :func:`check_recipe_arguments`.
    """
check_recipe_arguments.__doc__ = """Refuse the arguments :func:`train_mixed_precision` would misuse without a word.

    Parameters
    ----------
    model : torch.nn.Module
        The model to train.
    loader : torch.utils.data.DataLoader
        The micro-batches; only ``len(loader)`` is read.
    optimizer : torch.optim.Optimizer
        The model's optimizer.
    accum_steps : int
        Micro-batches per optimizer step.
    dtype : torch.dtype
        The autocast dtype.
    epochs : int
        Passes over ``loader``.

    Raises
    ------
    ValueError
        If ``accum_steps`` is not an int >= 1 that divides ``len(loader)`` (a
        window would run across two epochs and mix their gradients),
        ``epochs`` is not an int >= 1, ``dtype`` is not ``torch.float16`` or
        ``torch.bfloat16``, or ``optimizer`` misses a trainable parameter of
        ``model``.

    Examples
    --------
    >>> import torch
    >>> model = torch.nn.Linear(2, 1)
    >>> loader = [None] * 4
    >>> optimizer = torch.optim.SGD(model.parameters())
    >>> check_recipe_arguments(model, loader, optimizer, 3, torch.float16, 1)
    Traceback (most recent call last):
    ...
    ValueError: accum_steps must be an int >= 1 dividing len(loader)=4, got 3
    """
