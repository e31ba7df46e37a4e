"""Argument checks shared by the public functions.

Each raises with a message that names the parameter and says what is
allowed, so a reader who passes a bad value learns how to fix it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

SEED_MAX = 2**64 - 1
"""The largest seed: torch's generators take any integer in ``[0, 2**64 - 1]``.

``torch.manual_seed`` and ``torch.Generator.manual_seed`` also take negative
seeds down to ``-2**63``, but only as another name for ``seed + 2**64``, and
raise a bare ``ValueError: Overflow when unpacking long long`` beyond either
end. The package takes each seed under its one name.
"""

FLOAT32_MAX = float.fromhex("0x1.fffffep+127")
"""float32's largest finite value, ``3.4028234663852886e+38``."""

INT64_MAX = 2**63 - 1
"""The largest integer a torch kernel's ``int`` argument (C++ ``int64_t``) takes."""


def shown(value: Any) -> str:
    """``repr(value)``, except that an integer too long to read is described instead.

    Python refuses to turn an int of more than 4300 digits into text, and
    one of 400 digits makes a message no one reads.

    >>> shown(0.5), shown(10**400)
    ('0.5', 'an integer of about 401 digits')
    """
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        digits = math.floor(value.bit_length() * math.log10(2)) + 1
        sign = "a negative" if value < 0 else "an"
        return f"{sign} integer of about {digits} digits"
    return repr(value)


def described(value: Any) -> str:
    """What an argument that should have been a tensor is, for an error message.

    A tensor is named by its dtype (the usual thing wrong with it), anything
    else by its type.

    >>> import torch
    >>> described(torch.zeros(2, dtype=torch.int64)), described([1.0])
    ('a torch.int64 tensor', 'list')
    """
    import torch

    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor"
    return type(value).__name__


def check_int(
    name: str,
    value: Any,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    why: str = "",
) -> int:
    """Return ``value`` if it is an int (not a bool) in ``[minimum, maximum]``.

    ``why``, where given, says in the message what the upper bound is for.

    >>> check_int("n_accum", 4, minimum=1)
    4
    >>> check_int("n_accum", 0, minimum=1)
    Traceback (most recent call last):
    ...
    ValueError: n_accum must be an integer >= 1, got 0
    >>> check_int("block_size", 2**62, minimum=1, maximum=2**16, why="at most 2**16 values")
    Traceback (most recent call last):
    ...
    ValueError: block_size must be an integer in [1, 65536] (at most 2**16 values), got
    4611686018427387904
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {shown(value)}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {shown(value)}")
    if maximum is not None and value > maximum:
        allowed = f"<= {maximum}" if minimum is None else f"in [{minimum}, {maximum}]"
        reason = f" ({why})" if why else ""
        raise ValueError(f"{name} must be an integer {allowed}{reason}, got {shown(value)}")
    return value


def check_values(name: str, x: Any) -> Any:
    """Return ``x`` if it is a tensor whose values can be read: not on the ``meta`` device.

    A meta tensor has a shape and a dtype but no values, so nothing can be
    computed from it; torch would fail later, at the first read, without
    naming the argument.

    >>> import torch
    >>> check_values("x", torch.ones(2, device="meta"))
    Traceback (most recent call last):
    ...
    ValueError: x is a meta tensor, which has a shape but no values; pass a tensor on a real
    device (cpu, cuda)
    """
    if getattr(x, "is_meta", False):
        raise ValueError(
            f"{name} is a meta tensor, which has a shape but no values; pass a tensor on a real "
            "device (cpu, cuda)"
        )
    return x


def check_bool(name: str, value: Any) -> bool:
    """Return ``value`` if it is ``True`` or ``False`` (a NumPy bool too).

    A truthy stand-in such as ``"no"`` or ``1`` is refused: ``"no"`` is true.

    >>> check_bool("enabled", False)
    False
    >>> check_bool("enabled", "no")
    Traceback (most recent call last):
    ...
    TypeError: enabled must be True or False, got 'no'
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{name} must be True or False, got {shown(value)}")


