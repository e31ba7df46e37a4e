"""``amp_lesson.diagnose``: each section against an independent computation, on models the
book's page does not use, and each way a diagnosis could misjudge a model at the edges."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
import torch.nn.functional as F
from diagnose_reference import (
    copies_alive_at_each_copy,
    lost_counts,
    step_gradients,
    tensor_row,
)
from torch import nn

from amp_lesson import autocast as ac
from amp_lesson.diagnose import (
    DEFAULT_SCALE,
    FP16_OVERFLOW,
    LOST_SHARE,
    RULES,
    _inputs,
    diagnose,
    recommend,
    run_in_fp32,
)
from amp_lesson.diagnose.report import percent
from amp_lesson.recipe import train_mixed_precision

SEED = 7


class SmallConv(nn.Module):
    """Conv, BatchNorm, dropout and a buffer of its own: what the copies must keep apart."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 6, 3, padding=1)
        self.bn = nn.BatchNorm2d(6)
        self.drop = nn.Dropout(0.3)
        self.fc = nn.Linear(6 * 4 * 4, 3)
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        h = self.drop(torch.relu(self.bn(self.conv(x))))
        return self.fc(h.flatten(1))


def small_conv() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(SEED)
    model = SmallConv()
    g = torch.Generator().manual_seed(1)
    return model, (torch.randn(12, 2, 4, 4, generator=g), torch.randint(0, 3, (12,), generator=g))


def small_mlp() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(SEED)
    model = nn.Sequential(nn.Linear(5, 32), nn.Tanh(), nn.Dropout(0.2), nn.Linear(32, 1))
    g = torch.Generator().manual_seed(2)
    return model, (torch.randn(16, 5, generator=g), torch.randn(16, 1, generator=g))


def tiny_loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """A loss whose gradient lies around FP16's smallest subnormal: some values flush."""
    return F.mse_loss(out, y) * 2.0**-22


def holds(d) -> dict[str, bool | None]:
    return {r["key"]: r["holds"] for r in d.recommendation["rules"]}


# --------------------------------------------------------------------------- gradients


@pytest.mark.parametrize("make", [small_conv, small_mlp])
def test_each_tensors_losses_are_those_of_real_half_steps_against_fp32_and_float64(make) -> None:
    model, batch = make()
    loss_fn = tiny_loss if make is small_mlp else F.cross_entropy
    d = diagnose(model, batch, loss_fn, steps=2)
    g = d.gradients
    settled = g["settled_scale"]
    assert settled is not None
    scales = {"fp16_unscaled": (torch.float16, 1.0), "bf16": (torch.bfloat16, 1.0),
              "fp16_settled": (torch.float16, settled)}  # fmt: skip
    partly = 0
    for measurement, (dtype, scale) in scales.items():
        expected = lost_counts(model, batch, loss_fn, dtype, scale)
        for key, (lost, signal) in expected.items():
            row = tensor_row(d, key)
            assert (row["lost"][measurement], row["signal"]) == (lost, signal), (measurement, key)
            partly += 0 < lost < signal
    if make is small_mlp:  # the tiny loss puts values on both sides of the line at scale 1
        assert partly >= 2
        assert g["worst"]["fp16_unscaled"]["share"] > LOST_SHARE


