"""The MX block quantiser, bit for bit against torch's float8 and E8M0 casts and ml_dtypes' E2M1."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from amp_lesson.mx import (
    ELEMENTS,
    MX_FORMATS,
    compare_block_scaling,
    e2m1_codes,
    e8m0_codes,
    pack_e2m1,
    quant_report,
    quantize_mx,
    quantize_per_tensor,
    round_to_element,
)


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.float().view(torch.int32)


def _probe(element: str) -> torch.Tensor:
    """Random values over many binades, every value of the format, and every midpoint (ties)."""
    g = torch.Generator().manual_seed(0)
    wide = torch.randn(20000, generator=g) * torch.exp2(
        torch.randint(-30, 20, (20000,), generator=g)
    )
    spec = ELEMENTS[element]
    exps = torch.arange(spec.emin, spec.emax + 1, dtype=torch.float64)
    steps = torch.arange(2**spec.mantissa_bits, dtype=torch.float64) / 2**spec.mantissa_bits
    grid = torch.cat(
        [steps * 2.0**spec.emin, ((1 + steps)[None] * torch.exp2(exps)[:, None]).flatten()]
    )
    grid = grid[grid <= spec.max].unique()
    mids = (grid[1:] + grid[:-1]) / 2
    edges = torch.cat([grid, mids, grid * (1 + 2**-20), grid * (1 - 2**-20)]).float()
    return torch.cat([wide, edges, -edges])


@pytest.mark.parametrize("element", ["e4m3", "e5m2"])
def test_element_rounding_equals_torchs_float8_cast(element: str) -> None:
    dtype = ELEMENTS[element].torch_dtype
    x = _probe(element)
    inside = x.abs() <= ELEMENTS[element].max
    ours = round_to_element(x, element)
    assert torch.equal(_bits(ours[inside]), _bits(x[inside].to(dtype).float()))
    assert torch.equal(_bits(ours), _bits(ours.to(dtype).float()))  # every result is stored exactly


def test_beyond_the_maximum_mx_clamps_where_torchs_e5m2_cast_overflows() -> None:
    x = torch.tensor([61440.0, -1e6])
    assert round_to_element(x, "e5m2").tolist() == [57344.0, -57344.0]
    assert torch.isinf(x.to(torch.float8_e5m2).float()).all()
    assert round_to_element(x, "e4m3").tolist() == x.to(torch.float8_e4m3fn).float().tolist()


def test_e2m1_rounding_and_codes_equal_ml_dtypes() -> None:
    x = _probe("e2m1")
    ref = x.numpy().astype(ml_dtypes.float4_e2m1fn)
    ours = round_to_element(x, "e2m1")
    assert np.array_equal(ours.numpy().view(np.int32), ref.astype(np.float32).view(np.int32))
    assert np.array_equal(e2m1_codes(ours).numpy(), ref.view(np.uint8))


def test_every_e2m1_code_round_trips_and_packs_low_nibble_first() -> None:
    codes = np.arange(16, dtype=np.uint8)
    values = torch.from_numpy(codes.view(ml_dtypes.float4_e2m1fn).astype(np.float32))
    assert e2m1_codes(values).tolist() == codes.tolist()
    packed = pack_e2m1(torch.from_numpy(codes))
    assert packed.dtype == torch.float4_e2m1fn_x2
    b = packed.view(torch.uint8)
    assert torch.equal(torch.stack([b & 15, b >> 4], 1).flatten(), torch.from_numpy(codes))


def test_e8m0_codes_equal_torchs_cast_of_the_powers_of_two() -> None:
    e = torch.arange(-127, 128)
    ours = e8m0_codes(e)
    torch_codes = torch.exp2(e.double()).float().to(torch.float8_e8m0fnu).view(torch.uint8)
    assert torch.equal(ours, torch_codes)
    assert torch.equal(ours.view(torch.float8_e8m0fnu).float(), torch.exp2(e.float()))


@pytest.mark.parametrize("fmt", list(MX_FORMATS))
def test_quantize_mx_equals_the_specifications_steps_done_with_independent_casts(fmt: str) -> None:
    g = torch.Generator().manual_seed(1)
    # blocks of very different magnitudes, an all-zero block, a partial last block
    x = torch.randn(7, 32, generator=g) * torch.exp2(torch.randint(-40, 40, (7, 1), generator=g))
    x[3] = 0
    x = torch.cat([x.flatten(), torch.randn(5, generator=g)])
    q = quantize_mx(x, fmt)
    element = ELEMENTS[MX_FORMATS[fmt]]
    for i, block in enumerate(torch.nn.functional.pad(x, (0, 27)).view(-1, 32)):
        amax = float(block.abs().max())
        shared = -127 if amax == 0 else int(np.floor(np.log2(np.float64(amax)))) - element.emax
        assert int(q.scale_exponents[i]) == shared
        scaled = (block.double() / 2.0**shared).clamp(-element.max, element.max).float()
        if element.name == "e2m1":
            ref = scaled.numpy().astype(ml_dtypes.float4_e2m1fn).astype(np.float32)
            assert np.array_equal(q.elements[i].numpy().view(np.int32), ref.view(np.int32))
        else:
            assert torch.equal(_bits(q.elements[i]), _bits(scaled.to(element.torch_dtype).float()))
    scale = (2.0 ** q.scale_exponents.double()).float()
    assert torch.equal(
        q.scale_codes.view(torch.uint8), scale.to(torch.float8_e8m0fnu).view(torch.uint8)
    )
    back = q.dequantize()
    assert back.shape == x.shape
    assert torch.equal(back[x == 0], x[x == 0])


def test_the_stored_bits_are_the_element_dtype() -> None:
    x = torch.linspace(-3, 3, 64)
    assert quantize_mx(x, "mxfp8_e4m3").element_bits().dtype == torch.float8_e4m3fn
    fp4 = quantize_mx(x, "mxfp4_e2m1")
    assert fp4.element_bits().dtype == torch.float4_e2m1fn_x2
    assert fp4.element_bits().numel() == 32
    assert fp4.bits_per_value == 4.25
    assert quantize_mx(x).bits_per_value == 8.25


def test_a_block_whose_maximum_has_a_large_mantissa_saturates() -> None:
    # 1.9 * 2**8 / 2**(8 - 8) = 486.4 > 448: the specification's floor() puts it above the maximum
    x = torch.full((32,), 1.0)
    x[0] = 1.9 * 2**8
    rows = compare_block_scaling({"w": x}, "mxfp8_e4m3")
    mx = next(r for r in rows if r["scaling"] == "MX")
    assert mx["saturated"] == pytest.approx(1 / 32)
    assert quantize_mx(x).dequantize()[0] == 448.0


def test_per_tensor_scaling_loses_a_small_block_that_mx_keeps() -> None:
    x = torch.cat([torch.full((32,), 1e-3), torch.full((32,), 100.0)])
    per_tensor, _ = quantize_per_tensor(x, "e2m1")
    assert (per_tensor[:32] == 0).all()
    assert (quantize_mx(x, "mxfp4_e2m1").dequantize()[:32] != 0).all()
    rows = compare_block_scaling({"x": x}, "mxfp4_e2m1", delayed_scales={"x": 1.0})
    assert [r["scaling"] for r in rows] == ["per-tensor", "delayed", "MX", "MX, rceil"]


@pytest.mark.parametrize("fmt", list(MX_FORMATS))
def test_rceil_picks_the_smallest_exponent_that_saturates_nothing(fmt: str) -> None:
    g = torch.Generator().manual_seed(2)
    x = torch.randn(64, 32, generator=g) * torch.exp2(torch.randint(-20, 20, (64, 1), generator=g))
    element = ELEMENTS[MX_FORMATS[fmt]]
    x[0] = x[0] / x[0].abs().max() / 16
    x[0, 0] = element.max * 2.0**-3  # an amax exactly on the format's maximum times a power of two
    q = quantize_mx(x, fmt, scale_rounding="rceil")
    amax = x.double().abs().amax(1)
    e = q.scale_exponents.double()
    assert (amax / torch.exp2(e) <= element.max).all()
    assert (amax / torch.exp2(e - 1) > element.max).all()
    assert int(q.scale_exponents[0]) == -3
    floor = quantize_mx(x, fmt).scale_exponents
    assert ((q.scale_exponents - floor) >= 0).all()
    assert ((q.scale_exponents - floor) <= 1).all()


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: quantize_mx(torch.ones(4), "mxfp6"), ValueError, "fmt"),
        (lambda: quantize_mx(torch.ones(4), block_size=0), ValueError, "block_size"),
        (lambda: quantize_mx(torch.tensor([1.0, float("inf")])), ValueError, "x must be finite"),
        (lambda: quantize_mx([1.0]), TypeError, "x must be a floating-point tensor, got list"),
        (lambda: round_to_element(torch.ones(2), "e3m2"), ValueError, "element"),
        (lambda: e8m0_codes(torch.tensor([128])), ValueError, "exponents"),
        (lambda: e2m1_codes(torch.tensor([0.7])), ValueError, "values"),
        (lambda: pack_e2m1(torch.ones(3, dtype=torch.uint8)), ValueError, "even"),
        (lambda: quantize_per_tensor(torch.ones(2), "e4m3", -1.0), ValueError, "scale"),
        (lambda: compare_block_scaling({}), ValueError, "tensors"),
        (
            lambda: compare_block_scaling({"x": torch.ones(2)}, delayed_scales={"y": 1.0}),
            ValueError,
            r"delayed_scales names \['y'\]",
        ),
        (
            lambda: compare_block_scaling({"x": torch.ones(2)}, delayed_scales={"x": -1.0}),
            ValueError,
            r"delayed_scales\['x'\]",
        ),
        (
            lambda: e8m0_codes(torch.tensor([True])),
            TypeError,
            "integer tensor, got a torch.bool tensor",
        ),
        (
            lambda: quant_report(torch.ones(2), torch.ones(2), torch.zeros(2)),
            TypeError,
            r"boolean tensor \(a mask\), got a torch.float32 tensor",
        ),
        (
            lambda: quantize_mx(torch.ones(3), "mxfp4_e2m1", block_size=3).element_bits(),
            ValueError,
            "odd number",
        ),
        (
            lambda: quantize_mx(torch.ones(2, dtype=torch.int32)),
            TypeError,
            "got a torch.int32 tensor",
        ),
        (  # before: torch's "Storage size calculation overflowed"
            lambda: quantize_mx(torch.ones(4), block_size=2**62),
            ValueError,
            r"block_size must be an integer in \[1, 65536\] .*got 4611686018427387904",
        ),
        (  # refused before the padded blocks are made
            lambda: quantize_mx(torch.ones(4), block_size=2**16 + 1, scale_rounding="up"),
            ValueError,
            r"block_size must be an integer in \[1, 65536\]",
        ),
        (
            lambda: quantize_mx(torch.ones(4), scale_rounding="up"),
            ValueError,
            r"scale_rounding must be one of 'floor', 'rceil'; got 'up'",
        ),
        (  # before: torch's "Tensor.item() cannot be called on meta tensors"
            lambda: quantize_mx(torch.ones(4, device="meta")),
            ValueError,
            r"x is a meta tensor, which has a shape but no values",
        ),
    ],
)
def test_bad_input_is_named(call, error, message) -> None:
    with pytest.raises(error, match=message):
        call()


# -- against a peer: torchao's to_mx (0.18.0) -----------------------------------------------

_TORCHAO = {
    "mxfp8_e4m3": "float8_e4m3fn",
    "mxfp8_e5m2": "float8_e5m2",
    "mxfp4_e2m1": "float4_e2m1fn_x2",
}


def _to_mx():
    """torchao's ``to_mx`` and its exponent rules, its import's log lines silenced: on a CPU
    build it logs the CUDA kernels it cannot load, and torch a deprecation it triggers."""
    import logging

    for name in ("torchao", "torch.utils._pytree"):
        logging.getLogger(name).setLevel(logging.ERROR)
    from torchao.prototype.mx_formats.mx_tensor import ScaleCalculationMode, to_mx

    return to_mx, {"floor": ScaleCalculationMode.FLOOR, "rceil": ScaleCalculationMode.RCEIL}


@pytest.mark.parametrize("rounding", ["floor", "rceil"])
@pytest.mark.parametrize("fmt", list(MX_FORMATS))
def test_quantize_mx_stores_the_bytes_torchaos_to_mx_stores(fmt: str, rounding: str) -> None:
    """Bit for bit: the E8M0 scales and the stored elements (FP8 bytes, or E2M1 codes packed
    two to a byte), over 120 blocks a case spread across 60 binades, zeros, saturating
    maxima and ties among them; 720 block quantisations over the six cases."""
    to_mx, modes = _to_mx()
    g = torch.Generator().manual_seed(len(fmt) + len(rounding))
    magnitudes = torch.exp2(torch.randint(-40, 20, (120, 1), generator=g).float())
    data = torch.randn(120, 32, generator=g) * magnitudes
    data[0] = 0.0  # an all-zero block
    spec = ELEMENTS[MX_FORMATS[fmt]]
    # the saturation band: values above the element's largest (E4M3: 479 and 500 against 448)
    # but in its top binade, so the floor rule's scale is 1 and they clamp
    data[1] = spec.max * torch.tensor([0.67, 1.07, 1.116, -0.045] * 8)
    # ties: the block's largest value is 2**emax, so the floor rule's scale is 1, and the
    # others lie halfway between two neighbours of the element format (ties to even)
    halfway = 1 + (2 * torch.arange(31) % 2**spec.mantissa_bits + 1) / 2 ** (spec.mantissa_bits + 1)
    data[2] = torch.cat(
        [torch.tensor([2.0**spec.emax]), halfway * torch.exp2(torch.arange(31) % 3)]
    )
    ours = quantize_mx(data, fmt, scale_rounding=rounding)
    if rounding == "floor":  # the rows test what they say: saturation, and ties to even
        assert ours.scale_exponents[1].item() == ours.scale_exponents[2].item() == 0
        assert (ours.elements[1] == spec.max).sum() >= 8
        assert (data[1] > spec.max).any()
        assert not torch.equal(ours.elements[2, 1:].double(), data[2, 1:].double())
    scale, elements = to_mx(data, getattr(torch, _TORCHAO[fmt]), 32, scaling_mode=modes[rounding])
    assert torch.equal(scale.view(torch.uint8).flatten(), ours.scale_codes.view(torch.uint8))
    assert torch.equal(elements.view(torch.uint8).flatten(), ours.element_bits().view(torch.uint8).flatten())  # fmt: skip


@pytest.mark.parametrize("rounding", ["floor", "rceil"])
@pytest.mark.parametrize("fmt", list(MX_FORMATS))
def test_for_a_block_below_e8m0s_range_torchao_stores_another_size(fmt: str, rounding: str) -> None:
    """Where the block's exponent clamps at E8M0's smallest, 2**-127 (for E4M3 a block whose
    largest value is below 2**-119), both store the scale code 0, but torchao 0.18.0 does not
    divide by it: under FLOOR it divides by 2**-126 (its FP32 scale clamped at FP32's smallest
    normal number, mx_tensor.py), so its elements read back at half the block; under RCEIL it
    does not scale the block, whose elements are all zero. The specification's keep it."""
    to_mx, modes = _to_mx()
    # E2M1's elements hold 0.5 at least: its block sits just below 2**-125, where the
    # specification's exponent (floor(log2(amax)) - 2) first clamps at -127
    tiny = torch.linspace(1.0, 1.9, 32) * 2.0 ** (-127 if fmt == "mxfp4_e2m1" else -130)
    scale, elements = to_mx(tiny, getattr(torch, _TORCHAO[fmt]), 32, scaling_mode=modes[rounding])
    ours = quantize_mx(tiny, fmt, scale_rounding=rounding)
    assert scale.view(torch.uint8).tolist() == [0] == ours.scale_codes.view(torch.uint8).tolist()
    if fmt == "mxfp4_e2m1":
        from torchao.prototype.mx_formats.kernels import f4_unpacked_to_f32, unpack_uint4

        theirs = f4_unpacked_to_f32(unpack_uint4(elements.view(torch.uint8)))
    else:
        theirs = elements.float()
    theirs = theirs.double() * 2.0**-127

    def error(back: torch.Tensor) -> float:
        return ((back.double() - tiny.double()).abs() / tiny.double()).max().item()

    assert error(ours.dequantize()) < 0.25
    if rounding == "rceil":
        assert not theirs.any()  # every element zero
    else:
        assert error(theirs) > 0.45
        if fmt != "mxfp4_e2m1":  # FP8 halves these values exactly
            assert torch.equal(theirs * 2, ours.dequantize().double())
