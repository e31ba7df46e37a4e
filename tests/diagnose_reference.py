"""Independent computations the diagnose tests compare with, written without amp_lesson."""

from __future__ import annotations

import copy
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_leaves, tree_map


def step_gradients(
    model: nn.Module,
    batch: tuple[Any, Any],
    loss_fn: Callable,
    *,
    dtype: torch.dtype | None = None,
    scale: float = 1.0,
    wide: bool = False,
    seed: int = 0,
    keep: tuple[str, ...] = (),
) -> dict[tuple, torch.Tensor]:
    """One step on a copy: the gradient at each module's output (the first module to return
    a tensor) and each parameter's, by ``(name, call, leaf)`` and ``("param", name)``.

    ``dtype``: autocast's (FP16 or BF16), else none; ``scale``: the loss is multiplied by it
    before backward (what GradScaler.scale does); ``wide``: the copy and batch in float64;
    ``keep``: modules run with autocast off, their inputs cast up.
    """
    twin = copy.deepcopy(model)
    x, y = batch
    if wide:
        twin = twin.double()
        x, y = tree_map(
            lambda t: t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t,
            (x, y),
        )
    grads: dict[tuple, torch.Tensor] = {}
    seen: list[torch.Tensor] = []
    calls: dict[str, int] = {}
    handles = []
    modules = dict(twin.named_modules())

    def record(name: str) -> Callable:
        def hook(module: nn.Module, args: Any, out: Any) -> None:
            call = calls[name] = calls.get(name, -1) + 1
            leaves = [t for t in tree_leaves(out)
                      if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dim() > 0]  # fmt: skip
            for i, t in enumerate(leaves):
                if t.requires_grad and not any(t is s for s in seen):
                    seen.append(t)
                    t.register_hook(
                        lambda g, key=(name, call, i): grads.__setitem__(key, g.detach().clone())
                    )

        return hook

    for name, module in modules.items():
        handles.append(module.register_forward_hook(record(name)))
    for name in keep:
        module = modules[name]
        original = module.forward

        def forward(*args: Any, original: Callable = original, **kwargs: Any) -> Any:
            up = lambda t: t.float() if isinstance(t, torch.Tensor) and t.dtype in (
                torch.float16, torch.bfloat16) else t  # fmt: skip
            with torch.autocast(x.device.type if torch.is_tensor(x) else "cpu", enabled=False):
                return original(*tree_map(up, args), **tree_map(up, kwargs))

        module.forward = forward
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        with torch.autocast("cpu", dtype=dtype or torch.float16, enabled=dtype is not None):
            out = twin(**x) if isinstance(x, dict) else twin(x)
            loss = loss_fn(out, y)
        (loss * torch.tensor(scale, dtype=loss.dtype)).backward()
    for handle in handles:
        handle.remove()
    for name, p in twin.named_parameters():
        if p.grad is not None:
            grads["param", name] = p.grad.detach().to_dense().clone()
    return grads


def references(
    model: nn.Module, batch: tuple[Any, Any], loss_fn: Callable
) -> tuple[dict[tuple, torch.Tensor], dict[tuple, torch.Tensor]]:
    """The FP32 and the float64 step's gradients."""
    return step_gradients(model, batch, loss_fn), step_gradients(model, batch, loss_fn, wide=True)


def lost_counts(
    model: nn.Module, batch: tuple[Any, Any], loss_fn: Callable, dtype: torch.dtype, scale: float,
    keep: tuple[str, ...] = (), refs: tuple[dict, dict] | None = None,
) -> dict[tuple, tuple[int, int]]:  # fmt: skip
    """Per gradient tensor: (values lost, values above FP32's round-off) in a real ``dtype``
    step at ``scale``, by the definition diagnose documents."""
    fp32, fp64 = refs or references(model, batch, loss_fn)
    real = step_gradients(model, batch, loss_fn, dtype=dtype, scale=scale, keep=keep)
    tiny = torch.finfo(dtype).tiny
    out = {}
    for key, ref in fp32.items():
        noise = (ref.double() - fp64[key]).abs() >= 0.5 * fp64[key].abs()
        signal = (ref != 0) & ~noise
        lost = signal & (real[key] == 0) & ((ref * scale).abs() < tiny)
        out[key] = int(lost.sum()), int(signal.sum())
    return out


def labels(keys: list[tuple]) -> dict[tuple, str]:
    """The names diagnose's report documents: a parameter's own; a module output's module
    (``(the model)`` for the model), ``[i]`` for its i-th output, ``(call n)`` after the first."""
    leaves: dict[tuple, int] = {}
    for key in keys:
        if key[0] != "param":
            leaves[key[:2]] = leaves.get(key[:2], 0) + 1
    out = {}
    for key in keys:
        if key[0] == "param":
            out[key] = key[1]
            continue
        name, call, leaf = key
        label = name or "(the model)"
        if leaves[name, call] > 1 or leaf:
            label += f"[{leaf}]"
        out[key] = label + (f" (call {call + 1})" if call else "")
    return out


def tensor_row(diagnosis: Any, key: tuple) -> dict[str, Any]:
    """Diagnose's row for ``key`` (a module called once with one output, or a parameter)."""
    if key[0] == "param":
        return diagnosis.gradients["tensors"][key[1]]
    name = key[0] or "(the model)"
    return diagnosis.gradients["tensors"][name]


def copies_alive_at_each_copy(monkeypatch: Any) -> list[int]:
    """Make every copy diagnose makes (FP32 and float64) count the earlier copies still alive
    at that moment; returns the list the counts go into."""
    from amp_lesson.diagnose import _inputs

    alive: list[weakref.ref] = []
    counts: list[int] = []

    def counted(make: Callable) -> Callable:
        def copy_and_count(*args: Any) -> Any:
            made = make(*args)
            alive[:] = [r for r in alive if r() is not None]
            counts.append(len(alive))
            alive.append(weakref.ref(getattr(made, "model", made)))
            return made

        return copy_and_count

    monkeypatch.setattr(_inputs, "copy_of", counted(_inputs.copy_of))
    monkeypatch.setattr(_inputs, "wide_copy_of", counted(_inputs.wide_copy_of))
    return counts
