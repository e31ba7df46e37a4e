"""Argument checks shared by the public functions.

Each raises with a message that names the parameter and says what is
allowed, so a reader who passes a bad value learns how to fix it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from typing import Any


def check_int(name: str, value: Any, *, minimum: int | None = None) -> int:
    """Return ``value`` if it is an int (not a bool) no smaller than ``minimum``.

    >>> check_int("n_accum", 4, minimum=1)
    4
    >>> check_int("n_accum", 0, minimum=1)
    Traceback (most recent call last):
    ...
    ValueError: n_accum must be an integer >= 1, got 0
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def check_finite(name: str, value: Any) -> float:
    """Return ``value`` as a float if it is a finite real number.

    >>> check_finite("lr", 0.1)
    0.1
    >>> check_finite("lr", float("nan"))
    Traceback (most recent call last):
    ...
    ValueError: lr must be a finite number, got nan
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return value


def check_positive(name: str, value: Any) -> float:
    """Return ``value`` if it is a finite number > 0.

    >>> check_positive("init_scale", 0.0)
    Traceback (most recent call last):
    ...
    ValueError: init_scale must be a finite number > 0, got 0.0
    """
    value = check_finite(name, value)
    if value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return value


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
