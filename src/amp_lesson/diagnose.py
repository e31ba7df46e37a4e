# One module: the book's instruments pointed at the reader's own model, in one call.
"""What FP16 and BF16 would do to *your* model, measured on one batch.

:func:`diagnose` runs the instruments of the book on a model and a batch
the caller gives, each on a copy of the model (the caller's model and
optimizer are never touched), and returns a :class:`Diagnosis`:

- ``autocast``: every op the forward pass and the loss run, the dtype each
  ran in under :func:`torch.autocast` to FP16 and to BF16 on this device, and
  the dtype CUDA autocast gives it, decided by torch on fake CUDA tensors
  (:func:`amp_lesson.autocast.cuda_autocast_dtype`);
- ``gradients``: per parameter, the share of its non-zero FP32 gradient
  values that FP16 flushes to zero, unscaled and at the loss scale a
  :class:`torch.amp.GradScaler` settles on, that BF16 flushes, and that
  overflow FP16 at that scale, with the ``log2`` histogram behind them;
- ``activations``: per module, the largest ``|output|`` against FP16's
  largest value, and the share of its non-zero output values below FP16's
  smallest subnormal;
- ``training``: FP32, FP16 with a ``GradScaler`` and BF16 for ``steps``
  steps from the same weights, as :func:`amp_lesson.recipe.train_mixed_precision`
  runs them;
- ``memory``: bytes per parameter for the optimizer, and the activation
  memory kept for backward in each dtype, measured;
- ``recommendation``: BF16, FP16 with a scaler (and its ``init_scale``) or
  FP32, chosen from those numbers by the rules of :data:`RULES`.

>>> from amp_lesson.models import make_mlp
>>> model = make_mlp(8, 16, out_features=2, device="cpu")
>>> g = torch.Generator().manual_seed(0)
>>> x = torch.randn(32, 8, generator=g)
>>> y = torch.randint(0, 2, (32,), generator=g)
>>> d = diagnose(model, (x, y), torch.nn.functional.cross_entropy, steps=20)
>>> d.recommendation["choice"], d.training["fp16"]["skipped"]
('bf16', 0)

Two steps move the FP32 loss too little to compare the runs by, so nothing
shows that a half format trains this model as FP32 does:

>>> short = diagnose(model, (x, y), torch.nn.functional.cross_entropy, steps=2)
>>> short.recommendation["choice"], short.recommendation["because"]
('fp32', ['fp16_tracks_fp32', 'bf16_tracks_fp32'])
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_leaves, tree_unflatten

from amp_lesson._checks import check_int, check_optimizer, check_seed
from amp_lesson.autocast import NOT_KNOWN, cuda_autocast_dtype
from amp_lesson.formats import dtype_name, dtype_of
from amp_lesson.gradients import cast_shares, log2_histogram
from amp_lesson.memory import _measure_saved

__all__ = [
    "FP16_MAX",
    "FP16_SMALLEST_SUBNORMAL",
    "LOST_SHARE",
    "MOVED_SHARE",
    "RULES",
    "TRACKING_SHARE",
    "Diagnosis",
    "Rule",
    "diagnose",
]

FP16_MAX = float(torch.finfo(torch.float16).max)
"""The largest finite FP16 value (65504); an activation above it is ``inf`` in FP16."""

FP16_SMALLEST_SUBNORMAL = 2.0**-24
"""The smallest FP16 subnormal (``2**-24``); a value at or below half of it is zero in FP16."""

LOST_SHARE = 1e-3
"""A format keeps a model's gradients when it loses at most this share of the non-zero values."""

TRACKING_SHARE = 0.1
"""A run tracks FP32 when its final loss is within this share of how far FP32 moved the loss."""

MOVED_SHARE = 0.01
"""Runs are compared only where FP32 moved the loss by at least this share of its first value."""

_HALVES = {"fp16": torch.float16, "bf16": torch.bfloat16}
_HIGHEST_EXPONENT = 40  # the search for the settled scale stops here
_LOWEST_EXPONENT = -24
_HIST_LOW, _HIST_HIGH = -140, 20  # the histograms' log2 range: BF16's subnormals and up


class Rule(NamedTuple):
    """One rule the recommendation is chosen by, with the words for either outcome.

    Parameters
    ----------
    key : str
        Its name in ``Diagnosis.recommendation["rules"]``.
    tests : str
        What its condition tests, in words.
    says, otherwise : str
        The sentence when the condition holds, and when it does not.
    """

    key: str
    tests: str
    says: str
    otherwise: str


_PER = f"one in {1 / LOST_SHARE:,.0f} of any parameter's non-zero gradient values"
_FOLLOWS = (
    f"its final loss differs from FP32's by at most {TRACKING_SHARE:.0%} of how far FP32 "
    "training moved the loss"
)
_NOT_FOLLOWS = (
    f"its loss is not finite, or its final loss differs from FP32's by more than "
    f"{TRACKING_SHARE:.0%} of how far FP32 training moved the loss, or that move was under "
    f"{MOVED_SHARE:.0%} of the first loss, too small to tell"
)

