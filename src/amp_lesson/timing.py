"""How the book times code: one timer, and one matrix-product benchmark built on it.

A time is only worth showing if it was taken the same way everywhere. So
every timing in the book goes through :func:`time_calls`: untimed warm-up
calls first (the first call of a kernel pays for allocation, autotuning and
caches), then rounds in which each call runs once in turn. On CUDA a call is
bracketed by CUDA events and the device is synchronised before the times are
read, because kernels run asynchronously and the host's clock would measure
only the launch; on the CPU :func:`time.perf_counter` brackets it. Taking
turns means that a burst of load from other programs on a shared machine
slows every call alike, instead of the one whose block it hit.

>>> calls = {"sum": lambda: sum(range(1000))}
>>> timings = time_calls(calls, "cpu", warmup=1, repeats=3)
>>> timing = timings["sum"]
>>> timing.method, len(timing.times_ms), timing.median > 0
('perf_counter', 3, True)
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from amp_lesson._checks import check_int
from amp_lesson.device import resolve_device

__all__ = ["Timing", "matmul_times", "one_thread", "time_calls"]

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Timing:
    """The timed runs of one call, in milliseconds.

    Parameters
    ----------
    times_ms : tuple of float
        One time per timed run, in the order they ran.
    method : str
        ``"cuda_events"`` or ``"perf_counter"``: what bracketed each run.

    Examples
    --------
    >>> t = Timing((2.0, 1.0, 5.0), "perf_counter")
    >>> t.median, t.min, t.max
    (2.0, 1.0, 5.0)
    """

    times_ms: tuple[float, ...]
    method: str

    @property
    def median(self) -> float:
        """The median time in ms, the book's headline figure (robust to a few slow runs)."""
        return statistics.median(self.times_ms)

    @property
    def min(self) -> float:
        """The fastest time in ms, the run least disturbed by other work on the machine."""
        return min(self.times_ms)

    @property
    def max(self) -> float:
        """The slowest time in ms."""
        return max(self.times_ms)


def time_calls(
    calls: Mapping[K, Callable[[], Any]],
    device: torch.device | str | None = None,
    *,
    warmup: int = 1,
    repeats: int = 7,
) -> dict[K, Timing]:
    """Time each of ``calls`` ``repeats`` times, the calls taking turns.

    Parameters
    ----------
    calls : mapping of key to callable
        Functions of no arguments; each is timed as a whole.
    device : torch.device or str, optional
        The device the calls run on: it decides between CUDA events and
        :func:`time.perf_counter`.
    warmup : int, default 1
        Untimed calls of each function before the first timed round (``>= 0``).
    repeats : int, default 7
        Timed rounds (``>= 1``); each round runs every call once, in the
        order of ``calls``.

    Returns
    -------
    dict
        A :class:`Timing` per key of ``calls``, in their order.

    Raises
    ------
    TypeError
        If ``calls`` is not a mapping of callables.
    ValueError
        If ``calls`` is empty or ``warmup``/``repeats`` are out of range.

    Examples
    --------
    >>> t = time_calls({"a": lambda: None, "b": lambda: None}, "cpu", repeats=2)
    >>> list(t), [len(x.times_ms) for x in t.values()]
    (['a', 'b'], [2, 2])
    """
    if not isinstance(calls, Mapping) or not all(callable(f) for f in calls.values()):
        raise TypeError(f"calls must be a mapping of functions of no arguments, got {calls!r}")
    if not calls:
        raise ValueError("calls must hold at least one function")
    check_int("warmup", warmup, minimum=0)
    check_int("repeats", repeats, minimum=1)
    device = resolve_device(device)
    for call in calls.values():
        for _ in range(warmup):
            call()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        events: dict[K, list[tuple[Any, Any]]] = {key: [] for key in calls}
        for _ in range(repeats):
            for key, call in calls.items():
                start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                start.record()
                call()
                end.record()
                events[key].append((start, end))
        torch.cuda.synchronize(device)
        return {
            key: Timing(tuple(s.elapsed_time(e) for s, e in pairs), "cuda_events")
            for key, pairs in events.items()
        }
    times: dict[K, list[float]] = {key: [] for key in calls}
    for _ in range(repeats):
        for key, call in calls.items():
            t0 = time.perf_counter()
            call()
            times[key].append((time.perf_counter() - t0) * 1e3)
    return {key: Timing(tuple(ts), "perf_counter") for key, ts in times.items()}


@contextmanager
def one_thread() -> Iterator[None]:
    """Run torch's CPU kernels on one thread inside the block, and restore the count after.

    On a busy machine, waking a thread pool for a small kernel (a 256 x 256
    product, a 128 x 2 linear layer) costs more than the kernel, and a loop
    of many such steps would mostly wait. Results do not depend on it; only
    times do.

    Yields
    ------
    None
        Inside the block ``torch.get_num_threads() == 1``.

    Examples
    --------
    >>> before = torch.get_num_threads()
    >>> with one_thread():
    ...     torch.get_num_threads()
    1
    >>> torch.get_num_threads() == before
    True
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def matmul_times(
    n: int = 256,
    dtypes: Sequence[torch.dtype] = (torch.float32, torch.bfloat16, torch.float16),
    device: torch.device | str | None = None,
    *,
    warmup: int = 2,
    repeats: int = 9,
) -> dict[torch.dtype, Timing]:
    """Time one ``n x n`` by ``n x n`` matrix product in each of ``dtypes``.

    The operands are the same random matrices (seeded) cast to each dtype,
    and the dtypes take turns (:func:`time_calls`). On the CPU the products
    run on one thread (:func:`one_thread`), so that other work on a shared
    machine disturbs them less. Compare the dtypes of one run with each
    other rather than runs on different machines; the fastest time
    (:attr:`Timing.min`) is the least disturbed.

    Parameters
    ----------
    n : int, default 256
        Size of the square matrices.
    dtypes : sequence of torch.dtype
        Floating-point dtypes to time, in order.
    device : torch.device or str, optional
        Where the product runs.
    warmup : int, default 2
        Untimed products of each dtype first.
    repeats : int, default 9
        Timed products of each dtype.

    Returns
    -------
    dict
        A :class:`Timing` per dtype, in the order of ``dtypes``.

    Raises
    ------
    TypeError
        If a dtype is not a floating-point torch dtype.
    ValueError
        If ``n``, ``warmup`` or ``repeats`` are out of range, or ``dtypes`` is empty.

    Examples
    --------
    >>> t = matmul_times(32, (torch.float32, torch.bfloat16), "cpu", repeats=2)
    >>> [str(d) for d in t], all(x.min > 0 for x in t.values())
    (['torch.float32', 'torch.bfloat16'], True)
    """
    check_int("n", n, minimum=1)
    dtypes = list(dtypes)
    for dtype in dtypes:
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"dtypes must hold floating-point torch.dtypes, got {dtype!r}")
    if not dtypes:
        raise ValueError("dtypes must name at least one dtype")
    device = resolve_device(device)
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
    operands = {dt: (a.to(device, dt), b.to(device, dt)) for dt in dtypes}
    calls = {dt: (lambda x=x, y=y: torch.mm(x, y)) for dt, (x, y) in operands.items()}
    if device.type == "cpu":
        with one_thread():
            return time_calls(calls, device, warmup=warmup, repeats=repeats)
    return time_calls(calls, device, warmup=warmup, repeats=repeats)
