"""Keep ``notebooks/`` (the copies Colab opens from GitHub) in step with ``docs/``.

Colab opens ``.ipynb`` files from a GitHub repository, not MyST Markdown, so
each executed page of the book has a plain Jupyter twin under ``notebooks/``,
made by ``amp_book.export`` (the same export as the download on
each page, without the code cells' outputs): MyST turned into plain Markdown,
each passage that quotes a glued value printed by a small cell from the
notebook's own run (showing, until then, the last build's text and device),
and a first cell that installs ``amp_lesson``.

- ``write`` regenerates every twin. The glued values come from the last build
  of the book (``docs/_build/html.work/jupyter_execute``), so build first
  (``nox -s notebooks`` does both).
- ``check`` exits non-zero when a twin is missing, orphaned or differs from
  what its page gives now. Each twin records the glued values it quotes, and
  the check renders the page with those, so it needs no build: a changed
  sentence, cell or glue key fails it, a number that differs between two
  machines' builds does not.

    python tools/notebooks.py write|check
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
OUT = ROOT / "notebooks"
EXECUTED = DOCS / "_build" / "html.work" / "jupyter_execute"
"""The book's build's executed notebooks (``amp_book.workdirs.executed_folder`` of
``docs/_build/html``, named here so that the check needs no import of the book)."""


def pages() -> list[Path]:
    """The book's pages that hold code cells (as MyST-NB reads them: a notebook's cells)."""
    from amp_book.pages import has_code_cells

    return sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts and has_code_cells(p))


def docname(page: Path) -> str:
    return page.relative_to(DOCS).with_suffix("").as_posix()


def twin_path(page: Path) -> Path:
    return OUT / page.relative_to(DOCS).with_suffix(".ipynb")


def page_notebook(page: Path) -> dict[str, Any]:
    """The page, unexecuted, as MyST-NB reads it to run it (:mod:`amp_book.pages`)."""
    from amp_book.pages import read_page

    read = read_page(page)
    cells = []
    for cell in read.cells:
        new: dict[str, Any] = {
            "cell_type": cell.kind,
            "metadata": json.loads(json.dumps(cell.metadata)),
            "source": cell.source,
        }
        if cell.kind == "code":
            new |= {"execution_count": None, "outputs": []}
        cells.append(new)
    metadata = json.loads(json.dumps(read.metadata))
    return {"cells": cells, "metadata": metadata, "nbformat": 4, "nbformat_minor": 5}


def quoted_keys(page: Path) -> set[str]:
    from amp_book.export import glue_keys

    return glue_keys([page.read_text(encoding="utf-8")])


Targets = tuple[dict[str, str], dict[str, tuple[str, str, str]]]
"""The book's page titles and section labels: what a twin's cross-references resolve to."""


def _titles_and_labels() -> Targets:
    from amp_book.export import book_titles_and_labels

    return book_titles_and_labels(DOCS)


def render(page: Path, glue: dict[str, dict[str, Any]], built_on: str, targets: Targets) -> str:
    """The twin of ``page`` with the glued values ``glue`` of a build on ``built_on``.

    ``targets`` are the book's titles and labels (:func:`_titles_and_labels`), read once for
    all the twins: read for each, they would make a check quadratic in the number of pages.
    """
    from amp_book.export import export_notebook
    from amp_book.figures import theme_figures_within

    keys = quoted_keys(page)
    titles, labels = targets
    data = export_notebook(
        page_notebook(page),
        glue,
        docname=docname(page),
        executed=False,
        titles=titles,
        labels=labels,
        built_on=built_on,
        source_dir=DOCS,
    )
    data["metadata"]["amp_lesson"] = {
        "built_on": built_on,
        # figures in the reader's theme, as the page shows them
        "glue": theme_figures_within({k: glue[k] for k in sorted(keys) if k in glue}),
    }
    return json.dumps(data, indent=1, ensure_ascii=False, sort_keys=True) + "\n"


def built_glue(page: Path) -> dict[str, dict[str, Any]]:
    """The values ``page`` glued in the last build of the book."""
    from amp_book.export import read_glue

    return read_glue(EXECUTED / f"{docname(page)}.ipynb")


def built_device(page: Path) -> str:
    """The device the last build of the book ran ``page`` on (its provenance line)."""
    from amp_book.export import build_device

    path = EXECUTED / f"{docname(page)}.ipynb"
    device = build_device(json.loads(path.read_text(encoding="utf-8"))) if path.is_file() else None
    if device is None:
        raise KeyError(f"no provenance line in {path}")
    return device


def recorded(twin: Path) -> tuple[dict[str, dict[str, Any]], str]:
    """The glued values and the build's device a twin recorded when it was written."""
    try:
        data = json.loads(twin.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}, "?"
    record = data.get("metadata", {}).get("amp_lesson") or {}
    return record.get("glue") or {}, record.get("built_on") or "?"


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in {"write", "check"}:
        print(__doc__, file=sys.stderr)
        return 2
    want = {twin_path(p): p for p in pages()}
    have = set(OUT.rglob("*.ipynb")) if OUT.exists() else set()
    problems: list[str] = []
    targets = _titles_and_labels()
    if argv[0] == "write":
        texts = {}
        for twin, page in want.items():
            try:
                texts[twin] = render(page, built_glue(page), built_device(page), targets)
            except KeyError as error:
                problems.append(f"{page.relative_to(ROOT)}: {error.args[0]}")
        if problems:
            print("\n".join(problems), file=sys.stderr)
            print("build the book first (nox -s docs), or run `nox -s notebooks`", file=sys.stderr)
            return 1
        for path in have - set(want):
            path.unlink()
        for twin, text in texts.items():
            twin.parent.mkdir(parents=True, exist_ok=True)
            twin.write_text(text, encoding="utf-8")
        print(f"wrote {len(texts)} notebooks to {OUT.relative_to(ROOT)}/")
        return 0
    problems += [f"orphaned: {p}" for p in sorted(have - set(want))]
    for twin, page in want.items():
        if twin not in have:
            problems.append(f"missing: {twin}")
            continue
        try:
            text = render(page, *recorded(twin), targets)
        except KeyError as error:
            problems.append(f"stale: {twin} ({error.args[0]})")
            continue
        if twin.read_text(encoding="utf-8") != text:
            problems.append(f"stale: {twin}")
    for line in problems:
        print(line, file=sys.stderr)
    if problems:
        print("run `nox -s notebooks` to regenerate", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
