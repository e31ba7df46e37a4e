"""Each build's working folders are its own (amp_book.workdirs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import notebooks
import pytest
from build_book import HTML, book_command
from helpers import ROOT, mini_book

from amp_book import workdirs


def test_the_notebook_tool_reads_the_books_own_executed_folder() -> None:
    assert workdirs.executed_folder(HTML) == notebooks.EXECUTED


@pytest.mark.usefixtures("sphinx")
def test_two_books_built_at_once_into_sibling_folders_keep_their_own_notebooks(
    tmp_path: Path,
) -> None:
    """Before: both builds succeeded, but Y's downloadable notebook held X's code and output
    (``jupyter_execute/``, the kernels' and editions' folders and the default cache all sat
    in the output folders' common parent)."""
    shared = tmp_path / "work"
    shared.mkdir()
    procs = {}
    for name in ("X", "Y"):
        (tmp_path / f"src{name}").mkdir()
        cell = f"```{{code-cell}} ipython3\nprint('book {name}')\n```\n"
        src = mini_book(tmp_path / f"src{name}", cell)
        env = {**os.environ, "AMP_LESSON_PDF": "no"}
        env.pop("AMP_LESSON_CACHE_DIR", None)
        cmd = book_command(src, shared / f"out{name}", "-q")
        procs[name] = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True)  # fmt: skip
    for name, proc in procs.items():
        log, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, (name, log[-3000:])
    for name in ("X", "Y"):
        out = shared / f"out{name}"
        download = json.loads((out / "_sources" / "page.ipynb").read_text(encoding="utf-8"))
        code = [c for c in download["cells"] if c["cell_type"] == "code"]
        text = json.dumps(code)
        assert f"book {name}" in text, name
        assert f"book {'Y' if name == 'X' else 'X'}" not in text, name
        assert (workdirs.executed_folder(out) / "page.ipynb").is_file()
        assert any(workdirs.cache_folder(out).iterdir())
    # nothing of either build in the folder that holds both, but their own folders
    assert sorted(p.name for p in shared.iterdir()) == ["outX", "outX.work", "outY", "outY.work"]


@pytest.mark.usefixtures("sphinx")
def test_relative_paths_are_the_callers_and_a_cache_folder_that_is_a_file_is_named(
    tmp_path: Path,
) -> None:
    """``--docs``, the output folder and ``AMP_LESSON_CACHE_DIR`` given relative resolved
    against the repository's root (the build's folder), not the caller's. A cache variable
    naming a file failed with an ExtensionError naming neither, under Sphinx's request to
    report a bug in Sphinx."""
    mini_book(tmp_path, "```{code-cell} ipython3\nprint(6 * 7)\n```\n")
    env = {**os.environ, "AMP_LESSON_PDF": "no", "AMP_LESSON_CACHE_DIR": "relative-cache"}
    tool = str(ROOT / "tools" / "build_book.py")
    built = subprocess.run(
        [sys.executable, tool, "--docs", "docs", "out", "--", "-q"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    assert (tmp_path / "out" / "page.html").is_file()
    assert [p.name for p in (tmp_path / "relative-cache").iterdir()]  # the cache is there
    assert not (ROOT / "relative-cache").exists()
    assert not (ROOT / "out").exists()
    (tmp_path / "a-file").write_text("")
    env["AMP_LESSON_CACHE_DIR"] = "a-file"
    failed = subprocess.run(
        [sys.executable, tool, "--docs", "docs", "out2", "--", "-q"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert failed.returncode != 0
    said = failed.stderr
    assert f"AMP_LESSON_CACHE_DIR='{tmp_path / 'a-file'}' is a file, not a folder" in said, said
    assert "sphinx-doc/sphinx/issues" not in said
    assert "The execution cache:" in said


def test_a_cache_folder_the_build_cannot_write_in_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from amp_book.cache import CACHE_DIR_ENV, CacheFolderError, cache_base

    monkeypatch.setattr(os, "access", lambda path, mode: False)  # as for a read-only folder
    with pytest.raises(
        CacheFolderError, match=r"AMP_LESSON_CACHE_DIR='.*': .* is not writable by this user"
    ):
        cache_base(tmp_path / "out", {CACHE_DIR_ENV: str(tmp_path)})
