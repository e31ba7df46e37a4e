"""Build the book the way Read the Docs does, from ``.readthedocs.yaml``.

CI's ``rtd`` job runs this so a Read the Docs failure shows up in CI first.
Like Read the Docs it makes a fresh virtual environment with the Python that
runs this script (which must be the ``build.tools.python`` of the file), puts
it first on ``PATH``, sets ``READTHEDOCS``, ``READTHEDOCS_OUTPUT`` and
``READTHEDOCS_VIRTUALENV_PATH``, and runs the file's ``build.jobs`` commands in
Read the Docs' order, from the repository root, stopping at the first that
fails. The built site ends up in ``_readthedocs/html``.

Only what this project's file uses is emulated: its ``install`` and
``build.html`` jobs replace Read the Docs' defaults, and the script refuses a
file that relies on the defaults instead of building something else.

It also holds the build to Read the Docs' limits: all the jobs together within
:data:`TIME_LIMIT_S` (Read the Docs stops a build at 15 minutes), and the build's
peak memory, every process of it summed (``tools/peak_memory.py``), within
:data:`MEMORY_BUDGET` (Read the Docs gives a build 7 GB). The figures are printed
and written to ``_readthedocs/figures.json``; a build over either fails.

    python tools/rtd_build.py [--dry-run] [--venv PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / ".readthedocs.yaml"
OUTPUT = ROOT / "_readthedocs"
FIGURES = OUTPUT / "figures.json"
TIME_LIMIT_S = 15 * 60
"""Read the Docs' limit on a build, every job of it (its documentation, "Build resources")."""
MEMORY_BUDGET = 4 * 2**30
"""The peak memory the build may reach, all its processes summed: well under Read the Docs'
7 GB, so that a builder that counts memory differently, or a page that grows, does not
fail the published book first (``tools/build_book.py`` caps ``-j`` there for the same reason)."""
# Read the Docs' order of the build.jobs steps (its "build process" documentation).
ORDER = (
    "post_checkout",
    "pre_system_dependencies",
    "post_system_dependencies",
    "pre_create_environment",
    "post_create_environment",
    "pre_install",
    "install",
    "post_install",
    "pre_build",
    "build.html",
    "post_build",
)


def load_config(path: Path = CONFIG) -> dict[str, Any]:
    """``.readthedocs.yaml`` as a dict (PyYAML)."""
    import yaml

    with open(path, encoding="utf-8") as f:
        config = yaml.safe_load(f)
    if not isinstance(config, dict) or config.get("version") != 2:
        raise ValueError(f"{path}: not a version 2 Read the Docs configuration")
    return config


def plan(config: dict[str, Any]) -> list[tuple[str, str]]:
    """The ``(step, command)`` pairs Read the Docs runs for ``config``, in order.

    >>> plan({"version": 2, "build": {"jobs": {
    ...     "install": ["pip install ."], "build": {"html": ["make html"]}}}})
    [('install', 'pip install .'), ('build.html', 'make html')]
    """
    jobs = (config.get("build") or {}).get("jobs") or {}
    for needed, what in (("install", "python.install"), ("build.html", "the Sphinx build")):
        group, _, key = needed.partition(".")
        present = jobs.get(group, {}).get(key) if key else jobs.get(group)
        if not present:
            raise ValueError(
                f"build.jobs.{needed} is missing: this emulation runs only explicit jobs "
                f"and does not reproduce Read the Docs' default {what}"
            )
    steps = []
    for step in ORDER:
        group, _, key = step.partition(".")
        commands = jobs.get(group, {}).get(key, []) if key else jobs.get(group, [])
        steps += [(step, command) for command in commands]
    return steps


