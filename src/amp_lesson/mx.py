# One module: one specification (OCP MX 1.0): its element formats, block scales and the errors they give.
"""Block scaling: the OCP Microscaling (MX) formats MXFP8 and MXFP4.

Per-tensor FP8 scaling (:mod:`amp_lesson.fp8`) gives a whole tensor one scale,
so one large value sets the scale of millions of small ones. The MX formats
of the Open Compute Project's Microscaling specification (version 1.0,
September 2023) give every **block of 32 consecutive values** its own scale:

- the scale is an **E8M0** number: 8 exponent bits, no sign, no mantissa,
  so always a power of two, ``2**(code - 127)``, from ``2**-127`` to
  ``2**127`` (code 255 is NaN);
- the elements are FP8 (E4M3 or E5M2: **MXFP8**) or the 4-bit **E2M1**
  (**MXFP4**), whose sixteen codes hold ``±{0, 0.5, 1, 1.5, 2, 3, 4, 6}``.

The specification's conversion, implemented by :func:`quantize_mx`: the
block's shared exponent is ``floor(log2(amax)) - emax``, where ``amax`` is
the block's largest magnitude and ``emax`` the exponent of the element
format's largest normal number (8 for E4M3, 15 for E5M2, 2 for E2M1). Each
value is divided by ``2**shared_exp`` and rounded to the nearest element
(ties to even), and a quotient beyond the element's largest value is
clamped to it. Since ``amax / 2**shared_exp`` lies in ``[2**emax,
2**(emax+1))`` (unless the exponent is clamped to E8M0's range), the
largest value of a block can exceed the element's maximum (E4M3: up to 512
against 448) and then saturates.

A power-of-two scale changes only the exponent of each value: dividing by it
is exact, so the only rounding is the one to the element format, and the
hardware applies the scale by adding exponents, not by multiplying.

>>> x = torch.tensor([0.3, -1.7, 5e-4, 40.0] * 8)   # one block of 32
>>> q = quantize_mx(x, "mxfp8_e4m3")
>>> q.scale_exponents.tolist(), q.dequantize()[:4].tolist()
([-3], [0.3125, -1.75, 0.00048828125, 40.0])
>>> quantize_mx(x, "mxfp4_e2m1").dequantize()[:4].tolist()
[0.0, -0.0, 0.0, 32.0]

Why this module is long: the element rounding, the E8M0 and E2M1 encodings and the
comparison of three scalings read the same element specs; most lines are docstrings.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from amp_lesson._checks import check_choice, check_int, check_positive, check_values, described

__all__ = [
    "BLOCK_SIZE",
    "ELEMENTS",
    "MAX_BLOCK_SIZE",
    "MX_FORMATS",
    "SCALE_ROUNDINGS",
    "ElementFormat",
    "MXTensor",
    "QuantReport",
    "compare_block_scaling",
    "e2m1_codes",
    "e8m0_codes",
    "pack_e2m1",
    "quant_report",
    "quantize_mx",
    "quantize_per_tensor",
    "round_to_element",
]

BLOCK_SIZE = 32
"""Elements per shared scale in every MX format of the OCP specification v1.0."""

MAX_BLOCK_SIZE = 2**16
"""The longest block :func:`quantize_mx` takes. Blocks other than 32 are for experiments;
the last block is padded with zeros to the full size, so a block far longer than any tensor
would only allocate zeros."""

_BLOCK_SIZE_WHY = "blocks other than the specification's 32 are for experiments"


@dataclass(frozen=True)
class ElementFormat:
    """A small floating-point element format, as the MX specification uses it.

    Parameters
    ----------
    name : str
        ``"e4m3"``, ``"e5m2"`` or ``"e2m1"``.
    exponent_bits, mantissa_bits : int
        Field widths (one sign bit besides).
    emin : int
        Exponent of the smallest normal number; below it are the subnormals,
        spaced ``2**(emin - mantissa_bits)``.
    emax : int
        Exponent of the largest normal number.
    max : float
        The largest finite value.
    torch_dtype : torch.dtype or None
        The torch dtype that stores it: a float8 dtype, or
        ``torch.float4_e2m1fn_x2`` (two E2M1 values per byte).
    """

    name: str
    exponent_bits: int
    mantissa_bits: int
    emin: int
    emax: int
    max: float
    torch_dtype: torch.dtype | None


ELEMENTS: dict[str, ElementFormat] = {
    "e4m3": ElementFormat("e4m3", 4, 3, -6, 8, 448.0, torch.float8_e4m3fn),
    "e5m2": ElementFormat("e5m2", 5, 2, -14, 15, 57344.0, torch.float8_e5m2),
    "e2m1": ElementFormat("e2m1", 2, 1, 0, 2, 6.0, getattr(torch, "float4_e2m1fn_x2", None)),
}
"""The element formats of MXFP8 (E4M3, E5M2) and MXFP4 (E2M1)."""

MX_FORMATS: dict[str, str] = {"mxfp8_e4m3": "e4m3", "mxfp8_e5m2": "e5m2", "mxfp4_e2m1": "e2m1"}
"""The MX formats by name, each with its element format."""


def _element(element: Any) -> ElementFormat:
    if isinstance(element, ElementFormat):
        return element
    return ELEMENTS[check_choice("element", element, tuple(ELEMENTS))]


def _check_tensor(name: str, x: Any) -> torch.Tensor:
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {described(x)}")
    check_values(name, x)
    if x.numel() == 0:
        raise ValueError(f"{name} must hold at least one value, got an empty tensor")
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} must be finite: MX scales are computed from finite maxima")
    return x


def round_to_element(x: torch.Tensor, element: str | ElementFormat) -> torch.Tensor:
    """Round ``x`` to the nearest value of an element format, ties to even, clamping at ``±max``.

    The arithmetic is exact: each value is split at the spacing of its
    binade (the subnormal spacing below the smallest normal) and rounded
    with :func:`torch.round`, which rounds half to even, in float64.

    Parameters
    ----------
    x : torch.Tensor
        Finite floating-point values.
    element : {"e4m3", "e5m2", "e2m1"} or ElementFormat
        The element format.

    Returns
    -------
    torch.Tensor
        Float32, the same shape: every value representable in the format.

    Raises
    ------
    TypeError
        If ``x`` is not a floating-point tensor.
    ValueError
        If ``x`` is empty or not finite, or ``element`` is unknown.

    Examples
    --------
    >>> x = torch.tensor([0.3, 0.75, 2.5, 5.0, 7.0, -100.0])
    >>> round_to_element(x, "e2m1").tolist()
    [0.5, 1.0, 2.0, 4.0, 6.0, -6.0]
    >>> round_to_element(torch.tensor([500.0, 0.001]), "e4m3").tolist()
    [448.0, 0.001953125]
    """
    spec = _element(element)
    v = _check_tensor("x", x).double()
    mag = v.abs()
    exponent = torch.floor(torch.log2(mag.clamp_min(2.0**spec.emin))).clamp_min(spec.emin)
    # log2 of a value just below a power of two can round up to it in float64: step back
    exponent = torch.where(torch.exp2(exponent) > mag, exponent - 1, exponent).clamp_min(spec.emin)
    quantum = torch.exp2(exponent - spec.mantissa_bits)
    rounded = torch.round(mag / quantum) * quantum
    return torch.copysign(rounded.clamp_max(spec.max), v).float()


def e8m0_codes(exponents: torch.Tensor) -> torch.Tensor:
    """Encode power-of-two exponents as E8M0 bytes: ``code = exponent + 127``.

    Parameters
    ----------
    exponents : torch.Tensor
        Integer exponents in ``[-127, 127]``.

    Returns
    -------
    torch.Tensor
        ``uint8`` codes; ``.view(torch.float8_e8m0fnu)`` reads them as scales.

    Raises
    ------
    ValueError
        If an exponent is outside ``[-127, 127]`` (code 255 is NaN, so ``128`` has no code).

    Examples
    --------
    >>> c = e8m0_codes(torch.tensor([-127, 0, 3]))
    >>> c.tolist(), c.view(torch.float8_e8m0fnu).float()[1:].tolist()
    ([0, 127, 130], [1.0, 8.0])
    """
    if (
        not isinstance(exponents, torch.Tensor)
        or exponents.is_floating_point()
        or exponents.dtype == torch.bool
    ):
        raise TypeError(f"exponents must be an integer tensor, got {described(exponents)}")
    if exponents.numel() and (int(exponents.min()) < -127 or int(exponents.max()) > 127):
        raise ValueError("exponents must lie in [-127, 127], the range E8M0 encodes")
    return (exponents.to(torch.int16) + 127).to(torch.uint8)


_E2M1_VALUES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def e2m1_codes(values: torch.Tensor) -> torch.Tensor:
    """Return the 4-bit E2M1 code (sign bit, 2 exponent bits, 1 mantissa bit) of each value.

    Parameters
    ----------
    values : torch.Tensor
        Values already representable in E2M1 (as :func:`round_to_element` returns).

    Returns
    -------
    torch.Tensor
        ``uint8`` codes from 0 to 15.

    Raises
    ------
    ValueError
        If a value is not one of E2M1's.

    Examples
    --------
    >>> e2m1_codes(torch.tensor([0.0, 0.5, 1.5, 6.0, -6.0])).tolist()
    [0, 1, 3, 7, 15]
    """
    v = _check_tensor("values", values).float()
    match = v.abs().unsqueeze(-1) == _E2M1_VALUES.to(v.device)
    if not bool(match.any(-1).all()):
        raise ValueError("values must be E2M1 values, ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}")
    magnitude = match.to(torch.uint8).argmax(-1).to(torch.uint8)
    return magnitude | (torch.signbit(v).to(torch.uint8) << 3)


def pack_e2m1(codes: torch.Tensor) -> torch.Tensor:
    """Pack 4-bit codes two to a byte, the first in the low nibble, as ``torch.float4_e2m1fn_x2``.

    Parameters
    ----------
    codes : torch.Tensor
        ``uint8`` codes from 0 to 15, an even number of them.

    Returns
    -------
    torch.Tensor
        Half as many bytes, of dtype ``torch.float4_e2m1fn_x2`` (torch 2.13 stores
        this dtype but has no arithmetic or cast for it).

    Raises
    ------
    ValueError
        If the number of codes is odd or a code exceeds 15.

    Examples
    --------
    >>> codes = torch.tensor([1, 2, 15, 0], dtype=torch.uint8)
    >>> pack_e2m1(codes).view(torch.uint8).tolist()
    [33, 15]
    """
    if not isinstance(codes, torch.Tensor) or codes.dtype != torch.uint8:
        raise TypeError("codes must be a uint8 tensor")
    flat = codes.flatten()
    if flat.numel() % 2:
        raise ValueError(f"codes must hold an even number of codes, got {flat.numel()}")
    if flat.numel() and int(flat.max()) > 15:
        raise ValueError("codes must lie in [0, 15]: E2M1 codes have 4 bits")
    pairs = flat.view(-1, 2)
    packed = pairs[:, 0] | (pairs[:, 1] << 4)
    return packed.view(ELEMENTS["e2m1"].torch_dtype)


@dataclass(frozen=True)
class MXTensor:
    """A tensor in an MX format: one E8M0 scale per block, elements in the element format.

    Parameters
    ----------
    format : str
        One of :data:`MX_FORMATS`.
    shape : torch.Size
        The original shape.
    block_size : int
        Elements per scale.
    scale_exponents : torch.Tensor
        One ``int16`` exponent per block: the block's scale is ``2**exponent``.
    elements : torch.Tensor
        Float32, one row per block (the last one zero-padded): the values
        divided by their block's scale and rounded to the element format.
    """

    format: str
    shape: torch.Size
    block_size: int
    scale_exponents: torch.Tensor
    elements: torch.Tensor

    @property
    def scale_codes(self) -> torch.Tensor:
        """The scales as stored, E8M0 bytes viewed as ``torch.float8_e8m0fnu``."""
        return e8m0_codes(self.scale_exponents).view(torch.float8_e8m0fnu)

    def element_bits(self) -> torch.Tensor:
        """Return the elements as stored.

        Returns
        -------
        torch.Tensor
            A float8 tensor (torch's cast, exact since the elements are
            representable), or the E2M1 codes packed two to a byte.
        """
        spec = ELEMENTS[MX_FORMATS[self.format]]
        if spec.name == "e2m1":
            if self.elements.numel() % 2:
                raise ValueError(
                    f"E2M1 codes are packed two to a byte, and these {self.elements.numel()} "
                    f"elements (blocks of block_size={self.block_size}) are an odd number"
                )
            return pack_e2m1(e2m1_codes(self.elements))
        return self.elements.to(spec.torch_dtype)

    @property
    def bits_per_value(self) -> float:
        """Bits of storage per value, the element's bits plus the shared scale's ``8 / block_size``."""
        spec = ELEMENTS[MX_FORMATS[self.format]]
        return 1 + spec.exponent_bits + spec.mantissa_bits + 8 / self.block_size

    def dequantize(self) -> torch.Tensor:
        """Read the values back.

        Returns
        -------
        torch.Tensor
            Float32 in the original shape: each element times its block's ``2**exponent``.
        """
        scales = torch.exp2(self.scale_exponents.double()).unsqueeze(1)
        values = (self.elements.double() * scales).flatten()[: math.prod(self.shape)]
        return values.float().reshape(self.shape)


SCALE_ROUNDINGS: tuple[str, ...] = ("floor", "rceil")
"""How :func:`quantize_mx` picks a block's exponent: the specification's ``"floor"``,
``floor(log2(amax)) - emax``, or ``"rceil"``, the smallest exponent with ``amax / 2**e <= max``
(no value saturates unless that exponent is clamped to 127; torchao's
``ScaleCalculationMode.RCEIL``, read on 2026-12-02, names it and refers to the cuBLAS
documentation for it)."""


def _shared_exponents(amax: torch.Tensor, spec: ElementFormat, rounding: str) -> torch.Tensor:
    """Each block's exponent, from its float64 ``amax``; every comparison exact (powers of two)."""
    if rounding == "floor":
        e = torch.floor(torch.log2(amax.clamp_min(2.0**-149)))
        e = torch.where(torch.exp2(e) > amax, e - 1, e)
        shared = e - spec.emax
    else:
        shared = torch.ceil(torch.log2(amax.clamp_min(2.0**-149) / spec.max))
        shared = torch.where(spec.max * torch.exp2(shared - 1) >= amax, shared - 1, shared)
        shared = torch.where(spec.max * torch.exp2(shared) < amax, shared + 1, shared)
    shared = shared.clamp(-127, 127)
    return torch.where(amax == 0, torch.full_like(shared, -127), shared)


