"""The recipe on the loops people run: any batch, the model's own loss, a schedule, a log.

The loaders of ``recipe_loaders.CASES`` (dict batches, a ``UserDict`` as a tokenizer's
``BatchEncoding`` is, a model returning its own loss) are held to the float64 reference
by ``test_recipe_loaders``; here: a real Hugging Face GPT-2 (random weights, a small
configuration) against a float64 reference, the log against the instrumented twin bit for
bit, a scheduler against one stepped by hand, the batch helpers, and every bad argument.
"""

from __future__ import annotations

import copy
import math
from collections import UserDict, namedtuple

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from amp_lesson.accumulation import (
    make_toy_model,
    make_toy_optimizer,
    make_toy_problem,
    train_amp_accumulated,
)
from amp_lesson.recipe import count_samples, split_batch, to_device, train_mixed_precision

CPU = torch.device("cpu")


def toy(input_scale=1.0, batch_size=32):
    X, y = make_toy_problem(device=CPU)
    return X * input_scale, y, DataLoader(TensorDataset(X * input_scale, y), batch_size=batch_size)


# --------------------------------------------------------------------------- the log


@pytest.mark.parametrize(
    ("accum_steps", "epochs", "input_scale", "max_norm", "dtype"),
    [
        (4, 5, 1.0, None, torch.float16),
        (2, 8, 100.0, None, torch.float16),  # the default scale overflows: skipped steps
        (4, 8, 100.0, 0.5, torch.float16),  # and clipping, whose norm is logged
        (4, 3, 1.0, 0.01, torch.bfloat16),
        (1, 3, 1.0, None, torch.float16),  # one micro-batch a step: plain AMP
    ],
)
def test_the_log_is_the_instrumented_twins_log_bit_for_bit(
    accum_steps, epochs, input_scale, max_norm, dtype
):
    X, y, _ = toy(input_scale)
    loader = DataLoader(TensorDataset(X, y), batch_size=len(X) // accum_steps)
    model = make_toy_model(device=CPU)
    history = []
    train_mixed_precision(
        model, loader, nn.BCEWithLogitsLoss(), make_toy_optimizer(model), accum_steps=accum_steps,
        max_norm=max_norm, dtype=dtype, epochs=epochs, on_step=history.append,
    )  # fmt: skip
    twin_model = make_toy_model(device=CPU)
    twin = train_amp_accumulated(
        twin_model, make_toy_optimizer(twin_model), X, y, nn.BCEWithLogitsLoss(), accum_steps,
        steps=epochs, clip_norm=max_norm, dtype=dtype,
        scaler_kwargs={"enabled": dtype == torch.float16},
    )  # fmt: skip
    assert torch.equal(model.weight.detach(), twin.weight)
    assert len(history) == len(twin.log) == epochs  # one window an epoch
    for record, entry in zip(history, twin.log, strict=True):
        assert record["step"] == entry.step
        assert record["epoch"] == entry.step
        assert record["count"] == len(X)
        # the float32 window losses, added in order: the same bits
        assert record["loss"].hex() == entry.loss.hex()
        assert record["scale"] == entry.scale
        assert record["skipped"] is entry.skipped
        assert record["grad_norm"] == entry.clipped_norm  # None where nothing was clipped
        assert record["lr"] == 0.1
    if input_scale > 1:
        assert any(r["skipped"] for r in history)
        assert not all(r["skipped"] for r in history)
    if max_norm is not None:
        assert all(isinstance(r["grad_norm"], float) for r in history)


# --------------------------------------------------------------------------- a schedule


def hand_stepped_lrs(make_scheduler, skipped):
    """The learning rate each step used, the scheduler stepped by hand after each step taken."""
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1)
    scheduler = make_scheduler(optimizer)
    lrs = []
    for was_skipped in skipped:
        lrs.append(optimizer.param_groups[0]["lr"])
        if not was_skipped:
            optimizer.step()
            scheduler.step()
    return lrs, optimizer.param_groups[0]["lr"]


