"""Diagnose models nobody here wrote, and hold the recommendation against real training runs.

Random-init models built from small configurations of Hugging Face ``transformers`` (GPT-2,
BERT, T5, ViT, and T5 with one feed-forward block's weights scaled by 40) and torch's own
``nn.LSTM`` and ``nn.GRU``. For each, :func:`amp_lesson.diagnose.diagnose` on one batch, then
60 real steps in FP32, FP16 (with the ``init_scale`` and modules kept in FP32 that the
diagnosis tried) and BF16 on the same batch, each format's final loss held against FP32's.
``tests/test_validate.py`` checks every figure against an independent computation; this script
prints, per model, the time diagnose took, the peak memory of the whole process (each model in
a process of its own, ``tools/peak_memory.py``), the recommendation, and whether the real runs
agree with it:

    python tools/validate_models.py            # the table
    python tools/validate_models.py --one gpt2 # one model, in this process (JSON)

The table's rows are also written to ``docs/_build/validate-<model>.json``.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
STEPS = 60
"""The real runs' steps."""


def _hf() -> Any:
    """transformers, quietly: its import of torchao logs what a CPU torch cannot load."""
    import logging

    for name in ("torchao", "torch.utils._pytree"):
        logging.getLogger(name).setLevel(logging.ERROR)
    import transformers

    transformers.logging.set_verbosity_error()
    return transformers


def _ids(rows: int, length: int, vocab: int, seed: int) -> torch.Tensor:
    return torch.randint(1, vocab, (rows, length), generator=torch.Generator().manual_seed(seed))


def _own_loss(out: Any, _: Any) -> torch.Tensor:
    return out.loss


class Recurrent(nn.Module):
    """A recurrent classifier: ``nn.LSTM`` or ``nn.GRU``, then a linear head on the last step."""

    def __init__(self, kind: type[nn.Module], layers: int = 2) -> None:
        super().__init__()
        self.rnn = kind(16, 32, num_layers=layers, batch_first=True)
        self.head = nn.Linear(32, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(x)[0][:, -1])


Built = tuple[nn.Module, tuple[Any, Any], Callable[[Any, Any], torch.Tensor]]


def gpt2() -> Built:
    T = _hf()
    torch.manual_seed(0)
    config = T.GPT2Config(vocab_size=256, n_embd=64, n_layer=2, n_head=4, n_positions=64,
                          bos_token_id=0, eos_token_id=0, loss_type="ForCausalLM")  # fmt: skip
    ids = _ids(8, 32, 256, 1)
    return T.GPT2LMHeadModel(config), ({"input_ids": ids, "labels": ids}, None), _own_loss


def bert() -> Built:
    T = _hf()
    torch.manual_seed(0)
    config = T.BertConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2,
                          num_attention_heads=4, intermediate_size=128,
                          max_position_embeddings=64)  # fmt: skip
    ids = _ids(8, 32, 512, 1)
    return T.BertForMaskedLM(config), ({"input_ids": ids, "labels": ids}, None), _own_loss


def _t5_config() -> Any:
    return _hf().T5Config(vocab_size=256, d_model=64, d_kv=16, d_ff=128, num_layers=2,
                          num_heads=4, feed_forward_proj="gated-gelu", decoder_start_token_id=0,
                          pad_token_id=0)  # fmt: skip


def t5() -> Built:
    T = _hf()
    torch.manual_seed(0)
    ids, labels = _ids(8, 24, 256, 1), _ids(8, 12, 256, 2)
    model = T.T5ForConditionalGeneration(_t5_config())
    return model, ({"input_ids": ids, "labels": labels}, None), _own_loss


T5_HOT = "encoder.block.0.layer.1.DenseReluDense"
"""The feed-forward block of :func:`t5_hot` whose weights are scaled."""


def t5_hot() -> Built:
    """T5 with one feed-forward block's weights scaled by 40: its GELU's cube overflows FP16."""
    model, batch, loss_fn = t5()
    with torch.no_grad():
        for p in model.get_submodule(T5_HOT).parameters():
            p.mul_(40)
    return model, batch, loss_fn


def vit() -> Built:
    T = _hf()
    torch.manual_seed(0)
    config = T.ViTConfig(image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2,
                         num_attention_heads=4, intermediate_size=128, num_labels=10)  # fmt: skip
    g = torch.Generator().manual_seed(1)
    pixels, labels = torch.randn(8, 3, 32, 32, generator=g), torch.randint(0, 10, (8,), generator=g)
    model = T.ViTForImageClassification(config)
    return model, ({"pixel_values": pixels, "labels": labels}, None), _own_loss


def _sequences() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(16, 12, 16, generator=g), torch.randint(0, 5, (16,), generator=g)


def lstm() -> Built:
    torch.manual_seed(0)
    return Recurrent(nn.LSTM), _sequences(), F.cross_entropy


def gru() -> Built:
    torch.manual_seed(0)
    return Recurrent(nn.GRU), _sequences(), F.cross_entropy


