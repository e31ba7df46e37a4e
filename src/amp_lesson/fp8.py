"""Scaling tensors into FP8, one tensor at a time.

FP8 comes in two layouts: E4M3 (largest value 448, the forward pass's
format) and E5M2 (largest value 57344, for gradients). A scale that moves a
tensor's largest value near the format's maximum keeps the values within
the format's span below it, about 18 powers of two down to E4M3's smallest
subnormal and about 32 down to E5M2's; values further down still flush to
zero. That span holds most of one tensor, but not activations, weights and
gradients at once. So FP8 training gives every tensor its own scale ``S``:
the tensor is stored as ``cast(x * S)`` and read back as ``stored / S``.

>>> x = torch.tensor([1e-6, -3e-6, 2e-6])        # gradient-sized values
>>> # unscaled: all below E4M3's smallest subnormal
>>> quantize(x, "fp8_e4m3").tolist()
[0.0, -0.0, 0.0]
>>> s = scale_for(3e-6, "fp8_e4m3")             # 448 / amax
>>> # back, to 3 mantissa bits
>>> [f"{v:.3g}" for v in quantize(x, "fp8_e4m3", s).tolist()]
['9.64e-07', '-3e-06', '1.93e-06']

Torch casts to and from the float8 dtypes, but has no elementwise arithmetic
in them, so :func:`quantize` does its arithmetic in FP32 and uses FP8 only to
store. :class:`DelayedScaler` chooses the scale the way Transformer Engine's
``DelayedScaling`` recipe does, from the absolute maxima of earlier steps.

Why this module is long: casting, counting and delayed scaling all read the same FP8
specs; more than half of its lines are docstrings whose examples run as tests.
"""

from __future__ import annotations

import math
import numbers
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from amp_lesson._checks import check_int, check_positive
from amp_lesson.formats import FORMATS, FormatSpec, beyond_range

__all__ = [
    "FP8_FORMATS",
    "CastReport",
    "DelayedScaler",
    "cast_report",
    "compare_scalings",
    "quantize",
    "scale_for",
    "sweep_single_scale",
]

FP8_FORMATS: tuple[str, ...] = ("fp8_e4m3", "fp8_e5m2")
"""The FP8 formats of :data:`amp_lesson.formats.FORMATS`."""

_FP32_MAX = torch.finfo(torch.float32).max


def _fp8(fmt: Any) -> FormatSpec:
    """The :class:`FormatSpec` of an FP8 format given by name or torch dtype."""
    for name in FP8_FORMATS:
        spec = FORMATS[name]
        if fmt in (name, spec.dtype) or fmt is spec:
            return spec
    raise ValueError(
        f"fmt must be one of {', '.join(repr(n) for n in FP8_FORMATS)} or "
        f"{FORMATS['fp8_e4m3'].dtype} / {FORMATS['fp8_e5m2'].dtype}; got {fmt!r}"
    )


def _check_tensor(name: str, x: Any) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {x.dtype}")
    if x.numel() == 0:
        raise ValueError(f"{name} must hold at least one value, got an empty tensor")
    x = x.detach().float()
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} must hold finite values only")
    return x


def _check_scale(scale: Any) -> float:
    scale = check_positive("scale", scale)
    if scale > _FP32_MAX:
        raise ValueError(f"scale must fit in float32 (<= {_FP32_MAX:.7g}), got {scale!r}")
    return scale