SCHEDULES = {
    "StepLR": lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5),
    "warmup": lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20)),
    "OneCycleLR": lambda opt: torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.2, total_steps=20),
}


@pytest.mark.parametrize("name", SCHEDULES)
def test_a_scheduler_moves_once_per_step_taken_as_a_hand_stepped_one(name):
    X, y, loader = toy(input_scale=100.0)  # the default scale overflows: skipped steps
    model = make_toy_model(device=CPU)
    optimizer = make_toy_optimizer(model)
    scheduler = SCHEDULES[name](optimizer)
    history = []
    train_mixed_precision(
        model, loader, nn.BCEWithLogitsLoss(), optimizer, accum_steps=2, epochs=5,
        scheduler=scheduler, on_step=history.append,
    )  # fmt: skip
    # which steps were skipped, from the twin (its found-inf check on the gradient itself)
    twin_model = make_toy_model(device=CPU)
    twin = train_amp_accumulated(
        twin_model, make_toy_optimizer(twin_model), X, y, nn.BCEWithLogitsLoss(), 2, steps=10
    )
    twin_skipped = [entry.skipped for entry in twin.log]
    assert [r["skipped"] for r in history] == twin_skipped
    assert 0 < sum(twin_skipped) < len(twin_skipped)
    lrs, final = hand_stepped_lrs(SCHEDULES[name], twin_skipped)
    assert [r["lr"] for r in history] == lrs
    assert optimizer.param_groups[0]["lr"] == final
    # a schedule stepped on every step, skipped ones too, would have ended elsewhere
    assert hand_stepped_lrs(SCHEDULES[name], [False] * len(twin_skipped))[1] != final


def test_a_scheduler_is_stepped_after_each_step_of_bf16_which_skips_none():
    _, _, loader = toy()
    model = make_toy_model(device=CPU)
    optimizer = make_toy_optimizer(model)
    scheduler = SCHEDULES["StepLR"](optimizer)
    history = []
    train_mixed_precision(
        model, loader, nn.BCEWithLogitsLoss(), optimizer, accum_steps=3, epochs=2,
        dtype=torch.bfloat16, scheduler=scheduler, on_step=history.append,
    )  # fmt: skip
    assert [r["skipped"] for r in history] == [False] * 4  # windows of 3 and 1, twice
    assert [r["lr"] for r in history] == [0.1 * 0.5**k for k in range(4)]
    assert [r["scale"] for r in history] == [1.0] * 4  # no scaler: BF16


def test_a_scaler_passed_in_carries_its_scale_from_one_call_to_the_next():
    """Calling the recipe once per epoch (to evaluate between) keeps what the scale learnt."""
    X, y, loader = toy(input_scale=100.0)
    model = make_toy_model(device=CPU)
    optimizer = make_toy_optimizer(model)
    scaler = None
    for _ in range(4):
        scaler = train_mixed_precision(
            model, loader, nn.BCEWithLogitsLoss(), optimizer, accum_steps=4, scaler=scaler
        )
    twin_model = make_toy_model(device=CPU)
    twin = train_amp_accumulated(
        twin_model, make_toy_optimizer(twin_model), X, y, nn.BCEWithLogitsLoss(), 4, steps=4
    )
    assert torch.equal(model.weight.detach(), twin.weight)
    assert scaler.get_scale() == twin.final_scale < 65536.0


# --------------------------------------------------------------------------- batches