def test_the_per_sample_gradient_fp16_holds_is_judged_not_the_summed_one() -> None:
    """Linear(32, 4), 4096 samples of one class, loss times 2**-14: the summed weight
    gradient fits FP16, but FP16 holds each sample's logit gradient, about 4096 times
    smaller, and a real step at scale 1 zeroes every one of them and so every weight's."""
    torch.manual_seed(0)
    model = nn.Linear(32, 4)
    x, y = torch.randn(4096, 32), torch.zeros(4096, dtype=torch.long)

    def loss_fn(out: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(out, t) * 2.0**-14

    d = diagnose(model, (x, y), loss_fn, steps=2)
    real = step_gradients(model, (x, y), loss_fn, dtype=torch.float16)
    fp32 = step_gradients(model, (x, y), loss_fn)
    assert int((real["", 0, 0] == 0).sum()) == real["", 0, 0].numel() == 16384
    assert int((real["param", "weight"] == 0).sum()) == 128
    # most of the summed gradient would survive a cast to FP16: it is not what FP16 holds
    assert (fp32["param", "weight"].half() != 0).float().mean() > 0.9
    logits = d.gradients["tensors"]["(the model)"]
    assert logits["lost"]["fp16_unscaled"] == logits["signal"] == 16384
    assert d.gradients["tensors"]["weight"]["lost"]["fp16_unscaled"] == 128
    assert d.gradients["worst"]["fp16_unscaled"]["share"] == 1.0
    assert holds(d)["fp16_keeps_unscaled_gradients"] is False
    assert "100% (output gradient of (the model))" in str(d)
    assert "Even without a loss scale" not in str(d)


class KeyBias(nn.Module):
    """Attention whose key bias has a gradient of exactly zero: softmax ignores a shift added
    to every key of a query's row. FP32 computes that gradient as round-off."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v = nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 16)
        self.out = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = self.q(x) @ self.k(x).transpose(-1, -2) / 4
        return self.out((scores.softmax(-1) @ self.v(x)).mean(1))


def test_round_off_that_float64_puts_at_zero_is_not_counted_as_lost() -> None:
    torch.manual_seed(0)
    model = KeyBias()
    batch = torch.randn(8, 12, 16), torch.randint(0, 4, (8,))
    fp32 = step_gradients(model, batch, F.cross_entropy)["param", "k.bias"]
    fp64 = step_gradients(model, batch, F.cross_entropy, wide=True)["param", "k.bias"]
    assert int((fp32 != 0).sum()) >= 14  # FP32's round-off
    assert fp64.abs().max() < 1e-4 * fp32.abs().max()  # float64 puts it a 10,000 times lower
    d = diagnose(model, batch, F.cross_entropy, steps=2)
    bias = d.gradients["tensors"]["k.bias"]
    assert bias["noise"] == int((fp32 != 0).sum())
    assert bias["signal"] == 0
    assert bias["lost"]["fp16_unscaled"] == 0
    assert d.gradients["worst"]["fp16_unscaled"]["tensor"] != "k.bias"
    assert d.gradients["noise_floor"]["measured"]
    assert d.gradients["noise_floor"]["noise"] >= bias["noise"]


def test_init_scale_is_the_scale_underflow_was_judged_at() -> None:
    model, batch = small_mlp()

    def faint(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(out, y) * 2.0**-36  # at 2**16 FP16 still flushes much of it

    d = diagnose(model, batch, faint, steps=2)
    g = d.gradients
    assert g["settled_scale"] > DEFAULT_SCALE
    assert g["worst"]["fp16_default"]["share"] > LOST_SHARE
    assert g["worst"]["fp16_settled"]["share"] <= LOST_SHARE
    assert g["init_scale"] == g["settled_scale"]  # so it starts there
    assert g["worst"]["fp16_init"] == g["worst"]["fp16_settled"]
    assert d.training["fp16"]["scales"][0] == g["settled_scale"]  # the run tried it
    plain = diagnose(model, batch, lambda o, y: F.mse_loss(o, y) / 16, steps=2).gradients
    assert plain["init_scale"] == DEFAULT_SCALE < plain["settled_scale"]
    growth = torch.amp.GradScaler("cpu").get_growth_interval()
    steps = round(math.log2(plain["settled_scale"] / DEFAULT_SCALE)) * growth
    assert plain["growth_steps"] == steps


def test_the_settled_scale_is_the_largest_a_real_gradscaler_keeps_without_backing_off() -> None:
    model, batch = small_mlp()
    d = diagnose(model, batch, lambda o, y: F.mse_loss(o, y) * 50.0, steps=1)
    settled = d.gradients["settled_scale"]

    def backs_off(scale: float) -> bool:
        twin = copy.deepcopy(model)
        opt = torch.optim.SGD(twin.parameters(), lr=0.0)
        scaler = torch.amp.GradScaler("cpu", init_scale=scale)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            with torch.autocast("cpu", dtype=torch.float16):
                loss = F.mse_loss(twin(batch[0]), batch[1]) * 50.0
            scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return scaler.get_scale() < scale

    assert not backs_off(settled)
    if settled < 2.0**40:
        assert backs_off(settled * 2)


# --------------------------------------------------------------------------- autocast


def test_the_autocast_table_agrees_with_the_page_level_autocast_functions() -> None:
    expected = {}
    for dtype in (torch.float16, torch.bfloat16):
        here = {r["op"]: r["produced"] for r in ac.op_dtypes(dtype, device="cpu")}
        cuda = {r["op"]: r["cuda"] for r in ac.cuda_op_dtypes(dtype)}
        expected[dtype] = here, cuda
    inputs = ac._inputs(torch.device("cpu"))

    class OneOp(nn.Module):
        def __init__(self, op: str) -> None:
            super().__init__()
            self.op = op
            self.w = nn.Parameter(inputs["w"].clone())
            self.kernel = nn.Parameter(inputs["kernel"].clone())

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            t = {**inputs, "x": x, "w": self.w, "kernel": self.kernel}
            return ac._OP_CALLS[self.op](t, F.linear(x, self.w))

    checked = 0
    for op in ac.OPS:
        d = diagnose(
            OneOp(op), (inputs["x"], inputs["labels"]), lambda out, y: out.float().mean(), steps=1
        )
        (row,) = [r for r in d.autocast["calls"] if r["op"] == op][-1:]
        for column, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
            here, cuda = expected[dtype]
            assert row[column] == here[op], (op, column)
            assert row[f"cuda_{column}"] == cuda[op], (op, column)
            checked += 1
    assert checked == 2 * len(ac.OPS)
    assert "refused" in {r["cuda"] for r in ac.cuda_op_dtypes(torch.float16)}


class Recurrent(nn.Module):
    def __init__(self, kind: type[nn.Module], layers: int = 1) -> None:
        super().__init__()
        self.rnn = kind(8, 16, num_layers=layers, batch_first=True)
        self.fc = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.rnn(x)[0][:, -1])


def sequences() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(4)
    return torch.randn(8, 10, 8, generator=g), torch.randint(0, 3, (8,), generator=g)


def test_an_op_that_computes_in_fp16_and_returns_fp32_is_not_reported_as_fp32() -> None:
    torch.manual_seed(0)
    model = Recurrent(nn.GRU)
    batch = sequences()
    computes = ac.ComputeDtypes()
    with torch.autocast("cpu", dtype=torch.float16), computes:
        computes.begin()
        out, _ = copy.deepcopy(model.rnn)(batch[0])
        seen = computes.end()
    with torch.no_grad():
        exact, _ = model.rnn(batch[0])
    assert out.dtype == torch.float32
    assert "float16" in seen
    assert (out - exact).abs().max() > 1e-5  # FP16's rounding shows in the FP32 output
    d = diagnose(model, batch, F.cross_entropy, steps=2)
    (gru,) = [r for r in d.autocast["calls"] if r["op"] == "gru"]
    assert gru["fp16"] == "float32"
    assert "float16" in gru["computes_fp16"]
    assert "gru" not in d.autocast["stayed_fp32"]
    assert "computed in float16, returned float32 on cpu: gru" in str(d)
    assert "float16" in d.memory["saved_for_backward"]["fp16"]["by_dtype"]


def test_a_model_that_branches_on_its_dtype_gets_both_runs_calls() -> None:
    class Clamped(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.fc(x)
            if h.dtype == torch.float16:  # as T5 clamps its FP16 activations
                h = torch.clamp(h, -1e4, 1e4)
            return h

    d = diagnose(Clamped(), (torch.randn(8, 4), torch.randint(0, 2, (8,))), F.cross_entropy,
                 steps=1)  # fmt: skip
    (clamp,) = [r for r in d.autocast["calls"] if r["op"] == "clamp"]
    assert clamp["fp16"] == "float16"
    assert clamp["bf16"] is None  # the BF16 run did not call it
    assert [r["op"] for r in d.autocast["calls"]] == ["linear", "clamp", "cross_entropy"]


def test_in_place_activations_are_ops_and_views_are_not() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(inplace=True), nn.Linear(8, 2),
                          nn.Dropout(0.1, inplace=True))  # fmt: skip
    d = diagnose(model, (torch.randn(8, 4), torch.randint(0, 2, (8,))),
                 lambda out, y: F.cross_entropy(out.view(8, 2).t().t(), y), steps=1)  # fmt: skip
    ops = [r["op"] for r in d.autocast["calls"]]
    assert ops == ["linear", "relu", "linear", "dropout", "cross_entropy"]


class Scores(nn.Module):
    """Attention-like scores inside one module: the overflow no module's output shows."""

    def __init__(self, gain: float) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.gain = gain

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x) * self.gain
        n = x.shape[0]
        causal = torch.full((n, n), float("-inf")).triu(1)  # -inf by design, in FP32 too
        scores = h @ h.T + causal
        return torch.softmax(scores.float(), dim=-1) @ x


