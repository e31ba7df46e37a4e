"""Where gradient accumulation and GradScaler stop doing what you meant.

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
- :func:`lr_trajectory` -- a scheduler stepped per micro-batch;

and for GradScaler:

- :func:`collapse_then_good_step` -- a persistent NaN drives the scale to 0,
  and the next good step writes NaN into the weights;
- :func:`clipping_rows` -- clipping before ``unscale_``;
- :func:`scaler_extra_calls` and :func:`scaler_on_bf16_params` -- a scaler
  with bf16;
- :func:`scheduler_after_skipped_step` -- the scheduler warning when
  GradScaler skips the first step, and the guard that avoids it.
"""

from __future__ import annotations

import copy
import math
import warnings
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from amp_lesson._checks import check_choice, check_int, check_positive
from amp_lesson.accumulation import (
    make_toy_model,
    make_toy_optimizer,
    make_toy_problem,
    train_amp,
    train_amp_mistake,
)
from amp_lesson.device import resolve_device

__all__ = [
    "IGNORE_INDEX",
    "NormSplit",
    "TokenBatch",
    "clipping_rows",
    "collapse_then_good_step",
    "compare_norm_split",
    "lr_trajectory",
    "make_norm_model",
    "make_token_batch",
    "make_token_model",
    "scaler_extra_calls",
    "scaler_on_bf16_params",
    "scheduler_after_skipped_step",
    "summation_order_rows",
    "token_loss_and_grad",
    "token_weight_rows",
    "ulp_distance",
    "window_rows",
]

IGNORE_INDEX = -100
"""The label of a padding position: ``cross_entropy`` skips it (its default ``ignore_index``)."""


@contextmanager
def _one_thread() -> Iterator[None]:
    """Run tiny tensors on one CPU thread: on a busy machine, waking a thread pool
    for a 128 x 2 matmul costs milliseconds, and a loop of hundreds of such steps
    would spend seconds waiting. The results do not depend on it."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _flat_grad(model: nn.Module) -> torch.Tensor:
    """All of ``model``'s gradients as one flat float32 vector (zeros where none)."""
    return torch.cat(
        [(torch.zeros_like(p) if p.grad is None else p.grad).flatten() for p in model.parameters()]
    )


# --------------------------------------------------------------------------- BatchNorm


