# One module: what autocast does, observed on this device and decided for CUDA by torch, in one place.
"""What autocast does to a training step, observed rather than assumed.

:func:`torch.autocast` runs some ops in a lower-precision dtype (FP16 or
BF16) and others in FP32, by lists that differ between CPU and CUDA. This
module reports what autocast does:

- :func:`cuda_autocast_dtype` / :func:`cuda_op_dtypes` -- the dtype CUDA
  autocast gives an op, decided by torch's dispatcher on fake CUDA tensors,
  so that any machine can say what a GPU would do;
- :func:`op_dtypes` -- the dtype each op of :data:`OPS` produced under
  autocast on the device at hand, next to CUDA's choice;
- :class:`ComputeDtypes` -- the dtypes a call's arithmetic ran in, which
  can differ from the dtype it returns;
- :func:`step_dtypes` -- the dtype of every kind of tensor in one
  mixed-precision Adam step: parameters, activations, the loss, activation
  and weight gradients, ``.grad`` and Adam's ``exp_avg``/``exp_avg_sq``;
- :func:`train_choice` / :func:`compare_choices` -- the ways to train in
  lower precision (:data:`CHOICES`), each run on a small model, with what
  happened.

>>> rows = {r["op"]: r for r in op_dtypes(torch.bfloat16, device="cpu")}
>>> rows["linear"]["produced"], rows["cross_entropy"]["produced"]
('bfloat16', 'float32')
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from amp_lesson._checks import check_choice, check_int, check_seed
from amp_lesson.device import resolve_device
from amp_lesson.formats import dtype_name, dtype_of
from amp_lesson.models import make_mlp

__all__ = [
    "CHOICES",
    "CUDA_RULES",
    "NOT_KNOWN",
    "OPS",
    "ComputeDtypes",
    "CudaChoice",
    "compare_choices",
    "cuda_autocast_dtype",
    "cuda_op_dtypes",
    "make_regression_problem",
    "op_dtypes",
    "step_dtypes",
    "train_choice",
]

# --------------------------------------------------------------------------- ops


def _inputs(device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    t = {
        "x": torch.randn(8, 16, generator=g),
        "w": torch.randn(4, 16, generator=g),
        "image": torch.randn(1, 3, 8, 8, generator=g),
        "kernel": torch.randn(2, 3, 3, 3, generator=g),
        "classes": torch.randint(0, 4, (8,), generator=g),
        "labels": (torch.rand(8, generator=g) > 0.5).float(),
    }
    return {k: v.to(device) for k, v in t.items()}


_INPUT_NAMES = ("x", "w", "image", "kernel", "classes", "labels")


# Each op gets FP32 inputs (x, w, image, kernel) or ``h``, the output of a
# linear layer under autocast: the activation the op would meet in a network.
_OP_CALLS: dict[str, Callable[[dict[str, torch.Tensor], torch.Tensor], torch.Tensor]] = {
    "linear": lambda t, h: F.linear(t["x"], t["w"]),
    "matmul": lambda t, h: t["x"] @ t["w"].T,
    "conv2d": lambda t, h: F.conv2d(t["image"], t["kernel"]),
    "relu": lambda t, h: F.relu(h),
    "softmax": lambda t, h: F.softmax(h, dim=-1),
    "log_softmax": lambda t, h: F.log_softmax(h, dim=-1),
    "layer_norm": lambda t, h: F.layer_norm(h, h.shape[-1:]),
    "sum": lambda t, h: h.sum(),
    "exp": lambda t, h: h.exp(),
    "log": lambda t, h: h.abs().log(),
    "cross_entropy": lambda t, h: F.cross_entropy(h, t["classes"]),
    "mse_loss": lambda t, h: F.mse_loss(h, torch.zeros_like(h)),
    "binary_cross_entropy": lambda t, h: F.binary_cross_entropy(
        h.select(1, 0).sigmoid(), t["labels"]
    ),
    "binary_cross_entropy_with_logits": lambda t, h: F.binary_cross_entropy_with_logits(
        h.select(1, 0), t["labels"]
    ),
}

OPS: tuple[str, ...] = tuple(_OP_CALLS)
"""The ops :func:`op_dtypes` runs, in the order of its rows."""

CUDA_RULES: Mapping[str, str] = {
    "linear": "lower",
    "matmul": "lower",
    "conv2d": "lower",
    "relu": "input",
    "softmax": "float32",
    "log_softmax": "float32",
    "layer_norm": "float32",
    "sum": "float32",
    "exp": "float32",
    "log": "float32",
    "cross_entropy": "float32",
    "mse_loss": "float32",
    "binary_cross_entropy": "refused",
    "binary_cross_entropy_with_logits": "float32",
}
"""What the PyTorch AMP docs list for each op of :data:`OPS` under CUDA autocast.

