# One module: a watch on the reader's own training loop, reported by diagnose's rules.
"""Watch a training loop as it runs: the loss scale, skipped steps, where values go non-finite.

One batch at initialisation cannot show what happens later in training:
gradients shrink, an outlier batch overflows, the scale falls. :func:`watch`
is added around the reader's own loop (the recipe's included) and records,
step by step:

- the scale each step used and the steps the ``GradScaler`` skipped;
- the first module whose forward output, or whose output's gradient in
  backward, holds inf or NaN, and the first parameter whose gradient does
  (a sum over the batch can overflow where no sample's gradient does), with
  the step, the phase and the values' range;
- every ``every`` steps, what the half format lost of that step's gradient,
  measured as :func:`~amp_lesson.diagnose.diagnose` measures its batch: the
  step's first micro-batch is repeated through the same weights in FP32 and
  in float64, from the same inputs, random draws and gradient at the model's
  outputs, and a value the real step held as zero where FP32 holds it above
  float64's noise floor, below the format's smallest normal number, is lost
  (before the optimizer steps: the weights are the step's);

and reports it by the rules of :mod:`amp_lesson.diagnose.rules` that a
running loop can decide. Steps are counted where the loop calls
``GradScaler.update`` (enabled or not) or, without a scaler, where an
optimizer holding the model's parameters steps after a backward pass (two
optimizers stepping after one backward make one step). Forward passes
without gradients (an evaluation inside the loop) are not watched, and no
failure of the watch's own work stops the loop: it is recorded in
:attr:`Watch.errors`. While the watch is on, ``torch.amp.GradScaler``'s ``step``
and ``update`` are wrapped for every scaler (the watch reads the scale
before and after), and optimizer step hooks (before and after a step) for every
optimizer; leaving the block removes every hook and wrapper.

>>> from amp_lesson.recipe import train_mixed_precision
>>> from amp_lesson.models import seeded
>>> with seeded(0):
...     model = torch.nn.Sequential(
...         torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
...     x, y = torch.randn(64, 4), torch.randn(64, 1) / 100
>>> batches = [(x[i:i + 16], y[i:i + 16]) for i in range(0, 64, 16)]
>>> optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
>>> loss_fn = torch.nn.functional.mse_loss
>>> with watch(model, every=2) as w:
...     _ = train_mixed_precision(model, batches, loss_fn, optimizer)
>>> w.steps, w.skipped_steps, w.first_nonfinite(), len(w.samples)
(4, [], None, 2)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from types import TracebackType
from typing import Any, ClassVar, Self

import torch
from torch import nn
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)
from torch.utils.weak import WeakTensorKeyDictionary

from amp_lesson._checks import check_int
from amp_lesson.diagnose import rules as _rules
from amp_lesson.diagnose._inputs import floats
from amp_lesson.diagnose._sample import StepSample
from amp_lesson.diagnose.report import percent, power

__all__ = ["EVERY", "Watch", "watch"]

EVERY = 100
"""By default the watch measures the gradient's losses on every 100th step."""

_MAX_EVENTS = 1000


def _first_bad(tensors: list[torch.Tensor]) -> int | None:
    """The index of the first tensor holding inf or NaN (each a reduction: a minimum, a
    maximum, a largest ``|value|``), reading back one flag per device and dtype."""
    groups: dict[tuple[torch.device, torch.dtype], list[int]] = {}
    for i, t in enumerate(tensors):
        groups.setdefault((t.device, t.dtype), []).append(i)
    bad = []
    for rows in groups.values():
        flags = (~torch.isfinite(torch.stack([tensors[i] for i in rows]))).tolist()
        bad += [i for i, flag in zip(rows, flags, strict=True) if flag]
    return min(bad) if bad else None


def _raise(error: BaseException) -> None:
    raise error