RULES: tuple[Rule, ...] = (
    Rule(
        "forward_fits_fp16",
        "no module's output in the FP32 forward pass exceeds FP16_MAX, and every op of the "
        "forward pass and loss under FP16 autocast gives finite values",
        "The forward pass fits FP16's range: no output exceeds it, and under FP16 autocast "
        "every op gave finite values.",
        "The forward pass does not fit FP16's range: an output exceeds it, or an op under "
        "FP16 autocast gave inf or NaN.",
    ),
    Rule(
        "fp16_loses_unscaled_gradients",
        "at scale 1, the cast to FP16 zeroes more than LOST_SHARE of some parameter's "
        "non-zero FP32 gradient values",
        f"Without a loss scale, FP16 would flush more than {_PER} to zero.",
        f"Even without a loss scale, FP16 flushes at most {_PER} to zero.",
    ),
    Rule(
        "scaler_keeps_fp16_gradients",
        "a settled scale exists (an FP16 step's gradient is finite at some scale), and at it "
        "the cast to FP16 zeroes at most LOST_SHARE of each parameter's non-zero gradient "
        "values",
        f"At the scale a GradScaler settles on, FP16 flushes at most {_PER} to zero.",
        f"FP16 flushes more than {_PER} to zero even at the scale a GradScaler settles on, "
        "or no scale keeps an FP16 step's gradient finite.",
    ),
    Rule(
        "bf16_keeps_gradients",
        "the cast to BF16 zeroes at most LOST_SHARE of each parameter's non-zero FP32 "
        "gradient values",
        f"BF16 flushes at most {_PER} to zero, without any scaling.",
        f"BF16 flushes more than {_PER} to zero.",
    ),
    Rule(
        "fp16_tracks_fp32",
        "FP32 moved the loss by at least MOVED_SHARE of its first value, and the FP16 run's "
        "losses are finite and its final loss within TRACKING_SHARE of that move from FP32's",
        f"Training in FP16 with a GradScaler follows FP32 training: {_FOLLOWS}.",
        f"Training in FP16 with a GradScaler was not shown to follow FP32 training: "
        f"{_NOT_FOLLOWS}.",
    ),
    Rule(
        "bf16_tracks_fp32",
        "FP32 moved the loss by at least MOVED_SHARE of its first value, and the BF16 run's "
        "losses are finite and its final loss within TRACKING_SHARE of that move from FP32's",
        f"Training in BF16 follows FP32 training: {_FOLLOWS}.",
        f"Training in BF16 was not shown to follow FP32 training: {_NOT_FOLLOWS}.",
    ),
    Rule(
        "bf16_supported",
        "the device runs BF16 (a CPU, or a GPU for which "
        "torch.cuda.is_bf16_supported(including_emulation=False))",
        "This device runs BF16.",
        "This device does not run BF16 natively.",
    ),
)
"""The rules of the recommendation; :func:`diagnose` evaluates each on the numbers it measured.

The choice is the first that applies:

1. **BF16** if ``bf16_supported``, ``bf16_keeps_gradients`` and
   ``bf16_tracks_fp32`` hold. BF16 comes first because it needs no loss
   scale and skips no step: its normal numbers reach as far down as FP32's.
   It keeps 8 significant bits to FP16's 11; the training runs are where
   that shows.
2. **FP16 with a GradScaler** if ``forward_fits_fp16``,
   ``scaler_keeps_fp16_gradients`` and ``fp16_tracks_fp32`` hold. Its
   ``init_scale`` is the settled scale where that is below GradScaler's
   default ``2**16`` (a scaler starting above it skips steps until it backs
   off there), else the default.
3. **FP32** otherwise: the measurements did not show that either half
   format trains this model as FP32 does.

``fp16_loses_unscaled_gradients`` says whether the loss scale matters for
this model; it does not enter the choice (FP16 always runs with a scaler).
Modules where an output beyond FP16's range starts are listed under
``keep_fp32``: under FP16, run them with ``torch.autocast(..., enabled=False)``
and cast their output down only where it fits.

>>> [rule.key for rule in RULES][:2]
['forward_fits_fp16', 'fp16_loses_unscaled_gradients']
"""


