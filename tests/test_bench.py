"""Tests for amp_lesson.bench on the CPU: FLOP counts, peaks, measurement, recordings, CLI."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers import ROOT
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from amp_lesson import bench
from amp_lesson.bench import (
    MODELS,
    PEAK_TFLOPS,
    REGIMES,
    SCHEMA,
    BenchRow,
    BenchSizes,
    Recording,
    RecordingError,
    RecordingsView,
    bench_sizes,
    bench_table,
    linear_stack_flops,
    load_recordings,
    make_train_step,
    measure,
    measure_step,
    peak_tflops,
    record,
    run_benchmarks,
    slugify,
    step_flops,
    transformer_flops,
    validate_recording,
    workload,
    write_recording,
)
from amp_lesson.models import make_mlp, make_transformer_block

CPU = torch.device("cpu")


def make_linear_stack(width: int, depth: int, device: torch.device = CPU) -> torch.nn.Sequential:
    """The benchmark's Linear stack: depth layers of width, ReLU in between."""
    return make_mlp(width, width, depth - 1, width, device=device)


# Tiny, but with batch several times the width, as in the book's sizes.
TINY = BenchSizes(
    batch=64, width=16, depth=4, tf_batch=2, seq_len=16, d_model=16, n_heads=2, ff=32,
    warmup=1, repeats=3,
)  # fmt: skip


# --------------------------------------------------------------------------- FLOPs


def counted_flops(model: torch.nn.Module, x: torch.Tensor) -> int:
    """FLOPs of forward + backward as torch's FlopCounterMode counts them (math attention)."""
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        out = model(x)
        F.mse_loss(out, torch.zeros_like(out)).backward()
    return counter.get_total_flops()


@pytest.mark.parametrize(("width", "depth", "batch"), [(8, 1, 4), (16, 3, 24), (24, 5, 8)])
@pytest.mark.parametrize("input_grad", [False, True])
def test_linear_stack_flops_match_torch_flop_counter(
    width: int, depth: int, batch: int, input_grad: bool
) -> None:
    model = make_linear_stack(width, depth, device=CPU)
    x = torch.randn(batch, width, requires_grad=input_grad)
    assert linear_stack_flops(width, depth, batch, input_grad=input_grad) == counted_flops(model, x)


def test_linear_stack_flops_are_six_per_weight_per_sample() -> None:
    """The rule 6 x params x batch, with params the weight-matrix entries."""
    width, depth, batch = 32, 3, 16
    model = make_linear_stack(width, depth, device=CPU)
    weights = sum(m.weight.numel() for m in model if isinstance(m, torch.nn.Linear))
    assert linear_stack_flops(width, depth, batch, input_grad=True) == 6 * weights * batch


@pytest.mark.parametrize(
    ("batch", "seq_len", "d_model", "n_heads", "ff"), [(2, 16, 32, 4, 64), (3, 8, 24, 3, 40)]
)
@pytest.mark.parametrize("input_grad", [False, True])
def test_transformer_flops_match_torch_flop_counter(
    batch: int, seq_len: int, d_model: int, n_heads: int, ff: int, input_grad: bool
) -> None:
    block = make_transformer_block(d_model, n_heads, ff, device=CPU)
    x = torch.randn(batch, seq_len, d_model, requires_grad=input_grad)
    expected = transformer_flops(batch, seq_len, d_model, ff, input_grad=input_grad)
    assert expected == counted_flops(block, x)


def test_step_flops_picks_the_model_formula() -> None:
    assert step_flops("linear_stack", TINY) == linear_stack_flops(16, 4, 64)
    assert step_flops("transformer", TINY) == transformer_flops(2, 16, 16, 32)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: linear_stack_flops(0, 1, 1), ValueError, "width must be an integer >= 1"),
        (lambda: linear_stack_flops(8, 1.5, 1), TypeError, "depth must be an integer"),
        (lambda: linear_stack_flops(8, 1, 1, input_grad=1), TypeError, "input_grad"),
        (lambda: transformer_flops(1, 0, 8, 8), ValueError, "seq_len must be"),
        (lambda: step_flops("cnn", TINY), ValueError, "model must be one of"),
        (lambda: step_flops("transformer", {}), TypeError, "sizes must be a BenchSizes"),
    ],
)
def test_flop_functions_reject_bad_input(call, error, match) -> None:
    with pytest.raises(error, match=match):
        call()