``"lower"``: in the "CUDA Ops that can autocast to float16" list (the
autocast dtype); ``"float32"``: in the "autocast to float32" list;
``"input"``: in no list, so it runs in its input's dtype; ``"refused"``:
raises under CUDA autocast (``binary_cross_entropy`` is "unsafe to
autocast"). Source: https://pytorch.org/docs/stable/amp.html (CUDA Op-Specific
Behavior), read 2026-12-03. The book does not use this list for its tables:
:func:`cuda_op_dtypes` asks torch itself, and a test checks that the two agree.

>>> CUDA_RULES["softmax"], CUDA_RULES["binary_cross_entropy"]
('float32', 'refused')
"""

NOT_KNOWN = "not known here"
"""What :func:`cuda_autocast_dtype` returns where torch cannot decide without a GPU."""


class CudaChoice(NamedTuple):
    """What CUDA autocast does with one call.

    Parameters
    ----------
    dtype : str
        The output's dtype name, ``"refused"`` when CUDA autocast raises for
        the op, or :data:`NOT_KNOWN` when torch cannot decide without a GPU.
    error : str or None
        The first line of torch's message when it raised, else ``None``.
    """

    dtype: str
    error: str | None


# Ops that move, copy, view or allocate data without arithmetic on it: not what a call
# "computes in".
_NO_ARITHMETIC = frozenset(
    {"_to_copy", "copy_", "copy", "detach", "clone", "lift_fresh", "lift_fresh_copy", "alias",
     "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros",
     "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like",
     "new_full", "fill_", "fill", "zero_", "_local_scalar_dense", "split", "split_with_sizes",
     "unsafe_split", "unsafe_split_with_sizes", "unbind", "chunk", "cat", "stack", "index",
     "index_select", "gather", "_unsafe_view", "contiguous", "set_", "resize_", "scalar_tensor",
     "_pin_memory", "record_stream"}
)  # fmt: skip


class ComputeDtypes(TorchDispatchMode):
    """Collects the dtypes the dispatched arithmetic computes in, between :meth:`begin` and :meth:`end`.

    It sees the ops a call dispatches after autocast has cast their inputs,
    and collects the dtype of each floating-point result: the dtype each
    step of the arithmetic ran in (a mixed FP16 and FP32 addition promotes to
    FP32 and computes there), whatever dtype the call returns.

    Examples
    --------
    >>> gru = nn.GRU(4, 4)
    >>> computes = ComputeDtypes()
    >>> with torch.autocast("cpu", dtype=torch.float16), computes:
    ...     computes.begin()
    ...     out, _ = gru(torch.randn(3, 2, 4))
    ...     sorted(computes.end())
    ['float16', 'float32']
    >>> out.dtype  # it computed in FP16 and returned FP32
    torch.float32
    """

    def __init__(self) -> None:
        super().__init__()
        self._seen: set[str] | None = None

    def begin(self) -> None:
        """Start collecting."""
        self._seen = set()

    def end(self) -> set[str]:
        """Stop collecting; return the dtype names seen since :meth:`begin`.

        Returns
        -------
        set of str
            The dtype names of the floating-point results of the arithmetic.
        """
        seen, self._seen = self._seen or set(), None
        return seen

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if (
            self._seen is not None
            and func.namespace == "aten"
            and not func.is_view
            and func.overloadpacket.__name__ not in _NO_ARITHMETIC
        ):
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor) and t.is_floating_point():
                    self._seen.add(dtype_name(t.dtype))
        return out


def _fake_cuda(value: Any) -> Any:
    """A fake CUDA tensor shaped like ``value`` (inside a ``FakeTensorMode``); others unchanged."""
    if isinstance(value, torch.Tensor):
        return torch.empty(value.shape, dtype=value.dtype, device="cuda")
    return value


def cuda_autocast_dtype(
    fn: Callable[..., Any], *args: Any, dtype: torch.dtype | str = torch.float16
) -> CudaChoice:
    """The dtype CUDA autocast gives ``fn(*args)``, decided by torch's dispatcher without a GPU.

    Each tensor in ``args`` is replaced by a fake CUDA tensor of the same
    shape and dtype (``torch._subclasses.fake_tensor.FakeTensorMode``): it
    carries CUDA's dispatch keys but no data, so nothing is computed and no
    GPU is needed. CUDA autocast is switched on with
    :func:`torch.set_autocast_enabled` (the ``torch.autocast`` context turns
    itself off where no GPU is present) and restored afterwards. The answer is
    torch's own: the op lists compiled into the installed torch.

    Decide single ops or small functional calls. Ops whose CUDA kernel
    selection needs a GPU (``batch_norm`` in training mode, whole transformer
    layers) give :data:`NOT_KNOWN`; an error that is ``fn``'s own (a
    ``TypeError``, an ``IndexError``) propagates. Never run a backward pass in
    ``fn``: on fake CUDA tensors it aborts the process.

    Parameters
    ----------
    fn : callable
        Called once as ``fn(*args)`` under fake CUDA autocast; it returns a
        tensor (or a tuple whose first item is one).
    *args
        Its arguments; tensors stand for their shape and dtype only.
    dtype : {"fp16", "bf16"} or torch.dtype, default torch.float16
        The autocast dtype.

    Returns
    -------
    CudaChoice
        ``dtype`` (a dtype name, ``"refused"`` or :data:`NOT_KNOWN`) and ``error``.

    Raises
    ------
    ValueError
        If ``dtype`` is not a half format.
    TypeError
        If ``fn`` is not callable.

    Examples
    --------
    >>> x, w = torch.randn(8, 16), torch.randn(4, 16)
    >>> cuda_autocast_dtype(F.linear, x, w).dtype
    'float16'
    >>> cuda_autocast_dtype(torch.softmax, x, -1, dtype=torch.bfloat16).dtype
    'float32'
    >>> choice = cuda_autocast_dtype(F.binary_cross_entropy, x.sigmoid(), x.sigmoid())
    >>> choice.dtype, "unsafe to autocast" in choice.error
    ('refused', True)
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    dtype = dtype_of(dtype)
    was_enabled = torch.is_autocast_enabled("cuda")
    was_dtype = torch.get_autocast_dtype("cuda")
    with FakeTensorMode():
        fake = [_fake_cuda(a) for a in args]
        torch.set_autocast_dtype("cuda", dtype)
        torch.set_autocast_enabled("cuda", True)
        try:
            out = fn(*fake)
        except (RuntimeError, NotImplementedError) as exc:  # fake-tensor errors are both
            message = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            if "unsafe to autocast" in message:
                return CudaChoice("refused", message)
            return CudaChoice(NOT_KNOWN, message)
        finally:
            torch.set_autocast_enabled("cuda", was_enabled)
            torch.set_autocast_dtype("cuda", was_dtype)
            torch.clear_autocast_cache()
    if isinstance(out, tuple | list):
        out = out[0]
    return CudaChoice(dtype_name(out.dtype), None)