@dataclass(frozen=True)
class Diagnosis:
    """What :func:`diagnose` measured, section by section; ``print`` it for the report.

    Parameters
    ----------
    model : str
        The model's class name.
    device : str
        Where it ran.
    parameters : int
        Trainable parameter values.
    steps : int
        Training steps per run.
    seconds : float
        How long :func:`diagnose` ran.
    autocast, gradients, activations, training, memory, recommendation : dict
        The sections; see :func:`diagnose`.
    weights : dict
        For each run (``"fp32"``, ``"fp16"``, ``"bf16"``), its parameters after
        the last step (CPU copies, by name). Not in :meth:`to_dict`.
    """

    model: str
    device: str
    parameters: int
    steps: int
    seconds: float
    autocast: dict[str, Any]
    gradients: dict[str, Any]
    activations: dict[str, Any]
    training: dict[str, Any]
    memory: dict[str, Any]
    recommendation: dict[str, Any]
    weights: dict[str, dict[str, torch.Tensor]] = field(repr=False, default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Every section as plain Python values, without ``weights``.

        Returns
        -------
        dict
            ``model``, ``device``, ``parameters``, ``steps``, ``seconds`` and
            the six sections; ``json.dumps`` takes it as it is.
        """
        return {
            "model": self.model,
            "device": self.device,
            "parameters": self.parameters,
            "steps": self.steps,
            "seconds": self.seconds,
            "autocast": self.autocast,
            "gradients": self.gradients,
            "activations": self.activations,
            "training": self.training,
            "memory": self.memory,
            "recommendation": self.recommendation,
        }

    def __str__(self) -> str:
        return _report(self)

    def gradient_histogram(self, low: int = _HIST_LOW) -> tuple[list[int], list[float], float]:
        """The ``log2`` histogram of every parameter's FP32 gradient together.

        Parameters
        ----------
        low : int, default -140
            The first bin; the bins below it are added into it.

        Returns
        -------
        edges, shares, zero_share
            As :func:`~amp_lesson.gradients.log2_histogram` returns them, over
            all gradient values of the model.

        Raises
        ------
        ValueError
            If ``low`` is outside the recorded range, -140 to 19.
        """
        check_int("low", low)
        if not _HIST_LOW <= low < _HIST_HIGH:
            raise ValueError(f"low must be in [{_HIST_LOW}, {_HIST_HIGH - 1}], got {low}")
        rows = self.gradients["parameters"].values()
        total = sum(row["values"] for row in rows)
        counts = [0.0] * (_HIST_HIGH - _HIST_LOW)
        zero = 0.0
        for row in rows:
            histogram = row["histogram"]
            for i, share in enumerate(histogram["shares"]):
                counts[i] += share * row["values"]
            zero += histogram["zero"] * row["values"]
        cut = low - _HIST_LOW
        counts = [sum(counts[: cut + 1]), *counts[cut + 1 :]]
        return list(range(low, _HIST_HIGH)), [c / total for c in counts], zero / total

    def plot_gradients(
        self,
        ax: Any = None,
        dtype: str | torch.dtype = "fp16",
        *,
        label: str | None = None,
        overlay: bool = False,
    ) -> Any:
        """Draw :meth:`gradient_histogram` against ``dtype``'s range (FP16 from ``2**-50``).

        Parameters
        ----------
        ax : matplotlib.axes.Axes, optional
            Where to draw (default: new axes).
        dtype : {"fp16", "bf16"} or torch.dtype, default "fp16"
            The format whose limits to mark.
        label : str, optional
            The legend label (default: the model's class name).
        overlay : bool, default False
            Draw a dashed outline over axes that hold another model's
            histogram (see :func:`~amp_lesson.gradients.plot_gradient_histogram`).

        Returns
        -------
        matplotlib.axes.Axes
            The axes drawn on.
        """
        from amp_lesson.gradients import plot_gradient_histogram

        low = -50 if dtype_of(dtype) == torch.float16 else _HIST_LOW
        return plot_gradient_histogram(
            None, ax, dtype=dtype, histogram=self.gradient_histogram(low),
            label=label or self.model, overlay=overlay,
        )  # fmt: skip


# --------------------------------------------------------------------------- checks


def _call(model: nn.Module, inputs: Any) -> Any:
    """``model(inputs)``: a tuple or a list is spread, a dict passed by keyword."""
    if isinstance(inputs, Mapping):
        return model(**inputs)
    if isinstance(inputs, tuple | list):
        return model(*inputs)
    return model(inputs)


def _check(
    model: Any, batch: Any, loss_fn: Any, steps: Any, optimizer: Any, seed: Any
) -> tuple[torch.device, list[nn.Parameter]]:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    trainable = [p for p in model.parameters() if p.requires_grad]
    if not trainable:
        raise ValueError(
            "model must have trainable parameters (requires_grad=True), "
            f"got {type(model).__name__} with none"
        )
    dtypes = sorted({str(p.dtype) for p in trainable})
    if dtypes != ["torch.float32"]:
        raise ValueError(
            "model's trainable parameters must be torch.float32 (diagnose compares lower "
            f"precision with FP32 training), got {', '.join(dtypes)}"
        )
    devices = {p.device for p in trainable}
    if len(devices) != 1:
        where = ", ".join(sorted(str(d) for d in devices))
        raise ValueError(f"model's parameters must be on one device, got {where}")
    (device,) = devices
    if not (isinstance(batch, tuple | list) and len(batch) == 2):
        raise TypeError(f"batch must be a pair (inputs, targets), got {_shown(batch)}")
    for name, part in zip(("inputs", "targets"), batch, strict=True):
        tensors = [t for t in tree_leaves(part) if isinstance(t, torch.Tensor)]
        if name == "inputs" and not tensors:
            raise TypeError(f"batch's inputs must hold a tensor, got {_shown(part)}")
        for t in tensors:
            if t.device != device:
                raise ValueError(
                    f"batch's {name} must be on the model's device ({device}), got a "
                    f"tensor on {t.device}; move the batch with .to({str(device)!r})"
                )
    if not callable(loss_fn):
        raise TypeError(f"loss_fn must be callable, got {type(loss_fn).__name__}")
    check_int("steps", steps, minimum=1)
    if optimizer is not None:
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(
                f"optimizer must be a torch.optim.Optimizer or None, got {type(optimizer).__name__}"
            )
        check_optimizer("optimizer", optimizer, model)
    check_seed("seed", seed)
    return device, trainable


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'…' if len(text) > 60 else ''}"


def _loss(loss_fn: Callable[..., Any], output: Any, targets: Any) -> torch.Tensor:
    """``loss_fn(output, targets)``, refused unless it is a floating-point tensor of one value."""
    loss = loss_fn(output, targets)
    if not isinstance(loss, torch.Tensor) or not loss.is_floating_point() or loss.numel() != 1:
        got = (
            f"a {loss.dtype} tensor of shape {tuple(loss.shape)}"
            if isinstance(loss, torch.Tensor)
            else type(loss).__name__
        )
        raise ValueError(
            f"loss_fn must return the batch's mean loss, a floating-point tensor of one "
            f"value; got {got}; reduce it with .mean()"
        )
    return loss


# --------------------------------------------------------------------------- copies and seeds


class _Copy(NamedTuple):
    model: nn.Module
    optimizer: torch.optim.Optimizer | None


def _copy(model: nn.Module, optimizer: torch.optim.Optimizer | None) -> _Copy:
    """Model and optimizer copied together, so the copy's optimizer holds the copy's parameters.

    The caller's optimizer's state (momentum, Adam's moments) comes with it.
    """
    try:
        twin, twin_opt = copy.deepcopy((model, optimizer))
    except Exception as error:
        raise TypeError(
            f"model must be copyable with copy.deepcopy (diagnose works on copies): {error}"
        ) from error
    return _Copy(twin, twin_opt)


@contextmanager
def _seeded(seed: int, device: torch.device) -> Iterator[None]:
    """Seed the generators the run draws from (the CPU's, and the model's GPU's) and only
    those; each is restored after, so the caller's random state is left as it was.

    ``torch.manual_seed`` would also reseed every other GPU, which ``fork_rng`` does not
    restore.
    """
    devices = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.random.default_generator.manual_seed(seed)
        if device.type == "cuda":
            with torch.cuda.device(device):
                torch.cuda.manual_seed(seed)
        yield


# --------------------------------------------------------------------------- autocast


_CASTS = frozenset({"to", "float", "half", "bfloat16", "double", "type", "type_as", "cpu", "cuda"})
_NOT_OPS = frozenset(
    {"getitem", "setitem", "clone", "contiguous", "detach", "zeros_like", "ones_like",
     "requires_grad_", "zero_", "fill_", "copy_", "detach_", "retain_grad",
     "empty_like", "full_like", "new_zeros", "new_ones", "new_empty", "new_full", "new_tensor",
     "reshape", "flatten", "view", "view_as", "permute", "transpose", "expand", "expand_as"}
)  # fmt: skip


def _op_name(func: Callable[..., Any]) -> str:
    """``F.linear`` -> ``linear``, ``Tensor.__add__`` -> ``add``, ``Tensor.__iadd__`` -> ``add_``."""
    name = getattr(func, "__name__", repr(func))
    if name.startswith("__i") and name.endswith("__") and name not in ("__index__", "__init__"):
        return name[3:-2] + "_"
    if name.startswith("__r") and name.endswith("__") and name != "__repr__":
        return name[3:-2]
    return name.strip("_") if name.startswith("__") else name


class _OpRecorder(TorchFunctionMode):
    """Records each torch call that computes a new floating tensor from a floating one."""

    def __init__(self, where: list[str], dtype: torch.dtype, decide_cuda: bool) -> None:
        super().__init__()
        self.where, self.dtype, self.decide_cuda = where, dtype, decide_cuda
        self.calls: list[dict[str, Any]] = []
        self._cuda: dict[str, str] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = _op_name(func)
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
        self.calls.append(
            {
                "op": name,
                "module": self.where[-1],
                "inputs": sorted({dtype_name(t.dtype) for t in floats}),
                "here": dtype_name(result.dtype),
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
def _module_names(model: nn.Module) -> Iterator[list[str]]:
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


def _paired(
    fp16: list[dict[str, Any]], bf16: list[dict[str, Any]], fp32: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The FP16 and BF16 runs' calls side by side, matched by op, module and how many came
    before, each with the count of inf and NaN values the same call gave in FP32.

    A model that branches on its activations' dtype (a clamp for FP16 only, say) calls
    other ops in the runs; a call one run made and another did not has ``None`` in the
    other's columns.
    """

    def keyed(calls: list[dict[str, Any]]) -> dict[tuple[str, str, int], dict[str, Any]]:
        seen: dict[tuple[str, str], int] = {}
        out = {}
        for call in calls:
            n = seen[call["op"], call["module"]] = seen.get((call["op"], call["module"]), -1) + 1
            out[call["op"], call["module"], n] = call
        return out

    by_fmt = {"fp16": keyed(fp16), "bf16": keyed(bf16), "fp32": keyed(fp32)}
    order = list(by_fmt["fp16"]) + [k for k in by_fmt["bf16"] if k not in by_fmt["fp16"]]
    rows = []
    for key in order:
        row: dict[str, Any] = {"op": key[0], "module": key[1]}
        reference = by_fmt["fp32"].get(key)
        row["nonfinite_fp32"] = reference["nonfinite"] if reference else None
        for fmt in ("fp16", "bf16"):
            call = by_fmt[fmt].get(key)
            row[f"inputs_{fmt}"] = call["inputs"] if call else None
            row[fmt] = call["here"] if call else None
            row[f"cuda_{fmt}"] = call["cuda"] if call else None
            row[f"nonfinite_{fmt}"] = call["nonfinite"] if call else None
        rows.append(row)
    return rows


def _autocast_section(
    model: nn.Module, optimizer: torch.optim.Optimizer | None, batch: Any, loss_fn: Callable,
    device: torch.device, seed: int,
) -> dict[str, Any]:  # fmt: skip
    """Run the forward pass and the loss under autocast to FP16 and BF16 on copies."""
    runs = {}
    for fmt, dtype in (*_HALVES.items(), ("fp32", torch.float32)):
        twin = _copy(model, optimizer).model
        with _seeded(seed, device), _module_names(twin) as where:
            recorder = _OpRecorder(
                where, dtype, decide_cuda=device.type != "cuda" and dtype != torch.float32
            )
            half = dtype != torch.float32  # FP32: the reference for inf and NaN
            with torch.autocast(device.type, dtype=dtype, enabled=half), recorder:
                try:
                    _loss(loss_fn, _call(twin, batch[0]), batch[1])
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
        runs[fmt] = recorder.calls
    rows = _paired(runs["fp16"], runs["bf16"], runs["fp32"])
    ops: dict[str, dict[str, Any]] = {}
    for row in rows:
        summary = ops.setdefault(row["op"], {"calls": 0})
        summary["calls"] += 1
        for column in ("fp16", "bf16", "cuda_fp16", "cuda_bf16"):
            counts = summary.setdefault(column, {})
            if row[column] is not None:
                counts[row[column]] = counts.get(row[column], 0) + 1
    stayed = sorted(op for op, s in ops.items() if set(s["fp16"]) == {"float32"})
    cuda_stayed = sorted(op for op, s in ops.items() if set(s["cuda_fp16"]) == {"float32"})
    refused = sorted(op for op, s in ops.items() if "refused" in {*s["cuda_fp16"], *s["cuda_bf16"]})
    # An op overflowed FP16 where its output holds more inf or NaN than in FP32 (a causal
    # mask's -inf is there in both).
    first_bad = next(
        (r for r in rows if (r["nonfinite_fp16"] or 0) > (r["nonfinite_fp32"] or 0)), None
    )
    return {
        "device": device.type,
        "calls": rows,
        "ops": ops,
        "stayed_fp32": stayed,
        "cuda_stayed_fp32": cuda_stayed,
        "cuda_refuses": refused,
        "fp16_forward_finite": first_bad is None,
        "first_nonfinite_fp16": None
        if first_bad is None
        else {"op": first_bad["op"], "module": first_bad["module"]},
    }


# --------------------------------------------------------------------------- gradients, activations


@contextmanager
def _output_ranges(model: nn.Module) -> Iterator[dict[str, dict[str, Any]]]:
    """Per module, the largest ``|output|`` and ``|input|``, and the count of non-zero output
    values below 2**-24."""
    found: dict[str, dict[str, Any]] = {}
    handles = []

    def floats(value: Any) -> list[torch.Tensor]:
        return [
            t.detach() for t in tree_leaves(value)
            if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel()
        ]  # fmt: skip

    for name, module in model.named_modules():

        def seen(_m: nn.Module, args: Any, kwargs: Any, out: Any, name: str = name) -> None:
            values = floats(out)
            if not values:
                return
            entry = found.setdefault(
                name,
                {"type": type(_m).__name__, "max_abs": 0.0, "max_in": 0.0, "nonzero": 0,
                 "tiny": 0},
            )  # fmt: skip
            for t in floats((args, kwargs)):
                entry["max_in"] = max(entry["max_in"], float(t.abs().max()))
            for t in values:
                mag = t.abs().float()
                nonzero = mag > 0
                entry["max_abs"] = max(entry["max_abs"], float(mag.max()))
                entry["nonzero"] += int(nonzero.sum())
                entry["tiny"] += int((nonzero & (mag < FP16_SMALLEST_SUBNORMAL)).sum())

        handles.append(module.register_forward_hook(seen, with_kwargs=True))
    try:
        yield found
    finally:
        for handle in handles:
            handle.remove()


def _finite_grads(model: nn.Module) -> bool:
    """Whether every gradient value is finite (a sparse gradient's stored values)."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    values = [g.coalesce().values() if g.is_sparse else g for g in grads]
    return all(bool(torch.isfinite(v).all()) for v in values)


def _settled_scale(
    model: nn.Module, optimizer: torch.optim.Optimizer | None, batch: Any, loss_fn: Callable,
    device: torch.device, seed: int, largest: float,
) -> tuple[float | None, int]:  # fmt: skip
    """The largest power of two, up to 2**40, at which one FP16 step's gradient is finite.

    A ``GradScaler`` with its defaults halves its scale after every step
    whose gradient overflows and doubles it after 2000 clean ones, so over a
    long run it climbs to this scale and backs off from the next. Each probe
    is one real scaled backward pass under FP16 autocast on a copy, through
    ``GradScaler.scale``. The first probe is the scale at which ``largest``,
    the largest FP32 gradient value, would just stay below FP16's maximum;
    the next ones step away from it by 1, 2, 4, ... powers of two until one
    overflows and one does not, and the search halves the exponents between
    them (a larger scale overflows whenever a smaller one does). Returns the
    scale (``None`` if even 2**-24 overflows) and the number of probes.
    """
    twin = _copy(model, optimizer).model
    probes = 0

    def finite(exponent: int) -> bool:
        nonlocal probes
        probes += 1
        twin.zero_grad(set_to_none=True)
        scaler = torch.amp.GradScaler(device.type, init_scale=2.0**exponent)
        with _seeded(seed, device):
            with torch.autocast(device.type, dtype=torch.float16):
                loss = _loss(loss_fn, _call(twin, batch[0]), batch[1])
            scaler.scale(loss).backward()
        return _finite_grads(twin)

    low, high = _LOWEST_EXPONENT - 1, _HIGHEST_EXPONENT + 1  # finite at low, not at high
    guess = _HIGHEST_EXPONENT
    if 0 < largest < math.inf:
        guess = math.floor(math.log2(FP16_MAX / largest))
    guess = min(max(guess, _LOWEST_EXPONENT), _HIGHEST_EXPONENT)
    # From the guess, steps of 1, 2, 4, ... away until the answer is bracketed, then halving.
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
    return (None if low < _LOWEST_EXPONENT else 2.0**low), probes


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def _gradient_sections(
    model: nn.Module, optimizer: torch.optim.Optimizer | None, batch: Any, loss_fn: Callable,
    device: torch.device, seed: int,
) -> tuple[dict[str, Any], dict[str, Any]]:  # fmt: skip
    """One FP32 step on a copy, the model as given: its gradient and every module's output."""
    twin = _copy(model, optimizer).model
    with _seeded(seed, device), _output_ranges(twin) as ranges:
        loss = _loss(loss_fn, _call(twin, batch[0]), batch[1])
        if not loss.requires_grad:
            raise ValueError(
                "loss_fn's loss must depend on the model's trainable parameters; it has no "
                "gradient (was the output detached, or computed under torch.no_grad()?)"
            )
        loss.backward()
    grads = {
        name: p.grad.detach().to_dense() if p.grad.is_sparse else p.grad.detach()
        for name, p in twin.named_parameters()
        if p.grad is not None
    }
    largest = max((float(g.abs().max()) for g in grads.values()), default=0.0)
    settled, probes = _settled_scale(model, optimizer, batch, loss_fn, device, seed, largest)
    params: dict[str, Any] = {}
    totals = {"nonzero": 0, "fp16": 0, "fp16_scaled": 0, "bf16": 0, "overflow": 0}
    for name, g in grads.items():
        fp16 = cast_shares(g, "fp16")
        bf16 = cast_shares(g, "bf16")
        scaled = cast_shares(g, "fp16", settled) if settled is not None else None
        edges, shares, zero = log2_histogram(g, _HIST_LOW, _HIST_HIGH)
        nz = fp16.nonzero
        params[name] = {
            "values": g.numel(),
            "nonzero": nz,
            "underflow_fp16": fp16.underflow,
            "underflow_fp16_scaled": None if scaled is None else scaled.underflow,
            "underflow_bf16": bf16.underflow,
            "overflow_fp16_scaled": None if scaled is None else scaled.overflow,
            "histogram": {"log2_edges": edges, "shares": shares, "zero": zero},
        }
        totals["nonzero"] += nz
        totals["fp16"] += round(fp16.underflow * nz)
        totals["bf16"] += round(bf16.underflow * nz)
        if scaled is not None:
            totals["fp16_scaled"] += round(scaled.underflow * nz)
            totals["overflow"] += round(scaled.overflow * nz)
    n = totals["nonzero"]

    def worst(key: str) -> dict[str, Any]:
        rows = [(row[key], name) for name, row in params.items() if row[key] is not None]
        share, name = max(rows, default=(0.0, None))
        return {"parameter": name, "share": share}

    gradients = {
        "loss": float(loss.detach()),
        "settled_scale": settled,
        "settled_scale_capped": settled == 2.0**_HIGHEST_EXPONENT,
        "scale_probes": probes,
        "parameters": params,
        "underflow_fp16": _share(totals["fp16"], n),
        "underflow_fp16_scaled": None if settled is None else _share(totals["fp16_scaled"], n),
        "underflow_bf16": _share(totals["bf16"], n),
        "overflow_fp16_scaled": None if settled is None else _share(totals["overflow"], n),
        "worst": {
            key: worst(key) for key in ("underflow_fp16", "underflow_fp16_scaled", "underflow_bf16")
        },
    }
    modules = {
        name: {
            "type": entry["type"],
            "max_abs": entry["max_abs"],
            "max_abs_input": entry["max_in"],
            "over_fp16_max": entry["max_abs"] > FP16_MAX,
            "below_fp16_subnormal": _share(entry["tiny"], entry["nonzero"]),
        }
        for name, entry in ranges.items()
    }
    top = max(modules.items(), key=lambda kv: kv[1]["max_abs"]) if modules else ("", {})
    # Where an overflow starts: a module whose output exceeds FP16's range from inputs within
    # it, and none of its submodules does so (the model and the blocks around it only pass
    # the overflow on, as do the modules after it).
    starts = {n for n, e in ranges.items() if e["max_abs"] > FP16_MAX >= e["max_in"]}
    starts = {n for n in starts if not any(o.startswith(f"{n}.") or (not n and o) for o in starts)}
    activations = {
        "fp16_max": FP16_MAX,
        "fp16_smallest_subnormal": FP16_SMALLEST_SUBNORMAL,
        "modules": modules,
        "largest": {"module": top[0], "max_abs": top[1].get("max_abs", 0.0)},
        "over_fp16_max": sorted(name for name, m in modules.items() if m["over_fp16_max"]),
        "overflow_starts": sorted(starts),
    }
    return gradients, activations


# --------------------------------------------------------------------------- training


def _train(
    model: nn.Module, optimizer: torch.optim.Optimizer | None, batch: Any, loss_fn: Callable,
    device: torch.device, dtype: torch.dtype, steps: int, seed: int,
) -> tuple[dict[str, Any], dict[str, torch.Tensor], _Copy]:  # fmt: skip
    """``steps`` steps on ``batch`` as :func:`~amp_lesson.recipe.train_mixed_precision` takes
    them (one micro-batch per step), on a copy, with what each step did."""
    net, opt = _copy(model, optimizer)
    if opt is None:
        opt = torch.optim.Adam([p for p in net.parameters() if p.requires_grad])
    half = dtype != torch.float32
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
    inputs, targets = batch
    losses, scales, skipped_at = [], [], []
    with _seeded(seed, device):
        net.train()
        opt.zero_grad()
        for step in range(1, steps + 1):
            with torch.autocast(device.type, dtype=dtype, enabled=half):
                loss = _loss(loss_fn, _call(net, inputs), targets) * 1.0  # the recipe's share
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
            final = float(_loss(loss_fn, _call(net, inputs), targets))
    weights = {name: p.detach().to("cpu", copy=True) for name, p in net.named_parameters()}
    run = {
        "losses": losses,
        "final_loss": final,
        "skipped": len(skipped_at),
        "skipped_steps": skipped_at,
        "scales": scales if scaler.is_enabled() else None,
        "final_scale": float(scaler.get_scale()) if scaler.is_enabled() else None,
    }
    return run, weights, _Copy(net, opt)


def _state_bytes(optimizer: torch.optim.Optimizer) -> int:
    return sum(
        t.untyped_storage().nbytes()
        for state in optimizer.state.values()
        for t in state.values()
        if isinstance(t, torch.Tensor)
    )


# --------------------------------------------------------------------------- rules


def _moved(fp32: dict[str, Any]) -> float:
    """How far FP32 training moved the loss, and whether that is enough to compare runs by."""
    return abs(fp32["final_loss"] - fp32["losses"][0])


def _tells(fp32: dict[str, Any]) -> bool:
    """Whether FP32's loss moved by at least MOVED_SHARE of its first value."""
    return math.isfinite(_moved(fp32)) and _moved(fp32) >= MOVED_SHARE * abs(fp32["losses"][0])


def _tracks(run: dict[str, Any], fp32: dict[str, Any]) -> bool:
    values = [*run["losses"], run["final_loss"]]
    if not _tells(fp32) or not all(math.isfinite(v) for v in values):
        return False
    return abs(run["final_loss"] - fp32["final_loss"]) <= TRACKING_SHARE * _moved(fp32)


def _gpu_runs_bf16(device: torch.device) -> bool:
    """Whether GPU ``device`` has BF16 arithmetic of its own (not emulated: a T4 or V100 has none)."""
    with torch.cuda.device(device):
        return torch.cuda.is_bf16_supported(including_emulation=False)


_DECIDING = (
    "bf16_supported", "bf16_keeps_gradients", "bf16_tracks_fp32", "forward_fits_fp16",
    "scaler_keeps_fp16_gradients", "fp16_tracks_fp32",
)  # fmt: skip


def _recommend(
    gradients: dict[str, Any], activations: dict[str, Any], training: dict[str, Any],
    device: torch.device, autocast: dict[str, Any],
) -> dict[str, Any]:  # fmt: skip
    settled = gradients["settled_scale"]
    worst = gradients["worst"]
    bf16_ok = device.type != "cuda" or _gpu_runs_bf16(device)
    holds = {
        "forward_fits_fp16": not activations["over_fp16_max"] and autocast["fp16_forward_finite"],
        "fp16_loses_unscaled_gradients": worst["underflow_fp16"]["share"] > LOST_SHARE,
        "scaler_keeps_fp16_gradients": settled is not None
        and worst["underflow_fp16_scaled"]["share"] <= LOST_SHARE,
        "bf16_keeps_gradients": worst["underflow_bf16"]["share"] <= LOST_SHARE,
        "fp16_tracks_fp32": _tracks(training["fp16"], training["fp32"]),
        "bf16_tracks_fp32": _tracks(training["bf16"], training["fp32"]),
        "bf16_supported": bf16_ok,
    }
    if holds["bf16_supported"] and holds["bf16_keeps_gradients"] and holds["bf16_tracks_fp32"]:
        choice = "bf16"
        because = ["bf16_supported", "bf16_keeps_gradients", "bf16_tracks_fp32"]
    elif (
        holds["forward_fits_fp16"]
        and holds["scaler_keeps_fp16_gradients"]
        and holds["fp16_tracks_fp32"]
    ):
        choice = "fp16"
        because = ["forward_fits_fp16", "scaler_keeps_fp16_gradients", "fp16_tracks_fp32"]
    else:  # the rules that failed: why neither half format was chosen
        choice = "fp32"
        because = [key for key in holds if key in _DECIDING and not holds[key]]
    rules = [
        {
            "key": rule.key,
            "tests": rule.tests,
            "holds": holds[rule.key],
            "says": rule.says,
            "otherwise": rule.otherwise,
            "words": rule.says if holds[rule.key] else rule.otherwise,
        }
        for rule in RULES
    ]
    return {
        "choice": choice,
        "autocast_dtype": {"bf16": "bfloat16", "fp16": "float16", "fp32": None}[choice],
        "scaler": {"init_scale": min(settled, 2.0**16)} if choice == "fp16" else None,
        "cuda_refuses": autocast["cuda_refuses"],
        "keep_fp32": activations["overflow_starts"],
        "because": because,
        "rules": rules,
    }


# --------------------------------------------------------------------------- the function


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
    made with :func:`copy.deepcopy`, so neither is changed; each starts with
    the CPU's generator and the model's GPU's seeded with ``seed`` inside
    :func:`torch.random.fork_rng`, so dropout draws the same masks in every
    run and the caller's random state is left as it was. BatchNorm's running statistics and other buffers
    change on the copies only. On a GPU, measuring the saved activations
    resets the device's peak-memory statistics
    (:func:`torch.cuda.reset_peak_memory_stats`).

    Ops are recorded as the model's code calls them: a call of a
    ``torch.nn.functional`` function, a tensor method or an operator. A
    function that is itself made of ops (``multi_head_attention_forward``)
    is one row, whatever its inner ops do.

    Parameters
    ----------
    model : torch.nn.Module
        The model, FP32 parameters, on the device to diagnose on (CPU or
        CUDA). The gradient, activation and autocast sections use it in the
        mode it is in (``train()`` or ``eval()``); the training runs call
        ``train()``, as the recipe does.
    batch : (inputs, targets)
        One batch, every tensor of it on the model's device. ``inputs`` is a
        tensor, a tuple or list (``model(*inputs)``) or a mapping
        (``model(**inputs)``, a tokenizer's output say).
    loss_fn : callable
        ``loss_fn(model(inputs), targets)``, the batch's mean loss: a
        floating-point tensor of one value.
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
        :meth:`Diagnosis.to_dict`:

        - ``autocast``: ``calls``, one row per recorded call (``op``,
          ``module``, ``inputs_fp16``/``inputs_bf16``: the dtypes of its
          floating-point inputs, ``fp16`` and ``bf16``: the output's dtype under autocast
          here, ``cuda_fp16``/``cuda_bf16``: CUDA autocast's, for the inputs
          the call met here, or ``"not known here"``); ``ops``, the counts per
          op; ``stayed_fp32``, ops that ran in FP32 under FP16 autocast here,
          and ``cuda_stayed_fp32``, under CUDA's.
        - ``gradients``: per parameter name, ``underflow_fp16``,
          ``underflow_fp16_scaled``, ``underflow_bf16`` (shares of the
          non-zero values of the FP32 gradient that are zero once cast),
          ``overflow_fp16_scaled`` (``inf`` once cast: a gradient that a real FP16
          step computes in FP32, an embedding's say, never overflows, so this
          is the cast's answer, not the run's) and ``histogram``
          (``log2`` bins, :func:`~amp_lesson.gradients.log2_histogram`); the
          same shares over all parameters; ``settled_scale`` (``None`` where
          no scale keeps an FP16 step finite) and ``settled_scale_capped``
          (the search stopped at ``2**40``).
        - ``activations``: per module name (``""``: the model), ``max_abs``,
          ``max_abs_input`` and ``below_fp16_subnormal``; ``over_fp16_max``,
          the modules whose output exceeds FP16's range; ``overflow_starts``,
          those of them where it starts: inputs within the range, and no
          submodule where it starts.
        - ``training``: for ``"fp32"``, ``"fp16"`` and ``"bf16"``: ``losses``
          (each step's, before its update), ``final_loss`` (after the last),
          ``skipped``, ``scales`` (FP16: the scale each step used) and
          ``gap`` (final loss minus FP32's).
        - ``memory``: bytes per parameter (weights, gradients, the
          optimizer's state, measured after its steps, and autocast's weight
          copies), and ``saved_for_backward`` per dtype, measured.
        - ``recommendation``: ``choice`` (``"bf16"``, ``"fp16"`` or
          ``"fp32"``), ``scaler`` (FP16's ``init_scale``), ``keep_fp32``
          (``overflow_starts``),
          ``because`` and every rule of :data:`RULES` with whether it held.

    Raises
    ------
    TypeError
        If ``model`` is not a module (or cannot be copied), ``batch`` is not
        a pair whose inputs hold a tensor, ``loss_fn`` is not callable, or
        ``optimizer`` is not an optimizer.
    ValueError
        If ``model`` has no trainable parameter or parameters that are not
        FP32 or on several devices, ``batch`` is on another device than the
        model, ``loss_fn`` returns anything but a floating-point tensor of
        one value or one that does not depend on the parameters, ``steps`` is below 1, ``optimizer`` misses a trainable
        parameter, or ``seed`` is outside ``[0, 2**64 - 1]``.

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
    """
    started = time.perf_counter()
    if isinstance(batch, tuple | list) and len(batch) == 2 and isinstance(batch[0], Mapping):
        batch = (dict(batch[0]), batch[1])  # a tokenizer's BatchEncoding, say
    device, trainable = _check(model, batch, loss_fn, steps, optimizer, seed)
    gradients, activations = _gradient_sections(model, optimizer, batch, loss_fn, device, seed)
    autocast = _autocast_section(model, optimizer, batch, loss_fn, device, seed)
    training: dict[str, Any] = {}
    weights: dict[str, dict[str, torch.Tensor]] = {}
    state_bytes = 0
    for fmt, dtype in (("fp32", torch.float32), *_HALVES.items()):
        run, weights[fmt], trained = _train(
            model, optimizer, batch, loss_fn, device, dtype, steps, seed
        )
        training[fmt] = run
        if fmt == "fp32" and trained.optimizer is not None:
            state_bytes = _state_bytes(trained.optimizer)
        del trained  # one copy of the model at a time
    for run in training.values():
        run["gap"] = run["final_loss"] - training["fp32"]["final_loss"]
    n = sum(p.numel() for p in trainable)
    twin = _copy(model, optimizer).model
    inputs = [t for t in tree_leaves(batch[0]) if isinstance(t, torch.Tensor)]
    saved = {}
    copies = {}
    for fmt, dtype in (("fp32", None), *_HALVES.items()):
        with _seeded(seed, device):
            measured = _measure_saved(
                twin, lambda: _loss(loss_fn, _call(twin, batch[0]), batch[1]), inputs, dtype,
                device,
            )  # fmt: skip
        saved[fmt] = {"bytes": measured.bytes, "by_dtype": measured.bytes_by_dtype}
        copies[fmt] = measured.weight_copy_bytes / n
    memory = {
        "optimizer": type(optimizer).__name__ if optimizer is not None else "Adam",
        "parameters": n,
        "bytes_per_parameter": {
            "weights": torch.float32.itemsize,
            "gradients": torch.float32.itemsize,
            "optimizer_state": state_bytes / n,
            "autocast_weight_copies": {"fp16": copies["fp16"], "bf16": copies["bf16"]},
        },
        "saved_for_backward": saved,
    }
    recommendation = _recommend(gradients, activations, training, device, autocast)
    return Diagnosis(
        model=type(model).__name__,
        device=str(device),
        parameters=n,
        steps=steps,
        seconds=time.perf_counter() - started,
        autocast=autocast,
        gradients=gradients,
        activations=activations,
        training=training,
        memory=memory,
        recommendation=recommendation,
        weights=weights,
    )


# --------------------------------------------------------------------------- the report


def _worst(entry: dict[str, Any]) -> str:
    share = entry["share"]
    return _pct(share) if not share else f"{_pct(share)} ({entry['parameter']})"


def _pct(share: float | None) -> str:
    return "n/a" if share is None else f"{100 * share:.2g}%"


def _scale(value: float | None) -> str:
    return "none" if value is None else f"2^{round(math.log2(value))}"


def _bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def _names(modules: list[str]) -> str:
    return ", ".join(name or "(the model)" for name in modules) or "none"


def _module(name: str, modules: dict[str, Any]) -> str:
    kind = modules.get(name, {}).get("type", "")
    return f"the model ({kind})" if not name else f"module {name} ({kind})"


def _report(d: Diagnosis) -> str:
    g, a, t, m, r = d.gradients, d.activations, d.training, d.memory, d.recommendation
    ac = d.autocast
    on = d.device
    lines = [
        (
            f"{d.model}: {d.parameters:,} parameters on {on}, {d.steps} steps per run, "
            f"diagnosed in {d.seconds:.1f} s"
        ),
        "",
        "autocast (each op as the model's code calls it)",
    ]
    ops = ac["ops"]
    calls = sum(s["calls"] for s in ops.values())
    for fmt in ("fp16", "bf16"):
        low = sum(s[fmt].get(dtype_name(_HALVES[fmt]), 0) for s in ops.values())
        lines.append(f"  {fmt}: {low} of {calls} calls ran in {dtype_name(_HALVES[fmt])} on {on}")
    lines.append(f"  stayed FP32 on {on}: {', '.join(ac['stayed_fp32']) or 'none'}")
    lines.append(f"  FP32 under CUDA autocast: {', '.join(ac['cuda_stayed_fp32']) or 'none'}")
    unknown = sorted(
        op for op, s in ops.items() if NOT_KNOWN in s["cuda_fp16"] or NOT_KNOWN in s["cuda_bf16"]
    )
    if unknown:
        lines.append(f"  CUDA's choice not known without a GPU for: {', '.join(unknown)}")
    if ac["cuda_refuses"]:
        lines.append(
            f"  CUDA autocast refuses: {', '.join(ac['cuda_refuses'])} (compute it outside "
            "autocast, or use its logits form)"
        )
    if not ac["fp16_forward_finite"]:
        bad = ac["first_nonfinite_fp16"]
        lines.append(
            f"  first inf or NaN under FP16 autocast: {bad['op']} in {_module(bad['module'], a['modules'])}"
        )
    w = g["worst"]
    scale = _scale(g["settled_scale"])
    if g["settled_scale_capped"]:
        scale += " (the search's cap; a GradScaler would go higher)"
    lines += [
        "gradients (share of non-zero FP32 gradient values that a cast zeroes)",
        f"  settled scale (largest finite FP16 step on this batch): {scale}",
        (
            f"  FP16 at scale 1: {_pct(g['underflow_fp16'])} of all, worst parameter "
            f"{_worst(w['underflow_fp16'])}"
        ),
        (
            f"  FP16 at the settled scale: {_pct(g['underflow_fp16_scaled'])} of all, worst "
            f"parameter {_worst(w['underflow_fp16_scaled'])}"
        ),
        f"  BF16: {_pct(g['underflow_bf16'])} of all, worst parameter {_worst(w['underflow_bf16'])}",
        "activations (FP32 forward pass)",
        (
            f"  largest |output| {a['largest']['max_abs']:.3g}, of "
            f"{_module(a['largest']['module'], a['modules'])}; FP16's largest {FP16_MAX:.0f}"
        ),
        f"  beyond FP16's range, starting at: {_names(a['overflow_starts'])}",
        "training (first loss under the run's autocast -> final loss in FP32)",
    ]
    moved = _moved(t["fp32"])
    for fmt, run in t.items():
        extra = ""
        if run["scales"] is not None:
            extra = (
                f", {run['skipped']} skipped, scale {_scale(run['scales'][0])}"
                f" -> {_scale(run['final_scale'])}"
            )
        gap = ""
        if fmt != "fp32":
            share = abs(run["gap"]) / moved if moved else math.inf
            gap = (
                f", gap {run['gap']:+.3g} ({share:.2%} of FP32's move; limit {TRACKING_SHARE:.0%})"
            )
        lines.append(f"  {fmt}: {run['losses'][0]:.4g} -> {run['final_loss']:.4g}{gap}{extra}")
    b = m["bytes_per_parameter"]
    state = b["weights"] + b["gradients"] + b["optimizer_state"]
    saved = m["saved_for_backward"]
    copies = b["autocast_weight_copies"]
    lines += [
        "memory",
        (
            f"  {state:.3g} bytes per parameter with {m['optimizer']}, whatever the autocast "
            f"dtype: weights {b['weights']}, gradients {b['gradients']}, optimizer state "
            f"{b['optimizer_state']:.3g}"
        ),
        (
            f"  autocast's half-precision weight copies during a step: fp16 "
            f"{copies['fp16']:.3g}, bf16 {copies['bf16']:.3g} bytes per parameter"
        ),
        "  activations saved for backward: "
        + ", ".join(f"{fmt} {_bytes(saved[fmt]['bytes'])}" for fmt in saved),
        "recommendation",
    ]
    if r["choice"] == "fp16":
        lines.append(f"  FP16 with torch.amp.GradScaler(init_scale={r['scaler']['init_scale']:g})")
    else:
        lines.append({"bf16": "  BF16 autocast, no GradScaler", "fp32": "  FP32"}[r["choice"]])
    if r["keep_fp32"]:
        lines.append(f"  under FP16, keep in FP32: {_names(r['keep_fp32'])}")
    words = {rule["key"]: rule["words"] for rule in r["rules"]}
    lines.append("  because:")
    lines += [f"    {words[key]}" for key in r["because"]]
    lines.append("  also measured:")
    lines += [f"    {words[key]}" for key in words if key not in r["because"]]
    return "\n".join(lines)
