# One module: one case per function, each measured against the same reference, the full batch.
"""Where gradient accumulation stops reproducing the full batch.

Accumulating ``N`` micro-batches reproduces the full batch only when the
loss is a mean over samples that every micro-batch weights alike, nothing in
the model looks at the batch as a whole, and everything that counts steps
counts optimizer steps. Each function here builds one case where that fails,
small enough to run in a second, and the fix beside it:

- :func:`compare_norm_split` -- BatchNorm sees 32 samples, not 128;
- :func:`token_loss_and_grad` and :func:`token_weight_rows` -- a per-token
  mean loss over sequences of different lengths;
- :func:`window_rows` -- an uneven last accumulation window;
- :func:`summation_order_rows` and :func:`ulp_distance` -- the same
  gradients added in another order;
- :func:`lr_trajectory` -- a scheduler stepped per micro-batch.

How GradScaler fails is the other page's subject (:mod:`amp_lesson.scaler_failures`).

Why this module is long: five pitfalls of one page, each a small experiment beside its
fix; more than half of its lines are docstrings with examples that run as tests.
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from amp_lesson._checks import check_choice, check_int, check_positive, check_seed, described
from amp_lesson.accumulation import make_toy_model, make_toy_problem
from amp_lesson.device import resolve_device
from amp_lesson.gradients import flat_grads
from amp_lesson.models import make_mlp

__all__ = [
    "IGNORE_INDEX",
    "TOKEN_METHODS",
    "NormSplit",
    "TokenBatch",
    "compare_norm_split",
    "lr_trajectory",
    "make_token_batch",
    "summation_order_rows",
    "token_loss_and_grad",
    "token_weight_rows",
    "ulp_distance",
    "window_rows",
]

IGNORE_INDEX = -100
"""The label of a padding position, which ``cross_entropy`` skips (its default ``ignore_index``)."""


# --------------------------------------------------------------------------- BatchNorm


@dataclass(frozen=True)
class NormSplit:
    """One batch of 128 seen whole and as micro-batches, by the same model.

    Parameters
    ----------
    norm : str
        ``"batch"`` or ``"layer"``: the normalisation layer of the model.
    output_diff : float
        Largest difference of the training-mode outputs.
    grad_diff : float
        Largest difference of the accumulated gradient (each micro-batch
        loss divided by ``n_accum``) from the full batch's.
    running_mean_diff, running_var_diff : float
        Largest difference of the BatchNorm running statistics (``nan`` for
        a layer without them).
    batches_tracked : tuple of int, or None
        BatchNorm's ``num_batches_tracked`` after the full batch and after
        the micro-batches (``None`` without BatchNorm).
    eval_output_diff : float
        Largest difference of the eval-mode outputs afterwards, which use
        the running statistics.
    """

    norm: str
    output_diff: float
    grad_diff: float
    running_mean_diff: float
    running_var_diff: float
    batches_tracked: tuple[int, int] | None
    eval_output_diff: float


def compare_norm_split(norm: str = "batch", n_accum: int = 4, seed: int = 0) -> NormSplit:
    """Run the toy problem's 128 samples through a normalised MLP, whole and split.

    The model is ``Linear(2, 8) -> norm -> ReLU -> Linear(8, 1)``
    (:func:`amp_lesson.models.make_mlp` with ``norm``). BatchNorm
    normalises by the statistics of the batch it sees, so 4 micro-batches
    of 32 see other statistics than one batch of 128: outputs, gradients
    and running statistics all differ. LayerNorm normalises each sample on
    its own and is unaffected.

    Parameters
    ----------
    norm : {"batch", "layer"}, default "batch"
        The normalisation layer.
    n_accum : int, default 4
        Micro-batches the batch is cut into.
    seed : int, default 0
        Seed of both copies of the model.

    Returns
    -------
    NormSplit
        The differences between the two runs.

    Raises
    ------
    ValueError
        If ``norm`` is unknown, ``n_accum`` is below 1 or ``seed`` outside ``[0, 2**64 - 1]``.

    Examples
    --------
    >>> bn = compare_norm_split("batch")
    >>> bn.batches_tracked, bn.output_diff > 0.1
    ((1, 4), True)
    >>> compare_norm_split("layer").output_diff < 1e-6
    True
    """
    check_choice("norm", norm, ("batch", "layer"))
    check_int("n_accum", n_accum, minimum=1)
    check_seed("seed", seed)
    X, y = make_toy_problem(device="cpu")
    full, split = (make_mlp(2, 8, 1, norm=norm, seed=seed, device="cpu") for _ in range(2))
    loss_fn = nn.BCEWithLogitsLoss()
    out_full = full(X)
    loss_fn(out_full, y).backward()
    outs = []
    for xb, yb in zip(X.tensor_split(n_accum), y.tensor_split(n_accum), strict=True):
        out = split(xb)
        (loss_fn(out, yb) / n_accum).backward()
        outs.append(out)
    out_split = torch.cat(outs)
    bn_full, bn_split = full[1], split[1]
    has_stats = isinstance(bn_full, nn.BatchNorm1d)
    full.eval()
    split.eval()
    with torch.no_grad():
        eval_diff = float((full(X) - split(X)).abs().max())

    def stat_diff(name: str) -> float:
        if not has_stats:
            return math.nan
        return float((getattr(bn_full, name) - getattr(bn_split, name)).abs().max())

    return NormSplit(
        norm=norm,
        output_diff=float((out_full - out_split).detach().abs().max()),
        grad_diff=float((flat_grads(full) - flat_grads(split)).abs().max()),
        running_mean_diff=stat_diff("running_mean"),
        running_var_diff=stat_diff("running_var"),
        batches_tracked=(
            (int(bn_full.num_batches_tracked), int(bn_split.num_batches_tracked))
            if has_stats
            else None
        ),
        eval_output_diff=eval_diff,
    )


# --------------------------------------------------------------------------- token losses


@dataclass(frozen=True)
class TokenBatch:
    """Padded token sequences for next-token prediction.

    Parameters
    ----------
    inputs : torch.Tensor
        Token ids, shape ``(batch, max_len)``.
    labels : torch.Tensor
        Next-token labels of the same shape; positions past a sequence's
        length hold :data:`IGNORE_INDEX`.
    lengths : tuple of int
        The real length of each sequence.
    """

    inputs: torch.Tensor
    labels: torch.Tensor
    lengths: tuple[int, ...]

    @property
    def n_tokens(self) -> int:
        """The count of real (non-padding) tokens."""
        return int((self.labels != IGNORE_INDEX).sum())


def make_token_batch(
    lengths: Sequence[int] = (2, 3, 16, 14, 5, 4, 12, 9),
    vocab: int = 16,
    seed: int = 0,
    device: torch.device | str | None = None,
) -> TokenBatch:
    """Random token ids and next-token labels for sequences of the given lengths.

    Parameters
    ----------
    lengths : sequence of int
        The length of each sequence (``>= 1``); the batch is padded to the longest.
    vocab : int, default 16
        Size of the vocabulary (``>= 2``).
    seed : int, default 0
        Seed of a private generator; the global RNG is left alone.
    device : torch.device or str, optional
        Where the batch lives (:func:`amp_lesson.device.resolve_device`), so it
        meets a model made with the same ``device``. The ids are drawn on the
        CPU first: every device gets the same batch.

    Returns
    -------
    TokenBatch
        The padded batch.

    Raises
    ------
    ValueError
        If ``lengths`` is empty or a number is out of range (``seed``: ``[0, 2**64 - 1]``).

    Examples
    --------
    >>> b = make_token_batch()
    >>> tuple(b.labels.shape), b.n_tokens
    ((8, 16), 65)
    """
    lengths = tuple(check_int("length", n, minimum=1) for n in lengths)
    if not lengths:
        raise ValueError("lengths must hold at least one sequence length")
    check_int("vocab", vocab, minimum=2)
    check_seed("seed", seed)
    generator = torch.Generator().manual_seed(seed)
    shape = (len(lengths), max(lengths))
    inputs = torch.randint(0, vocab, shape, generator=generator)
    labels = torch.randint(0, vocab, shape, generator=generator)
    for row, length in enumerate(lengths):
        labels[row, length:] = IGNORE_INDEX
    device = resolve_device(device)
    return TokenBatch(inputs.to(device), labels.to(device), lengths)


TOKEN_METHODS: tuple[str, ...] = ("full_batch", "mean_of_means", "global_count")
"""The ways :func:`token_loss_and_grad` can form the loss of an accumulation window."""


def token_loss_and_grad(
    model: nn.Module, batch: TokenBatch, n_accum: int, method: str
) -> tuple[float, torch.Tensor]:
    """The loss a run reports and the gradient it leaves, for one accumulation window.

    Parameters
    ----------
    model : torch.nn.Module
        Maps token ids ``(batch, len)`` to logits ``(batch, len, vocab)``,
        for example ``make_mlp(8, depth=0, out_features=16, vocab=16)``.
    batch : TokenBatch
        The window's sequences, moved to the device of ``model``'s parameters.
    n_accum : int
        Micro-batches the window is cut into (ignored by ``"full_batch"``).
    method : {"full_batch", "mean_of_means", "global_count"}
        ``"full_batch"``: one pass, ``cross_entropy`` averaged over all real
        tokens. ``"mean_of_means"``: each micro-batch's token mean divided
        by ``n_accum`` (what libraries did before October 2024).
        ``"global_count"``: each micro-batch's token *sum* divided by the
        real tokens of the whole window, counted before the first
        micro-batch -- the fix.

    Returns
    -------
    loss : float
        The summed loss the run reports.
    grad : torch.Tensor
        The flat gradient (:func:`amp_lesson.gradients.flat_grads`);
        ``.grad`` is cleared before and after.

    Raises
    ------
    ValueError
        If ``method`` is unknown or ``n_accum`` is below 1.

    Examples
    --------
    >>> model = make_mlp(8, depth=0, out_features=16, vocab=16)
    >>> batch = make_token_batch()
    >>> full = token_loss_and_grad(model, batch, 4, "full_batch")
    >>> fixed = token_loss_and_grad(model, batch, 4, "global_count")
    >>> same_loss = abs(full[0] - fixed[0]) < 1e-6
    >>> same_grad = bool((full[1] - fixed[1]).abs().max() < 1e-6)
    >>> same_loss, same_grad
    (True, True)
    """
    check_choice("method", method, TOKEN_METHODS)
    check_int("n_accum", n_accum, minimum=1)
    if method == "full_batch":
        n_accum = 1
    model.zero_grad(set_to_none=True)
    device = next(model.parameters()).device
    inputs, labels = batch.inputs.to(device), batch.labels.to(device)
    total_tokens = (labels != IGNORE_INDEX).sum()  # the whole window, before any backward
    reported = 0.0
    for xb, lb in zip(inputs.tensor_split(n_accum), labels.tensor_split(n_accum), strict=True):
        logits = model(xb).flatten(0, 1)
        if method == "global_count":
            loss = F.cross_entropy(logits, lb.flatten(), reduction="sum") / total_tokens
        else:
            loss = F.cross_entropy(logits, lb.flatten()) / n_accum  # a mean over this micro-batch
        loss.backward()
        reported += float(loss.detach())
    grad = flat_grads(model)
    model.zero_grad(set_to_none=True)
    return reported, grad


def token_weight_rows(batch: TokenBatch, n_accum: int) -> list[dict[str, Any]]:
    """How much each token of each micro-batch counts in the loss, naive and true.

    Parameters
    ----------
    batch : TokenBatch
        The window's sequences.
    n_accum : int
        Micro-batches the window is cut into.

    Returns
    -------
    list of dict
        One row per micro-batch: ``"micro-batch"`` (from 1), ``"tokens"``
        (its real tokens), ``"weight per token, mean of means"``
        (``1 / (n_accum * tokens)``) and ``"weight per token, true mean"``
        (``1 / all tokens``).

    Raises
    ------
    ValueError
        If ``n_accum`` is below 1.

    Examples
    --------
    >>> rows = token_weight_rows(make_token_batch(), 4)
    >>> [r["tokens"] for r in rows]
    [5, 30, 9, 21]
    """
    check_int("n_accum", n_accum, minimum=1)
    total = batch.n_tokens
    rows = []
    for i, lb in enumerate(batch.labels.tensor_split(n_accum), start=1):
        tokens = int((lb != IGNORE_INDEX).sum())
        rows.append(
            {
                "micro-batch": i,
                "tokens": tokens,
                "weight per token, mean of means": 1 / (n_accum * tokens) if tokens else 0.0,
                "weight per token, true mean": 1 / total,
            }
        )
    return rows


# --------------------------------------------------------------------------- uneven last window


def _windows(n_micro: int, n_accum: int) -> list[range]:
    return [range(start, min(start + n_accum, n_micro)) for start in range(0, n_micro, n_accum)]


def window_rows(n_micro: int = 10, n_accum: int = 4, micro_size: int = 16) -> list[dict[str, Any]]:
    """Per accumulation window: the accumulated gradient's length relative to the true one.

    ``n_micro`` micro-batches of the toy problem (at the toy model's zero
    start) are stepped every ``n_accum`` of them, so the last window may be
    short. Dividing every micro-batch loss by ``n_accum`` (the usual loop)
    then gives the short window too small a gradient; dividing by the
    number of micro-batches the window really holds gives the gradient of
    its mean loss.

    Parameters
    ----------
    n_micro : int, default 10
        Micro-batches in the epoch.
    n_accum : int, default 4
        Micro-batches per optimizer step.
    micro_size : int, default 16
        Samples per micro-batch.

    Returns
    -------
    list of dict
        One row per window: ``"window"`` (from 1), ``"micro-batches"`` and
        the ratios ``"divide by n_accum"`` and ``"divide by window"`` of
        the accumulated gradient's norm to the norm of the window's mean-loss
        gradient (1 is right), rounded to 6 digits.

    Raises
    ------
    ValueError
        If a count is below 1.

    Examples
    --------
    >>> [(r["micro-batches"], r["divide by n_accum"], r["divide by window"])
    ...  for r in window_rows()]
    [(4, 1.0, 1.0), (4, 1.0, 1.0), (2, 0.5, 1.0)]
    """
    check_int("n_micro", n_micro, minimum=1)
    check_int("n_accum", n_accum, minimum=1)
    check_int("micro_size", micro_size, minimum=1)
    X, y = make_toy_problem(n_samples=n_micro * micro_size, device="cpu")
    xs, ys = X.split(micro_size), y.split(micro_size)
    model, loss_fn = make_toy_model(device="cpu"), nn.BCEWithLogitsLoss()

    def grad(indices: Sequence[int], divisor: int | None) -> torch.Tensor:
        model.zero_grad(set_to_none=True)
        if divisor is None:  # the window's true mean loss, in one pass
            idx = list(indices)
            loss_fn(
                model(torch.cat([xs[i] for i in idx])), torch.cat([ys[i] for i in idx])
            ).backward()
        else:
            for i in indices:
                (loss_fn(model(xs[i]), ys[i]) / divisor).backward()
        return model.weight.grad.detach().clone()

    rows = []
    for number, window in enumerate(_windows(n_micro, n_accum), start=1):
        true = grad(window, None)
        norm = float(true.norm())
        rows.append(
            {
                "window": number,
                "micro-batches": len(window),
                "divide by n_accum": round(float(grad(window, n_accum).norm()) / norm, 6),
                "divide by window": round(float(grad(window, len(window)).norm()) / norm, 6),
            }
        )
    return rows


# --------------------------------------------------------------------------- summation order


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """How many float32 values lie between ``a`` and ``b``, element by element.

    The bit patterns are mapped to a monotone integer line, so adjacent
    floats are 1 apart across zero too, and ``+0`` and ``-0`` are 0 apart.

    Parameters
    ----------
    a, b : torch.Tensor
        float32 tensors of one shape.

    Returns
    -------
    torch.Tensor
        int64 distances, of their shape.

    Raises
    ------
    TypeError
        If either is not a float32 tensor.

    Examples
    --------
    >>> one = torch.tensor([1.0])
    >>> ulp_distance(one, torch.nextafter(one, torch.tensor([2.0]))).tolist()
    [1]
    >>> ulp_distance(torch.tensor([-0.0]), torch.tensor([0.0])).tolist()
    [0]
    """
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.float32:
            raise TypeError(f"{name} must be a float32 tensor, got {described(t)}")

    def line(t: torch.Tensor) -> torch.Tensor:
        bits = t.contiguous().view(torch.int32).long()
        return torch.where(bits < 0, -(bits & 0x7FFFFFFF), bits)

    return (line(a) - line(b)).abs()


def summation_order_rows(
    n_samples: int = 512, n_features: int = 16, n_accum: int = 8, seed: int = 1
) -> list[dict[str, Any]]:
    """One gradient computed several ways, compared bit for bit.

    A ``Linear(n_features, 1)`` with BCE on random data; the gradient of the
    mean loss is accumulated over ``n_accum`` micro-batches in forward,
    reversed and shuffled order, and computed in one full-batch pass.
    Floating-point addition is not associative, so the orders may differ in
    the last bits while all are equally close to the exact gradient.

    Parameters
    ----------
    n_samples : int, default 512
        Samples of the random problem.
    n_features : int, default 16
        Features per sample.
    n_accum : int, default 8
        Micro-batches.
    seed : int, default 1
        Seed of the data, the model and the shuffle.

    Returns
    -------
    list of dict
        One row per order: ``"order"``, ``"bitwise equal to forward"``,
        ``"max ulps from forward"`` (:func:`ulp_distance`) and
        ``"max |error| vs float64"`` (against the same gradient in float64).

    Raises
    ------
    ValueError
        If a count is below 1 or ``seed`` is outside ``[0, 2**64 - 1]``.

    Examples
    --------
    >>> rows = summation_order_rows()
    >>> [r["order"] for r in rows]
    ['forward', 'reversed', 'shuffled', 'full batch']
    >>> rows[0]["max ulps from forward"]
    0
    """
    for name, value in (("n_samples", n_samples), ("n_features", n_features)):
        check_int(name, value, minimum=1)
    check_int("n_accum", n_accum, minimum=1)
    generator = torch.Generator().manual_seed(check_seed("seed", seed))
    X = torch.randn(n_samples, n_features, generator=generator)
    y = (torch.randn(n_samples, 1, generator=generator) > 0).float()
    model = make_mlp(n_features, depth=0, out_features=1, seed=seed, device="cpu")
    loss_fn = nn.BCEWithLogitsLoss()

    def accumulate(m: nn.Module, Xd: torch.Tensor, yd: torch.Tensor, order: Sequence[int], n: int):
        m.zero_grad(set_to_none=True)
        xs, ys = Xd.tensor_split(n), yd.tensor_split(n)
        for i in order:
            (loss_fn(m(xs[i]), ys[i]) / n).backward()
        return flat_grads(m)

    exact = accumulate(copy.deepcopy(model).double(), X.double(), y.double(), [0], 1)
    shuffled = torch.randperm(n_accum, generator=generator).tolist()
    runs = {
        "forward": accumulate(model, X, y, range(n_accum), n_accum),
        "reversed": accumulate(model, X, y, range(n_accum - 1, -1, -1), n_accum),
        "shuffled": accumulate(model, X, y, shuffled, n_accum),
        "full batch": accumulate(model, X, y, [0], 1),
    }
    forward = runs["forward"]
    return [
        {
            "order": name,
            "bitwise equal to forward": torch.equal(g, forward),
            "max ulps from forward": int(ulp_distance(g, forward).max()),
            "max |error| vs float64": float((g.double() - exact).abs().max()),
        }
        for name, g in runs.items()
    ]


# --------------------------------------------------------------------------- LR schedulers


def lr_trajectory(
    n_steps: int = 20, n_accum: int = 4, *, per_micro_batch: bool = False, lr: float = 0.1
) -> tuple[list[float], list[str]]:
    """The learning rate each optimizer step used under ``CosineAnnealingLR(T_max=n_steps)``.

    A schedule is written in optimizer steps. Stepping it after every
    micro-batch instead runs it ``n_accum`` times too fast, and a cosine
    schedule called past ``T_max`` climbs back up.

    Parameters
    ----------
    n_steps : int, default 20
        Optimizer steps, each of ``n_accum`` micro-batches.
    n_accum : int, default 4
        Micro-batches per optimizer step.
    per_micro_batch : bool, default False
        Call ``scheduler.step()`` after every micro-batch (the mistake)
        instead of after every optimizer step.
    lr : float, default 0.1
        The initial learning rate.

    Returns
    -------
    lrs : list of float
        The learning rate of each optimizer step.
    warnings : list of str
        The text of the warnings raised on the way.

    Raises
    ------
    TypeError
        If ``per_micro_batch`` is not a bool.
    ValueError
        If a count is below 1 or ``lr`` is not a positive number.

    Examples
    --------
    >>> good, _ = lr_trajectory(4, 2)
    >>> [round(v, 4) for v in good]
    [0.1, 0.0854, 0.05, 0.0146]
    >>> bad, warned = lr_trajectory(4, 2, per_micro_batch=True)
    >>> [round(v, 4) for v in bad], len(warned)
    ([0.05, 0.0, 0.05, 0.1], 1)
    """
    check_int("n_steps", n_steps, minimum=1)
    check_int("n_accum", n_accum, minimum=1)
    if not isinstance(per_micro_batch, bool):
        raise TypeError(f"per_micro_batch must be True or False, got {per_micro_batch!r}")
    w = nn.Parameter(torch.zeros(()))
    optimizer = torch.optim.SGD([w], lr=check_positive("lr", lr))
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=n_steps)
    used = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(n_steps):
            for _micro in range(n_accum):
                (w * 0.0).backward()  # stands in for loss / n_accum
                if per_micro_batch:
                    scheduler.step()  # WRONG: n_accum scheduler steps per optimizer step
            used.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            optimizer.zero_grad()
            if not per_micro_batch:
                scheduler.step()  # once per optimizer step
    return used, [str(w.message) for w in caught]