def quantize_mx(
    x: torch.Tensor,
    fmt: str = "mxfp8_e4m3",
    block_size: int = BLOCK_SIZE,
    scale_rounding: str = "floor",
) -> MXTensor:
    """Convert ``x`` to an MX format as the OCP Microscaling specification v1.0 does.

    Blocks are ``block_size`` consecutive values of ``x`` in row-major order
    (the last one zero-padded), so for a matrix whose rows are a multiple of
    ``block_size`` long each block lies along a row. A block's shared exponent
    is ``floor(log2(amax)) - emax``, clamped to ``[-127, 127]`` (an all-zero
    block gets ``-127``); each value divided by ``2**exponent`` is rounded to
    the element format (:func:`round_to_element`: ties to even, clamped at
    the element's largest value).

    Parameters
    ----------
    x : torch.Tensor
        Finite floating-point values.
    fmt : {"mxfp8_e4m3", "mxfp8_e5m2", "mxfp4_e2m1"}, default "mxfp8_e4m3"
        The MX format.
    block_size : int, default 32
        Values per scale (the specification fixes 32), at most
        :data:`MAX_BLOCK_SIZE`.
    scale_rounding : {"floor", "rceil"}, default "floor"
        The specification's exponent, or the one rounded up so that nothing
        saturates (:data:`SCALE_ROUNDINGS`).

    Returns
    -------
    MXTensor
        The scales and elements.

    Raises
    ------
    TypeError
        If ``x`` is not a floating-point tensor.
    ValueError
        If ``x`` is empty, not finite or a meta tensor, ``fmt`` or
        ``scale_rounding`` unknown, or ``block_size`` outside ``[1, MAX_BLOCK_SIZE]``.

    Examples
    --------
    >>> q = quantize_mx(torch.tensor([1.0, 3.0, 512.0, 480.0]), block_size=4)
    >>> q.scale_exponents.tolist(), q.elements.tolist()
    ([1], [[0.5, 1.5, 256.0, 240.0]])
    >>> q = quantize_mx(torch.tensor([1.0, 3.0, 500.0, 0.01]), block_size=4)
    >>> q.scale_exponents.tolist(), q.dequantize().tolist()  # 500 saturates at 448
    ([0], [1.0, 3.0, 448.0, 0.009765625])
    >>> x = torch.tensor([1.0, 3.0, 500.0, 0.01])
    >>> q = quantize_mx(x, block_size=4, scale_rounding="rceil")
    >>> q.scale_exponents.tolist(), q.dequantize().tolist()
    ([1], [1.0, 3.0, 512.0, 0.01171875])
    """
    spec = ELEMENTS[MX_FORMATS[check_choice("fmt", fmt, tuple(MX_FORMATS))]]
    block_size = check_int(
        "block_size", block_size, minimum=1, maximum=MAX_BLOCK_SIZE, why=_BLOCK_SIZE_WHY
    )
    rounding = check_choice("scale_rounding", scale_rounding, SCALE_ROUNDINGS)
    x = _check_tensor("x", x)
    flat = x.detach().double().flatten()
    pad = -flat.numel() % block_size
    blocks = torch.nn.functional.pad(flat, (0, pad)).view(-1, block_size)
    shared = _shared_exponents(blocks.abs().amax(1), spec, rounding)
    elements = round_to_element(blocks / torch.exp2(shared).unsqueeze(1), spec)
    return MXTensor(fmt, x.shape, block_size, shared.to(torch.int16), elements)