MODELS: dict[str, Callable[[], Built]] = {
    "gpt2": gpt2, "bert": bert, "t5": t5, "t5_hot": t5_hot, "vit": vit, "lstm": lstm, "gru": gru,
}  # fmt: skip
DIAGNOSE_STEPS = {"lstm": 20, "gru": 20}
"""Steps of each diagnosis's runs (10 elsewhere): enough for FP32 to move the loss."""


def call(model: nn.Module, inputs: Any) -> Any:
    return model(**inputs) if isinstance(inputs, dict) else model(inputs)


def real_run(
    model: nn.Module, batch: tuple[Any, Any], loss_fn: Callable, dtype: torch.dtype, *,
    steps: int = STEPS, init_scale: float = 2.0**16, keep: list[str] | tuple[str, ...] = (),
    seed: int = 0,
) -> dict[str, Any]:  # fmt: skip
    """``steps`` Adam steps on ``batch`` on a copy, in ``dtype`` (autocast, and for FP16 a
    GradScaler from ``init_scale`` with ``keep`` run in FP32), written here as a reader's loop
    would be; the losses, the final loss and the steps skipped."""
    from amp_lesson.diagnose import run_in_fp32

    twin = copy.deepcopy(model)
    opt = torch.optim.Adam(twin.parameters())
    fp16 = dtype == torch.float16
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, enabled=fp16)
    losses, skipped = [], 0
    with run_in_fp32(twin, keep if fp16 else ()), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        twin.train()
        for _ in range(steps):
            with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
                loss = loss_fn(call(twin, batch[0]), batch[1])
            before = scaler.get_scale()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            losses.append(float(loss.detach()))
            skipped += fp16 and scaler.get_scale() < before
        with torch.no_grad():
            final = float(loss_fn(call(twin, batch[0]), batch[1]))
    return {"losses": losses, "final_loss": final, "skipped": skipped}


def tracks(run: dict[str, Any], fp32: dict[str, Any], share: float) -> bool:
    """Whether ``run``'s final loss is finite and within ``share`` of FP32's move of FP32's."""
    import math

    move = abs(fp32["final_loss"] - fp32["losses"][0])
    return math.isfinite(run["final_loss"]) and abs(run["final_loss"] - fp32["final_loss"]) <= (
        share * move
    )


def validate(name: str) -> dict[str, Any]:
    """Diagnose one model and run it for real; what the closing table prints."""
    from amp_lesson.diagnose import TRACKING_SHARE, diagnose

    model, batch, loss_fn = MODELS[name]()
    started = time.perf_counter()
    d = diagnose(model, batch, loss_fn, steps=DIAGNOSE_STEPS.get(name, 10))
    seconds = time.perf_counter() - started
    g = d.gradients
    runs = {"fp32": real_run(model, batch, loss_fn, torch.float32)}
    if "fp16" not in d.unavailable:
        runs["fp16"] = real_run(model, batch, loss_fn, torch.float16,
                                init_scale=g["init_scale"] or 2.0**16,
                                keep=d.advice["keep_fp32"])  # fmt: skip
    runs["bf16"] = real_run(model, batch, loss_fn, torch.bfloat16)
    follows = {fmt: tracks(run, runs["fp32"], TRACKING_SHARE) for fmt, run in runs.items()}
    choice = d.recommendation["choice"]
    t4 = d.recommend(bf16_supported=False)["choice"]
    agrees = choice not in follows or follows[choice]
    return {
        "model": name,
        "class": d.model,
        "parameters": d.parameters,
        "seconds": seconds,
        "choice": choice,
        "without_bf16": t4,
        "keep_fp32": d.advice["keep_fp32"],
        "init_scale": g["init_scale"],
        "settled_scale": g["settled_scale"],
        "unavailable": d.unavailable,
        "real_follows_fp32": follows,
        "skipped_fp16": runs.get("fp16", {}).get("skipped"),
        "agrees": agrees and (t4 not in follows or follows[t4]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--one", choices=sorted(MODELS), help="one model, in this process")
    parser.add_argument("--json", type=Path, help="with --one: write the row here")
    args = parser.parse_args()
    if args.one:
        torch.set_num_threads(1)
        row = json.dumps(validate(args.one))
        if args.json:
            args.json.write_text(row, encoding="utf-8")
        else:
            print(row)
        return
    sys.path.insert(0, str(ROOT / "tools"))
    from peak_memory import run_measured

    print(f"{'model':8} {'time':>6} {'peak':>8}  choice  no BF16  agrees  keep in FP32")
    for name in MODELS:
        out = ROOT / "docs" / "_build" / f"validate-{name}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        measured = run_measured([sys.executable, __file__, "--one", name, "--json", str(out)])
        row = json.loads(out.read_text(encoding="utf-8"))
        print(
            f"{name:8} {row['seconds']:5.1f}s {measured.peak_bytes / 2**20:6.0f}MiB  "
            f"{row['choice']:6}  {row['without_bf16']:7}  {row['agrees']!s:6}  "
            f"{', '.join(row['keep_fp32']) or '-'}"
            + (f"  (unavailable: {', '.join(row['unavailable'])})" if row["unavailable"] else "")
        )


if __name__ == "__main__":
    main()
