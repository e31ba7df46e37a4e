# The book's instruments pointed at the reader's own model: before training, and inside the loop.
"""What FP16 and BF16 would do to *your* model: measured on one batch, then watched in training.

:func:`diagnose` runs the instruments of the book on a model and a batch the
caller gives, each on a copy of the model (the caller's model and optimizer
are never touched), and returns a :class:`~amp_lesson.diagnose.report.Diagnosis`
with a recommendation: BF16, FP16 with a ``GradScaler`` (its ``init_scale``,
and modules to keep in FP32, both tried), FP32, or not decided, by the rules
of :mod:`amp_lesson.diagnose.rules`. :func:`~amp_lesson.diagnose.watcher.watch`
then records what the real training loop does, step by step, and reports it
by the same rules. One module per concern:

- :mod:`amp_lesson.diagnose.rules` -- thresholds, rules and the choice;
- :mod:`amp_lesson.diagnose.report` -- the :class:`~amp_lesson.diagnose.report.Diagnosis`
  and its printed report;
- :mod:`amp_lesson.diagnose.advice` -- running modules in FP32, and how the
  list is tried;
- :mod:`amp_lesson.diagnose.watcher` -- the watch for a training loop.

>>> from amp_lesson.models import make_mlp
>>> model = make_mlp(8, 16, out_features=2, device="cpu")
>>> g = torch.Generator().manual_seed(0)
>>> x = torch.randn(32, 8, generator=g)
>>> y = torch.randint(0, 2, (32,), generator=g)
>>> d = diagnose(model, (x, y), torch.nn.functional.cross_entropy, steps=20)
>>> d.recommendation["choice"], d.training["fp16"]["skipped"]
('bf16', 0)

Two steps move the FP32 loss too little to compare the runs by, so the
recommendation is not decided, and says how many steps would decide it:

>>> short = diagnose(model, (x, y), torch.nn.functional.cross_entropy, steps=2)
>>> short.recommendation["choice"], short.recommendation["because"]
('undecided', ['bf16_tracks_fp32', 'fp16_tracks_fp32'])
>>> short.recommendation["decide_with_steps"] > 2
True
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from amp_lesson.diagnose import _inputs, _ops, _runs, _underflow
from amp_lesson.diagnose.advice import MAX_TRIES, Fp32Modules, find_keep_list, run_in_fp32
from amp_lesson.diagnose.report import Diagnosis
from amp_lesson.diagnose.rules import (
    DEFAULT_SCALE,
    FP16_MAX,
    FP16_OVERFLOW,
    FP16_SMALLEST_NORMAL,
    FP16_SMALLEST_SUBNORMAL,
    LOST_SHARE,
    MOVED_SHARE,
    NOISE_SHARE,
    RULES,
    TRACKING_SHARE,
    Rule,
    bf16_native,
    recommend,
)
from amp_lesson.diagnose.watcher import Watch, watch

__all__ = [
    "DEFAULT_SCALE",
    "FP16_MAX",
    "FP16_OVERFLOW",
    "FP16_SMALLEST_NORMAL",
    "FP16_SMALLEST_SUBNORMAL",
    "LOST_SHARE",
    "MAX_TRIES",
    "MOVED_SHARE",
    "NOISE_SHARE",
    "RULES",
    "TRACKING_SHARE",
    "Diagnosis",
    "Fp32Modules",
    "Rule",
    "Watch",
    "bf16_native",
    "diagnose",
    "recommend",
    "run_in_fp32",
    "watch",
]


def _train_each_format(
    model: nn.Module, optimizer: Any, batch: Any, loss_fn: Any, device: torch.device,
    steps: int, seed: int, gradients: dict[str, Any], keep: list[str],
    unavailable: dict[str, str],
) -> tuple[dict[str, Any], dict[str, dict[str, torch.Tensor]], int]:  # fmt: skip
    """The FP32, FP16 and BF16 runs as the recipe takes them (``None`` for a format that
    cannot run the model, its reason added to ``unavailable``), the weights each ended with,
    and the optimizer state's bytes (from the FP32 run)."""
    training: dict[str, Any] = {}
    weights: dict[str, dict[str, torch.Tensor]] = {}
    optimizer_bytes = 0
    runs = (("fp32", torch.float32), ("fp16", torch.float16), ("bf16", torch.bfloat16))
    for fmt, dtype in runs:
        if fmt in unavailable:
            training[fmt] = None
            continue
        init = gradients["init_scale"] or DEFAULT_SCALE
        try:
            run, weights[fmt], trained = _runs.train(
                model, optimizer, batch, loss_fn, device, dtype, steps, seed,
                init_scale=init, keep=keep,
            )  # fmt: skip
        except (RuntimeError, NotImplementedError) as error:
            if fmt == "fp32":
                raise
            unavailable[fmt] = _inputs.first_line(error)
            training[fmt] = None
            continue
        training[fmt] = run
        if fmt == "fp32" and trained.optimizer is not None:
            optimizer_bytes = _runs.state_bytes(trained.optimizer)
        del trained, run  # one copy of the model at a time: its weights stay, in `weights`
    return training, weights, optimizer_bytes


