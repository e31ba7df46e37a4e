"""The command line: ``python -m amp_lesson.bench [--record [--out PATH]]``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import torch

from amp_lesson.bench.measure import BenchRow, run_benchmarks
from amp_lesson.bench.recording import DEFAULT_FOLDER, Recording, record, write_recording
from amp_lesson.bench.tables import bench_table
from amp_lesson.bench.workload import BenchSizes, bench_sizes
from amp_lesson.device import device_name, get_device

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Print the live table, or ``--record`` a GPU's results.

    ``python -m amp_lesson.bench`` measures on the book's device and prints
    the table. ``--record [--out PATH]`` (CUDA only) writes the recording,
    by default to ``docs/_data/gpu/<gpu>.json``.

    Parameters
    ----------
    argv : sequence of str, optional
        The arguments (default: the command line's).

    Returns
    -------
    int
        0 on success.

    Raises
    ------
    SystemExit
        With status 2 on bad arguments, or ``--record`` on a machine without CUDA.
    """
    parser = argparse.ArgumentParser(
        prog="python -m amp_lesson.bench",
        description="Measure what mixed precision buys on this device; --record saves a GPU's "
        "results for the book.",
    )
    parser.add_argument("--record", action="store_true", help="on CUDA: write the JSON recording")
    parser.add_argument(
        "--out", type=Path, default=None,
        help=f"where --record writes (default: {DEFAULT_FOLDER}/<gpu name>.json)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.out is not None and not args.record:
        parser.error("--out only makes sense with --record")
    try:
        device = get_device()
    except RuntimeError as error:  # AMP_LESSON_DEVICE=cuda on a machine without one
        parser.exit(2, f"error: {error}\n")
    if args.record:
        if device.type != "cuda":
            parser.exit(
                2,
                f"error: --record needs a CUDA GPU, but the device is {device.type!r} "
                f"(torch {torch.__version__}, torch.cuda.is_available() = "
                f"{torch.cuda.is_available()}). A recording holds GPU numbers only; run it on a "
                "CUDA machine (tools/gpu_check.sh).\n",
            )
        data = record(device)
        path = write_recording(data, args.out)
        print(Recording(path, data["provenance"], BenchSizes(**data["sizes"])).describe())
        print(bench_table([BenchRow(**r) for r in data["rows"]]))
        print(f"wrote {path}")
        return 0
    print(f"{device_name(device)}, sizes {bench_sizes(device).as_dict()}")
    print(bench_table(run_benchmarks(device)))
    return 0
