"""Sharded data parallel (FSDP2) with a mixed-precision policy, on CPU processes.

``torch.distributed.fsdp.fully_shard`` splits every parameter across the
ranks: each rank stores one shard, **all-gathers** the whole parameter just
before a module's forward (and again for its backward), and
**reduce-scatters** the gradients, so that each rank receives the averaged
gradient of its own shard only. Of ``MixedPrecisionPolicy``'s settings
(torch 2.13.0), two dtypes are the ones this module shows:

- ``param_dtype``: the dtype the parameters are gathered in, and so the
  dtype of the forward and backward computation (the stored shards and the
  optimizer stay in their own dtype, FP32 here);
- ``reduce_dtype``: the dtype the gradients are reduce-scattered in, before
  they are cast back to the shards' dtype.

:func:`run_fsdp` launches ``world_size`` CPU processes on the ``gloo``
backend, as :mod:`amp_lesson.distributed` does for DDP, and in each trains the
same MLP with several policies, plus DDP with ``no_sync()`` for comparison.
The all-gather and reduce-scatter pass through :class:`CountingAllGather` and
:class:`CountingReduceScatter`, set with FSDP2's ``set_custom_all_gather`` /
``set_custom_reduce_scatter``: they count the calls and record the dtype of
what they move, then do what FSDP does by default.

The worker lives here because the start methods import it by name.
"""

import json
import tempfile
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

# The default communication classes FSDP2 uses (torch 2.13.0 exports the hooks that take them,
# FSDPModule.set_custom_all_gather / set_custom_reduce_scatter, but not the classes).
from torch.distributed.fsdp._fully_shard._fsdp_collectives import (
    DefaultAllGather,
    DefaultReduceScatter,
)

from amp_lesson._checks import check_choice, check_int, check_positive, check_seed
from amp_lesson.accumulation import make_toy_problem

# the model, data split and unsharded reference of the DDP runs, so the two pages compare alike
from amp_lesson.distributed import (
    START_METHODS,
    CallCounter,
    counting_allreduce_hook,
    free_port,
    rank_shard,
    start_ranks,
    worker_model,
)

__all__ = [
    "BF16_REDUCTION",
    "POLICIES",
    "CountingAllGather",
    "CountingReduceScatter",
    "FSDPRun",
    "run_fsdp",
    "shard_model",
    "train_fsdp_accumulated",
]

POLICIES: dict[str, tuple[str | None, str | None]] = {
    "no policy (FP32)": (None, None),
    "param BF16, reduce FP32": ("bfloat16", "float32"),
    "param BF16, reduce BF16": ("bfloat16", "bfloat16"),
}
"""The mixed-precision policies :func:`run_fsdp` trains with: ``(param_dtype, reduce_dtype)``."""

BF16_REDUCTION: dict[str, tuple[str, bool]] = {
    "accumulated FP32, reduced FP32": ("float32", True),
    "accumulated BF16, reduced BF16": ("bfloat16", True),
    "accumulated FP32, reduced BF16": ("bfloat16", False),
}
"""The BF16-parameter runs that tell accumulation from reduction, as ``(reduce_dtype, skip_sync)``.

With the sync off, FSDP2 (torch 2.13.0) accumulates the unsharded gradients
of the micro-batches in ``reduce_dtype``; with the sync on at every
micro-batch, each micro-batch's gradient is reduce-scattered in
``reduce_dtype`` and then added to the FP32 gradient shard. So the third run
reduces in BF16 but accumulates in FP32.
"""


class CountingAllGather(DefaultAllGather):
    """FSDP2's default all-gather, counting its calls and recording the dtype it gathers."""

    def __init__(self) -> None:
        super().__init__()
        self.dtypes: list[str] = []

    def __call__(self, output_tensor, input_tensor, group, async_op=False):
        self.dtypes.append(str(input_tensor.dtype))
        return super().__call__(output_tensor, input_tensor, group, async_op)


class CountingReduceScatter(DefaultReduceScatter):
    """FSDP2's default reduce-scatter, counting its calls and recording the dtype it reduces."""

    def __init__(self) -> None:
        super().__init__()
        self.dtypes: list[str] = []

    def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
        self.dtypes.append(str(input_tensor.dtype))
        return super().__call__(output_tensor, input_tensor, group, op, async_op)


