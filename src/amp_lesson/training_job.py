# One module: each function is one part of a real job (checkpoints, two models, a penalty, a custom
# function, compilation) meeting the same loss scale.
"""AMP in a real training job: checkpoints, several losses, gradient penalties, custom functions.

The chapter's loop trains one model from start to end in one process. A real
job is interrupted and resumed, may train several models with several
losses, may differentiate its gradients (a gradient penalty), may define its
own autograd functions and may be compiled. Each of these meets the loss
scaler or autocast somewhere; this module holds the loops the book runs:

- :func:`make_job` and :func:`train_micro_batches` -- a float16 loop with
  gradient accumulation over a regression whose gradients overflow float16
  at GradScaler's first scale, so the scaler has a history worth saving;
- :func:`save_checkpoint` and :func:`load_checkpoint` -- everything a resumed
  run needs to continue where it stopped: weights, optimizer state, the scaler's
  state, and the position in the accumulation window with the gradients
  accumulated so far;
- :func:`train_two_models` -- two models, two losses, two optimizers and one
  scaler, as PyTorch's AMP examples prescribe;
- :func:`penalty_step` -- a gradient penalty under a scaler, with and
  without unscaling the gradients it is formed from;
- :func:`dtypes_in_custom_function` -- what a custom autograd function sees
  under autocast with and without ``torch.amp.custom_fwd`` / ``custom_bwd``.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from amp_lesson._checks import check_choice, check_dtype, check_int, check_seed
from amp_lesson.models import make_mlp
from amp_lesson.scaler import step_skipped

__all__ = [
    "CUSTOM_FUNCTION_VARIANTS",
    "PENALTY_VARIANTS",
    "CompileComparison",
    "Job",
    "compare_compiled",
    "dtypes_in_custom_function",
    "load_checkpoint",
    "make_job",
    "micro_batch",
    "penalty_step",
    "save_checkpoint",
    "train_micro_batches",
    "train_two_models",
]

N_SAMPLES = 256
FEATURES = 16
TARGET_SIZE = 20.0
"""The regression's targets are about this large, so its first gradients are too: times
GradScaler's first scale, 2**16, they exceed float16's largest value."""


def _regression(device: torch.device | str, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N_SAMPLES, FEATURES, generator=g)
    y = TARGET_SIZE * torch.tanh(X @ torch.randn(FEATURES, 1, generator=g) / 4)
    return X.to(device), y.to(device)


def micro_batch(
    i: int, size: int = 16, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return micro-batch number ``i`` of the regression: a fixed slice, the same in every run.

    Parameters
    ----------
    i : int
        The micro-batch's number, from 0; the data repeat after ``256 // size`` of them.
    size : int, default 16
        Samples per micro-batch.
    device : torch.device or str, default "cpu"
        Where the tensors go.

    Returns
    -------
    tuple of torch.Tensor
        Inputs (``size`` by 16) and targets (``size`` by 1).

    Examples
    --------
    >>> x, y = micro_batch(3)
    >>> tuple(x.shape), tuple(y.shape), torch.equal(micro_batch(3)[0], x)
    ((16, 16), (16, 1), True)
    """
    i = check_int("i", i, minimum=0)
    size = check_int("size", size, minimum=1)
    X, y = _regression(device)
    per_epoch = max(N_SAMPLES // size, 1)
    start = (i % per_epoch) * size
    return X[start : start + size], y[start : start + size]


@dataclass
class Job:
    """A model, its optimizer and its GradScaler: what :func:`make_job` builds.

    Parameters
    ----------
    model : torch.nn.Module
        ``Linear(16, 32) -> ReLU -> Linear(32, 1)``.
    optimizer : torch.optim.Adam
        Adam, learning rate 1e-2.
    scaler : torch.amp.GradScaler
        For the model's device type, with its defaults.
    device : torch.device
        Where the model is.
    """

    model: nn.Module
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    device: torch.device


def make_job(seed: int = 0, device: torch.device | str = "cpu") -> Job:
    """Build a fresh model, Adam optimizer and GradScaler, the model seeded by ``seed``.

    Parameters
    ----------
    seed : int, default 0
        Seed of the model's weights.
    device : torch.device or str, default "cpu"
        Where the model goes.

    Returns
    -------
    Job
        The three, and the device.

    Examples
    --------
    >>> job = make_job()
    >>> job.scaler.get_scale(), type(job.optimizer).__name__
    (65536.0, 'Adam')
    """
    device = torch.device(device)
    model = make_mlp(
        FEATURES, 32, depth=1, out_features=1, seed=check_seed("seed", seed), device=device
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    return Job(model, optimizer, torch.amp.GradScaler(device.type), device)


def train_micro_batches(
    job: Job, start: int, stop: int, n_accum: int = 4, window_start: int = 0
) -> list[dict[str, Any]]:
    """Train on micro-batches ``start`` to ``stop - 1``: float16 autocast, one step per ``n_accum``.

    The optimizer steps after every micro-batch ``i`` with
    ``(i + 1 - window_start) % n_accum == 0``: ``window_start`` is where the
    loop believes the first accumulation window began (0 for a run that
    knows its position).

    Parameters
    ----------
    job : Job
        Model, optimizer and scaler.
    start, stop : int
        The micro-batches to train on.
    n_accum : int, default 4
        Micro-batches per optimizer step.
    window_start : int, default 0
        The micro-batch the windows are counted from.

    Returns
    -------
    list of dict
        One row per optimizer step: ``"micro-batch"`` (the last of its
        window), ``"scale"`` (the scale the step used), ``"skipped"`` (a step
        is skipped exactly when ``update()`` lowers the scale).

    Raises
    ------
    TypeError
        If ``start``, ``stop``, ``n_accum`` or ``window_start`` is not an integer.
    ValueError
        If one is out of range: ``0 <= start <= stop``, ``n_accum >= 1``,
        ``window_start >= 0``.

    Examples
    --------
    >>> job = make_job()
    >>> rows = train_micro_batches(job, 0, 8)
    >>> [r["skipped"] for r in rows], job.scaler.get_scale()
    ([True, True], 16384.0)
    """
    start = check_int("start", start, minimum=0)
    stop = check_int("stop", stop, minimum=start)
    n_accum = check_int("n_accum", n_accum, minimum=1)
    window_start = check_int("window_start", window_start, minimum=0)
    model, optimizer, scaler, device = job.model, job.optimizer, job.scaler, job.device
    loss_fn = nn.MSELoss()
    rows = []
    scale = scaler.get_scale()
    for i in range(start, stop):
        x, y = micro_batch(i, device=device)
        with torch.autocast(device.type, dtype=torch.float16):
            loss = loss_fn(model(x), y) / n_accum
        scaler.scale(loss).backward()
        if (i + 1 - window_start) % n_accum == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
            rows.append({"micro-batch": i, "scale": scale, "skipped": scaler.get_scale() < scale})
            scale = scaler.get_scale()
    return rows


def save_checkpoint(job: Job, micro_step: int, *, with_scaler: bool = True) -> bytes:
    """Save everything a resumed run needs, with ``torch.save``; return the bytes.

    The checkpoint holds the model's and the optimizer's ``state_dict``, the
    scaler's ``state_dict`` (its scale, growth tracker and settings), the number of the
    next micro-batch, and the gradients accumulated so far in the current
    window (still multiplied by the scale, which is why the scale must be
    saved with them).

    Parameters
    ----------
    job : Job
        What to save.
    micro_step : int
        The next micro-batch to train on.
    with_scaler : bool, default True
        Save the scaler's state; ``False`` is the mistake the book shows.

    Returns
    -------
    bytes
        The checkpoint, as ``torch.save`` wrote it.

    Examples
    --------
    >>> job = make_job()
    >>> _ = train_micro_batches(job, 0, 6)
    >>> checkpoint = torch.load(io.BytesIO(save_checkpoint(job, 6)))
    >>> sorted(checkpoint), checkpoint["scaler"]["scale"]
    (['grads', 'micro_step', 'model', 'optimizer', 'scaler'], 32768.0)
    """
    micro_step = check_int("micro_step", micro_step, minimum=0)
    model, optimizer, scaler = job.model, job.optimizer, job.scaler
    checkpoint = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scaler": scaler.state_dict() if with_scaler else None,
        "micro_step": micro_step,
        "grads": [p.grad for p in model.parameters()],
    }
    buffer = io.BytesIO()
    torch.save(checkpoint, buffer)
    return buffer.getvalue()


def load_checkpoint(
    data: bytes, seed: int = 1, device: torch.device | str = "cpu"
) -> tuple[Job, int]:
    """Build a fresh job (weights seeded differently, to prove they are replaced) and load ``data``.

    Parameters
    ----------
    data : bytes
        A checkpoint from :func:`save_checkpoint`.
    seed : int, default 1
        Seed of the fresh model before loading.
    device : torch.device or str, default "cpu"
        Where the job goes.

    Returns
    -------
    tuple of (Job, int)
        The restored job and the micro-batch to continue from.

    Examples
    --------
    >>> job = make_job()
    >>> _ = train_micro_batches(job, 0, 6)
    >>> resumed, micro_step = load_checkpoint(save_checkpoint(job, 6))
    >>> micro_step, resumed.scaler.get_scale()
    (6, 32768.0)
    """
    job = make_job(seed, device)
    model, optimizer, scaler = job.model, job.optimizer, job.scaler
    # Loaded onto the CPU: load_state_dict copies each tensor to its parameter's device, and
    # Adam's step counts stay on the CPU, as a fresh Adam keeps them.
    checkpoint = torch.load(io.BytesIO(data), map_location="cpu")
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    if checkpoint["scaler"] is not None:  # saved without it: the scaler starts afresh
        scaler.load_state_dict(checkpoint["scaler"])
    for p, g in zip(model.parameters(), checkpoint["grads"], strict=True):
        p.grad = None if g is None else g.to(p.device)
    return job, checkpoint["micro_step"]


def train_two_models(
    steps: int = 6, device: torch.device | str = "cpu", seed: int = 0
) -> list[dict[str, Any]]:
    """Two models, two losses, two optimizers, one GradScaler, as PyTorch's AMP examples do it.

    Each step: one ``scaler.scale(loss).backward()`` per loss, one
    ``scaler.step`` per optimizer, one ``scaler.update()``. Model 0 fits
    targets of size 1 and model 1 targets of size 20 (gradients that overflow
    float16 at the first scales), so the scaler sees an overflow in one
    optimizer's gradients and not in the other's.

    Parameters
    ----------
    steps : int, default 6
        Iterations.
    device : torch.device or str, default "cpu"
        Where the models go.
    seed : int, default 0
        Seed of the models.

    Returns
    -------
    list of dict
        Per step: ``"step"``, ``"scale"`` used, ``"model 0 stepped"``,
        ``"model 1 stepped"``.

    Examples
    --------
    >>> rows = train_two_models(steps=3)
    >>> [(r["model 0 stepped"], r["model 1 stepped"]) for r in rows]
    [(True, False), (True, False), (True, False)]
    """
    steps = check_int("steps", steps, minimum=1)
    device = torch.device(device)
    models = [
        make_mlp(
            FEATURES, 32, depth=1, out_features=1, seed=check_seed("seed", seed) + k, device=device
        )
        for k in range(2)
    ]
    optimizers = [torch.optim.Adam(m.parameters(), lr=1e-2) for m in models]
    scaler = torch.amp.GradScaler(device.type)
    loss_fn = nn.MSELoss()
    rows = []
    for step in range(steps):
        x, y = micro_batch(step, size=32, device=device)
        y_small = y / TARGET_SIZE  # model 0's targets, of size 1
        scale, before = scaler.get_scale(), [next(m.parameters()).detach().clone() for m in models]
        with torch.autocast(device.type, dtype=torch.float16):
            loss0 = loss_fn(models[0](x), y_small)
            loss1 = loss_fn(models[1](x), y)
        scaler.scale(loss0).backward()
        scaler.scale(loss1).backward()
        scaler.step(optimizers[0])
        scaler.step(optimizers[1])
        scaler.update()
        for optimizer in optimizers:
            optimizer.zero_grad()
        stepped = [
            not torch.equal(b, next(m.parameters())) for b, m in zip(before, models, strict=True)
        ]
        rows.append(
            {
                "step": step + 1,
                "scale": scale,
                "model 0 stepped": stepped[0],
                "model 1 stepped": stepped[1],
            }
        )
    return rows


PENALTY_VARIANTS: tuple[str, ...] = ("fp32", "unscaled", "scaled")
"""How :func:`penalty_step` forms the gradient penalty: in FP32 without a scaler
(the reference), from gradients unscaled by ``1 / scale`` (right), or from the
scaled gradients as they come (the mistake)."""


def penalty_step(
    variant: str, steps: int = 4, device: torch.device | str = "cpu", seed: int = 0
) -> dict[str, Any]:
    """Train with a gradient-norm penalty, ``loss + ‖∇loss‖``, for ``steps`` steps.

    Under a scaler the gradients of the penalty's norm come from
    ``torch.autograd.grad(scaler.scale(loss), params, create_graph=True)``:
    they are multiplied by the scale, and no optimizer owns them, so
    ``scaler.step`` will not unscale them. ``"unscaled"`` multiplies them by
    ``1 / scaler.get_scale()`` before forming the norm; ``"scaled"`` does not.

    Parameters
    ----------
    variant : {"fp32", "unscaled", "scaled"}
        See :data:`PENALTY_VARIANTS`.
    steps : int, default 4
        Optimizer steps.
    device : torch.device or str, default "cpu"
        Where the model goes.
    seed : int, default 0
        Seed of the model.

    Returns
    -------
    dict
        ``"first penalty"`` (the norm at the first step), ``"skipped"`` (steps
        the scaler skipped), ``"final loss"`` (FP32 loss on the first batch
        after training), ``"params"`` (final weights).

    Examples
    --------
    >>> ref, right = penalty_step("fp32"), penalty_step("unscaled")
    >>> abs(right["first penalty"] / ref["first penalty"] - 1) < 1e-2
    True
    """
    check_choice("variant", variant, PENALTY_VARIANTS)
    steps = check_int("steps", steps, minimum=1)
    device = torch.device(device)
    model = make_mlp(
        FEATURES, 32, depth=1, out_features=1, seed=check_seed("seed", seed), device=device
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler(device.type, enabled=variant != "fp32")
    params = list(model.parameters())
    loss_fn = nn.MSELoss()
    first, skipped = None, 0
    x, y = micro_batch(0, size=32, device=device)
    y = y / TARGET_SIZE
    amp = variant != "fp32"
    for _ in range(steps):
        with torch.autocast(device.type, dtype=torch.float16, enabled=amp):
            loss = loss_fn(model(x).float(), y)
        grads = torch.autograd.grad(scaler.scale(loss), params, create_graph=True)
        if variant == "unscaled":
            inv_scale = 1.0 / scaler.get_scale()
            grads = [g * inv_scale for g in grads]
        with torch.autocast(device.type, dtype=torch.float16, enabled=amp):
            penalty = torch.sqrt(sum(g.float().pow(2).sum() for g in grads))
            total = loss + penalty
        first = penalty.item() if first is None else first
        scaler.scale(total).backward()
        if amp:
            skipped += step_skipped(scaler, optimizer)
        else:
            optimizer.step()
        scaler.update()
        optimizer.zero_grad()
    with torch.no_grad():
        final = loss_fn(model(x), y).item()
    return {
        "first penalty": first,
        "skipped": skipped,
        "final loss": final,
        "params": {k: p.detach().float().cpu().clone() for k, p in model.named_parameters()},
    }


CUSTOM_FUNCTION_VARIANTS: tuple[str, ...] = (
    "plain",
    "custom_fwd",
    "custom_fwd(cast_inputs=float32)",
)
"""The decorations :func:`dtypes_in_custom_function` compares."""


def _square_matmul(decorate: Callable[[Any], Any], decorate_bwd: Callable[[Any], Any]) -> type:
    class SquareMatmul(torch.autograd.Function):
        """``(a @ b) ** 2`` with a hand-written backward, recording what it sees."""

        seen: ClassVar[dict[str, Any]] = {}

        @staticmethod
        @decorate
        def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            SquareMatmul.seen["forward inputs"] = f"{a.dtype}, {b.dtype}"
            SquareMatmul.seen["autocast in forward"] = torch.is_autocast_enabled(a.device.type)
            product = a @ b
            SquareMatmul.seen["a @ b in forward"] = str(product.dtype)
            ctx.save_for_backward(a, b, product)
            return product**2

        @staticmethod
        @decorate_bwd
        def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            a, b, product = ctx.saved_tensors
            SquareMatmul.seen["autocast in backward"] = torch.is_autocast_enabled(a.device.type)
            grad_product = 2 * product * grad_out
            grad_a = grad_product @ b.t()
            SquareMatmul.seen["grad of a in backward"] = str(grad_a.dtype)
            return grad_a, a.t() @ grad_product

    return SquareMatmul


def dtypes_in_custom_function(
    variant: str, device: torch.device | str = "cpu", dtype: torch.dtype = torch.bfloat16
) -> dict[str, Any]:
    """Run a custom autograd function under autocast and report the dtypes it sees.

    The function gets the output of an autocast ``nn.Linear`` (so a
    low-precision tensor) and an FP32 weight.

    Parameters
    ----------
    variant : {"plain", "custom_fwd", "custom_fwd(cast_inputs=float32)"}
        ``"plain"``: no decorator. ``"custom_fwd"``: ``forward`` decorated
        ``@torch.amp.custom_fwd(device_type=...)`` and ``backward``
        ``@torch.amp.custom_bwd(device_type=...)``: backward runs under the
        forward's autocast state. ``"custom_fwd(cast_inputs=float32)"``:
        ``forward`` decorated with ``cast_inputs=torch.float32``: inputs cast
        to FP32 and autocast off inside.
    device : torch.device or str, default "cpu"
        Where it runs.
    dtype : torch.dtype, default torch.bfloat16
        Autocast's dtype.

    Returns
    -------
    dict
        What the function saw: the inputs' dtypes, whether autocast was on in
        forward and backward, the dtype of ``a @ b`` in forward and of a
        gradient in backward, the output's dtype, and under ``"backward"``
        whether the backward pass ran or the error it raised.

    Raises
    ------
    ValueError
        If ``variant`` is unknown or ``dtype`` not ``torch.float16`` or
        ``torch.bfloat16``.
    TypeError
        If ``dtype`` is not a ``torch.dtype``.

    Examples
    --------
    >>> seen = dtypes_in_custom_function("custom_fwd(cast_inputs=float32)")
    >>> seen["forward inputs"], seen["autocast in forward"]
    ('torch.float32, torch.float32', False)
    """
    check_choice("variant", variant, CUSTOM_FUNCTION_VARIANTS)
    dtype = check_dtype("dtype", dtype, (torch.float16, torch.bfloat16))
    device = torch.device(device)
    same = lambda fn: fn  # no decoration
    if variant == "plain":
        fn = _square_matmul(same, same)
    elif variant == "custom_fwd":
        fn = _square_matmul(
            torch.amp.custom_fwd(device_type=device.type),
            torch.amp.custom_bwd(device_type=device.type),
        )
    else:
        fn = _square_matmul(
            torch.amp.custom_fwd(device_type=device.type, cast_inputs=torch.float32),
            torch.amp.custom_bwd(device_type=device.type),
        )
    g = torch.Generator().manual_seed(0)
    layer = nn.Linear(8, 8).to(device)
    x = torch.randn(4, 8, generator=g).to(device)
    b = torch.randn(8, 3, generator=g).to(device).requires_grad_()
    with torch.autocast(device.type, dtype=dtype):
        out = fn.apply(layer(x), b)
    try:
        out.float().sum().backward()
    except RuntimeError as error:  # the mixed dtypes of an undecorated backward
        return {**fn.seen, "output": str(out.dtype), "backward": f"RuntimeError: {error}"}
    return {**fn.seen, "output": str(out.dtype), "backward": f"ran; grad of b is {b.grad.dtype}"}


@dataclass
class CompileComparison:
    """What :func:`compare_compiled` measured.

    Parameters
    ----------
    dtypes : list of dict
        One row per tensor (output, loss, a weight's gradient): its dtype eager and compiled.
    max_abs_diff : dict of str to float
        The largest difference between eager and compiled, for the output and the gradients.
    tolerance : float
        The tolerance the differences are held to: ``8 * eps`` of the autocast dtype
        times the largest magnitude of the compared values.
    first_call_seconds : float
        The compiled model's first forward and backward (compiling included).
    later_call_seconds : float
        A later forward and backward of the compiled model (the median of five).
    eager_call_seconds : float
        The same in eager mode (the median of five).
    cache_hits : int
        Compiled graphs inductor found in its on-disk cache instead of compiling them.
    """

    dtypes: list[dict[str, str]]
    max_abs_diff: dict[str, float]
    tolerance: float
    first_call_seconds: float
    later_call_seconds: float
    eager_call_seconds: float
    cache_hits: int


def _timed(fn: Callable[[], Any]) -> float:
    import time

    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def compare_compiled(
    device: torch.device | str = "cpu", dtype: torch.dtype = torch.bfloat16, seed: int = 0
) -> CompileComparison:
    """Run one forward and backward under autocast, eager and through ``torch.compile``, and compare.

    The model is the job's MLP, compiled with ``torch.compile``'s defaults
    (the inductor backend). Both runs start from the same weights and see the
    same batch.

    Parameters
    ----------
    device : torch.device or str, default "cpu"
        Where it runs.
    dtype : torch.dtype, default torch.bfloat16
        Autocast's dtype.
    seed : int, default 0
        Seed of the model.

    Returns
    -------
    CompileComparison
        Dtypes, differences, the tolerance and timings.

    Raises
    ------
    ValueError
        If ``dtype`` is not float16 or bfloat16.
    """
    import statistics

    from torch._dynamo.utils import counters

    if dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"dtype must be torch.float16 or torch.bfloat16, got {dtype}")
    device = torch.device(device)
    eager = make_mlp(
        FEATURES, 32, depth=1, out_features=1, seed=check_seed("seed", seed), device=device
    )
    twin = make_mlp(FEATURES, 32, depth=1, out_features=1, seed=seed, device=device)
    compiled = torch.compile(twin)
    x, y = micro_batch(0, size=64, device=device)
    runs: dict[str, dict[str, Any]] = {}

    def step(model: nn.Module, name: str) -> None:
        model.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=dtype):
            out = model(x)
            loss = nn.functional.mse_loss(out, y)
        loss.backward()
        runs[name] = {"output": out, "loss": loss, "grads": [p.grad for p in model.parameters()]}

    hits_before = counters["inductor"]["fxgraph_cache_hit"]
    first = _timed(lambda: step(compiled, "compiled"))
    hits = counters["inductor"]["fxgraph_cache_hit"] - hits_before
    later = statistics.median(_timed(lambda: step(compiled, "compiled")) for _ in range(5))
    eager_s = statistics.median(_timed(lambda: step(eager, "eager")) for _ in range(5))
    e, c = runs["eager"], runs["compiled"]
    dtypes = [
        {"tensor": "output", "eager": str(e["output"].dtype), "compiled": str(c["output"].dtype)},
        {"tensor": "loss", "eager": str(e["loss"].dtype), "compiled": str(c["loss"].dtype)},
        {
            "tensor": "first weight's gradient",
            "eager": str(e["grads"][0].dtype),
            "compiled": str(c["grads"][0].dtype),
        },
    ]
    diff = {
        "output": float((e["output"].detach().float() - c["output"].detach().float()).abs().max()),
        "gradients": max(
            float((a - b).abs().max()) for a, b in zip(e["grads"], c["grads"], strict=True)
        ),
    }
    scale = max(
        float(e["output"].detach().abs().max()), max(float(g.abs().max()) for g in e["grads"])
    )
    return CompileComparison(
        dtypes=dtypes,
        max_abs_diff=diff,
        tolerance=8 * torch.finfo(dtype).eps * scale,
        first_call_seconds=first,
        later_call_seconds=later,
        eager_call_seconds=eager_s,
        cache_hits=int(hits),
    )
