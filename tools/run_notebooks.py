"""Execute notebooks with nbclient, a few at a time, and report which ones fail.

Meant to run inside an environment that has only what a reader has: the
package, its dependencies, nbclient and ipykernel (``tests/test_notebooks.py``
makes one from the wheel). Each notebook runs in a fresh kernel in the
current working directory; nothing is written back.

    python tools/run_notebooks.py [--jobs N] [--timeout S] NOTEBOOK ...

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


def run_one(path: Path, timeout: int) -> tuple[Path, float, str | None]:
    """Execute ``path``; return it, the seconds taken and the error (``None`` on success)."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    try:
        NotebookClient(nb, timeout=timeout, kernel_name="python3").execute()
    except Exception as error:  # noqa: BLE001  (any failure is reported, not raised)
        return path, time.perf_counter() - start, f"{type(error).__name__}: {error}"
    return path, time.perf_counter() - start, None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=int, default=300, help="seconds per cell")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be >= 1")
    failures = 0
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for path, seconds, error in pool.map(
            partial(run_one, timeout=args.timeout), args.notebooks
        ):
            status = "ok" if error is None else "FAILED"
            print(f"{status:<7}{seconds:7.1f} s  {path}", flush=True)
            if error is not None:
                failures += 1
                print(error[-4000:], flush=True)
    print(f"{len(args.notebooks) - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
