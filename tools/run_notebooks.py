"""Execute notebooks with nbclient, a few at a time, and report which ones fail.

Meant to run inside an environment that has only what a reader has: the
package, its dependencies, nbclient and ipykernel (``tests/test_notebooks.py``
makes one from the wheel). Each notebook runs in a fresh kernel in the
current working directory; nothing is written back (``--out DIR`` writes
each executed notebook to ``DIR/<n>-<name>``, numbered in the order given).

    python tools/run_notebooks.py [--jobs N] [--timeout S] [--out DIR] NOTEBOOK ...

Exit status 0 when every notebook ran to the end, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path


def _cell_seconds(cell: dict) -> float:
    """How long a cell ran, from the timestamps nbclient records."""
    from datetime import datetime

    timing = cell.get("metadata", {}).get("execution", {})
    try:
        start = datetime.fromisoformat(timing["iopub.execute_input"].replace("Z", "+00:00"))
        end = datetime.fromisoformat(timing["shell.execute_reply"].replace("Z", "+00:00"))
    except (KeyError, ValueError):
        return 0.0
    return (end - start).total_seconds()


def run_one(
    job: tuple[int, Path], timeout: int, out: Path | None
) -> tuple[Path, float, str | None, list[tuple[float, str]]]:
    """Execute the notebook ``job`` names (its number, its path); return its path, the seconds
    taken, the error (``None`` on success) and each code cell's seconds with its first line."""
    number, path = job
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    error = None
    try:
        NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=True).execute()
    except Exception as exc:  # noqa: BLE001  (any failure is reported, not raised)
        error = f"{type(exc).__name__}: {exc}"
    if out is not None:
        nbformat.write(nb, out / f"{number}-{path.name}")
    cells = [
        (_cell_seconds(c), c["source"].strip().splitlines()[0] if c["source"].strip() else "")
        for c in nb.cells
        if c.cell_type == "code"
    ]
    return path, time.perf_counter() - start, error, cells


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=int, default=300, help="seconds per cell")
    parser.add_argument("--out", type=Path, help="write the executed notebooks here")
    parser.add_argument(
        "--slowest-cells", type=int, default=0, help="also print each notebook's N slowest cells"
    )
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be >= 1")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
    failures = 0
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for path, seconds, error, cells in pool.map(
            partial(run_one, timeout=args.timeout, out=args.out), enumerate(args.notebooks)
        ):
            status = "ok" if error is None else "FAILED"
            print(f"{status:<7}{seconds:7.1f} s  {path}", flush=True)
            for cell_seconds, first_line in sorted(cells, reverse=True)[: args.slowest_cells]:
                print(f"{'':7}{cell_seconds:7.1f} s    {first_line[:70]}", flush=True)
            if error is not None:
                failures += 1
                print(error[-4000:], flush=True)
    print(f"{len(args.notebooks) - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