def scale_for(amax: float, fmt: str | torch.dtype = "fp8_e4m3", margin: int = 0) -> float:
    """Return the scale that maps ``amax`` onto the format's largest value: ``max / amax / 2**margin``.

    This is Transformer Engine's formula (``DelayedScaling``'s default scale
    computation, in its version 2.20.0.dev0, read on 2026-12-01). A scale
    too large for float32 is clamped to float32's largest value, as there.

    Parameters
    ----------
    amax : float
        The absolute maximum to fit (``> 0``).
    fmt : str or torch.dtype, default "fp8_e4m3"
        One of :data:`FP8_FORMATS` or its dtype.
    margin : int, default 0
        Leaves ``2**margin`` of headroom above ``amax`` for values that grow
        before the scale catches up.

    Returns
    -------
    float
        The scale.

    Raises
    ------
    ValueError
        If ``amax`` is not positive, ``margin`` negative or ``fmt`` not FP8.

    Examples
    --------
    >>> scale_for(4.0, "fp8_e4m3"), scale_for(4.0, "fp8_e4m3", margin=1)
    (112.0, 56.0)
    >>> scale_for(1e-6, "fp8_e5m2")
    57344000000.0
    """
    spec = _fp8(fmt)
    amax = check_positive("amax", amax)
    margin = check_int("margin", margin, minimum=0)
    return min(spec.max / amax / 2.0**margin, _FP32_MAX)


def quantize(
    x: torch.Tensor, fmt: str | torch.dtype = "fp8_e4m3", scale: float = 1.0
) -> torch.Tensor:
    """Store ``x`` in FP8 with scale ``scale`` and read it back: ``cast(x * scale) / scale``.

    The product is formed in FP32, cast by torch to the float8 dtype (its
    own rounding, saturation and overflow), cast back to FP32 and divided
    by the scale.

    Parameters
    ----------
    x : torch.Tensor
        Finite floating-point values.
    fmt : str or torch.dtype, default "fp8_e4m3"
        One of :data:`FP8_FORMATS` or its dtype.
    scale : float, default 1.0
        The scale, positive and within float32's range.

    Returns
    -------
    torch.Tensor
        FP32, on ``x``'s device.

    Raises
    ------
    TypeError
        If ``x`` is not a floating-point tensor.
    ValueError
        If ``x`` is empty or not finite, or ``scale`` or ``fmt`` is invalid.

    Examples
    --------
    >>> x = torch.tensor([0.3, 500.0, 1e-4])
    >>> # 500 beyond 448; 1e-4 below the subnormals
    >>> quantize(x, "fp8_e4m3").tolist()
    [0.3125, 448.0, 0.0]
    >>> # a scale below 1 makes room at the top
    >>> quantize(x, "fp8_e4m3", 1 / 2).tolist()
    [0.3125, 512.0, 0.0]
    """
    spec = _fp8(fmt)
    x = _check_tensor("x", x)
    s = torch.tensor(_check_scale(scale), dtype=torch.float32, device=x.device)
    return (x * s).to(spec.dtype).float() / s


@dataclass(frozen=True)
class CastReport:
    """What storing a tensor in FP8 with one scale did to its values.

    The three shares are fractions of the non-zero values.

    Parameters
    ----------
    format : str
        The FP8 format's name.
    scale : float
        The scale used.
    n : int
        Values in the tensor.
    nonzero : int
        Non-zero values.
    underflow : float
        Share stored as zero.
    saturated : float
        Share beyond the format's range once scaled (torch clamps them to
        ``±max`` in E4M3 and turns them into ``±inf`` in E5M2).
    subnormal : float
        Share stored as non-zero subnormals, with fewer significant bits.
    rel_error : float
        ``‖stored/S − x‖ / ‖x‖`` (``inf`` if a value overflowed, ``0.0`` for
        an all-zero tensor).

    Examples
    --------
    >>> r = cast_report(torch.tensor([1.0, 1000.0, 1e-4, 0.0]), "fp8_e4m3")
    >>> r.nonzero, r.underflow, r.saturated, r.lost
    (3, 0.3333333333333333, 0.3333333333333333, 0.6666666666666666)
    """

    format: str
    scale: float
    n: int
    nonzero: int
    underflow: float
    saturated: float
    subnormal: float
    rel_error: float

    @property
    def lost(self) -> float:
        """The share of the non-zero values flushed to zero or beyond range, ``underflow + saturated``."""
        return self.underflow + self.saturated