# --------------------------------------------------------------------------- peaks


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA A100 80GB PCIe", "A100"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("Tesla T4", "T4"),
        ("Tesla V100-SXM2-16GB", "V100 SXM2"),
        ("Tesla V100-PCIE-32GB", "V100 PCIe"),
    ],
)
def test_peak_tflops_recognises_gpu_names(name: str, key: str) -> None:
    found = peak_tflops(name)
    assert found is not None
    assert found[0] == key
    assert found[1] is PEAK_TFLOPS[key]


@pytest.mark.parametrize("name", ["NVIDIA A10G", "NVIDIA L40", "CPU (x86_64, 2 cores)", ""])
def test_peak_tflops_unknown_is_none(name: str) -> None:
    assert peak_tflops(name) is None


def test_peak_table_is_dense_and_complete() -> None:
    for key, peaks in PEAK_TFLOPS.items():
        assert set(peaks) == set(REGIMES), key
        for regime, value in peaks.items():
            assert value is None or (isinstance(value, float) and value > 0), (key, regime)
        # tensor cores beat FP32 CUDA cores wherever they exist
        assert peaks["fp16"] > peaks["fp32"], key
        if peaks["tf32"] is not None:
            assert peaks["fp32"] < peaks["tf32"] < peaks["fp16"], key
    # the dense H100 SXM figures are half the datasheet's sparse ones (989 and 1979)
    assert PEAK_TFLOPS["H100 SXM"]["tf32"] == 989 / 2
    assert PEAK_TFLOPS["H100 SXM"]["bf16"] == 1979 / 2


def test_peak_tflops_rejects_a_non_string() -> None:
    with pytest.raises(TypeError, match="gpu_name must be a str"):
        peak_tflops(None)


# --------------------------------------------------------------------------- sizes


def test_book_sizes_are_multiples_of_eight_with_batch_above_width() -> None:
    for sizes in (bench_sizes(CPU), bench.CUDA_SIZES):
        for name in ("batch", "width", "seq_len", "d_model", "ff"):
            assert getattr(sizes, name) % 8 == 0
        assert sizes.batch >= 4 * sizes.width


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"width": 12}, ValueError, "width must be a multiple of 8"),
        ({"d_model": 24, "n_heads": 5}, ValueError, "divisible by n_heads"),
        ({"repeats": 0}, ValueError, "repeats must be an integer >= 1"),
        ({"batch": True}, TypeError, "batch must be an integer"),
    ],
)
def test_bench_sizes_reject_bad_values(kwargs, error, match) -> None:
    with pytest.raises(error, match=match):
        BenchSizes(**kwargs)


def test_bench_sizes_round_trip_through_a_dict() -> None:
    assert BenchSizes(**TINY.as_dict()) == TINY


# --------------------------------------------------------------------------- measurement


@pytest.fixture(scope="module")
def cpu_rows() -> list[BenchRow]:
    return run_benchmarks(CPU, TINY)


def test_cpu_run_has_every_model_and_regime(cpu_rows: list[BenchRow]) -> None:
    assert [(r.model, r.regime) for r in cpu_rows] == [(m, g) for m in MODELS for g in REGIMES]


def test_cpu_marks_tf32_unavailable_and_invents_nothing(cpu_rows: list[BenchRow]) -> None:
    for r in cpu_rows:
        if r.regime == "tf32":
            assert not r.available
            assert r.note == "not available on CPU"
            assert (r.step_ms, r.tflops, r.saved_bytes, r.speedup) == (None, None, None, None)
        else:
            assert r.available
            assert r.note is None


def test_cpu_measurements_are_sane(cpu_rows: list[BenchRow]) -> None:
    for r in (r for r in cpu_rows if r.available):
        assert r.device_type == "cpu"
        assert r.timing_method == "perf_counter"
        assert r.memory_method == "saved_tensors + storage_peak_above_start"
        assert r.n_timed == TINY.repeats
        assert 0 < r.step_ms_min <= r.step_ms <= r.step_ms_max < 60_000
        assert r.flops == step_flops(r.model, TINY)
        assert r.tflops == pytest.approx(r.flops / (r.step_ms * 1e-3) / 1e12)
        assert r.peak_tflops is None  # a CPU's peak is unknown
        assert r.pct_of_peak is None
        # the whole step's memory: more than what backward keeps, and more than the weights,
        # their gradients and the momentum buffers together
        params = sum(p.numel() for p in workload.build_workload(r.model, TINY, CPU)[0].parameters())
        assert r.peak_bytes > r.saved_bytes + 3 * 4 * params
        assert r.saved_bytes > 0
        assert r.speedup > 0
        if r.regime == "fp32":
            assert r.speedup == 1.0  # the median of ratios of a step to itself


