"""The lesson a reader installs holds the lesson only; the book's build is its own distribution.

A notebook's install cell installs ``amp-lesson``: its wheel must carry no Sphinx
extension, static files, templates, font or kernel provisioner, and importing it
(every module a page's notebook imports) must load no Sphinx, docutils or MyST-NB.
``tests/test_notebooks.py`` installs that wheel in a fresh environment and runs
every notebook there.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib
from helpers import ROOT

import amp_lesson

BOOK_ONLY = ("sphinx", "docutils", "myst_nb", "myst_parser", "amp_book", "jupyter_cache")
"""Top-level modules of the book's build that the lesson must never import."""


@pytest.fixture(scope="module")
def lesson_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "--disable-pip-version-check", "-w", str(out), str(ROOT)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    (wheel,) = out.glob("amp_lesson-*.whl")
    return wheel


def test_the_lessons_wheel_holds_the_lesson_and_nothing_of_the_build(lesson_wheel: Path) -> None:
    with zipfile.ZipFile(lesson_wheel) as wheel:
        names = wheel.namelist()
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")] or [""]
        provisioners = wheel.read(entry_points).decode() if entry_points else ""
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        requires = [
            line.removeprefix("Requires-Dist: ")
            for line in wheel.read(metadata).decode().splitlines()
            if line.startswith("Requires-Dist: ")
        ]
    package = [n for n in names if not n.startswith("amp_lesson-")]
    assert package
    assert all(n.startswith("amp_lesson/") for n in package), package
    suffixes = {Path(n).suffix for n in package}
    assert suffixes <= {".py", ".json", ".typed"}, suffixes  # no .js .css .html .woff2 ...
    assert not [n for n in package if "sphinxext" in n or "/static/" in n or "/templates/" in n]
    assert "kernel_provisioners" not in provisioners
    always = sorted(r.split(">")[0] for r in requires if "extra ==" not in r)
    assert always == ["matplotlib", "numpy", "torch"]


def _notebook_imports() -> set[str]:
    """Every ``amp_lesson`` module the committed notebooks import (from their code cells)."""
    found: set[str] = set()
    for path in sorted((ROOT / "notebooks").rglob("*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] != "code":
                continue
            source = "".join(cell["source"])
            code = "\n".join(
                ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!"))
            )
            for node in ast.walk(ast.parse(code)):
                if isinstance(node, ast.Import):
                    found.update(a.name for a in node.names if a.name.startswith("amp_lesson"))
                elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "amp_lesson"
                ):
                    found.add(node.module)
    return found


def test_the_notebooks_and_every_lesson_module_import_nothing_of_the_build() -> None:
    wanted = _notebook_imports()
    assert {"amp_lesson.claims", "amp_lesson.notebook"} <= wanted  # every page's twin
    every = [
        p.relative_to(Path(amp_lesson.__file__).parents[1]).with_suffix("").as_posix()
        for p in Path(amp_lesson.__file__).parent.rglob("*.py")
        if p.name not in {"__main__.py"}
    ]
    modules = sorted(wanted | {m.replace("/", ".").removesuffix(".__init__") for m in every})
    script = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}:\n    importlib.import_module(name)\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT
    )
    loaded = set(json.loads(proc.stdout))
    assert {"amp_lesson", "torch"} <= loaded
    assert loaded.isdisjoint(BOOK_ONLY), sorted(loaded.intersection(BOOK_ONLY))


def test_the_books_build_is_its_own_distribution_and_needs_the_lesson() -> None:
    book = tomllib.loads((ROOT / "book" / "pyproject.toml").read_text(encoding="utf-8"))
    lesson = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert book["project"]["version"] == amp_lesson.__version__  # the lesson's: test_versions.py
    assert any(r.startswith("amp-lesson[") for r in book["project"]["dependencies"])
    provisioners = book["project"]["entry-points"]["jupyter_client.kernel_provisioners"]
    assert provisioners == {"amp-lesson-fork": "amp_book.kernels:ForkingProvisioner"}
    assert "entry-points" not in lesson["project"]
    extras = lesson["project"]["optional-dependencies"]
    reader = extras["notebooks"] + extras["recordings"]  # what a notebook's install cell adds
    assert reader
    assert not [r for r in reader if "sphinx" in r or "myst" in r or "amp-lesson" in r]
