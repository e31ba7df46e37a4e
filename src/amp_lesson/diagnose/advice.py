# One module: the advice a diagnosis gives, and how it is tried before it is given.
"""Run chosen modules in FP32 under autocast, and find which ones an FP16 model needs.

An op that overflows FP16 in the forward pass (an activation's ``pow``, a
projection with large weights) makes every step's loss ``inf``: a
``GradScaler`` skips them all. Running the module it happens in with
autocast off, its inputs cast up to FP32, is the usual remedy.
:func:`run_in_fp32` does that to a model by module name, and
:func:`~amp_lesson.diagnose.diagnose` uses it to try the list it
recommends: it adds the module of the first op that gives ``inf`` or NaN
under FP16 autocast, runs the forward pass again, and repeats until the
pass is finite or a module cannot be narrowed down (the op ran in the
model's own ``forward``, or in the loss). The FP16 training run then takes
the list: the report says what it did with it.

>>> model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
>>> with torch.no_grad():
...     _ = model[0].weight.fill_(1e5)
>>> x = torch.ones(2, 4)
>>> with torch.autocast("cpu", dtype=torch.float16):
...     bool(torch.isfinite(model(x)).all())
False
>>> fp16 = torch.autocast("cpu", dtype=torch.float16)
>>> with run_in_fp32(model, ["0", "1"]), fp16:
...     out = model(x)
>>> bool(torch.isfinite(out).all()), out.dtype
(True, torch.float32)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any, Self

import torch
from torch import nn
from torch.utils._pytree import tree_map

from amp_lesson.diagnose import _inputs, _ops

__all__ = ["MAX_TRIES", "Fp32Modules", "run_in_fp32"]

MAX_TRIES = 8
"""How many modules the search for a list to keep in FP32 adds before it gives up."""

_LOW = (torch.float16, torch.bfloat16)


def _up(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.dtype in _LOW:
        return value.float()
    return value


class Fp32Modules:
    """The handle :func:`run_in_fp32` returns: ``remove()`` it, or use it as a context manager.

    Parameters
    ----------
    handles : list
        The hook handles it removes.
    names : list of str
        The modules it runs in FP32.
    """

    def __init__(self, handles: list[Any], names: list[str]) -> None:
        self._handles = handles
        self.names = names

    def remove(self) -> None:
        """Run the modules under autocast again (remove the hooks)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.remove()


def run_in_fp32(model: nn.Module, names: Iterable[str]) -> Fp32Modules:
    """Run the modules ``names`` of ``model`` in FP32, with autocast off, wherever it is on.

    Each module's floating-point inputs in FP16 or BF16 are cast to FP32 and
    its ``forward`` runs with :func:`torch.autocast` disabled, by a forward
    pre-hook and a forward hook; its output stays FP32, and the ops after it
    cast it down as autocast decides. The model is changed in place until
    the handle is removed, so a copy made meanwhile (``copy.deepcopy``) runs
    the same modules in FP32.

    Parameters
    ----------
    model : torch.nn.Module
        The model.
    names : iterable of str
        Module names as ``model.named_modules()`` gives them (``""`` is the
        model itself).

    Returns
    -------
    Fp32Modules
        Call ``.remove()`` to undo it, or use it in a ``with`` block.

    Raises
    ------
    TypeError
        If ``model`` is not a module or ``names`` not an iterable of strings.
    ValueError
        If a name is not a module of ``model``.

    Examples
    --------
    >>> model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU())
    >>> handle = run_in_fp32(model, ["0"])
    >>> with torch.autocast("cpu", dtype=torch.bfloat16):
    ...     model(torch.ones(2, 4)).dtype
    torch.float32
    >>> handle.remove()
    >>> with torch.autocast("cpu", dtype=torch.bfloat16):
    ...     model(torch.ones(2, 4)).dtype
    torch.bfloat16
    >>> run_in_fp32(model, ["2"])
    Traceback (most recent call last):
    ...
    ValueError: names must be modules of the model, got '2'; its modules are: '',
    '0', '1'
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if isinstance(names, str) or not isinstance(names, Iterable):
        raise TypeError(f"names must be an iterable of module names, got {names!r}")
    names = list(names)
    modules = dict(model.named_modules())
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"names must be strings, got {name!r}")
        if name not in modules:
            known = ", ".join(repr(n) for n in list(modules)[:12])
            more = ", ..." if len(modules) > 12 else ""
            raise ValueError(
                f"names must be modules of the model, got {name!r}; its modules are: {known}{more}"
            )
    handles = []
    for name in names:
        stack: list[torch.autocast] = []

        def enter(module: nn.Module, args: Any, kwargs: Any, stack: list = stack) -> Any:
            tensors = [t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor)]
            device = tensors[0].device.type if tensors else _device_of(module)
            off = torch.autocast(device, enabled=False)
            off.__enter__()
            stack.append(off)
            return tree_map(_up, args), tree_map(_up, kwargs)

        def leave(module: nn.Module, args: Any, kwargs: Any, out: Any, stack: list = stack) -> None:
            stack.pop().__exit__(None, None, None)

        module = modules[name]
        handles.append(module.register_forward_pre_hook(enter, with_kwargs=True))
        handles.append(module.register_forward_hook(leave, with_kwargs=True, always_call=True))
    return Fp32Modules(handles, names)


def _device_of(module: nn.Module) -> str:
    for t in (*module.parameters(), *module.buffers()):
        return t.device.type
    return "cpu"


def find_keep_list(
    model: nn.Module, optimizer: Any, batch: Any, loss_fn: Callable, device: torch.device,
    seed: int, tape: list, fp32_calls: list[dict[str, Any]], first: dict[str, Any] | None,
) -> dict[str, Any]:  # fmt: skip
    """The modules to run in FP32 for the FP16 forward pass to be finite, tried one by one.

    ``first`` is the first op that gave inf or NaN under FP16 autocast with
    no module kept; each try adds the module it ran in and runs the forward
    pass again (on a copy). Returns ``keep_fp32``, ``tries`` (each list
    tried and the first op that still overflowed, or ``None``),
    ``forward_finite`` and ``first_nonfinite`` (with the last list).
    """
    reference = _ops.keyed(fp32_calls)
    keep: list[str] = []
    tries: list[dict[str, Any]] = []
    bad = first
    while bad is not None and len(tries) < MAX_TRIES:
        module = bad["module"]
        if not module or module in keep:
            break  # in the model's own forward or the loss, or already in FP32: no narrower fix
        keep.append(module)
        twin = _inputs.copy_of(model, None).model
        with run_in_fp32(twin, keep):
            calls = _ops.record_forward(twin, batch, loss_fn, device, seed, torch.float16, tape)
        del twin
        bad = _ops.first_nonfinite(calls, reference)
        tries.append({"keep_fp32": list(keep), "first_nonfinite": bad})
    return {
        "keep_fp32": keep,
        "tries": tries,
        "forward_finite": bad is None,
        "first_nonfinite": bad,
    }