def test_half_precision_saves_activation_memory(cpu_rows: list[BenchRow]) -> None:
    saved = {(r.model, r.regime): r.saved_bytes for r in cpu_rows}
    for model in MODELS:
        assert saved[(model, "fp16")] < saved[(model, "fp32")]
        assert saved[(model, "bf16")] == saved[(model, "fp16")]  # both 2 bytes per element


def test_saved_bytes_of_the_linear_stack_add_up() -> None:
    """FP32: the 3 ReLU outputs between 4 layers. FP16: those at 2 bytes, the input cast
    to FP16 (for the first weight gradient) and the FP16 weight copies of the 3 layers
    that need an input gradient (the first does not; biases are never saved)."""
    b, w = TINY.batch, TINY.width
    fp32 = measure_step("linear_stack", "fp32", CPU, TINY)
    fp16 = measure_step("linear_stack", "fp16", CPU, TINY)
    assert fp32.saved_bytes == 3 * b * w * 4
    assert fp16.saved_bytes == 3 * b * w * 2 + b * w * 2 + 3 * w * w * 2


@pytest.mark.parametrize("regime", ["fp32", "fp16", "bf16"])
def test_train_step_updates_weights_and_clears_grads(regime: str) -> None:
    model = make_linear_stack(16, 2, device=CPU)
    before = model[0].weight.detach().clone()
    g = torch.Generator().manual_seed(0)
    step = make_train_step(model, torch.randn(32, 16, generator=g), torch.randn(32, 16), regime)
    step()
    assert not torch.equal(before, model[0].weight)
    assert all(p.grad is None for p in model.parameters())
    assert model[0].weight.dtype == torch.float32  # autocast never changes the parameters


def test_fp16_step_uses_a_cpu_grad_scaler() -> None:
    model = make_linear_stack(16, 2, device=CPU)
    step = make_train_step(model, torch.randn(8, 16), torch.randn(8, 16), "fp16")
    scaler = dict(zip(step.__code__.co_freevars, step.__closure__, strict=True))["scaler"]
    scaler = scaler.cell_contents
    assert scaler.is_enabled()
    assert scaler._device == "cpu"
    step()
    assert scaler.get_scale() == 2.0**16


def test_tf32_flags_are_restored_even_after_an_error() -> None:
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    inside = []

    def fail() -> None:
        with measure._tf32(not matmul):
            inside.append(torch.backends.cuda.matmul.allow_tf32)
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fail()
    assert inside == [not matmul]
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == (
        matmul,
        cudnn,
    )


def test_measure_step_leaves_the_global_rng_alone() -> None:
    state = torch.random.get_rng_state()
    measure_step("transformer", "bf16", CPU, TINY)
    assert torch.equal(state, torch.random.get_rng_state())


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: measure_step("cnn", "fp32", CPU, TINY), ValueError, "model must be one of"),
        (lambda: measure_step("linear_stack", "fp8", CPU, TINY), ValueError, "regime must be"),
        (lambda: measure_step("linear_stack", "fp32", "tpu", TINY), ValueError, "device"),
        (lambda: measure_step("linear_stack", "fp32", CPU, {"batch": 8}), TypeError, "sizes"),
        (lambda: run_benchmarks(CPU, TINY, models="linear_stack"), TypeError, "models must be"),
        (lambda: run_benchmarks(CPU, TINY, regimes=[]), ValueError, "regimes must name"),
        (
            lambda: make_train_step(make_linear_stack(8, 1, device=CPU), None, None, "fp4"),
            ValueError,
            "regime",
        ),
        (lambda: make_transformer_block(30, 4, 8), ValueError, "divisible by n_heads"),
    ],
)
def test_measurement_rejects_bad_input(call, error, match) -> None:
    with pytest.raises(error, match=match):
        call()


