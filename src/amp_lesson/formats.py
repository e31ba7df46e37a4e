# One module: every function answers what a format can hold, from one table of formats (FORMATS).
"""What a floating-point format can hold.

A format spends its bits on a sign, an exponent (the *range*: how large and
how small a number can get) and a mantissa (the *precision*: how many
significant bits survive). FP16 and BF16 are both 16 bits wide but split them
differently, and that split decides which numbers a mixed-precision run loses:

>>> store(1e-8, "fp16").event, store(1e-8, "bf16").event
('underflow', 'rounded')
>>> add_in(256, 1, "bf16"), add_in(256, 1, "fp16")
(256.0, 257.0)

Every limit here is derived rather than typed in: the limits of a format come
from :func:`torch.finfo` and from the bit layout (``bias = 2**(e-1) - 1``,
``smallest_subnormal = 2**(1 - bias - m)``), and what a format stores for a
value comes from torch's own cast, with the bits read from the stored tensor.
FP4 E2M1 is the exception: torch has neither ``finfo`` nor a cast for it, so
its limits come from its bit layout alone, its lack of infinity and NaN is
stated, and its rounding is :func:`amp_lesson.mx.round_to_element`.

TF32 has no storage dtype: it is a mode in which NVIDIA tensor cores multiply
FP32 inputs with FP16's 10 mantissa bits and FP32's 8 exponent bits. Its
stored value is emulated by rounding the FP32 bit pattern to 10 mantissa bits
(round to nearest, ties to even).

FP4 E2M1, the element format of MXFP4, has no dtype torch 2.13 can cast to:
``torch.float4_e2m1fn_x2`` holds two of them packed in a byte, with no
conversion. Its layout is its name (1 sign, 2 exponent and 1 mantissa bits),
and every one of its 16 patterns is a number: no infinity, no NaN (in MXFP4
the only NaN is the E8M0 scale's code 255). :func:`store` rounds to it from
float32 as the narrower formats are rounded, with
:func:`amp_lesson.mx.round_to_element` (to nearest, ties to even, clamped at
``±6``, as ``ml_dtypes`` 0.7.0 rounds).

A Python float is a float64. torch 2.13 converts float64 to float16,
bfloat16 and the float8 dtypes *through float32*, so a float64 input can be
rounded twice (``1 + 2**-11 + 2**-40`` becomes ``1.0`` in FP16, where a single
rounding gives ``1 + 2**-10``). :func:`store` casts from float64 exactly as
torch does, so it reports what a tensor built from that Python float holds;
for any value that is already a float32 the two roads agree.

Why this module is long: every fact about a format derives from one table of specs, and
store, ulp and the dtype resolver read it; more than half of its lines are docstrings.
"""

from __future__ import annotations

import dataclasses
import fractions
import math
import numbers
import re
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from amp_lesson import mx
from amp_lesson._checks import check_choice, check_finite, check_values, shown

__all__ = [
    "COLUMN_TITLES",
    "FORMATS",
    "FormatSpec",
    "Stored",
    "add_in",
    "beyond_range",
    "dtype_name",
    "dtype_of",
    "format_spec",
    "format_table",
    "round_to_tf32",
    "store",
    "ulp",
]


@dataclass(frozen=True)
class FormatSpec:
    """The layout and limits of one floating-point format.

    All limits are Python floats, derived from :func:`torch.finfo` and the
    bit layout (FP4 E2M1's from its bit layout alone), never typed in.

    Parameters
    ----------
    name : str
        The key in :data:`FORMATS`, e.g. ``"fp16"``.
    label : str
        How tables name it, e.g. ``"FP16"``.
    bits, sign_bits, exponent_bits, mantissa_bits : int
        The widths of the whole and of its fields.
    bias : int
        The exponent bias, ``2**(exponent_bits - 1) - 1``.
    max : float
        The largest finite value.
    smallest_normal : float
        The smallest positive normal value.
    smallest_subnormal : float
        The smallest positive value, ``2**(1 - bias - mantissa_bits)``.
    eps : float
        The gap between 1 and the next value.
    dtype : torch.dtype or None
        The storage dtype; ``None`` for TF32, a compute mode with none, and
        for FP4 E2M1, which torch stores only packed, two to a byte.
    has_inf : bool
        False for FP8 E4M3 (the ``fn`` in ``float8_e4m3fn`` means "finite and
        NaN only") and FP4 E2M1.
    has_nan : bool
        False for FP4 E2M1 only: all of its patterns are numbers.
    saturates : bool
        Whether torch's cast of a CPU tensor clamps a value beyond ``max`` to
        ``max`` instead of rounding it to infinity (for FP4 E2M1, which torch
        cannot cast to, whether :func:`amp_lesson.mx.round_to_element` does). (A CUDA tensor's cast can
        differ: on an H200 with torch 2.11, E4M3 gave NaN, where the CPU gives
        448.)

    Examples
    --------
    >>> fp16 = FORMATS["fp16"]
    >>> fp16.exponent_bits, fp16.mantissa_bits, fp16.bias, fp16.max
    (5, 10, 15, 65504.0)
    >>> FORMATS["bf16"].max > 1e38   # BF16 keeps FP32's exponent, so its range
    True
    """

    name: str
    label: str
    bits: int
    sign_bits: int
    exponent_bits: int
    mantissa_bits: int
    bias: int
    max: float
    smallest_normal: float
    smallest_subnormal: float
    eps: float
    dtype: torch.dtype | None
    has_inf: bool
    saturates: bool
    has_nan: bool = True


