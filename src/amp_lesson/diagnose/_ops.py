# The forward pass under autocast, op by op: the dtype each op computes in and returns, here and on CUDA.
"""Each op of a model's forward pass and loss, as the model's code calls it, under autocast.

An op is a call of a ``torch.nn.functional`` function, a tensor method or an
operator that computes a new floating-point tensor from a floating-point
one. For each it records the dtype it returned and the dtypes it computed in
(:class:`~amp_lesson.autocast.ComputeDtypes`: the arithmetic it dispatched,
after autocast cast its inputs), and how many inf or NaN values it gave; off
a GPU, the dtype CUDA autocast returns for the same inputs, decided by torch
on fake CUDA tensors (only the dtype: which kernel a GPU would pick, and so
what it computes in, fake tensors cannot tell).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_leaves, tree_unflatten

from amp_lesson.autocast import NOT_KNOWN, ComputeDtypes, cuda_autocast_dtype
from amp_lesson.diagnose import _inputs
from amp_lesson.formats import dtype_name

_CASTS = frozenset({"to", "float", "half", "bfloat16", "double", "type", "type_as", "cpu", "cuda"})
_NOT_OPS = frozenset(
    {"getitem", "setitem", "clone", "contiguous", "detach", "zeros_like", "ones_like",
     "requires_grad_", "zero_", "fill_", "copy_", "detach_", "retain_grad",
     "empty_like", "full_like", "new_zeros", "new_ones", "new_empty", "new_full", "new_tensor",
     "reshape", "flatten", "view", "view_as", "permute", "transpose", "expand", "expand_as"}
)  # fmt: skip
HALVES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def op_name(func: Callable[..., Any]) -> str:
    """``F.linear`` -> ``linear``, ``Tensor.__add__`` -> ``add``, ``Tensor.__iadd__`` -> ``add_``."""
    name = getattr(func, "__name__", repr(func))
    if name.startswith("__i") and name.endswith("__") and name not in ("__index__", "__init__"):
        return name[3:-2] + "_"
    if name.startswith("__r") and name.endswith("__") and name != "__repr__":
        return name[3:-2]
    return name.strip("_") if name.startswith("__") else name


class OpRecorder(TorchFunctionMode):
    """Records each torch call that computes a new floating tensor from a floating one."""

    def __init__(self, where: list[str], dtype: torch.dtype, decide_cuda: bool) -> None:
        super().__init__()
        self.where, self.dtype, self.decide_cuda = where, dtype, decide_cuda
        self.calls: list[dict[str, Any]] = []
        self.computes = ComputeDtypes()
        self._cuda: dict[str, str] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.computes.begin()
        try:
            out = func(*args, **kwargs)
        finally:
            seen = self.computes.end()
        name = op_name(func)
        if name in _CASTS or name in _NOT_OPS or getattr(func, "__name__", "") == "__get__":
            return out
        leaves, spec = tree_flatten((args, kwargs))
        inputs = [t for t in leaves if isinstance(t, torch.Tensor)]
        floats = [t for t in inputs if t.is_floating_point()]
        result = next(
            (t for t in tree_leaves(out) if isinstance(t, torch.Tensor) and t.is_floating_point()),
            None,
        )
        if not floats or result is None:
            return out
        shared = {t.untyped_storage().data_ptr() for t in inputs}
        in_place = name.endswith("_") or any(result is t for t in inputs)
        if result.untyped_storage().data_ptr() in shared and not in_place:
            return out  # a view of an input: no arithmetic
        cuda = self._decide(func, leaves, spec) if self.decide_cuda else NOT_KNOWN
        here = dtype_name(result.dtype)
        self.calls.append(
            {
                "op": name,
                "module": self.where[-1],
                "inputs": sorted({dtype_name(t.dtype) for t in floats}),
                "here": here,
                "computes": sorted(seen) or [here],
                "cuda": cuda,
                "nonfinite": int((~torch.isfinite(result.detach())).sum()),
            }
        )
        return out

    def _decide(self, func: Callable[..., Any], leaves: list[Any], spec: Any) -> str:
        """The dtype CUDA autocast gives ``func`` on these inputs (see ``cuda_autocast_dtype``)."""
        slots = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
        key = repr(
            (
                func,
                [(tuple(t.shape), t.dtype) if isinstance(t, torch.Tensor) else t for t in leaves],
            )
        )
        if key not in self._cuda:

            def call(*tensors: torch.Tensor) -> Any:
                filled = list(leaves)
                for i, t in zip(slots, tensors, strict=True):
                    filled[i] = t
                args, kwargs = tree_unflatten(filled, spec)
                return func(*args, **kwargs)

            try:
                choice = cuda_autocast_dtype(call, *[leaves[i] for i in slots], dtype=self.dtype)
                self._cuda[key] = choice.dtype
            except Exception:  # noqa: BLE001 (torch could not decide it: say so, never guess)
                self._cuda[key] = NOT_KNOWN
        return self._cuda[key]


@contextmanager
def module_names(model: nn.Module) -> Iterator[list[str]]:
    """A stack whose last entry is the name of the module running now (``""``: the model)."""
    stack = [""]
    handles = []
    for name, module in model.named_modules():

        def enter(_m: nn.Module, _args: Any, name: str = name) -> None:
            stack.append(name)

        def leave(_m: nn.Module, _args: Any, _out: Any) -> None:
            stack.pop()

        handles.append(module.register_forward_pre_hook(enter))
        handles.append(module.register_forward_hook(leave, always_call=True))
    try:
        yield stack
    finally:
        for handle in handles:
            handle.remove()


def record_forward(
    model: nn.Module, batch: Any, loss_fn: Callable, device: torch.device, seed: int,
    dtype: torch.dtype, tape: list | None = None,
) -> list[dict[str, Any]]:  # fmt: skip
    """The calls of one forward pass and loss of ``model`` (a copy) under autocast to ``dtype``
    (FP32: autocast off), with random draws played back from ``tape`` where given."""
    half = dtype != torch.float32
    with _inputs.seeded(seed, device), module_names(model) as where:
        recorder = OpRecorder(where, dtype, decide_cuda=device.type != "cuda" and half)
        replay = _inputs.RandomTape(tape) if tape is not None else None
        with torch.autocast(device.type, dtype=dtype, enabled=half), recorder, recorder.computes:
            try:
                if replay is not None:
                    with replay:
                        _inputs.checked_loss(loss_fn, _inputs.call(model, batch[0]), batch[1])
                else:
                    _inputs.checked_loss(loss_fn, _inputs.call(model, batch[0]), batch[1])
            except RuntimeError as error:
                if "unsafe to autocast" not in str(error):
                    raise
                first = str(error).strip().splitlines()[0]
                raise ValueError(
                    f"model or loss_fn calls an op that {device.type} autocast refuses, so "
                    f"it cannot train in {dtype_name(dtype)} as written: {first}"
                ) from error
    if device.type == "cuda":  # on a GPU the run itself is CUDA's answer
        for row in recorder.calls:
            row["cuda"] = row["here"]
    return recorder.calls


def keyed(calls: list[dict[str, Any]]) -> dict[tuple[str, str, int], dict[str, Any]]:
    """Calls by op, module and how many calls of that op in that module came before."""
    seen: dict[tuple[str, str], int] = {}
    out = {}
    for call in calls:
        n = seen[call["op"], call["module"]] = seen.get((call["op"], call["module"]), -1) + 1
        out[call["op"], call["module"], n] = call
    return out


def first_nonfinite(
    calls: list[dict[str, Any]], fp32: dict[tuple[str, str, int], dict[str, Any]]
) -> dict[str, Any] | None:
    """The first call whose output holds more inf or NaN values than the same call in FP32
    (a causal mask's ``-inf`` is there in both)."""
    for key, call in keyed(calls).items():
        reference = fp32.get(key)
        if call["nonfinite"] > (reference["nonfinite"] if reference else 0):
            return {"op": call["op"], "module": call["module"]}
    return None


def paired(runs: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The FP16 and BF16 runs' calls side by side, matched by op, module and how many came
    before, each with the count of inf and NaN values the same call gave in FP32.

    A model that branches on its activations' dtype (a clamp for FP16 only, say) calls
    other ops in the runs; a call one run made and another did not has ``None`` in the
    other's columns. A format missing from ``runs`` (it could not run) has ``None`` too.
    """
    by_fmt = {fmt: keyed(calls) for fmt, calls in runs.items()}
    order: list[tuple[str, str, int]] = []
    for fmt in ("fp16", "bf16", "fp32"):
        order += [k for k in by_fmt.get(fmt, {}) if k not in order]
    rows = []
    for key in order:
        row: dict[str, Any] = {"op": key[0], "module": key[1]}
        reference = by_fmt.get("fp32", {}).get(key)
        row["nonfinite_fp32"] = reference["nonfinite"] if reference else None
        for fmt in HALVES:
            call = by_fmt.get(fmt, {}).get(key)
            row[f"inputs_{fmt}"] = call["inputs"] if call else None
            row[fmt] = call["here"] if call else None
            row[f"computes_{fmt}"] = call["computes"] if call else None
            row[f"cuda_{fmt}"] = call["cuda"] if call else None
            row[f"nonfinite_{fmt}"] = call["nonfinite"] if call else None
        rows.append(row)
    return rows


def section(
    model: nn.Module, optimizer: Any, batch: Any, loss_fn: Callable, device: torch.device,
    seed: int, tape: list, unavailable: dict[str, str],
) -> tuple[dict[str, Any], list[dict[str, Any]]]:  # fmt: skip
    """The autocast section, and the FP32 run's calls (the reference for inf and NaN).

    Each run is on a copy of the model, one at a time; a half format whose forward
    pass cannot run here is put in ``unavailable`` with the error's first line.
    """
    runs: dict[str, list[dict[str, Any]]] = {}
    for fmt, dtype in (("fp32", torch.float32), *HALVES.items()):
        twin = _inputs.copy_of(model, None).model
        try:
            runs[fmt] = record_forward(twin, batch, loss_fn, device, seed, dtype, tape)
        except (RuntimeError, NotImplementedError) as error:
            if fmt == "fp32":
                raise
            unavailable[fmt] = _inputs.first_line(error)
        del twin
    rows = paired(runs)
    ops: dict[str, dict[str, Any]] = {}
    for row in rows:
        summary = ops.setdefault(row["op"], {"calls": 0})
        summary["calls"] += 1
        for column in ("fp16", "bf16", "cuda_fp16", "cuda_bf16"):
            counts = summary.setdefault(column, {})
            if row[column] is not None:
                counts[row[column]] = counts.get(row[column], 0) + 1
        for column in ("computes_fp16", "computes_bf16"):
            counts = summary.setdefault(column, {})
            for name in row[column] or []:
                counts[name] = counts.get(name, 0) + 1
    stayed = sorted(
        op for op, s in ops.items() if s["computes_fp16"] and set(s["computes_fp16"]) == {"float32"}
    )
    cuda_stayed = sorted(op for op, s in ops.items() if set(s["cuda_fp16"]) == {"float32"})
    refused = sorted(op for op, s in ops.items() if "refused" in {*s["cuda_fp16"], *s["cuda_bf16"]})
    fp32 = keyed(runs["fp32"])
    bad = first_nonfinite(runs["fp16"], fp32) if "fp16" in runs else None
    return {
        "device": device.type,
        "calls": rows,
        "ops": ops,
        "stayed_fp32": stayed,
        "cuda_stayed_fp32": cuda_stayed,
        "cuda_refuses": refused,
        "fp16_forward_finite": None if "fp16" not in runs else bad is None,
        "first_nonfinite_fp16": bad,
    }, runs["fp32"]