class Watch:
    """A watch on a training loop; use it as a context manager (see :func:`watch`).

    Parameters
    ----------
    model : torch.nn.Module
        The model the loop trains.
    every : int or None
        Measure the gradient losses on every ``every``-th step (the first
        included); ``None``: never.
    scaler : torch.amp.GradScaler, optional
        Watch this scaler only (default: any the loop steps with).
    diagnosis : Diagnosis, optional
        A diagnosis of the model, whose settled scale the scale's path is
        compared with.

    Attributes
    ----------
    steps : int
        Steps completed.
    scales : list of float or None
        The loss scale each step used (``None`` without an enabled scaler).
    skipped_steps : list of int
        The steps (counted from 1) whose gradient held inf or NaN, so that
        the scaler skipped them.
    events : list of dict
        Per step and phase, the first module whose output (``"forward"``) or
        output's gradient (``"backward"``) held inf or NaN, or the first
        parameter whose gradient did (``"parameter"``): ``step``, ``phase``,
        ``module`` (the module's or the parameter's name), ``min``, ``max``.
    samples : list of dict
        The sampled steps: ``step``, ``scale``, ``skipped`` (its gradient held
        inf or NaN: the optimizer did not step, and the rules leave it out),
        ``measured`` (or ``error``: why not), ``noise_floor`` (whether the
        float64 repetition ran), ``format``, ``tensors`` (per gradient tensor,
        named as in a diagnosis: ``kind``, ``values``, ``signal``, ``lost``,
        ``share``), ``underflow`` (pooled) and ``worst``.
    format : str or None
        The autocast format the forward passes ran in: ``"fp16"``,
        ``"bf16"``, ``"fp32"`` (autocast off), or ``None`` before any.
        Forward passes without gradients (an evaluation) are not watched.
    nonfinite_steps : dict
        Per phase, how many steps held inf or NaN there (``events`` keeps the
        first 1,000 events).
    errors : list of str
        Failures of the watch's own work (a sample it could not repeat, say),
        recorded instead of stopping the loop.
    """

    _active: ClassVar[Watch | None] = None

    def __init__(
        self,
        model: nn.Module,
        *,
        every: int | None = EVERY,
        scaler: torch.amp.GradScaler | None = None,
        diagnosis: Any = None,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if every is not None:
            check_int("every", every, minimum=1)
        if scaler is not None and not isinstance(scaler, torch.amp.GradScaler):
            raise TypeError(
                f"scaler must be a torch.amp.GradScaler or None, got {type(scaler).__name__}"
            )
        if diagnosis is not None and not hasattr(diagnosis, "gradients"):
            raise TypeError(
                f"diagnosis must be a Diagnosis or None, got {type(diagnosis).__name__}"
            )
        self.model, self.every, self.scaler, self.diagnosis = model, every, scaler, diagnosis
        self.steps = 0
        self.scales: list[float | None] = []
        self.skipped_steps: list[int] = []
        self.events: list[dict[str, Any]] = []
        self.nonfinite_steps = {"forward": 0, "backward": 0, "parameter": 0}
        self.samples: list[dict[str, Any]] = []
        self.format: str | None = None
        self.errors: list[str] = []
        self._handles: list[Any] = []
        self._patched: dict[str, Callable] = {}
        self._forward: list[tuple[str, Any]] = []
        self._backward: list[tuple[str, Any]] = []
        self._parameters: dict[str, None] = {}  # names, in the order their gradients came
        self._seen = WeakTensorKeyDictionary()
        self._in_scaler_step = 0
        self._sample: StepSample | None = None
        self._repeating = False
        self._graded = False  # a gradient reached a parameter since the last step counted
        self._params = {id(p) for p in model.parameters()}
        self._named = dict(model.named_parameters())

    # ---------------------------------------------------------------- on and off

    def __enter__(self) -> Self:
        if Watch._active is not None:
            raise RuntimeError("another watch is on: leave its block before entering this one")
        Watch._active = self
        try:
            self._install()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _install(self) -> None:
        names = {m: n for n, m in self.model.named_modules()}
        for module, name in names.items():
            self._handles.append(module.register_forward_hook(partial(self._on_output, name)))
        # first among the model's pre-hooks: the inputs a sample keeps are the loop's own
        self._handles.append(
            self.model.register_forward_pre_hook(self._on_start, with_kwargs=True, prepend=True)
        )
        for name, p in self.model.named_parameters():
            if p.requires_grad:
                self._handles.append(p.register_hook(partial(self._on_parameter, name)))
        self._handles.append(register_optimizer_step_pre_hook(self._before_optimizer_step))
        self._handles.append(register_optimizer_step_post_hook(self._on_optimizer_step))
        scaler_class = torch.amp.GradScaler
        self._patched = {"step": scaler_class.step, "update": scaler_class.update}
        watch_ = self
        original_step, original_update = self._patched["step"], self._patched["update"]

        def step(scaler: torch.amp.GradScaler, *args: Any, **kwargs: Any) -> Any:
            watch_._in_scaler_step += 1
            try:
                return original_step(scaler, *args, **kwargs)
            finally:
                watch_._in_scaler_step -= 1

        def update(scaler: torch.amp.GradScaler, *args: Any, **kwargs: Any) -> Any:
            if watch_.scaler is not None and scaler is not watch_.scaler:
                return original_update(scaler, *args, **kwargs)
            enabled = scaler.is_enabled()
            before = float(scaler.get_scale()) if enabled else None
            result = original_update(scaler, *args, **kwargs)
            after = float(scaler.get_scale()) if enabled else None
            watch_._safely(watch_._end_step, before, enabled and after < before)
            return result

        scaler_class.step, scaler_class.update = step, update

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self._forward or self._backward or self._parameters:  # after the last step
                self._safely(self._check, self.steps + 1)
        finally:
            try:
                if self._sample is not None:
                    self.samples.append(self._sample.close())
            finally:
                self._sample = None
                for handle in self._handles:
                    handle.remove()
                self._handles = []
                for name, method in self._patched.items():
                    setattr(torch.amp.GradScaler, name, method)
                self._patched = {}
                Watch._active = None

    def _safely(self, work: Callable, *args: Any) -> Any:
        """Run the watch's own ``work`` so that no failure of it stops the training loop: it
        is recorded in :attr:`errors` instead."""
        try:
            return work(*args)
        except Exception as error:  # noqa: BLE001 (the reader's training goes on regardless)
            if len(self.errors) < 20:
                self.errors.append(f"{type(error).__name__}: {error}".splitlines()[0])
            return None

    # ---------------------------------------------------------------- hooks

    def _on_start(self, module: nn.Module, args: Any, kwargs: Any) -> None:
        """The model's forward begins: note the format; on a sampled step, start sampling."""
        if not self._repeating and torch.is_grad_enabled():  # an evaluation pass is not a step
            self._safely(self._start, module, args, kwargs)

    def _start(self, module: nn.Module, args: Any, kwargs: Any) -> None:
        device = next((p.device.type for p in module.parameters()), "cpu")
        fmt = "fp32"
        if torch.is_autocast_enabled(device):
            fmt = {torch.float16: "fp16", torch.bfloat16: "bf16"}.get(
                torch.get_autocast_dtype(device), "fp32"
            )
        self.format = fmt if self.format in (None, fmt) else "mixed"
        step = self.steps + 1
        sampled = self.every is not None and (step - 1) % self.every == 0
        if sampled and fmt in ("fp16", "bf16") and self._sample is None:
            self._sample = StepSample(self.model, step, fmt, args, kwargs)

    def _on_output(self, name: str, module: nn.Module, args: Any, out: Any) -> None:
        if not self._repeating and torch.is_grad_enabled():
            self._safely(self._output, name, out)

    def _output(self, name: str, out: Any) -> None:
        leaves = (out,) if isinstance(out, torch.Tensor) else floats(out)
        for t in leaves:
            if not t.is_floating_point() or not t.numel() or t in self._seen:
                continue
            self._seen[t] = True
            self._forward.append((name, torch.aminmax(t.detach())))
            if t.requires_grad:
                t.register_hook(partial(self._on_gradient, name))
        if self._sample is not None:
            self._sample.on_output(name, out)

    def _on_gradient(self, name: str, grad: torch.Tensor) -> None:
        if not self._repeating:
            try:
                self._backward.append((name, torch.aminmax(grad.detach())))
            except Exception as error:  # noqa: BLE001 (the loop goes on: see _safely)
                self._safely(_raise, error)

    def _on_parameter(self, name: str, grad: torch.Tensor) -> None:
        # only the order: the step's end reads every .grad at once (a fused reduction)
        if not self._repeating:
            self._graded = True
            self._parameters.setdefault(name, None)

    def _steps_the_model(self, optimizer: torch.optim.Optimizer) -> bool:
        return any(id(p) in self._params for g in optimizer.param_groups for p in g["params"])

    def _before_optimizer_step(
        self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any
    ) -> None:
        """The gradient is complete and the weights not yet changed: repeat the sample."""
        sample = self._sample
        if sample is not None and not sample.done and self._steps_the_model(optimizer):
            self._repeating = True
            try:
                self._safely(sample.measure)
            finally:
                self._repeating = False

    def _on_optimizer_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        # without a scaler, a step is an optimizer of the model's stepping after a backward
        # (two optimizers stepping after one backward make one step)
        if not self._in_scaler_step and self._graded and self._steps_the_model(optimizer):
            self._safely(self._end_step, None, False)

    # ---------------------------------------------------------------- steps

    def _end_step(self, scale: float | None, skipped: bool) -> None:
        self.steps += 1
        self._graded = False
        self.scales.append(scale)
        if skipped:
            self.skipped_steps.append(self.steps)
        try:
            self._check(self.steps)
        finally:
            if self._sample is not None:
                sample, self._sample = self._sample.close(), None
                sample["scale"], sample["skipped"] = scale, skipped
                self.samples.append(sample)

    def _check(self, step: int) -> None:
        """Record the first non-finite module or parameter of each phase of this step: one
        transfer of the step's ranges from each device the model is on."""
        grads = []
        for name in self._parameters:  # each gradient as the parameter holds it now
            grad = self._named[name].grad
            if grad is not None:
                values = grad.coalesce().values() if grad.is_sparse else grad
                if values.numel():
                    grads.append((name, values.detach()))
        phases = (("forward", self._forward), ("backward", self._backward))
        self._forward, self._backward, self._parameters = [], [], {}
        self._seen = WeakTensorKeyDictionary()
        for phase, entries in phases:
            if entries:
                mins = [mm.min for _, mm in entries]
                first = _first_bad(mins + [mm.max for _, mm in entries])
                if first is not None:
                    mm = entries[first % len(entries)][1]
                    self._event(step, phase, entries[first % len(entries)][0],
                                float(mm.min), float(mm.max))  # fmt: skip
        if grads:
            # one fused 2-norm per device and dtype: finite for a finite gradient unless its
            # squares overflow, so a non-finite norm is checked value by value
            norms: list[torch.Tensor] = [torch.empty(0)] * len(grads)
            by: dict[tuple[torch.device, torch.dtype], list[int]] = {}
            for i, (_, g) in enumerate(grads):
                by.setdefault((g.device, g.dtype), []).append(i)
            for rows in by.values():
                for i, norm in zip(rows, torch._foreach_norm([grads[i][1] for i in rows]),
                                   strict=True):  # fmt: skip
                    norms[i] = norm
            while (first := _first_bad(norms)) is not None:
                name, grad = grads[first]
                low, high = torch.aminmax(grad)
                if math.isfinite(low) and math.isfinite(high):
                    norms[first] = torch.zeros((), device=grad.device)  # only its squares
                    continue
                self._event(step, "parameter", name, float(low), float(high))
                break

    def _event(self, step: int, phase: str, name: str, low: float, high: float) -> None:
        self.nonfinite_steps[phase] += 1
        if len(self.events) < _MAX_EVENTS:
            self.events.append(
                {"step": step, "phase": phase, "module": name, "min": low, "max": high}
            )

    # ---------------------------------------------------------------- results

    def first_nonfinite(self, phase: str | None = None) -> dict[str, Any] | None:
        """The first event of inf or NaN, in either phase or in ``phase``.

        Parameters
        ----------
        phase : {"forward", "backward", "parameter"}, optional
            Only events of this phase.

        Returns
        -------
        dict or None
            ``step``, ``phase``, ``module``, ``min``, ``max``; ``None`` if no
            value went non-finite.

        Raises
        ------
        ValueError
            If ``phase`` is not one of the three.
        """
        if phase not in (None, "forward", "backward", "parameter"):
            raise ValueError(
                f"phase must be 'forward', 'backward', 'parameter' or None, got {phase!r}"
            )
        return next((e for e in self.events if phase in (None, e["phase"])), None)

    def rules(self) -> list[dict[str, Any]]:
        """Diagnose's rules that a running loop decides, on what this one did.

        Returns
        -------
        list of dict
            Per rule: ``key``, ``holds`` (``True``, ``False`` or ``None``: not
            measured here) and ``words``.
        """
        fmt = self.format
        out = []
        forward = self.first_nonfinite("forward")
        if fmt == "fp16":
            if not self.nonfinite_steps["forward"]:
                words = (f"In the forward pass every module's output stayed finite under FP16 "
                         f"autocast, in all {self.steps} steps.")  # fmt: skip
            else:
                where = (
                    ""
                    if forward is None
                    else (
                        f": first at step {forward['step']}, in {forward['module'] or 'the model'}"
                    )
                )
                words = (f"In the forward pass a module's output went inf or NaN under FP16 "
                         f"autocast in {self.nonfinite_steps['forward']} steps{where}.")  # fmt: skip
            out.append({"key": "forward_fits_fp16", "holds": not self.nonfinite_steps["forward"],
                        "words": words})  # fmt: skip
        key = {"fp16": "scaler_keeps_fp16_gradients", "bf16": "bf16_keeps_gradients"}.get(fmt)
        if key is not None:
            per = f"one in {1 / _rules.LOST_SHARE:,.0f} of each gradient tensor's non-zero values"
            applied = [s for s in self.samples if s["measured"] and not s["skipped"]]
            if not applied:
                holds = None
                words = ("No step that the optimizer applied was sampled, so no loss of gradient "
                         "was measured.")  # fmt: skip
            else:
                bad = next((s for s in applied if s["worst"]["share"] > _rules.LOST_SHARE), None)
                holds = bad is None
                if holds:
                    words = (f"At each of the {len(applied)} sampled steps the optimizer "
                             f"applied, the {fmt.upper()} backward pass lost at most {per}.")  # fmt: skip
                else:
                    worst = bad["worst"]
                    words = (
                        f"At sampled step {bad['step']} the {fmt.upper()} backward pass lost "
                        f"{percent(worst['share'])} of the non-zero values of the gradient "
                        f"of {worst['tensor']}, more than {per.replace('each', 'any')}."
                    )
            out.append({"key": key, "holds": holds, "words": words})
        for rule in _rules.RULES:
            if rule.key not in {r["key"] for r in out}:
                out.append({"key": rule.key, "holds": None,
                            "words": "Not measured by a watch."})  # fmt: skip
        return out

    def to_dict(self) -> dict[str, Any]:
        """What the watch recorded, as plain Python values.

        Returns
        -------
        dict
            ``model``, ``format``, ``steps``, ``scales``, ``skipped_steps``,
            ``events``, ``samples``, ``rules`` and ``settled_scale`` (the
            diagnosis's, if one was given).
        """
        return {
            "model": type(self.model).__name__,
            "format": self.format,
            "steps": self.steps,
            "scales": list(self.scales),
            "skipped_steps": list(self.skipped_steps),
            "events": [dict(e) for e in self.events],
            "samples": self.samples,
            "rules": self.rules(),
            "settled_scale": self._settled(),
        }

    def _settled(self) -> float | None:
        if self.diagnosis is None:
            return None
        return self.diagnosis.gradients.get("settled_scale")

    def __str__(self) -> str:
        fmt = {"fp16": "FP16 autocast", "bf16": "BF16 autocast", "fp32": "no autocast",
               None: "no forward pass seen", "mixed": "several formats"}[self.format]  # fmt: skip
        scales = [s for s in self.scales if s is not None]
        lines = [f"watch of {type(self.model).__name__}: {self.steps} steps, {fmt}"]
        lines.append("scale")
        if scales:
            lowest = min(scales)
            at = self.scales.index(lowest) + 1
            lines.append(
                f"  {power(scales[0])} at the first step, {power(scales[-1])} at the last; "
                f"lowest {power(lowest)} (step {at})"
            )
            skipped = ", ".join(str(s) for s in self.skipped_steps[:20])
            more = ", ..." if len(self.skipped_steps) > 20 else ""
            lines.append(
                f"  {len(self.skipped_steps)} of {self.steps} steps skipped"
                + (f": {skipped}{more}" if skipped else "")
            )
        else:
            lines.append("  no enabled GradScaler stepped")
        lines.append("non-finite values (the first module or parameter, per step and phase)")
        for phase in ("forward", "backward", "parameter"):
            event = self.first_nonfinite(phase)
            count = self.nonfinite_steps[phase]
            if event is None:
                lines.append(f"  {phase}: none")
                continue
            what = {"forward": "output", "backward": "output's gradient",
                    "parameter": "gradient"}[phase]  # fmt: skip
            lines.append(
                f"  {phase}: first at step {event['step']}, the {what} of "
                f"{event['module'] or 'the model'} (min {event['min']:.3g}, max "
                f"{event['max']:.3g}); {count} steps in all"
            )
        every = "never" if self.every is None else f"every {self.every} steps"
        lines.append(
            f"gradients (sampled {every}: {len(self.samples)} samples; values the step held as "
            "zero where the same micro-batch in FP32 held them above round-off)"
        )
        for s in self.samples[:10]:
            worst = s["worst"]
            which = "" if not worst["share"] else f" ({worst['tensor']})"
            skipped = ", skipped: not counted" if s["skipped"] else ""
            if not s["measured"] and not s["skipped"]:
                skipped = f", not measured: {s['error']}"
            lines.append(
                f"  step {s['step']} at scale {power(s['scale']) if s['scale'] else 1}: "
                f"{percent(s['underflow'])} of all, worst {percent(worst['share'])}{which}"
                f"{skipped}"
            )
        settled = self._settled()
        if settled is not None and scales:
            below = next((i + 1 for i, s in enumerate(self.scales) if s is not None
                          and s < settled), None)  # fmt: skip
            lines.append("against the diagnosis")
            lines.append(
                f"  the scale fell below the settled scale diagnose found ({power(settled)}) "
                f"at step {below}"
                if below
                else f"  the scale stayed at or above the settled scale diagnose found "
                f"({power(settled)})"
            )
        if self.errors:
            lines.append(f"the watch's own errors (the loop went on): {'; '.join(self.errors)}")
        lines.append("rules")
        for rule in self.rules():
            if rule["holds"] is not None:
                verdict = "holds" if rule["holds"] else "fails"
                lines.append(f"  {rule['key']}: {verdict}. {rule['words']}")
        unmeasured = [r["key"] for r in self.rules() if r["holds"] is None]
        lines.append(f"  not measured by a watch: {', '.join(unmeasured)}")
        return "\n".join(lines)


def watch(
    model: nn.Module,
    *,
    every: int | None = EVERY,
    scaler: torch.amp.GradScaler | None = None,
    diagnosis: Any = None,
) -> Watch:
    """Watch ``model``'s training loop; use the result in a ``with`` block around the loop.

    Parameters
    ----------
    model : torch.nn.Module
        The model the loop trains (any module: a Hugging Face model, a
        ``DistributedDataParallel`` wrapper's ``.module``).
    every : int or None, default 100
        Measure what the half format lost of the gradient on every
        ``every``-th step, starting with the first; ``None``: never. A
        sampled step repeats its first micro-batch's forward and backward
        passes in FP32 and in float64 (a float64 copy of the weights), and
        holds a mask of the zeros of every gradient meanwhile; the other steps
        cost a reduction per module output and per output gradient (the inf
        and NaN check). The model's forward hooks run in the repetitions too.
    scaler : torch.amp.GradScaler, optional
        Watch only this scaler's steps (default: any scaler the loop steps
        with; the recipe makes its own).
    diagnosis : Diagnosis, optional
        A :func:`~amp_lesson.diagnose.diagnose` of the model: the report
        says when the scale fell below its settled scale.

    Returns
    -------
    Watch
        Enter it with ``with``; after the block, ``print`` it for the report,
        or read its attributes.

    Raises
    ------
    TypeError
        If ``model`` is not a module, ``scaler`` not a ``GradScaler`` or
        ``diagnosis`` not a diagnosis.
    ValueError
        If ``every`` is not an int >= 1 or None.

    Examples
    --------
    A loss summed over a large batch instead of averaged: its gradient
    overflows FP16 at GradScaler's default scale, and the scaler backs off.

    >>> from amp_lesson.recipe import train_mixed_precision
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Linear(32, 1))
    >>> x, y = torch.randn(512, 8) * 20, torch.randn(512, 1)
    >>> def summed(out, y):
    ...     return torch.nn.functional.mse_loss(out, y, reduction="sum")
    >>> optimizer = torch.optim.SGD(model.parameters(), lr=1e-6)
    >>> with watch(model) as w:
    ...     scaler = train_mixed_precision(model, [(x, y)] * 6, summed, optimizer)
    >>> len(w.skipped_steps) > 0, w.first_nonfinite()["phase"]
    (True, 'backward')
    """
    return Watch(model, every=every, scaler=scaler, diagnosis=diagnosis)