# (name, label, storage dtype). TF32 is built from FP32's exponent and FP16's mantissa.
_DEFINITIONS: tuple[tuple[str, str, torch.dtype | None], ...] = (
    ("fp32", "FP32", torch.float32),
    ("tf32", "TF32", None),
    ("fp16", "FP16", torch.float16),
    ("bf16", "BF16", torch.bfloat16),
    ("fp8_e4m3", "FP8 E4M3", torch.float8_e4m3fn),
    ("fp8_e5m2", "FP8 E5M2", torch.float8_e5m2),
    ("fp4_e2m1", "FP4 E2M1", None),
)

# Integer dtypes of each width, to read a stored value's bit pattern with .view().
_UINT_OF_WIDTH = {8: torch.uint8, 16: torch.int16, 32: torch.int32}

_FP32_MANTISSA_BITS = 1 - math.frexp(torch.finfo(torch.float32).eps)[1]  # eps = 2**-m
_FP32_EXPONENT_BITS = torch.finfo(torch.float32).bits - 1 - _FP32_MANTISSA_BITS


def _pattern_as(bit_pattern: int, bits: int, dtype: torch.dtype) -> torch.Tensor:
    """The 0-dim tensor of ``dtype`` whose bits are ``bit_pattern``."""
    if bits > 8 and bit_pattern >= 1 << (bits - 1):
        bit_pattern -= 1 << bits  # int16/int32 are signed: wrap the sign bit
    return torch.tensor(bit_pattern, dtype=_UINT_OF_WIDTH[bits]).view(dtype)


def _fp32_bits(x: torch.Tensor) -> torch.Tensor:
    """The FP32 bit patterns of ``x`` (cast to FP32 first) as non-negative int64."""
    return x.detach().to(torch.float32).view(torch.int32).to(torch.int64) & 0xFFFFFFFF


def _fp32_from_bits(bits: torch.Tensor) -> torch.Tensor:
    """The FP32 tensor whose bit patterns are ``bits`` (non-negative int64)."""
    signed = torch.where(bits >= 1 << 31, bits - (1 << 32), bits)  # int32 is signed
    return signed.to(torch.int32).view(torch.float32)


def _round_fp32_bits(bits: torch.Tensor, mantissa_bits: int) -> torch.Tensor:
    """Round FP32 bit patterns (:func:`_fp32_bits`) to ``mantissa_bits``, ties to even.

    Adding half a unit (less one, plus the kept last bit) to a pattern and
    clearing the dropped bits is round-to-nearest-even; a carry out of the
    mantissa bumps the exponent, which is exactly right, up to infinity. An
    infinity is kept; a NaN gets its quiet bit set, so it stays a NaN once
    the dropped bits are cleared.
    """
    dropped = _FP32_MANTISSA_BITS - mantissa_bits
    exponent_ones = (1 << _FP32_EXPONENT_BITS) - 1
    special = (bits >> _FP32_MANTISSA_BITS) & exponent_ones == exponent_ones  # inf or NaN
    is_nan = special & (bits & ((1 << _FP32_MANTISSA_BITS) - 1) != 0)
    kept_lsb = (bits >> dropped) & 1
    rounded = torch.where(special, bits, bits + (1 << (dropped - 1)) - 1 + kept_lsb)
    rounded = torch.where(is_nan, bits | (1 << (_FP32_MANTISSA_BITS - 1)), rounded)
    return rounded & ~((1 << dropped) - 1)


def _round_e2m1(f32: torch.Tensor, spec: FormatSpec) -> torch.Tensor:
    """Round float32 values to FP4 E2M1 (an infinity clamps to ``±max``, as any value past it)."""
    return mx.round_to_element(f32.clamp(-spec.max, spec.max), "e2m1")