def shard_model(
    model: nn.Sequential, policy: MixedPrecisionPolicy
) -> tuple[CountingAllGather, CountingReduceScatter]:
    """``fully_shard`` each Linear, then the whole model, under ``policy``, and count their communication.

    Each Linear becomes one FSDP unit, gathered and reduced as one piece; the
    root call covers what is left (here nothing) and makes the model the
    unit that ``set_requires_gradient_sync`` is called on.

    Parameters
    ----------
    model : torch.nn.Sequential
        The model, changed in place.
    policy : torch.distributed.fsdp.MixedPrecisionPolicy
        The mixed-precision policy of every unit.

    Returns
    -------
    tuple of (CountingAllGather, CountingReduceScatter)
        The counters every unit's communication passes through.

    Raises
    ------
    TypeError
        If ``model`` is not an ``nn.Sequential``.
    """
    if not isinstance(model, nn.Sequential):
        raise TypeError(f"model must be an nn.Sequential, got {type(model).__name__}")
    # gloo's ranks hold their shards on the CPU; left to itself, fully_shard would move
    # them to the current CUDA device wherever one exists.
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    # Counting is the book's, not the recipe's: each unit's communication passes through these.
    gather, scatter = CountingAllGather(), CountingReduceScatter()
    for layer in model:
        if isinstance(layer, nn.Linear):
            layer.set_custom_all_gather(gather)
            layer.set_custom_reduce_scatter(scatter)
    return gather, scatter


def train_fsdp_accumulated(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    X: torch.Tensor,
    y: torch.Tensor,
    loss_fn: nn.Module,
    n_accum: int,
    skip_sync: bool = True,
) -> torch.Tensor:
    """One optimizer step of a ``fully_shard``-ed model over ``n_accum`` micro-batches of ``X``.

    With ``skip_sync``, gradient reduction is off for every micro-batch but
    the last (``set_requires_gradient_sync(False)``): the ranks accumulate
    unsharded gradients locally and reduce-scatter them once.

    Parameters
    ----------
    model : torch.nn.Module
        A model whose modules are ``fully_shard``-ed (:func:`shard_model`).
    optimizer : torch.optim.Optimizer
        Its optimizer.
    X, y : torch.Tensor
        This rank's inputs and targets for the step.
    loss_fn : torch.nn.Module
        The loss (a mean over the micro-batch).
    n_accum : int
        Micro-batches.
    skip_sync : bool, default True
        Skip the reduction on all micro-batches but the last.

    Returns
    -------
    torch.Tensor
        The model's output on the last micro-batch.

    Raises
    ------
    ValueError
        If ``n_accum`` is below 1 or above the number of samples in ``X``
        (a micro-batch would be empty).
    """
    check_int("n_accum", n_accum, minimum=1)
    if n_accum > len(X):
        raise ValueError(f"n_accum must be at most the {len(X)} samples of X, got {n_accum}")
    for i, (xb, yb) in enumerate(
        zip(X.tensor_split(n_accum), y.tensor_split(n_accum), strict=True)
    ):
        last = i == n_accum - 1
        if skip_sync:
            model.set_requires_gradient_sync(last)
        out = model(xb)
        loss = loss_fn(out.float(), yb) / n_accum
        loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return out


@dataclass
class FSDPRun:
    """What :func:`run_fsdp` saw on rank 0.

    Parameters
    ----------
    world_size, n_accum, steps : int
        The launch's settings.
    policies : dict of str to dict
        Per policy name (:data:`POLICIES`): ``"gathered"`` (dtype of the
        all-gathers), ``"weight in forward"`` (the first layer's weight as
        its forward saw it: dtype and type), ``"output"`` (the model output's
        dtype), ``"parameter"`` (the stored parameter's type and dtype),
        ``"reduced"`` (dtype of the reduce-scatters), ``"gradient shard"``
        (dtype and shape of the first weight's ``.grad`` on this rank),
        ``"calls per step"`` (all-gathers and reduce-scatters), and
        ``"params"`` (the full final weights, gathered).
    accumulation : dict of str to dict
        ``"FSDP2, set_requires_gradient_sync"``, ``"FSDP2, sync every
        micro-batch"`` and ``"DDP, no_sync"``: the reductions per step and
        the final weights.
    bf16_reduction : dict of str to dict
        Per run of :data:`BF16_REDUCTION` (parameters gathered in BF16):
        ``"first gradient"`` (every parameter's gradient shard on rank 0 at
        the first optimizer step, as lists), ``"reductions per step"`` and
        ``"params"``.
    """

    world_size: int
    n_accum: int
    steps: int
    policies: dict[str, dict[str, Any]]
    accumulation: dict[str, dict[str, Any]]
    bf16_reduction: dict[str, dict[str, Any]]

    def params(self, name: str) -> dict[str, torch.Tensor]:
        """Return the final weights of a policy or accumulation run, as tensors.

        Parameters
        ----------
        name : str
            A key of ``policies`` or of ``accumulation``.

        Returns
        -------
        dict of str to torch.Tensor
            The full (gathered) parameters by name.

        Raises
        ------
        ValueError
            If ``name`` is neither.
        """
        runs = {**self.policies, **self.accumulation, **self.bf16_reduction}
        if name not in runs:
            raise ValueError(f"name must be one of {list(runs)}, got {name!r}")
        return {k: torch.tensor(v) for k, v in runs[name]["params"].items()}

    def first_gradient(self, name: str) -> dict[str, torch.Tensor]:
        """Return rank 0's gradient shards at the first step of a :data:`BF16_REDUCTION` run.

        Parameters
        ----------
        name : str
            A key of ``bf16_reduction``.

        Returns
        -------
        dict of str to torch.Tensor
            Each parameter's gradient shard (FP32, the shards' dtype) by name.

        Raises
        ------
        ValueError
            If ``name`` is not a key of ``bf16_reduction``.
        """
        if name not in self.bf16_reduction:
            raise ValueError(f"name must be one of {list(self.bf16_reduction)}, got {name!r}")
        grads = self.bf16_reduction[name]["first gradient"]
        return {k: torch.tensor(v) for k, v in grads.items()}


