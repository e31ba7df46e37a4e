"""Tests for amp_lesson.memory: bytes per parameter and measured activation memory."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from amp_lesson.memory import (
    BYTES_PER_PARAM,
    GB,
    REGIMES,
    ActivationMemory,
    PeakAllocation,
    bytes_per_parameter,
    measure_activation_memory,
    memory_table,
    total_bytes,
)
from amp_lesson.models import make_mlp


def size_of(dtype: torch.dtype) -> int:
    """Bytes of one element, from an actual tensor rather than dtype.itemsize."""
    return torch.empty(1, dtype=dtype).element_size()


FP32, FP16, BF16 = size_of(torch.float32), size_of(torch.float16), size_of(torch.bfloat16)


def test_bytes_per_parameter_by_independent_arithmetic() -> None:
    adam = FP32 + FP32  # m and v
    expected = {
        "fp32_adam": FP32 + FP32 + adam,
        "torch_amp": FP32 + FP32 + adam,
        "classic_mixed": FP16 + FP16 + FP32 + adam,
        "classic_mixed_fp32_accum": FP16 + FP16 + FP32 + adam + FP32,
    }
    assert {r: bytes_per_parameter(r).total for r in REGIMES} == expected
    assert list(expected.values()) == [16, 16, 16, 20]
    assert bytes_per_parameter("torch_amp").transient == FP16 == BF16
    assert bytes_per_parameter("torch_amp").peak == 18
    assert all(BYTES_PER_PARAM[r].transient == 0 for r in REGIMES if r != "torch_amp")
    assert bytes_per_parameter("classic_mixed").master_weights == FP32
    assert bytes_per_parameter("fp32_adam").master_weights == 0


def test_total_bytes_for_seven_billion_parameters() -> None:
    assert total_bytes(7e9, "fp32_adam") == 112 * GB
    assert total_bytes(7_000_000_000, "classic_mixed_fp32_accum") == 140 * GB
    assert total_bytes(7e9, "torch_amp", include_transient=True) == 126 * GB
    assert total_bytes(1, "fp32_adam") == 16


def test_memory_table_rows() -> None:
    rows = memory_table()
    assert [row["regime"] for row in rows] == list(REGIMES)
    assert "total_gb" not in rows[0]
    for row in rows:
        parts = ("weights", "gradients", "master_weights", "optimizer_m", "optimizer_v",
                 "grad_accum_buffer")  # fmt: skip
        assert sum(row[p] for p in parts) == row["total"]
        assert row["peak"] == row["total"] + row["transient"]
    rows = memory_table(7e9)
    assert [row["total_gb"] for row in rows] == [112.0, 112.0, 112.0, 140.0]
    assert rows[1]["peak_gb"] == 126.0


@pytest.mark.parametrize("bad", [0, -1, 0.0, -7e9])
def test_n_params_must_be_positive(bad) -> None:
    with pytest.raises(ValueError, match=r"n_params must be"):
        total_bytes(bad, "fp32_adam")
    with pytest.raises(ValueError, match=r"n_params must be"):
        memory_table(bad)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_n_params_must_be_finite(bad) -> None:
    with pytest.raises(ValueError, match=r"n_params must be a finite number"):
        total_bytes(bad, "fp32_adam")


def test_n_params_must_be_whole_and_numeric() -> None:
    with pytest.raises(ValueError, match=r"n_params must be a whole number of parameters"):
        total_bytes(1.5, "fp32_adam")
    with pytest.raises(TypeError, match=r"n_params must be a positive whole number"):
        total_bytes("7e9", "fp32_adam")
    with pytest.raises(TypeError, match=r"n_params must be a positive whole number"):
        total_bytes(True, "fp32_adam")


def test_unknown_regime_and_bad_flags() -> None:
    with pytest.raises(ValueError, match=r"regime must be one of 'fp32_adam'.*got 'fp8'"):
        bytes_per_parameter("fp8")
    with pytest.raises(ValueError, match=r"regime must be one of"):
        total_bytes(7e9, "bf16")
    with pytest.raises(TypeError, match=r"include_transient must be True or False"):
        total_bytes(7e9, "torch_amp", include_transient=1)


# --------------------------------------------------------------------------- activations


def tiny() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 2)), torch.randn(7, 3)


def test_tiny_model_fp32_equals_independent_sum() -> None:
    # autograd saves: x (the input: not counted), ReLU's output (7 x 5), which the
    # second Linear saves again (same storage: counted once), and W2^T (a view of a
    # parameter: not counted). The sum of the output saves nothing.
    model, x = tiny()
    m = measure_activation_memory(model, x, device="cpu")
    assert m.allocator_peak_bytes is None  # the CPU has no allocator counter
    assert m.bytes == 7 * 5 * FP32
    assert (m.activation_bytes, m.weight_copy_bytes) == (7 * 5 * FP32, 0)
    assert m.n_saved == 4
    assert m.dtype_counts == {"float32": 1}
    assert m.bytes_by_dtype == {"float32": 7 * 5 * FP32}
    # a loss that saves the output adds its size
    squared = measure_activation_memory(model, x, loss_fn=lambda out: out.square().sum())
    assert squared.bytes == 7 * 5 * FP32 + 7 * 2 * FP32


def test_tiny_model_under_float16_autocast() -> None:
    # under autocast: x cast to fp16 (a new tensor), ReLU's fp16 output, and the
    # fp16 copy of W2 that autocast made (a weight copy, reported separately)
    model, x = tiny()
    m = measure_activation_memory(model, x, autocast_dtype=torch.float16)
    assert m.activation_bytes == 7 * 3 * FP16 + 7 * 5 * FP16
    assert m.weight_copy_bytes == 2 * 5 * FP16
    assert m.bytes == m.activation_bytes + m.weight_copy_bytes
    assert m.dtype_counts == {"float16": 3}
    assert m.autocast_dtype == "float16"


def test_mlp_activation_memory_is_smaller_under_autocast() -> None:
    mlp = make_mlp(64, 256, 3, device="cpu")
    x = torch.randn(512, 64)
    fp32 = measure_activation_memory(mlp, x)
    fp16 = measure_activation_memory(mlp, x, autocast_dtype=torch.float16)
    bf16 = measure_activation_memory(mlp, x, autocast_dtype=torch.bfloat16)
    assert fp16.bytes < fp32.bytes
    assert bf16.bytes == fp16.bytes
    assert fp32.bytes == 3 * 512 * 256 * FP32  # three ReLU outputs
    assert fp16.activation_bytes == 3 * 512 * 256 * FP16 + 512 * 64 * FP16  # + x in fp16
    assert fp16.weight_copy_bytes == (2 * 256 * 256 + 256) * FP16  # W2, W3, head
    # the model's parameters are untouched and still FP32
    assert all(p.dtype == torch.float32 and p.grad is None for p in mlp.parameters())


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_counts_the_saved_tensors_as_the_cpu_does_and_reads_the_allocator() -> None:
    mlp = make_mlp(64, 1024, 4, device="cuda")
    x = torch.randn(4096, 64, device="cuda")
    fp32 = measure_activation_memory(mlp, x)
    fp16 = measure_activation_memory(mlp, x, autocast_dtype=torch.float16)
    on_cpu = measure_activation_memory(mlp, x, device="cpu")
    assert fp32.bytes == on_cpu.bytes == 4 * 4096 * 1024 * FP32  # four ReLU outputs
    assert fp16.bytes < fp32.bytes
    for m in (fp32, fp16):
        assert m.allocator_peak_bytes >= m.bytes  # the peak also holds transient buffers


def test_activation_memory_repr_fields() -> None:
    m = ActivationMemory(8, 8, 0, 1)
    assert (m.bytes, m.activation_bytes, m.weight_copy_bytes) == (8, 8, 0)
    assert m.dtype_counts == {}
    assert (m.device, m.allocator_peak_bytes) == ("cpu", None)


def test_measure_activation_memory_rejects_bad_input() -> None:
    model, x = tiny()
    with pytest.raises(TypeError, match=r"model must be a torch.nn.Module"):
        measure_activation_memory("mlp", x)
    with pytest.raises(TypeError, match=r"x must be a torch.Tensor"):
        measure_activation_memory(model, x.numpy())
    with pytest.raises(ValueError, match=r"autocast_dtype must be one of"):
        measure_activation_memory(model, x, autocast_dtype=torch.float64)
    with pytest.raises(ValueError, match=r"autocast_dtype must be one of"):
        measure_activation_memory(model, x, autocast_dtype="fp32")
    by_name = measure_activation_memory(model, x, autocast_dtype="fp16")
    assert by_name == measure_activation_memory(model, x, autocast_dtype=torch.float16)
    with pytest.raises(TypeError, match=r"loss_fn must be callable or None"):
        measure_activation_memory(model, x, loss_fn="sum")
    with pytest.raises(ValueError, match=r"device must be one of 'auto', 'cpu', 'cuda'"):
        measure_activation_memory(model, x, device="tpu")


# --------------------------------------------------------------------------- peak allocation


def test_peak_allocation_counts_what_the_block_makes_while_it_lives() -> None:
    before = torch.ones(4096)  # 16 KiB allocated before the block
    with PeakAllocation("cpu") as peak:
        a = torch.ones(1024)  # 4 KiB
        view = a[10:]  # a view: no new memory
        a.mul_(2)  # in place: no new memory
        b = a + 1  # 4 KiB more: 8 KiB live, the peak
        del before, view  # freeing what the block did not make changes nothing
        del a, b
        c = torch.ones(256)  # 1 KiB
    assert peak.bytes == 8192
    assert peak.method == "storage_peak_above_start"
    assert c.numel() == 256


def test_peak_allocation_sees_backward_and_the_optimizer() -> None:
    model = torch.nn.Linear(256, 256)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(64, 256)
    with PeakAllocation("cpu") as peak:
        model(x).sum().backward()
        opt.step()
    param_bytes = sum(p.nbytes for p in model.parameters())
    # gradients and momentum buffers at least; the input and weights were there before
    assert peak.bytes >= 2 * param_bytes
    assert peak.bytes < 2 * param_bytes + 4 * x.nbytes


def test_peak_allocation_rejects_other_devices() -> None:
    with pytest.raises(ValueError, match="device must be the CPU or a CUDA device"):
        PeakAllocation("meta")


@pytest.mark.cuda
def test_peak_allocation_on_cuda_is_the_allocators_peak_above_the_start() -> None:
    kept = torch.ones(2**20, device="cuda")  # 4 MiB before the block, kept
    with PeakAllocation("cuda") as peak:
        a = torch.ones(2**18, device="cuda")  # 1 MiB
        del a
    assert peak.method == "cuda_peak_above_start"
    assert peak.bytes == 2**20
    assert kept.is_cuda


def test_an_input_whose_dtype_the_model_cannot_take_is_named() -> None:
    mlp = make_mlp(8, 16, 1, device="cpu")
    x = torch.randn(4, 8)
    with pytest.raises(ValueError, match=r"^x must have the dtype of the model's parameters"):
        measure_activation_memory(mlp, x.double())  # torch: "mat1 and mat2 must have the same"
    with pytest.raises(ValueError, match=r"^x must have .* or one that autocast to torch\.float16"):
        measure_activation_memory(mlp, x.double(), autocast_dtype=torch.float16)
    half = measure_activation_memory(mlp, x.half(), autocast_dtype=torch.float16)  # autocast casts
    assert half.bytes > 0


def test_the_memory_pages_state_cell_survives_skipped_first_steps(capsys) -> None:
    """The page's cell reads Adam's state after a GradScaler step; at the scaler's starting
    scale a first step is now and then skipped (2 of 200 random draws here), which leaves no
    state. Started at 2**40, so that the first steps overflow for certain, it still prints
    FP32 state (4 bytes per parameter each for the weights, .grad, and 8 for m and v)."""
    from helpers import DOCS

    from amp_book.pages import read_text

    page = read_text((DOCS / "chapter" / "memory.md").read_text(encoding="utf-8"))
    (cell,) = [c for c in page.code_cells if '"exp_avg_sq"' in c.source]
    start = "torch.amp.GradScaler(device.type)"
    assert start in cell.source
    source = cell.source.replace(start, "torch.amp.GradScaler(device.type, init_scale=2.0**40)")
    namespace: dict[str, object] = {}
    exec(compile(source, "memory.md", "exec"), namespace)  # noqa: S102 - the page's own cell
    scaler = namespace["scaler"]
    assert scaler.get_scale() < 2.0**39, "no step was skipped: the test proves nothing"
    printed = capsys.readouterr().out
    assert "weights    4.0" in printed, printed
    assert ".grad      4.0" in printed, printed
    assert "Adam m, v  8.0" in printed, printed


@pytest.mark.parametrize("n_params", [10**400, 2**63, 1e300])
def test_a_parameter_count_past_what_torch_counts_is_named(n_params) -> None:
    """Before: ``OverflowError: integer division result too large for a float``."""
    with pytest.raises(
        ValueError, match=r"n_params must be an integer in \[1, 9223372036854775807\]"
    ):
        memory_table(n_params)
    with pytest.raises(
        ValueError, match=r"n_params must be an integer in \[1, 9223372036854775807\]"
    ):
        total_bytes(n_params, "fp32_adam")
    assert total_bytes(2**63 - 1, "fp32_adam") == 16 * (2**63 - 1)  # the largest is taken