def _spec(name: str, label: str, dtype: torch.dtype | None) -> FormatSpec:
    if name == "fp4_e2m1":  # the layout is the name; every pattern is a number
        exponent_bits, mantissa_bits = (int(c) for c in re.findall(r"\d", name)[1:])
        bias = 2 ** (exponent_bits - 1) - 1
        e2m1 = FormatSpec(
            name=name,
            label=label,
            bits=1 + exponent_bits + mantissa_bits,
            sign_bits=1,
            exponent_bits=exponent_bits,
            mantissa_bits=mantissa_bits,
            bias=bias,
            # the all-ones exponent is a binade of numbers, as in E4M3 but with no NaN
            max=math.ldexp(2 - math.ldexp(1, -mantissa_bits), 2**exponent_bits - 1 - bias),
            smallest_normal=math.ldexp(1.0, 1 - bias),
            smallest_subnormal=math.ldexp(1.0, 1 - bias - mantissa_bits),
            eps=math.ldexp(1.0, -mantissa_bits),
            dtype=None,
            has_inf=False,
            saturates=True,
            has_nan=False,
        )
        # Whether the rounding clamps, read from it as for the other formats.
        saturates = math.isfinite(_round_e2m1(torch.tensor([2 * e2m1.max]), e2m1).item())
        return dataclasses.replace(e2m1, saturates=saturates)
    if dtype is not None:
        finfo = torch.finfo(dtype)
        bits = finfo.bits
        mantissa_bits = 1 - math.frexp(finfo.eps)[1]  # eps = 2**-m
        exponent_bits = bits - 1 - mantissa_bits
        largest, smallest_normal, eps = finfo.max, finfo.smallest_normal, finfo.eps
        # Beyond range: twice the max, cast from float64 as torch casts any Python float.
        saturates = math.isfinite(torch.tensor(2 * largest, dtype=torch.float64).to(dtype).item())
        inf_pattern = ((1 << exponent_bits) - 1) << mantissa_bits
        has_inf = math.isinf(_pattern_as(inf_pattern, bits, dtype).item())
    else:  # TF32: FP32's exponent, FP16's mantissa
        exponent_bits = _FP32_EXPONENT_BITS
        mantissa_bits = 1 - math.frexp(torch.finfo(torch.float16).eps)[1]
        bits = 1 + exponent_bits + mantissa_bits
        emax = 2 ** (exponent_bits - 1) - 1  # the bias; the all-ones exponent is inf/nan
        largest = math.ldexp(2 - math.ldexp(1, -mantissa_bits), emax)
        smallest_normal = math.ldexp(1, 1 - emax)
        eps = math.ldexp(1, -mantissa_bits)
        # FP32's max lies beyond TF32's range: does the emulated rounding clamp it?
        fp32_max = torch.tensor(torch.finfo(torch.float32).max)
        rounded_max = _fp32_from_bits(_round_fp32_bits(_fp32_bits(fp32_max), mantissa_bits))
        saturates = math.isfinite(rounded_max.item())
        has_inf = True  # FP32's encoding: all-ones exponent, zero mantissa
    bias = 2 ** (exponent_bits - 1) - 1
    return FormatSpec(
        name=name,
        label=label,
        bits=bits,
        sign_bits=1,
        exponent_bits=exponent_bits,
        mantissa_bits=mantissa_bits,
        bias=bias,
        max=float(largest),
        smallest_normal=float(smallest_normal),
        smallest_subnormal=math.ldexp(1.0, 1 - bias - mantissa_bits),
        eps=float(eps),
        dtype=dtype,
        has_inf=has_inf,
        saturates=saturates,
    )


FORMATS: Mapping[str, FormatSpec] = types.MappingProxyType(
    {name: _spec(name, label, dtype) for name, label, dtype in _DEFINITIONS}
)
"""Read-only mapping from format name to its :class:`FormatSpec`.

>>> list(FORMATS)
['fp32', 'tf32', 'fp16', 'bf16', 'fp8_e4m3', 'fp8_e5m2', 'fp4_e2m1']
"""

_BY_DTYPE = {spec.dtype: spec for spec in FORMATS.values() if spec.dtype is not None}

COLUMN_TITLES: Mapping[str, str] = types.MappingProxyType(
    {
        "name": "name",
        "label": "format",
        "bits": "bits",
        "sign_bits": "sign",
        "exponent_bits": "exponent",
        "mantissa_bits": "mantissa",
        "bias": "bias",
        "max": "largest",
        "smallest_normal": "smallest normal",
        "smallest_subnormal": "smallest subnormal",
        "eps": "eps",
        "dtype": "torch dtype",
        "has_inf": "has inf",
        "saturates": "saturates",
        "has_nan": "has NaN",
    }
)
"""Headings for the columns of :func:`format_table`, for a rendered table.

>>> COLUMN_TITLES["smallest_subnormal"]
'smallest subnormal'
"""

