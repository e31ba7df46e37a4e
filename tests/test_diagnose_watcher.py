"""``amp_lesson.diagnose.watch`` in real loops: the recipe's, and ones written here, against
hooks written here the way Hugging Face's DebugUnderflowOverflow writes them."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.optimizer import _global_optimizer_post_hooks, _global_optimizer_pre_hooks

from amp_lesson.diagnose import LOST_SHARE, diagnose, watch
from amp_lesson.recipe import train_mixed_precision


def first_nonfinite_by_hooks(model: nn.Module, run) -> dict | None:
    """The first module whose output (forward) or output's gradient (backward) holds inf or
    NaN, step by step, found by plain forward hooks and tensor hooks as a debugging aid would."""
    found: list[dict] = []
    step = [1]
    handles = []

    def check(name, phase, t):
        if not torch.isfinite(t).all() and not any(f["step"] == step[0] and f["phase"] == phase
                                                   for f in found):  # fmt: skip
            found.append({"step": step[0], "phase": phase, "module": name})

    seen: list[torch.Tensor] = []
    for name, module in model.named_modules():

        def hook(m, args, out, name=name):
            outs = out if isinstance(out, tuple) else (out,)
            for t in outs:
                if not isinstance(t, torch.Tensor) or not t.is_floating_point():
                    continue
                if any(t is s for s in seen):
                    continue
                seen.append(t)
                check(name, "forward", t.detach())
                if t.requires_grad:
                    t.register_hook(lambda g, name=name: check(name, "backward", g))

        handles.append(module.register_forward_hook(hook))
    try:
        run(step, seen)
    finally:
        for h in handles:
            h.remove()
    order = sorted(found, key=lambda f: (f["step"], f["phase"] != "forward"))
    return order[0] if order else None


def overflowing_mlp() -> tuple[nn.Module, list]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.Linear(32, 1))
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(512, 8, generator=g) * 20, torch.randn(512, 1, generator=g)
    return model, [(x, y)] * 8


def summed(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """A loss summed over the batch where the mean was meant: gradients 512 times larger."""
    return F.mse_loss(out, y, reduction="sum")


def test_in_the_recipes_loop_the_scales_and_skipped_steps_are_the_scalers() -> None:
    model, batches = overflowing_mlp()
    twin = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-7)
    with watch(model, every=3) as w:
        scaler = train_mixed_precision(model, batches, summed, optimizer)
    # the same loop written out, each step's scale and skip read from its own scaler
    opt = torch.optim.SGD(twin.parameters(), lr=1e-7)
    ref = torch.amp.GradScaler("cpu")
    scales, skipped = [], []
    for step, (x, y) in enumerate(batches, start=1):
        with torch.autocast("cpu", dtype=torch.float16):
            loss = summed(twin(x), y)
        scales.append(ref.get_scale())
        ref.scale(loss).backward()
        if not all(torch.isfinite(p.grad).all() for p in twin.parameters()):
            skipped.append(step)  # the gradient itself, read before the scaler sees it
        ref.step(opt)
        ref.update()
        opt.zero_grad()
    assert w.steps == len(batches) == 8
    assert w.scales == scales
    assert w.skipped_steps == skipped
    assert skipped
    assert scaler.get_scale() == ref.get_scale()
    assert w.format == "fp16"
    assert [s["step"] for s in w.samples] == [1, 4, 7]
    text = str(w)
    assert f"{len(skipped)} of 8 steps skipped: {', '.join(map(str, skipped))}" in text


def test_the_first_nonfinite_module_is_the_one_hooks_written_here_find() -> None:
    model, batches = overflowing_mlp()
    twin = copy.deepcopy(model)
    with watch(model, every=None) as w:
        train_mixed_precision(model, batches, summed, torch.optim.SGD(model.parameters(), lr=1e-7))

    def run(step, seen):
        opt = torch.optim.SGD(twin.parameters(), lr=1e-7)
        scaler = torch.amp.GradScaler("cpu")
        for x, y in batches:
            with torch.autocast("cpu", dtype=torch.float16):
                loss = summed(twin(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            step[0] += 1
            seen.clear()

    expected = first_nonfinite_by_hooks(twin, run)
    first = w.first_nonfinite()
    assert expected is not None
    assert {k: first[k] for k in ("step", "phase", "module")} == expected
    assert first["phase"] == "backward"
    assert first["max"] != first["max"] or abs(first["max"]) == float("inf") or abs(
        first["min"]) == float("inf")  # fmt: skip


def test_an_overflow_in_the_forward_pass_is_found_where_it_starts() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    with torch.no_grad():
        model[1].weight.mul_(1e6)
    x, y = torch.randn(16, 4), torch.randint(0, 2, (16,))
    twin = copy.deepcopy(model)
    with watch(model, every=None) as w:
        train_mixed_precision(model, [(x, y)] * 3, F.cross_entropy,
                              torch.optim.SGD(model.parameters(), lr=0.1))  # fmt: skip

    def run(step, seen):
        with torch.autocast("cpu", dtype=torch.float16):
            F.cross_entropy(twin(x), y).backward()

    expected = first_nonfinite_by_hooks(twin, run)
    assert expected == {"step": 1, "phase": "forward", "module": "1"}
    assert {k: w.first_nonfinite()[k] for k in ("step", "phase", "module")} == expected
    assert w.skipped_steps == [1, 2, 3]
    rules = {r["key"]: r for r in w.rules()}
    assert rules["forward_fits_fp16"]["holds"] is False
    assert "first at step 1, in 1" in rules["forward_fits_fp16"]["words"]


def test_a_sampled_step_counts_what_fp16_lost_of_its_backward() -> None:
    """At scale 1 every per-sample logit gradient flushes (they are about 2**-28); at 2**16
    none does. The counts are checked against the same step done here in FP32."""
    torch.manual_seed(0)
    model = nn.Linear(32, 4)
    x, y = torch.randn(4096, 32), torch.zeros(4096, dtype=torch.long)

    def loss_fn(out, t):
        return F.cross_entropy(out, t) * 2.0**-14

    with torch.no_grad():  # the FP32 logit gradients, scaled by 1: what FP16 is asked to hold
        probs = F.softmax(model(x), dim=1)
    reference = (probs - F.one_hot(y, 4)) / 4096 * 2.0**-14
    expected = int(((reference != 0) & (reference.half() == 0)).sum())
    assert expected == 16384

    def loop(scale: float):
        twin = copy.deepcopy(model)
        opt = torch.optim.SGD(twin.parameters(), lr=0.0)
        scaler = torch.amp.GradScaler("cpu", init_scale=scale)
        with watch(twin, every=1) as w:
            for _ in range(2):
                with torch.autocast("cpu", dtype=torch.float16):
                    loss = loss_fn(twin(x), y)
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
                opt.zero_grad()
        return w

    flushed, kept = loop(1.0), loop(2.0**16)
    out = flushed.samples[0]["tensors"]["(the model)"]
    assert (out["lost"], out["signal"]) == (16384, 16384)
    assert flushed.samples[0]["tensors"]["weight"]["lost"] == 128  # all, from zeros above
    assert flushed.samples[0]["worst"]["share"] == 1.0
    assert kept.samples[0]["worst"]["share"] == 0.0 < LOST_SHARE
    assert {r["key"]: r["holds"] for r in flushed.rules()}["scaler_keeps_fp16_gradients"] is False
    assert {r["key"]: r["holds"] for r in kept.rules()}["scaler_keeps_fp16_gradients"] is True


def test_bf16_and_fp32_loops_and_gradient_accumulation_are_counted_by_optimizer_step() -> None:
    model, batches = overflowing_mlp()
    for dtype, fmt in ((torch.bfloat16, "bf16"), (torch.float32, "fp32")):
        twin = copy.deepcopy(model)
        with watch(twin, every=2) as w:
            train_mixed_precision(twin, batches, F.mse_loss,
                                  torch.optim.SGD(twin.parameters(), lr=1e-4), accum_steps=4,
                                  dtype=dtype)  # fmt: skip
        assert w.steps == 2  # eight micro-batches, four a step
        assert w.format == fmt
        assert w.scales == [None, None]
        assert w.skipped_steps == []
        assert len(w.samples) == (1 if fmt == "bf16" else 0)
    # a loop without a scaler: steps counted where the optimizer steps
    twin = copy.deepcopy(model)
    opt = torch.optim.SGD(twin.parameters(), lr=1e-4)
    with watch(twin) as w:
        for x, y in batches[:3]:
            F.mse_loss(twin(x), y).backward()
            opt.step()
            opt.zero_grad()
    assert w.steps == 3
    assert w.format == "fp32"


def test_the_watch_removes_every_hook_and_wrapper_it_added() -> None:
    model, batches = overflowing_mlp()
    hooks = {n: (dict(m._forward_hooks), dict(m._forward_pre_hooks), dict(m._backward_hooks))
             for n, m in model.named_modules()}  # fmt: skip
    assert not any(p._backward_hooks for p in model.parameters())
    methods = (torch.amp.GradScaler.step, torch.amp.GradScaler.update)
    global_hooks = dict(_global_optimizer_post_hooks), dict(_global_optimizer_pre_hooks)
    with watch(model, every=1):
        train_mixed_precision(model, batches, summed, torch.optim.SGD(model.parameters(), lr=1e-7))
    assert {n: (dict(m._forward_hooks), dict(m._forward_pre_hooks), dict(m._backward_hooks))
            for n, m in model.named_modules()} == hooks  # fmt: skip
    assert not any(p._backward_hooks for p in model.parameters())  # emptied again
    assert (torch.amp.GradScaler.step, torch.amp.GradScaler.update) == methods
    assert (dict(_global_optimizer_post_hooks), dict(_global_optimizer_pre_hooks)) == global_hooks
    with pytest.raises(RuntimeError, match="boom"), watch(model):
        raise RuntimeError("boom")
    assert (torch.amp.GradScaler.step, torch.amp.GradScaler.update) == methods
    # a second watch after the first one's block is fine; a nested one is refused
    with watch(model), pytest.raises(RuntimeError, match="another watch is on"), watch(model):
        pass


def test_the_report_compares_the_scale_with_the_diagnosis() -> None:
    """Diagnosed on the first batch; later batches grow, and their gradients overflow at
    scales the first batch's did not."""
    model, batches = overflowing_mlp()
    x, y = batches[0]
    growing = [(x / 20 * 2**i, y) for i in range(12)]
    d = diagnose(model, growing[0], summed, steps=2)
    settled = d.gradients["settled_scale"]
    with watch(model, diagnosis=d, every=None) as w:
        train_mixed_precision(model, growing, summed, torch.optim.SGD(model.parameters(), lr=0))
    below = next(i + 1 for i, s in enumerate(w.scales) if s < settled)
    assert below > 1
    power = int(settled).bit_length() - 1
    assert f"fell below the settled scale diagnose found (2^{power}) at step {below}" in str(w)
    assert w.to_dict()["settled_scale"] == settled
    with watch(model, diagnosis=d, every=None) as calm:
        train_mixed_precision(model, growing[:2], summed,
                              torch.optim.SGD(model.parameters(), lr=0))  # fmt: skip
    assert min(calm.scales) >= settled
    assert "stayed at or above the settled scale diagnose found" in str(calm)


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"every": 0}, ValueError, "every must be an integer >= 1"),
        ({"every": 1.5}, TypeError, "every must be an integer"),
        ({"scaler": "scaler"}, TypeError, "scaler must be a torch.amp.GradScaler or None"),
        ({"diagnosis": {}}, TypeError, "diagnosis must be a Diagnosis or None"),
    ],
)
def test_bad_arguments_are_refused_naming_them(kwargs, error, words) -> None:
    with pytest.raises(error) as raised:
        watch(nn.Linear(2, 2), **kwargs)
    assert words in str(raised.value)
    with pytest.raises(TypeError, match=r"model must be a torch\.nn\.Module"):
        watch("model")


