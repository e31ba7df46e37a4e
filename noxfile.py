"""Sessions for building the book, testing and benchmarking.

Every session shares one environment, ``.nox/amp-lesson``, so PyTorch is
installed once per environment rather than once per session. It is rebuilt
when ``pyproject.toml`` or the lock, ``requirements/constraints.txt``, changes.

Every install is constrained by that lock (``pip install -c``), the same one
CI and Read the Docs use; ``nox -s lock`` refreshes it. The torch release is
set there too (from ``requirements/constraints.in``). Where PyPI's default
wheel is a CUDA build you do not want, point pip at the CPU wheels first,
e.g. ``AMP_LESSON_TORCH_INDEX=https://download.pytorch.org/whl/cpu``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

import nox

nox.needs_version = ">=2024.4.15"
nox.options.sessions = ["lint", "citation", "tests"]
nox.options.default_venv_backend = "none"

ROOT = Path(__file__).parent
sys.path.insert(0, str(ROOT / "tools"))
from build_book import SPHINX_OPTS
from pip_config import uv_find_links

ENV = ROOT / ".nox" / "amp-lesson"
BIN = ENV / ("Scripts" if os.name == "nt" else "bin")
DOCS = ROOT / "docs"
HTML = DOCS / "_build" / "html"
LOCK = ROOT / "requirements" / "constraints.txt"
# The lesson (the package a reader installs) and the book's build, its own distribution.
PROJECTS = (ROOT / "pyproject.toml", ROOT / "book" / "pyproject.toml")
LOCK_INPUT = ROOT / "requirements" / "constraints.in"
# A torch other than the locked one (e.g. a CUDA build's local version) can be asked for here.
TORCH = os.environ.get("AMP_LESSON_TORCH", "torch")
# "uv" (default) or "pip" for everything but torch.
INSTALLER = os.environ.get("AMP_LESSON_INSTALLER", "uv")
if INSTALLER not in ("uv", "pip"):
    raise SystemExit(f"AMP_LESSON_INSTALLER must be 'uv' or 'pip', got {INSTALLER!r}")


def _env(session: nox.Session) -> dict[str, str]:
    """Create or update the shared environment; return the env vars to run in it."""
    if sys.version_info < (3, 11):
        session.error("the locked toolchain needs Python 3.11 or newer to run nox with")
    stamp = ENV / ".amp-lesson-stamp"
    inputs = b"".join(p.read_bytes() for p in (*PROJECTS, LOCK)) + TORCH.encode()
    inputs += INSTALLER.encode() + b" compiled"  # an environment from before is made again
    want = hashlib.sha256(inputs).hexdigest()
    if not (stamp.is_file() and stamp.read_text() == want):
        if ENV.exists() and not stamp.is_file():
            shutil.rmtree(ENV)
        if not ENV.exists():
            session.run(sys.executable, "-m", "venv", str(ENV), external=True)
        pip = [str(BIN / "python"), "-m", "pip", "install", "--disable-pip-version-check"]
        lock = ["-c", str(LOCK)]
        index = os.environ.get("AMP_LESSON_TORCH_INDEX")
        # From another index torch comes alone; its dependencies then come from PyPI at the
        # locked versions in the next step.
        torch_from = ["--index-url", index, "--no-deps"] if index else []
        if INSTALLER == "uv":
            # Everything through uv: a fresh environment in a fraction of pip's time
            # (CONTRIBUTING.md, "The locked toolchain", has the figures).
            session.run(*pip, "uv", *lock, external=True)
            # --compile-bytecode, as pip does by default: otherwise every kernel and every
            # Sphinx process compiles Sphinx, MyST-NB, matplotlib and Jupyter again wherever
            # PYTHONDONTWRITEBYTECODE is set (as on this project's CI machines): seconds a page.
            uv = [str(BIN / "uv"), "pip", "install", "--compile-bytecode"]
            uv += ["--python", str(BIN / "python")]
            # uv does not read pip's configuration; pip's find-links (a folder of local
            # wheels, such as a CPU torch) are passed on, so both find the same torch.
            links = uv_find_links()
            session.run(*uv, TORCH, *lock, *links, *torch_from, external=True)
            session.run(*uv, "-e", ".[dev]", "-e", "./book[pdf]", *lock, *links, external=True)
        else:
            # pip also finds a wheel on local disk (pip.conf's find-links)
            session.run(*pip, TORCH, *lock, *torch_from, external=True)
            session.run(*pip, "-e", ".[dev]", "-e", "./book[pdf]", *lock, external=True)
        stamp.write_text(want)
    return {
        "VIRTUAL_ENV": str(ENV),
        "PATH": os.pathsep.join([str(BIN), os.environ.get("PATH", "")]),
        # The installed packages were compiled at install; the repository's own code (the two
        # packages, installed editable, the tests, the tools) is compiled by the first process
        # that imports it and read back by the rest. With PYTHONDONTWRITEBYTECODE set, as on
        # this project's CI machines, every kernel, build and test process compiled it again,
        # and pytest rewrote every test module's asserts again in every worker (CONTRIBUTING,
        # "The locked toolchain", has the fast tier's times). Empty is off; git ignores
        # __pycache__/.
        "PYTHONDONTWRITEBYTECODE": "",
    }


def _run(session: nox.Session, env: dict[str, str], program: str, *args: str) -> None:
    """Run ``program`` from the shared environment (nox would look it up on its own PATH)."""
    session.run(str(BIN / program), *args, env=env, external=True)


@nox.session
def docs(session: nox.Session) -> None:
    """Build the book, executing every page, and its PDF where Chromium is at hand.

    `-- --serve` previews it live (amp_book.preview: no PDF, no stored edition, a rebuild in
    a process that imported Sphinx once); AMP_LESSON_PDF=no skips the PDF,
    AMP_LESSON_EDITIONS="" the stored editions.
    """
    env = _env(session)
    if "--serve" in session.posargs:
        # amp_book.preview: rebuilt on every save by a process that imported Sphinx once,
        # without the PDF and the stored editions (a build of its own: below).
        _run(
            session,
            env,
            "python",
            "-m",
            "amp_book.preview",
            "docs",
            str(HTML),
            "--watch",
            "src/amp_lesson",
            "--watch",
            "book/src/amp_book",
            "--port",
            os.environ.get("PORT", "8000"),
            "--",
            *SPHINX_OPTS,
            *[a for a in session.posargs if a != "--serve"],
        )
        return
    _run(session, env, "python", "tools/build_book.py", str(HTML), "--", *session.posargs)


@nox.session(name="docs-live")
def docs_live(session: nox.Session) -> None:
    """Live preview (same as `nox -s docs -- --serve`)."""
    session.posargs.append("--serve")
    docs(session)


@nox.session
def tests(session: nox.Session) -> None:
    """The whole suite: unit, property and doctests, the book build, browser tests."""
    env = _env(session)
    _run(session, env, "python", "tools/ensure_chromium.py")
    if shutil.which("npm"):  # axe-core for the accessibility audit, from the npm registry
        _run(session, env, "python", "tools/install_axe.py")
    else:
        session.warn("npm not found: the accessibility audit will be skipped (it fails on CI)")
    _run(session, env, "python", "-m", "pytest", *_workers(session.posargs), *session.posargs)


def _workers(args: list[str]) -> list[str]:
    """pytest-xdist's ``-n``: one test process per core, at most four (each drives its own
    Chromium), unless the arguments choose (``-n 0`` runs the suite in one process).

    ``--dist worksteal``: each worker starts on its own slice of the suite, whose first tests
    are its share of the long ones (``tests/conftest.py``), and an idle worker takes over the
    end of another's slice, so the workers finish together."""
    if any(a.startswith(("-n", "--numprocesses", "--dist")) or a == "no:xdist" for a in args):
        return []
    return ["-n", str(min(os.cpu_count() or 1, 4)), "--dist", "worksteal"]