def cast_report(
    x: torch.Tensor, fmt: str | torch.dtype = "fp8_e4m3", scale: float = 1.0
) -> CastReport:
    """Store ``x`` in ``fmt`` with ``scale`` and count what happened.

    Parameters
    ----------
    x : torch.Tensor
        Finite floating-point values.
    fmt : str or torch.dtype, default "fp8_e4m3"
        One of :data:`FP8_FORMATS` or its dtype.
    scale : float, default 1.0
        The scale.

    Returns
    -------
    CastReport
        The shares lost and the relative error.

    Raises
    ------
    TypeError
        If ``x`` is not a floating-point tensor.
    ValueError
        If ``x`` is empty or not finite, or ``scale`` or ``fmt`` is invalid.

    Examples
    --------
    >>> x = torch.tensor([3e-6, 1e-6, 5e-8])
    >>> cast_report(x, "fp8_e5m2").underflow                  # E5M2 stops at 2**-16
    1.0
    >>> r = cast_report(x, "fp8_e5m2", scale_for(3e-6, "fp8_e5m2"))
    >>> r.underflow, r.saturated, r.subnormal
    (0.0, 0.0, 0.0)
    """
    spec = _fp8(fmt)
    x = _check_tensor("x", x)
    scale = _check_scale(scale)
    s = torch.tensor(scale, dtype=torch.float32, device=x.device)
    scaled = x * s
    stored = scaled.to(spec.dtype).float()
    back = stored / s
    nonzero = x != 0
    count = int(nonzero.sum())
    stored_mag = stored.abs()

    def share(mask: torch.Tensor) -> float:
        return int((mask & nonzero).sum()) / count if count else 0.0

    norm = float(x.double().norm())
    if not bool(torch.isfinite(back).all()):
        rel_error = math.inf
    else:
        rel_error = float((back.double() - x.double()).norm()) / norm if norm else 0.0
    return CastReport(
        format=spec.name,
        scale=scale,
        n=x.numel(),
        nonzero=count,
        underflow=share(stored == 0),
        saturated=share(beyond_range(scaled.abs(), spec)),
        subnormal=share((stored_mag > 0) & (stored_mag < spec.smallest_normal)),
        rel_error=rel_error,
    )


def sweep_single_scale(
    tensors: Mapping[str, torch.Tensor],
    fmt: str | torch.dtype = "fp8_e4m3",
    exponents: Iterable[int] = range(-12, 41),
) -> list[dict[str, Any]]:
    """Store several tensors in ``fmt`` with one shared scale ``2**k``, for each ``k``.

    The row with the smallest ``lost_total`` is the best a single scale can
    do: what per-tensor scaling improves on.

    Parameters
    ----------
    tensors : mapping of str to torch.Tensor
        The tensors, by name.
    fmt : str or torch.dtype, default "fp8_e4m3"
        One of :data:`FP8_FORMATS` or its dtype.
    exponents : iterable of int, default range(-12, 41)
        The exponents ``k`` to try.

    Returns
    -------
    list of dict
        One row per exponent: ``"log2_scale"`` (``k``), ``"reports"`` (the
        :class:`CastReport` of each tensor, by name) and ``"lost_total"``
        (their ``lost`` shares summed).

    Raises
    ------
    TypeError
        If ``tensors`` is not a non-empty mapping.
    ValueError
        If ``exponents`` is empty.

    Examples
    --------
    >>> ts = {"big": torch.tensor([300.0]), "small": torch.tensor([1e-4])}
    >>> rows = sweep_single_scale(ts, "fp8_e4m3", range(-2, 3))
    >>> [(r["log2_scale"], r["reports"]["big"].lost, r["reports"]["small"].lost)
    ...  for r in rows]
    [(-2, 0.0, 1.0), (-1, 0.0, 1.0), (0, 0.0, 1.0), (1, 1.0, 1.0), (2, 1.0, 1.0)]
    """
    if not isinstance(tensors, Mapping) or not tensors:
        raise TypeError("tensors must be a non-empty mapping from names to tensors")
    rows = []
    for k in exponents:
        k = check_int("exponent", k)
        reports = {name: cast_report(t, fmt, 2.0**k) for name, t in tensors.items()}
        rows.append(
            {
                "log2_scale": k,
                "reports": reports,
                "lost_total": sum(r.lost for r in reports.values()),
            }
        )
    if not rows:
        raise ValueError("exponents must hold at least one exponent")
    return rows


