"""What the bit explorer's script is handed and how it reads a typed number (its Python
twin, which the browser tests hold the script to).

The bit explorer runs in the reader's browser (``static/amp-floats.js``). The build hands it
:func:`format_parameters` as JSON, and :func:`read_number` is the reference for how the
script reads a typed text: a number is read as Python's ``float(text)`` reads it (a float64,
correctly rounded), then stored in each format as torch casts a float64 tensor, through
float32 for the narrower formats:

>>> from amp_lesson.formats import store
>>> # 1 + 2**-11 + a hair, and the FP32 pattern of 1 + 2**-11
>>> store(read_number("1.00048828125000001"), "fp16").stored
1.0
>>> store(read_number("0x3f801000"), "fp16").stored
1.0
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Iterable
from typing import Any

import torch

from amp_lesson.formats import FORMATS, FormatSpec, store
from amp_lesson.playground import EXPLORER_FORMATS, PATTERN_PREFIXES

__all__ = ["MAX_NUMBER_LENGTH", "format_parameters", "read_number"]

# One way to match a number: "[0-9]+\.?[0-9]*" could split a run of digits anywhere, and a
# failing fullmatch tried every split (quadratic in the length).
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
MAX_NUMBER_LENGTH = 2000
"""The longest text :func:`read_number` reads, in characters, spaces around it left out.

Every float64 fits: the longest exact decimal of one, ``2**-1074`` written
out in full as ``0.000...``, has 1076 characters.
"""

_SPECIAL = re.compile(r"[+-]?(?:inf|infinity|nan)", re.IGNORECASE)
_PATTERN = re.compile(r"(?:([A-Za-z0-9_]+)\s*:\s*)?0[xX](.*)", re.DOTALL)
_HEX_DIGITS = re.compile(r"[0-9A-Fa-f]+")

_FP32_MANTISSA_BITS = FORMATS["fp32"].mantissa_bits
_FP64_MANTISSA_BITS = 52
_UINT = {8: torch.uint8, 16: torch.int16, 32: torch.int32}

_HOW_TO_TYPE = (
    "type a decimal such as 0.1 or -2.5e-8, inf, nan, or a bit pattern such as "
    "0x3f800000 (FP32) or fp16:0x3c00"
)


def _pattern_value(pattern: int, spec: FormatSpec) -> float:
    """The Python float torch's ``.item()`` gives for ``spec``'s bit ``pattern``.

    FP4 E2M1 has no dtype whose ``.item()`` torch implements, so its fields
    are decoded here.
    """
    if spec.name == "fp4_e2m1":  # no dtype to view the bits as: read the fields
        sign = pattern >> (spec.bits - 1)
        exponent = pattern >> spec.mantissa_bits & ((1 << spec.exponent_bits) - 1)
        fraction = pattern & ((1 << spec.mantissa_bits) - 1)
        if exponent == 0:  # subnormal or zero
            magnitude = fraction * spec.smallest_subnormal
        else:
            significand = 1 + math.ldexp(fraction, -spec.mantissa_bits)
            magnitude = math.ldexp(significand, exponent - spec.bias)
        return -magnitude if sign else magnitude
    if spec.dtype is None:  # TF32: the FP32 whose low mantissa bits are zero
        pattern <<= _FP32_MANTISSA_BITS - spec.mantissa_bits
        bits, dtype = 32, torch.float32
    else:
        bits, dtype = spec.bits, spec.dtype
    if bits > 8 and pattern >= 1 << (bits - 1):
        pattern -= 1 << bits  # the signed integer with the same bits
    return torch.tensor(pattern, dtype=_UINT[bits]).view(dtype).item()


def read_number(text: str) -> float:
    """The float64 that ``text``, typed into the bit explorer, stands for.

    ``text`` is one of

    - a decimal, with an optional sign, point and exponent (``0.1``,
      ``-2.5e-8``, ``-0``), read as ``float(text)`` reads it;
    - ``inf``, ``infinity`` or ``nan``, with an optional sign, in any case;
    - a bit pattern: ``0x`` and hex digits for an FP32 pattern, or a format
      name and a colon first (``fp16:0x3c00``; names in
      :data:`PATTERN_PREFIXES`) for another format's. It stands for the
      Python float that torch's ``.item()`` gives for that pattern, NaN
      payloads included (a TF32 pattern is the FP32 one with its low 13
      mantissa bits zero; an E2M1 pattern, which torch cannot read, the
      value of its sign, exponent and mantissa fields).

    Leading and trailing spaces are ignored. Anything else, or a text
    longer than :data:`MAX_NUMBER_LENGTH` characters, raises
    :class:`ValueError` with the message the explorer shows.

    Parameters
    ----------
    text : str
        What the reader typed.

    Returns
    -------
    float
        The value (a Python float64).

    Raises
    ------
    TypeError
        If ``text`` is not a str.
    ValueError
        If ``text`` is none of those, or longer than
        :data:`MAX_NUMBER_LENGTH` characters; the message says what is allowed.

    Examples
    --------
    >>> read_number("0.1"), read_number("-0"), read_number("1e-8")
    (0.1, -0.0, 1e-08)
    >>> [read_number(t) for t in ("0x3f800000", "fp16:0x7bff", "e4m3:0x7e")]
    [1.0, 65504.0, 448.0]
    >>> read_number("fp16:0x10000")
    Traceback (most recent call last):
    ...
    ValueError: fp16:0x10000 does not fit in FP16's 16 bits: the largest pattern
    is 0xffff.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__} {text!r}")
    stripped = text.strip()
    if not stripped:
        raise ValueError(f"Type a number: {_HOW_TO_TYPE}.")
    if len(stripped) > MAX_NUMBER_LENGTH:
        raise ValueError(
            f"text must be at most {MAX_NUMBER_LENGTH} characters long, got "
            f"{len(stripped)}: {_HOW_TO_TYPE}."
        )
    if _DECIMAL.fullmatch(stripped) or _SPECIAL.fullmatch(stripped):
        return float(stripped)
    match = _PATTERN.fullmatch(stripped)
    if match is None:
        raise ValueError(f"“{stripped}” is not a number: {_HOW_TO_TYPE}.")
    prefix, digits = match.group(1), match.group(2)
    name = "fp32"
    if prefix is not None:
        if prefix.lower() not in PATTERN_PREFIXES:
            names = ", ".join(p for p in PATTERN_PREFIXES if not p.startswith(("fp8_", "fp4_")))
            raise ValueError(
                f"“{prefix}” is not a format: a bit pattern may start with one of "
                f"{names}, as in fp16:0x3c00."
            )
        name = PATTERN_PREFIXES[prefix.lower()]
    if not _HEX_DIGITS.fullmatch(digits):
        raise ValueError(
            f"“{stripped}” is not a bit pattern: after 0x come hex digits, 0-9 and a-f."
        )
    spec = FORMATS[name]
    pattern = int(digits, 16)
    if pattern >= 1 << spec.bits:
        largest = format((1 << spec.bits) - 1, "x")
        raise ValueError(
            f"{stripped} does not fit in {spec.label}'s {spec.bits} bits: "
            f"the largest pattern is 0x{largest}."
        )
    return _pattern_value(pattern, spec)


