"""The loop the book builds toward: mixed precision with gradient accumulation.

:func:`train_mixed_precision` is written to be read and copied. It needs nothing
but ``torch`` and the standard library, keeps no records, and the chapter shows it
exactly as it stands here, from ``import contextlib`` to the end of
:func:`check_recipe_arguments`: that part of the file is what the page's copy
button copies, and it runs alone. It takes any iterable of ``(x, y)``
micro-batches (a ``DataLoader`` with or without ``drop_last``, an
``IterableDataset``, a list, a generator), steps once per window of
``accum_steps`` of them or of what is left at the end of an epoch, and weights
each micro-batch by its share of the window's samples, so that every step
follows the gradient of the mean loss over the samples of its window. The
tables on the book's pages come from its instrumented twin,
:func:`amp_lesson.accumulation.train_amp_accumulated`, which logs every step;
the test suite compares the two bit for bit, weights and scales, and the loop
against a float64 reference on real loaders.

>>> import torch
>>> X = torch.randn(125, 2, generator=torch.Generator().manual_seed(0))
>>> y = (X.sum(dim=1, keepdim=True) > 0).float()
>>> dataset = torch.utils.data.TensorDataset(X, y)
>>> loader = torch.utils.data.DataLoader(dataset, batch_size=32)  # 32, 32, 32, 29
>>> model = torch.nn.Linear(2, 1)
>>> optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
>>> loss_fn = torch.nn.BCEWithLogitsLoss()
>>> scaler = train_mixed_precision(model, loader, loss_fn, optimizer,
...                                accum_steps=3, epochs=3)  # windows of 3 and 1
>>> scaler.get_scale()  # no overflow, and far fewer than growth_interval steps
65536.0
"""

from __future__ import annotations

__all__ = ["check_recipe_arguments", "train_mixed_precision"]

# The recipe, as the chapter shows it and its copy button copies it.
import contextlib
import itertools
from collections.abc import Callable, Iterable, Iterator

import torch


def train_mixed_precision(
    model: torch.nn.Module,
    loader: Iterable,
    loss_fn: Callable,
    optimizer: torch.optim.Optimizer,
    *,
    accum_steps: int = 1,
    max_norm: float | None = None,
    dtype: torch.dtype = torch.float16,
    epochs: int = 1,
    count: Callable = len,
) -> torch.amp.GradScaler:
    """Mixed-precision training, accum_steps micro-batches per step."""
    check_recipe_arguments(model, loader, optimizer, accum_steps, dtype, epochs)
    device = next(model.parameters()).device
    half = dtype != torch.float32  # float32: the FP32 loop, to compare with
    # FP16 needs loss scaling; BF16 has FP32's exponent range and needs none
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
    no_sync = getattr(model, "no_sync", contextlib.nullcontext)  # DDP's, if any
    model.train()
    optimizer.zero_grad()
    for epoch in range(1, epochs + 1):
        batches = iter(loader)
        window = list(itertools.islice(batches, accum_steps))
        if not window:  # an empty loader, or an iterator used up before
            raise ValueError(f"loader gave no batch in epoch {epoch}")
        while window:  # accum_steps micro-batches, or what is left of the epoch
            total = sum(count(y) for _, y in window)  # samples in the window
            if not total > 0:
                raise ValueError(f"count gave 0 for a window of epoch {epoch}")
            for i, (x, y) in enumerate(window):
                share = count(y) / total  # its share of the window
                x, y = x.to(device), y.to(device)
                # under DDP, all-reduce once per window: on its last micro-batch
                last = i == len(window) - 1
                with contextlib.nullcontext() if last else no_sync():
                    # autocast: the forward pass and the loss only
                    with torch.autocast(device.type, dtype=dtype, enabled=half):
                        loss = loss_fn(model(x), y) * share
                    scaler.scale(loss).backward()  # scaled gradients add up
            if max_norm is not None:
                # clip the true gradient, not the scaled one
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.step(optimizer)  # skipped if the gradient holds inf or NaN
            scaler.update()  # back off after an overflow, grow after a streak
            optimizer.zero_grad()
            window = list(itertools.islice(batches, accum_steps))
    return scaler


def check_recipe_arguments(
    model: torch.nn.Module,
    loader: Iterable,
    optimizer: torch.optim.Optimizer,
    accum_steps: int,
    dtype: torch.dtype,
    epochs: int,
) -> None:
    """Refuse the arguments the loop would misuse without a word."""
    for name, value in (("accum_steps", accum_steps), ("epochs", epochs)):
        if not (type(value) is int and value >= 1):
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    if epochs > 1 and isinstance(loader, Iterator):
        # A generator is used up after one pass: a second would find nothing.
        used_up = "loader is an iterator, used up after one epoch"
        raise ValueError(f"{used_up}: pass epochs=1")
    # float32 turns autocast off; with any other dtype CPU autocast would switch
    # itself off with only a warning, and CUDA's would not check it
    if dtype not in (torch.float16, torch.bfloat16, torch.float32):
        allowed = "torch.float16, torch.bfloat16 or torch.float32"
        raise ValueError(f"dtype must be {allowed}, got {dtype}")
    held = {id(p) for g in optimizer.param_groups for p in g["params"]}
    if any(id(p) not in held for p in model.parameters() if p.requires_grad):
        # One built over another model's parameters would train nothing.
        raise ValueError("optimizer must hold every trainable parameter")


# End of the recipe. The reference below is what the API reference shows; the page
# leaves it out so that the loop is the first thing its reader sees.