def test_a_dict_target_is_counted_by_its_samples_not_its_keys():
    X, y, _ = toy()
    batches = [(x, {"label": t, "weight": torch.ones_like(t)}) for x, t in
               zip(X.split([100, 28]), y.split([100, 28]), strict=True)]  # fmt: skip
    seen = []

    def loss_fn(out, target):
        seen.append(target["label"].shape[0])
        return nn.functional.binary_cross_entropy_with_logits(out, target["label"])

    history = []
    model = make_toy_model(device=CPU)
    train_mixed_precision(model, batches, loss_fn, make_toy_optimizer(model), accum_steps=2,
                          dtype=torch.float32, on_step=history.append)  # fmt: skip
    assert seen == [100, 28]
    assert history[0]["count"] == 128  # with count=len it would have been 2 + 2 keys
    # the two micro-batches' losses weigh 100/128 and 28/128: the full batch's mean loss
    reference = make_toy_model(device=CPU)
    with torch.no_grad():
        full = nn.functional.binary_cross_entropy_with_logits(reference(X), y)
    assert math.isclose(history[0]["loss"], full.item(), rel_tol=1e-6)


def test_split_batch_calls_the_model_as_each_batch_kind_asks():
    x, y = torch.ones(3, 2), torch.zeros(3, 1)
    assert split_batch((x, y)) == ((x,), {}, y)
    assert split_batch([x, x, y]) == ((x, x), {}, y)  # several inputs, the target last
    args, kwargs, target = split_batch({"input_ids": x, "labels": y})
    assert args == ()
    assert list(kwargs) == ["input_ids", "labels"]
    assert target["labels"] is y
    encoding = UserDict(input_ids=x)
    assert split_batch(encoding)[1] == {"input_ids": x}
    assert split_batch(x) == ((x,), {}, x)  # a tensor is input and target
    assert split_batch([x]) == ((x,), {}, x)  # (x,), as TensorDataset(X) yields


def test_to_device_moves_every_tensor_and_leaves_the_rest():
    Pair = namedtuple("Pair", "x y")
    batch = {
        "ids": torch.ones(2, dtype=torch.long),
        "nested": [Pair(torch.ones(1), "text"), (torch.zeros(1), 3)],
        "lengths": [2, 1],
        "name": "batch 1",
    }
    moved = to_device(batch, torch.device("meta"))
    assert moved["ids"].device.type == "meta"
    assert moved["ids"].dtype == torch.long
    pair = moved["nested"][0]
    assert type(pair) is Pair
    assert pair.x.device.type == "meta"
    assert pair.y == "text"
    assert moved["nested"][1][0].device.type == "meta"
    assert moved["nested"][1][1] == 3
    assert moved["lengths"] == [2, 1]
    assert moved["name"] == "batch 1"
    assert batch["ids"].device.type == "cpu"  # the loader's batch itself is left as it was


def test_count_samples_finds_the_first_tensor_depth_first():
    assert count_samples(torch.zeros(5, 3)) == 5
    assert count_samples({"lengths": [4, 2], "ids": torch.zeros(2, 7)}) == 2
    assert count_samples(UserDict(labels=torch.zeros(6))) == 6
    assert count_samples(([torch.zeros(4)], torch.zeros(9))) == 4
    with pytest.raises(ValueError, match=r"^count found no tensor to count samples in \(dict\)"):
        count_samples({"lengths": [4, 2], "loss": torch.tensor(1.0)})  # a 0-d tensor: no samples