def check_seed(name: str, value: Any) -> int:
    """Return ``value`` if it is a seed torch's generators take: an int in ``[0, 2**64 - 1]``.

    Every function of the package that takes a seed checks it here.

    >>> check_seed("seed", 2**64 - 1)
    18446744073709551615
    >>> check_seed("seed", 2**64)
    Traceback (most recent call last):
    ...
    ValueError: seed must be an integer in [0, 2**64 - 1] (the seeds torch's
    generators take), got 18446744073709551616
    """
    value = check_int(name, value, minimum=0)
    if value > SEED_MAX:
        raise ValueError(
            f"{name} must be an integer in [0, 2**64 - 1] (the seeds torch's generators take), "
            f"got {shown(value)}"
        )
    return value


def check_finite(name: str, value: Any) -> float:
    """Return ``value`` as a float if it is a finite real number.

    >>> check_finite("lr", 0.1)
    0.1
    >>> check_finite("lr", float("nan"))
    Traceback (most recent call last):
    ...
    ValueError: lr must be a finite number, got nan
    >>> check_finite("lr", 10**400)  # an int too large for a float
    Traceback (most recent call last):
    ...
    ValueError: lr must be a finite number within a float's range (about
    ±1.8e308), got an integer of about 401 digits
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {shown(value)}")
    try:
        as_float = float(value)
    except OverflowError:  # an int (or Fraction) beyond float64's range
        raise ValueError(
            f"{name} must be a finite number within a float's range (about ±1.8e308), "
            f"got {shown(value)}"
        ) from None
    if not math.isfinite(as_float):
        raise ValueError(f"{name} must be a finite number, got {shown(value)}")
    return as_float


def check_positive(name: str, value: Any) -> float:
    """Return ``value`` if it is a finite number > 0.

    >>> check_positive("init_scale", 0.0)
    Traceback (most recent call last):
    ...
    ValueError: init_scale must be a finite number > 0, got 0.0
    """
    return _check_above(name, value, 0)


def _check_above(name: str, value: Any, bound: float) -> float:
    """Return ``value`` as a float if it is a finite number above ``bound``."""
    value = check_finite(name, value)
    if value <= bound:
        raise ValueError(f"{name} must be a finite number > {bound:g}, got {value!r}")
    return value


def check_scale(name: str, value: Any) -> float:
    """Return ``value`` if it is a loss scale GradScaler can hold: a float32 value > 0.

    GradScaler keeps its scale in a float32 tensor, filled with
    ``torch.full((), init_scale, dtype=torch.float32)``: torch refuses a
    value above :data:`FLOAT32_MAX` (even one that would round down to it)
    and stores a tiny one that rounds to zero as ``0.0``, a scale that
    makes every unscaled gradient ``inf``.

    >>> check_scale("init_scale", 2.0**16)
    65536.0
    >>> check_scale("init_scale", 1e60)
    Traceback (most recent call last):
    ...
    ValueError: init_scale must be representable in float32 (GradScaler keeps
    the scale in a float32 tensor): between about 1.4e-45 and 3.402823e+38,
    got 1e+60
    """
    value = check_positive(name, value)
    # 2**-150 lies halfway between 0 and float32's smallest subnormal 2**-149, and ties to 0.
    if value > FLOAT32_MAX or value <= 2.0**-150:
        raise ValueError(
            f"{name} must be representable in float32 (GradScaler keeps the scale in a "
            f"float32 tensor): between about 1.4e-45 and {FLOAT32_MAX:.7g}, got {value!r}"
        )
    return value


def check_growth_factor(name: str, value: Any) -> float:
    """Return ``value`` if it is a GradScaler ``growth_factor``: a finite number > 1.

    >>> check_growth_factor("growth_factor", 0.5)
    Traceback (most recent call last):
    ...
    ValueError: growth_factor must be a finite number > 1, got 0.5
    """
    return _check_above(name, value, 1)


def check_backoff_factor(name: str, value: Any) -> float:
    """Return ``value`` if it is a GradScaler ``backoff_factor``: in the open interval (0, 1).

    GradScaler itself only asserts ``backoff_factor < 1``; a factor of 0 or
    less would make the scale 0 or negative after the first overflow.

    >>> check_backoff_factor("backoff_factor", 1.5)
    Traceback (most recent call last):
    ...
    ValueError: backoff_factor must be in the open interval (0, 1), got 1.5
    """
    value = check_finite(name, value)
    if not 0.0 < value < 1.0:
        raise ValueError(f"{name} must be in the open interval (0, 1), got {value!r}")
    return value


def check_growth_interval(name: str, value: Any) -> int:
    """Return ``value`` if it is a GradScaler ``growth_interval``: an int in ``[1, 2**63 - 1]``.

    GradScaler hands it to its update kernel as a 64-bit int, and a larger
    one fails there, at the first ``update()``.

    >>> check_growth_interval("growth_interval", 2**63)
    Traceback (most recent call last):
    ...
    ValueError: growth_interval must be an integer in [1, 2**63 - 1]
    (GradScaler's kernel takes a 64-bit int), got 9223372036854775808
    """
    value = check_int(name, value, minimum=1)
    if value > INT64_MAX:
        raise ValueError(
            f"{name} must be an integer in [1, 2**63 - 1] (GradScaler's kernel takes a 64-bit "
            f"int), got {shown(value)}"
        )
    return value


SCALER_KWARGS: tuple[str, ...] = (
    "init_scale",
    "growth_factor",
    "backoff_factor",
    "growth_interval",
    "enabled",
)
"""The keyword arguments of ``torch.amp.GradScaler`` after its device."""


def check_scaler_kwargs(name: str, value: Any) -> dict[str, Any]:
    """Return ``value`` as a dict if it holds valid keyword arguments for ``torch.amp.GradScaler``.

    ``None`` means none. The keys are those of :data:`SCALER_KWARGS`; each
    value is checked as :class:`~amp_lesson.scaler.ScalerSimulator` checks
    it (:func:`check_scale`, :func:`check_growth_factor`,
    :func:`check_backoff_factor`, :func:`check_growth_interval`), and
    ``enabled`` must be a bool. The settings are checked even with
    ``enabled=False``, where GradScaler ignores them: a bad one is a typo
    either way.

    >>> check_scaler_kwargs("scaler_kwargs", {"init_scale": 1024, "enabled": True})
    {'init_scale': 1024.0, 'enabled': True}
    >>> check_scaler_kwargs("scaler_kwargs", {"growth_factor": 0.5})
    Traceback (most recent call last):
    ...
    ValueError: scaler_kwargs['growth_factor'] must be a finite number > 1, got 0.5
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} must be a dict or None, got {type(value).__name__}")
    checks = {
        "init_scale": check_scale,
        "growth_factor": check_growth_factor,
        "backoff_factor": check_backoff_factor,
        "growth_interval": check_growth_interval,
        "enabled": check_bool,
    }
    checked = {}
    for key, setting in value.items():
        check_choice(f"{name} key", key, SCALER_KWARGS)
        checked[key] = checks[key](f"{name}[{key!r}]", setting)
    return checked