def test_a_sum_that_overflows_only_in_a_parameters_gradient_is_found_there() -> None:
    """Each sample's gradient fits FP16 at the default scale (half of 2**16); the weight's,
    their sum over four samples, does not."""
    model = nn.Linear(1, 1)
    x = torch.ones(4, 1)
    with watch(model, every=None) as w:
        train_mixed_precision(model, [(x, x)] * 2, lambda out, y: 0.5 * out.float().sum(),
                              torch.optim.SGD(model.parameters(), lr=0.0))  # fmt: skip
    assert w.first_nonfinite("backward") is None  # every output gradient was finite
    first = w.first_nonfinite()
    assert (first["step"], first["phase"], first["module"]) == (1, "parameter", "weight")
    assert first["max"] == float("inf")
    assert w.skipped_steps[0] == 1
    assert "parameter: first at step 1, the gradient of weight" in str(w)


def test_a_failure_in_the_middle_of_a_sampled_step_leaves_nothing_behind() -> None:
    model, batches = overflowing_mlp()
    x, y = batches[0]
    seen = {}

    def a_step_that_fails() -> None:
        with watch(model, every=1) as w:
            seen["watch"] = w
            with torch.autocast("cpu", dtype=torch.float16):
                seen["loss"] = F.mse_loss(model(x / 20), y)  # a sampled step's forward
            seen["modes"] = torch._C._len_torch_dispatch_stack()  # its modes are on
            raise RuntimeError("the loader failed")

    with pytest.raises(RuntimeError, match="the loader failed"):
        a_step_that_fails()
    assert seen["modes"] > 0
    assert torch._C._len_torch_dispatch_stack() == 0
    assert not any(p._backward_hooks for p in model.parameters())
    assert len(seen["watch"].samples) == 1
    assert not seen["watch"].samples[0]["measured"]


def test_an_evaluation_pass_inside_the_loop_is_not_watched() -> None:
    model, batches = overflowing_mlp()
    x, y = batches[0]
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-6)
    scaler = torch.amp.GradScaler("cpu")
    with watch(model, every=1) as w:
        for _ in range(2):
            with torch.no_grad():  # evaluation first: not a step, and no sample spoiled
                model(x * 1e6)  # even one that overflows
            with torch.autocast("cpu", dtype=torch.float16):
                loss = F.mse_loss(model(x / 20), y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    assert w.steps == 2
    assert w.format == "fp16"
    assert w.events == []
    assert w.errors == []
    assert [s["measured"] for s in w.samples] == [True, True]


def test_two_optimizers_after_one_backward_make_one_step() -> None:
    model, batches = overflowing_mlp()
    x, y = batches[0]
    first = torch.optim.SGD(list(model.parameters())[:2], lr=1e-6)
    second = torch.optim.SGD(list(model.parameters())[2:], lr=1e-6)
    other = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1)
    with watch(model) as w:
        for _ in range(3):
            F.mse_loss(model(x / 20), y).backward()
            first.step()
            second.step()
            other.step()  # another model's optimizer: not this model's step
            model.zero_grad()
    assert w.steps == 3