def test_the_models_own_loss_must_be_there_when_loss_fn_is_none():
    class NoLoss(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(2, 1)

        def forward(self, x, labels=None):
            return {"logits": self.linear(x)}

    model = NoLoss()
    batches = [{"x": torch.ones(4, 2), "labels": torch.ones(4, 1)}]
    with pytest.raises(ValueError, match=r"^loss_fn is None but the model returned no loss"):
        train_mixed_precision(model, batches, None, torch.optim.SGD(model.parameters()))


# --------------------------------------------------------------------------- bad arguments


@pytest.mark.parametrize("bad", [-1.0, 0, 0.0, math.nan, math.inf, "1", True, torch.tensor(1.0)])
def test_max_norm_must_be_a_finite_number_above_zero(bad):
    _, _, loader = toy()
    model = make_toy_model(device=CPU)
    with pytest.raises(ValueError, match=r"^max_norm must be a finite number > 0 or None, got "):
        train_mixed_precision(
            model, loader, nn.BCEWithLogitsLoss(), make_toy_optimizer(model), max_norm=bad
        )
    assert torch.equal(model.weight, torch.zeros(1, 2))


def test_a_model_without_trainable_parameters_is_refused_by_name():
    _, _, loader = toy()
    for model in (nn.ReLU(), nn.Linear(2, 1).requires_grad_(False)):
        with pytest.raises(ValueError, match=r"^model has no trainable parameter"):
            train_mixed_precision(
                model, loader, nn.BCEWithLogitsLoss(), torch.optim.SGD([torch.zeros(1)], lr=0.1)
            )


def test_a_scheduler_must_be_built_on_the_optimizer_and_step_without_a_metric():
    _, _, loader = toy()
    model = make_toy_model(device=CPU)
    optimizer = make_toy_optimizer(model)
    other = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1)
    for scheduler in (
        torch.optim.lr_scheduler.StepLR(other, step_size=1),
        torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer),
        "cosine",
    ):
        with pytest.raises(ValueError, match=r"^scheduler must be an LRScheduler built on optim"):
            train_mixed_precision(
                model, loader, nn.BCEWithLogitsLoss(), optimizer, scheduler=scheduler
            )
    assert torch.equal(model.weight, torch.zeros(1, 2))


@pytest.mark.parametrize("name", ["loss_fn", "count", "on_step"])
def test_callables_are_checked_by_name(name):
    _, _, loader = toy()
    model = make_toy_model(device=CPU)
    kwargs = {"loss_fn": nn.BCEWithLogitsLoss(), name: "not a function"}
    loss_fn = kwargs.pop("loss_fn")
    with pytest.raises(TypeError, match=rf"^{name} must be callable or None, got str$"):
        train_mixed_precision(model, loader, loss_fn, make_toy_optimizer(model), **kwargs)


def test_a_scaler_must_be_a_grad_scaler():
    _, _, loader = toy()
    model = make_toy_model(device=CPU)
    optimizer = make_toy_optimizer(model)
    with pytest.raises(TypeError, match=r"^scaler must be a torch.amp.GradScaler or None, got"):
        train_mixed_precision(model, loader, nn.BCEWithLogitsLoss(), optimizer, scaler=2.0**16)
    # The loop tells a skipped step by the scale backing off: GradScaler itself refuses a
    # backoff_factor that would not back off.
    with pytest.raises(AssertionError, match=r"backoff factor must be < 1.0"):
        torch.amp.GradScaler("cpu", backoff_factor=1.0)


# --------------------------------------------------------------------------- GPT-2

VOCAB, PAD_ID, IGNORE = 64, 0, -100
LENGTHS = (3, 17, 5, 24, 9, 2, 30, 12, 7, 20)  # 2 a micro-batch: windows of 3 and 2


def gpt2_and_sequences():
    transformers = pytest.importorskip(
        "transformers", reason="the validate extra (transformers) is not installed"
    )
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=2, resid_pdrop=0.0,
        embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=PAD_ID, eos_token_id=PAD_ID,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config)
    g = torch.Generator().manual_seed(1)
    return model, [torch.randint(1, VOCAB, (n,), generator=g) for n in LENGTHS]


def collate(sequences):
    """Right-padded to the longest, as a data collator pads: no loss on padding."""
    longest = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), longest), PAD_ID)
    labels = torch.full_like(ids, IGNORE)
    for row, s in enumerate(sequences):
        ids[row, : len(s)] = labels[row, : len(s)] = s
    return {"input_ids": ids, "attention_mask": (labels != IGNORE).long(), "labels": labels}


