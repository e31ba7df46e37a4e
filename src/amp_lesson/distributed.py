"""Gradient accumulation under :class:`~torch.nn.parallel.DistributedDataParallel`.

DDP keeps one model replica per process and all-reduces (averages) the
gradients during ``backward()``, bucket by bucket. With gradient accumulation
that averaging is only needed once per optimizer step, on the last
micro-batch: the gradient is a sum, and the average of sums equals the sum of
averages. ``model.no_sync()`` (or, as nanoGPT does, setting
``model.require_backward_grad_sync = False``) turns the all-reduce off for the
micro-batches before the boundary.

The book runs this for real with two CPU processes on the ``gloo`` backend.
This module holds

- :func:`train_ddp_accumulated` -- the loop a rank runs, written to be copied;
- :class:`CallCounter` and :func:`counting_allreduce_hook` -- a DDP
  communication hook that counts the all-reduce calls and then does exactly
  what DDP's default does (``allreduce_hook``);
- :func:`run_ddp_accumulation` -- launches ``world_size`` processes, runs the
  loop once per sync mode (:data:`SYNC_MODES`) in each, and returns plain
  Python results as a :class:`DDPRun`;
- :func:`reference_full_batch` -- the single-process full-batch run the DDP
  runs must reproduce;
- :func:`free_port` -- a free TCP port on 127.0.0.1 for the rendezvous.

Worker functions live here, in an importable module, because the
``forkserver`` and ``spawn`` start methods pickle them by name: a function
defined in a notebook cell cannot be found by the child process. Children send back lists and floats
(written as JSON), never tensors.

(No ``from __future__ import annotations`` here: DDP checks a hook's
annotations at registration and rejects them as strings.)

Why this module is long: the start methods pickle workers by name, so the rank's
loop, the worker and the launcher must share one importable module; half of it is docstrings.
"""

import json
import multiprocessing
import socket
import tempfile
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

from amp_lesson._checks import check_choice, check_int, check_positive, check_seed
from amp_lesson.accumulation import make_toy_problem, train_full_batch
from amp_lesson.models import make_mlp
from amp_lesson.scaler import step_skipped

__all__ = [
    "START_METHODS",
    "SYNC_MODES",
    "CallCounter",
    "DDPRun",
    "ModeResult",
    "counting_allreduce_hook",
    "free_port",
    "reference_full_batch",
    "run_ddp_accumulation",
    "start_ranks",
    "train_ddp_accumulated",
]

SYNC_MODES: tuple[str, ...] = (
    "every_micro_batch",
    "no_sync",
    "require_backward_grad_sync",
    "forward_outside_no_sync",
)
"""How :func:`train_ddp_accumulated` treats the micro-batches before the boundary.

- ``"every_micro_batch"``: nothing special; DDP all-reduces after every
  micro-batch's backward (correct, but ``n_accum`` times the communication);
- ``"no_sync"``: the forward and backward of those micro-batches run inside
  ``with model.no_sync():``, so only the last one all-reduces;
- ``"require_backward_grad_sync"``: nanoGPT's equivalent, the flag that
  ``no_sync()`` toggles, set to ``True`` only on the last micro-batch;
- ``"forward_outside_no_sync"``: the mistake the ``no_sync()`` docstring
  warns about: only ``backward()`` inside the context, the forward pass
  outside it. DDP arms the all-reduce during the forward pass, so every
  micro-batch still synchronizes.
"""


# --------------------------------------------------------------------------- pieces


START_METHODS: tuple[str, ...] = ("forkserver", "spawn")
"""How :func:`start_ranks` may start processes; both begin from a fresh interpreter."""


