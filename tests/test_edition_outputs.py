"""A stored edition is read as untrusted data: amp_book.edition_outputs, through the store."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

import pytest
from test_edition import CELLS, CPU_PROVENANCE, _book, _executed

from amp_book import edition_outputs as outputs
from amp_book import edition_store as store
from amp_book.edition_store import EditionError


def _recorded(tmp_path: Path) -> store.Edition:
    """An edition of one page, ``p``, as the recorder stores it."""
    docs, executed = _book(tmp_path, {"p": _executed([(c, []) for c in CELLS])})
    return store.record(docs, executed, tmp_path / "editions", CPU_PROVENANCE)


def _notebook_path(edition: store.Edition) -> Path:
    return edition.folder / str(edition.pages["p"].file)


def _replace(edition: store.Edition, notebook: dict[str, Any], summary: bool = True) -> Path:
    """Store ``notebook`` as page p's, with its summary (so only what it holds is judged)."""
    path = _notebook_path(edition)
    path.write_bytes(gzip.compress(json.dumps(notebook).encode()))
    if summary:
        outputs.summary_path(path).write_text(outputs.summary(notebook), encoding="utf-8")
    return path


def test_the_recorder_writes_a_plain_text_summary_a_pull_request_shows(tmp_path: Path) -> None:
    edition = _recorded(tmp_path)
    path = _notebook_path(edition)
    text = outputs.summary_path(path).read_text(encoding="utf-8")
    assert outputs.summary_path(path).name == "p.summary.txt"
    assert text.startswith("[1] from amp_lesson.device import provenance\n")
    assert "    Provenance(device_type='cpu', device_name='CPU (x86_64, 2 cores)'" in text
    assert store.load_edition(edition.folder).notebook("p")["cells"]


def _with_output(output: dict[str, Any]) -> dict[str, Any]:
    notebook = json.loads(json.dumps(_executed([(c, []) for c in CELLS])))
    notebook["cells"][2]["outputs"] = [output]
    return notebook


def _display(mime: str, value: str) -> dict[str, Any]:
    return {"output_type": "display_data", "data": {mime: value}, "metadata": {}}


@pytest.mark.parametrize(
    ("output", "problem"),
    [
        (_display("text/html", "<img src=x onerror=alert(1)>"), "a <img> element"),
        (_display("text/html", "<p>a</p><script>alert(1)</script>"), "a <script> element"),
        (_display("text/html", '<p onclick="x()">a</p>'), "a 'onclick' attribute on <p>"),
        (
            _display("application/javascript", "alert(1)"),
            "an output of type application/javascript",
        ),
        (_display("image/svg+xml", "<svg><script>alert(1)</script></svg>"), "a <script> element"),
        (
            _display(
                "image/svg+xml", '<svg><style>@import url("https://x.example");</style></svg>'
            ),
            "a style sheet that loads or runs something",
        ),
        (
            _display(outputs.GLUE_PREFIX + "text/html", '<a href="javascript:x()">a</a>'),
            "a <a> element",
        ),
        (_display("text/markdown", "Hi <iframe src=x></iframe>"), "raw HTML '<iframe src=x>'"),
        (_display("image/png", "not base64!"), "image/png data that is not base64"),
    ],
)
def test_an_output_the_book_would_not_print_is_refused_naming_the_page_and_file(
    tmp_path: Path, output: dict[str, Any], problem: str
) -> None:
    """Before: published as it was (a recorded ``<img onerror>`` ran on the edition's page)."""
    edition = _recorded(tmp_path)
    path = _replace(edition, _with_output(output))
    with pytest.raises(EditionError) as refused:
        store.load_edition(edition.folder)
    message = str(refused.value)
    assert message.startswith(f"{path} (page p): refused, it holds what the book does not show")
    assert f"cell 3: {problem}" in message, message


def test_markdown_cells_and_raw_cells_carry_no_html(tmp_path: Path) -> None:
    edition = _recorded(tmp_path)
    notebook = _executed([(c, []) for c in CELLS])
    notebook["cells"][0]["source"] = "# Page\n\n<script>alert(1)</script>\n"
    _replace(edition, notebook)
    with pytest.raises(EditionError, match=r"cell 1: raw HTML '<script>alert\(1\)</script>'"):
        store.load_edition(edition.folder)
    notebook["cells"][0] = {"cell_type": "raw", "source": "<b>x</b>", "metadata": {}}
    _replace(edition, notebook)
    with pytest.raises(EditionError, match=r"cell 1: a cell of type 'raw'"):
        store.load_edition(edition.folder)


