"""Helpers shared by tests: paths and a sphinx-build runner."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
HTML = DOCS / "_build" / "html"
SPHINX_OPTS = ["-W", "-n", "--keep-going", "-b", "html"]


def sphinx_build(
    src: Path, out: Path, *extra: str, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run sphinx-build as the docs session does; return the finished process."""
    cmd = [sys.executable, "-m", "sphinx", *SPHINX_OPTS, str(src), str(out), *extra]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, cwd=ROOT)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"sphinx-build failed ({proc.returncode}):\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}"
        )
    return proc
