# One sampled step of a watched loop, measured as diagnose measures its batch.
"""What a half-precision step lost of its gradient, measured inside the reader's own loop.

On a sampled step the watch keeps, for the first micro-batch: the model's
inputs, the random draws of its forward pass, where each gradient the real
backward pass delivered was zero (at every module output and every
parameter), and the gradient at the model's outputs before it was cast down
to the half format. Before the optimizer steps, it repeats that micro-batch
through the same model in FP32 and in float64 (autocast off, the same
weights, inputs, random draws, and that output gradient, so the same loss
scale), with :func:`torch.func.functional_call`: neither the parameters'
``.grad`` nor the buffers change. A value is lost, as
:func:`~amp_lesson.diagnose.diagnose` counts it, where the FP32 repetition
holds it above the float64 noise floor, the real step held zero, and it lies
below the format's smallest normal number.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
from torch import nn
from torch.func import functional_call
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map
from torch.utils.weak import WeakTensorKeyDictionary

from amp_lesson.diagnose import _inputs, _underflow
from amp_lesson.diagnose.rules import NOISE_SHARE

_LOW = (torch.float16, torch.bfloat16)


def _kept(value: Any) -> Any:
    return value.detach().clone() if isinstance(value, torch.Tensor) else value


class _CastSources(TorchDispatchMode):
    """In backward, remembers the FP32 gradient each cast down to FP16 or BF16 was made from."""

    def __init__(self) -> None:
        super().__init__()
        self.sources = WeakTensorKeyDictionary()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if (
            func is torch.ops.aten._to_copy.default
            and isinstance(out, torch.Tensor)
            and out.dtype in _LOW
            and args[0].dtype == torch.float32
            and torch._C._current_graph_task_id() != -1
        ):
            self.sources[out] = args[0]
        return out


class StepSample:
    """The record of one sampled step, and its repetition in FP32 and float64."""

    def __init__(self, model: nn.Module, step: int, fmt: str, args: Any, kwargs: Any) -> None:
        self.model, self.step, self.format = model, step, fmt
        self.low = torch.float16 if fmt == "fp16" else torch.bfloat16
        # copies: a loader may fill the same buffers with the next batch before the repetition
        self.args, self.kwargs = tree_map(_kept, (tuple(args), dict(kwargs)))
        self.zeros: dict[tuple, torch.Tensor] = {}
        self.outputs: dict[int, torch.Tensor] = {}  # the model's output leaves' FP32 gradients
        self.result: dict[str, Any] = {"step": step, "scale": None, "skipped": False,
                                       "format": fmt, "tensors": {}, "measured": False,
                                       "error": None, "noise_floor": False,
                                       "noise_error": None}  # fmt: skip
        self._calls: dict[str, int] = {}
        self._seen = WeakTensorKeyDictionary()
        self._tape = _inputs.RandomTape()
        self._tape.__enter__()
        self._taping = True
        self._casts: _CastSources | None = None
        self._handles = [
            p.register_hook(partial(self._on_parameter, name))
            for name, p in model.named_parameters()
            if p.requires_grad
        ]
        self.done = False

    # ---------------------------------------------------------------- the real step

    def on_output(self, name: str, out: Any) -> None:
        """A module's forward returned ``out`` in the sampled forward pass."""
        if not self._taping:
            return
        call = self._calls[name] = self._calls.get(name, -1) + 1
        leaves = [t for t in _inputs.floats(out) if t.dim() > 0 and t.numel()]
        for i, t in enumerate(leaves):
            if t.requires_grad and t not in self._seen:
                self._seen[t] = True
                t.register_hook(partial(self._on_gradient, ("output", name, call, i)))
        if name == "" and call == 0:
            for i, t in enumerate(_inputs.floats(out)):
                if t.requires_grad:
                    t.register_hook(partial(self._on_model_output, i))
            self._tape.__exit__(None, None, None)
            self._taping = False
            self._casts = _CastSources()
            self._casts.__enter__()

    def _on_gradient(self, key: tuple, grad: torch.Tensor) -> None:
        if key not in self.zeros:
            self.zeros[key] = grad.detach() == 0

    def _on_parameter(self, name: str, grad: torch.Tensor) -> None:
        key = ("param", name)
        if key not in self.zeros:  # the first micro-batch's
            self.zeros[key] = _underflow.dense(grad) == 0

    def _on_model_output(self, index: int, grad: torch.Tensor) -> None:
        if index not in self.outputs:
            source = self._casts.sources.get(grad) if self._casts is not None else None
            self.outputs[index] = (source if source is not None else grad).detach().float()

    # ---------------------------------------------------------------- the repetition

    def _repeat(self, dtype: torch.dtype) -> dict[tuple, torch.Tensor]:
        model = self.model
        params = {
            n: p.detach().to(dtype).requires_grad_()
            for n, p in model.named_parameters()
            if p.requires_grad
        }
        frozen = {n: p.detach().to(dtype) for n, p in model.named_parameters()
                  if not p.requires_grad}  # fmt: skip
        buffers = {n: b.detach().clone().to(dtype) if b.is_floating_point() else b.detach().clone()
                   for n, b in model.named_buffers()}  # fmt: skip

        def cast(t: Any) -> Any:
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                return t.detach().to(dtype)
            return t

        grads: dict[tuple, torch.Tensor] = {}

        def store(key: tuple, grad: torch.Tensor) -> None:  # cloned: autograd may add into it
            grads[key] = _underflow.dense(grad).clone()

        device = next((p.device.type for p in params.values()), "cpu")
        replay = _inputs.RandomTape(self._tape.tape)
        with _underflow.gradient_tap(model, store), replay, torch.autocast(device, enabled=False):
            out = functional_call(model, {**params, **frozen, **buffers},
                                  tree_map(cast, tuple(self.args)), tree_map(cast, self.kwargs),
                                  tie_weights=True, strict=False)  # fmt: skip
            leaves = _inputs.floats(out)
            pairs = [(leaves[i], g.to(dtype)) for i, g in self.outputs.items() if i < len(leaves)]
            got = torch.autograd.grad(
                [o for o, _ in pairs], list(params.values()),
                grad_outputs=[g for _, g in pairs], allow_unused=True,
            )  # fmt: skip
        if replay.diverged:
            raise RuntimeError("the repetition drew other random numbers than the step")
        for name, grad in zip(params, got, strict=True):
            if grad is not None:
                store(("param", name), grad)
        return grads

    def measure(self) -> None:
        """Repeat the micro-batch in FP32 and float64, and count what the step lost."""
        if self.done:
            return
        self.done = True
        self._close_modes()
        if not self.outputs:
            self.result["error"] = "no gradient reached the model's outputs"
            return
        try:
            ref = self._repeat(torch.float32)
        except Exception as error:  # noqa: BLE001 (the reader's training goes on regardless)
            self.result["error"] = _inputs.first_line(error)
            return
        try:
            wide = self._repeat(torch.float64)
            noise_error = None
        except Exception as error:  # noqa: BLE001
            wide, noise_error = {}, _inputs.first_line(error)
        smallest_normal = float(torch.finfo(self.low).tiny)
        labels = _underflow.grad_labels(list(self.zeros))
        tensors = self.result["tensors"]
        for key, zero in self.zeros.items():
            r = ref.get(key)
            if r is None or r.shape != zero.shape:
                continue
            signal = r != 0
            if key in wide:
                signal &= ~((r.double() - wide[key]).abs() >= NOISE_SHARE * wide[key].abs())
            lost = signal & zero & (r.abs() < smallest_normal)
            n_signal = int(signal.sum())
            tensors[labels[key]] = {
                "kind": "parameter" if key[0] == "param" else "output",
                "values": r.numel(),
                "signal": n_signal,
                "lost": int(lost.sum()),
                "share": int(lost.sum()) / n_signal if n_signal else 0.0,
            }
        self.result["measured"] = True
        self.result["noise_floor"] = noise_error is None
        self.result["noise_error"] = noise_error
        self.zeros, self.outputs = {}, {}

    # ---------------------------------------------------------------- the end

    def _close_modes(self) -> None:
        if self._taping:
            self._tape.__exit__(None, None, None)
            self._taping = False
        if self._casts is not None:
            self._casts.__exit__(None, None, None)
            self._casts = None

    def close(self) -> dict[str, Any]:
        """Remove what the sample added; return its record, with the worst tensor and the
        share of all values lost."""
        self._close_modes()
        for handle in self._handles:
            handle.remove()
        self._handles = []
        result = self.result
        rows = [(row["share"], label) for label, row in result["tensors"].items() if row["signal"]]
        share, label = max(rows, key=lambda r: r[0], default=(0.0, None))
        kind = result["tensors"][label]["kind"] if label is not None else None
        result["worst"] = {"tensor": label, "kind": kind, "share": share}
        lost = sum(row["lost"] for row in result["tensors"].values())
        signal = sum(row["signal"] for row in result["tensors"].values())
        result["underflow"] = lost / signal if signal else 0.0
        self.args = self.kwargs = None
        return result