def start_ranks(worker: Any, args: tuple[Any, ...], nprocs: int, start_method: str) -> None:
    """Run ``worker(rank, *args)`` in ``nprocs`` new processes and wait for all of them.

    ``"forkserver"`` starts one server process, which imports ``worker``'s
    module (and so torch) once, and forks every rank from it; ``"spawn"``
    starts each rank from a fresh interpreter that imports them again, which
    costs seconds of CPU per rank. Either way the parent is never forked, so a
    Jupyter kernel's threads cannot deadlock a child.

    Parameters
    ----------
    worker : callable
        A module-level function ``worker(rank, *args)``, importable by name.
    args : tuple
        Its other arguments (picklable).
    nprocs : int
        Processes to start.
    start_method : {"forkserver", "spawn"}
        See :data:`START_METHODS`.

    Raises
    ------
    ValueError
        If ``start_method`` is not one of :data:`START_METHODS`.
    torch.multiprocessing.ProcessRaisedException
        If a rank raised; its traceback is in the message.
    """
    check_choice("start_method", start_method, START_METHODS)
    if start_method == "forkserver":
        # The server imports the worker's module once; a server already running keeps its own.
        multiprocessing.set_forkserver_preload([worker.__module__])
    torch.multiprocessing.start_processes(
        worker, args=args, nprocs=nprocs, join=True, start_method=start_method
    )


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago (for ``init_method``).

    Returns
    -------
    int
        The port number.

    Examples
    --------
    >>> 0 < free_port() < 65536
    True
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class CallCounter:
    """The state of :func:`counting_allreduce_hook`: one entry per call.

    Parameters
    ----------
    process_group : object, optional
        Passed on to ``allreduce_hook`` (``None``: the default group).
    calls : list of int
        The index of the gradient bucket each call reduced.

    Examples
    --------
    >>> c = CallCounter()
    >>> c.calls.extend([0, 1, 0, 1]); len(c.calls), c.buckets
    (4, 2)
    """

    process_group: Any = None
    calls: list[int] = field(default_factory=list)

    @property
    def buckets(self) -> int:
        """How many distinct buckets have been reduced so far."""
        return len(set(self.calls))


