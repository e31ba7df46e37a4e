"""Keep ``notebooks/`` (the copies Colab opens from GitHub) in step with ``docs/``.

Colab opens ``.ipynb`` files from a GitHub repository, not MyST Markdown, so
each executed page of the book has a notebook twin under ``notebooks/``,
generated from the page with jupytext plus a first cell that installs
``amp_lesson``. ``write`` regenerates them; ``check`` exits non-zero when one is
missing, stale or orphaned (the test suite runs it).

    python tools/notebooks.py write|check
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
OUT = ROOT / "notebooks"


def pages() -> list[Path]:
    """The book's pages that hold code cells."""
    return sorted(
        p
        for p in DOCS.rglob("*.md")
        if "_build" not in p.parts and "{code-cell}" in p.read_text(encoding="utf-8")
    )


def render(page: Path) -> str:
    import jupytext

    from amp_lesson.sphinxext.book import notebook_for_download

    nb = jupytext.read(page)
    nb.metadata.pop("jupytext", None)
    data = json.loads(jupytext.writes(nb, fmt="ipynb"))
    repository = os.environ.get("AMP_LESSON_REPOSITORY", "")
    data = notebook_for_download(data, repository=repository, executed=False)
    return json.dumps(data, indent=1, ensure_ascii=False, sort_keys=True) + "\n"


def expected() -> dict[Path, str]:
    return {OUT / p.relative_to(DOCS).with_suffix(".ipynb"): render(p) for p in pages()}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in {"write", "check"}:
        print(__doc__, file=sys.stderr)
        return 2
    want = expected()
    have = set(OUT.rglob("*.ipynb")) if OUT.exists() else set()
    if argv[0] == "write":
        for path in have - set(want):
            path.unlink()
        for path, text in want.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        print(f"wrote {len(want)} notebooks to {OUT.relative_to(ROOT)}/")
        return 0
    problems = [f"orphaned: {p}" for p in sorted(have - set(want))]
    problems += [f"missing: {p}" for p in want if p not in have]
    problems += [f"stale: {p}" for p, t in want.items() if p in have and p.read_text() != t]
    for line in problems:
        print(line, file=sys.stderr)
    if problems:
        print("run `nox -s notebooks` to regenerate", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