def _linear_then(
    call: Callable[[dict[str, torch.Tensor], torch.Tensor], torch.Tensor],
) -> Callable[..., torch.Tensor]:
    """``call`` on the inputs, with ``h`` the linear layer's output under the same autocast."""

    def run(*values: torch.Tensor) -> torch.Tensor:
        t = dict(zip(_INPUT_NAMES, values, strict=True))
        return call(t, F.linear(t["x"], t["w"]))

    return run


def cuda_op_dtypes(dtype: torch.dtype | str = torch.float16) -> list[dict[str, Any]]:
    """The dtype CUDA autocast gives each op of :data:`OPS`, decided by torch without a GPU.

    Each op meets the inputs :func:`op_dtypes` gives it, as fake CUDA tensors
    (see :func:`cuda_autocast_dtype`).

    Parameters
    ----------
    dtype : {"fp16", "bf16"} or torch.dtype, default torch.float16
        The autocast dtype.

    Returns
    -------
    list of dict
        One row per op: ``op``, ``cuda`` (a dtype name or ``"refused"``)
        and ``error`` (torch's message when it refused, else ``None``).

    Examples
    --------
    >>> rows = {r["op"]: r["cuda"] for r in cuda_op_dtypes(torch.float16)}
    >>> rows["linear"], rows["relu"], rows["softmax"], rows["binary_cross_entropy"]
    ('float16', 'float16', 'float32', 'refused')
    """
    dtype = dtype_of(dtype)
    inputs = _inputs(torch.device("cpu"))
    values = [inputs[name] for name in _INPUT_NAMES]
    rows = []
    for op, call in _OP_CALLS.items():
        choice = cuda_autocast_dtype(_linear_then(call), *values, dtype=dtype)
        rows.append({"op": op, "cuda": choice.dtype, "error": choice.error})
    return rows


