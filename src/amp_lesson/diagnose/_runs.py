# The training runs of a diagnosis, and its memory section.
"""FP32, FP16 and BF16 training from the same weights, as the recipe's loop takes them.

Each run is ``steps`` optimizer steps on the batch, one micro-batch per
step, on a copy of the model and optimizer: the loop of
:func:`amp_lesson.recipe.train_mixed_precision`, with the FP16 run's
``GradScaler`` started at the ``init_scale`` the diagnosis recommends and
its list of modules kept in FP32 applied (the recipe's own loop where those
are GradScaler's default and empty).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_leaves

from amp_lesson.diagnose import _inputs
from amp_lesson.diagnose.advice import run_in_fp32
from amp_lesson.diagnose.rules import DEFAULT_SCALE
from amp_lesson.memory import measure_saved


def train(
    model: nn.Module, optimizer: torch.optim.Optimizer | None, batch: Any, loss_fn: Callable,
    device: torch.device, dtype: torch.dtype, steps: int, seed: int, *,
    init_scale: float = DEFAULT_SCALE, keep: list[str] | tuple[str, ...] = (),
) -> tuple[dict[str, Any], dict[str, torch.Tensor], _inputs.Copy]:  # fmt: skip
    """``steps`` steps on ``batch`` on a copy, with what each step did."""
    net, opt = _inputs.copy_of(model, optimizer)
    if opt is None:
        opt = torch.optim.Adam([p for p in net.parameters() if p.requires_grad])
    half = dtype != torch.float32
    fp16 = dtype == torch.float16
    scaler = torch.amp.GradScaler(device.type, init_scale=init_scale, enabled=fp16)
    inputs, targets = batch
    losses, scales, skipped_at = [], [], []
    kept = run_in_fp32(net, keep if fp16 else ())
    with kept, _inputs.seeded(seed, device):
        net.train()
        opt.zero_grad()
        for step in range(1, steps + 1):
            with torch.autocast(device.type, dtype=dtype, enabled=half):
                out = _inputs.call(net, inputs)
                loss = _inputs.checked_loss(loss_fn, out, targets) * 1.0  # the recipe's share
            scale = float(scaler.get_scale())
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            losses.append(float(loss.detach()))
            scales.append(scale)
            if scaler.is_enabled() and float(scaler.get_scale()) < scale:  # backed off: skipped
                skipped_at.append(step)
        with torch.no_grad():
            final = float(_inputs.checked_loss(loss_fn, _inputs.call(net, inputs), targets))
    # The copy's own parameters (on a GPU, moved to the CPU): no second copy of them.
    weights = {name: p.detach().to("cpu") for name, p in net.named_parameters()}
    run = {
        "losses": losses,
        "final_loss": final,
        "skipped": len(skipped_at),
        "skipped_steps": skipped_at,
        "scales": scales if scaler.is_enabled() else None,
        "init_scale": init_scale if scaler.is_enabled() else None,
        "final_scale": float(scaler.get_scale()) if scaler.is_enabled() else None,
        "keep_fp32": list(keep) if fp16 else [],
    }
    return run, weights, _inputs.Copy(net, opt)


def state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """The bytes of the optimizer's state tensors (each storage once)."""
    seen, total = set(), 0
    for state in optimizer.state.values():
        for t in state.values():
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in seen:
                seen.add(t.untyped_storage().data_ptr())
                total += t.untyped_storage().nbytes()
    return total


def memory(
    model: nn.Module, optimizer: torch.optim.Optimizer | None, batch: Any, loss_fn: Callable,
    device: torch.device, seed: int, *, optimizer_bytes: int, gradient_bytes: int,
    unavailable: dict[str, str],
) -> dict[str, Any]:  # fmt: skip
    """Bytes per parameter (weights, gradients and optimizer state measured) and the
    activations each dtype saves for backward, apart from autocast's weight copies."""
    twin = _inputs.copy_of(model, None).model
    params = [p for p in twin.parameters() if p.requires_grad]
    n = sum(p.numel() for p in params)
    weight_bytes = sum(p.numel() * p.element_size() for p in params)
    inputs = [t for t in tree_leaves(batch[0]) if isinstance(t, torch.Tensor)]
    saved, copies = {}, {}
    for fmt, dtype in (("fp32", None), ("fp16", torch.float16), ("bf16", torch.bfloat16)):
        if fmt in unavailable:
            saved[fmt], copies[fmt] = None, None
            continue
        with _inputs.seeded(seed, device):
            measured = measure_saved(
                twin,
                lambda: _inputs.checked_loss(loss_fn, _inputs.call(twin, batch[0]), batch[1]),
                inputs,
                dtype,
                device,
            )
        by_dtype = dict(measured.bytes_by_dtype)
        if dtype is not None and measured.weight_copy_bytes:  # the copies are all in `dtype`
            half = str(dtype).removeprefix("torch.")
            by_dtype[half] -= measured.weight_copy_bytes
            if not by_dtype[half]:
                del by_dtype[half]
        saved[fmt] = {"bytes": measured.activation_bytes, "by_dtype": by_dtype}
        copies[fmt] = measured.weight_copy_bytes / n
    return {
        "optimizer": type(optimizer).__name__ if optimizer is not None else "Adam",
        "parameters": n,
        "bytes_per_parameter": {
            "weights": weight_bytes / n,
            "gradients": gradient_bytes / n,
            "optimizer_state": optimizer_bytes / n,
            "autocast_weight_copies": {"fp16": copies["fp16"], "bf16": copies["bf16"]},
        },
        "saved_for_backward": saved,
    }