def check_choice(name: str, value: Any, allowed: Iterable[Any]) -> Any:
    """Return ``value`` if it is one of ``allowed``.

    >>> check_choice("device", "tpu", ["cpu", "cuda"])
    Traceback (most recent call last):
    ...
    ValueError: device must be one of 'cpu', 'cuda'; got 'tpu'
    """
    allowed = list(allowed)
    if value not in allowed:
        names = ", ".join(repr(a) for a in allowed)
        raise ValueError(f"{name} must be one of {names}; got {value!r}")
    return value


def check_dtype(name: str, value: Any, allowed: Iterable[Any]) -> Any:
    """Return ``value`` if it is a torch dtype among ``allowed``.

    >>> import torch
    >>> check_dtype("dtype", "float32", [torch.float32])
    Traceback (most recent call last):
    ...
    TypeError: dtype must be a torch.dtype, one of [torch.float32]; got 'float32'
    """
    import torch

    allowed = list(allowed)
    if not isinstance(value, torch.dtype):
        raise TypeError(f"{name} must be a torch.dtype, one of {allowed}; got {value!r}")
    return check_choice(name, value, allowed)


def check_optimizer(name: str, optimizer: Any, model: Any) -> Any:
    """Return ``optimizer`` if it is a torch optimizer that holds every trainable parameter of ``model``.

    Trainable means ``requires_grad``. An optimizer built over another
    model's parameters steps those and leaves ``model`` as it was, without a
    word; one that leaves some of ``model``'s trainable parameters out never
    applies their gradients, and its ``zero_grad()`` never clears them, so
    they pile up. A parameter is frozen with ``requires_grad_(False)``, not
    by leaving it out. The optimizer may hold other parameters as well.

    >>> import torch
    >>> model, other = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
    >>> check_optimizer("optimizer", torch.optim.SGD(other.parameters()), model)
    Traceback (most recent call last):
    ...
    ValueError: optimizer must hold the model's trainable parameters, but holds
    none of them (was it built over another model?); build it from
    model.parameters()
    """
    import torch

    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"{name} must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    trainable = [(key, p) for key, p in model.named_parameters() if p.requires_grad]
    missing = [key for key, p in trainable if id(p) not in held]
    if missing and len(missing) == len(trainable):
        raise ValueError(
            f"{name} must hold the model's trainable parameters, but holds none of them "
            "(was it built over another model?); build it from model.parameters()"
        )
    if missing:
        names = ", ".join(repr(key) for key in missing[:5]) + (", ..." if len(missing) > 5 else "")
        raise ValueError(
            f"{name} must hold every trainable parameter of the model, but misses {names}; "
            "build it from model.parameters(), and freeze a parameter with "
            "requires_grad_(False) rather than leave it out"
        )
    return optimizer


