"""The loaders an engineer has, for the recipe's tests: built with nothing but torch.

The test of what the recipe page's copy button copies runs this file's source
in a fresh interpreter that cannot import the book's package, so it imports
torch alone. Every loader is made anew by its case's ``make()`` and yields
the same micro-batches each time (no shuffling), so a reference can be built
from one pass while the recipe trains on another.
"""

from __future__ import annotations

import json
from collections import UserDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

PAD = -100  # the label of a padding position, as cross_entropy's ignore_index
LR = 0.1


def toy_problem(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` samples of the lesson's logistic regression: 2 features, label = sum > 0."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, 2, generator=g)
    return X, (X.sum(dim=1, keepdim=True) > 0).float()


class Stream(IterableDataset):
    """A streaming dataset: samples one at a time, and no ``len``."""

    def __init__(self, n: int, seed: int) -> None:
        self.X, self.y = toy_problem(n, seed)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        yield from zip(self.X, self.y, strict=True)


def uneven_batches(sizes: tuple[int, ...], seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Micro-batches of the given sizes, as a bucketing sampler makes them."""
    X, y = toy_problem(sum(sizes), seed)
    return list(zip(X.split(list(sizes)), y.split(list(sizes)), strict=True))


def padded_sequences(
    lengths: tuple[int, ...], per_batch: int, seed: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Sequences with a label per token, padded to the longest of their micro-batch with PAD."""
    g = torch.Generator().manual_seed(seed)
    batches = []
    for start in range(0, len(lengths), per_batch):
        group = lengths[start : start + per_batch]
        x = torch.randn(len(group), max(group), 2, generator=g)
        y = (x.sum(dim=-1, keepdim=True) > 0).float()
        for row, length in enumerate(group):
            x[row, length:] = 0.0
            y[row, length:] = PAD
        batches.append((x, y))
    return batches


def masked_bce(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The mean loss over the real tokens: padding positions carry no loss."""
    real = y != PAD
    return F.binary_cross_entropy_with_logits(logits[real], y[real])


def count_tokens(y: torch.Tensor) -> int:
    """The tokens ``masked_bce`` averages over."""
    return int((y != PAD).sum())


def fresh_model(dtype: torch.dtype = torch.float32) -> torch.nn.Linear:
    """The lesson's model: Linear(2, 1) without bias, weights 0."""
    model = torch.nn.Linear(2, 1, bias=False).to(dtype)
    torch.nn.init.zeros_(model.weight)
    return model


class OwnLoss(torch.nn.Module):
    """A model that computes its own loss from the labels it is given, as a Hugging Face
    model does: the lesson's ``Linear(2, 1)`` and :func:`masked_bce`. It returns a dict, or,
    with ``as_attribute``, an object with ``.loss`` and ``.logits``; ``lengths``, if given,
    must arrive as the plain list of ints the batch holds (not moved, not made a tensor)."""

    def __init__(self, dtype: torch.dtype = torch.float32, as_attribute: bool = False) -> None:
        super().__init__()
        self.linear = fresh_model(dtype)
        self.as_attribute = as_attribute

    @property
    def weight(self) -> torch.Tensor:
        return self.linear.weight

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None,
                lengths: list[int] | None = None) -> Any:  # fmt: skip
        if lengths is not None and not all(type(n) is int for n in lengths):
            raise TypeError(f"lengths must reach the model as ints, got {lengths!r}")
        logits = self.linear(x)
        loss = None if labels is None else masked_bce(logits, labels)
        if self.as_attribute:
            return SimpleNamespace(loss=loss, logits=logits)
        return {"loss": loss, "logits": logits}


def as_dict(samples: list[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """A collator in the manner of Hugging Face's: the samples as a dict of stacked tensors."""
    return {
        "x": torch.stack([x for x, _ in samples]),
        "labels": torch.stack([y for _, y in samples]),
    }


class Encoding(UserDict):
    """A mapping that is not a dict, as a tokenizer's ``BatchEncoding`` is (a ``UserDict``)."""


def as_encodings(batches: list[tuple[torch.Tensor, torch.Tensor]]) -> list[Encoding]:
    return [Encoding(x=x, labels=y) for x, y in batches]


def padded_dicts(lengths: tuple[int, ...], per_batch: int, seed: int) -> list[dict[str, Any]]:
    """:func:`padded_sequences` as dicts, with the sequences' lengths as a plain list."""
    batches = padded_sequences(lengths, per_batch, seed)
    return [
        {"x": x, "labels": y, "lengths": [int(n) for n in (y != PAD).sum(dim=(1, 2)).tolist()]}
        for x, y in batches
    ]


def count_label_tokens(batch: dict[str, Any]) -> int:
    """The tokens the model's own loss averages over: its labels that are not padding."""
    return int((batch["labels"] != PAD).sum())


def dict_logits_bce(output: dict[str, torch.Tensor], batch: dict[str, Any]) -> torch.Tensor:
    """A loss of the reader's own on a dict batch: ``loss_fn(output, batch)``."""
    return F.binary_cross_entropy_with_logits(output["logits"], batch["labels"])


def as_pair(batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """A micro-batch as ``(x, y)``, for the reference: a dict's ``x`` and ``labels``."""
    if isinstance(batch, Mapping):
        return batch["x"], batch["labels"]
    return batch


BCE = torch.nn.BCEWithLogitsLoss()


@dataclass(frozen=True)
class Case:
    """A loader, how the recipe is run on it, and what makes it hard.

    ``model(dtype)`` builds the model; ``loss_fn`` is the recipe's (``None``: the model's
    own loss); ``count`` its count (``None``: the recipe's default).
    """

    make: Callable[[], Any]
    accum_steps: int
    epochs: int = 2
    what: str = ""
    model: Callable[[torch.dtype], torch.nn.Module] = fresh_model
    loss_fn: Callable | None = BCE
    count: Callable | None = None


CASES: dict[str, Case] = {
    "drop_last=False, short last batch": Case(
        lambda: DataLoader(TensorDataset(*toy_problem(250, 1)), batch_size=32),
        accum_steps=3,
        what="8 batches of 32, 32, ..., 26: windows of 3, 3 and 2 micro-batches",
    ),
    "drop_last=True, count not divisible": Case(
        lambda: DataLoader(TensorDataset(*toy_problem(250, 2)), batch_size=32, drop_last=True),
        accum_steps=4,
        what="7 batches of 32: windows of 4 and 3",
    ),
    "IterableDataset, no len": Case(
        lambda: DataLoader(Stream(150, 3), batch_size=20),
        accum_steps=3,
        what="7 batches of 20 and one of 10, from a stream",
    ),
    "micro-batches of unequal size": Case(
        lambda: uneven_batches((5, 17, 32, 9, 40, 3, 11), 4),
        accum_steps=3,
        what="a list of 7 micro-batches, windows of 54, 52 and 11 samples",
    ),
    "generator, one epoch": Case(
        lambda: iter(uneven_batches((16, 16, 7, 30, 2), 5)),
        accum_steps=2,
        epochs=1,
        what="a generator of 5 micro-batches",
    ),
    "per-token loss, padded sequences": Case(
        lambda: padded_sequences((2, 3, 16, 14, 5, 4, 12, 9, 1, 7), 2, 6),
        accum_steps=2,
        loss_fn=masked_bce,
        count=count_tokens,
        what="10 sequences of 1 to 16 tokens, 2 a micro-batch, padded to its longest",
    ),
    "dict batches from a collator, the model's own loss": Case(
        lambda: DataLoader(TensorDataset(*toy_problem(250, 7)), batch_size=32, collate_fn=as_dict),
        accum_steps=3,
        model=OwnLoss,
        loss_fn=None,
        what="a collator's dicts of 32, ..., 26 samples; the model returns {'loss': ...}",
    ),
    "a tokenizer-style mapping, output.loss": Case(
        lambda: as_encodings(uneven_batches((5, 17, 32, 9, 40, 3, 11), 4)),
        accum_steps=3,
        model=partial(OwnLoss, as_attribute=True),
        loss_fn=None,
        what="UserDict batches of unequal sizes; the model's output has .loss",
    ),
    "dict batches, the reader's loss_fn(output, batch)": Case(
        lambda: DataLoader(TensorDataset(*toy_problem(150, 9)), batch_size=20, collate_fn=as_dict),
        accum_steps=3,
        model=OwnLoss,
        loss_fn=dict_logits_bce,
        what="a collator's dicts; the loss reads output['logits'] and batch['labels']",
    ),
    "the model's own per-token loss, counted by tokens": Case(
        lambda: padded_dicts((2, 3, 16, 14, 5, 4, 12, 9, 1, 7), 2, 10),
        accum_steps=2,
        model=OwnLoss,
        loss_fn=None,
        count=count_label_tokens,
        what="padded sequences as dicts with a list of lengths; count= counts the label tokens",
    ),
}


def run_case(
    train: Callable[..., torch.amp.GradScaler],
    case: Case,
    dtype: torch.dtype = torch.float16,
    param_dtype: torch.dtype = torch.float32,
    **kwargs: Any,
) -> tuple[torch.Tensor, float]:
    """Train ``fresh_model`` with ``train`` (the recipe) on the case; return weight and scale."""
    model = case.model(param_dtype)
    loader = case.make()
    if param_dtype != torch.float32:  # the data in the model's dtype: no autocast casts it
        loader = [cast(batch, param_dtype) for batch in loader]
    if case.count is not None:
        kwargs = {"count": case.count, **kwargs}
    scaler = train(
        model, loader, case.loss_fn, torch.optim.SGD(model.parameters(), lr=LR),
        accum_steps=case.accum_steps, epochs=case.epochs, dtype=dtype, **kwargs,
    )  # fmt: skip
    return model.weight.detach().clone(), float(scaler.get_scale())


def cast(batch: Any, dtype: torch.dtype) -> Any:
    """``batch`` with its floating-point tensors in ``dtype``, its structure kept."""
    if isinstance(batch, torch.Tensor):
        return batch.to(dtype) if batch.is_floating_point() else batch
    if isinstance(batch, Mapping):
        return type(batch)({key: cast(value, dtype) for key, value in batch.items()})
    if isinstance(batch, (tuple, list)):
        return type(batch)(cast(value, dtype) for value in batch)
    return batch


def results_as_json(train: Callable[..., torch.amp.GradScaler]) -> str:
    """Every case in FP16 and BF16, the weights as exact hex strings."""
    out = {}
    for name, case in CASES.items():
        for label, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
            weight, scale = run_case(train, case, dtype)
            out[f"{name} | {label}"] = {
                "weight": [w.hex() for w in weight.flatten().tolist()],
                "scale": scale,
            }
    return json.dumps(out)


# --------------------------------------------------------------------------- DDP

DDP_ACCUM, DDP_SIZES = 3, (16, 16, 16, 16, 16, 16, 9)  # per rank: windows of 3, 3 and 1


def ddp_batches(rank: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Rank ``rank``'s micro-batches: the same sizes on every rank, other samples."""
    return uneven_batches(DDP_SIZES, seed=10 + rank)


# Per rank: 6 padded sequences a rank, 2 a micro-batch, windows of 2 micro-batches; the
# ranks' windows hold different numbers of tokens.
DDP_TOKEN_LENGTHS = ((2, 3, 16, 14, 5, 4), (12, 9, 1, 7, 15, 16))


def ddp_token_batches(rank: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Rank ``rank``'s micro-batches of padded sequences, for a per-token loss."""
    return padded_sequences(DDP_TOKEN_LENGTHS[rank], 2, seed=20 + rank)


def ddp_worker(
    rank: int, world_size: int, port: int, out: str, source: str | None, tokens: bool = False
) -> None:
    """Train the recipe under DDP on two gloo processes; write weights and all-reduce calls.

    ``source`` is the recipe's code to run (what the page's copy button copies), or
    ``None`` for the book's package. With ``tokens``, the ranks train in FP32 on padded
    sequences with a per-token loss, whose counts differ between the ranks.
    """
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel

    if source is None:
        from amp_lesson.recipe import train_mixed_precision
    else:
        namespace: dict[str, Any] = {"__name__": "copied_recipe"}
        exec(compile(source, "copied_recipe.py", "exec"), namespace)  # noqa: S102 (the test runs the copy)
        train_mixed_precision = namespace["train_mixed_precision"]
    calls: list[int] = []

    def counting_hook(state, bucket):  # no annotations: DDP refuses them as strings
        calls.append(bucket.index())
        return allreduce_hook(state, bucket)

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size
    )
    try:
        model = DistributedDataParallel(fresh_model())
        model.register_comm_hook(None, counting_hook)
        if tokens:
            kwargs = {"count": count_tokens, "dtype": torch.float32, "accum_steps": 2}
            batches, loss_fn = ddp_token_batches(rank), masked_bce
        else:
            kwargs = {"accum_steps": DDP_ACCUM}
            batches, loss_fn = ddp_batches(rank), torch.nn.BCEWithLogitsLoss()
        scaler = train_mixed_precision(
            model, batches, loss_fn, torch.optim.SGD(model.parameters(), lr=LR), epochs=2,
            **kwargs,
        )  # fmt: skip
        weight = model.module.weight.detach().flatten().tolist()
        result = {"weight": weight, "calls": len(calls), "scale": scaler.get_scale()}
        Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()