def counting_allreduce_hook(
    state: CallCounter, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """Count the call, then do DDP's default all-reduce (a communication hook).

    Register it with ``ddp_model.register_comm_hook(CallCounter(),
    counting_allreduce_hook)``. DDP calls it once per gradient bucket each
    time it synchronizes; ``allreduce_hook`` divides the bucket by the world
    size and all-reduces it, which is what DDP does without a hook.

    Parameters
    ----------
    state : CallCounter
        Where the call is counted.
    bucket : torch.distributed.GradBucket
        The bucket DDP hands over.

    Returns
    -------
    torch.futures.Future
        The all-reduced bucket, as ``allreduce_hook`` returns it.
    """
    state.calls.append(bucket.index())  # one call per bucket and sync
    return allreduce_hook(state.process_group, bucket)


# --------------------------------------------------------------------------- the loop


def train_ddp_accumulated(
    model: nn.parallel.DistributedDataParallel,
    optimizer: torch.optim.Optimizer,
    X: torch.Tensor,
    y: torch.Tensor,
    loss_fn: Any,
    n_accum: int,
    *,
    steps: int = 1,
    sync: str = "no_sync",
) -> None:
    """Run gradient accumulation on one DDP rank, over its shard ``X, y``.

    Every rank runs this on its own shard of the global batch, cut into
    ``n_accum`` micro-batches. Each micro-batch's loss is divided by
    ``n_accum``; DDP's all-reduce averages over the ranks, so the
    synchronized gradient is that of the global mean loss.

    Parameters
    ----------
    model : torch.nn.parallel.DistributedDataParallel
        The wrapped model.
    optimizer : torch.optim.Optimizer
        Its optimizer.
    X, y : torch.Tensor
        This rank's shard.
    loss_fn : callable
        A mean loss, ``loss_fn(output, target)``.
    n_accum : int
        Micro-batches per optimizer step.
    steps : int, default 1
        Optimizer steps.
    sync : str, default "no_sync"
        One of :data:`SYNC_MODES`.

    Raises
    ------
    ValueError
        If ``sync`` is unknown.
    """
    check_choice("sync", sync, SYNC_MODES)
    optimizer.zero_grad()
    for _ in range(steps):
        xs, ys = X.tensor_split(n_accum), y.tensor_split(n_accum)
        for i, (xb, yb) in enumerate(zip(xs, ys, strict=True)):
            last = i == n_accum - 1
            if sync == "require_backward_grad_sync":
                model.require_backward_grad_sync = last  # nanoGPT's way
            if sync == "forward_outside_no_sync" and not last:
                loss = loss_fn(model(xb), yb) / n_accum  # WRONG: outside
                with model.no_sync():
                    loss.backward()  # still all-reduces: forward armed it
                continue
            quiet = sync == "no_sync" and not last
            # forward AND backward inside no_sync()
            with model.no_sync() if quiet else nullcontext():
                loss = loss_fn(model(xb), yb) / n_accum
                loss.backward()  # all-reduces only when synchronizing
        optimizer.step()
        optimizer.zero_grad()


# --------------------------------------------------------------------------- launching


@dataclass(frozen=True)
class ModeResult:
    """What one sync mode did on rank 0, as plain Python values.

    Parameters
    ----------
    mode : str
        One of :data:`SYNC_MODES`.
    calls_per_step : tuple of int
        All-reduce calls (one per bucket per synchronization) in each optimizer step.
    buckets : int
        Gradient buckets DDP made.
    params : dict
        The final parameters as nested lists.
    ranks_agree : bool
        Whether every rank ended with bitwise the same parameters.
    """

    mode: str
    calls_per_step: tuple[int, ...]
    buckets: int
    params: dict[str, Any]
    ranks_agree: bool

    def tensors(self) -> dict[str, torch.Tensor]:
        """Return the final parameters as float32 tensors.

        Returns
        -------
        dict of str to torch.Tensor
            By parameter name, for :func:`~amp_lesson.accumulation.compare_params`.
        """
        return {name: torch.tensor(v, dtype=torch.float32) for name, v in self.params.items()}


@dataclass(frozen=True)
class DDPRun:
    """The results of :func:`run_ddp_accumulation`.

    Parameters
    ----------
    world_size : int
        Processes.
    n_accum : int
        Micro-batches per rank and step.
    steps : int
        Optimizer steps.
    micro_batch_size : int
        Samples per micro-batch.
    results : dict of str to ModeResult
        One per sync mode.
    scaler_check : list of dict, optional
        With ``poison_rank``: per rank, what it saw in the AMP step.
    """

    world_size: int
    n_accum: int
    steps: int
    micro_batch_size: int
    results: dict[str, ModeResult]
    scaler_check: list[dict[str, Any]] | None = None


def worker_model(seed: int) -> nn.Sequential:
    """The model every run trains: ``Linear(2, 8) -> ReLU -> Linear(8, 1)``, seeded."""
    return make_mlp(2, 8, 1, seed=seed, device="cpu")


def rank_shard(world_size: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    X, y = make_toy_problem(device="cpu")
    return X.tensor_split(world_size)[rank], y.tensor_split(world_size)[rank]


def _params_as_lists(model: nn.Module) -> dict[str, Any]:
    return {name: p.detach().tolist() for name, p in model.named_parameters()}


def _poisoned_amp_step(
    rank: int, X: torch.Tensor, y: torch.Tensor, config: dict[str, Any]
) -> dict[str, Any]:
    """One fp16 AMP step with accumulation and ``no_sync``, NaN in rank ``poison_rank``'s data.

    Each rank has its own ``GradScaler("cpu")``. Returns what this rank saw:
    whether its own loss was finite, whether its (scaled, all-reduced)
    gradients were, and whether its scaler skipped the step.
    """
    model = nn.parallel.DistributedDataParallel(worker_model(config["seed"]))
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"])
    scaler = torch.amp.GradScaler("cpu")
    X = X.clone()
    if rank == config["poison_rank"]:
        X[0, 0] = float("nan")
    n_accum, losses_finite = config["n_accum"], True
    micro = list(zip(X.tensor_split(n_accum), y.tensor_split(n_accum), strict=True))
    for i, (xb, yb) in enumerate(micro):
        with model.no_sync() if i < n_accum - 1 else nullcontext():
            with torch.autocast("cpu", dtype=torch.float16):
                loss = nn.BCEWithLogitsLoss()(model(xb), yb) / n_accum
            scaler.scale(loss).backward()
        losses_finite = losses_finite and bool(torch.isfinite(loss.detach()))
    grads_finite = all(bool(torch.isfinite(p.grad).all()) for p in model.parameters())
    skipped = step_skipped(scaler, optimizer)
    scaler.update()
    return {
        "rank": rank,
        "NaN in this rank's data": rank == config["poison_rank"],
        "own loss finite": losses_finite,
        "gradients finite after the all-reduce": grads_finite,
        "step skipped": skipped,
        "scale after": scaler.get_scale(),
    }


def _ddp_worker(
    rank: int,
    world_size: int,
    port: int,
    out_dir: str,
    config: dict[str, Any],
) -> None:
    """One process: join the group, run every mode, write rank ``rank``'s results as JSON."""
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size
    )
    try:
        X, y = rank_shard(world_size, rank)
        results = {}
        for mode in config["modes"]:
            model = nn.parallel.DistributedDataParallel(
                worker_model(config["seed"]), bucket_cap_mb=config["bucket_cap_mb"]
            )
            counter = CallCounter()
            model.register_comm_hook(counter, counting_allreduce_hook)
            optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"])
            calls_per_step = []
            for _ in range(config["steps"]):
                before = len(counter.calls)
                train_ddp_accumulated(
                    model, optimizer, X, y, nn.BCEWithLogitsLoss(), config["n_accum"], sync=mode
                )
                calls_per_step.append(len(counter.calls) - before)
            params = _params_as_lists(model.module)
            gathered: list[Any] = [None] * world_size
            dist.all_gather_object(gathered, params)
            results[mode] = {
                "calls_per_step": calls_per_step,
                "buckets": counter.buckets,
                "params": params,
                "ranks_agree": all(g == params for g in gathered),
            }
        if config["poison_rank"] is not None:
            results["_scaler_check"] = _poisoned_amp_step(rank, X, y, config)
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(results))
    finally:
        dist.destroy_process_group()