def test_bench_table_shows_every_row(cpu_rows: list[BenchRow]) -> None:
    table = bench_table(cpu_rows, caption="CPU")
    text = table.text_rows()
    assert len(text) == 1 + len(cpu_rows)
    assert text[0][:3] == ["model", "regime", "step ms"]
    assert "FP16 autocast" in {row[1] for row in text}
    html = table._repr_html_()
    assert "<caption>CPU</caption>" in html
    assert "not available on CPU" in html
    with pytest.raises(TypeError, match=r"rows\[0\] must be a BenchRow"):
        bench_table([{"model": "x"}])
    assert bench_table(cpu_rows, columns=["regime", "saved MB"]).text_rows()[0] == [
        "regime",
        "saved MB",
    ]
    with pytest.raises(ValueError, match="columns must be one of"):
        bench_table(cpu_rows, columns=["speed"])
    with pytest.raises(TypeError, match="columns must be a list"):
        bench_table(cpu_rows, columns="regime")


def test_cpu_features_reads_the_flags() -> None:
    features = bench.cpu_features()
    if features is None:
        pytest.skip("no /proc/cpuinfo on this system")
    assert set(features) == {"avx512_bf16", "amx_bf16", "avx512_fp16", "amx_fp16"}
    assert all(isinstance(v, bool) for v in features.values())


# --------------------------------------------------------------------------- recordings


def fake_recording(**changes) -> dict:
    """A schema-valid recording of made-up GPU numbers (for the loader only, never shown)."""
    rows = []
    for model in MODELS:
        for regime in REGIMES:
            rows.append(
                BenchRow(
                    model, regime, "cuda", step_ms=10.0 / (1 + REGIMES.index(regime)),
                    step_ms_min=1.0, step_ms_max=20.0, n_timed=20, flops=10**12, tflops=100.0,
                    peak_tflops=989.5, pct_of_peak=10.1, speedup=1.0, saved_bytes=10**6,
                    peak_bytes=10**8, timing_method="cuda_events",
                    memory_method="saved_tensors + cuda_max_memory_allocated",
                ).as_dict()
            )  # fmt: skip
    data = {
        "schema": SCHEMA,
        "provenance": {
            "gpu_name": "NVIDIA H200",
            "driver_version": "580.159.03",
            "cuda_version": "13.0",
            "cudnn_version": "91300",
            "compute_capability": "9.0",
            "torch_version": "2.11.0+cu130",
            "amp_lesson_version": "0.1.0",
            "python_version": "3.12.3",
            "date": "2026-11-20",
        },
        "sizes": bench.CUDA_SIZES.as_dict(),
        "peak_source": bench.PEAK_SOURCE,
        "rows": rows,
    }
    data.update(changes)
    return data


def test_a_recording_round_trips_through_a_file(tmp_path: Path) -> None:
    data = fake_recording()
    path = write_recording(data, tmp_path / "gpu" / "h200.json")
    assert path == tmp_path / "gpu" / "h200.json"
    (loaded,) = load_recordings(tmp_path / "gpu")
    assert isinstance(loaded, Recording)
    assert loaded.path == path
    assert loaded.gpu_name == "NVIDIA H200"
    assert loaded.sizes == bench.CUDA_SIZES
    assert [r.as_dict() for r in loaded.rows] == data["rows"]
    assert loaded.describe() == (
        "NVIDIA H200 — driver 580.159.03, CUDA 13.0, torch 2.11.0+cu130, recorded 2026-11-20"
    )