def shifted_tokens(batch):
    """The tokens a causal LM's own loss averages over: labels shifted by one, not ignored."""
    return int((batch["labels"][:, 1:] != IGNORE).sum())


def gpt2_distance(model, reference):
    pairs = zip(model.parameters(), reference.parameters(), strict=True)
    return math.sqrt(
        sum(float((p.detach().double() - q.detach()).square().sum()) for p, q in pairs)
    )


@pytest.mark.validate
def test_a_hugging_face_gpt2_trains_on_its_own_token_loss_as_the_float64_reference_does():
    """No bound is derived for a transformer: each format lands within 16 of its unit
    roundoffs of the reference, relative to how far the reference travelled, while dividing
    by accum_steps (the usual loop) lands at a third of that travel or more."""
    base, sequences = gpt2_and_sequences()
    loader = DataLoader(sequences, batch_size=2, collate_fn=collate)
    accum_steps, lr = 3, 1.0
    reference = copy.deepcopy(base).double()
    for start in range(0, len(sequences), 2 * accum_steps):  # a window's sequences as one batch
        reference.zero_grad()
        reference(**collate(sequences[start : start + 2 * accum_steps])).loss.backward()
        with torch.no_grad():
            for p in reference.parameters():
                p -= lr * p.grad
    travel = gpt2_distance(base, reference)
    assert travel > 0.5
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        model = copy.deepcopy(base)
        history = []
        train_mixed_precision(
            model, loader, None, torch.optim.SGD(model.parameters(), lr=lr),
            accum_steps=accum_steps, dtype=dtype, count=shifted_tokens, on_step=history.append,
        )  # fmt: skip
        assert [r["count"] for r in history] == [
            sum(n - 1 for n in LENGTHS[:6]),
            sum(n - 1 for n in LENGTHS[6:]),
        ]
        assert not any(r["skipped"] for r in history)
        unit_roundoff = torch.finfo(dtype).eps / 2
        assert gpt2_distance(model, reference) / travel <= 16 * unit_roundoff, dtype
        # the usual loop: each micro-batch's own mean loss divided by accum_steps
        usual = copy.deepcopy(base)
        optimizer = torch.optim.SGD(usual.parameters(), lr=lr)
        scaler = torch.amp.GradScaler("cpu", enabled=dtype == torch.float16)
        batches = list(loader)
        for i, batch in enumerate(batches):
            with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
                loss = usual(**batch).loss / accum_steps
            scaler.scale(loss).backward()
            if (i + 1) % accum_steps == 0 or i + 1 == len(batches):
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
        assert gpt2_distance(usual, reference) / travel > 1 / 3, dtype


# --------------------------------------------------------------------------- edges of batches


def test_a_model_that_returns_its_loss_trains_as_one_that_returns_it_in_a_dict():
    from recipe_loaders import OwnLoss, as_dict, toy_problem

    class LossOnly(OwnLoss):
        def forward(self, x, labels=None, lengths=None):
            return super().forward(x, labels, lengths)["loss"]

    weights = []
    for model in (OwnLoss(), LossOnly()):
        loader = DataLoader(TensorDataset(*toy_problem(100, 3)), batch_size=16, collate_fn=as_dict)
        train_mixed_precision(model, loader, None, torch.optim.SGD(model.parameters(), lr=0.1),
                              accum_steps=3, epochs=2)  # fmt: skip
        weights.append(model.weight.detach())
    assert torch.equal(*weights)
    assert weights[0].abs().sum() > 0


