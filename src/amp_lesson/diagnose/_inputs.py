# The arguments of diagnose checked, and the copies, seeds and random draws its runs share.
"""What :func:`~amp_lesson.diagnose.diagnose` does before it measures anything.

It refuses arguments it cannot measure (naming the parameter), checks that
the copies it will make fit in memory, and gives every run the same start:
copies of the caller's model and optimizer, the generators seeded, and the
random draws of the first run (dropout's masks) played back in the others,
so that FP32, float64, FP16 and BF16 runs of one batch differ only by their
arithmetic.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from amp_lesson._checks import check_int, check_optimizer, check_seed

COPIES = 8
"""How many times its own size (parameters, buffers, optimizer state) in free memory
:func:`~amp_lesson.diagnose.diagnose` asks for before it starts. At its peak, the last training
run, it holds a copy of the model with its gradient and Adam's two moments beside the final
weights of the two runs before it (6); the allocator's free lists take the rest (on a CPU the
process's resident memory grew by 8.7 times a 101 MB model's size, measured with
``/proc/self/status``'s ``VmHWM``)."""


def call(model: nn.Module, inputs: Any) -> Any:
    """``model(inputs)``: a tuple or a list is spread, a mapping passed by keyword."""
    if isinstance(inputs, Mapping):
        return model(**inputs)
    if isinstance(inputs, tuple | list):
        return model(*inputs)
    return model(inputs)


def shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'…' if len(text) > 60 else ''}"


def floats(value: Any) -> list[torch.Tensor]:
    """The floating-point tensors among ``value``'s leaves (a tuple, a dict, a ModelOutput)."""
    return [t for t in tree_leaves(value) if isinstance(t, torch.Tensor) and t.is_floating_point()]


def check_arguments(
    model: Any, batch: Any, loss_fn: Any, steps: Any, optimizer: Any, seed: Any
) -> tuple[torch.device, list[nn.Parameter]]:
    """Refuse what diagnose cannot measure; return the model's device and trainable parameters."""
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
    if device.type == "meta":
        raise ValueError(
            "model's parameters are on the meta device, which holds no values: materialise "
            "them first (model.to_empty(device=...), then load or initialise the weights)"
        )
    if not (isinstance(batch, tuple | list) and len(batch) == 2):
        raise TypeError(f"batch must be a pair (inputs, targets), got {shown(batch)}")
    for name, part in zip(("inputs", "targets"), batch, strict=True):
        tensors = [t for t in tree_leaves(part) if isinstance(t, torch.Tensor)]
        if name == "inputs" and not tensors:
            raise TypeError(f"batch's inputs must hold a tensor, got {shown(part)}")
        for t in tensors:
            if t.device != device:
                raise ValueError(
                    f"batch's {name} must be on the model's device ({device}), got a "
                    f"tensor on {t.device}; move the batch with .to({str(device)!r})"
                )
        for t in floats(part):
            bad = (~torch.isfinite(t)).sum()
            if bad:
                nan = int(torch.isnan(t).sum())
                raise ValueError(
                    f"batch's {name} must be finite, got {nan} NaN and {int(bad) - nan} "
                    f"infinite values of {t.numel():,} in a tensor of shape {tuple(t.shape)}; "
                    "diagnose measures a batch FP32 can train on: clean or drop those samples"
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


def checked_loss(loss_fn: Callable[..., Any], output: Any, targets: Any) -> torch.Tensor:
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


# --------------------------------------------------------------------------- memory


def model_bytes(model: nn.Module, optimizer: torch.optim.Optimizer | None) -> int:
    """The bytes of the model's parameters and buffers and of the optimizer's state tensors."""
    seen: set[int] = set()
    total = 0
    tensors = [*model.parameters(), *model.buffers()]
    if optimizer is not None:
        tensors += [t for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t)]
    for t in tensors:
        if id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total


def free_bytes(device: torch.device) -> int | None:
    """Memory free for new tensors on ``device``, or ``None`` where it cannot be read.

    On a GPU, what the driver has free plus what torch's allocator holds
    unused; on a CPU, Linux's ``MemAvailable``.
    """
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
    if device.type == "cpu":
        try:
            with open("/proc/meminfo", encoding="ascii") as meminfo:
                for line in meminfo:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        if hasattr(os, "sysconf") and "SC_AVPHYS_PAGES" in os.sysconf_names:
            return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return None


def _gb(n: float) -> str:
    return f"{n / 1e9:.3g} GB" if n >= 1e8 else f"{n / 1e6:.3g} MB"


def check_memory(
    model: nn.Module, optimizer: torch.optim.Optimizer | None, device: torch.device
) -> None:
    """Refuse a model whose copies would not fit, before the first copy is made."""
    size = model_bytes(model, optimizer)
    need = COPIES * size
    free = free_bytes(device)
    if free is not None and need > free:
        raise MemoryError(
            f"diagnose needs about {_gb(need)} on {device} beside the model ({COPIES} times the "
            f"{_gb(size)} of its parameters, buffers and optimizer state: a training copy with "
            f"its gradient and Adam's moments beside the weights of the other runs), and "
            f"{_gb(free)} are free; diagnose a smaller configuration of the model, or on a "
            "device with more memory"
        )