def test_an_fp16_overflow_inside_a_module_is_found_and_a_causal_masks_inf_is_not() -> None:
    batch = torch.randn(6, 8, generator=torch.Generator().manual_seed(3)), torch.zeros(6, 8)
    torch.manual_seed(0)
    calm = diagnose(Scores(1.0), batch, F.mse_loss, steps=1)
    assert calm.autocast["fp16_forward_finite"]  # the mask's -inf is there in FP32 as well
    torch.manual_seed(0)
    hot = Scores(3e3)
    with torch.no_grad():  # the scores reach about 1e6: inf in FP16, finite in FP32
        scores = (hot.fc(batch[0]) * hot.gain) @ (hot.fc(batch[0]) * hot.gain).T
    assert FP16_OVERFLOW < float(scores.abs().max()) < 1e30
    d = diagnose(hot, batch, F.mse_loss, steps=1)
    assert d.activations["overflows_fp16"] == []  # no module's output shows it ...
    assert not d.autocast["fp16_forward_finite"]  # ... the FP16 forward does
    assert d.autocast["first_nonfinite_fp16"]["op"] == "matmul"
    assert "first inf or NaN under FP16 autocast: matmul" in str(d)
    # the op ran in the model's own forward: no module narrower than FP32 itself to keep
    assert d.advice["keep_fp32"] == []
    assert not d.advice["forward_finite"]
    assert holds(d)["forward_fits_fp16"] is False


# --------------------------------------------------------------------------- advice, tried


class PowGelu(nn.Module):
    """GELU's tanh form, whose cube overflows FP16 for inputs above about 40."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x * (1 + torch.tanh(0.7978845608 * (x + 0.044715 * torch.pow(x, 3))))


class FeedForward(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wi, self.act, self.wo = nn.Linear(16, 64), PowGelu(), nn.Linear(64, 16)
        self.norm, self.head = nn.LayerNorm(16), nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(x + self.wo(self.act(self.wi(x)))))


def hot_feed_forward() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(0)
    model = FeedForward()
    with torch.no_grad():  # the cube of wi's outputs, and wo's outputs, beyond FP16's range
        model.wi.weight.mul_(40)
        model.wo.weight.mul_(700)
    g = torch.Generator().manual_seed(5)
    return model, (torch.randn(32, 16, generator=g) * 3, torch.randint(0, 4, (32,), generator=g))


def skipped_with(model, batch, keep: list[str], steps: int = 12) -> int:
    twin = copy.deepcopy(model)
    opt = torch.optim.Adam(twin.parameters())
    scaler = torch.amp.GradScaler("cpu")
    skipped = 0
    with run_in_fp32(twin, keep):
        for _ in range(steps):
            with torch.autocast("cpu", dtype=torch.float16):
                loss = F.cross_entropy(twin(batch[0]), batch[1])
            before = scaler.get_scale()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            skipped += scaler.get_scale() < before
    return skipped


def test_the_list_kept_in_fp32_is_tried_and_the_report_says_what_it_did() -> None:
    model, batch = hot_feed_forward()
    d = diagnose(model, batch, F.cross_entropy, steps=12)
    first = d.autocast["first_nonfinite_fp16"]
    assert first == {"op": "pow", "module": "act"}  # the cube, inside the activation
    assert d.advice["keep_fp32"] == ["act", "wo"]
    assert [t["keep_fp32"] for t in d.advice["tries"]] == [["act"], ["act", "wo"]]
    assert d.advice["tries"][0]["first_nonfinite"]["module"] == "wo"
    assert d.advice["forward_finite"]
    # what the advice claims, checked by a loop written here
    assert skipped_with(model, batch, ["wo"]) == 12  # keeping wo alone skips every step
    assert skipped_with(model, batch, ["act", "wo"]) == 0
    assert d.training["fp16"]["keep_fp32"] == ["act", "wo"]
    assert d.training["fp16"]["skipped"] == 0
    text = str(d)
    assert "keep in FP32: act, wo" in text
    assert "every op of the FP16 forward pass gave finite values, and 0 of 12 FP16 steps" in text
    assert holds(d)["forward_fits_fp16"] is True


def test_run_in_fp32_runs_the_module_with_autocast_off_and_is_removed() -> None:
    model, batch = hot_feed_forward()
    before = {n: (dict(m._forward_pre_hooks), dict(m._forward_hooks))
              for n, m in model.named_modules()}  # fmt: skip
    with run_in_fp32(model, ["act", "wo"]), torch.autocast("cpu", dtype=torch.float16):
        inside = {}
        model.wo.register_forward_hook(lambda m, a, o: inside.update(wo=o.dtype))
        out = model(batch[0])
    assert inside["wo"] == torch.float32
    assert torch.isfinite(out).all()
    model.wo._forward_hooks.clear()
    after = {n: (dict(m._forward_pre_hooks), dict(m._forward_hooks))
             for n, m in model.named_modules()}  # fmt: skip
    assert after == before
    with pytest.raises(ValueError, match="names must be modules of the model, got 'w0'"):
        run_in_fp32(model, ["w0"])
    with pytest.raises(TypeError, match="names must be an iterable of module names"):
        run_in_fp32(model, "wo")


# --------------------------------------------------------------------------- degrade


class RefusedBackward(torch.autograd.Function):
    """The identity, whose backward has no FP16 kernel."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        if grad.dtype == torch.float16:
            raise RuntimeError("no FP16 kernel for this op here")
        return grad