def _full_params(model: nn.Module) -> dict[str, Any]:
    return {
        name: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().tolist()
        for name, p in model.named_parameters()
    }


def _policy_runs(
    X: torch.Tensor, y: torch.Tensor, loss_fn: nn.Module, config: dict[str, Any]
) -> dict[str, Any]:
    """Each policy of :data:`POLICIES`: what FSDP2 gathers, computes, keeps and reduces in."""
    steps, n_accum, lr = config["steps"], config["n_accum"], config["lr"]
    policies = {}
    for name, (param_dtype, reduce_dtype) in POLICIES.items():
        policy = MixedPrecisionPolicy(
            param_dtype=getattr(torch, param_dtype) if param_dtype else None,
            reduce_dtype=getattr(torch, reduce_dtype) if reduce_dtype else None,
        )
        model = worker_model(config["seed"])
        gather, scatter = shard_model(model, policy)
        seen: dict[str, str] = {}

        def look(module: nn.Module, args: Any, seen: dict[str, str] = seen) -> None:
            weight = module.weight
            seen.setdefault("weight in forward", f"{weight.dtype} {type(weight).__name__}")

        # registered after fully_shard, so it runs after FSDP's all-gather
        model[0].register_forward_pre_hook(look)
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        for _ in range(steps):
            out = train_fsdp_accumulated(model, optimizer, X, y, loss_fn, n_accum)
        calls = [len(gather.dtypes) // steps, len(scatter.dtypes) // steps]
        params = _full_params(model)
        # zero_grad dropped the last gradients: one more backward to look at a gradient shard
        model(X[:4]).float().sum().backward()
        grad, stored = model[0].weight.grad, model[0].weight
        policies[name] = {
            "gathered": sorted(set(gather.dtypes)),
            "weight in forward": seen["weight in forward"],
            "output": str(out.dtype),
            "parameter": f"{type(stored).__name__} {stored.dtype}",
            "reduced": sorted(set(scatter.dtypes)),
            "gradient shard": f"{grad.dtype} {tuple(grad.to_local().shape)} of {tuple(stored.shape)}",
            "calls per step": calls,
            "params": params,
        }
    return policies


def _accumulation_runs(
    X: torch.Tensor, y: torch.Tensor, loss_fn: nn.Module, config: dict[str, Any]
) -> dict[str, Any]:
    """FSDP2 without a policy, skipping the gradient sync between micro-batches or not."""
    steps, n_accum, lr = config["steps"], config["n_accum"], config["lr"]
    accumulation = {}
    for name, skip in (
        ("FSDP2, set_requires_gradient_sync", True),
        ("FSDP2, sync every micro-batch", False),
    ):
        model = worker_model(config["seed"])
        _, scatter = shard_model(model, MixedPrecisionPolicy())
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        for _ in range(steps):
            train_fsdp_accumulated(model, optimizer, X, y, loss_fn, n_accum, skip_sync=skip)
        accumulation[name] = {
            "reductions per step": len(scatter.dtypes) // steps,
            "params": _full_params(model),
        }
    return accumulation


def _bf16_reduction_runs(
    X: torch.Tensor, y: torch.Tensor, loss_fn: nn.Module, config: dict[str, Any]
) -> dict[str, Any]:
    """The runs of :data:`BF16_REDUCTION`: the first gradient each step applies."""
    steps, n_accum, lr = config["steps"], config["n_accum"], config["lr"]
    bf16_reduction = {}
    for name, (reduce_dtype, skip) in BF16_REDUCTION.items():
        policy = MixedPrecisionPolicy(
            param_dtype=torch.bfloat16, reduce_dtype=getattr(torch, reduce_dtype)
        )
        model = worker_model(config["seed"])
        _, scatter = shard_model(model, policy)
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        first: dict[str, Any] = {}

        def keep_first(opt: Any, args: Any, kwargs: Any, model=model, first=first) -> None:
            if not first:  # the gradients the first step is about to apply
                for pname, param in model.named_parameters():
                    first[pname] = param.grad.to_local().tolist()

        optimizer.register_step_pre_hook(keep_first)
        for _ in range(steps):
            train_fsdp_accumulated(model, optimizer, X, y, loss_fn, n_accum, skip_sync=skip)
        bf16_reduction[name] = {
            "first gradient": first,
            "reductions per step": len(scatter.dtypes) // steps,
            "params": _full_params(model),
        }
    return bf16_reduction


def _ddp_run(
    X: torch.Tensor, y: torch.Tensor, loss_fn: nn.Module, config: dict[str, Any]
) -> dict[str, Any]:
    """DDP with ``no_sync()``: its reductions per step and the parameters it ends with."""
    steps, n_accum, lr = config["steps"], config["n_accum"], config["lr"]
    ddp = nn.parallel.DistributedDataParallel(worker_model(config["seed"]))
    counter = CallCounter()
    ddp.register_comm_hook(counter, counting_allreduce_hook)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=lr)
    for _ in range(steps):
        micro = list(zip(X.tensor_split(n_accum), y.tensor_split(n_accum), strict=True))
        for i, (xb, yb) in enumerate(micro):
            with ddp.no_sync() if i < n_accum - 1 else nullcontext():
                (loss_fn(ddp(xb), yb) / n_accum).backward()
        optimizer.step()
        optimizer.zero_grad()
    result = {
        "reductions per step": len(counter.calls) // steps,
        "params": {k: v.detach().tolist() for k, v in ddp.module.named_parameters()},
    }
    return result