train_mixed_precision.__doc__ = """Train with autocast, a GradScaler and ``accum_steps`` micro-batches per optimizer step.

    An optimizer step covers a *window*: ``accum_steps`` consecutive
    micro-batches of ``loader``, or what is left at the end of an epoch, so
    the last, shorter window of an epoch steps too. Each micro-batch's mean
    loss is multiplied by ``count(y) / total``, its share of the window's
    samples (``total`` is counted over the whole window before its first
    backward), so the step's gradient is that of the mean loss over the
    samples of its window whatever the micro-batch sizes: a default
    ``DataLoader``'s short last batch weighs as many samples as it holds.
    For a per-token loss, ``count`` counts the tokens the loss averages over.
    Counting first means holding the window's micro-batches, as the loader
    yields them, until its step: ``accum_steps`` of them at once.

    Parameters
    ----------
    model : torch.nn.Module
        The model, FP32 parameters, on the device to train on. A model
        wrapped in ``DistributedDataParallel`` (anything with ``no_sync()``)
        all-reduces once per window, on its last micro-batch.
    loader : iterable of (x, y)
        The micro-batches: a ``DataLoader`` (with or without ``drop_last``),
        an ``IterableDataset``, a list, or, with ``epochs=1``, a generator.
        ``x`` and ``y`` are moved to the model's device.
    loss_fn : callable
        ``loss_fn(model(x), y)``, the mean loss over the ``count(y)`` samples
        (or tokens) of ``y``.
    optimizer : torch.optim.Optimizer
        The model's optimizer; it must hold every trainable parameter of
        ``model`` (freeze one with ``requires_grad_(False)``, not by leaving
        it out).
    accum_steps : int, default 1
        Micro-batches per optimizer step; any int >= 1.
    max_norm : float, optional
        Clip the gradient's 2-norm to it, after unscaling.
    dtype : torch.dtype, default torch.float16
        The autocast dtype: ``torch.float16`` (with loss scaling) or
        ``torch.bfloat16`` (no scaling: the scaler is disabled, as BF16 has
        FP32's exponent range). ``torch.float32`` turns autocast and the
        scaler off: the same loop in the model's own precision, to compare
        with.
    epochs : int, default 1
        Passes over ``loader``.
    count : callable, default len
        ``count(y)``, the number of samples the mean loss of a micro-batch
        averages over; ``len`` counts rows. For a token loss that ignores
        padding labels (``ignore_index=-100``), pass
        ``count=lambda y: int((y != -100).sum())``. It is called on ``y`` as
        the loader yields it, before the move to the device.

    Returns
    -------
    torch.amp.GradScaler
        The scaler; its ``get_scale()`` is the loss scale it ended with
        (``1.0`` when disabled, for BF16 and FP32).

    Raises
    ------
    ValueError
        If ``accum_steps`` or ``epochs`` is not an int >= 1, ``loader`` is an
        iterator and ``epochs`` > 1 (it would be used up after one epoch) or
        gives no batch in an epoch, ``count`` finds no sample in a whole
        window, ``dtype`` is not one of the three above (CPU autocast would
        switch itself off with only a warning, and CUDA's would not check
        it), or ``optimizer`` misses a trainable parameter of ``model`` (one
        built over another model's parameters would train nothing, without a
        word); see
        :func:`check_recipe_arguments`.

    Examples
    --------
    Sequences of different lengths, padded with the label ``-100``: each
    window's step averages over its real tokens.

    >>> import torch
    >>> g = torch.Generator().manual_seed(0)
    >>> model = torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.Linear(8, 16))
    >>> def sequences(n):
    ...     for length in torch.randint(2, 12, (n,), generator=g).tolist():
    ...         x = torch.randint(0, 16, (1, 12), generator=g)
    ...         y = torch.randint(0, 16, (1, 12), generator=g)
    ...         y[:, length:] = -100  # padding: no loss there
    ...         yield x, y
    >>> loss = torch.nn.CrossEntropyLoss()  # averages over the real tokens
    >>> def loss_fn(logits, y):
    ...     return loss(logits.flatten(0, 1), y.flatten())
    >>> scaler = train_mixed_precision(
    ...     model, sequences(10), loss_fn, torch.optim.AdamW(model.parameters()),
    ...     accum_steps=4, dtype=torch.bfloat16,
    ...     count=lambda y: int((y != -100).sum()))
    >>> scaler.is_enabled()  # BF16: no loss scaling
    False
    """
check_recipe_arguments.__doc__ = """Refuse the arguments :func:`train_mixed_precision` would misuse without a word.

    Parameters
    ----------
    model : torch.nn.Module
        The model to train.
    loader : iterable
        The micro-batches; it is not iterated here.
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
        If ``accum_steps`` or ``epochs`` is not an int >= 1, ``loader`` is an
        iterator (a generator, say) while ``epochs`` > 1, ``dtype`` is not
        ``torch.float16``, ``torch.bfloat16`` or ``torch.float32``, or
        ``optimizer`` misses a trainable parameter of ``model``.

    Examples
    --------
    >>> import torch
    >>> model = torch.nn.Linear(2, 1)
    >>> optimizer = torch.optim.SGD(model.parameters())
    >>> batches = ((torch.ones(4, 2), torch.ones(4, 1)) for _ in range(8))
    >>> check_recipe_arguments(model, batches, optimizer, 3, torch.float16, 2)
    Traceback (most recent call last):
    ...
    ValueError: loader is an iterator, used up after one epoch: pass epochs=1
    """