class HalfRefused(nn.Module):
    """A model FP16 cannot run, as oneDNN cannot run an FP16 LSTM on some CPUs: in the forward
    pass (``where="forward"``) or, after a forward pass that works, in backward."""

    def __init__(self, where: str) -> None:
        super().__init__()
        self.fc, self.head = nn.Linear(8, 8), nn.Linear(8, 3)
        self.where = where

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        if self.where == "forward" and h.dtype == torch.float16:
            raise RuntimeError("no FP16 kernel for this op here")
        return self.head(RefusedBackward.apply(h))


@pytest.mark.parametrize("where", ["forward", "backward"])
def test_a_format_that_cannot_run_the_model_is_reported_with_the_rest(where) -> None:
    torch.manual_seed(0)
    batch = torch.randn(16, 8), torch.randint(0, 3, (16,))
    d = diagnose(HalfRefused(where), batch, F.cross_entropy, steps=20)
    assert d.unavailable == {"fp16": "no FP16 kernel for this op here"}
    assert d.training["fp16"] is None
    assert d.training["bf16"] is not None
    assert d.gradients["settled_scale"] is None
    assert d.gradients["worst"]["bf16"] is not None
    assert d.recommendation["choice"] == "bf16"
    rules = {r["key"]: r for r in d.recommendation["rules"]}
    assert rules["fp16_tracks_fp32"]["words"] == "Not measured: FP16 could not run this model here."
    text = str(d)
    assert "FP16 could not run this model on cpu: no FP16 kernel for this op here" in text
    assert "fp16: could not run here" in text


def test_an_lstm_that_fp16_cannot_run_here_gets_its_bf16_and_fp32_report() -> None:
    torch.manual_seed(0)
    model = Recurrent(nn.LSTM, layers=2)
    batch = sequences()
    try:  # what a real FP16 step of it does on this machine
        step_gradients(model, batch, F.cross_entropy, dtype=torch.float16)
        refused = None
    except RuntimeError as error:
        refused = str(error).splitlines()[0]
    d = diagnose(model, batch, F.cross_entropy, steps=20)
    assert d.unavailable.get("fp16") == refused
    assert d.training["bf16"] is not None
    assert d.training["fp32"] is not None
    assert d.recommendation["choice"] in ("bf16", "fp32", "undecided")
    if refused is None:  # a GPU, or a CPU whose oneDNN takes it: the full report
        assert d.training["fp16"] is not None


@pytest.mark.parametrize(
    ("batch", "words"),
    [
        ((torch.full((16, 4), math.nan), torch.zeros(16, 1)), ("batch's inputs must be finite, "
         "got 64 NaN and 0 infinite values")),
        ((torch.ones(16, 4), torch.full((16, 1), math.inf)), ("batch's targets must be finite, "
         "got 0 NaN and 16 infinite values")),
    ],
)  # fmt: skip
def test_a_batch_that_is_not_finite_is_refused_naming_it(batch, words) -> None:
    with pytest.raises(ValueError, match="must be finite") as raised:
        diagnose(nn.Linear(4, 1), batch, F.mse_loss, steps=2)
    assert words in str(raised.value)


def test_a_loss_that_is_not_finite_in_fp32_is_refused() -> None:
    with pytest.raises(ValueError, match="loss_fn must give a finite FP32 loss on batch, got inf"):
        diagnose(nn.Linear(4, 1), (torch.ones(8, 4), torch.ones(8, 1)),
                 lambda o, y: (o - y).mean() + math.inf, steps=2)  # fmt: skip


def test_an_undecided_comparison_says_so_and_the_steps_that_decide_it() -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    batch = torch.randn(16, 4), torch.randn(16, 1)
    d = diagnose(model, batch, F.mse_loss, steps=3)
    r = d.recommendation
    assert r["choice"] == "undecided"
    assert r["because"] == ["bf16_tracks_fp32", "fp16_tracks_fp32"]
    assert holds(d)["fp16_tracks_fp32"] is None
    steps = r["decide_with_steps"]
    assert steps > 3
    assert f"not decided: diagnose again with steps={steps}" in str(d)
    again = diagnose(model, batch, F.mse_loss, steps=steps)
    assert again.recommendation["choice"] != "undecided"


