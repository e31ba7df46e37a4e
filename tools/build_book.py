"""Build the book: the one place that says how ``sphinx-build`` is called.

``nox -s docs``, the tests (``tests/helpers.py``), the build benchmark, CI and
Read the Docs (``.readthedocs.yaml``) all build through :data:`SPHINX_OPTS`,
so a build that passes in one passes in the others.

    python tools/build_book.py [OUTDIR] [-- extra sphinx-build options]

``OUTDIR`` defaults to ``docs/_build/html``. Standard library only: Read the
Docs runs it in an environment with ``.[docs]`` and nothing else.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
HTML = DOCS / "_build" / "html"

SPHINX_OPTS: tuple[str, ...] = ("-W", "-n", "--keep-going", "-j", "auto", "-b", "html")
"""Any warning fails the build (``-W``, ``--keep-going`` to report them all),
every cross-reference must resolve (``-n``), and pages execute in parallel
kernels (``-j auto``)."""


def sphinx_command(src: Path, out: Path, *extra: str, python: str | None = None) -> list[str]:
    """The ``sphinx-build`` command line that builds ``src`` into ``out``.

    It runs ``python -m sphinx`` through ``tools/run_sphinx.py``, which ends the
    process without Python's teardown once Sphinx has finished.

    >>> cmd = sphinx_command(Path("docs"), Path("out"), "-q", python="python")
    >>> cmd[0], Path(cmd[1]).name, cmd[2:]
    ('python', 'run_sphinx.py', ['-W', '-n', '--keep-going', '-j', 'auto', '-b', 'html', 'docs', 'out', '-q'])
    """
    runner = str(Path(__file__).resolve().with_name("run_sphinx.py"))
    return [python or sys.executable, runner, *SPHINX_OPTS, str(src), str(out), *extra]


def main(argv: list[str]) -> int:
    """Build ``docs/`` into ``argv[0]`` (default ``docs/_build/html``); return sphinx's status."""
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    if len(argv) > 1 or any(a.startswith("-") for a in argv):
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[0]) if argv else HTML
    cmd = sphinx_command(DOCS, out, *extra)
    status = subprocess.run(cmd, cwd=ROOT, check=False).returncode
    if status == 0:
        print(f"The book is in {out / 'index.html'}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