@nox.session
def lint(session: nox.Session) -> None:
    """Ruff, on the package, tests, docs and tools."""
    env = _env(session)
    _run(session, env, "ruff", "check", ".")
    _run(session, env, "ruff", "format", "--check", ".")


CFFCONVERT = "cffconvert==2.0.0"
"""Validates CITATION.cff against the Citation File Format's schema. It pins jsonschema 3,
which the book's environment cannot hold (check-jsonschema needs 4), so it has its own."""


@nox.session(venv_backend="venv")
def citation(session: nox.Session) -> None:
    """Validate CITATION.cff (cffconvert, in an environment of its own)."""
    session.install(CFFCONVERT)
    session.run("cffconvert", "--validate", "--infile", "CITATION.cff")


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmark the build: cold, no-change, one-page edit, page weight."""
    env = _env(session)
    _run(session, env, "python", "tools/ensure_chromium.py")  # it weighs pages in Chromium
    _run(session, env, "python", "tools/bench_build.py", *session.posargs)


@nox.session
def notebooks(session: nox.Session) -> None:
    """Build the book, then regenerate notebooks/*.ipynb (the Colab copies) from it."""
    env = _env(session)
    _run(session, env, "python", "tools/build_book.py", str(HTML))
    _run(session, env, "python", "tools/notebooks.py", "write")


@nox.session(name="gpu-record")
def gpu_record(session: nox.Session) -> None:
    """On a CUDA machine: record the speed and memory table into docs/_data/gpu/."""
    env = _env(session)
    _run(session, env, "python", "-m", "amp_lesson.bench", "--record", *session.posargs)


@nox.session(name="gpu-edition")
def gpu_edition(session: nox.Session) -> None:
    """On a CUDA machine: run every page there and store it as the book's GPU edition.

    Writes docs/_editions/<gpu>/ (tools/record_edition.py); every later build renders it
    beside its own. `-- --device cpu` records this machine's CPU instead (for trying it).
    """
    env = _env(session)
    _run(session, env, "python", "tools/record_edition.py", *session.posargs)


@nox.session(venv_backend="venv")
def lock(session: nox.Session) -> None:
    """Recompile requirements/constraints.txt (`-- --upgrade` moves every pin to the newest).

    Runs in its own small environment with only uv (at the version the lock pins), so it
    works before the shared environment exists and whatever state that one is in.
    """
    session.install("uv", "-c", str(LOCK))
    session.run(
        "uv",
        "pip",
        "compile",
        "pyproject.toml",
        "book/pyproject.toml",
        str(LOCK_INPUT.relative_to(ROOT)),
        "--all-extras",
        # One file for every Python the toolchain runs on (3.11 here and on CI, 3.12 on
        # Read the Docs), with the same version of a package on each where one fits all.
        "--universal",
        "--python-version",
        "3.11",
        "--fork-strategy",
        "fewest",
        # the lesson itself (constraints.in names it, for the book's build) is not pinned
        "--no-emit-package",
        "amp-lesson",
        "--custom-compile-command",
        "nox -s lock",
        "--quiet",
        "-o",
        str(LOCK.relative_to(ROOT)),
        *session.posargs,
    )
    session.log(f"wrote {LOCK.relative_to(ROOT)}; commit it with the change that needed it")