def make_norm_model(norm: str = "batch", seed: int = 0) -> nn.Sequential:
    """``Linear(2, 8) -> norm -> ReLU -> Linear(8, 1)``, seeded; ``norm`` is ``"batch"`` or ``"layer"``.

    >>> make_norm_model("batch")[1]
    BatchNorm1d(8, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True)
    """
    check_choice("norm", norm, ("batch", "layer"))
    check_int("seed", seed, minimum=0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        layer = nn.BatchNorm1d(8) if norm == "batch" else nn.LayerNorm(8)
        return nn.Sequential(nn.Linear(2, 8), layer, nn.ReLU(), nn.Linear(8, 1))


@dataclass(frozen=True)
class NormSplit:
    """One batch of 128 seen whole and as ``n_accum`` micro-batches, by the same model.

    ``output_diff``: largest difference of the training-mode outputs;
    ``grad_diff``: of the accumulated gradient (each micro-batch loss divided
    by ``n_accum``) against the full batch's; ``running_mean_diff`` /
    ``running_var_diff``: of the BatchNorm running statistics (``nan`` for a
    layer without them); ``batches_tracked``: BatchNorm's
    ``num_batches_tracked`` after the full batch and after the micro-batches;
    ``eval_output_diff``: of the eval-mode outputs afterwards, which use the
    running statistics.
    """

    norm: str
    output_diff: float
    grad_diff: float
    running_mean_diff: float
    running_var_diff: float
    batches_tracked: tuple[int, int] | None
    eval_output_diff: float


def compare_norm_split(norm: str = "batch", n_accum: int = 4, seed: int = 0) -> NormSplit:
    """Run the toy problem's 128 samples through :func:`make_norm_model` whole and split.

    >>> bn = compare_norm_split("batch")
    >>> bn.batches_tracked, bn.output_diff > 0.1
    ((1, 4), True)
    >>> compare_norm_split("layer").output_diff < 1e-6
    True
    """
    check_int("n_accum", n_accum, minimum=1)
    X, y = make_toy_problem(device="cpu")
    full, split = make_norm_model(norm, seed), make_norm_model(norm, seed)
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
        grad_diff=float((_flat_grad(full) - _flat_grad(split)).abs().max()),
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
    """Padded token sequences: ``inputs`` and ``labels`` of shape ``(batch, max_len)``.

    Positions past a sequence's length hold label :data:`IGNORE_INDEX`.
    """

    inputs: torch.Tensor
    labels: torch.Tensor
    lengths: tuple[int, ...]

    @property
    def n_tokens(self) -> int:
        """The count of real (non-padding) tokens."""
        return int((self.labels != IGNORE_INDEX).sum())


def make_token_batch(
    lengths: Sequence[int] = (2, 3, 16, 14, 5, 4, 12, 9), vocab: int = 16, seed: int = 0
) -> TokenBatch:
    """Random token ids and next-token labels for sequences of the given lengths.

    >>> b = make_token_batch()
    >>> tuple(b.labels.shape), b.n_tokens
    ((8, 16), 65)
    """
    lengths = tuple(check_int("length", n, minimum=1) for n in lengths)
    if not lengths:
        raise ValueError("lengths must hold at least one sequence length")
    check_int("vocab", vocab, minimum=2)
    check_int("seed", seed, minimum=0)
    generator = torch.Generator().manual_seed(seed)
    shape = (len(lengths), max(lengths))
    inputs = torch.randint(0, vocab, shape, generator=generator)
    labels = torch.randint(0, vocab, shape, generator=generator)
    for row, length in enumerate(lengths):
        labels[row, length:] = IGNORE_INDEX
    return TokenBatch(inputs, labels, lengths)


def make_token_model(vocab: int = 16, dim: int = 8, seed: int = 0) -> nn.Sequential:
    """A one-layer "language model": ``Embedding(vocab, dim) -> Linear(dim, vocab)``.

    >>> make_token_model()(torch.zeros(2, 5, dtype=torch.long)).shape
    torch.Size([2, 5, 16])
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(check_int("seed", seed, minimum=0))
        return nn.Sequential(nn.Embedding(vocab, dim), nn.Linear(dim, vocab))


TOKEN_METHODS = ("full_batch", "mean_of_means", "global_count")


def token_loss_and_grad(
    model: nn.Module, batch: TokenBatch, n_accum: int, method: str
) -> tuple[float, torch.Tensor]:
    """The loss a run reports and the gradient it leaves, for one accumulation window.

    ``method``:

    - ``"full_batch"``: one pass, ``cross_entropy`` averaged over all real tokens;
    - ``"mean_of_means"``: each micro-batch's token mean divided by
      ``n_accum`` (what libraries did before October 2024);
    - ``"global_count"``: each micro-batch's token *sum* divided by the real
      tokens of the whole window, counted before the first micro-batch.

    Returns the summed (reported) loss and the flat gradient; ``.grad`` is
    cleared before and after.

    >>> model, batch = make_token_model(), make_token_batch()
    >>> full = token_loss_and_grad(model, batch, 4, "full_batch")
    >>> fixed = token_loss_and_grad(model, batch, 4, "global_count")
    >>> abs(full[0] - fixed[0]) < 1e-6, bool((full[1] - fixed[1]).abs().max() < 1e-6)
    (True, True)
    """
    check_choice("method", method, TOKEN_METHODS)
    check_int("n_accum", n_accum, minimum=1)
    if method == "full_batch":
        n_accum = 1
    model.zero_grad(set_to_none=True)
    total_tokens = (batch.labels != IGNORE_INDEX).sum()  # the whole window, before any backward
    reported = 0.0
    for xb, lb in zip(
        batch.inputs.tensor_split(n_accum), batch.labels.tensor_split(n_accum), strict=True
    ):
        logits = model(xb).flatten(0, 1)
        if method == "global_count":
            loss = F.cross_entropy(logits, lb.flatten(), reduction="sum") / total_tokens
        else:
            loss = F.cross_entropy(logits, lb.flatten()) / n_accum  # a mean over this micro-batch
        loss.backward()
        reported += float(loss.detach())
    grad = _flat_grad(model).clone()
    model.zero_grad(set_to_none=True)
    return reported, grad


def token_weight_rows(batch: TokenBatch, n_accum: int) -> list[dict[str, Any]]:
    """How much each token of each micro-batch counts in the loss, naive and true.

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
    """Per accumulation window: the accumulated gradient's length relative to the window's true mean gradient.

    ``n_micro`` micro-batches of ``micro_size`` samples of the toy problem
    (at the toy model's zero start), stepped every ``n_accum`` of them.
    ``"divide by n_accum"`` is the usual loop; ``"divide by window"`` divides
    by the number of micro-batches the window really holds. A ratio of 1
    means the window's gradient is that of its mean loss.

    >>> [(r["micro-batches"], r["divide by n_accum"], r["divide by window"]) for r in window_rows()]
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

    Both are float32. Adjacent floats are 1 apart; ``+0`` and ``-0`` are 0
    apart (the bit patterns are mapped to a monotone integer line).

    >>> one = torch.tensor([1.0])
    >>> ulp_distance(one, torch.nextafter(one, torch.tensor([2.0]))).tolist()
    [1]
    >>> ulp_distance(torch.tensor([-0.0]), torch.tensor([0.0])).tolist()
    [0]
    """
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.float32:
            raise TypeError(f"{name} must be a float32 tensor, got {getattr(t, 'dtype', type(t))}")

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
    reversed and shuffled order, and computed in one full-batch pass. Each row
    gives its largest distance (in float32 ulps) from the forward order, and
    its largest absolute error against the same gradient computed in float64.

    >>> rows = summation_order_rows()
    >>> [r["order"] for r in rows]
    ['forward', 'reversed', 'shuffled', 'full batch']
    >>> rows[0]["max ulps from forward"]
    0
    """
    for name, value in (("n_samples", n_samples), ("n_features", n_features)):
        check_int(name, value, minimum=1)
    check_int("n_accum", n_accum, minimum=1)
    generator = torch.Generator().manual_seed(check_int("seed", seed, minimum=0))
    X = torch.randn(n_samples, n_features, generator=generator)
    y = (torch.randn(n_samples, 1, generator=generator) > 0).float()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = nn.Linear(n_features, 1)
    loss_fn = nn.BCEWithLogitsLoss()

    def accumulate(m: nn.Module, Xd: torch.Tensor, yd: torch.Tensor, order: Sequence[int], n: int):
        m.zero_grad(set_to_none=True)
        xs, ys = Xd.tensor_split(n), yd.tensor_split(n)
        for i in order:
            (loss_fn(m(xs[i]), ys[i]) / n).backward()
        return _flat_grad(m).detach().clone()

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

    The loop runs ``n_steps`` optimizer steps of ``n_accum`` micro-batches
    each and calls ``scheduler.step()`` after every optimizer step, or, with
    ``per_micro_batch=True``, after every micro-batch. Returns the learning
    rates and the text of the warnings raised on the way.

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


# --------------------------------------------------------------------------- GradScaler


def collapse_then_good_step(
    n_bad: int = 170, n_good: int = 2, device: torch.device | str | None = None
) -> list[dict[str, Any]]:
    """A real GradScaler fed ``n_bad`` steps of NaN data, then ``n_good`` clean ones.

    The toy model and problem under fp16 autocast with
    ``GradScaler(device.type)`` (default settings); the first sample's
    feature is NaN during the bad steps. One row per step: the scale the loss
    was multiplied by, ``inv_scale`` as ``unscale_`` computes it
    (``float32(1 / float64(scale))``), whether GradScaler found inf/NaN,
    whether the weights changed, and whether they are still finite.

    >>> rows = collapse_then_good_step(n_bad=3, n_good=1, device="cpu")
    >>> [(r["data"], r["scale"], r["found inf/NaN"], r["weights finite"]) for r in rows]
    [('NaN', 65536.0, True, True), ('NaN', 32768.0, True, True), ('NaN', 16384.0, True, True), ('clean', 8192.0, False, True)]
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
    with _one_thread():
        for step in range(1, n_bad + n_good + 1):
            bad = step <= n_bad
            with torch.autocast(device.type, dtype=torch.float16):
                loss = loss_fn(model(X_bad if bad else X), y)
            scaler.scale(loss).backward()
            scale = scaler.get_scale()
            inv_scale = float(torch.tensor(scale, dtype=torch.float64).reciprocal().float())
            # GradScaler's own test: any inf/NaN in the *scaled* gradients.
            found = not all(bool(torch.isfinite(p.grad).all()) for p in model.parameters())
            before = model.weight.detach().clone()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
            after = model.weight.detach()
            same_bits = torch.equal(before.view(torch.int32), after.view(torch.int32))
            rows.append(
                {
                    "step": step,
                    "data": "NaN" if bad else "clean",
                    "scale": scale,
                    "inv_scale": inv_scale,
                    "found inf/NaN": found,
                    "weights changed": not same_bits,
                    "weights finite": bool(torch.isfinite(after).all()),
                    "weights": after.flatten().tolist(),
                }
            )
    return rows


def clipping_rows(
    clip_norm: float = 0.1,
    init_scales: Sequence[float] = (2.0**16, 2.0**-4),
    device: torch.device | str | None = None,
) -> list[dict[str, Any]]:
    """One fp16 AMP step on the toy problem with gradient clipping, right and wrong.

    For each initial scale, the correct loop (``unscale_`` then clip) and the
    mistake ``"clip_before_unscale"`` of
    :func:`~amp_lesson.accumulation.train_amp_mistake`. The model starts at
    zero and SGD has ``lr = 0.1``, so the gradient the step applied is
    ``|w| / lr``; after a correct clip it is ``min(true norm, clip_norm)``.

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

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        name = getattr(func, "__name__", str(func))
        if not name.startswith(self.IGNORED):
            self.calls[name] += 1
        return func(*args, **(kwargs or {}))


def scaler_extra_calls(
    dtype: torch.dtype = torch.bfloat16, device: torch.device | str | None = None
) -> tuple[dict[str, int], bool]:
    """The torch calls a GradScaler adds to one AMP step, and whether it changed the result.

    Runs two steps of the toy problem under ``autocast(dtype)`` with an
    enabled and a disabled ``GradScaler(device.type)``, counts the torch
    calls of the second step (the first creates the scaler's tensors) and
    returns the calls only the enabled scaler made, with whether the two
    runs' weights are bitwise equal.

    >>> extra, same = scaler_extra_calls(device="cpu")
    >>> same, "_amp_foreach_non_finite_check_and_unscale_" in extra, extra["item"]
    (True, True, 1)
    """
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
    """GradScaler on a model whose parameters (and so gradients) are bf16.

    Returns ``{"device", "ok", "error", "weights changed"}``: on the CPU the
    unscale kernel accepts bf16 gradients and the step runs; on CUDA
    ``scaler.step`` raises ``NotImplementedError`` (its kernel covers only
    float32, float64 and float16), whose message is returned in ``"error"``.

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
    """An AMP loop with ``ExponentialLR(gamma=0.5)`` whose first step GradScaler skips.

    ``init_scale=2**18`` makes the toy problem's scaled fp16 gradients overflow on
    step 1 (and only there), so GradScaler skips it and halves the scale. With
    ``guard=False`` the scheduler steps every iteration; with ``guard=True``
    only when the scale did not drop in ``update()`` (i.e. the optimizer
    really stepped), the test Accelerate uses. Returns one row per step
    (scale, skipped, learning rate the step used and the one after) and the
    warnings raised.

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