def test_a_loss_fp32_does_not_move_is_undecided_without_steps() -> None:
    d = diagnose(nn.Linear(4, 1), (torch.randn(8, 4), torch.randn(8, 1)),
                 lambda o, y: (o * 0).sum(), steps=3)  # fmt: skip
    assert d.recommendation["choice"] == "undecided"
    assert d.recommendation["decide_with_steps"] is None
    assert "did not move the loss at all" in str(d)


def test_a_model_too_large_for_the_memory_free_is_refused_before_any_copy(monkeypatch) -> None:
    model, batch = small_mlp()
    size = _inputs.model_bytes(model, None)
    monkeypatch.setattr(_inputs, "free_bytes", lambda device: size * 2)
    copies = []
    monkeypatch.setattr(_inputs, "copy_of", lambda *a: copies.append(a))
    with pytest.raises(MemoryError, match=r"diagnose needs about .* on cpu beside the model") as e:
        diagnose(model, batch, F.mse_loss, steps=2)
    assert copies == []
    assert f"{size * 2 / 1e6:.3g} MB are free" in str(e.value)


def test_free_memory_is_read_on_this_machine() -> None:
    free = _inputs.free_bytes(torch.device("cpu"))
    assert free is None or free > 0


# --------------------------------------------------------------------------- words and numbers


def test_at_most_one_copy_of_the_model_is_alive_at_a_time(monkeypatch) -> None:
    model, batch = small_conv()
    most = copies_alive_at_each_copy(monkeypatch)
    diagnose(model, batch, F.cross_entropy, steps=2)
    assert len(most) > 10
    assert max(most) == 0


def test_an_output_rounds_to_inf_from_65520_not_above_65504() -> None:
    class Out(nn.Module):
        def __init__(self, value: float) -> None:
            super().__init__()
            self.fc = nn.Linear(2, 2)
            self.value = value

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x) * 0 + self.value

    assert torch.tensor(65510.0).half().item() == 65504  # rounds down, finite
    assert torch.tensor(65520.0).half().item() == math.inf
    batch = torch.ones(4, 2), torch.zeros(4, 2)
    below = diagnose(Out(65510.0), batch, F.mse_loss, steps=1).activations
    at = diagnose(Out(65520.0), batch, F.mse_loss, steps=1).activations
    assert below["overflows_fp16"] == []
    assert at["overflows_fp16"] == [""]


def test_a_scalar_loss_in_a_models_output_is_not_an_activation() -> None:
    class WithLoss(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
            logits = self.fc(x)
            return {"loss": F.cross_entropy(logits, labels) * 1e3, "logits": logits}

    torch.manual_seed(0)
    x, labels = torch.randn(8, 4), torch.randint(0, 2, (8,))
    d = diagnose(WithLoss(), ({"x": x, "labels": labels}, None), lambda out, _: out["loss"],
                 steps=2)  # fmt: skip
    model_row = d.activations["modules"][""]
    with torch.no_grad():
        logits = d.activations["modules"]["fc"]["max_abs"]
    assert model_row["max_abs"] == logits  # the loss, about 700, is not counted
    assert d.activations["largest"]["max_abs"] < 100


def test_memory_is_measured_for_the_optimizer_given() -> None:
    model, batch = small_mlp()
    n = sum(p.numel() for p in model.parameters())
    tensors = len(list(model.parameters()))
    adam = diagnose(model, batch, F.mse_loss, steps=1).memory
    # Adam: exp_avg and exp_avg_sq per value, and a float32 step count per tensor
    assert adam["bytes_per_parameter"]["optimizer_state"] == (8 * n + 4 * tensors) / n
    assert adam["bytes_per_parameter"]["weights"] == 4
    assert adam["bytes_per_parameter"]["gradients"] == 4
    plain = diagnose(model, batch, F.mse_loss, steps=1,
                     optimizer=torch.optim.SGD(model.parameters(), lr=0.1)).memory  # fmt: skip
    assert plain["bytes_per_parameter"]["optimizer_state"] == 0
    assert plain["optimizer"] == "SGD"
    for fmt, dtype in (("fp32", None), ("fp16", torch.float16), ("bf16", torch.bfloat16)):
        twin = copy.deepcopy(model)
        own = {p.untyped_storage().data_ptr() for p in twin.parameters()}
        own.add(batch[0].untyped_storage().data_ptr())
        storages = {}

        def pack(t: torch.Tensor, own=own, storages=storages, twin=twin) -> torch.Tensor:
            ptr = t.untyped_storage().data_ptr()
            is_copy = any(  # a cast of a parameter (or its transpose): autocast's weight copy
                t.dtype != p.dtype
                and t.numel() == p.numel()
                and torch.equal(
                    t.flatten().sort().values, p.detach().to(t.dtype).flatten().sort().values
                )
                for p in twin.parameters()
            )
            if ptr not in own and not is_copy:
                storages[ptr] = t.untyped_storage().nbytes()
            return t

        with (
            torch.random.fork_rng(devices=[]),
            torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t),
        ):
            torch.manual_seed(0)
            with torch.autocast("cpu", dtype=dtype or torch.float16, enabled=dtype is not None):
                loss = F.mse_loss(twin(batch[0]), batch[1])
        del loss
        assert adam["saved_for_backward"][fmt]["bytes"] == sum(storages.values()), fmt


