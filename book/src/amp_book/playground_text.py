"""How the playgrounds' scripts read what a reader types, and what the bit explorer's is
handed: their Python twin, which the browser tests hold the scripts to.

- the bit explorer: :func:`read_number` (a typed number or bit pattern) and
  :func:`format_parameters` (the formats' layouts, limits and NaN encodings, as JSON);
- the GradScaler playground: :func:`read_scaler_settings` (GradScaler's four arguments) and
  :func:`steps_pattern` (a schedule written as the playground writes it).

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
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from amp_lesson.formats import FORMATS, FormatSpec, store
from amp_lesson.playground import EXPLORER_FORMATS
from amp_lesson.scaler import ScalerSimulator

__all__ = [
    "DECIMAL",
    "MAX_NUMBER_LENGTH",
    "PATTERN_PREFIXES",
    "format_parameters",
    "read_number",
    "read_scaler_settings",
    "steps_pattern",
]

PATTERN_PREFIXES: Mapping[str, str] = {
    "fp32": "fp32",
    "tf32": "tf32",
    "bf16": "bf16",
    "fp16": "fp16",
    "e4m3": "fp8_e4m3",
    "e5m2": "fp8_e5m2",
    "e2m1": "fp4_e2m1",
    "fp8_e4m3": "fp8_e4m3",
    "fp8_e5m2": "fp8_e5m2",
    "fp4_e2m1": "fp4_e2m1",
}
"""Names a bit pattern may start with (``fp16:0x3c00``), and the format each means."""

# One way to match a number: "[0-9]+\.?[0-9]*" could split a run of digits anywhere, and a
# failing fullmatch tried every split (quadratic in the length).
DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
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
    if DECIMAL.fullmatch(stripped) or _SPECIAL.fullmatch(stripped):
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


def steps_pattern(schedule: Iterable[bool]) -> str:
    """The pattern of a schedule, ``x`` for an overflow and ``.`` for a clean step.

    Parameters
    ----------
    schedule : iterable of bool
        One entry per step, ``True`` for an overflow.

    Returns
    -------
    str
        The pattern.

    Examples
    --------
    >>> steps_pattern([True, False, False])
    'x..'
    """
    return "".join("x" if overflow else "." for overflow in schedule)


_SETTINGS = ("init_scale", "growth_factor", "backoff_factor", "growth_interval")
_INTEGER = re.compile(r"[+-]?[0-9]+")
_LARGEST_INTERVAL = 2**53 - 1  # JavaScript's largest exact integer


def read_scaler_settings(texts: Mapping[str, str]) -> dict[str, float | int]:
    """GradScaler's four arguments, read from the playground's text fields.

    ``texts`` maps ``init_scale``, ``growth_factor``, ``backoff_factor`` and
    ``growth_interval`` to what the reader typed: decimals for the first
    three (read as ``float(text)``), a whole number for the last. Each is
    checked as :class:`~amp_lesson.scaler.ScalerSimulator` checks it, and a
    bad one raises :class:`ValueError` with the message the playground
    shows beside that field.

    Parameters
    ----------
    texts : mapping of str to str
        The four fields as typed.

    Returns
    -------
    dict
        The four settings, ready for ``GradScaler`` or :func:`~amp_lesson.scaler.simulate`.

    Raises
    ------
    ValueError
        If a field is missing or out of range, with the message the playground shows.

    Examples
    --------
    >>> read_scaler_settings({"init_scale": "65536", "growth_factor": "2",
    ...                       "backoff_factor": "0.5", "growth_interval": "4"})
    {'init_scale': 65536.0, 'growth_factor': 2.0, 'backoff_factor': 0.5,
     'growth_interval': 4}
    >>> read_scaler_settings({"init_scale": "1e-50", "growth_factor": "2",
    ...                       "backoff_factor": "0.5", "growth_interval": "4"})
    Traceback (most recent call last):
    ...
    ValueError: init_scale must be representable in float32 (GradScaler keeps the
    scale in a float32 tensor): between about 1.4e-45 and 3.402823e+38, got 1e-50
    """
    if not isinstance(texts, Mapping):
        raise TypeError(f"texts must be a mapping of the four settings, got {texts!r}")
    missing = [name for name in _SETTINGS if name not in texts]
    if missing:
        raise ValueError(f"texts must give every setting; missing {', '.join(missing)}")
    values: dict[str, float | int] = {}
    for name in _SETTINGS:
        text = str(texts[name]).strip()
        if name == "growth_interval":
            if not _INTEGER.fullmatch(text):
                raise ValueError(
                    f"growth_interval must be a whole number such as 2000, got “{text}”"
                )
            values[name] = int(text)
            if values[name] > _LARGEST_INTERVAL:  # beyond what the page's script counts exactly
                raise ValueError(
                    f"growth_interval must be at most {_LARGEST_INTERVAL}, got {values[name]}"
                )
        else:
            if not DECIMAL.fullmatch(text):
                raise ValueError(f"{name} must be a number such as 2 or 0.5, got “{text}”")
            values[name] = float(text)
    # ScalerSimulator's own checks, so the messages are the ones Python gives.
    ScalerSimulator(**values)  # type: ignore[arg-type]
    return values
