"""Each build's working folders are its own (amp_book.workdirs)."""

from __future__ import annotations

import json
import os
import subprocess
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