def test_the_books_own_outputs_pass(tmp_path: Path) -> None:
    """What the book's display module and Matplotlib write is shown: a table, a provenance
    line, a figure with clip paths and internal links."""
    from amp_lesson.display import Table

    table = Table([{"format": "FP16", "max": 65504.0}])._repr_html_()
    svg = (
        '<svg xmlns:xlink="http://www.w3.org/1999/xlink" viewBox="0 0 10 10" version="1.1">'
        '<style type="text/css">*{stroke-linejoin: round}</style><defs><clipPath id="c">'
        '<rect x="0" y="0" width="10" height="10"/></clipPath><path id="m" d="M 0 0 L 1 1"/>'
        '</defs><g clip-path="url(#c)"><use xlink:href="#m" x="1" y="2" style="fill: #000"/>'
        "</g></svg>"
    )
    for output in (_display("text/html", table), _display("image/svg+xml", svg)):
        assert outputs.notebook_problems(_with_output(output)) == []


def test_a_file_that_leads_out_of_the_edition_is_refused(tmp_path: Path) -> None:
    """Before: ``/etc/hostname`` or ``../`` named as a page's file was opened."""
    edition = _recorded(tmp_path)
    manifest = edition.folder / store.MANIFEST
    outside = tmp_path / "outside.ipynb.gz"
    outside.write_bytes(_notebook_path(edition).read_bytes())
    (edition.folder / "link.ipynb.gz").symlink_to(outside)
    for file, words in [
        ("/etc/hostname", "its file must be a path ending .ipynb.gz, got '/etc/hostname'"),
        (
            str(outside),
            "its file must be a path inside the edition's folder, got " + repr(str(outside)),
        ),
        (
            "../../outside.ipynb.gz",
            "its file must be a path inside the edition's folder, got '../../outside.ipynb.gz'",
        ),
        ("link.ipynb.gz", "its file 'link.ipynb.gz' leads out of the edition's folder"),
    ]:
        data = json.loads(manifest.read_text())
        data["pages"]["p"]["file"] = file
        manifest.write_text(json.dumps(data))
        with pytest.raises(EditionError) as refused:
            store.load_edition(edition.folder)
        assert str(refused.value) == f"{manifest}: page p: refused, {words}", file


def test_a_file_that_is_not_a_small_gzip_is_refused_before_it_is_read_whole(
    tmp_path: Path,
) -> None:
    """Before: a file that is not gzip failed the build as a bare "Extension error", and a
    612 KB gzip holding 600 MB was decompressed whole."""
    edition = _recorded(tmp_path)
    path = _notebook_path(edition)
    path.write_bytes(b"plain text")
    with pytest.raises(EditionError, match=r"\(page p\): refused, not a whole gzip file") as e:
        store.load_edition(edition.folder)
    assert str(e.value).startswith(str(path))
    path.write_bytes(gzip.compress(b'{"cells": []}')[:-6])  # cut short
    with pytest.raises(EditionError, match=r"refused, not a whole gzip file"):
        store.load_edition(edition.folder)
    with gzip.open(path, "wb", compresslevel=9) as bomb:  # 32 MiB of spaces in 33 KB
        for _ in range(outputs.MAX_NOTEBOOK_BYTES >> 20):
            bomb.write(b" " * (1 << 20))
        bomb.write(b" ")
    assert path.stat().st_size < 100_000
    with pytest.raises(EditionError, match=r"refused, it decompresses to more than 33554432"):
        store.load_edition(edition.folder)
    with open(path, "wb") as big:
        big.truncate(outputs.MAX_FILE_BYTES + 1)
    with pytest.raises(EditionError, match=r"refused, 4194305 bytes, more than the 4194304"):
        store.load_edition(edition.folder)


def test_a_summary_that_is_not_the_notebooks_or_none_is_refused(tmp_path: Path) -> None:
    edition = _recorded(tmp_path)
    path = _notebook_path(edition)
    summary = outputs.summary_path(path)
    summary.write_text(summary.read_text().replace("2 cores", "3 cores"))
    with pytest.raises(EditionError, match=r"refused, it is not the summary of p\.ipynb\.gz"):
        store.load_edition(edition.folder)
    # the notebook changed and its summary not: refused too
    _replace(edition, _with_output(_display("text/plain", "another number")), summary=False)
    with pytest.raises(EditionError, match=r"not the summary of p\.ipynb\.gz"):
        store.load_edition(edition.folder)
    os.remove(summary)
    with pytest.raises(EditionError, match=r"p\.summary\.txt \(page p\): missing"):
        store.load_edition(edition.folder)
    assert store.write_summaries(edition.folder) == [summary]
    store.load_edition(edition.folder)


def test_the_committed_editions_pass_their_own_checks() -> None:
    """Every stored edition of the book loads: outputs, files and summaries as recorded."""
    from helpers import DOCS

    folders = store.find_editions(DOCS / "_editions")
    assert folders, "the book stores at least one edition"
    for folder in folders:
        edition = store.load_edition(folder)
        for docname, page in edition.pages.items():
            if page.status == store.RECORDED:
                assert edition.notebook(docname)["cells"], docname