def op_dtypes(
    dtype: torch.dtype = torch.float16, device: torch.device | str | None = None
) -> list[dict[str, Any]]:
    """Run each op of :data:`OPS` under autocast to ``dtype`` on ``device``, and record its output dtype.

    Parameters
    ----------
    dtype : {"fp16", "bf16"} or torch.dtype, default torch.float16
        The autocast dtype.
    device : torch.device or str, optional
        Where to run (CPU and CUDA autocast use different op lists).

    Returns
    -------
    list of dict
        One row per op: ``op``; ``produced``, the output's dtype name, or
        ``"refused"`` if autocast raised (``error`` then holds the message,
        else ``None``); ``cuda``, the dtype CUDA autocast gives it, as torch
        decides it (:func:`cuda_op_dtypes`); and ``same_as_cuda``, whether the
        two agree. On a CUDA device the two are the same run twice over.

    Raises
    ------
    ValueError
        If ``dtype`` is not a half format.

    Examples
    --------
    >>> rows = {r["op"]: r for r in op_dtypes(torch.float16, device="cpu")}
    >>> rows["matmul"]["produced"], rows["mse_loss"]["produced"]
    ('float16', 'float32')
    >>> rows["softmax"]["produced"], rows["softmax"]["cuda"]
    ('float16', 'float32')
    """
    dtype = dtype_of(dtype)
    device = resolve_device(device)
    inputs = _inputs(device)
    cuda = {r["op"]: r["cuda"] for r in cuda_op_dtypes(dtype)}
    rows = []
    for op, call in _OP_CALLS.items():
        error = None
        with torch.autocast(device.type, dtype=dtype):
            h = F.linear(inputs["x"], inputs["w"])
            try:
                produced = dtype_name(call(inputs, h).dtype)
            except RuntimeError as exc:  # CUDA refuses binary_cross_entropy
                produced, error = "refused", str(exc).strip().splitlines()[0]
        rows.append(
            {
                "op": op,
                "produced": produced,
                "error": error,
                "cuda": cuda[op],
                "same_as_cuda": produced == cuda[op],
            }
        )
    return rows


# --------------------------------------------------------------------------- one step