def _check_amax(amax: Any) -> float:
    if isinstance(amax, bool) or not isinstance(amax, numbers.Real) or not amax >= 0:
        raise ValueError(f"amax must be a number >= 0, got {amax!r}")
    return float(amax)


class DelayedScaler:
    """Per-tensor FP8 scaling from a history of absolute maxima ("delayed scaling").

    The scale for this step's cast is computed from the absolute maxima
    (*amax*) of the previous ``amax_history_len`` steps:
    ``scale = max / max(history) / 2**margin`` (:func:`scale_for`). After
    each cast the tensor's own amax joins the history and the scale is
    recomputed, ready for the next step. The first step uses scale 1. As in
    Transformer Engine's ``DelayedScaling`` (version 2.20.0.dev0, read on
    2026-12-01), a history whose maximum is zero or not finite leaves the
    scale unchanged.

    The scale is always one step behind: a tensor that grows past the
    history's maximum saturates for a step, and a large amax keeps the scale
    small for ``amax_history_len`` steps after it.

    Parameters
    ----------
    fmt : str or torch.dtype, default "fp8_e4m3"
        One of :data:`FP8_FORMATS` or its dtype.
    amax_history_len : int, default 1024
        Steps of history.
    margin : int, default 0
        Headroom, as in :func:`scale_for`.

    Raises
    ------
    ValueError
        If ``fmt`` is not FP8 or a setting is out of range.

    Examples
    --------
    >>> s = DelayedScaler("fp8_e4m3", amax_history_len=2)
    >>> s.scale
    1.0
    >>> _ = s.quantize(torch.tensor([2.0, -4.0])); s.scale  # 448 / 4
    112.0
    >>> _ = s.quantize(torch.tensor([1.0])); s.scale, s.amax_history
    (112.0, (4.0, 1.0))
    >>> _ = s.quantize(torch.tensor([1.0])); s.scale  # the 4 has left the window
    448.0

    An amax of zero (an all-zero tensor) leaves the scale as it was:

    >>> s = DelayedScaler("fp8_e5m2", amax_history_len=4)
    >>> s.update(0.0); s.scale
    1.0
    >>> s.update(2.0**-10); s.scale == 57344 * 2**10
    True
    """

    def __init__(
        self, fmt: str | torch.dtype = "fp8_e4m3", amax_history_len: int = 1024, margin: int = 0
    ) -> None:
        self._spec = _fp8(fmt)
        self._len = check_int("amax_history_len", amax_history_len, minimum=1)
        self._margin = check_int("margin", margin, minimum=0)
        self._history: deque[float] = deque(maxlen=self._len)
        self._scale = 1.0

    @property
    def format(self) -> str:
        """The FP8 format's name."""
        return self._spec.name

    @property
    def scale(self) -> float:
        """The scale the next :meth:`quantize` will use."""
        return self._scale

    @property
    def amax_history(self) -> tuple[float, ...]:
        """The recorded absolute maxima, oldest first (at most ``amax_history_len``)."""
        return tuple(self._history)

    def update(self, amax: float) -> None:
        """Record one step's amax and compute the next step's scale.

        Parameters
        ----------
        amax : float
            The step's absolute maximum (``>= 0``); the oldest entry drops out.

        Raises
        ------
        ValueError
            If ``amax`` is negative or not a number.
        """
        self._history.append(_check_amax(amax))  # the oldest drops out
        largest = max(self._history)
        if largest > 0 and math.isfinite(largest):  # else keep the scale
            self._scale = scale_for(largest, self.format, self._margin)

    def quantize(self, x: torch.Tensor) -> torch.Tensor:
        """Store ``x`` with the current scale (:func:`quantize`), then record its amax.

        Parameters
        ----------
        x : torch.Tensor
            Finite floating-point values.

        Returns
        -------
        torch.Tensor
            ``x`` as FP8 holds it, read back in FP32.

        Raises
        ------
        TypeError
            If ``x`` is not a floating-point tensor.
        ValueError
            If ``x`` is empty or not finite.
        """
        x = _check_tensor("x", x)
        out = quantize(x, self._spec.name, self._scale)
        self.update(float(x.abs().max()))
        return out

    def __repr__(self) -> str:
        return (
            f"DelayedScaler({self._spec.name!r}, amax_history_len={self._len}, "
            f"margin={self._margin}, scale={self._scale!r})"
        )


