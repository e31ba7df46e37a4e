"""The notebooks a reader takes away: plain Jupyter, in step with the pages, and they run."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import notebooks
import pytest
from helpers import ROOT
from pip_config import uv_find_links

from amp_lesson.sphinxext import export

TWINS = sorted(notebooks.OUT.rglob("*.ipynb"))
# Notebooks known not to run outside the book, each with why; the test fails when one of
# them starts to run (remove it here then) or when any other notebook fails.
KNOWN_BROKEN: dict[str, str] = {}
LOCK = ROOT / "requirements" / "constraints.txt"


def _markdown_outside_code(text: str) -> str:
    """Markdown with its fenced code blocks left out (the authoring guide quotes MyST in them)."""
    return re.sub(r"^(`{3,}|~{3,}).*?^\1\s*$", "", text, flags=re.MULTILINE | re.DOTALL)


def _cells(nb: dict, kind: str) -> list[str]:
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == kind]


def test_notebook_twins_are_in_step_with_the_pages(capsys) -> None:
    status = notebooks.main(["check"])
    assert status == 0, capsys.readouterr().err


def test_the_twin_check_notices_a_changed_page(tmp_path: Path, monkeypatch, capsys) -> None:
    docs, out = tmp_path / "docs", tmp_path / "notebooks"
    shutil.copytree(notebooks.DOCS, docs, ignore=shutil.ignore_patterns("_build"))
    shutil.copytree(notebooks.OUT, out)
    monkeypatch.setattr(notebooks, "DOCS", docs)
    monkeypatch.setattr(notebooks, "OUT", out)
    assert notebooks.main(["check"]) == 0, capsys.readouterr().err
    page = docs / "chapter" / "formats.md"
    page.write_text(page.read_text().replace("mantissa", "significand", 1))
    assert notebooks.main(["check"]) == 1
    assert "stale: " in capsys.readouterr().err
    (out / "chapter" / "formats.ipynb").unlink()
    assert notebooks.main(["check"]) == 1
    assert "missing: " in capsys.readouterr().err


@pytest.mark.parametrize("twin", TWINS, ids=lambda p: p.relative_to(notebooks.OUT).as_posix())
def test_twins_are_plain_jupyter(twin: Path) -> None:
    nb = json.loads(twin.read_text(encoding="utf-8"))
    assert nb["nbformat"] == 4
    assert "myst_nb" not in "\n".join(_cells(nb, "code"))
    assert "glue(" not in "\n".join(_cells(nb, "code"))
    install = _cells(nb, "code")[0]
    assert export.install_spec() in install
    assert "%pip install" in install
    for text in _cells(nb, "markdown"):
        prose = _markdown_outside_code(text)
        # code spans are kept as written (the guide quotes MyST in them); a role is a
        # {name} right before a code span
        bare = re.sub(r"(?<!\})(`+)(.+?)\1", "", prose)
        assert not re.search(r"\{[\w:-]+\}`", bare), f"a MyST role is left in:\n{prose}"
        assert not re.search(r"^\s*(:{3,}|`{3,})\{", prose, re.MULTILINE), prose
        assert not re.search(r"^\([\w-]+\)=\s*$", prose, re.MULTILINE), prose
        # no right answer is marked; answers sit in a collapsed section
        assert not re.search(r"^\s*[-*] \[[xX ]\]", prose, re.MULTILINE), prose
        if "**Answer:**" in prose:
            assert prose.index("<details>") < prose.index("**Answer:**")


def test_the_readme_links_to_the_declared_repository() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    repo = export.repository_url()
    assert f"]({repo})" in readme
    assert f"]({export.colab_url('notebooks/chapter/start.ipynb')})" in readme
    for url in re.findall(r"https://github\.com/[\w.-]+/[\w.-]+", readme):
        assert url == repo, f"README names another repository: {url}"


@pytest.mark.book
def test_each_download_is_its_twin_with_outputs(built_book: Path) -> None:
    for twin in TWINS:
        doc = twin.relative_to(notebooks.OUT).with_suffix("").as_posix()
        download = json.loads((built_book / "_sources" / f"{doc}.ipynb").read_text())
        committed = json.loads(twin.read_text())
        assert _cells(download, "code") == _cells(committed, "code"), doc
        assert any(c.get("outputs") for c in download["cells"] if c["cell_type"] == "code")
        assert "myst_nb" not in json.dumps(download)
        html = (built_book / f"{doc}.html").read_text(encoding="utf-8")
        assert export.colab_url(f"notebooks/{doc}.ipynb") in html, f"{doc}: no Colab button"


def _venv_python(venv: Path) -> Path:
    return venv / ("Scripts" if os.name == "nt" else "bin") / "python"


@pytest.mark.notebooks
def test_exported_notebooks_run_in_a_fresh_environment(tmp_path: Path) -> None:
    """The wheel, installed (not editable) where MyST-NB and Sphinx are not, runs every twin."""
    dist, venv, work = tmp_path / "dist", tmp_path / "venv", tmp_path / "work"
    work.mkdir()
    run = lambda *cmd, **kw: subprocess.run(
        [str(c) for c in cmd], check=True, capture_output=True, text=True, **kw
    )
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", dist, ROOT)
    (wheel,) = dist.glob("amp_lesson-*.whl")
    py = _venv_python(venv)
    uv = Path(sys.executable).with_name("uv")  # the environment's own, as nox installs it
    if uv.is_file():  # a minute faster than venv and pip (torch: 2 s against 48 here)
        run(uv, "venv", "-q", "--python", sys.executable, venv)
        pip = [uv, "pip", "install", "-q", "--compile-bytecode", "--python", py, "-c", LOCK]
        pip += uv_find_links()
    else:
        run(sys.executable, "-m", "venv", venv)
        pip = [py, "-m", "pip", "install", "-q", "--disable-pip-version-check", "-c", LOCK]
    index = os.environ.get("AMP_LESSON_TORCH_INDEX")
    run(*pip, "torch", *(["--index-url", index, "--no-deps"] if index else []))
    run(*pip, f"{wheel}[notebooks]", "nbclient", "ipykernel")
    where = run(py, "-c", "import amp_lesson, importlib.util as u; print(amp_lesson.__file__); "
                "print(u.find_spec('myst_nb'), u.find_spec('sphinx'))", cwd=work).stdout.split()  # fmt: skip
    assert Path(where[0]).is_relative_to(venv), f"amp_lesson came from {where[0]}"
    assert where[1:] == ["None", "None"], "MyST-NB or Sphinx is in the reader's environment"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(OMP_NUM_THREADS="1")  # two notebooks at a time on two cores
    proc = subprocess.run(
        [py, ROOT / "tools" / "run_notebooks.py", "--jobs", "2", "--slowest-cells", "3", *TWINS],
        capture_output=True,
        text=True,
        cwd=work,
        env=env,
        check=False,
    )
    print(proc.stdout)  # per-notebook and slowest-cell times (pytest -rP shows them)
    status = {
        Path(m[2]).relative_to(notebooks.OUT).with_suffix("").as_posix(): m[1]
        for m in re.finditer(r"^(ok|FAILED)\s+[\d.]+ s\s+(\S+\.ipynb)$", proc.stdout, re.MULTILINE)
    }
    assert len(status) == len(TWINS), proc.stdout[-12000:] + proc.stderr[-4000:]
    failed = {doc for doc, result in status.items() if result == "FAILED"}
    assert failed - set(KNOWN_BROKEN) == set(), proc.stdout[-12000:]
    assert set(KNOWN_BROKEN) - failed == set(), "these run now: remove them from KNOWN_BROKEN"