def check_input_dtype(name: str, x: Any, model: Any, autocast_dtype: Any = None) -> Any:
    """Return the tensor ``x`` if its dtype is one ``model``'s parameters can take.

    Without autocast (``autocast_dtype=None``), and for a float64 model,
    that is the parameters' own dtype. Under autocast to a half format,
    float32, float16 and bfloat16 inputs all work: autocast casts them. A
    model whose floating-point parameters have several dtypes, or that holds
    an ``Embedding`` (whose input is integer token ids), is not checked.

    >>> import torch
    >>> model = torch.nn.Linear(2, 1)
    >>> check_input_dtype("X", torch.zeros(4, 2, dtype=torch.float64), model)
    Traceback (most recent call last):
    ...
    ValueError: X must have the dtype of the model's parameters, torch.float32;
    got torch.float64 (convert it with X.to(torch.float32))
    """
    import torch

    dtypes = {p.dtype for p in model.parameters() if p.is_floating_point()}
    embeds = (torch.nn.Embedding, torch.nn.EmbeddingBag)
    if len(dtypes) != 1 or any(isinstance(m, embeds) for m in model.modules()):
        return x
    (dtype,) = dtypes
    allowed = [dtype]
    if autocast_dtype is not None and dtype != torch.float64:
        allowed += [d for d in (torch.float32, torch.float16, torch.bfloat16) if d != dtype]
    if x.dtype not in allowed:
        fix = f"got {x.dtype} (convert it with {name}.to({dtype}))"
        if len(allowed) == 1:
            raise ValueError(
                f"{name} must have the dtype of the model's parameters, {dtype}; {fix}"
            )
        others = ", ".join(str(d) for d in allowed[1:])
        raise ValueError(
            f"{name} must have the dtype of the model's parameters, {dtype}, or one that "
            f"autocast to {autocast_dtype} casts: {others}; {fix}"
        )
    return x


def check_unscalable(name: str, model: Any, scaler: Any) -> Any:
    """Return ``model`` unless the enabled GradScaler ``scaler`` would refuse its gradients.

    GradScaler refuses to unscale float16 gradients (``ValueError: Attempting
    to unscale FP16 gradients.``, at the first step): mixed precision keeps
    the weights in float32 and lets autocast lower the compute.

    >>> import torch
    >>> model = torch.nn.Linear(2, 1).half()
    >>> check_unscalable("model", model, torch.amp.GradScaler("cpu"))
    Traceback (most recent call last):
    ...
    ValueError: model must keep its parameters out of float16 with an enabled
    GradScaler, which refuses to unscale float16 gradients; got 'weight' in
    float16 (keep the weights in float32: autocast lowers the compute)
    """
    import torch

    if scaler.is_enabled():
        half = [key for key, p in model.named_parameters() if p.dtype == torch.float16]
        if half:
            raise ValueError(
                f"{name} must keep its parameters out of float16 with an enabled GradScaler, "
                f"which refuses to unscale float16 gradients; got {half[0]!r} in float16 "
                "(keep the weights in float32: autocast lowers the compute)"
            )
    return model
