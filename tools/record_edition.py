"""Record the book as this machine runs it: a stored edition, ``docs/_editions/<device>/``.

    python tools/record_edition.py [--device cuda|cpu] [--into DIR] [--out HTML]

Builds the book with every page executed here on ``--device`` (default
``cuda``: the edition a CPU build cannot make itself), then stores each page's
run with its provenance (:func:`amp_book.edition.store.record`). A page
whose cells fail is stored as not run, with why. Every later build of the book,
on any machine, renders the stored edition beside its own (``editions/<device>/``).
Commit the folder it names. ``nox -s gpu-edition`` runs this;
``tools/gpu_check.sh`` does too, on a lent GPU.
"""

from __future__ import annotations

import argparse
import os
import runpy
import shutil
import sys
import time
from pathlib import Path

from build_book import DOCS, HTML, run_to_the_end, sphinx_command


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--into", type=Path, default=DOCS / "_editions")
    parser.add_argument("--out", type=Path, default=HTML, help="where the build goes")
    args = parser.parse_args(argv)

    # The pages run on the device asked for, or fail: no quiet fallback to the CPU.
    os.environ["AMP_LESSON_DEVICE"] = args.device
    os.environ["AMP_LESSON_PDF"] = "no"
    os.environ["AMP_LESSON_NOTE_RUNS"] = "1"  # what each page ran, which the edition keeps
    from amp_book.workdirs import executed_folder

    executed = executed_folder(args.out)
    # Only this build's runs are recorded: none left from an earlier build.
    shutil.rmtree(executed, ignore_errors=True)
    extra = ["-E"]  # every page read again: its notebook is this build's
    from amp_book import kernels

    if not kernels.provisioner_installed():  # amp_lesson on PYTHONPATH, not installed
        extra += ["-D", "amp_lesson_fork_kernels=0"]
    start = time.perf_counter()
    status = run_to_the_end(sphinx_command(DOCS, args.out, *extra))
    print(f"record_edition: the build took {time.perf_counter() - start:.0f} s (status {status})")

    from amp_book.edition import EditionError, record, record_provenance

    reference = runpy.run_path(str(DOCS / "conf.py")).get("amp_lesson_reference_pages", [])
    try:
        edition = record(DOCS, executed, args.into, record_provenance(args.device), reference)
    except EditionError as error:
        print(f"record_edition: nothing recorded: {error}", file=sys.stderr)
        return 1
    size = sum(p.stat().st_size for p in edition.folder.rglob("*") if p.is_file())
    failed = {d: p.reason for d, p in edition.pages.items() if p.status != "recorded"}
    print(f"record_edition: {edition.describe()}")
    print(
        f"wrote {edition.folder} ({len(edition.pages) - len(failed)} pages recorded, "
        f"{len(failed)} not run, {size / 1024:.0f} KiB)"
    )
    for docname, reason in failed.items():
        print(f"  not run: {docname}: {reason}")
    return 0 if status == 0 and not failed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