def quantize_per_tensor(
    x: torch.Tensor, element: str, scale: float | None = None
) -> tuple[torch.Tensor, float]:
    """Store ``x`` in an element format with one scale for the whole tensor, and read it back.

    Parameters
    ----------
    x : torch.Tensor
        Finite floating-point values.
    element : {"e4m3", "e5m2", "e2m1"}
        The element format.
    scale : float, optional
        The scale; by default the current one, ``max / amax`` (``1.0`` for an
        all-zero tensor): the largest value lands on the format's largest.

    Returns
    -------
    tuple of (torch.Tensor, float)
        The values read back (``round_to_element(x * scale) / scale``, float32) and the scale.

    Raises
    ------
    TypeError, ValueError
        If ``x`` or ``element`` is invalid, or ``scale`` not positive.

    Examples
    --------
    >>> y, s = quantize_per_tensor(torch.tensor([3.0, 0.01, -0.2]), "e2m1")
    >>> s, y.tolist()
    (2.0, [3.0, 0.0, -0.25])
    """
    spec = _element(element)
    x = _check_tensor("x", x)
    if scale is None:
        amax = float(x.abs().max())
        scale = spec.max / amax if amax > 0 else 1.0
    scale = check_positive("scale", scale)
    return (round_to_element(x.double() * scale, spec).double() / scale).float(), scale