def make_regression_problem(
    n_samples: int = 256,
    n_features: int = 16,
    seed: int = 0,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return a small regression task: ``X ~ N(0, 1)``, ``y = tanh(X @ w)`` for a random ``w``.

    Parameters
    ----------
    n_samples : int, default 256
        Rows.
    n_features : int, default 16
        Columns of ``X``.
    seed : int, default 0
        Seed of a private generator; the global RNG is left alone.
    device : torch.device or str, optional
        Where to put the data.

    Returns
    -------
    X : torch.Tensor
        Shape ``(n_samples, n_features)``.
    y : torch.Tensor
        Shape ``(n_samples, 1)``, in ``[-1, 1]``.

    Raises
    ------
    ValueError
        If a count is below 1 or ``seed`` is outside ``[0, 2**64 - 1]``.

    Examples
    --------
    >>> X, y = make_regression_problem(device="cpu")
    >>> tuple(X.shape), tuple(y.shape), bool(y.abs().max() <= 1)
    ((256, 16), (256, 1), True)
    """
    check_int("n_samples", n_samples, minimum=1)
    check_int("n_features", n_features, minimum=1)
    check_seed("seed", seed)
    device = resolve_device(device)
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n_samples, n_features, generator=g)
    y = torch.tanh(X @ torch.randn(n_features, 1, generator=g))
    return X.to(device), y.to(device)


def _weight_grad_hooks(
    loss: torch.Tensor, params: list[nn.Parameter], seen: list[torch.dtype]
) -> None:
    """Record the dtype of the gradient reaching each autocast cast of a parameter.

    Under autocast a weight enters an op through a cast (``ToCopyBackward``
    in the graph); the gradient the backward pass computes for the cast copy
    arrives at that node before it is converted to the parameter's dtype.
    """
    ids = {id(p) for p in params}
    stack, visited = [loss.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in visited:
            continue
        visited.add(node)
        for parent, _ in node.next_functions:
            leaf = getattr(parent, "variable", None)
            if node.name().startswith("ToCopyBackward") and id(leaf) in ids:
                node.register_prehook(lambda grads: seen.append(grads[0].dtype))
            stack.append(parent)


def _names(dtypes: Any) -> str:
    return ", ".join(sorted({dtype_name(d) for d in dtypes})) or "—"


def step_dtypes(
    dtype: torch.dtype = torch.float16, device: torch.device | str | None = None
) -> list[dict[str, str]]:
    """Return the dtype of each kind of tensor in one mixed-precision Adam step.

    The step is the book's loop on a small MLP: forward and loss (MSE) under
    ``torch.autocast(device.type, dtype=dtype)``, then
    ``scaler.scale(loss).backward()``, ``scaler.step(optimizer)`` and
    ``scaler.update()`` with ``torch.amp.GradScaler(device.type)`` (disabled
    for BF16, which needs no scaling).

    Parameters
    ----------
    dtype : {"fp16", "bf16"} or torch.dtype, default torch.float16
        The autocast dtype.
    device : torch.device or str, optional
        Where to run.

    Returns
    -------
    list of dict
        One row per tensor: ``tensor``, ``when`` (the phase it lives in) and
        ``dtype`` (the dtype names seen).

    Raises
    ------
    ValueError
        If ``dtype`` is not a half format.

    Examples
    --------
    >>> for row in step_dtypes(torch.float16, device="cpu"):
    ...     print(f"{row['tensor']:<30} {row['dtype']}")
    parameters (weights, biases)   float32
    activations (layer outputs)    float16
    loss                           float32
    activation gradients           float16
    weight gradients, as computed  float16
    weight gradients in .grad      float32
    Adam exp_avg (m)               float32
    Adam exp_avg_sq (v)            float32
    """
    dtype = dtype_of(dtype)
    device = resolve_device(device)
    model = make_mlp(16, 32, 2, device=device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
    X, y = make_regression_problem(64, 16, device=device)
    params = list(model.parameters())

    activations: list[torch.dtype] = []
    act_grads: list[torch.dtype] = []

    def record(module: nn.Module, inputs: Any, output: torch.Tensor) -> None:
        activations.append(output.dtype)
        output.register_hook(lambda grad: act_grads.append(grad.dtype))

    handles = [m.register_forward_hook(record) for m in model]
    weight_grads: list[torch.dtype] = []
    try:
        with torch.autocast(device.type, dtype=dtype):  # forward and loss only
            loss = F.mse_loss(model(X), y)
        _weight_grad_hooks(loss, params, weight_grads)
        scaler.scale(loss).backward()
        dot_grad = [p.grad.dtype for p in params]
        scaler.step(optimizer)
        scaler.update()
    finally:
        for handle in handles:
            handle.remove()
    state = [optimizer.state[p] for p in params]
    return [
        {"tensor": "parameters (weights, biases)", "when": "whole run", "dtype": _names(p.dtype for p in params)},
        {"tensor": "activations (layer outputs)", "when": "forward", "dtype": _names(activations)},
        {"tensor": "loss", "when": "forward", "dtype": _names([loss.dtype])},
        {"tensor": "activation gradients", "when": "backward", "dtype": _names(act_grads)},
        {"tensor": "weight gradients, as computed", "when": "backward", "dtype": _names(weight_grads)},
        {"tensor": "weight gradients in .grad", "when": "after backward", "dtype": _names(dot_grad)},
        {"tensor": "Adam exp_avg (m)", "when": "optimizer step", "dtype": _names(s["exp_avg"].dtype for s in state)},
        {"tensor": "Adam exp_avg_sq (v)", "when": "optimizer step", "dtype": _names(s["exp_avg_sq"].dtype for s in state)},
    ]  # fmt: skip


# --------------------------------------------------------------------------- choices

CHOICES: Mapping[str, str] = {
    "fp32": "full FP32",
    "half": ".half() everywhere",
    "half_scaler": ".half() + GradScaler",
    "autocast_fp16": "autocast FP16 + GradScaler",
    "autocast_bf16": "autocast BF16",
}
"""The ways to train :func:`train_choice` knows, with their labels."""


def train_choice(
    choice: str,
    *,
    steps: int = 60,
    lr: float = 1e-3,
    device: torch.device | str | None = None,
) -> dict[str, Any]:
    """Train a small MLP with Adam on :func:`make_regression_problem` one way.

    Every choice starts from the same weights.

    Parameters
    ----------
    choice : str
        A key of :data:`CHOICES`: ``"fp32"`` (no autocast); ``"half"``
        (``model.half()`` and FP16 data, plain ``optimizer.step()``);
        ``"half_scaler"`` (the same with ``torch.amp.GradScaler``);
        ``"autocast_fp16"`` (autocast FP16 with a GradScaler);
        ``"autocast_bf16"`` (autocast BF16, no scaler).
    steps : int, default 60
        Optimizer steps.
    lr : float, default 1e-3
        Adam's learning rate.
    device : torch.device or str, optional
        Where to train.

    Returns
    -------
    dict
        ``choice`` (its label), ``params`` (the parameters' dtype), ``scaler``
        (whether a GradScaler was used), ``first_loss`` and ``final_loss``
        (``None`` if no step finished), ``steps_done``, ``nonfinite_at`` (the
        first step whose loss was inf or NaN, else ``None``), ``error``
        (``"Type: message"`` of an exception, else ``None``) and ``trained``
        (the final loss is finite and below half the first).

    Raises
    ------
    ValueError
        If ``choice`` is unknown or ``steps`` below 1.

    Examples
    --------
    >>> row = train_choice("half_scaler", steps=2, device="cpu")
    >>> row["error"], row["trained"]
    ('ValueError: Attempting to unscale FP16 gradients.', False)
    """
    check_choice("choice", choice, CHOICES)
    check_int("steps", steps, minimum=1)
    device = resolve_device(device)
    X, y = make_regression_problem(device=device)
    model = make_mlp(X.shape[1], 64, 2, device=device)
    if choice in ("half", "half_scaler"):
        model.half()
        X, y = X.half(), y.half()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    scaler = None
    if choice in ("half_scaler", "autocast_fp16"):
        scaler = torch.amp.GradScaler(device.type)
    # "autocast_fp16" -> torch.float16; the other choices run without autocast
    autocast = (
        dtype_of(choice.removeprefix("autocast_")) if choice.startswith("autocast_") else None
    )

    losses: list[float] = []
    error = None
    try:
        for _ in range(steps):
            optimizer.zero_grad()
            with torch.autocast(
                device.type, dtype=autocast or torch.float16, enabled=bool(autocast)
            ):
                loss = F.mse_loss(model(X), y)
            if scaler is None:
                loss.backward()
                optimizer.step()
            else:
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            losses.append(float(loss.detach()))
    except (RuntimeError, ValueError) as exc:
        error = f"{type(exc).__name__}: {exc}"
    nonfinite = [i for i, v in enumerate(losses, start=1) if not math.isfinite(v)]
    first = losses[0] if losses else None
    final = losses[-1] if losses else None
    return {
        "choice": CHOICES[choice],
        "params": dtype_name(next(model.parameters()).dtype),
        "scaler": scaler is not None,
        "first_loss": first,
        "final_loss": final,
        "steps_done": len(losses),
        "nonfinite_at": nonfinite[0] if nonfinite else None,
        "error": error,
        "trained": final is not None and math.isfinite(final) and final < 0.5 * first,
    }


def compare_choices(
    steps: int = 60, device: torch.device | str | None = None
) -> list[dict[str, Any]]:
    """Run :func:`train_choice` for every key of :data:`CHOICES`, in order.

    Parameters
    ----------
    steps : int, default 60
        Optimizer steps of each run.
    device : torch.device or str, optional
        Where to train.

    Returns
    -------
    list of dict
        One :func:`train_choice` row per choice.

    Raises
    ------
    ValueError
        If ``steps`` is below 1.

    Examples
    --------
    >>> [r["trained"] for r in compare_choices(steps=40, device="cpu")]
    [True, False, False, True, True]
    """
    check_int("steps", steps, minimum=1)
    return [train_choice(choice, steps=steps, device=device) for choice in CHOICES]