def compare_scalings(
    tensors: Iterable[torch.Tensor],
    fmt: str | torch.dtype = "fp8_e4m3",
    *,
    fixed_scale: float,
    amax_history_len: int = 16,
    margin: int = 0,
) -> list[dict[str, float]]:
    """Store a sequence of tensors (one per step) in FP8 three ways and compare.

    For each step: ``"none"`` stores the tensor unscaled, ``"fixed"`` with
    ``fixed_scale`` every step, ``"delayed"`` with a :class:`DelayedScaler`
    fed every tensor in turn.

    Parameters
    ----------
    tensors : iterable of torch.Tensor
        One tensor per step.
    fmt : str or torch.dtype, default "fp8_e4m3"
        One of :data:`FP8_FORMATS` or its dtype.
    fixed_scale : float
        The scale of the ``"fixed"`` way.
    amax_history_len : int, default 16
        History of the delayed scaler.
    margin : int, default 0
        Headroom of the delayed scaler.

    Returns
    -------
    list of dict
        Per step: ``"step"`` (from 1), ``"amax"``, ``"scale_delayed"`` (the
        delayed scale used), and ``rel_error_*`` and ``lost_*``
        (:class:`CastReport`'s ``rel_error`` and ``lost``) for each way.

    Raises
    ------
    ValueError
        If ``tensors`` is empty, a tensor is invalid, or a setting out of range.

    Examples
    --------
    >>> xs = [torch.tensor([1e-4, -1e-3]), torch.tensor([4e-3, 1e-4])]
    >>> rows = compare_scalings(xs, "fp8_e4m3", fixed_scale=2.0**20,
    ...                         amax_history_len=4)
    >>> for r in rows:
    ...     print(r["step"], r["lost_none"], r["lost_fixed"], r["lost_delayed"],
    ...           f"{r['scale_delayed']:.4g}")
    1 0.5 0.5 0.5 1
    2 0.5 0.5 0.5 4.48e+05
    """
    scaler = DelayedScaler(fmt, amax_history_len=amax_history_len, margin=margin)
    fixed_scale = _check_scale(fixed_scale)
    rows = []
    for step, x in enumerate(tensors, start=1):
        x = _check_tensor(f"tensors[{step - 1}]", x)
        used = scaler.scale
        reports = {
            "none": cast_report(x, fmt, 1.0),
            "fixed": cast_report(x, fmt, fixed_scale),
            "delayed": cast_report(x, fmt, used),
        }
        scaler.update(float(x.abs().max()))
        row: dict[str, float] = {"step": step, "amax": float(x.abs().max()), "scale_delayed": used}
        for way, report in reports.items():
            row[f"rel_error_{way}"] = report.rel_error
            row[f"lost_{way}"] = report.lost
        rows.append(row)
    if not rows:
        raise ValueError("tensors must hold at least one tensor")
    return rows