_DEFAULT_COLUMNS = (
    "label",
    "bits",
    "sign_bits",
    "exponent_bits",
    "mantissa_bits",
    "bias",
    "max",
    "smallest_normal",
    "smallest_subnormal",
    "eps",
)


def format_spec(fmt: str | FormatSpec | torch.dtype, name: str = "fmt") -> FormatSpec:
    """The :class:`FormatSpec` that ``fmt`` stands for.

    Parameters
    ----------
    fmt : str, FormatSpec or torch.dtype
        A name of :data:`FORMATS`, a spec from it, or a storage dtype
        (``torch.float16`` is FP16).
    name : str, default "fmt"
        The caller's parameter name, for the error message.

    Returns
    -------
    FormatSpec
        The entry of :data:`FORMATS`.

    Raises
    ------
    ValueError
        If ``fmt`` is none of those.

    Examples
    --------
    >>> format_spec(torch.bfloat16).name, format_spec("fp8_e5m2").max
    ('bf16', 57344.0)
    """
    if isinstance(fmt, str):
        return FORMATS[check_choice(name, fmt, FORMATS)]
    if isinstance(fmt, FormatSpec) and FORMATS.get(fmt.name) == fmt:
        return FORMATS[fmt.name]
    if isinstance(fmt, torch.dtype) and fmt in _BY_DTYPE:
        return _BY_DTYPE[fmt]
    names = ", ".join(repr(n) for n in FORMATS)
    dtypes = ", ".join(str(d) for d in _BY_DTYPE)
    raise ValueError(
        f"{name} must be one of {names}, a FormatSpec from FORMATS, or one of the dtypes "
        f"{dtypes}; got {type(fmt).__name__} {fmt!r}"
    )


def dtype_of(
    fmt: str | FormatSpec | torch.dtype,
    allowed: Iterable[str] = ("fp16", "bf16"),
    *,
    name: str = "dtype",
) -> torch.dtype:
    """The torch dtype of a format given by name or dtype, checked against ``allowed``.

    Every function of the package that takes a low-precision dtype reads it
    through this one, so ``"fp16"`` and ``torch.float16`` mean the same
    everywhere and a wrong value gets the same message.

    Parameters
    ----------
    fmt : str, FormatSpec or torch.dtype
        A format name of :data:`FORMATS`, its spec, or its storage dtype.
    allowed : iterable of str, default ("fp16", "bf16")
        The format names the caller accepts.
    name : str, default "dtype"
        The caller's parameter name, for the error message.

    Returns
    -------
    torch.dtype
        The storage dtype of the format.

    Raises
    ------
    ValueError
        If ``fmt`` is not one of ``allowed``, by name or by dtype.

    Examples
    --------
    >>> dtype_of("bf16"), dtype_of(torch.float16)
    (torch.bfloat16, torch.float16)
    >>> dtype_of("fp32", name="autocast_dtype")
    Traceback (most recent call last):
    ...
    ValueError: autocast_dtype must be one of 'fp16', 'bf16', torch.float16,
    torch.bfloat16; got 'fp32'
    """
    allowed = [FORMATS[check_choice("allowed", a, FORMATS)] for a in allowed]
    for spec in allowed:
        if spec.dtype is not None and (fmt in (spec.name, spec.dtype) or fmt is spec):
            return spec.dtype
    choices = [repr(s.name) for s in allowed] + [str(s.dtype) for s in allowed if s.dtype]
    raise ValueError(f"{name} must be one of {', '.join(choices)}; got {fmt!r}")


def dtype_name(dtype: torch.dtype) -> str:
    """Torch's name of ``dtype`` without the ``torch.`` prefix, as tables show it.

    Parameters
    ----------
    dtype : torch.dtype
        Any torch dtype.

    Returns
    -------
    str
        For example ``"float16"``.

    Raises
    ------
    TypeError
        If ``dtype`` is not a torch dtype.

    Examples
    --------
    >>> dtype_name(torch.bfloat16)
    'bfloat16'
    """
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {dtype!r}")
    return str(dtype).removeprefix("torch.")


