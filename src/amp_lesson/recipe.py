"""The loop the book builds toward: mixed precision with gradient accumulation.

:func:`train_mixed_precision` is written to be read and copied. It needs nothing
but ``torch`` and the standard library, and the chapter shows it exactly as it
stands here, from ``import contextlib`` to the end of
:func:`check_recipe_arguments`: that part of the file is what the page's copy
button copies, and it runs alone. It takes any iterable of micro-batches (a
``DataLoader`` with or without ``drop_last``, an ``IterableDataset``, a list, a
generator) whose batches are ``(x, y)`` pairs, tuples, tensors or dicts (a
collator's, a tokenizer's ``BatchEncoding``), with a loss function or the loss
the model computes itself. It steps once per window of ``accum_steps``
micro-batches or of what is left at the end of an epoch, and weights each
micro-batch by its share of the window's samples (or tokens), so that every step
follows the gradient of the mean loss over its window. An optional scheduler
moves once per step taken, and an optional ``on_step`` receives a record of
each step. The tables on the book's pages come from its instrumented twin,
:func:`amp_lesson.accumulation.train_amp_accumulated`; the test suite compares
the two bit for bit, weights, scales and records, and the loop against a
float64 reference on real loaders and on a Hugging Face GPT-2.

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

__all__ = [
    "check_recipe_arguments",
    "count_samples",
    "own_loss",
    "split_batch",
    "to_device",
    "train_mixed_precision",
]

# The recipe, as the chapter shows it and its copy button copies it.
import contextlib
import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping

import torch
import torch.distributed as dist
from torch.nn.utils import clip_grad_norm_


def train_mixed_precision(
    model: torch.nn.Module,
    loader: Iterable,
    loss_fn: Callable | None,
    optimizer: torch.optim.Optimizer,
    *,
    accum_steps: int = 1,
    max_norm: float | None = None,
    dtype: torch.dtype = torch.float16,
    epochs: int = 1,
    count: Callable | None = None,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    on_step: Callable[[dict], object] | None = None,
    scaler: torch.amp.GradScaler | None = None,
) -> torch.amp.GradScaler:
    """Mixed-precision training, accum_steps micro-batches per step."""
    check_recipe_arguments(**locals())  # every argument above, by name
    device = next(p.device for p in model.parameters() if p.requires_grad)
    half = dtype != torch.float32  # float32: the FP32 loop, to compare with
    if scaler is None:  # FP16 needs loss scaling; BF16 has FP32's exponent range
        scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
    count = count_samples if count is None else count  # what a mean averages over
    loss_fn = own_loss if loss_fn is None else loss_fn  # None: the model's loss
    no_sync = getattr(model, "no_sync", contextlib.nullcontext)  # DDP's, if any
    ddp = (hasattr(model, "no_sync")  # DDP: weigh by the samples of all ranks
           and dist.is_available() and dist.is_initialized())
    model.train()
    optimizer.zero_grad()
    step = 0
    for epoch in range(1, epochs + 1):
        sampler = getattr(loader, "sampler", None)
        if epoch > 1 and hasattr(sampler, "set_epoch"):  # a DistributedSampler's
            sampler.set_epoch(getattr(sampler, "epoch", 0) + 1)  # next shuffle
        batches = iter(loader)
        window = list(itertools.islice(batches, accum_steps))
        if not window:  # an empty loader, or an iterator used up before
            raise ValueError(f"loader gave no batch in epoch {epoch}")
        while window:  # accum_steps micro-batches, or what is left of the epoch
            counts = [count(split_batch(batch)[2]) for batch in window]
            total = sum(counts)  # samples (or tokens) in the window
            if ddp:  # the mean of the ranks' counts
                summed = torch.tensor(total, dtype=torch.float64, device=device)
                dist.all_reduce(summed)
                total = summed.item() / dist.get_world_size()
            if not total > 0:
                raise ValueError(f"count gave 0 for a window of epoch {epoch}")
            window_loss = 0.0
            for i, batch in enumerate(window):
                share = counts[i] / total  # its share of the window
                args, kwargs, target = split_batch(to_device(batch, device))
                # under DDP, all-reduce once per window: on its last micro-batch
                last = i == len(window) - 1
                with contextlib.nullcontext() if last else no_sync():
                    # autocast: the forward pass and the loss only
                    with torch.autocast(device.type, dtype=dtype, enabled=half):
                        output = model(*args, **kwargs)
                        loss = loss_fn(output, target)
                        if not counts[i]:  # a mean over nothing, NaN, weighs 0
                            loss = torch.nan_to_num(loss)
                        loss = loss * share
                    scaler.scale(loss).backward()  # scaled gradients add up
                window_loss = window_loss + loss.detach().float()  # for the log
            grad_norm = None
            if max_norm is not None:
                # clip the true gradient, not the scaled one
                scaler.unscale_(optimizer)
                grad_norm = clip_grad_norm_(model.parameters(), max_norm)
            scale, lr = scaler.get_scale(), optimizer.param_groups[0]["lr"]
            scaler.step(optimizer)  # skipped if the gradient holds inf or NaN
            scaler.update()  # back off after an overflow, grow after a streak
            skipped = scaler.get_scale() < scale  # it backed off: no step taken
            if scheduler is not None and not skipped:
                scheduler.step()  # once per step taken
            optimizer.zero_grad()
            step += 1
            if on_step is not None:  # a log: one record per optimizer step
                norm = None if grad_norm is None else grad_norm.item()
                on_step({"step": step, "epoch": epoch, "loss": float(window_loss),
                         "count": total, "scale": scale, "skipped": skipped,
                         "grad_norm": norm, "lr": float(lr)})
            window = list(itertools.islice(batches, accum_steps))
    return scaler


def split_batch(batch: object) -> tuple[tuple, dict, object]:
    """(args, kwargs, target): the model's arguments and the loss's target."""
    if isinstance(batch, Mapping):  # a collator's dict, a BatchEncoding
        return (), dict(batch), batch  # model(**batch), loss_fn(output, batch)
    if isinstance(batch, (tuple, list)):
        if len(batch) > 1:  # (x, y), or (x1, ..., xk, y): the target last
            return tuple(batch[:-1]), {}, batch[-1]
        if not batch:
            raise ValueError("loader gave an empty batch")
        batch = batch[0]  # (x,), as TensorDataset(X) yields
    return (batch,), {}, batch  # model(x), loss_fn(output, x)


def to_device(batch: object, device: torch.device) -> object:
    """batch, every tensor in it moved to device, anything else as it is."""
    if isinstance(batch, (torch.Tensor, torch.nn.utils.rnn.PackedSequence)):
        return batch.to(device)
    if isinstance(batch, Mapping):
        return {key: to_device(value, device) for key, value in batch.items()}
    if isinstance(batch, (tuple, list)):
        moved = [to_device(value, device) for value in batch]
        if hasattr(batch, "_fields"):  # a named tuple
            return type(batch)(*moved)
        return type(batch)(moved)
    return batch


def count_samples(target: object) -> int:
    """The samples in a target: the length of its first tensor, depth first."""
    found = [target]
    while found:
        item = found.pop(0)
        if isinstance(item, torch.Tensor) and item.dim() > 0:
            return len(item)
        if isinstance(item, Mapping):
            item = list(item.values())
        if isinstance(item, (tuple, list)):
            found[:0] = item  # its items before the rest: depth first
    kind = type(target).__name__
    raise ValueError(f"count found no tensor to count samples in ({kind}): "
                     "pass count=")


def own_loss(output: object, target: object = None) -> torch.Tensor:
    """The loss a model computed: output.loss, output["loss"] or the output."""
    if isinstance(output, Mapping):  # a dict, a Hugging Face ModelOutput
        output = output.get("loss")
    if isinstance(output, torch.Tensor):  # the loss itself
        return output
    loss = getattr(output, "loss", None)
    if loss is None:
        found = "output.loss, output['loss'] or a 0-d tensor"
        raise ValueError(
            f"loss_fn is None but the model returned no loss ({found}): "
            "give the batch its labels, or pass a loss_fn that picks it")
    return loss


def check_recipe_arguments(
    model: torch.nn.Module,
    loader: Iterable,
    loss_fn: Callable | None,
    optimizer: torch.optim.Optimizer,
    accum_steps: int,
    max_norm: float | None,
    dtype: torch.dtype,
    epochs: int,
    count: Callable | None,
    scheduler: object,
    on_step: Callable | None,
    scaler: torch.amp.GradScaler | None,
) -> None:
    """Refuse the arguments the loop would misuse without a word."""
    for name, value in (("accum_steps", accum_steps), ("epochs", epochs)):
        if not (type(value) is int and value >= 1):
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    if epochs > 1 and isinstance(loader, Iterator):
        # A generator is used up after one pass: a second would find nothing.
        used_up = "loader is an iterator, used up after one epoch"
        raise ValueError(f"{used_up}: pass epochs=1")
    if max_norm is not None and not (
        isinstance(max_norm, (int, float)) and not isinstance(max_norm, bool)
        and math.isfinite(max_norm) and max_norm > 0
    ):  # -1 would train by gradient ascent, NaN give NaN weights, 0 not at all
        allowed = "a finite number > 0 or None"
        raise ValueError(f"max_norm must be {allowed}, got {max_norm!r}")
    # float32 turns autocast off; with any other dtype CPU autocast would switch
    # itself off with only a warning, and CUDA's would not check it
    if dtype not in (torch.float16, torch.bfloat16, torch.float32):
        allowed = "torch.float16, torch.bfloat16 or torch.float32"
        raise ValueError(f"dtype must be {allowed}, got {dtype}")
    callables = {"loss_fn": loss_fn, "count": count, "on_step": on_step}
    for name, value in callables.items():
        if value is not None and not callable(value):
            kind = type(value).__name__
            raise TypeError(f"{name} must be callable or None, got {kind}")
    if not any(p.requires_grad for p in model.parameters()):
        raise ValueError("model has no trainable parameter: nothing to train")
    held = {id(p) for g in optimizer.param_groups for p in g["params"]}
    if any(id(p) not in held for p in model.parameters() if p.requires_grad):
        # One built over another model's parameters would train nothing.
        raise ValueError("optimizer must hold every trainable parameter")
    if scheduler is not None and (
        getattr(scheduler, "optimizer", None) is not optimizer
        or isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
    ):  # ReduceLROnPlateau steps on a validation loss, which the loop has not
        raise ValueError("scheduler must be an LRScheduler built on optimizer "
                         "(step ReduceLROnPlateau yourself, after validating)")
    if scaler is not None and not isinstance(scaler, torch.amp.GradScaler):
        raise TypeError(f"scaler must be a torch.amp.GradScaler or None, "
                        f"got {type(scaler).__name__}")
    if scaler is not None and dtype == torch.float16 and not scaler.is_enabled():
        # FP16 unscaled loses small gradients, and steps on inf and NaN
        raise ValueError("scaler must be enabled for dtype=torch.float16")


# End of the recipe. The reference below is what the API reference shows; the page
# leaves it out so that the loop is the first thing its reader sees.

train_mixed_precision.__doc__ = """Train with autocast, a GradScaler and ``accum_steps`` micro-batches per optimizer step.

    An optimizer step covers a *window*: ``accum_steps`` consecutive
    micro-batches of ``loader``, or what is left at the end of an epoch, so
    the last, shorter window of an epoch steps too. Each micro-batch's mean
    loss is multiplied by ``count(target) / total``, its share of the
    window's samples (``total`` is counted over the whole window before its
    first backward), so the step's gradient is that of the mean loss over the
    samples of its window whatever the micro-batch sizes: a default
    ``DataLoader``'s short last batch weighs as many samples as it holds.
    For a per-token loss, ``count`` counts the tokens the loss averages over.
    Counting first means holding the window's micro-batches, as the loader
    yields them, until its step: ``accum_steps`` of them at once. A
    micro-batch whose count is 0 (all its labels padding) weighs nothing: its
    loss, a mean over nothing and so ``NaN``, is taken as 0.

    Under ``DistributedDataParallel`` (a model with ``no_sync()`` while
    ``torch.distributed`` is initialized), DDP averages the ranks' gradients
    alike, so ``total`` is the mean over the ranks of their windows' counts
    (one all-reduce of a number per window): each sample, or token, of every
    rank then weighs the same, even where the ranks' counts differ. For
    epochs after the first, a sampler with ``set_epoch`` (a
    ``DistributedSampler``) is moved to its next epoch, so that each epoch
    shuffles anew; set its first epoch yourself, as usual.

    How a batch is used (:func:`split_batch`):

    - a mapping (a dict from a collator, a tokenizer's ``BatchEncoding``):
      ``model(**batch)``, and the loss is ``loss_fn(output, batch)``;
    - a tuple or list ``(x, y)``, or ``(x1, ..., xk, y)``: ``model(x)`` (or
      ``model(x1, ..., xk)``), and ``loss_fn(output, y)``;
    - a tensor ``x``, or ``(x,)``: ``model(x)``, and ``loss_fn(output, x)``.

    Every tensor in the batch, nested in tuples, lists and mappings, is moved
    to the model's device first (:func:`to_device`; a mapping arrives as a
    ``dict``); anything else is passed as it is. With ``loss_fn=None`` the
    loss is the one the model computed itself, ``output.loss`` or
    ``output["loss"]`` (:func:`own_loss`), as a Hugging Face model returns it
    when the batch holds ``labels``, or the output itself where the model
    returns its loss as a 0-d tensor.

    Parameters
    ----------
    model : torch.nn.Module
        The model, FP32 parameters, on the device to train on. A model
        wrapped in ``DistributedDataParallel`` (anything with ``no_sync()``)
        all-reduces its gradient once per window, on its last micro-batch.
    loader : iterable
        The micro-batches: a ``DataLoader`` (with or without ``drop_last``),
        an ``IterableDataset``, a list, or, with ``epochs=1``, a generator.
    loss_fn : callable or None
        ``loss_fn(output, target)``, the mean loss over the ``count(target)``
        samples (or tokens) of the micro-batch; ``target`` is ``y``, or the
        whole batch for a mapping or a tensor. ``None``: the model's own loss.
    optimizer : torch.optim.Optimizer
        The model's optimizer; it must hold every trainable parameter of
        ``model`` (freeze one with ``requires_grad_(False)``, not by leaving
        it out).
    accum_steps : int, default 1
        Micro-batches per optimizer step; any int >= 1.
    max_norm : float, optional
        Clip the gradient's 2-norm to it, after unscaling; a finite number
        > 0.
    dtype : torch.dtype, default torch.float16
        The autocast dtype: ``torch.float16`` (with loss scaling) or
        ``torch.bfloat16`` (without ``scaler``, no scaling: the scaler made
        is disabled, as BF16 has FP32's exponent range). ``torch.float32``
        turns autocast off, and, without ``scaler``, loss scaling too: the same
        loop in the model's own precision, to compare with.
    epochs : int, default 1
        Passes over ``loader``.
    count : callable, optional
        ``count(target)``, the number of samples (or tokens) the mean loss
        of a micro-batch averages over, called on the target as the loader
        yields it, before the move to the device. The default,
        :func:`count_samples`, takes the length of the first tensor in the
        target (depth first: for a dict batch, its first tensor's batch
        dimension). For a token loss that ignores padding labels
        (``ignore_index=-100``), pass
        ``count=lambda y: int((y != -100).sum())``; for a causal language
        model's own loss, which predicts each token from those before it,
        ``count=lambda batch: int((batch["labels"][:, 1:] != -100).sum())``.
    scheduler : torch.optim.lr_scheduler.LRScheduler, optional
        Stepped once after each optimizer step that was taken: a step the
        scaler skipped (its gradient held inf or NaN) does not move it. It
        must be built on ``optimizer``. ``ReduceLROnPlateau``, which steps on
        a validation loss, is refused: step it after the call.
    on_step : callable, optional
        Called after every optimizer step, skipped ones included, with a dict:
        ``step`` (from 1, over all epochs), ``epoch`` (from 1), ``loss`` (the
        window's mean loss, as a float: the weighted micro-batch losses added
        in float32, before loss scaling), ``count`` (the window's ``total``),
        ``scale`` (the loss scale its backward passes used; 1.0 without
        scaling), ``skipped`` (the scaler skipped the step), ``grad_norm``
        (the unscaled gradient's norm that clipping measured, ``None``
        without ``max_norm``) and ``lr`` (the first parameter group's
        learning rate during the step). ``history.append`` keeps them all.
    scaler : torch.amp.GradScaler, optional
        The scaler to use, with its state: the one a previous call returned,
        or one loaded from a checkpoint, so that the scale is not learnt
        again from the start; enabled, for FP16. By default a new one,
        enabled for FP16 only.

    Returns
    -------
    torch.amp.GradScaler
        The scaler; its ``get_scale()`` is the loss scale it ended with
        (``1.0`` when disabled, for BF16 and FP32).

    Raises
    ------
    ValueError
        If ``accum_steps`` or ``epochs`` is not an int >= 1, ``max_norm`` is
        not a finite number > 0 (-1 would train by gradient ascent, NaN make
        the weights NaN, 0 train nothing), ``loader`` is an iterator and
        ``epochs`` > 1 (it would be used up after one epoch) or gives no
        batch in an epoch, ``count`` finds no sample in a whole window,
        ``dtype`` is not one of the three above (CPU autocast would switch
        itself off with only a warning, and CUDA's would not check it),
        ``model`` has no trainable parameter, ``optimizer`` misses a
        trainable parameter of ``model`` (one built over another model's
        parameters would train nothing, without a word), ``scheduler`` is not
        built on ``optimizer``, ``scaler`` is disabled while ``dtype`` is
        ``torch.float16``, the loader gives an empty batch, or ``loss_fn``
        is ``None`` and the model returned no loss; see
        :func:`check_recipe_arguments`.
    TypeError
        If ``loss_fn``, ``count`` or ``on_step`` is not callable, or
        ``scaler`` is not a ``GradScaler``.

    Examples
    --------
    A model that computes its own loss, on a collator's dict batches, with a
    warm-up schedule and a log:

    >>> import torch
    >>> class Regression(torch.nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.linear = torch.nn.Linear(4, 1)
    ...     def forward(self, features, labels=None):
    ...         prediction = self.linear(features)
    ...         loss = torch.nn.functional.mse_loss(prediction, labels)
    ...         return {"loss": loss, "prediction": prediction}
    >>> g = torch.Generator().manual_seed(0)
    >>> batches = [{"features": torch.randn(8, 4, generator=g),
    ...             "labels": torch.randn(8, 1, generator=g)} for _ in range(6)]
    >>> _ = torch.manual_seed(0)
    >>> model = Regression()
    >>> optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    >>> warmup = torch.optim.lr_scheduler.LinearLR(optimizer, 0.5, total_iters=2)
    >>> history = []
    >>> scaler = train_mixed_precision(model, batches, None, optimizer, accum_steps=2,
    ...                                scheduler=warmup, on_step=history.append)
    >>> for r in history:
    ...     print(r["step"], r["scale"], r["skipped"], r["lr"])
    1 65536.0 False 0.0005
    2 65536.0 True 0.00075
    3 32768.0 False 0.00075

    The second step's gradient overflowed FP16 at the scale of 2**16: the
    scaler skipped it and halved the scale, and the warm-up did not move.

    Sequences of different lengths, padded with the label ``-100``: each
    window's step averages over its real tokens.

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
split_batch.__doc__ = """Split a micro-batch into the model's arguments and the loss's target.

    Parameters
    ----------
    batch : object
        A mapping, a tuple or list, or a tensor, as the loader yields it.

    Returns
    -------
    args : tuple
        Positional arguments of ``model``.
    kwargs : dict
        Keyword arguments of ``model``: a mapping's items.
    target : object
        What ``loss_fn`` and ``count`` are given: a pair's ``y`` (a tuple's
        last item), a mapping itself, or a tensor itself.

    Raises
    ------
    ValueError
        If the batch is an empty tuple or list.

    Examples
    --------
    >>> import torch
    >>> x, y = torch.ones(2, 3), torch.zeros(2)
    >>> split_batch((x, y))[2] is y
    True
    >>> args, kwargs, target = split_batch({"input_ids": x, "labels": y})
    >>> args, list(kwargs), list(target)
    ((), ['input_ids', 'labels'], ['input_ids', 'labels'])
    """
to_device.__doc__ = """Move every tensor in a batch to a device; anything else is left as it is.

    Parameters
    ----------
    batch : object
        A tensor or a ``PackedSequence``, or tuples, lists (named tuples
        kept) and mappings holding them, nested to any depth. A mapping comes
        back as a ``dict``.
    device : torch.device
        Where the tensors go.

    Returns
    -------
    object
        The batch with its tensors on ``device``; the batch given is not
        changed.

    Examples
    --------
    >>> import torch
    >>> batch = {"ids": torch.ones(2), "lengths": [2, 1], "source": "train.txt"}
    >>> moved = to_device(batch, torch.device("meta"))
    >>> moved["ids"].device, moved["lengths"], moved["source"]
    (device(type='meta'), [2, 1], 'train.txt')
    """
count_samples.__doc__ = """Count the samples in a target: the length of the first tensor in it.

    The default ``count`` of :func:`train_mixed_precision`. The target is
    searched depth first, through mappings (their values in order), tuples
    and lists; a tensor with no dimension is passed over.

    Parameters
    ----------
    target : object
        A tensor, or a mapping, tuple or list holding one.

    Returns
    -------
    int
        The first dimension of the first tensor found.

    Raises
    ------
    ValueError
        If the target holds no tensor with a dimension (pass ``count=``).

    Examples
    --------
    >>> import torch
    >>> count_samples({"input_ids": torch.zeros(8, 128), "labels": torch.zeros(8, 128)})
    8
    >>> count_samples([torch.zeros(5), torch.zeros(3)])
    5
    """
own_loss.__doc__ = """The loss a model computed itself: ``output["loss"]``, ``output.loss`` or the output.

    The loss function of :func:`train_mixed_precision` when ``loss_fn`` is
    ``None``.

    Parameters
    ----------
    output : object
        The model's output: a mapping (a Hugging Face ``ModelOutput`` is
        one), an object with a ``loss`` attribute, or the loss itself, a 0-d
        tensor. A tuple is not read (its loss could be anywhere in it): pass
        a ``loss_fn`` that picks it.
    target : object, optional
        The batch's target, not read: the model had it.

    Returns
    -------
    torch.Tensor
        The loss.

    Raises
    ------
    ValueError
        If the output holds no loss tensor (a Hugging Face model returns
        none without ``labels``).

    Examples
    --------
    >>> import torch
    >>> float(own_loss({"loss": torch.tensor(0.5), "logits": torch.zeros(2)}))
    0.5
    """
check_recipe_arguments.__doc__ = """Refuse the arguments :func:`train_mixed_precision` would misuse without a word.

    Its parameters are :func:`train_mixed_precision`'s, in its order.

    Parameters
    ----------
    model : torch.nn.Module
        The model to train.
    loader : iterable
        The micro-batches; it is not iterated here.
    loss_fn : callable or None
        The loss function, or ``None`` for the model's own loss.
    optimizer : torch.optim.Optimizer
        The model's optimizer.
    accum_steps : int
        Micro-batches per optimizer step.
    max_norm : float or None
        The clipping threshold.
    dtype : torch.dtype
        The autocast dtype.
    epochs : int
        Passes over ``loader``.
    count : callable or None
        The count of a target's samples.
    scheduler : object
        The learning-rate scheduler, or ``None``.
    on_step : callable or None
        What receives each step's record.
    scaler : torch.amp.GradScaler or None
        The scaler to use.

    Raises
    ------
    ValueError
        If ``accum_steps`` or ``epochs`` is not an int >= 1, ``loader`` is an
        iterator (a generator, say) while ``epochs`` > 1, ``max_norm`` is not
        ``None`` or a finite number > 0, ``dtype`` is not ``torch.float16``,
        ``torch.bfloat16`` or ``torch.float32``, ``model`` has no trainable
        parameter, ``optimizer`` misses a trainable parameter of ``model``,
        ``scheduler`` is not an ``LRScheduler`` built on ``optimizer``, or
        ``scaler`` is disabled while ``dtype`` is ``torch.float16``.
    TypeError
        If ``loss_fn``, ``count`` or ``on_step`` is neither callable nor
        ``None``, or ``scaler`` is not a ``GradScaler``.

    Examples
    --------
    >>> import torch
    >>> model = torch.nn.Linear(2, 1)
    >>> optimizer = torch.optim.SGD(model.parameters())
    >>> batches = ((torch.ones(4, 2), torch.ones(4, 1)) for _ in range(8))
    >>> check_recipe_arguments(model, batches, None, optimizer, 3, -1.0,
    ...                        torch.float16, 1, None, None, None, None)
    Traceback (most recent call last):
    ...
    ValueError: max_norm must be a finite number > 0 or None, got -1.0
    """