@dataclass(frozen=True)
class QuantReport:
    """What storing a tensor in a low-precision format did to its values.

    Shares are fractions of the non-zero values.

    Parameters
    ----------
    underflow : float
        Share read back as zero.
    saturated : float
        Share whose scaled value exceeded the element format's largest and was clamped.
    rel_error : float
        ``‖read back − x‖ / ‖x‖`` (``0.0`` for an all-zero tensor).
    """

    underflow: float
    saturated: float
    rel_error: float


def quant_report(x: torch.Tensor, stored: torch.Tensor, saturated: torch.Tensor) -> QuantReport:
    """Compare ``x`` with the values read back, ``stored``, given the mask of saturated values.

    Parameters
    ----------
    x, stored : torch.Tensor
        The original and the values read back, one shape.
    saturated : torch.Tensor
        Boolean, one shape: where the scaled value exceeded the element's largest.

    Returns
    -------
    QuantReport
        The shares and the relative error.

    Raises
    ------
    TypeError
        If ``saturated`` is not a boolean tensor.
    ValueError
        If the shapes differ.

    Examples
    --------
    >>> x = torch.tensor([1.0, 1e-9, 0.0, 8.0])
    >>> r = quant_report(x, torch.tensor([1.0, 0.0, 0.0, 6.0]),
    ...                  torch.tensor([False, False, False, True]))
    >>> r.underflow, r.saturated, round(r.rel_error, 4)
    (0.3333333333333333, 0.3333333333333333, 0.2481)
    """
    if not isinstance(saturated, torch.Tensor) or saturated.dtype != torch.bool:
        raise TypeError(f"saturated must be a boolean tensor (a mask), got {described(saturated)}")
    if x.shape != stored.shape or x.shape != saturated.shape:
        raise ValueError(
            f"x, stored and saturated must have one shape, got {tuple(x.shape)}, "
            f"{tuple(stored.shape)} and {tuple(saturated.shape)}"
        )
    nonzero = x != 0
    n = int(nonzero.sum())
    norm = float(x.double().norm())
    if n == 0:
        return QuantReport(0.0, 0.0, 0.0)
    return QuantReport(
        underflow=int((nonzero & (stored == 0)).sum()) / n,
        saturated=int((nonzero & saturated).sum()) / n,
        rel_error=float((stored.double() - x.double()).norm()) / norm,
    )


