# What FP16 and BF16 lose of one backward pass, tensor by tensor, against FP32 and float64.
"""Gradient underflow, measured on the tensors a half-precision step holds.

Under autocast the backward pass holds, in FP16 or BF16, the gradient at
every module output autocast computed in that format (per sample: about
batch-size times smaller than the summed parameter gradient), and computes
each parameter's gradient from them. So the gradients are measured where
they are: at each module's output and at each parameter, in four runs of
one step on the same batch with the same random draws
(:class:`~amp_lesson.diagnose._inputs.RandomTape`):

- FP32, the reference;
- float64, the noise floor: a value whose FP32 result differs from the
  float64 one by at least :data:`~amp_lesson.diagnose.rules.NOISE_SHARE` of
  it is round-off, which FP32 cannot tell from zero (the gradient of an
  attention key's bias is exactly zero, and FP32 computes it as noise near
  ``1e-11``): it is neither kept nor lost;
- a real FP16 step (autocast, a ``GradScaler`` at the scale measured) and a
  real BF16 step.

A value is *lost* where FP32 holds it above the noise floor and the half
step holds zero, while the FP32 value, scaled, lies below the format's
smallest normal number: there zero is underflow, not a different rounding
elsewhere (a ReLU that cut off a value FP32 kept).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from functools import partial
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_map
from torch.utils.weak import WeakTensorKeyDictionary

from amp_lesson.diagnose import _inputs
from amp_lesson.diagnose.advice import run_in_fp32
from amp_lesson.diagnose.rules import (
    DEFAULT_SCALE,
    FP16_MAX,
    FP16_OVERFLOW,
    FP16_SMALLEST_SUBNORMAL,
    LOST_SHARE,
    NOISE_SHARE,
)
from amp_lesson.formats import dtype_name
from amp_lesson.gradients import log2_histogram

HIGHEST_EXPONENT = 40  # the search for the settled scale stops here
LOWEST_EXPONENT = -24
HIST_LOW, HIST_HIGH = -140, 20  # the histograms' log2 range: BF16's subnormals and up
MEASUREMENTS = ("fp16_unscaled", "fp16_default", "fp16_settled", "bf16")


def _deliver(
    on_grad: Callable[[tuple, torch.Tensor], None], key: tuple, grad: torch.Tensor
) -> None:
    on_grad(key, grad)


@contextmanager
def gradient_tap(
    model: nn.Module,
    on_grad: Callable[[tuple, torch.Tensor], None] | None,
    ranges: dict[str, dict[str, Any]] | None = None,
) -> Iterator[None]:
    """Hand the gradient at each module's floating-point outputs to ``on_grad`` as backward
    computes it, keyed ``("output", name, call, leaf)``; record output ranges into ``ranges``.

    A tensor that several modules return (a container's output is its last
    layer's) is keyed once, by the first module to return it: the innermost.
    Scalars (a loss inside a model's output) are not activations: left out.
    """
    seen = WeakTensorKeyDictionary()
    calls: dict[str, int] = {}
    handles = []
    for name, module in model.named_modules():

        def hook(m: nn.Module, args: Any, kwargs: Any, out: Any, name: str = name) -> None:
            call = calls[name] = calls.get(name, -1) + 1
            leaves = [t for t in _inputs.floats(out) if t.dim() > 0 and t.numel()]
            if ranges is not None and leaves:
                _record_range(ranges, name, type(m).__name__, (args, kwargs), leaves)
            if on_grad is None:
                return
            for i, t in enumerate(leaves):
                if t.requires_grad and t not in seen:
                    seen[t] = True
                    t.register_hook(partial(_deliver, on_grad, ("output", name, call, i)))

        handles.append(module.register_forward_hook(hook, with_kwargs=True))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _record_range(
    ranges: dict[str, dict[str, Any]], name: str, kind: str, inputs: Any,
    leaves: list[torch.Tensor],
) -> None:  # fmt: skip
    entry = ranges.setdefault(
        name, {"type": kind, "max_abs": 0.0, "max_in": 0.0, "nonzero": 0, "tiny": 0}
    )
    for t in _inputs.floats(inputs):
        if t.numel():
            entry["max_in"] = max(entry["max_in"], float(t.detach().abs().max()))
    for t in leaves:
        mag = t.detach().abs().float()
        nonzero = mag > 0
        entry["max_abs"] = max(entry["max_abs"], float(mag.max()))
        entry["nonzero"] += int(nonzero.sum())
        entry["tiny"] += int((nonzero & (mag < FP16_SMALLEST_SUBNORMAL)).sum())


def dense(grad: torch.Tensor) -> torch.Tensor:
    return grad.detach().to_dense() if grad.is_sparse else grad.detach()


def _param_grads(model: nn.Module, on_grad: Callable[[tuple, torch.Tensor], None]) -> None:
    for name, p in model.named_parameters():
        if p.grad is not None:
            on_grad(("param", name), dense(p.grad))


class Reference:
    """The FP32 step: every gradient by key, the loss, the output ranges, the random draws."""

    def __init__(self) -> None:
        self.grads: dict[tuple, torch.Tensor] = {}
        self.ranges: dict[str, dict[str, Any]] = {}
        self.tape: list = []
        self.loss = math.nan
        self.gradient_bytes = 0
        self.not_played: set[str] = set()

    def store(self, key: tuple, grad: torch.Tensor) -> None:
        # An output's gradient is cloned: autograd may add into it after the hook. A
        # parameter's is read once backward is done, from a copy about to be dropped.
        self.grads[key] = dense(grad) if key[0] == "param" else dense(grad).clone()

    @property
    def largest(self) -> float:
        return max((float(g.abs().max()) for g in self.grads.values() if g.numel()), default=0.0)


def reference(
    model: nn.Module, optimizer: Any, batch: Any, loss_fn: Callable, device: torch.device,
    seed: int,
) -> Reference:  # fmt: skip
    """One FP32 step on a copy, the model in the mode it is in; its random draws recorded."""
    ref = Reference()
    twin = _inputs.copy_of(model, None).model
    tape = _inputs.RandomTape()
    with _inputs.seeded(seed, device), gradient_tap(twin, ref.store, ref.ranges), tape:
        loss = _inputs.checked_loss(loss_fn, _inputs.call(twin, batch[0]), batch[1])
        if not loss.requires_grad:
            raise ValueError(
                "loss_fn's loss must depend on the model's trainable parameters; it has no "
                "gradient (was the output detached, or computed under torch.no_grad()?)"
            )
        ref.loss = float(loss.detach())
        if not math.isfinite(ref.loss):
            raise ValueError(
                f"loss_fn must give a finite FP32 loss on batch, got {ref.loss} before any "
                "step; diagnose compares the half formats with FP32 training, which cannot start "
                "from it"
            )
        loss.backward()
    got = [(name, p.grad) for name, p in twin.named_parameters() if p.grad is not None]
    if not got:
        raise ValueError(
            "loss_fn's loss must depend on the model's trainable parameters; none of them "
            "got a gradient from it"
        )
    for name, grad in got:
        ref.store(("param", name), grad)
        if grad.is_sparse:
            ref.gradient_bytes += sum(
                t.numel() * t.element_size() for t in (grad._values(), grad._indices())
            )
        else:
            ref.gradient_bytes += grad.numel() * grad.element_size()
    ref.tape = tape.tape
    ref.not_played = set(tape.not_played)
    del twin
    return ref


def noise_floor(
    model: nn.Module, optimizer: Any, batch: Any, loss_fn: Callable, device: torch.device,
    seed: int, ref: Reference,
) -> tuple[dict[tuple, torch.Tensor], dict[str, Any]]:  # fmt: skip
    """Which FP32 gradient values stand above round-off: a float64 step on a copy, compared
    value by value. Returns the masks (non-zero and not noise) and what was measured."""
    signal: dict[tuple, torch.Tensor] = {}

    def compare(key: tuple, grad: torch.Tensor) -> None:
        r = ref.grads.get(key)
        if r is None or r.shape != grad.shape:
            return
        g64 = dense(grad)
        noise = (r.double() - g64).abs() >= NOISE_SHARE * g64.abs()
        signal[key] = (r != 0) & ~noise

    def wide(t: Any) -> Any:
        return t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t

    info: dict[str, Any] = {"measured": True, "error": None}
    twin = _inputs.wide_copy_of(model)
    replay = _inputs.RandomTape(ref.tape)
    handles = []
    for name, p in twin.named_parameters():

        def done(p: torch.Tensor, name: str = name) -> None:  # compared, then let go
            compare(("param", name), p.grad)
            p.grad = None

        handles.append(p.register_post_accumulate_grad_hook(done))
    try:
        with _inputs.seeded(seed, device), gradient_tap(twin, compare), replay:
            loss = _inputs.checked_loss(loss_fn, _inputs.call(twin, tree_map(wide, batch[0])),
                                        tree_map(wide, batch[1]))  # fmt: skip
            loss.backward()
    except (RuntimeError, NotImplementedError, TypeError) as error:
        signal.clear()
        info = {"measured": False, "error": _inputs.first_line(error)}
    del twin
    if replay.diverged:
        info = {"measured": False, "error": "the float64 run drew other random numbers"}
        signal.clear()
    for key, r in ref.grads.items():
        if key not in signal:  # no float64 counterpart: every non-zero value counts
            signal[key] = r != 0
    nonzero = sum(int((r != 0).sum()) for r in ref.grads.values())
    kept = sum(int(s.sum()) for s in signal.values())
    info.update(values=sum(r.numel() for r in ref.grads.values()), nonzero=nonzero,
                noise=nonzero - kept)  # fmt: skip
    return signal, info


def real_step(
    model: nn.Module, optimizer: Any, batch: Any, loss_fn: Callable, device: torch.device,
    seed: int, tape: list, dtype: torch.dtype, scale: float, keep: list[str],
    on_grad: Callable[[tuple, torch.Tensor], None] | None,
) -> bool:  # fmt: skip
    """One real half-precision step on a copy (autocast, and for FP16 a GradScaler at
    ``scale``), its gradients handed to ``on_grad``; whether every parameter's is finite."""
    twin = _inputs.copy_of(model, None).model
    fp16 = dtype == torch.float16
    scaler = torch.amp.GradScaler(device.type, init_scale=scale, enabled=fp16)
    tap = gradient_tap(twin, on_grad) if on_grad is not None else nullcontext()
    kept = run_in_fp32(twin, keep if fp16 else ())
    with kept, _inputs.seeded(seed, device), tap, _inputs.RandomTape(tape):
        with torch.autocast(device.type, dtype=dtype):
            loss = _inputs.checked_loss(loss_fn, _inputs.call(twin, batch[0]), batch[1])
        scaler.scale(loss).backward()
    finite = True
    for _, p in twin.named_parameters():
        if p.grad is not None:
            values = p.grad.coalesce().values() if p.grad.is_sparse else p.grad
            finite = finite and bool(torch.isfinite(values).all())
    if on_grad is not None:
        _param_grads(twin, on_grad)
    del twin
    return finite


def settled_scale(
    model: nn.Module, optimizer: Any, batch: Any, loss_fn: Callable, device: torch.device,
    seed: int, tape: list, keep: list[str], largest: float,
    on_probe: Callable[[float], Callable | None] = lambda scale: None,
) -> tuple[float | None, int]:  # fmt: skip
    """The largest power of two, up to 2**40, at which one FP16 step's gradient is finite.

    A ``GradScaler`` with its defaults halves its scale after every step
    whose gradient overflows and doubles it after 2000 clean ones, so over a
    long run it climbs to this scale and backs off from the next. Each probe
    is one real scaled backward pass under FP16 autocast on a copy, through
    ``GradScaler.scale``. The first probe is the scale at which ``largest``,
    the largest FP32 gradient value, would just stay below FP16's largest;
    the next ones step away from it by 1, 2, 4, ... powers of two until one
    overflows and one does not, and the search halves the exponents between
    them (a larger scale overflows whenever a smaller one does). Returns the
    scale (``None`` if even 2**-24 overflows) and the number of probes.
    ``on_probe(scale)`` gives each probe's gradients a taker (or ``None``).
    """
    probes = 0

    def finite(exponent: int) -> bool:
        nonlocal probes
        probes += 1
        scale = 2.0**exponent
        return real_step(model, optimizer, batch, loss_fn, device, seed, tape, torch.float16,
                         scale, keep, on_probe(scale))  # fmt: skip

    low, high = LOWEST_EXPONENT - 1, HIGHEST_EXPONENT + 1  # finite at low, not at high
    guess = HIGHEST_EXPONENT
    if 0 < largest < math.inf:
        guess = math.floor(math.log2(FP16_MAX / largest))
    guess = min(max(guess, LOWEST_EXPONENT), HIGHEST_EXPONENT)
    if finite(guess):
        low, step = guess, 1
        while high - low > 1:
            probe = min(low + step, high - 1)
            if not finite(probe):
                high = probe
                break
            low, step = probe, step * 2
    else:
        high, step = guess, 1
        while high - low > 1:
            probe = max(high - step, low + 1)
            if finite(probe):
                low = probe
                break
            high, step = probe, step * 2
    while high - low > 1:
        middle = (low + high) // 2
        if finite(middle):
            low = middle
        else:
            high = middle
    return (None if low < LOWEST_EXPONENT else 2.0**low), probes


def grad_labels(keys: list[tuple]) -> dict[tuple, str]:
    """A name for each key: a parameter's own; a module output's module name (``(the model)``
    for ``""``), with ``[i]`` for its i-th output tensor and ``(call n)`` after the first call."""
    calls: dict[str, int] = {}
    leaves: dict[tuple[str, int], int] = {}
    for key in keys:
        if key[0] == "output":
            calls[key[1]] = max(calls.get(key[1], 0), key[2] + 1)
            leaves[key[1], key[2]] = max(leaves.get((key[1], key[2]), 0), key[3] + 1)
    labels = {}
    for key in keys:
        if key[0] == "param":
            labels[key] = key[1]
            continue
        _, name, call, leaf = key
        label = name or "(the model)"
        if leaves[name, call] > 1 or leaf:
            label += f"[{leaf}]"
        if call:
            label += f" (call {call + 1})"
        labels[key] = label
    return labels


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def section(
    model: nn.Module, optimizer: Any, batch: Any, loss_fn: Callable, device: torch.device,
    seed: int, ref: Reference, signal: dict[tuple, torch.Tensor], noise: dict[str, Any],
    keep: list[str], unavailable: dict[str, str],
) -> dict[str, Any]:  # fmt: skip
    """The gradients section: the settled scale, and each tensor's losses in the real FP16
    steps (at scale 1, at GradScaler's default or the settled scale if lower, at the settled
    scale) and the real BF16 step."""
    counts: dict[tuple, dict[str, int]] = {key: {} for key in ref.grads}
    dtypes16: dict[tuple, str] = {}

    def counter(measurement: str, scale: float, low: torch.dtype) -> Callable:
        smallest_normal = float(torch.finfo(low).tiny)

        def on_grad(key: tuple, real: torch.Tensor) -> None:
            r, sig = ref.grads.get(key), signal.get(key)
            if r is None or sig is None or tuple(real.shape) != tuple(r.shape):
                return
            real = dense(real)
            tiny = (r * scale).abs() < smallest_normal
            counts[key][measurement] = int((sig & (real == 0) & tiny).sum())
            if low == torch.float16:
                dtypes16[key] = dtype_name(real.dtype)

        return on_grad

    settled, probes = None, 0
    args = (model, optimizer, batch, loss_fn, device, seed, ref.tape)
    if "fp16" not in unavailable:
        try:
            # Each probe's gradients are counted too, so the scales the search tried need
            # no step of their own.
            settled, probes = settled_scale(
                *args, keep, ref.largest,
                on_probe=lambda scale: counter(f"fp16@{scale}", scale, torch.float16),
            )  # fmt: skip
            scales = {"fp16_unscaled": 1.0}
            if settled is not None:
                scales |= {"fp16_default": min(settled, DEFAULT_SCALE), "fp16_settled": settled}
            for measurement, scale in scales.items():
                if not any(f"fp16@{scale}" in c for c in counts.values()):
                    real_step(*args, torch.float16, scale, keep,
                              counter(f"fp16@{scale}", scale, torch.float16))  # fmt: skip
                for c in counts.values():
                    if f"fp16@{scale}" in c:
                        c[measurement] = c[f"fp16@{scale}"]
            for c in counts.values():
                for probe in [m for m in c if m.startswith("fp16@")]:
                    del c[probe]
        except (RuntimeError, NotImplementedError) as error:
            unavailable["fp16"] = _inputs.first_line(error)
            settled, dtypes16 = None, {}
            for c in counts.values():  # a backward cut short leaves some tensors counted
                for m in [m for m in c if m.startswith("fp16")]:
                    del c[m]
    if "bf16" not in unavailable:
        try:
            real_step(*args, torch.bfloat16, 1.0, [], counter("bf16", 1.0, torch.bfloat16))
        except (RuntimeError, NotImplementedError) as error:
            unavailable["bf16"] = _inputs.first_line(error)
            for c in counts.values():
                c.pop("bf16", None)

    labels = grad_labels(list(ref.grads))
    tensors: dict[str, dict[str, Any]] = {}
    totals = {m: [0, 0] for m in MEASUREMENTS}
    for key, r in ref.grads.items():
        sig = signal[key]
        n_signal = int(sig.sum())
        nonzero = int((r != 0).sum())
        row: dict[str, Any] = {
            "kind": "parameter" if key[0] == "param" else "output",
            "name": key[1],
            "values": r.numel(),
            "nonzero": nonzero,
            "noise": nonzero - n_signal,
            "signal": n_signal,
            "dtype_fp16": dtypes16.get(key),
            "lost": dict(counts[key]),
            "share": {m: _share(n, n_signal) for m, n in counts[key].items()},
        }
        if key[0] == "param":
            edges, shares, zero = log2_histogram(r, HIST_LOW, HIST_HIGH)
            row["histogram"] = {"log2_edges": edges, "shares": shares, "zero": zero}
        for m, n in counts[key].items():
            totals[m][0] += n
            totals[m][1] += n_signal
        tensors[labels[key]] = row

    def worst(measurement: str) -> dict[str, Any] | None:
        rows = [(row["share"][measurement], label) for label, row in tensors.items()
                if measurement in row["share"] and row["signal"]]  # fmt: skip
        if not any(measurement in row["lost"] for row in tensors.values()):
            return None
        share, label = max(rows, key=lambda r: r[0], default=(0.0, None))
        kind = tensors[label]["kind"] if label is not None else None
        return {"tensor": label, "kind": kind, "share": share}

    worsts = {m: worst(m) for m in MEASUREMENTS}
    init = None
    if settled is not None and worsts["fp16_default"] is not None:
        default = min(settled, DEFAULT_SCALE)
        keeps = worsts["fp16_default"]["share"] <= LOST_SHARE
        init = default if keeps else settled
        worsts["fp16_init"] = worsts["fp16_default" if keeps else "fp16_settled"]
    growth = torch.amp.GradScaler(device.type).get_growth_interval()
    growth_steps = None
    if init is not None and settled is not None:
        growth_steps = round(math.log2(settled / init)) * growth
    return {
        "loss": ref.loss,
        "settled_scale": settled,
        "settled_scale_capped": settled == 2.0**HIGHEST_EXPONENT,
        "scale_probes": probes,
        "init_scale": init,
        "growth_steps": growth_steps,
        "noise_floor": noise,
        "random_not_played": sorted(ref.not_played),
        "tensors": tensors,
        "underflow": {
            m: (_share(*totals[m]) if worsts[m] is not None else None) for m in MEASUREMENTS
        },
        "worst": worsts,
    }


def activations(ranges: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The activations section from the FP32 step's output ranges."""
    modules = {
        name: {
            "type": entry["type"],
            "max_abs": entry["max_abs"],
            "max_abs_input": entry["max_in"],
            "overflows_fp16": entry["max_abs"] >= FP16_OVERFLOW,
            "below_fp16_subnormal": _share(entry["tiny"], entry["nonzero"]),
        }
        for name, entry in ranges.items()
    }
    top = max(modules.items(), key=lambda kv: kv[1]["max_abs"]) if modules else ("", {})
    # Where an overflow starts: a module whose output FP16 would round to inf from inputs
    # within its range, and none of its submodules does so (the model and the blocks around
    # it only pass the overflow on, as do the modules after it).
    starts = {
        n for n, e in ranges.items() if e["max_abs"] >= FP16_OVERFLOW > e["max_in"]
    }  # fmt: skip
    starts = {n for n in starts if not any(o.startswith(f"{n}.") or (not n and o) for o in starts)}
    return {
        "fp16_overflow": FP16_OVERFLOW,
        "fp16_smallest_subnormal": FP16_SMALLEST_SUBNORMAL,
        "modules": modules,
        "largest": {"module": top[0], "max_abs": top[1].get("max_abs", 0.0)},
        "overflows_fp16": sorted(name for name, m in modules.items() if m["overflows_fp16"]),
        "overflow_starts": sorted(starts),
    }