def run_ddp_accumulation(
    world_size: int = 2,
    n_accum: int = 4,
    *,
    steps: int = 2,
    modes: Sequence[str] = SYNC_MODES,
    lr: float = 0.1,
    seed: int = 0,
    bucket_cap_mb: float | None = None,
    poison_rank: int | None = None,
    start_method: str = "forkserver",
) -> DDPRun:
    """Train a small MLP on the toy problem with DDP: ``world_size`` CPU processes, gloo.

    The toy problem's 128 samples are split into ``world_size`` contiguous
    shards, and each rank cuts its shard into ``n_accum`` micro-batches. Every
    mode trains a fresh model with :func:`train_ddp_accumulated`, counting
    all-reduce calls with :func:`counting_allreduce_hook`. One launch runs all
    modes, because starting the processes is the slow part (seconds: each
    imports torch).

    Parameters
    ----------
    world_size : int, default 2
        Processes.
    n_accum : int, default 4
        Micro-batches per rank and step.
    steps : int, default 2
        Optimizer steps (SGD).
    modes : sequence of str, default SYNC_MODES
        The sync modes to run.
    lr : float, default 0.1
        Learning rate.
    seed : int, default 0
        Seed of the model.
    bucket_cap_mb : float, optional
        DDP's bucket size (default DDP's).
    poison_rank : int, optional
        Then each rank also runs one fp16 AMP step (accumulation with
        ``no_sync``, its own ``GradScaler("cpu")``) in which only that rank's
        data holds a NaN; ``DDPRun.scaler_check`` says what each rank saw.
    start_method : {"forkserver", "spawn"}, default "forkserver"
        Both start the ranks from a fresh interpreter and work in a Jupyter
        kernel, since the worker is importable from this module (see
        :func:`start_ranks`). ``"fork"`` is refused: forking a parent that
        already runs threads (a Jupyter kernel, torch's intra-op pool, a test
        runner) can deadlock, and did in this project's tests.

    Returns
    -------
    DDPRun
        Rank 0's results per mode.

    Raises
    ------
    ValueError
        If a setting is out of range (``seed``: ``[0, 2**64 - 1]``), a mode unknown, or a
        rank would hold fewer samples than ``n_accum``.
    """
    check_int("world_size", world_size, minimum=1)
    check_int("n_accum", n_accum, minimum=1)
    check_int("steps", steps, minimum=1)
    check_positive("lr", lr)
    check_seed("seed", seed)
    if bucket_cap_mb is not None:
        check_positive("bucket_cap_mb", bucket_cap_mb)
    check_choice("start_method", start_method, START_METHODS)
    modes = tuple(modes)
    if not modes:
        raise ValueError(f"modes must name at least one of {SYNC_MODES}, got none")
    for mode in modes:
        check_choice("mode", mode, SYNC_MODES)
    if poison_rank is not None:
        check_int("poison_rank", poison_rank, minimum=0)
        if poison_rank >= world_size:
            raise ValueError(f"poison_rank must be < world_size={world_size}, got {poison_rank}")
    X, _ = make_toy_problem(device="cpu")
    if len(X) // world_size < n_accum:
        raise ValueError(
            f"each of the {world_size} ranks holds {len(X) // world_size} samples, "
            f"fewer than n_accum={n_accum}; lower n_accum or world_size"
        )
    config = {
        "modes": list(modes),
        "n_accum": n_accum,
        "steps": steps,
        "lr": lr,
        "seed": seed,
        "bucket_cap_mb": bucket_cap_mb,
        "poison_rank": poison_rank,
    }
    with tempfile.TemporaryDirectory(prefix="amp_lesson_ddp_") as out_dir:
        start_ranks(
            _ddp_worker, (world_size, free_port(), out_dir, config), world_size, start_method
        )
        raw = json.loads(Path(out_dir, "rank0.json").read_text())
        scaler_check = None
        if poison_rank is not None:
            scaler_check = [
                json.loads(Path(out_dir, f"rank{r}.json").read_text())["_scaler_check"]
                for r in range(world_size)
            ]
            del raw["_scaler_check"]
    results = {
        mode: ModeResult(
            mode=mode,
            calls_per_step=tuple(r["calls_per_step"]),
            buckets=r["buckets"],
            params=r["params"],
            ranks_agree=r["ranks_agree"],
        )
        for mode, r in raw.items()
    }
    micro = len(X.tensor_split(world_size)[0].tensor_split(n_accum)[0])
    return DDPRun(world_size, n_accum, steps, micro, results, scaler_check)


def reference_full_batch(steps: int = 2, lr: float = 0.1, seed: int = 0) -> dict[str, torch.Tensor]:
    """Return the single-process run DDP must reproduce: full batch of 128, ``steps`` SGD steps.

    Parameters
    ----------
    steps : int, default 2
        Optimizer steps.
    lr : float, default 0.1
        Learning rate.
    seed : int, default 0
        Seed of the model.

    Returns
    -------
    dict of str to torch.Tensor
        The final parameters by name.

    Examples
    --------
    >>> ref = reference_full_batch(steps=1)
    >>> sorted(ref)
    ['0.bias', '0.weight', '2.bias', '2.weight']
    """
    check_seed("seed", seed)
    X, y = make_toy_problem(device="cpu")
    model = worker_model(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=check_positive("lr", lr))
    return train_full_batch(model, optimizer, X, y, nn.BCEWithLogitsLoss(), steps=steps).params
