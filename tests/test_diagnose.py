"""``amp_lesson.diagnose``: each section against an independent computation, on models the
book's page does not use."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from amp_lesson import autocast as ac
from amp_lesson.diagnose import FP16_MAX, LOST_SHARE, RULES, _recommend, diagnose
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


def fp32_gradients(model, batch, loss_fn, seed=0) -> dict[str, torch.Tensor]:
    """The gradient of one FP32 step on a copy, computed here without amp_lesson."""
    twin = copy.deepcopy(model)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        loss_fn(twin(batch[0]), batch[1]).backward()
    return {name: p.grad.clone() for name, p in twin.named_parameters()}


def zero_share(g: torch.Tensor, dtype: torch.dtype, scale: float = 1.0) -> float:
    nonzero = g != 0
    cast = (g * scale).to(dtype)
    return int(((cast == 0) & nonzero).sum()) / int(nonzero.sum())


@pytest.mark.parametrize("make", [small_conv, small_mlp])
def test_underflow_shares_are_what_a_cast_of_the_fp32_gradient_gives(make) -> None:
    model, batch = make()
    d = diagnose(model, batch, tiny_loss if make is small_mlp else F.cross_entropy, steps=2)
    loss_fn = tiny_loss if make is small_mlp else F.cross_entropy
    grads = fp32_gradients(model, batch, loss_fn)
    scale = d.gradients["settled_scale"]
    assert scale is not None
    strictly_between = 0
    for name, g in grads.items():
        row = d.gradients["parameters"][name]
        assert row["underflow_fp16"] == zero_share(g, torch.float16)
        assert row["underflow_bf16"] == zero_share(g, torch.bfloat16)
        assert row["underflow_fp16_scaled"] == zero_share(g, torch.float16, scale)
        inf = int(torch.isinf((g * scale).half()).sum()) / int((g != 0).sum())
        assert row["overflow_fp16_scaled"] == inf
        strictly_between += 0 < row["underflow_fp16"] < 1
        edges, shares = row["histogram"]["log2_edges"], row["histogram"]["shares"]
        nonzero = g[g != 0].double().abs()
        top = int(torch.floor(torch.log2(nonzero.max())))
        assert shares[edges.index(top)] > 0
    if make is small_mlp:  # the tiny loss puts gradient values on both sides of the line
        assert strictly_between >= 2
        assert d.gradients["underflow_fp16"] > LOST_SHARE


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
    twin = copy.deepcopy(model)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        scaler = train_mixed_precision(
            twin, [batch] * steps, huge, torch.optim.Adam(twin.parameters()), dtype=torch.float16
        )
    assert fp16["skipped"] >= 1
    assert fp16["final_scale"] == scaler.get_scale() == 2.0**16 / 2 ** fp16["skipped"]
    scales, skipped = fp16["scales"], set(fp16["skipped_steps"])
    assert len(skipped) == fp16["skipped"]
    assert len(scales) == steps
    for step in range(1, steps):  # a skipped step halves the scale the next one uses
        assert scales[step] == scales[step - 1] / (2 if step in skipped else 1)
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


def test_an_activation_beyond_fp16s_range_is_found_and_kept_in_fp32() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    with torch.no_grad():
        model[1].weight.mul_(1e6)
    batch = torch.randn(8, 4), torch.randint(0, 2, (8,))
    outputs = {}
    handles = [
        m.register_forward_hook(lambda m, a, o, n=n: outputs.__setitem__(n, o.abs().max().item()))
        for n, m in model.named_modules()
    ]
    model(batch[0])
    for h in handles:
        h.remove()
    d = diagnose(model, batch, F.cross_entropy, steps=2, optimizer=torch.optim.SGD(
        model.parameters(), lr=1e-9))  # fmt: skip
    modules = d.activations["modules"]
    for name, largest in outputs.items():
        assert modules[name]["max_abs"] == pytest.approx(largest, rel=0, abs=0)
    over = sorted(n for n, v in outputs.items() if v > FP16_MAX)
    assert over == ["", "1", "2", "3"]  # the model, the layer, and the layers after it
    assert d.activations["over_fp16_max"] == over
    # it starts at the scaled layer: the model and the layers after it only pass it on
    assert d.activations["overflow_starts"] == ["1"]
    assert d.recommendation["keep_fp32"] == ["1"]
    assert "keep in FP32: 1" in str(d)
    holds = {r["key"]: r["holds"] for r in d.recommendation["rules"]}
    assert holds["forward_fits_fp16"] is False
    assert d.recommendation["choice"] != "fp16"


def test_memory_is_measured_for_the_optimizer_given() -> None:
    model, batch = small_mlp()
    n = sum(p.numel() for p in model.parameters())
    tensors = len(list(model.parameters()))
    adam = diagnose(model, batch, F.mse_loss, steps=1).memory
    # Adam: exp_avg and exp_avg_sq per value, and a float32 step count per tensor
    assert adam["bytes_per_parameter"]["optimizer_state"] == (8 * n + 4 * tensors) / n
    plain = diagnose(model, batch, F.mse_loss, steps=1,
                     optimizer=torch.optim.SGD(model.parameters(), lr=0.1)).memory  # fmt: skip
    assert plain["bytes_per_parameter"]["optimizer_state"] == 0
    assert plain["optimizer"] == "SGD"
    for fmt, dtype in (("fp32", None), ("fp16", torch.float16), ("bf16", torch.bfloat16)):
        twin = copy.deepcopy(model)
        own = {p.untyped_storage().data_ptr() for p in twin.parameters()}
        own.add(batch[0].untyped_storage().data_ptr())
        storages = {}

        def pack(t: torch.Tensor, own=own, storages=storages) -> torch.Tensor:
            ptr = t.untyped_storage().data_ptr()
            if ptr not in own:
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
        assert adam["saved_for_backward"][fmt]["bytes"] == sum(storages.values())
    assert adam["saved_for_backward"]["fp16"]["bytes"] < adam["saved_for_backward"]["fp32"]["bytes"]


def test_gradients_bf16_cannot_hold_make_the_recommendation_fp32() -> None:
    model, batch = small_mlp()
    d = diagnose(model, batch, lambda o, y: F.mse_loss(o, y) * 1e-41, steps=2)
    holds = {r["key"]: r["holds"] for r in d.recommendation["rules"]}
    assert d.gradients["underflow_bf16"] > LOST_SHARE
    assert not holds["bf16_keeps_gradients"]
    assert not holds["scaler_keeps_fp16_gradients"]
    assert d.recommendation["choice"] == "fp32"


def _sections(**changes):
    def worst(share):
        return {"parameter": "w", "share": share}

    gradients = {"settled_scale": 2.0**18, "underflow_fp16": 0.0, "underflow_fp16_scaled": 0.0,
                 "underflow_bf16": 0.0, "overflow_fp16_scaled": 0.0,
                 "worst": {k: worst(0.0) for k in ("underflow_fp16", "underflow_fp16_scaled",
                                                   "underflow_bf16")}}  # fmt: skip
    activations = {"over_fp16_max": [], "overflow_starts": []}
    autocast = {"fp16_forward_finite": True, "cuda_refuses": []}
    fp32 = {"losses": [2.0], "final_loss": 1.0}
    training = {"fp32": fp32, "fp16": dict(fp32), "bf16": dict(fp32)}
    for key, value in changes.items():
        section, _, name = key.partition("__")
        if section == "w":
            gradients["worst"][name] = worst(value)
            continue
        target = {"g": gradients, "a": activations, "ac": autocast, "fp32": fp32,
                  "fp16": training["fp16"], "bf16": training["bf16"]}[section]  # fmt: skip
        target[name] = value
    return gradients, activations, training, autocast


@pytest.mark.parametrize(
    ("changes", "choice"),
    [
        ({}, "bf16"),
        ({"bf16__final_loss": 1.2}, "fp16"),  # BF16 off by a fifth of FP32's progress
        ({"w__underflow_bf16": 0.01}, "fp16"),  # one parameter loses a hundredth in BF16
        ({"bf16__final_loss": 1.2, "a__over_fp16_max": ["head"]}, "fp32"),
        ({"bf16__final_loss": 1.2, "ac__fp16_forward_finite": False}, "fp32"),
        ({"bf16__final_loss": 1.2, "w__underflow_fp16_scaled": 0.01}, "fp32"),
        ({"bf16__final_loss": 1.2, "fp16__final_loss": math.nan}, "fp32"),
        ({"bf16__final_loss": 1.05}, "bf16"),  # within a tenth of FP32's progress
        # FP32 moved the loss by half a percent: too little to tell, so nothing is shown
        ({"fp32__final_loss": 1.99, "fp16__final_loss": 1.99, "bf16__final_loss": 1.99}, "fp32"),
    ],
)
def test_the_choice_follows_the_documented_rules(changes, choice) -> None:
    gradients, activations, training, autocast = _sections(**changes)
    r = _recommend(gradients, activations, training, torch.device("cpu"), autocast)
    assert r["choice"] == choice
    holds = {rule["key"]: rule["holds"] for rule in r["rules"]}
    assert [rule["key"] for rule in r["rules"]] == [rule.key for rule in RULES]
    if choice == "fp32":  # the reasons are the deciding rules that failed
        assert r["because"]
        assert not any(holds[key] for key in r["because"])
    else:
        assert all(holds[key] for key in r["because"])
    if choice == "fp16":
        assert r["scaler"] == {"init_scale": 2.0**16}  # the settled 2**18 is above the default
    gradients["settled_scale"] = 2.0**12
    if choice == "fp16":
        r = _recommend(gradients, activations, training, torch.device("cpu"), autocast)
        assert r["scaler"] == {"init_scale": 2.0**12}  # start there: no step skipped to find it


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
    with pytest.raises(error, match=None) as raised:
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
    json.dumps(d.to_dict())  # plain values throughout


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device; torch sees none")
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


def test_only_the_generators_the_runs_draw_from_are_seeded(monkeypatch) -> None:
    model, batch = small_conv()
    reseeded = []
    monkeypatch.setattr(torch.cuda, "manual_seed_all", lambda seed: reseeded.append(seed))
    rng = torch.random.get_rng_state()
    diagnose(model, batch, F.cross_entropy, steps=1)
    assert reseeded == []  # a CPU model's diagnosis leaves every GPU's generator alone
    assert torch.equal(rng, torch.random.get_rng_state())


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


def test_a_tokenizers_mapping_and_a_sparse_gradient_are_taken() -> None:
    from collections import UserDict

    class Bag(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(16, 4, sparse=True)
            self.fc = nn.Linear(4, 2)

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            return self.fc(self.emb(input_ids).mean(1))

    torch.manual_seed(0)
    model = Bag()
    ids = UserDict(input_ids=torch.randint(0, 16, (8, 5)))  # as a BatchEncoding is
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    d = diagnose(model, (ids, torch.randint(0, 2, (8,))), F.cross_entropy, steps=2, optimizer=opt)
    dense = fp32_gradients(model, (ids["input_ids"], None), lambda o, y: F.cross_entropy(
        o, torch.randint(0, 2, (8,))))  # fmt: skip
    assert d.gradients["parameters"]["emb.weight"]["values"] == dense["emb.weight"].numel()


def test_an_overflow_of_the_cast_alone_does_not_fail_the_scaler_rule() -> None:
    """A gradient a real FP16 step computes in FP32 (an embedding's) can exceed FP16's range
    once cast at the settled scale; the step itself stays finite, so the rule holds."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(4, 8), nn.Linear(8, 4))
    with torch.no_grad():
        model[1].weight.mul_(30)
    ids = torch.zeros(512, dtype=torch.long)  # one frequent token: a large embedding gradient
    batch = ids, torch.randint(0, 4, (512,), generator=torch.Generator().manual_seed(0))
    d = diagnose(model, batch, F.cross_entropy, steps=1)
    g = d.gradients
    assert g["overflow_fp16_scaled"] > 0  # the cast's answer
    holds = {r["key"]: r["holds"] for r in d.recommendation["rules"]}
    assert holds["scaler_keeps_fp16_gradients"]
    twin = copy.deepcopy(model)
    scaler = torch.amp.GradScaler("cpu", init_scale=g["settled_scale"])
    with torch.autocast("cpu", dtype=torch.float16):
        loss = F.cross_entropy(twin(batch[0]), batch[1])
    scaler.scale(loss).backward()
    scaler.step(torch.optim.SGD(twin.parameters(), lr=0.0))
    scaler.update()
    assert scaler.get_scale() == g["settled_scale"]  # the run's answer: no overflow


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
    assert FP16_MAX < float(scores.abs().max()) < 1e30
    d = diagnose(hot, batch, F.mse_loss, steps=1)
    assert d.activations["over_fp16_max"] == []  # no module's output shows it ...
    assert not d.autocast["fp16_forward_finite"]  # ... the FP16 forward does
    assert d.autocast["first_nonfinite_fp16"]["op"] == "matmul"
    holds = {r["key"]: r["holds"] for r in d.recommendation["rules"]}
    assert not holds["forward_fits_fp16"]
    assert "first inf or NaN under FP16 autocast: matmul" in str(d)
