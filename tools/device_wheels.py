"""Wheels of the book's toolchain for a CUDA machine that has PyTorch but no network.

    python tools/device_wheels.py [--python 3.12] [--have FREEZE.txt] [--dest .whl]

Recording the GPU edition (``tools/record_edition.py``) builds the book there,
so that machine needs Sphinx, MyST-NB, Jupyter and the theme, which a CUDA
image with PyTorch seldom has. This downloads them here, where PyPI is
reachable: the book's build (``book/pyproject.toml``) and the lesson's own
requirements with its ``notebooks`` extra (``jsonschema`` among them), at the
lock's versions (``requirements/constraints.txt``), as wheels for the target
Python on x86-64 Linux, and wheels of the two distributions of this checkout.
Left out: torch and CUDA's own packages, and what the machine holds already:
``--have`` names a file of its ``pip list --format=freeze`` (a distribution is
left out only at the lock's version); without it, :data:`USUALLY_THERE` (the
scientific stack such an image carries). Carry the folder to the machine, and
there, from the repository's root::

    python3 -m pip install -q --no-index --no-deps .whl/*.whl
    bash tools/gpu_check.sh

Install into that Python's own environment, not with ``--target``: the kernel
spec ipykernel installs (``share/jupyter/kernels/python3``), the book's kernel
provisioner (an entry point) and the lesson's version (package metadata, which
the build reads) are found only in an environment's prefix. ``gpu_check.sh``
puts ``src/`` and ``book/src/`` first on the path, so the checkout's code runs.

Standard library only; pip does the work.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements" / "constraints.txt"
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in (39, 35, 34, 31, 28, 27, 24, 17)]
PLATFORMS += ["manylinux2014_x86_64", "manylinux1_x86_64"]
NEVER = re.compile(r"^(torch|triton|nvidia-.*|cuda-.*)$")
"""What the machine's PyTorch brings with it, and must keep."""
USUALLY_THERE = frozenset(
    [
        "numpy",
        "scipy",
        "scikit-learn",
        "matplotlib",
        "pillow",
        "contourpy",
        "kiwisolver",
        "cycler",
        "fonttools",
        "pyparsing",
        "python-dateutil",
        "six",
        "joblib",
        "threadpoolctl",
        "pyyaml",
        "requests",
        "urllib3",
        "certifi",
        "idna",
        "charset-normalizer",
        "packaging",
        "psutil",
        "typing-extensions",
        "attrs",
        "tabulate",
        "setuptools",
        "filelock",
        "fsspec",
        "networkx",
        "sympy",
        "mpmath",
    ]
)
"""Distributions a CUDA image with PyTorch and the scientific stack holds (default of --have).

Not among them, though such images hold them: what the book's parser and templates need at
versions of their own (Jinja2, MarkupSafe, Pygments, markdown-it-py, mdurl)."""


def normalize(name: str) -> str:
    """A distribution's name as PyPI compares them.

    >>> normalize("Sphinx_Book.Theme"), normalize("pyzmq-27.1.0-cp312-abi3.whl".split("-")[0])
    ('sphinx-book-theme', 'pyzmq')
    """
    return re.sub(r"[-_.]+", "-", name).lower()


def wanted_requirements(root: Path = ROOT) -> list[str]:
    """The requirements to resolve: the lesson's own but torch, its ``notebooks`` extra, and the
    book's build's (but the lesson itself, which comes from the checkout)."""

    def project(path: Path) -> dict:
        return tomllib.loads(path.read_text(encoding="utf-8"))["project"]

    def name(requirement: str) -> str:
        return normalize(re.split(r"[<>=!~ ;\[@]", requirement)[0])

    lesson, book = project(root / "pyproject.toml"), project(root / "book" / "pyproject.toml")
    wanted = [*lesson["dependencies"], *lesson["optional-dependencies"]["notebooks"]]
    wanted += book["dependencies"]
    return [r for r in wanted if name(r) not in ("torch", normalize(lesson["name"]))]


def have_from(path: Path | None) -> set[str]:
    r"""What the machine has: ``name==version`` lines from a ``pip list --format=freeze``
    file, or, without one, the names of :data:`USUALLY_THERE`.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     freeze = Path(tmp, "freeze.txt")
    ...     _ = freeze.write_text("Jinja2==3.1.4\nnumpy==2.5.2\n-e git+https://x#egg=y\n")
    ...     sorted(have_from(freeze))
    ['jinja2==3.1.4', 'numpy==2.5.2']
    """
    if path is None:
        return set(USUALLY_THERE)
    held = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        name, sep, version = line.strip().partition("==")
        if sep and name and not name.startswith(("#", "-")):
            held.add(f"{normalize(name)}=={version.strip()}")
    return held


def held(wheel: Path, have: set[str]) -> bool:
    """Whether the machine holds ``wheel``'s distribution: the same version, or, where ``have``
    gives names alone, any.

    >>> held(Path("Jinja2-3.1.6-py3-none-any.whl"), {"jinja2==3.1.4"})
    False
    >>> held(Path("numpy-2.5.2-cp312-cp312-manylinux_2_28_x86_64.whl"), {"numpy==2.5.2"})
    True
    >>> held(Path("numpy-2.4.6-cp312-cp312-manylinux_2_28_x86_64.whl"), {"numpy"})
    True
    """
    name, version = wheel.name.split("-")[:2]
    return normalize(name) in have or f"{normalize(name)}=={version}" in have


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default="3.12", help="the machine's Python (major.minor)")
    parser.add_argument("--have", type=Path, help="the machine's `pip list --format=freeze`")
    parser.add_argument("--dest", type=Path, default=ROOT / ".whl")
    args = parser.parse_args(argv)
    have = have_from(args.have)
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
               "--only-binary=:all:", "--implementation", "cp", "--python-version", args.python,
               "-c", str(LOCK), "-d", tmp]  # fmt: skip
        for platform in PLATFORMS:
            cmd += ["--platform", platform]
        # jsonschema's format checkers and the like come with their extras' own wheels.
        proc = subprocess.run([*cmd, *wanted_requirements()], check=False)
        if proc.returncode != 0:
            return proc.returncode
        # This checkout's two distributions, pure Python: pip builds them here.
        local = [sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
                 "--no-deps", "-w", tmp, str(ROOT), str(ROOT / "book")]  # fmt: skip
        proc = subprocess.run(local, check=False)
        if proc.returncode != 0:
            return proc.returncode
        args.dest.mkdir(parents=True, exist_ok=True)
        kept, size = [], 0
        for wheel in sorted(Path(tmp).glob("*.whl")):
            if NEVER.match(normalize(wheel.name.split("-")[0])) or held(wheel, have):
                continue
            shutil.copy2(wheel, args.dest / wheel.name)
            kept.append(wheel.name)
            size += wheel.stat().st_size
    print(f"{len(kept)} wheels, {size / 2**20:.1f} MiB, in {args.dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