def test_a_sparse_gradient_is_counted_by_the_bytes_it_holds() -> None:
    class Bag(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(64, 4, sparse=True)
            self.fc = nn.Linear(4, 2)

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            return self.fc(self.emb(input_ids).mean(1))

    from collections import UserDict

    torch.manual_seed(0)
    model = Bag()
    ids = UserDict(input_ids=torch.randint(0, 8, (8, 5)))  # as a BatchEncoding is
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    d = diagnose(model, (ids, torch.randint(0, 2, (8,))), F.cross_entropy, steps=2, optimizer=opt)
    twin = copy.deepcopy(model)
    F.cross_entropy(twin(ids["input_ids"]), torch.randint(0, 2, (8,))).backward()
    sparse = twin.emb.weight.grad
    held = sum(t.numel() * t.element_size() for t in (sparse._values(), sparse._indices()))
    held += sum(p.grad.numel() * 4 for p in twin.fc.parameters())
    n = sum(p.numel() for p in model.parameters())
    assert d.memory["bytes_per_parameter"]["gradients"] == held / n < 4
    assert d.gradients["tensors"]["emb.weight"]["values"] == 64 * 4


def test_bf16_on_a_cpu_without_bf16_instructions_is_not_recommended(monkeypatch) -> None:
    from amp_lesson.diagnose import rules

    model, batch = small_mlp()
    d = diagnose(model, batch, F.mse_loss, steps=20)
    assert d.recommendation["choice"] == ("bf16" if rules.bf16_native("cpu") else "fp16")
    for probe in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        monkeypatch.setattr(torch.cpu, probe, lambda: False)
    monkeypatch.setattr(rules.platform, "machine", lambda: "x86_64")
    assert rules.bf16_native("cpu") is False
    without = d.recommend(bf16_supported=False)
    assert without["choice"] == "fp16"
    assert "This device does not compute in BF16 natively" in " ".join(
        r["words"] for r in without["rules"]
    )


def test_percentages_are_never_printed_in_exponent_notation() -> None:
    assert [percent(s) for s in (1.0, 0.5, 0.0, 1e-9, None)] == ["100%", "50%", "0%", "<0.01%",
                                                                  "n/a"]  # fmt: skip
    assert "e+" not in percent(0.999999)


# --------------------------------------------------------------------------- the runs


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
@pytest.mark.parametrize("make", [small_conv, small_mlp])
def test_the_training_runs_are_the_recipes_loop_bit_for_bit(make, optimizer) -> None:
    model, batch = make()
    loss_fn = F.cross_entropy if make is small_conv else F.mse_loss
    opt = None
    if optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    steps = 4
    d = diagnose(model, batch, loss_fn, steps=steps, optimizer=opt, seed=SEED)
    assert d.gradients["init_scale"] == DEFAULT_SCALE  # the recipe's own scaler
    for fmt, dtype in (("fp32", torch.float32), ("fp16", torch.float16), ("bf16", torch.bfloat16)):
        twin, twin_opt = copy.deepcopy((model, opt))
        if twin_opt is None:
            twin_opt = torch.optim.Adam(twin.parameters())
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(SEED)
            scaler = train_mixed_precision(twin, [batch] * steps, loss_fn, twin_opt, dtype=dtype)
        for name, p in twin.named_parameters():
            assert torch.equal(d.weights[fmt][name], p.detach()), (fmt, name)
        if fmt == "fp16":
            assert d.training[fmt]["final_scale"] == scaler.get_scale()


def test_an_overflowing_fp16_run_reports_the_steps_its_scaler_skipped() -> None:
    model, batch = small_mlp()

    def huge(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(out, y) * 2.0**8

    steps = 6
    d = diagnose(model, batch, huge, steps=steps)
    fp16 = d.training["fp16"]
    init = d.gradients["init_scale"]
    assert init == d.gradients["settled_scale"] < DEFAULT_SCALE  # it starts where it settles
    twin = copy.deepcopy(model)
    opt = torch.optim.Adam(twin.parameters())
    scaler = torch.amp.GradScaler("cpu", init_scale=init)
    scales = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        for _ in range(steps):
            with torch.autocast("cpu", dtype=torch.float16):
                loss = huge(twin(batch[0]), batch[1])
            scales.append(scaler.get_scale())
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
    assert fp16["scales"] == scales
    assert fp16["final_scale"] == scaler.get_scale()
    assert fp16["skipped"] == sum(b < a for a, b in zip(scales, [*scales[1:], scaler.get_scale()],
                                                         strict=True))  # fmt: skip
    assert d.training["fp32"]["skipped"] == d.training["bf16"]["skipped"] == 0


def test_the_callers_model_optimizer_and_random_state_are_left_as_they_were() -> None:
    model, batch = small_conv()
    model.eval()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    F.cross_entropy(model(batch[0]), batch[1]).backward()
    opt.step()  # a momentum buffer to keep
    before = copy.deepcopy(model.state_dict())
    opt_before = copy.deepcopy(opt.state_dict())
    grads = [p.grad.clone() for p in model.parameters()]
    rng = torch.random.get_rng_state()
    d = diagnose(model, batch, F.cross_entropy, steps=2, optimizer=opt)
    assert not model.training
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert torch.equal(opt.state_dict()["state"][0]["momentum_buffer"],
                       opt_before["state"][0]["momentum_buffer"])  # fmt: skip
    assert all(torch.equal(a, p.grad) for a, p in zip(grads, model.parameters(), strict=True))
    assert torch.equal(rng, torch.random.get_rng_state())
    assert d.memory["optimizer"] == "SGD"


def test_two_diagnoses_of_a_model_with_dropout_and_batchnorm_agree() -> None:
    model, batch = small_conv()
    one = diagnose(model, batch, F.cross_entropy, steps=3).to_dict()
    two = diagnose(model, batch, F.cross_entropy, steps=3).to_dict()
    one.pop("seconds"), two.pop("seconds")
    assert json.dumps(one, sort_keys=True) == json.dumps(two, sort_keys=True)
    other = diagnose(model, batch, F.cross_entropy, steps=3, seed=1).to_dict()
    assert other["training"]["fp32"]["losses"] != one["training"]["fp32"]["losses"]


def test_random_draws_are_played_back_so_the_float64_run_meets_fp32s_masks() -> None:
    model, batch = small_mlp()
    model.train()
    tape = _inputs.RandomTape()
    with torch.random.fork_rng(devices=[]), tape:
        torch.manual_seed(0)
        fp32 = model(batch[0])
    replay = _inputs.RandomTape(tape.tape)
    with torch.random.fork_rng(devices=[]), replay:
        torch.manual_seed(12345)  # other draws, replaced by the recorded ones
        fp64 = copy.deepcopy(model).double()(batch[0].double())
    assert not replay.diverged
    torch.testing.assert_close(fp64.float(), fp32, rtol=1e-5, atol=1e-6)


def test_only_the_generators_the_runs_draw_from_are_seeded(monkeypatch) -> None:
    model, batch = small_conv()
    reseeded = []
    monkeypatch.setattr(torch.cuda, "manual_seed_all", lambda seed: reseeded.append(seed))
    rng = torch.random.get_rng_state()
    diagnose(model, batch, F.cross_entropy, steps=1)
    assert reseeded == []  # a CPU model's diagnosis leaves every GPU's generator alone
    assert torch.equal(rng, torch.random.get_rng_state())


# --------------------------------------------------------------------------- the rules


def _sections(**changes):
    def worst(share):
        return {"tensor": "w", "kind": "parameter", "share": share}

    gradients = {"settled_scale": 2.0**18, "init_scale": 2.0**16, "growth_steps": 4000,
                 "worst": {k: worst(0.0) for k in ("fp16_unscaled", "fp16_default",
                                                   "fp16_settled", "fp16_init", "bf16")}}  # fmt: skip
    advice = {"keep_fp32": [], "forward_finite": True}
    fp32 = {"losses": [2.0], "final_loss": 1.0}
    training = {"fp32": fp32, "fp16": dict(fp32), "bf16": dict(fp32)}
    for key, value in changes.items():
        section, _, name = key.partition("__")
        if section == "w":
            gradients["worst"][name] = worst(value)
            continue
        target = {"g": gradients, "a": advice, "fp32": fp32, "fp16": training["fp16"],
                  "bf16": training["bf16"]}[section]  # fmt: skip
        target[name] = value
    return gradients, advice, training


@pytest.mark.parametrize(
    ("changes", "choice"),
    [
        ({}, "bf16"),
        ({"bf16__final_loss": 1.2}, "fp16"),  # BF16 off by a fifth of FP32's progress
        ({"w__bf16": 0.01}, "fp16"),  # one tensor loses a hundredth in BF16
        ({"bf16__final_loss": 1.2, "a__forward_finite": False}, "fp32"),
        ({"bf16__final_loss": 1.2, "w__fp16_init": 0.01}, "fp32"),
        ({"bf16__final_loss": 1.2, "g__settled_scale": None}, "fp32"),
        ({"bf16__final_loss": 1.2, "fp16__final_loss": math.nan}, "fp32"),
        ({"bf16__final_loss": 1.05}, "bf16"),  # within a tenth of FP32's progress
        # FP32 moved the loss by half a percent: too little to tell, so not decided
        (
            {"fp32__final_loss": 1.99, "fp16__final_loss": 1.99, "bf16__final_loss": 1.99},
            "undecided",
        ),
        # ... unless both paths fail on a rule that was decided
        ({"fp32__final_loss": 1.99, "w__bf16": 0.5, "a__forward_finite": False}, "fp32"),
    ],
)
def test_the_choice_follows_the_documented_rules(changes, choice) -> None:
    gradients, advice, training = _sections(**changes)
    r = recommend(gradients, advice, training, bf16_supported=True, steps=4)
    assert r["choice"] == choice
    held = {rule["key"]: rule["holds"] for rule in r["rules"]}
    assert [rule["key"] for rule in r["rules"]] == [rule.key for rule in RULES]
    if choice == "fp32":  # the reasons are the deciding rules that failed
        assert r["because"]
        assert all(held[key] is False for key in r["because"])
    elif choice == "undecided":
        assert r["because"]
        assert all(held[key] is None for key in r["because"])
        assert r["decide_with_steps"] > 4
    else:
        assert all(held[key] for key in r["because"])
    if choice == "fp16":
        assert r["scaler"]["init_scale"] == 2.0**16
        assert r["scaler"]["growth_steps"] == 4000
    no_bf16 = recommend(gradients, advice, training, bf16_supported=False, steps=4)
    assert no_bf16["choice"] != "bf16"


# --------------------------------------------------------------------------- arguments


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda m, b: diagnose(nn.ReLU(), b, F.mse_loss), ValueError, "model must have trainable"),
        (
            lambda m, b: diagnose(m.requires_grad_(False), b, F.mse_loss),
            ValueError,
            "model must have trainable",
        ),
        (lambda m, b: diagnose(m.half(), b, F.mse_loss), ValueError, "torch.float32"),
        (
            lambda m, b: diagnose(m.to("meta"), tuple(t.to("meta") for t in b), F.mse_loss),
            ValueError,
            "model's parameters are on the meta device, which holds no values",
        ),
        (
            lambda m, b: diagnose(m, (b[0].to("meta"), b[1]), F.mse_loss),
            ValueError,
            "batch's inputs must be on the model's device (cpu)",
        ),
        (
            lambda m, b: diagnose(m, (b[0], b[1].to("meta")), F.mse_loss),
            ValueError,
            "batch's targets must be on the model's device",
        ),
        (lambda m, b: diagnose(m, b[0], F.mse_loss), TypeError, "batch must be a pair"),
        (lambda m, b: diagnose(m, b, "mse"), TypeError, "loss_fn must be callable"),
        (
            lambda m, b: diagnose(m, b, nn.MSELoss(reduction="none")),
            ValueError,
            "loss_fn must return the batch's mean loss",
        ),
        (
            lambda m, b: diagnose(m, b, lambda o, y: F.mse_loss(o, y).detach().item()),
            ValueError,
            "a floating-point tensor of one value",
        ),
        (
            lambda m, b: diagnose(m, b, lambda o, y: (o.detach() - y).square().mean()),
            ValueError,
            "loss_fn's loss must depend on the model's trainable parameters",
        ),
        (
            # a constant that asks for a gradient: no parameter gets one
            lambda m, b: diagnose(m, b, lambda o, y: torch.tensor(1.0, requires_grad=True)),
            ValueError,
            "none of them got a gradient from it",
        ),
        (
            lambda m, b: diagnose(m, b, F.mse_loss, steps=0),
            ValueError,
            "steps must be an integer >= 1",
        ),
        (lambda m, b: diagnose(m, b, F.mse_loss, steps=2.0), TypeError, "steps must be an integer"),
        (
            lambda m, b: diagnose(m, b, F.mse_loss, steps=True),
            TypeError,
            "steps must be an integer",
        ),
        (lambda m, b: diagnose(m, b, F.mse_loss, optimizer="adam"), TypeError, "optimizer must"),
        (
            lambda m, b: diagnose(
                m, b, F.mse_loss, optimizer=torch.optim.SGD(list(m.parameters())[:1])
            ),
            ValueError,
            "optimizer",
        ),
        (lambda m, b: diagnose(m, b, F.mse_loss, seed=-1), ValueError, "seed"),
    ],
)
def test_bad_input_is_refused_naming_the_parameter(call, error, words) -> None:
    model, batch = small_mlp()
    with pytest.raises(error) as raised:
        call(model, batch)
    assert words in str(raised.value)