def test_write_recording_defaults_to_the_slug_of_the_gpu(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = write_recording(fake_recording())
    assert path == Path("docs/_data/gpu/nvidia-h200.json")
    assert json.loads(path.read_text())["provenance"]["gpu_name"] == "NVIDIA H200"


def test_recordings_load_in_file_name_order(tmp_path: Path) -> None:
    for name in ("b.json", "a.json"):
        write_recording(fake_recording(), tmp_path / name)
    (tmp_path / "README.md").write_text("not a recording")
    assert [r.path.name for r in load_recordings(tmp_path)] == ["a.json", "b.json"]


def test_the_repository_recordings_are_valid() -> None:
    """Whatever is committed in docs/_data/gpu must load (there may be none yet)."""
    for rec in load_recordings(ROOT / "docs" / "_data" / "gpu"):
        assert all(r.device_type == "cuda" for r in rec.rows)


def _set(path: str, value):
    """A change to fake_recording() at a dotted path ('rows.0.step_ms'); DELETE removes it."""

    def change(data: dict) -> dict:
        *parents, last = path.split(".")
        node = data
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if value is DELETE:
            del node[last]
        elif isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
        return data

    return change


DELETE = object()


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (_set("schema", "amp_lesson.bench/0"), r"\$\.schema: 'amp_lesson\.bench/1' was expected"),
        (_set("provenance", []), r"\$\.provenance: \[\] is not of type 'object'"),
        (_set("provenance.gpu_name", ""), r"\$\.provenance\.gpu_name: .* \(a non-empty string\)"),
        (_set("provenance.torch_version", DELETE), "'torch_version' is a required property"),
        (
            _set("provenance.date", "yesterday"),
            r"\$\.provenance\.date: 'yesterday' is not a 'date'",
        ),
        (_set("provenance.driver_version", 580), r"\$\.provenance\.driver_version: 580 is not"),
        (_set("sizes.width", 12), r"\$\.sizes\.width: 12 is not a multiple of 8"),
        (_set("sizes.extra", 1), r"\$\.sizes: Additional properties are not allowed \('extra'"),
        (_set("sizes.n_heads", 5), r"\$\.sizes: d_model \(1024\) must be divisible by n_heads"),
        (_set("rows", []), r"\$\.rows: \[\] should be non-empty"),
        (_set("rows.0", "fp32"), r"\$\.rows\[0\]: 'fp32' is not of type 'object'"),
        (_set("rows.0.model", "resnet"), r"\$\.rows\[0\]\.model: 'resnet' is not one of"),
        (_set("rows.1.regime", "fp8"), r"\$\.rows\[1\]\.regime: 'fp8' is not one of"),
        (_set("rows.0.device_type", "cpu"), r"\$\.rows\[0\]\.device_type: .*GPU numbers only"),
        (_set("rows.0.available", "yes"), r"\$\.rows\[0\]\.available: 'yes' is not of type"),
        (_set("rows.2.step_ms", -1.0), r"\$\.rows\[2\]\.step_ms: -1\.0 is less than or equal"),
        (_set("rows.2.tflops", float("nan")), r"not valid JSON \(NaN is not a JSON number"),
        (_set("rows.3.saved_bytes", 1.5), r"\$\.rows\[3\]\.saved_bytes: 1\.5 is not of type"),
        (_set("rows.0.step_ms", None), r"\$\.rows\[0\]\.step_ms: .*holds its step time"),
        (_set("rows.0.model", DELETE), r"\$\.rows\[0\]: 'model' is a required property"),
        (_set("rows.0.gflops", 3.0), r"\$\.rows\[0\]: Additional properties .*'gflops'"),
        (_set("rows.0.available", False), r"\$\.rows\[0\]\..*holds no measurements"),
        (_set("peak_source", 3), r"\$\.peak_source: 3 is not of type"),
    ],
)
def test_bad_recordings_raise_naming_file_and_field(tmp_path: Path, change, match) -> None:
    data = change(fake_recording())
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(data))
    with pytest.raises(RecordingError, match=match) as info:
        load_recordings(tmp_path)
    assert str(info.value).startswith(f"{path}: ")
    assert isinstance(info.value, ValueError)


def test_validate_refuses_what_json_cannot_hold() -> None:
    data = fake_recording()
    data["rows"][0]["speedup"] = float("inf")
    with pytest.raises(RecordingError, match=r"x\.json: is not plain finite JSON"):
        validate_recording(data, "x.json")


def test_unavailable_rows_must_not_hold_measurements() -> None:
    data = fake_recording()
    data["rows"][1].update(available=False, note="not available")
    with pytest.raises(RecordingError, match=r"rows\[1\].*holds no measurements"):
        validate_recording(data, "x.json")
    for key in ("step_ms", "step_ms_min", "step_ms_max", "tflops", "saved_bytes", "peak_bytes"):
        data["rows"][1][key] = None
    assert not validate_recording(data, "x.json").rows[1].available
    data["rows"][1]["note"] = " "
    with pytest.raises(RecordingError, match=r"rows\[1\]\.note: .*says why in its note"):
        validate_recording(data, "x.json")


def test_invalid_json_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(RecordingError, match=r"bad\.json: not valid JSON"):
        load_recordings(tmp_path)
    with pytest.raises(RecordingError, match=r"list\.json: \$: \[1, 2\] is not of type 'object'"):
        validate_recording([1, 2], "list.json")
    (tmp_path / "bad.json").unlink()
    (tmp_path / "nan.json").write_text('{"schema": NaN}')
    with pytest.raises(
        RecordingError, match=r"nan\.json: not valid JSON \(NaN is not a JSON number"
    ):
        load_recordings(tmp_path)