def diagnose(
    model: nn.Module,
    batch: tuple[Any, Any],
    loss_fn: Callable[[Any, Any], torch.Tensor],
    *,
    steps: int = 20,
    optimizer: torch.optim.Optimizer | None = None,
    seed: int = 0,
) -> Diagnosis:
    """Measure what FP16 and BF16 would do to ``model`` on ``batch``, and recommend one.

    Every measurement runs on a copy of ``model`` (and of ``optimizer``),
    made with :func:`copy.deepcopy`, one copy at a time, so neither is
    changed; each starts with the CPU's generator and the model's GPU's
    seeded with ``seed`` inside :func:`torch.random.fork_rng`, and the random
    draws of the first run (dropout's masks) are played back in the one-step
    runs, so the caller's random state is left as it was and the runs differ
    only by their arithmetic. BatchNorm's running statistics and other
    buffers change on the copies only. On a GPU, measuring the saved
    activations resets the device's peak-memory statistics
    (:func:`torch.cuda.reset_peak_memory_stats`). Before the first copy it
    checks that about eight times the model's size (parameters, buffers,
    optimizer state) is free on its device: at its peak it holds a training
    copy with its gradient and Adam's two moments beside the final weights of
    the runs before it, and a batch's activations.

    Ops are recorded as the model's code calls them: a call of a
    ``torch.nn.functional`` function, a tensor method or an operator. A
    function that is itself made of ops (``multi_head_attention_forward``)
    is one row, whatever its inner ops do; the dtypes it *computes* in are
    those of every arithmetic op it dispatched.

    Parameters
    ----------
    model : torch.nn.Module
        The model, FP32 parameters, on the device to diagnose on (CPU or
        CUDA). The gradient, activation and autocast sections use it in the
        mode it is in (``train()`` or ``eval()``); the training runs call
        ``train()``, as the recipe does.
    batch : (inputs, targets)
        One batch, every tensor of it on the model's device and every
        floating-point one finite. ``inputs`` is a tensor, a tuple or list
        (``model(*inputs)``) or a mapping (``model(**inputs)``, a tokenizer's
        output say).
    loss_fn : callable
        ``loss_fn(model(inputs), targets)``, the batch's mean loss: a
        floating-point tensor of one value. For a Hugging Face model that
        computes its own loss, pass the labels among the inputs, ``None`` as
        the targets and ``lambda out, _: out.loss``.
    steps : int, default 20
        Optimizer steps of each training run (on ``batch`` each time).
    optimizer : torch.optim.Optimizer, optional
        The model's optimizer, holding every trainable parameter; copied
        with its state. ``None``: :class:`torch.optim.Adam` with its defaults.
    seed : int, default 0
        The seed every run starts from.

    Returns
    -------
    Diagnosis
        The report (``print`` it) and its sections, as attributes and in
        :meth:`~amp_lesson.diagnose.report.Diagnosis.to_dict`:

        - ``autocast``: ``calls``, one row per recorded call (``op``,
          ``module``; for ``fp16`` and ``bf16``: ``inputs_<fmt>``, the dtypes
          of its floating-point inputs, ``<fmt>``, the dtype it returned under
          autocast here, ``computes_<fmt>``, the dtypes its arithmetic ran in,
          and ``cuda_<fmt>``, the dtype CUDA autocast returns for the inputs
          the call met here, or ``"not known here"``; ``nonfinite_*``,
          its inf and NaN values); ``ops``, the counts per op;
          ``stayed_fp32``, ops that computed in FP32 only under FP16 autocast
          here, and ``cuda_stayed_fp32``, those CUDA's returns in FP32;
          ``first_nonfinite_fp16``, the first call that gave more inf or NaN
          values under FP16 autocast than in FP32.
        - ``gradients``: ``tensors``, each gradient a half step holds, by
          name: every parameter's, and the gradient at every module's output
          (``name[i]`` for its i-th output tensor, ``(call n)`` for a module
          called again); for each, its ``values``, ``nonzero``, ``noise``
          (non-zero FP32 values within round-off of zero by a float64 step:
          ``noise_floor`` says how many in all, or why it was not measured),
          ``signal`` (the rest), ``lost`` and ``share`` (of ``signal``) for
          each measurement: ``fp16_unscaled`` (a real FP16 step at scale 1),
          ``fp16_default`` (at GradScaler's default ``2**16``, or the settled
          scale where that is lower), ``fp16_settled`` and ``bf16``; the same
          shares pooled over every tensor (``underflow``) and the ``worst``
          tensor per measurement (``fp16_init``: at ``init_scale``);
          ``random_not_played``, fused ops that draw random numbers inside
          (attention's dropout), which the runs cannot play back to each other;
          ``settled_scale`` (the largest power of two at which an FP16 step's
          gradient is finite, ``None`` where none is, ``settled_scale_capped``
          at ``2**40``), ``init_scale`` (the default where it keeps the
          gradient, else the settled scale) and ``growth_steps``, the clean
          steps GradScaler takes from one to the other. A value is lost
          where FP32 holds it above the noise floor and the half step holds
          zero, while the FP32 value, scaled, lies below the format's
          smallest normal number.
        - ``activations``: per module name (``""``: the model), ``max_abs`` of
          its tensor outputs (scalars, such as a loss inside a model's output,
          left out), ``max_abs_input`` and ``below_fp16_subnormal``;
          ``overflows_fp16``, the modules with an output of at least
          :data:`~amp_lesson.diagnose.rules.FP16_OVERFLOW`, which FP16 rounds
          to inf; ``overflow_starts``, those where it starts (inputs within
          range, and no submodule where it starts).
        - ``advice``: ``keep_fp32``, the modules an FP16 forward pass needs in
          FP32, found and tried one at a time (see
          :mod:`amp_lesson.diagnose.advice`), each try in ``tries``, and
          whether the pass was then finite (``forward_finite``) or the first
          op that still was not.
        - ``training``: ``"fp32"``, ``"fp16"`` and ``"bf16"``: ``losses``
          (each step's, before its update), ``final_loss`` (after the last),
          ``skipped``, ``scales`` (FP16: the scale each step used, from
          ``init_scale``), ``keep_fp32`` and ``gap`` (final loss minus
          FP32's); ``None`` for a format that could not run.
        - ``memory``: bytes per parameter (weights, gradients and the
          optimizer's state, measured, and autocast's weight copies), and
          ``saved_for_backward`` per dtype, the activations apart from those
          copies, measured.
        - ``recommendation``: see :func:`~amp_lesson.diagnose.rules.recommend`.

        ``unavailable`` names a half format that could not run the model here
        (an FP16 LSTM on some CPUs), with its error; the other sections say
        what the rest did.

    Raises
    ------
    TypeError
        If ``model`` is not a module (or cannot be copied), ``batch`` is not
        a pair whose inputs hold a tensor, ``loss_fn`` is not callable, or
        ``optimizer`` is not an optimizer.
    ValueError
        If ``model`` has no trainable parameter or parameters that are not
        FP32, on several devices or on the meta device; ``batch`` is on
        another device than the model or holds NaN or inf; ``loss_fn``
        returns anything but a floating-point tensor of one value, one that
        no trainable parameter gets a gradient from, or a non-finite one;
        ``steps`` is below 1; ``optimizer`` misses a trainable parameter; or
        ``seed`` is outside ``[0, 2**64 - 1]``.
    MemoryError
        If the copies would not fit in the memory free on the model's device
        (the message gives both), before any is made.

    Examples
    --------
    >>> model = torch.nn.Linear(4, 1)
    >>> batch = torch.ones(8, 4), torch.ones(8, 1)
    >>> diagnose(model, batch, torch.nn.functional.mse_loss, steps=0)
    Traceback (most recent call last):
    ...
    ValueError: steps must be an integer >= 1, got 0
    >>> diagnose(model, batch, torch.nn.MSELoss(reduction="none"))
    Traceback (most recent call last):
    ...
    ValueError: loss_fn must return the batch's mean loss, a floating-point tensor
    of one value; got a torch.float32 tensor of shape (8, 1); reduce it with .mean()
    >>> diagnose(model, (torch.full((8, 4), float("nan")), batch[1]),
    ...          torch.nn.functional.mse_loss)
    Traceback (most recent call last):
    ...
    ValueError: batch's inputs must be finite, got 32 NaN and 0 infinite values of
    32 in a tensor of shape (8, 4); diagnose measures a batch FP32 can train on:
    clean or drop those samples
    """
    started = time.perf_counter()
    if isinstance(batch, tuple | list) and len(batch) == 2 and isinstance(batch[0], Mapping):
        batch = (dict(batch[0]), batch[1])  # a tokenizer's BatchEncoding, say
    device, trainable = _inputs.check_arguments(model, batch, loss_fn, steps, optimizer, seed)
    _inputs.check_memory(model, optimizer, device)
    unavailable: dict[str, str] = {}
    ref = _underflow.reference(model, optimizer, batch, loss_fn, device, seed)
    activations = _underflow.activations(ref.ranges)
    autocast, fp32_calls = _ops.section(
        model, optimizer, batch, loss_fn, device, seed, ref.tape, unavailable
    )
    advice: dict[str, Any] = {"keep_fp32": [], "tries": [], "forward_finite": False,
                              "first_nonfinite": autocast["first_nonfinite_fp16"]}  # fmt: skip
    if "fp16" not in unavailable:
        advice = find_keep_list(model, None, batch, loss_fn, device, seed, ref.tape, fp32_calls,
                                autocast["first_nonfinite_fp16"])  # fmt: skip
    keep = advice["keep_fp32"]
    signal, noise = _underflow.noise_floor(model, optimizer, batch, loss_fn, device, seed, ref)
    gradients = _underflow.section(
        model, optimizer, batch, loss_fn, device, seed, ref, signal, noise, keep, unavailable
    )
    del signal
    gradient_bytes = ref.gradient_bytes
    del ref
    training, weights, optimizer_bytes = _train_each_format(
        model, optimizer, batch, loss_fn, device, steps, seed, gradients, keep, unavailable
    )
    for run in training.values():
        if run is not None:
            run["gap"] = run["final_loss"] - training["fp32"]["final_loss"]
    memory = _runs.memory(model, optimizer, batch, loss_fn, device, seed,
                          optimizer_bytes=optimizer_bytes, gradient_bytes=gradient_bytes,
                          unavailable=unavailable)  # fmt: skip
    recommendation = recommend(
        gradients, advice, training, bf16_supported=bf16_native(device), steps=steps,
        unavailable=unavailable,
    )  # fmt: skip
    recommendation["cuda_refuses"] = autocast["cuda_refuses"]
    return Diagnosis(
        model=type(model).__name__,
        device=str(device),
        parameters=sum(p.numel() for p in trainable),
        steps=steps,
        seconds=time.perf_counter() - started,
        autocast=autocast,
        gradients=gradients,
        activations=activations,
        advice=advice,
        training=training,
        memory=memory,
        recommendation=recommendation,
        unavailable=dict(unavailable),
        weights=weights,
    )