def canonical_url() -> str:
    """The address Read the Docs gives the latest version: ``[project.urls]`` Documentation.

    >>> canonical_url()
    'https://amp-lesson.readthedocs.io/en/latest/'
    """
    import tomllib

    urls = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["urls"]
    return urls["Documentation"].rstrip("/") + "/en/latest/"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run none")
    parser.add_argument("--venv", type=Path, help="where to make the environment (default: temp)")
    args = parser.parse_args(argv)

    config = load_config()
    steps = plan(config)
    want = str(config["build"]["tools"]["python"])
    have = f"{sys.version_info.major}.{sys.version_info.minor}"
    if args.dry_run:
        for step, command in steps:
            print(f"{step}: {command}")
        return 0
    if have != want:
        print(
            f"rtd_build: .readthedocs.yaml asks for Python {want}; this is {have}", file=sys.stderr
        )
        return 2

    start = time.perf_counter()  # Read the Docs' clock runs from the environment's creation
    venv = args.venv or Path(tempfile.mkdtemp(prefix="rtd-venv-"))
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    bindir = venv / ("Scripts" if os.name == "nt" else "bin")
    # Read the Docs brings pip and setuptools up to date in the new environment.
    subprocess.run(
        [str(bindir / "python"), "-m", "pip", "install", "-q", "--upgrade", "pip", "setuptools"],
        check=True,
    )
    env = dict(
        os.environ,
        READTHEDOCS="True",
        READTHEDOCS_OUTPUT=str(OUTPUT),
        # the version's address, as Read the Docs gives it (canonical links, sitemap, 404 page)
        READTHEDOCS_CANONICAL_URL=canonical_url(),
        READTHEDOCS_VIRTUALENV_PATH=str(venv),
        VIRTUAL_ENV=str(venv),
        PATH=os.pathsep.join([str(bindir), os.environ.get("PATH", "")]),
    )
    from peak_memory import run_measured

    peak = 0
    for step, command in steps:
        print(f"rtd_build: {step}: {command}", flush=True)
        measured = run_measured(["bash", "-c", command], cwd=ROOT, env=env, adopt=True)
        peak = max(peak, measured.peak_bytes)
        if measured.returncode != 0:
            print(f"rtd_build: {step} failed ({measured.returncode}): {command}", file=sys.stderr)
            return measured.returncode
    return judge(time.perf_counter() - start, peak)


def judge(seconds: float, peak: int, figures: Path = FIGURES) -> int:
    """Print and record the build's time and peak memory; 1 if either is over its limit.

    >>> import tempfile
    >>> out = Path(tempfile.mkdtemp()) / "figures.json"
    >>> judge(600.0, 3 * 2**30, out)
    rtd_build: 600 s of 900; peak memory 3.00 GiB of 4.00 GiB
    rtd_build: the book is in .../_readthedocs/html
    0
    >>> json.loads(out.read_text())["peak_bytes"] == 3 * 2**30
    True
    >>> judge(950.0, 5 * 2**30, out)
    rtd_build: 950 s of 900; peak memory 5.00 GiB of 4.00 GiB
    rtd_build: over Read the Docs' 15 minutes
    rtd_build: over the memory budget of 4.00 GiB
    1
    """
    print(
        f"rtd_build: {seconds:.0f} s of {TIME_LIMIT_S}; peak memory "
        f"{peak / 2**30:.2f} GiB of {MEMORY_BUDGET / 2**30:.2f} GiB"
    )
    figures.parent.mkdir(parents=True, exist_ok=True)
    figures.write_text(
        json.dumps(
            {"seconds": round(seconds, 1), "time_limit_s": TIME_LIMIT_S, "peak_bytes": peak,
             "memory_budget_bytes": MEMORY_BUDGET},
            indent=1,
        )
        + "\n"
    )  # fmt: skip
    status = 0
    if seconds > TIME_LIMIT_S:
        print("rtd_build: over Read the Docs' 15 minutes")
        status = 1
    if peak > MEMORY_BUDGET:
        print(f"rtd_build: over the memory budget of {MEMORY_BUDGET / 2**30:.2f} GiB")
        status = 1
    if status == 0:
        print(f"rtd_build: the book is in {OUTPUT / 'html'}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
