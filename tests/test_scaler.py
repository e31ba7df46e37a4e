"""Tests for amp_lesson.scaler: the simulator against the real torch.amp.GradScaler."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from helpers import examples
from hypothesis import given
from hypothesis import strategies as st

from amp_lesson.scaler import (
    ScalerSimulator,
    ScaleStep,
    follow_gradient,
    max_safe_scale,
    run_torch_scaler,
    simulate,
)

FP32_MAX = float(np.finfo(np.float32).max)
FP32_TINY_SUBNORMAL = math.ldexp(1.0, -149)


def f32(x: float) -> float:
    """Independent float32 rounding (numpy), for expected values."""
    with np.errstate(over="ignore", under="ignore"):
        return float(np.float32(x))


def torch_trace(schedule, **params) -> list[tuple[float, float, int]]:
    """(scale used, scale after update, growth tracker) per step, from a real GradScaler.

    One float32 parameter, loss ``w * x`` with ``x = inf`` on overflow steps, SGD,
    and the real ``scale(loss).backward()`` / ``step`` / ``update`` path.
    """
    scaler = torch.amp.GradScaler("cpu", **params)
    w = torch.nn.Parameter(torch.ones(()))
    opt = torch.optim.SGD([w], lr=0.1)
    out = []
    for overflow in schedule:
        opt.zero_grad(set_to_none=True)
        x = torch.tensor(math.inf if overflow else 1.0)
        scaler.scale(w * x).backward()
        used = scaler.get_scale()
        scaler.step(opt)
        scaler.update()
        out.append((used, scaler.get_scale(), scaler.state_dict()["_growth_tracker"]))
    return out


def sim_trace(schedule, **params) -> list[tuple[float, float, int]]:
    sim = ScalerSimulator(**params)
    out = []
    for overflow in schedule:
        used = sim.scale
        sim.update(overflow)
        out.append((used, sim.scale, sim.growth_tracker))
    return out


init_scales = st.one_of(
    st.integers(min_value=-149, max_value=127).map(lambda k: math.ldexp(1.0, k)),
    st.floats(min_value=FP32_TINY_SUBNORMAL, max_value=FP32_MAX, width=32),
    st.floats(min_value=1e-30, max_value=1e38),  # doubles: torch rounds them to float32
)
growth_factors = st.one_of(
    st.sampled_from([2.0, 4.0, 1.5]),
    st.floats(min_value=1.0, max_value=4.0, exclude_min=True),
)
backoff_factors = st.one_of(
    st.sampled_from([0.5, 0.25, 0.3]),
    st.floats(min_value=0.0, max_value=1.0, exclude_min=True, exclude_max=True),
)
params_strategy = st.fixed_dictionaries(
    {
        "init_scale": init_scales,
        "growth_factor": growth_factors,
        "backoff_factor": backoff_factors,
        "growth_interval": st.integers(min_value=1, max_value=5),
    }
)
schedules = st.lists(st.booleans(), max_size=60)


# --- simulator vs torch -----------------------------------------------------------


@examples(250)
@given(schedule=schedules, params=params_strategy)
def test_simulator_matches_torch_step_by_step(schedule, params):
    assert sim_trace(schedule, **params) == torch_trace(schedule, **params)


def test_products_are_rounded_from_double_like_torch():
    # 0.3 and 1.7 are not float32 numbers: torch forms scale * factor in double and
    # rounds once to float32. A float32 * float32(factor) model drifts from it.
    params = {"init_scale": 1.0, "growth_factor": 1.7, "backoff_factor": 0.3, "growth_interval": 1}
    schedule = [True] * 5 + [False] * 5
    assert sim_trace(schedule, **params) == torch_trace(schedule, **params)
    naive = np.float32(1.0)
    for overflow in schedule:
        naive = naive * np.float32(0.3 if overflow else 1.7)
    assert float(naive) != sim_trace(schedule, **params)[-1][1]


@examples(40)
@given(
    interval=st.integers(min_value=1, max_value=12),
    k=st.integers(min_value=-20, max_value=20),
)
def test_growth_exactly_at_the_interval(interval, k):
    init = math.ldexp(1.0, k)
    schedule = [False] * interval
    sim = sim_trace(schedule, init_scale=init, growth_interval=interval)
    # Before the interval-th good step: same scale, tracker counting 1, 2, ...
    for i, (_, after, tracker) in enumerate(sim[:-1], start=1):
        assert (after, tracker) == (init, i)
    # At the interval-th: doubled, tracker reset.
    assert sim[-1][1:] == (2 * init, 0)
    assert sim == torch_trace(schedule, init_scale=init, growth_interval=interval)


@examples(40)
@given(interval=st.integers(min_value=2, max_value=8), data=st.data())
def test_tracker_resets_on_skip(interval, data):
    good = data.draw(st.integers(min_value=1, max_value=interval - 1))
    schedule = [False] * good + [True] + [False] * good
    sim = sim_trace(schedule, init_scale=1024.0, growth_interval=interval)
    assert sim[good - 1][2] == good
    assert sim[good][1:] == (512.0, 0)  # skip: halved, tracker reset
    assert sim[-1][1:] == (512.0, good)  # counting again from zero, no growth yet
    assert sim == torch_trace(schedule, init_scale=1024.0, growth_interval=interval)


@pytest.mark.parametrize(
    ("init", "factor"), [(FP32_MAX, 2.0), (math.ldexp(1.0, 127), 2.0), (3e38, 1.2)]
)
def test_scale_never_grows_to_inf(init, factor):
    schedule = [False] * 5
    sim = sim_trace(schedule, init_scale=init, growth_factor=factor, growth_interval=1)
    assert math.isinf(f32(f32(init) * factor))  # growth would overflow float32
    assert all(after == f32(init) and tracker == 0 for _, after, tracker in sim)
    assert sim == torch_trace(schedule, init_scale=init, growth_factor=factor, growth_interval=1)


def test_repeated_backoff_reaches_subnormals_then_zero_like_torch():
    schedule = [True] * 170 + [False] * 6
    sim = sim_trace(schedule, growth_interval=2)
    assert sim == torch_trace(schedule, growth_interval=2)
    afters = [after for _, after, _ in sim]
    # 2**16 halved 165 times is 2**-149, float32's smallest subnormal; the next
    # halving is a tie that rounds to even: zero.
    assert afters[164] == FP32_TINY_SUBNORMAL
    # Every halving down to there is exact, through the subnormals (below 2**-126).
    assert afters[:165] == [math.ldexp(1.0, 16 - n) for n in range(1, 166)]
    assert 0.0 < afters[150] < float(np.finfo(np.float32).tiny)
    assert afters[165] == 0.0
    # A zero scale stays zero: growth multiplies 0 by 2.
    assert afters[-6:] == [0.0] * 6


def test_real_scaler_skips_the_step_and_keeps_the_parameter():
    scaler = torch.amp.GradScaler("cpu", init_scale=8.0)
    w = torch.nn.Parameter(torch.tensor(3.0))
    opt = torch.optim.SGD([w], lr=0.1)
    scaler.scale(w * torch.tensor(math.inf)).backward()
    scaler.step(opt)
    scaler.update()
    assert w.item() == 3.0
    assert scaler.get_scale() == 4.0


# --- simulate / run_torch_scaler ---------------------------------------------------


@examples(200)
@given(schedule=schedules, params=params_strategy)
def test_simulate_trace_is_consistent(schedule, params):
    trace = simulate(schedule, **params)
    assert [r.step for r in trace] == list(range(1, len(schedule) + 1))
    assert [r.found_inf for r in trace] == schedule
    assert [r.skipped for r in trace] == schedule
    assert [(r.scale_used, r.scale_after, r.growth_tracker_after) for r in trace] == sim_trace(
        schedule, **params
    )
    if trace:
        assert trace[0].scale_used == f32(params["init_scale"])
    for prev, nxt in itertools.pairwise(trace):
        assert nxt.scale_used == prev.scale_after


@examples(60)
@given(schedule=schedules, params=params_strategy)
def test_run_torch_scaler_equals_simulate(schedule, params):
    trace = run_torch_scaler(schedule, "cpu", **params)
    assert all(isinstance(r, ScaleStep) for r in trace)
    assert trace == simulate(schedule, **params)


def test_run_torch_scaler_skips_exactly_the_overflow_steps():
    schedule = [False, True, True, False, False, False, True, False]
    trace = run_torch_scaler(schedule, "cpu", init_scale=2.0**10, growth_interval=3)
    assert [r.skipped for r in trace] == schedule
    assert [r.found_inf for r in trace] == schedule
    assert trace[-1].scale_after == 2.0**10 / 8 * 2  # three backoffs, one growth


def test_run_torch_scaler_default_device_reads_env(monkeypatch):
    monkeypatch.setenv("AMP_LESSON_DEVICE", "cpu")
    assert run_torch_scaler([True, False]) == simulate([True, False])


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_run_torch_scaler_on_cuda_equals_simulate():
    schedule = [True, False, False, True] + [False] * 10
    params = {"init_scale": 3.0, "growth_factor": 1.7, "backoff_factor": 0.3, "growth_interval": 2}
    assert run_torch_scaler(schedule, "cuda", **params) == simulate(schedule, **params)


# --- follow_gradient ---------------------------------------------------------------


grads = st.floats(min_value=1e-30, max_value=1e6).flatmap(lambda g: st.sampled_from([g, -g]))
scales = st.one_of(
    st.integers(min_value=0, max_value=40).map(lambda k: math.ldexp(1.0, k)),
    st.floats(min_value=1.0, max_value=2.0**40),  # GradScaler's scale need not be 2**k
)


@examples(250)
@given(grad=grads, scale=scales)
def test_follow_gradient_rows_are_what_torch_and_numpy_store(grad, scale):
    rows = follow_gradient(grad, scale)
    fp32, scaled, stored, unscaled, direct = (r.value for r in rows)
    assert fp32 == f32(grad)
    assert scaled == float(np.float32(grad) * np.float32(scale))
    assert stored == torch.tensor(scaled, dtype=torch.float32).to(torch.float16).item()
    with np.errstate(over="ignore"):
        assert stored == float(np.float16(np.float32(scaled)))
        assert direct == float(np.float16(np.float32(grad)))
    inv = np.float32(1.0 / np.float64(np.float32(scale)))
    assert unscaled == float(np.float32(stored) * inv)
    for r in rows:
        assert r.is_zero == (r.value == 0.0)
        assert r.is_inf == math.isinf(r.value)
    if math.isfinite(unscaled):
        assert rows[3].rel_error == abs(unscaled - fp32) / abs(fp32)
    assert rows[4].rel_error == abs(direct - fp32) / abs(fp32)


def test_tiny_gradient_underflows_without_scaling_and_survives_with_it():
    rows = follow_gradient(1e-8, 65536.0)
    labels = [r.label for r in rows]
    assert labels == [
        "fp32 gradient",
        "scaled (× S) in fp32",
        "stored in fp16",
        "unscaled back to fp32",
        "without scaling, stored in fp16",
    ]
    # 1e-8 is below half of fp16's smallest subnormal, 2**-24, so it rounds to 0.
    fp16_min_subnormal = float(torch.finfo(torch.float16).smallest_normal) * 2.0**-10
    assert fp16_min_subnormal / 2 > 1e-8
    assert rows[4].value == 0.0
    assert rows[4].is_zero
    assert rows[4].rel_error == 1.0
    assert not rows[2].is_zero
    assert not rows[3].is_zero
    unit_roundoff = 2.0**-11  # fp16 has an 11-bit significand
    assert rows[3].rel_error <= unit_roundoff
    assert abs(rows[3].value - rows[0].value) / rows[0].value <= unit_roundoff


def test_scaling_too_far_overflows_fp16():
    rows = follow_gradient(1.0, 2.0**16)
    assert float(torch.finfo(torch.float16).max) < 2.0**16
    assert rows[2].is_inf
    assert rows[3].is_inf
    assert rows[3].rel_error == math.inf
    assert rows[4].value == 1.0


def test_bf16_keeps_tiny_gradients_without_scaling():
    rows = follow_gradient(1e-8, 65536.0, "bf16")
    assert rows[2].label == "stored in bf16"
    assert rows[4].label == "without scaling, stored in bf16"
    assert rows[4].value == torch.tensor(1e-8).to(torch.bfloat16).item() != 0.0
    assert rows[4].rel_error <= 2.0**-8  # bf16 has an 8-bit significand


def test_follow_gradient_accepts_torch_dtypes():
    assert follow_gradient(1e-8, dtype=torch.float16) == follow_gradient(1e-8, dtype="fp16")
    assert follow_gradient(1e-8, dtype=torch.bfloat16) == follow_gradient(1e-8, dtype="bf16")


# --- max_safe_scale ----------------------------------------------------------------


@examples(250)
@given(
    m=st.floats(min_value=1e-30, max_value=1e30),
    dtype=st.sampled_from(["fp16", "bf16"]),
)
def test_max_safe_scale_is_the_largest_safe_power_of_two(m, dtype):
    s = max_safe_scale(m, dtype)
    limit = float(torch.finfo({"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]).max)
    mantissa, _ = math.frexp(s)
    assert mantissa == 0.5  # a power of two
    assert s * m < limit
    assert s == 2.0**127 or 2 * s * m >= limit


# --- bad input ---------------------------------------------------------------------


@pytest.mark.parametrize("value", [1.0, 0.5, -2.0, math.nan, math.inf])
def test_bad_growth_factor(value):
    with pytest.raises(ValueError, match="growth_factor"):
        ScalerSimulator(growth_factor=value)


@pytest.mark.parametrize("value", [0.0, 1.0, 1.5, -0.5, math.nan])
def test_bad_backoff_factor(value):
    with pytest.raises(ValueError, match=r"backoff_factor.*\(0, 1\)|backoff_factor.*finite"):
        ScalerSimulator(backoff_factor=value)


@pytest.mark.parametrize(
    ("value", "error"),
    [(0, ValueError), (-3, ValueError), (2.0, TypeError), (True, TypeError), ("5", TypeError)],
)
def test_bad_growth_interval(value, error):
    with pytest.raises(error, match="growth_interval"):
        ScalerSimulator(growth_interval=value)


@pytest.mark.parametrize("value", [math.nan, 0.0, -1.0, math.inf, 1e39, 1e-50])
def test_bad_init_scale(value):
    with pytest.raises(ValueError, match="init_scale"):
        ScalerSimulator(init_scale=value)


@pytest.mark.parametrize(
    "value", [10**400, -(10**400), 10**5000], ids=["1e400", "-1e400", "1e5000"]
)
def test_an_int_too_large_for_a_float_is_named_not_overflowed(value):
    with pytest.raises(
        ValueError,
        match=r"^init_scale must be a finite number within a float's range .*, got .*integer of",
    ):
        ScalerSimulator(init_scale=value)
    with pytest.raises(
        ValueError, match=r"^growth_factor must be a finite number within a float's range"
    ):
        simulate([True], growth_factor=value)
    with pytest.raises(
        ValueError,
        match=r"^scale must be a finite number within a float's range .*, got .*integer of",
    ):
        follow_gradient(1e-8, value)


def test_init_scale_stops_where_torch_stops_at_float32s_largest_value():
    # 3.4028235e38 rounds down to float32's largest value, but torch.full refuses it
    with pytest.raises(RuntimeError, match="cannot be converted to type float"):
        torch.full((), 3.4028235e38, dtype=torch.float32)
    for func in (ScalerSimulator, lambda **kw: run_torch_scaler([False], "cpu", **kw)):
        with pytest.raises(ValueError, match=r"^init_scale must be representable in float32"):
            func(init_scale=3.4028235e38)
    assert run_torch_scaler([False], "cpu", init_scale=FP32_MAX) == simulate(
        [False], init_scale=FP32_MAX
    )


def test_growth_interval_stops_where_gradscalers_64_bit_kernel_argument_stops():
    big = 2**63 - 1
    assert run_torch_scaler([False] * 3, "cpu", growth_interval=big) == simulate(
        [False] * 3, growth_interval=big
    )
    for func in (ScalerSimulator, lambda **kw: run_torch_scaler([False], "cpu", **kw)):
        with pytest.raises(ValueError, match=r"^growth_interval must be an integer in \[1, 2\*\*6"):
            func(growth_interval=2**63)


def test_init_scale_must_be_a_number():
    with pytest.raises(TypeError, match="init_scale"):
        ScalerSimulator(init_scale="65536")


@pytest.mark.parametrize("value", [1, 0, None, "yes", 1.0, torch.tensor(True)])
def test_found_inf_must_be_bool(value):
    with pytest.raises(TypeError, match="found_inf must be a bool"):
        ScalerSimulator().update(value)


def test_numpy_bools_are_accepted():
    assert simulate([np.True_, np.False_]) == simulate([True, False])


@pytest.mark.parametrize("func", [simulate, run_torch_scaler])
def test_bad_sequences(func):
    with pytest.raises(TypeError, match=r"found_inf_sequence\[1\] must be a bool"):
        func([True, 1])
    with pytest.raises(TypeError, match="found_inf_sequence must be an iterable"):
        func(5)
    with pytest.raises(TypeError, match="found_inf_sequence must be an iterable"):
        func("TF")


@pytest.mark.parametrize("func", [simulate, run_torch_scaler])
def test_bad_params_in_trace_functions(func):
    with pytest.raises(ValueError, match="backoff_factor"):
        func([True], backoff_factor=1.5)
    with pytest.raises(ValueError, match="growth_factor"):
        func([True], growth_factor=0.9)


def test_run_torch_scaler_bad_device():
    with pytest.raises(ValueError, match="device must be one of"):
        run_torch_scaler([True], "tpu")
    with pytest.raises(TypeError, match="device"):
        run_torch_scaler([True], 3)
    with pytest.raises(ValueError, match="device"):
        run_torch_scaler([True], torch.device("meta"))


def test_follow_gradient_bad_input():
    with pytest.raises(ValueError, match="grad"):
        follow_gradient(math.nan)
    with pytest.raises(ValueError, match="grad must fit in float32"):
        follow_gradient(1e39)
    with pytest.raises(ValueError, match="scale"):
        follow_gradient(1e-8, 0.0)
    with pytest.raises(ValueError, match="scale"):
        follow_gradient(1e-8, -2.0)
    with pytest.raises(ValueError, match="dtype must be one of"):
        follow_gradient(1e-8, dtype="fp8")
    with pytest.raises(ValueError, match="dtype must be one of"):
        follow_gradient(1e-8, dtype=torch.float32)


def test_max_safe_scale_bad_input():
    with pytest.raises(ValueError, match="max_abs_grad"):
        max_safe_scale(0.0)
    with pytest.raises(ValueError, match="max_abs_grad"):
        max_safe_scale(math.inf)
    with pytest.raises(ValueError, match="dtype"):
        max_safe_scale(1.0, "fp32")
