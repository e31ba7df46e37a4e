"""Tests for amp_lesson.timing: the one timer and the one matrix-product benchmark."""

from __future__ import annotations

import pytest
import torch

from amp_lesson.timing import Timing, matmul_times, one_thread, time_calls

CPU = torch.device("cpu")


def test_time_calls_warms_up_then_takes_turns() -> None:
    order: list[str] = []
    calls = {name: (lambda name=name: order.append(name)) for name in ("a", "b")}
    timings = time_calls(calls, CPU, warmup=2, repeats=3)
    # warm-up: each call on its own; then rounds in which the calls take turns
    assert order == ["a", "a", "b", "b", "a", "b", "a", "b", "a", "b"]
    assert list(timings) == ["a", "b"]
    for t in timings.values():
        assert t.method == "perf_counter"
        assert len(t.times_ms) == 3
        assert all(ms >= 0 for ms in t.times_ms)
        assert t.min <= t.median <= t.max


def test_timing_statistics() -> None:
    t = Timing((3.0, 1.0, 10.0, 2.0), "perf_counter")
    assert (t.min, t.median, t.max) == (1.0, 2.5, 10.0)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"calls": {}}, ValueError, "at least one function"),
        ({"calls": [lambda: None]}, TypeError, "calls must be a mapping"),
        ({"calls": {"a": 3}}, TypeError, "calls must be a mapping"),
        ({"calls": {"a": lambda: None}, "repeats": 0}, ValueError, "repeats must be"),
        ({"calls": {"a": lambda: None}, "warmup": -1}, ValueError, "warmup must be"),
        ({"calls": {"a": lambda: None}, "device": "tpu"}, ValueError, "device must be"),
    ],
)
def test_time_calls_rejects_bad_input(kwargs, error, match) -> None:
    with pytest.raises(error, match=match):
        time_calls(**kwargs)


def test_one_thread_restores_the_thread_count_after_an_error() -> None:
    before = torch.get_num_threads()
    inside = []

    def fail() -> None:
        with one_thread():
            inside.append(torch.get_num_threads())
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fail()
    assert inside == [1]
    assert torch.get_num_threads() == before


def test_matmul_times_each_dtype_on_one_thread() -> None:
    threads = torch.get_num_threads()
    times = matmul_times(32, (torch.float32, torch.bfloat16, torch.float16), CPU, repeats=3)
    assert list(times) == [torch.float32, torch.bfloat16, torch.float16]
    assert all(len(t.times_ms) == 3 and t.min > 0 for t in times.values())
    assert torch.get_num_threads() == threads  # restored after the one-thread timing
    with pytest.raises(TypeError, match="floating-point"):
        matmul_times(32, (torch.int32,), CPU)
    with pytest.raises(ValueError, match="repeats must be an integer >= 1"):
        matmul_times(32, device=CPU, repeats=0)
    with pytest.raises(ValueError, match="at least one dtype"):
        matmul_times(32, (), CPU)


@pytest.mark.cuda
def test_time_calls_uses_cuda_events_on_a_gpu() -> None:
    x = torch.randn(512, 512, device="cuda")
    timings = time_calls({"mm": lambda: x @ x}, "cuda", repeats=3)
    assert timings["mm"].method == "cuda_events"
    assert all(ms > 0 for ms in timings["mm"].times_ms)