def _float64_from_bits(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


def _nan_encoding(spec: FormatSpec) -> dict[str, Any] | None:
    """What ``spec`` stores for a NaN, read from torch's casts through :func:`store`.

    ``pattern`` is the stored pattern of a positive quiet NaN; ``keeps_sign``
    whether a negative NaN keeps its sign bit; ``keeps_payload`` whether the
    top mantissa bits of the NaN's payload survive (the FP32-level payload
    shifted down to the format's mantissa, as a truncating cast does).
    ``None`` for a format with no NaN.
    """
    if not spec.has_nan:
        return None
    canonical = store(math.nan, spec)
    negative = store(-math.nan, spec)
    quiet = 1 << (_FP64_MANTISSA_BITS - 1)
    payload = quiet | (0b0101 << (_FP64_MANTISSA_BITS - 5))  # 0x7ffa8...: bits below quiet
    with_payload = store(_float64_from_bits((0x7FF << _FP64_MANTISSA_BITS) | payload), spec)
    return {
        "pattern": int(canonical.bits, 2),
        "keeps_sign": negative.sign == "1",
        "keeps_payload": with_payload.bits != canonical.bits,
    }


def format_parameters(names: Iterable[str] = EXPLORER_FORMATS) -> list[dict[str, Any]]:
    """The parameters of each format that the explorer's script works from, JSON-ready.

    Each entry has the :class:`~amp_lesson.formats.FormatSpec` fields
    (``dtype`` as a string), the short ``prefix`` a bit pattern of the format
    is typed with, ``fp32_top_bits`` (whether a pattern of the format is the
    top bits of an FP32 pattern: TF32's), and ``nan``: how torch stores a NaN
    in the format (see ``_nan_encoding``; ``None`` where it has none). Every
    entry is derived, none typed in: the script and
    :func:`~amp_lesson.formats.store` read the same facts.

    Parameters
    ----------
    names : iterable of str
        Format names of :data:`~amp_lesson.formats.FORMATS`.

    Returns
    -------
    list of dict
        One entry per format, in order.

    Examples
    --------
    >>> e4m3 = format_parameters(["fp8_e4m3"])[0]
    >>> e4m3["max"], e4m3["has_inf"], e4m3["saturates"], e4m3["prefix"]
    (448.0, False, True, 'e4m3')
    >>> e4m3["nan"]
    {'pattern': 127, 'keeps_sign': True, 'keeps_payload': False}
    >>> # torch's BF16 cast drops a NaN's sign
    >>> format_parameters(["bf16"])[0]["nan"]
    {'pattern': 32704, 'keeps_sign': False, 'keeps_payload': False}
    """
    if isinstance(names, str) or not isinstance(names, Iterable):
        raise TypeError(f"names must be a sequence of format names, got {names!r}")
    entries = []
    for name in names:
        if name not in FORMATS:
            allowed = ", ".join(repr(a) for a in FORMATS)
            raise ValueError(f"names must be one of {allowed}; got {name!r}")
        spec = FORMATS[name]
        prefix = next(p for p, n in PATTERN_PREFIXES.items() if n == spec.name)
        entries.append(
            {
                "name": spec.name,
                "label": spec.label,
                "prefix": prefix,
                "bits": spec.bits,
                "exponent_bits": spec.exponent_bits,
                "mantissa_bits": spec.mantissa_bits,
                "bias": spec.bias,
                "max": spec.max,
                "smallest_normal": spec.smallest_normal,
                "smallest_subnormal": spec.smallest_subnormal,
                "eps": spec.eps,
                "dtype": None if spec.dtype is None else str(spec.dtype),
                "has_inf": spec.has_inf,
                "has_nan": spec.has_nan,
                "saturates": spec.saturates,
                "fp32_top_bits": spec.name == "tf32",
                "nan": _nan_encoding(spec),
            }
        )
    if not entries:
        raise ValueError("names must name at least one format, got none")
    return entries