def test_a_micro_batch_with_nothing_to_count_weighs_nothing_and_leaves_no_nan():
    """A micro-batch all padding: its masked mean is NaN, and it must not reach the weights."""
    from recipe_loaders import LR, count_tokens, masked_bce, padded_sequences

    from amp_lesson.windows import recipe_bound, reference_steps, split_windows

    batches = padded_sequences((3, 5, 0, 0, 7, 2), 2, seed=30)  # the middle one: no token
    assert count_tokens(batches[1][1]) == 0
    windows = split_windows(batches, 3)
    steps = reference_steps(torch.zeros(1, 2), windows, LR, epochs=2)
    for dtype in (torch.float16, torch.float32):
        model = nn.Linear(2, 1, bias=False)
        nn.init.zeros_(model.weight)
        history = []
        scaler = train_mixed_precision(
            model, batches, masked_bce, torch.optim.SGD(model.parameters(), lr=LR),
            accum_steps=3, epochs=2, dtype=dtype, count=count_tokens, on_step=history.append,
        )  # fmt: skip
        assert math.isnan(masked_bce(torch.zeros(2, 0, 1), batches[1][1]).item())
        assert not any(r["skipped"] for r in history)
        assert all(math.isfinite(r["loss"]) for r in history)
        assert scaler.get_scale() == (65536.0 if dtype == torch.float16 else 1.0)
        gap = model.weight.detach().double() - steps[-1]
        assert float(torch.linalg.vector_norm(gap)) <= recipe_bound(windows, steps, LR, dtype)


def test_a_distributed_sampler_shuffles_each_epoch_anew_from_the_epoch_it_was_set_to():
    dataset = TensorDataset(torch.arange(16.0).unsqueeze(1), torch.zeros(16, 1))

    def sampler():
        return torch.utils.data.DistributedSampler(dataset, num_replicas=2, rank=0, seed=3)

    train_sampler = sampler()
    train_sampler.set_epoch(5)  # as a training script resumed at epoch 5 sets it
    loader = DataLoader(dataset, batch_size=4, sampler=train_sampler)
    model = nn.Linear(1, 1)
    seen = []
    model.register_forward_pre_hook(lambda module, args: seen.extend(args[0].flatten().tolist()))
    train_mixed_precision(model, loader, nn.functional.mse_loss,
                          torch.optim.SGD(model.parameters(), lr=0.0), accum_steps=2, epochs=3)  # fmt: skip
    orders = []
    for epoch in (5, 6, 7):
        reference = sampler()
        reference.set_epoch(epoch)
        orders.append([float(i) for i in reference])
    assert seen == orders[0] + orders[1] + orders[2]
    assert orders[0] != orders[1] != orders[2]


def test_a_scaler_handed_in_must_be_enabled_for_fp16_and_may_be_for_bf16():
    _, _, loader = toy()
    model = make_toy_model(device=CPU)
    optimizer = make_toy_optimizer(model)
    off = torch.amp.GradScaler("cpu", enabled=False)
    with pytest.raises(ValueError, match=r"^scaler must be enabled for dtype=torch.float16$"):
        train_mixed_precision(model, loader, nn.BCEWithLogitsLoss(), optimizer, scaler=off)
    assert torch.equal(model.weight, torch.zeros(1, 2))
    on = torch.amp.GradScaler("cpu")
    train_mixed_precision(model, loader, nn.BCEWithLogitsLoss(), optimizer, scaler=on,
                          dtype=torch.bfloat16)  # fmt: skip
    assert on.get_scale() == 65536.0


def test_an_empty_batch_is_named_and_a_packed_sequence_moves_whole():
    with pytest.raises(ValueError, match=r"^loader gave an empty batch$"):
        split_batch(())
    model = make_toy_model(device=CPU)
    with pytest.raises(ValueError, match=r"^loader gave an empty batch$"):
        train_mixed_precision(model, [[]], nn.BCEWithLogitsLoss(), make_toy_optimizer(model))
    packed = nn.utils.rnn.pack_sequence([torch.ones(3, 2), torch.ones(1, 2)])
    moved, _y = to_device((packed, torch.ones(2)), torch.device("meta"))
    assert type(moved) is type(packed)
    assert moved.data.device.type == "meta"
    assert moved.batch_sizes.device.type == "cpu"  # where pack_padded_sequence wants them