def test_load_recordings_rejects_a_missing_folder_and_a_bad_type(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_recordings(tmp_path / "nowhere")
    with pytest.raises(TypeError, match="folder must be a str or Path"):
        load_recordings(3)


def test_write_recording_refuses_invalid_data(tmp_path: Path) -> None:
    with pytest.raises(RecordingError, match=r"<recording to write>: \$\.schema"):
        write_recording(fake_recording(schema="x"), tmp_path / "x.json")
    assert not (tmp_path / "x.json").exists()


def test_recordings_view_without_a_recording_speaks_to_the_reader() -> None:
    view = RecordingsView([], measured_on="CPU (x86_64, 2 cores)")
    text = str(view)
    assert "every number on this page was measured on CPU (x86_64, 2 cores)" in text
    assert "On a GPU" in text
    html = view._repr_html_()
    assert "CPU (x86_64, 2 cores)" in html
    assert "<table" not in html
    # nothing addressed to the book's maintainers
    for instruction in ("--record", "commit", "docs/_data", "Run `", "recording(s)"):
        assert instruction not in text
        assert instruction not in html


def test_recordings_view_shows_provenance_and_table(tmp_path: Path) -> None:
    write_recording(fake_recording(), tmp_path / "h200.json")
    html = RecordingsView(load_recordings(tmp_path))._repr_html_()
    assert "NVIDIA H200 — driver 580.159.03, CUDA 13.0, torch 2.11.0+cu130" in html
    assert html.count("<table") == 1
    assert '<td class="amp-number">989.5</td>' in html


def test_a_recording_shows_its_peaks_only_when_measured_per_regime(tmp_path: Path) -> None:
    old = fake_recording()  # memory_method: the allocator's peak since reset, earlier regimes in
    rows = old["rows"]
    for i, row in enumerate(rows):
        row["peak_bytes"] = (2 + i) * 10**9  # rising in run order, as the H200 recording did
    write_recording(old, tmp_path / "old" / "h200.json")
    (rec,) = load_recordings(tmp_path / "old")
    assert "peak alloc MB" not in bench_table(rec.rows, drop_empty=True).text_rows()[0]
    note = str(RecordingsView([rec])).split("\n\n")[-1]
    assert note.startswith('The recording\'s "peak alloc MB" is not shown.')
    assert "only rise, from 2000 to 9000 MB" in note
    assert "amp-recording-note" in RecordingsView([rec])._repr_html_()

    for row in rows:
        row["memory_method"] = "saved_tensors + cuda_peak_above_start"
    write_recording(old, tmp_path / "new" / "h200.json")
    (rec,) = load_recordings(tmp_path / "new")
    table = bench_table(rec.rows, drop_empty=True).text_rows()
    column = table[0].index("peak alloc MB")
    assert [line[column] for line in table[1:3]] == ["2000", "3000"]
    assert bench.unshown_peaks_note(rec) is None


def test_the_committed_recording_shows_no_peak_that_counted_earlier_regimes() -> None:
    for rec in load_recordings(ROOT / "docs" / "_data" / "gpu"):
        header = bench_table(rec.rows, drop_empty=True).text_rows()[0]
        measured_alone = all(
            r.memory_method in bench.PEAK_MEMORY_METHODS for r in rec.rows if r.available
        )
        assert ("peak alloc MB" in header) is measured_alone
        assert (bench.unshown_peaks_note(rec) is None) is measured_alone


def _peaks_in_order(regimes: list[str], keep_alive: list) -> dict[str, int]:
    """Each regime's peak memory, the regimes measured one after another in ``regimes`` order.

    After each regime, a model of the workload is added to ``keep_alive``: memory an earlier
    measurement left allocated, as a leak would.
    """
    peaks = {}
    for regime in regimes:
        peaks[regime] = measure_step("linear_stack", regime, CPU, TINY).peak_bytes
        keep_alive.append(workload.build_workload("linear_stack", TINY, CPU))
    return peaks


def test_each_regimes_peak_memory_is_its_own_whatever_ran_before() -> None:
    order = ["fp32", "fp16", "bf16"]
    leaked: list = []
    forward = _peaks_in_order(order, leaked)
    backward = _peaks_in_order(order[::-1], leaked)
    alone = {regime: _peaks_in_order([regime], [])[regime] for regime in order}
    assert forward == backward == alone
    # and the figure is not blind to a regime's own memory: FP16 saves activations
    assert forward["fp16"] < forward["fp32"]
    rows = run_benchmarks(CPU, TINY, models=["linear_stack"], regimes=order)
    assert {r.regime: r.peak_bytes for r in rows} == forward


@pytest.mark.parametrize(
    ("name", "slug"),
    [("NVIDIA H200", "nvidia-h200"), ("NVIDIA A100-SXM4-80GB", "nvidia-a100-sxm4-80gb")],
)
def test_slugify(name: str, slug: str) -> None:
    assert slugify(name) == slug


# --------------------------------------------------------------------------- command line


def test_record_refuses_on_cpu() -> None:
    with pytest.raises(RuntimeError, match="a recording needs a CUDA GPU"):
        record(CPU)


def test_cli_record_refuses_on_cpu_in_process(monkeypatch, capsys) -> None:
    monkeypatch.setenv("AMP_LESSON_DEVICE", "cpu")
    with pytest.raises(SystemExit) as info:
        bench.main(["--record"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--record needs a CUDA GPU, but the device is 'cpu'" in err
    assert "A recording holds GPU numbers only" in err


def test_cli_record_refuses_on_cpu_as_a_program(tmp_path: Path) -> None:
    env = {**os.environ, "AMP_LESSON_DEVICE": "cpu"}
    out = tmp_path / "x.json"
    proc = subprocess.run(
        [sys.executable, "-m", "amp_lesson.bench", "--record", "--out", str(out)],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "--record needs a CUDA GPU" in proc.stderr
    assert not out.exists()


def test_cli_out_needs_record(monkeypatch, capsys) -> None:
    monkeypatch.setenv("AMP_LESSON_DEVICE", "cpu")
    with pytest.raises(SystemExit) as info:
        bench.main(["--out", "x.json"])
    assert info.value.code == 2
    assert "--out only makes sense with --record" in capsys.readouterr().err


def test_cli_prints_the_live_table(monkeypatch, capsys) -> None:
    monkeypatch.setenv("AMP_LESSON_DEVICE", "cpu")
    monkeypatch.setattr(workload, "CPU_SIZES", TINY)
    assert bench.main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("CPU (")
    assert "FP16 autocast" in out
    assert "not available on CPU" in out
    assert all(math.isfinite(r.step_ms) for r in run_benchmarks(CPU, TINY, regimes=["fp32"]))


# --------------------------------------------------------------------------- page helpers


def test_drop_empty_leaves_out_the_columns_a_cpu_cannot_fill(cpu_rows: list[BenchRow]) -> None:
    header = bench_table(cpu_rows, drop_empty=True).text_rows()[0]
    assert "peak TFLOP/s" not in header
    assert "% of peak" not in header
    assert {"step ms", "TFLOP/s", "saved MB", "peak alloc MB", "note"} <= set(header)
    with pytest.raises(TypeError, match="drop_empty must be True or False"):
        bench_table(cpu_rows, drop_empty="yes")


@pytest.mark.parametrize("model", MODELS)
def test_torch_counted_flops_agree_with_the_formula(model: str) -> None:
    assert bench.torch_counted_flops(model, TINY) == step_flops(model, TINY)
    with pytest.raises(TypeError, match="sizes must be a BenchSizes"):
        bench.torch_counted_flops(model, None)


def test_plot_rows_draws_a_bar_per_measured_row(cpu_rows: list[BenchRow]) -> None:
    import matplotlib.pyplot as plt

    fig = bench.plot_rows(cpu_rows, title="t")
    try:
        ax_time, ax_mem = fig.axes
        measured = [r for r in cpu_rows if r.available]
        assert len(ax_time.patches) == len(measured)
        assert sorted(p.get_height() for p in ax_mem.patches) == pytest.approx(
            sorted(r.saved_bytes / 1e6 for r in measured)
        )
        assert {str(p.get_hatch() or "") for p in ax_time.patches} == {"", "//", "xx"}
        # one legend for both panels, clear of both, so no bar can hide it
        (legend,) = fig.legends
        assert [t.get_text() for t in legend.get_texts()] == [
            "FP32",
            "FP16 autocast",
            "BF16 autocast",
        ]
        fig.canvas.draw()
        box = legend.get_window_extent()
        assert not any(box.overlaps(ax.get_window_extent()) for ax in fig.axes)
    finally:
        plt.close(fig)
    with pytest.raises(ValueError, match="at least one measured row"):
        bench.plot_rows([r for r in cpu_rows if not r.available])


def test_matmul_rows_times_each_format() -> None:
    rows = bench.matmul_rows(32, CPU, repeats=2)
    assert [r.dtype for r in rows] == [torch.float32, torch.bfloat16, torch.float16]
    assert all(r.n == 32 and r.ms > 0 for r in rows)
    assert rows[0].vs_fp32 == 1.0
    assert rows[2].vs_fp32 == rows[2].ms / rows[0].ms
    table = bench.matmul_table(rows).text_rows()
    assert table[0] == ["format", "32×32 matmul, ms", "time vs FP32"]
    assert [r[0] for r in table[1:]] == ["FP32", "BF16", "FP16"]
    with pytest.raises(ValueError, match="n must be an integer >= 1"):
        bench.matmul_rows(0, CPU)
    with pytest.raises(ValueError, match="repeats must be an integer >= 1"):
        bench.matmul_rows(8, CPU, repeats=0)


def test_paired_speedup_is_the_median_of_round_ratios() -> None:
    # a burst of load slows round 2 of both: the paired ratio is unmoved
    assert bench.paired_speedup([4.0, 400.0, 4.0], [2.0, 200.0, 2.0]) == 2.0
    assert bench.paired_speedup([1.0, 2.0], [1.0, 1.0]) == 1.5
    with pytest.raises(ValueError, match="equally long and non-empty"):
        bench.paired_speedup([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="equally long and non-empty"):
        bench.paired_speedup([], [])


def test_single_regime_rows_have_no_speedup() -> None:
    assert measure_step("linear_stack", "fp32", CPU, TINY).speedup is None


def test_cuda_style_speedups_are_filled_from_the_medians() -> None:
    rows = [
        BenchRow("linear_stack", "fp32", "cuda", step_ms=8.0),
        BenchRow("linear_stack", "fp16", "cuda", step_ms=2.0),
        BenchRow("linear_stack", "tf32", "cuda", available=False, note="n/a"),
    ]
    assert [r.speedup for r in measure._with_speedups(rows)] == [1.0, 4.0, None]


def test_speed_beside_puts_each_recorded_model_first_and_the_live_column_last(
    tmp_path: Path,
) -> None:
    write_recording(fake_recording(), tmp_path / "h200.json")
    recordings = load_recordings(tmp_path)
    view = bench.SpeedBeside({"fp32": 1.0, "fp16": 34.0, "bf16": 0.5}, "live", recordings)
    labels = [label for label, _ in view.columns()]
    assert labels[-1] == "live"
    assert len(labels) == 1 + len({row.model for row in recordings[0].rows})
    rows = view.table().text_rows()
    assert rows[0][0] == "dtype"
    by_dtype = {line[0]: line[-1] for line in rows[1:]}
    assert by_dtype["FP32"] == "reference"
    assert by_dtype["FP16"] == "34× slower"
    assert by_dtype["BF16"] == "2× faster"
    recorded = {
        row.regime: row.speedup
        for row in recordings[0].rows
        if row.model == recordings[0].rows[0].model and row.speedup
    }
    column = dict(view.columns())[labels[0]]
    assert column == {regime: 1 / x for regime, x in recorded.items()}
    assert recordings[0].describe() in view._repr_html_()
    assert {line[1] for line in rows[2:]} == {"as fast"}  # every fake regime's speedup is 1


def test_speed_beside_without_a_recording_says_so() -> None:
    view = bench.SpeedBeside({"fp32": 1.0}, "live", [])
    assert str(view).endswith("No GPU recording is stored with the book's sources.")


@pytest.mark.parametrize(
    ("live", "message"),
    [
        ({"fp32": 1.0, "int8": 2.0}, "live must be one of"),
        ({"fp32": 1.0, "fp16": 0.0}, r"live\['fp16'\] must be a positive finite number"),
        ({"fp32": 1.0, "fp16": float("inf")}, r"live\['fp16'\] must be a positive finite"),
        ({"fp16": 2.0}, "live must give 'fp32' as 1"),
        ({"fp32": 2.0}, "live must give 'fp32' as 1"),
    ],
)
def test_speed_beside_refuses_live_times_it_cannot_show(live: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        bench.SpeedBeside(live, "live", [])


def test_speed_beside_measures_three_dtypes_live_relative_to_fp32() -> None:
    view = bench.SpeedBeside.measure("cpu", [], n=16, repeats=2)
    assert set(view.live) == {"fp32", "fp16", "bf16"}
    assert view.live["fp32"] == 1.0
    assert all(x > 0 for x in view.live.values())
    from amp_lesson.device import device_name

    assert view.live_label == f"one 16×16 product on {device_name('cpu')}"
    assert view.live_label.startswith("one 16×16 product on CPU (")