def test_the_report_says_what_it_measured_and_how_long_it_ran() -> None:
    model, batch = small_conv()
    d = diagnose(model, batch, F.cross_entropy, steps=2)
    text = str(d)
    assert text.startswith(f"SmallConv: {d.parameters:,} parameters on cpu, 2 steps per run")
    assert f"diagnosed in {d.seconds:.1f} s" in text
    assert d.seconds > 0
    for rule in d.recommendation["rules"]:
        assert rule["words"] in text
    assert "batch_norm" in d.autocast["ops"]
    assert "e+" not in text.split("activations")[0]  # shares are never 1e+02%
    json.dumps(d.to_dict())  # plain values throughout


@pytest.mark.cuda
def test_on_cuda_the_runs_are_the_recipes_and_the_cuda_column_is_the_run_itself() -> None:
    model, batch = small_mlp()
    model = model.cuda()
    batch = tuple(t.cuda() for t in batch)
    rng = torch.cuda.get_rng_state()
    d = diagnose(model, batch, F.mse_loss, steps=3, seed=SEED)
    assert torch.equal(rng, torch.cuda.get_rng_state())  # the caller's CUDA generator too
    assert d.device.startswith("cuda")
    for row in d.autocast["calls"]:
        assert (row["cuda_fp16"], row["cuda_bf16"]) == (row["fp16"], row["bf16"])
    assert d.gradients["init_scale"] == DEFAULT_SCALE
    for fmt, dtype in (("fp32", torch.float32), ("fp16", torch.float16), ("bf16", torch.bfloat16)):
        twin = copy.deepcopy(model)
        with torch.random.fork_rng(devices=[torch.cuda.current_device()]):
            torch.manual_seed(SEED)
            train_mixed_precision(
                twin, [batch] * 3, F.mse_loss, torch.optim.Adam(twin.parameters()), dtype=dtype
            )
        for name, p in twin.named_parameters():
            assert torch.equal(d.weights[fmt][name], p.detach().cpu()), (fmt, name)
    cuda_saved = d.memory["saved_for_backward"]
    assert cuda_saved["fp16"]["bytes"] < cuda_saved["fp32"]["bytes"]
    assert d.gradients["noise_floor"]["measured"]