def _fsdp_worker(
    rank: int, world_size: int, port: int, out_dir: str, config: dict[str, Any]
) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size
    )
    try:
        X, y = rank_shard(world_size, rank)
        loss_fn = nn.BCEWithLogitsLoss()
        policies = _policy_runs(X, y, loss_fn, config)
        accumulation = _accumulation_runs(X, y, loss_fn, config)
        bf16_reduction = _bf16_reduction_runs(X, y, loss_fn, config)
        accumulation["DDP, no_sync"] = _ddp_run(X, y, loss_fn, config)
        if rank == 0:
            Path(out_dir, "rank0.json").write_text(
                json.dumps(
                    {
                        "policies": policies,
                        "accumulation": accumulation,
                        "bf16_reduction": bf16_reduction,
                    }
                )
            )
    finally:
        dist.destroy_process_group()


def run_fsdp(
    world_size: int = 2,
    n_accum: int = 4,
    *,
    steps: int = 2,
    lr: float = 0.1,
    seed: int = 0,
    start_method: str = "forkserver",
) -> FSDPRun:
    """Train the toy problem's MLP with FSDP2 on ``world_size`` CPU processes (gloo).

    One launch runs every policy of :data:`POLICIES` (accumulating
    ``n_accum`` micro-batches per step with ``set_requires_gradient_sync``),
    then FSDP2 without a policy with and without skipping the sync, the runs
    of :data:`BF16_REDUCTION`, and DDP with ``no_sync()``, counting the
    reductions of each.

    Parameters
    ----------
    world_size : int, default 2
        Processes.
    n_accum : int, default 4
        Micro-batches per rank and step.
    steps : int, default 2
        Optimizer steps (SGD).
    lr : float, default 0.1
        Learning rate.
    seed : int, default 0
        Seed of the model.
    start_method : {"forkserver", "spawn"}, default "forkserver"
        How the processes start (:func:`amp_lesson.distributed.start_ranks`).

    Returns
    -------
    FSDPRun
        What rank 0 saw.

    Raises
    ------
    ValueError
        If a setting is out of range.
    """
    check_int("world_size", world_size, minimum=2)
    check_int("n_accum", n_accum, minimum=1)
    check_int("steps", steps, minimum=1)
    check_positive("lr", lr)
    check_seed("seed", seed)
    check_choice("start_method", start_method, START_METHODS)
    X, _ = make_toy_problem(device="cpu")
    if len(X) // world_size < n_accum:
        raise ValueError(
            f"each of the {world_size} ranks holds {len(X) // world_size} samples, "
            f"fewer than n_accum={n_accum}; lower n_accum or world_size"
        )
    config = {"n_accum": n_accum, "steps": steps, "lr": lr, "seed": seed}
    with tempfile.TemporaryDirectory(prefix="amp_lesson_fsdp_") as out_dir:
        start_ranks(
            _fsdp_worker, (world_size, free_port(), out_dir, config), world_size, start_method
        )
        raw = json.loads(Path(out_dir, "rank0.json").read_text())
    return FSDPRun(
        world_size, n_accum, steps, raw["policies"], raw["accumulation"], raw["bf16_reduction"]
    )