# --------------------------------------------------------------------------- copies and seeds


class Copy(NamedTuple):
    model: nn.Module
    optimizer: torch.optim.Optimizer | None


def copy_of(model: nn.Module, optimizer: torch.optim.Optimizer | None) -> Copy:
    """Model and optimizer copied together, so the copy's optimizer holds the copy's parameters.

    The caller's optimizer's state (momentum, Adam's moments) comes with it.
    """
    twin, twin_opt = _deepcopy((model, optimizer))
    return Copy(twin, twin_opt)


def wide_copy_of(model: nn.Module) -> nn.Module:
    """A float64 copy of ``model``, made without an FP32 copy first: each floating-point
    parameter and buffer is converted as it is copied."""
    memo: dict[int, Any] = {}
    for p in model.parameters():
        if id(p) not in memo and p.is_floating_point():
            memo[id(p)] = nn.Parameter(p.detach().double(), requires_grad=p.requires_grad)
    for b in model.buffers():
        if id(b) not in memo and b.is_floating_point():
            memo[id(b)] = b.detach().double()
    return _deepcopy(model, memo)


def _deepcopy(value: Any, memo: dict[int, Any] | None = None) -> Any:
    """``copy.deepcopy``, its failures (but for memory) said as the model's."""
    try:
        return copy.deepcopy(value, memo)
    except (MemoryError, torch.OutOfMemoryError):
        raise
    except Exception as error:
        raise TypeError(
            f"model must be copyable with copy.deepcopy (diagnose works on copies): {error}"
        ) from error


@contextmanager
def seeded(seed: int, device: torch.device) -> Iterator[None]:
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


_DROPOUT = frozenset({torch.ops.aten.native_dropout.default})
# Ops whose outputs are the random draws themselves (or dropout's mask): played back. Other
# ops torch tags as random (fused attention, with its own dropout) draw only when asked to.
_DRAWS = frozenset(
    {"bernoulli", "bernoulli_", "rand", "rand_like", "randn", "randn_like", "randint",
     "randint_like", "randperm", "normal", "normal_", "uniform_", "exponential_", "geometric_",
     "cauchy_", "log_normal_", "random_", "multinomial", "native_dropout"}
)  # fmt: skip


class RandomTape(TorchDispatchMode):
    """Records what random ops draw in one run, and plays it back in the next runs.

    Dropout's masks then agree between an FP32, a float64 and an FP16 run of
    the same batch whatever the device's kernels draw for each dtype. The ops
    played back are those whose output is the draw itself (``bernoulli_``,
    ``rand``, ``native_dropout``'s mask, ...); a fused op that draws inside
    (attention with ``dropout_p > 0``) cannot be, and is named in
    :attr:`not_played`. A replayed op
    still runs (its output has the new run's dtype), and the recorded values
    are copied into it; ``native_dropout``'s output is computed again from its
    input and the recorded mask. A run that draws other ops or shapes than
    the recording stops the playback and sets :attr:`diverged`.
    """

    def __init__(self, tape: list[tuple[Any, list[torch.Tensor]]] | None = None) -> None:
        super().__init__()
        self.replaying = tape is not None
        self.tape: list[tuple[Any, list[torch.Tensor]]] = [] if tape is None else tape
        self.position = 0
        self.diverged = False
        self.not_played: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if torch.Tag.nondeterministic_seeded not in func.tags:
            return out
        name = func.overloadpacket.__name__
        if name not in _DRAWS:
            schema = [a.name for a in func._schema.arguments]
            if "dropout_p" in schema:
                i = schema.index("dropout_p")
                p = kwargs.get("dropout_p", args[i] if i < len(args) else 0.0)
                if p:
                    self.not_played.add(name)
            return out
        leaves = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        if not self.replaying:
            self.tape.append((func, [t.detach().clone() for t in leaves]))
            return out
        if self.diverged:
            return out
        if self.position >= len(self.tape):
            self.diverged = True
            return out
        recorded, values = self.tape[self.position]
        self.position += 1
        if recorded != func or [v.shape for v in values] != [t.shape for t in leaves]:
            self.diverged = True
            return out
        with torch.no_grad():
            if func in _DROPOUT:
                x, p = args[0], float(args[1])
                mask = values[1]
                kept = x * mask.to(x.dtype) * (1.0 / (1.0 - p)) if p < 1 else torch.zeros_like(x)
                leaves[0].copy_(kept)
                leaves[1].copy_(mask)
            else:
                for leaf, value in zip(leaves, values, strict=True):
                    leaf.copy_(value)
        return out


def first_line(error: BaseException) -> str:
    """The first line of an error's message (its type's name if it has none)."""
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__