def _mx_report(x: torch.Tensor, fmt: str, rounding: str = "floor") -> QuantReport:
    q = quantize_mx(x, fmt, scale_rounding=rounding)
    spec = ELEMENTS[MX_FORMATS[fmt]]
    flat = x.detach().double().flatten()
    pad = -flat.numel() % q.block_size
    scaled = torch.nn.functional.pad(flat, (0, pad)).view(-1, q.block_size)
    scaled = scaled / torch.exp2(q.scale_exponents.double()).unsqueeze(1)
    over = (scaled.abs() > spec.max).flatten()[: flat.numel()].reshape(x.shape)
    return quant_report(x, q.dequantize(), over)


def _tensor_report(x: torch.Tensor, element: str, scale: float) -> QuantReport:
    stored, scale = quantize_per_tensor(x, element, scale)
    return quant_report(x, stored, x.double().abs() * scale > ELEMENTS[element].max)


def compare_block_scaling(
    tensors: Mapping[str, torch.Tensor],
    fmt: str = "mxfp8_e4m3",
    delayed_scales: Mapping[str, float] | None = None,
) -> list[dict[str, Any]]:
    """Store each tensor in ``fmt``'s element format in up to four ways; report what each lost.

    The ways: ``"per-tensor"`` (one scale, ``max / amax`` of the tensor itself,
    the best one scale can do), ``"delayed"`` (one scale chosen before the
    tensor was seen, from ``delayed_scales``; omitted without them) and
    ``"MX"`` (:func:`quantize_mx`: a power-of-two scale per block, the
    specification's rounding) and ``"MX, rceil"`` (the exponent rounded up).

    Parameters
    ----------
    tensors : mapping of str to torch.Tensor
        The tensors, by name.
    fmt : {"mxfp8_e4m3", "mxfp8_e5m2", "mxfp4_e2m1"}, default "mxfp8_e4m3"
        The MX format; the per-tensor ways use its element format.
    delayed_scales : mapping of str to float, optional
        The delayed scale for some of the tensors, by name: each a positive number.

    Returns
    -------
    list of dict
        One row per tensor and way: ``"tensor"``, ``"scaling"``,
        ``"underflow"``, ``"saturated"``, ``"rel_error"``.

    Raises
    ------
    ValueError
        If ``tensors`` is empty, ``fmt`` unknown, a tensor invalid, or a delayed scale
        not positive or named for no tensor.

    Examples
    --------
    >>> x = torch.cat([torch.full((32,), 1e-3), torch.full((32,), 100.0)])
    >>> for r in compare_block_scaling({"x": x}, "mxfp4_e2m1"):
    ...     print(r["scaling"], r["underflow"], r["saturated"], f"{r['rel_error']:.2g}")
    per-tensor 0.5 0.0 1e-05
    MX 0.0 0.5 0.04
    MX, rceil 0.0 0.0 0.04
    """
    element = MX_FORMATS[check_choice("fmt", fmt, tuple(MX_FORMATS))]
    if not tensors:
        raise ValueError("tensors must hold at least one tensor")
    delayed_scales = dict(delayed_scales or {})
    unknown = sorted(set(delayed_scales) - set(tensors))
    if unknown:
        raise ValueError(f"delayed_scales names {unknown}, not among the tensors {sorted(tensors)}")
    for name, scale in delayed_scales.items():
        check_positive(f"delayed_scales[{name!r}]", scale)
    rows = []
    for name, x in tensors.items():
        x = _check_tensor(f"tensors[{name!r}]", x)
        ways = {"per-tensor": _tensor_report(x, element, None)}
        if name in delayed_scales:
            ways["delayed"] = _tensor_report(x, element, delayed_scales[name])
        ways["MX"] = _mx_report(x, fmt)
        ways["MX, rceil"] = _mx_report(x, fmt, "rceil")
        for way, r in ways.items():
            rows.append(
                {
                    "tensor": name,
                    "scaling": way,
                    "underflow": r.underflow,
                    "saturated": r.saturated,
                    "rel_error": r.rel_error,
                }
            )
    return rows