def _check_real(name: str, value: Any) -> float:
    """``value`` as a float, for any real number (inf and nan included)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"{name} is too large to be a float: {shown(value)}") from None


def _as_tensor(name: str, value: Any) -> torch.Tensor:
    """``value`` as a 0-dim CPU tensor that keeps its own dtype (float64 for a Python float)."""
    if isinstance(value, torch.Tensor):
        check_values(name, value)
        if value.dim() != 0:
            raise ValueError(f"{name} must be a 0-dim tensor, got shape {tuple(value.shape)}")
        if not value.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got {value.dtype}")
        return value.detach().cpu()
    return torch.tensor(_check_real(name, value), dtype=torch.float64)


@dataclass(frozen=True)
class Stored:
    """What a format stores for one value, and what happened on the way in.

    Parameters
    ----------
    value : float
        The value asked for.
    format : str
        The format's name in :data:`FORMATS`.
    stored : float
        The value the format holds.
    sign, exponent, mantissa : str
        The bit strings of the stored pattern.
    kind : {"zero", "subnormal", "normal", "inf", "nan"}
        What the stored value is.
    event : {"exact", "rounded", "underflow", "overflow", "saturated"}
        ``"exact"``: stored unchanged (a NaN stored as a NaN and an infinity
        stored as the same infinity count as exact); ``"rounded"``: stored as a
        nearby finite non-zero number; ``"underflow"``: a non-zero value stored
        as zero; ``"overflow"``: a value stored as infinity (or as NaN, for a
        format without infinity that does not saturate); ``"saturated"``: a
        value beyond the range (one that rounds past ``max``), or an infinity,
        clamped to ``±max``.
    rel_error : float
        ``|stored - value| / |value|`` in IEEE arithmetic, except that it is
        ``0.0`` whenever ``event == "exact"``: so an underflow gives ``1.0``,
        an overflow ``inf``, and an infinity saturated to ``max`` gives ``nan``
        (the ratio ``inf/inf`` is undefined).

    Examples
    --------
    >>> s = store(65520, "fp16")   # one half-gap above FP16's max
    >>> s.stored, s.event, s.kind, s.bits
    (inf, 'overflow', 'inf', '0111110000000000')
    """

    value: float
    format: str
    stored: float
    sign: str
    exponent: str
    mantissa: str
    kind: str
    event: str
    rel_error: float

    @property
    def bits(self) -> str:
        """The stored bit pattern, sign then exponent then mantissa.

        >>> store(-2.0, "fp8_e5m2").bits
        '11000000'
        """
        return self.sign + self.exponent + self.mantissa

    def __str__(self) -> str:
        label = FORMATS[self.format].label
        return (
            f"{self.value!r} in {label}: stored {self.stored!r} "
            f"({self.event}, relative error {self.rel_error:.3g}); "
            f"bits {self.sign} {self.exponent} {self.mantissa} ({self.kind})"
        )


def beyond_range(
    magnitude: float | torch.Tensor, fmt: str | FormatSpec | torch.dtype
) -> torch.Tensor:
    """Where ``magnitude`` rounds past the largest value of ``fmt``.

    That is, where a format with the same mantissa but an unbounded exponent
    would store something larger than ``max``: what a saturating cast clamps
    and any other cast turns into infinity (or NaN). The next value above
    ``max`` would be ``max + gap``; the midpoint between them goes up only if
    ``max`` has an odd last mantissa bit (ties to even). It does for the
    IEEE-style formats, but not for E4M3, whose max ``1.110 * 2**8`` is even
    because ``1.111 * 2**8`` is taken by NaN.

    Parameters
    ----------
    magnitude : float, int or torch.Tensor
        Non-negative values: a real number (an int, Fraction or float,
        compared exactly, however large) or a real tensor (compared in float64, exact for every float dtype).
    fmt : str, FormatSpec or torch.dtype
        The format, as :func:`store` accepts it.

    Returns
    -------
    torch.Tensor
        A bool tensor of ``magnitude``'s shape.

    Raises
    ------
    TypeError
        If ``magnitude`` is neither a real number nor a real tensor.
    ValueError
        If ``fmt`` is not a known format, or ``magnitude`` is negative, NaN
        or a meta tensor.

    Examples
    --------
    FP16's max is 65504 and the next step would be 65536, so 65520 is the
    midpoint and rounds up; E4M3's midpoint 464 rounds down to 448:

    >>> beyond_range(torch.tensor([65519.0, 65520.0]), "fp16").tolist()
    [False, True]
    >>> (beyond_range(464.0, "fp8_e4m3").item(),
    ...  beyond_range(465.0, "fp8_e4m3").item())
    (False, True)

    A Python float is compared with all its bits, a hair past the midpoint too:

    >>> beyond_range(464.000000000422, "fp8_e4m3").item()
    True

    An integer too large for a float is past every format's range:

    >>> beyond_range(10**400, "fp32").item()
    True
    """
    spec = format_spec(fmt)
    gap = math.ldexp(1.0, math.frexp(spec.max)[1] - 1 - spec.mantissa_bits)
    midpoint = spec.max + gap / 2
    rounds_up = int(spec.max / gap) % 2 == 1  # the midpoint rounds up to the next value
    if isinstance(magnitude, torch.Tensor):
        check_values("magnitude", magnitude)
        if magnitude.dtype == torch.bool or magnitude.is_complex():
            raise TypeError(f"magnitude must be a real tensor, got a {magnitude.dtype} tensor")
        values = magnitude.to(torch.float64)  # exact for every float dtype up to float64
        if bool((values < 0).any()) or bool(values.isnan().any()):
            raise ValueError("magnitude must hold non-negative values (no NaN)")
        return values >= midpoint if rounds_up else values > midpoint
    if isinstance(magnitude, bool) or not isinstance(magnitude, numbers.Real):
        raise TypeError(
            "magnitude must be a real number or a tensor, got "
            f"{type(magnitude).__name__} {shown(magnitude)}"
            + (
                "; pass torch.tensor(...) for several values"
                if isinstance(magnitude, (list, tuple))
                else ""
            )
        )
    # Exact, whatever the number: an int of any size, a Fraction, a float's every bit.
    if isinstance(magnitude, numbers.Rational):
        exact: fractions.Fraction | None = fractions.Fraction(
            int(magnitude.numerator), int(magnitude.denominator)
        )
    else:
        as_float = float(magnitude)
        exact = fractions.Fraction(as_float) if math.isfinite(as_float) else None
        if math.isnan(as_float):
            raise ValueError(f"magnitude must be a non-negative number, got {shown(magnitude)}")
    if magnitude < 0:
        raise ValueError(f"magnitude must be a non-negative number, got {shown(magnitude)}")
    beyond = exact is None or (exact >= midpoint if rounds_up else exact > midpoint)
    return torch.tensor(beyond)


def _stored_and_pattern(spec: FormatSpec, source: torch.Tensor) -> tuple[float, int]:
    """The stored value and its bit pattern (as a non-negative int of ``spec.bits``)."""
    if spec.name == "fp4_e2m1":  # from the float32, as torch casts to the narrow formats
        stored = _round_e2m1(source.to(torch.float32).reshape(1), spec)
        return stored.item(), int(mx.e2m1_codes(stored).item())
    if spec.dtype is None:  # TF32: round the FP32 pattern, keep its top 19 bits
        rounded = _round_fp32_bits(_fp32_bits(source), spec.mantissa_bits)
        stored = _fp32_from_bits(rounded).item()
        return stored, int(rounded) >> (_FP32_MANTISSA_BITS - spec.mantissa_bits)
    stored_tensor = source.to(spec.dtype)
    pattern = stored_tensor.view(_UINT_OF_WIDTH[spec.bits]).item() & ((1 << spec.bits) - 1)
    return stored_tensor.item(), pattern


def store(value: float | torch.Tensor, fmt: str | FormatSpec | torch.dtype) -> Stored:
    """Return what format ``fmt`` stores for ``value``, with its bits and what happened.

    The value is cast to ``fmt`` exactly as torch casts a tensor of its dtype
    (for TF32, rounded to 10 mantissa bits after FP32), and the bits are read
    from the stored tensor, so the answer is torch's, not a model of it. FP4
    E2M1 is the exception: torch 2.13 cannot cast to it, so the value is
    rounded from its FP32 here (to nearest, ties to even, clamped at ``±6``,
    as ``ml_dtypes`` 0.7.0 rounds a float32, which the tests compare bit for
    bit).

    Parameters
    ----------
    value : float or torch.Tensor
        A real number (a Python float is a float64) or a 0-dim floating-point tensor.
    fmt : str, FormatSpec or torch.dtype
        A name in :data:`FORMATS`, a :class:`FormatSpec`, or a torch dtype.

    Returns
    -------
    Stored
        The stored value, its bit fields, its kind and the event.

    Raises
    ------
    TypeError
        If ``value`` is not a real number or a floating-point tensor.
    ValueError
        If ``fmt`` is not a known format or ``value`` is not 0-dim, or
        ``value`` is a NaN and ``fmt`` has none (FP4 E2M1).

    Examples
    --------
    0.1 has no finite binary expansion, so every format rounds it; FP16's
    ten mantissa bits keep about three decimal digits:

    >>> s = store(0.1, "fp16")
    >>> s.stored, s.event, s.sign, s.exponent, s.mantissa
    (0.0999755859375, 'rounded', '0', '01011', '1001100110')
    >>> print(s)
    0.1 in FP16: stored 0.0999755859375 (rounded, relative error 0.000244);
    bits 0 01011 1001100110 (normal)

    FP8 E4M3 has no infinity, and torch's cast clamps to its max instead:

    >>> store(500.0, torch.float8_e4m3fn).stored, store(500.0, "fp8_e4m3").event
    (448.0, 'saturated')

    FP4 E2M1 keeps one mantissa bit: its magnitudes are 0, 0.5, 1, 1.5, 2, 3, 4 and 6:

    >>> [store(v, "fp4_e2m1").stored for v in (0.3, 2.5, 5.0, 100.0)]
    [0.5, 2.0, 4.0, 6.0]
    >>> store(-1.5, "fp4_e2m1").bits
    '1011'
    """
    spec = format_spec(fmt)
    source = _as_tensor("value", value)
    original = source.item()
    if math.isnan(original) and not spec.has_nan:
        raise ValueError(
            f"value is a NaN, and {spec.label} has none: every one of its patterns is a number"
        )
    stored, pattern = _stored_and_pattern(spec, source)
    # What the narrow cast rounds: torch goes through float32 first (see the module's top),
    # so whether a value was beyond range is judged on that float32, as the cast judged it.
    narrower = spec.bits < 32 or spec.dtype is None
    cast_from = source.to(torch.float32).item() if narrower else original

    bit_string = format(pattern, f"0{spec.bits}b")
    sign, exponent, mantissa = (
        bit_string[0],
        bit_string[1 : 1 + spec.exponent_bits],
        bit_string[1 + spec.exponent_bits :],
    )

    if math.isnan(stored):
        kind = "nan"
    elif math.isinf(stored):
        kind = "inf"
    elif stored == 0:
        kind = "zero"
    elif abs(stored) < spec.smallest_normal:
        kind = "subnormal"
    else:
        kind = "normal"

    if stored == original or (math.isnan(stored) and math.isnan(original)):
        event = "exact"
    elif not math.isfinite(stored):
        event = "overflow"
    elif stored == 0:
        event = "underflow"
    elif math.isinf(original) or bool(beyond_range(abs(cast_from), spec)):
        event = "saturated"
    else:
        event = "rounded"

    # Zero is stored exactly in every format, so the division below never sees a zero.
    rel_error = 0.0 if event == "exact" else abs(stored - original) / abs(original)

    return Stored(
        value=original,
        format=spec.name,
        stored=stored,
        sign=sign,
        exponent=exponent,
        mantissa=mantissa,
        kind=kind,
        event=event,
        rel_error=rel_error,
    )


def round_to_tf32(x: torch.Tensor) -> torch.Tensor:
    """Round every element of ``x`` to TF32 and return it as an FP32 tensor (TF32's emulation).

    The same rounding :func:`store` applies to one value (the FP32 bit
    pattern rounded to 10 mantissa bits, ties to even), so a matmul can be
    run on TF32-rounded inputs with FP32 accumulation, which is what a tensor
    core in TF32 mode computes (up to the order of the sums).

    Parameters
    ----------
    x : torch.Tensor
        A floating-point tensor; cast to FP32 first.

    Returns
    -------
    torch.Tensor
        FP32, of ``x``'s shape, each value representable in TF32.

    Raises
    ------
    TypeError
        If ``x`` is not a floating-point tensor.

    Examples
    --------
    >>> x = torch.tensor([1 + 2**-11, 1 + 3 * 2**-11, 1e-30, -0.1])
    >>> round_to_tf32(x).tolist()
    [1.0, 1.001953125, 9.999428271258529e-31, -0.0999755859375]
    >>> all(round_to_tf32(torch.tensor(v)).item() == store(v, "tf32").stored
    ...     for v in (0.1, 3e38))
    True
    """
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(f"x must be a floating-point torch.Tensor, got {x!r}")
    return _fp32_from_bits(_round_fp32_bits(_fp32_bits(x), FORMATS["tf32"].mantissa_bits))


def format_table(
    names: Iterable[str | FormatSpec | torch.dtype] = ("fp32", "fp16"),
    columns: Iterable[str] | None = None,
) -> list[dict[str, Any]]:
    """Return one row per format, as plain Python values, for the book's comparison table.

    Parameters
    ----------
    names : iterable of str, FormatSpec or torch.dtype, default ("fp32", "fp16")
        Formats as :func:`store` accepts them.
    columns : iterable of str, optional
        :class:`FormatSpec` field names (default: label, the bit counts, bias
        and the limits); :data:`COLUMN_TITLES` has a heading for each.

    Returns
    -------
    list of dict
        One dict per format; ``dtype`` is given as a string, ``None`` for TF32
        and FP4 E2M1.

    Raises
    ------
    TypeError
        If ``names`` or ``columns`` is a string or not iterable.
    ValueError
        If a format or column is unknown, or ``names`` is empty.

    Examples
    --------
    FP16 and BF16 spend the same 16 bits, one on range and one on precision:

    >>> columns = ["label", "exponent_bits", "max", "eps"]
    >>> for row in format_table(["fp16", "bf16"], columns):
    ...     print(row)
    {'label': 'FP16', 'exponent_bits': 5, 'max': 65504.0, 'eps': 0.0009765625}
    {'label': 'BF16', 'exponent_bits': 8, 'max': 3.3895313892515355e+38,
     'eps': 0.0078125}
    """
    if isinstance(names, str) or not isinstance(names, Iterable):
        raise TypeError(
            f"names must be a sequence of format names such as ('fp32', 'fp16'), got {names!r}"
        )
    specs = [format_spec(fmt, "names") for fmt in names]
    if not specs:
        raise ValueError("names must name at least one format, got none")
    if columns is None:
        columns = _DEFAULT_COLUMNS
    elif isinstance(columns, str) or not isinstance(columns, Iterable):
        raise TypeError(
            f"columns must be a sequence of column names such as ('label', 'max'), got {columns!r}"
        )
    columns = [check_choice("columns", column, COLUMN_TITLES) for column in columns]

    rows = []
    for spec in specs:
        row: dict[str, Any] = {}
        for column in columns:
            cell = getattr(spec, column)
            row[column] = None if cell is None else str(cell) if column == "dtype" else cell
        rows.append(row)
    return rows


def ulp(value: float, fmt: str | FormatSpec | torch.dtype) -> float:
    """Return the gap between adjacent numbers of ``fmt`` at ``value``.

    That is the spacing of the binade ``[2**k, 2**(k+1))`` holding
    ``|value|`` (at a power of two, the gap above it), or the subnormal
    spacing below ``smallest_normal``. Adding less than half of it to a
    stored number changes nothing.

    Parameters
    ----------
    value : float
        A finite value within ``±max`` of the format.
    fmt : str, FormatSpec or torch.dtype
        The format, as :func:`store` accepts it.

    Returns
    -------
    float
        The gap, a power of two.

    Raises
    ------
    ValueError
        If ``value`` is not finite or lies beyond the format's range, or
        ``fmt`` is unknown.

    Examples
    --------
    >>> ulp(2048, "fp16"), ulp(256, "bf16"), ulp(1.0, "fp32")
    (2.0, 2.0, 1.1920928955078125e-07)
    """
    spec = format_spec(fmt)
    magnitude = abs(check_finite("value", value))
    if magnitude > spec.max:
        raise ValueError(
            f"value must be within ±{spec.max!r}, the range of {spec.label}; got {value!r}"
        )
    # frexp gives |value| = f * 2**e with f in [0.5, 1), so the binade is 2**(e-1); zero -> subnormal.
    binade = math.frexp(magnitude)[1] - 1 if magnitude else 1 - spec.bias
    return math.ldexp(1.0, max(binade, 1 - spec.bias) - spec.mantissa_bits)


def add_in(a: float, b: float, fmt: str | FormatSpec | torch.dtype) -> float:
    """Return ``a + b`` with both stored in ``fmt`` and added by torch in that dtype.

    Only formats torch can add elementwise are allowed: FP32, FP16 and BF16
    (TF32 is a matmul mode; FP8 tensors have no elementwise arithmetic).

    Parameters
    ----------
    a, b : float
        The addends, each stored in ``fmt`` first.
    fmt : str, FormatSpec or torch.dtype
        ``"fp32"``, ``"fp16"`` or ``"bf16"`` (or their dtypes).

    Returns
    -------
    float
        The sum as ``fmt`` holds it.

    Raises
    ------
    ValueError
        If ``fmt`` is a format torch cannot add in.

    Examples
    --------
    Above 2048, FP16's gap is 2, so adding 1 is a tie that rounds to even;
    BF16 reaches the same point at 256:

    >>> add_in(2048, 1, "fp16"), add_in(2048, 2, "fp16"), add_in(256, 1, "bf16")
    (2048.0, 2050.0, 256.0)
    """
    spec = format_spec(fmt)
    addable = ("fp32", "fp16", "bf16")
    if spec.name not in addable:
        raise ValueError(
            f"fmt must be one of {', '.join(repr(n) for n in addable)} for add_in, because "
            f"torch has no elementwise addition in {spec.label}; got {spec.name!r}"
        )
    a_stored = torch.tensor(_check_real("a", a), dtype=torch.float64).to(spec.dtype)
    b_stored = torch.tensor(_check_real("b", b), dtype=torch.float64).to(spec.dtype)
    return (a_stored + b_stored).item()
