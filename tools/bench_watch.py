"""The watch's overhead: step time of the recipe's loop with and without ``diagnose.watch``.

For each model, the recipe's loop (``train_mixed_precision``, FP16 with its GradScaler) runs
``--steps`` steps on one batch, without the watch and with it at its default sampling (every
100th step measured), in turn, ``--repeats`` pairs; it prints the median step time each way,
the median of the pairs' ratios (and their range: the machine's drift), and the cost of a
sampled step alone. Run it on an idle machine:

    python tools/bench_watch.py [--steps 200] [--repeats 5] [--threads 1]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]


def _decoder() -> tuple[torch.nn.Module, list, object]:
    from amp_lesson.models import make_decoder

    model = make_decoder(device="cpu")
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 256, (8, 65), generator=g)

    def loss(logits, y):
        return F.cross_entropy(logits.flatten(0, 1), y.flatten())

    return model, [(ids[:, :-1], ids[:, 1:])], loss


def _gpt2() -> tuple[torch.nn.Module, list, object]:
    sys.path.insert(0, str(ROOT / "tools"))
    import validate_models as vm

    model, batch, _ = vm.gpt2()

    class LM(torch.nn.Module):  # the recipe takes (x, y) tensors: ids in, logits out
        def __init__(self) -> None:
            super().__init__()
            self.lm = model

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.lm(input_ids=ids).logits

    ids = batch[0]["input_ids"]

    def loss(logits, y):
        return F.cross_entropy(logits[:, :-1].flatten(0, 1), y[:, 1:].flatten())

    return LM(), [(ids, ids)], loss


MODELS = {"decoder": _decoder, "gpt2": _gpt2}


def step_times(model, batch, loss, steps: int, watched: bool) -> list[float]:
    """Per-step seconds of the recipe's loop over ``steps`` steps."""
    from amp_lesson.diagnose import watch
    from amp_lesson.recipe import train_mixed_precision

    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    times: list[float] = []

    class Timed(list):
        def __iter__(self):
            for item in super().__iter__():
                times.append(time.perf_counter())
                yield item

    loader = Timed(batch * steps)
    if watched:
        with watch(model):
            train_mixed_precision(model, loader, loss, optimizer)
    else:
        train_mixed_precision(model, loader, loss, optimizer)
    times.append(time.perf_counter())
    return [b - a for a, b in itertools.pairwise(times)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), {args.steps} steps a run, "
          f"{args.repeats} runs each way")  # fmt: skip
    for name in args.models:
        model, batch, loss = MODELS[name]()
        step_times(model, batch, loss, 10, watched=True)  # warm both paths up
        step_times(model, batch, loss, 10, watched=False)
        ratios, plain, watched, sampled = [], [], [], []
        for _ in range(args.repeats):  # pairs, each way in turn: drifts in speed cancel
            p_run = step_times(model, batch, loss, args.steps, watched=False)
            w_run = step_times(model, batch, loss, args.steps, watched=True)
            sampled += w_run[0::100]  # the sampled steps: the first, then every 100th
            w_rest = [t for i, t in enumerate(w_run) if i % 100]
            ratios.append(statistics.median(w_rest) / statistics.median(p_run))
            plain += p_run
            watched += w_rest
        p = statistics.median(plain)
        w = statistics.median(watched)
        s = statistics.median(sampled)
        r = statistics.median(ratios)
        mean = (r * 99 + s / p) / 100
        print(
            f"{name}: step {p * 1e3:.2f} ms plain, {w * 1e3:.2f} ms watched; ratio x{r:.2f} "
            f"(pairs x{min(ratios):.2f} to x{max(ratios):.2f}); a sampled step "
            f"{s * 1e3:.1f} ms (x{s / p:.1f}); at every=100 on average x{mean:.2f}"
        )


if __name__ == "__main__":
    main()