@pytest.mark.cuda
def test_on_cuda_an_lstm_runs_in_fp16_and_dropout_masks_are_played_back() -> None:
    torch.manual_seed(0)
    model = Recurrent(nn.LSTM, layers=2).cuda()
    model.rnn.dropout = 0.3
    x, y = sequences()
    d = diagnose(model, (x.cuda(), y.cuda()), F.cross_entropy, steps=5)
    assert "fp16" not in d.unavailable
    assert d.gradients["noise_floor"]["measured"], d.gradients["noise_floor"]
    assert d.training["fp16"] is not None


def test_an_fp32_run_that_diverges_leaves_the_comparison_undecided_and_says_why() -> None:
    model, batch = small_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=1e6)  # FP32's own loss goes to inf
    d = diagnose(model, batch, F.mse_loss, steps=8, optimizer=opt)
    assert not math.isfinite(d.training["fp32"]["final_loss"])
    r = d.recommendation
    assert r["choice"] in ("undecided", "fp32")
    assert r["fp32_diverged"]
    assert r["decide_with_steps"] is None
    rules = {x["key"]: x for x in r["rules"]}
    for key in ("fp16_tracks_fp32", "bf16_tracks_fp32"):
        assert rules[key]["holds"] is None
        assert "FP32 training's own loss went inf or NaN" in rules[key]["words"]
    assert "moved the loss by less than" not in str(d)
