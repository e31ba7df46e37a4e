"""A stored edition is read as untrusted data: amp_book.edition_outputs, through the store."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

import pytest
from test_edition import CELLS, CPU_PROVENANCE, _book, _executed

from amp_book.edition import outputs, store
from amp_book.edition.store import EditionError


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
    assert text.startswith('metadata {"kernelspec": {"amp_lesson_inputs": "k1"}}\n| # Page\n')
    assert "\n[1]\n  > from amp_lesson.device import provenance\n" in text
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
            "a style sheet '@import url(",
        ),
        (
            _display(outputs.GLUE_PREFIX + "text/html", '<a href="javascript:x()">a</a>'),
            "a <a> element",
        ),
        (
            _display("text/markdown", "Hi <iframe src=x></iframe>"),
            "an output of type text/markdown",
        ),
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


PAYLOAD = "<img src=x onerror=alert(1)>"


@pytest.mark.parametrize(
    "markup",
    [
        f"<svg><style>{PAYLOAD}</style></svg>",  # in SVG a <style> holds elements
        f"<!-- --!>{PAYLOAD} -->",  # a comment a browser ends earlier than Python's parser
        f"<!-->{PAYLOAD}-->",
        f"<![CDATA[>{PAYLOAD}]]>",
        f"<style></style x>{PAYLOAD}</style>",
        '<p class="amp-provenance">x</p><img src=x onerror="alert(1)" ',  # closed by the page
        '<p style="background:URL(https://evil.example/t.png)">x</p>',
        '<svg><style>@IMPORT "https://evil.example/x.css";</style></svg>',
        '<p style="u\\72l(https://evil.example/t.png)">x</p>',
        "<p style=\"fill: image-set('https://evil.example/t.png' 1x)\">x</p>",
        '<svg><path mask="URL(https://evil.example/m.svg)"/></svg>',
        '<svg><style>@im&#x70;ort "https://evil.example/x.css"</style></svg>',
        '<div style="position:fixed;inset:0;z-index:99999;background:#fff">Fake page</div>',
        "<svg><style>body{display:none}</style></svg>",
        '<table class="navbar">x</table>',
    ],
)
def test_markup_a_browser_reads_otherwise_is_refused_or_shown_as_text(markup: str) -> None:
    """Each of these passed the old check, read by Python's parser one way and by a browser
    another: markup that runs a script, loads from elsewhere or dresses up as the page."""
    written, problems = outputs.clean_markup(markup)
    assert problems or "<img" not in written, (problems, written)
    if not problems:  # safe only as written again: the browser gets text
        assert written.endswith('&lt;img src=x onerror="alert(1)" '), written
    assert "<img" not in written


@pytest.mark.parametrize(
    ("markdown", "problem"),
    [
        ("```{raw} html\n<script>alert(1)</script>\n```", "a {raw} directive"),
        (":::{raw} html\n<b>x</b>\n:::", "a {raw} directive"),
        ("```{eval-rst}\n.. raw:: html\n\n   <b>x</b>\n```", "a {eval-rst} directive"),
        ("```{include} ../../README.md\n```", "a {include} directive"),
        ("```{literalinclude} /etc/passwd\n```", "a literalinclude of '/etc/passwd'"),
        ("```{literalinclude} ../../../x.py\n```", "a literalinclude of '../../../x.py'"),
        ("```{admonition} A\nText.\n\n:::{raw} html\n<b>x</b>\n:::\n```", "a {raw} directive"),
        ("```{note}\n:::{raw} html\n<b>x</b>\n:::\n```", "option that is not one line"),
        ("{download}`secrets </etc/passwd>`", "a {download} role"),
        ("![x](/etc/passwd)", "a image"),
        ('$\\text{<img/src="x"onerror="alert(1)">}$', "it is not well-formed XML"),
        ("$\\href{javascript:alert(1)}{x}$", "a 'href' attribute"),
        ("[a link](vbscript:x)", ""),  # not a link to markdown-it: text, so nothing to refuse
    ],
)
def test_markdown_that_passes_markup_through_or_reads_a_file_is_refused(
    markdown: str, problem: str
) -> None:
    """A stored page's markdown is rendered by the edition's build: a directive, a role or
    maths that passes markup through, or reads a file of the machine, was published."""
    found = outputs.markdown_problems(markdown, "chapter/recipe")
    if problem:
        assert any(problem in p for p in found), found
    else:
        assert found == []


def test_the_lessons_own_markdown_passes() -> None:
    """Every lesson page's markdown passes: a stored page of today's book is never refused."""
    from amp_book.pages import read_text

    docs = Path(__file__).resolve().parents[1] / "docs"
    checked = 0
    for path in sorted(docs.glob("*/*.md")):
        if path.parent.name not in ("chapter", "beyond"):  # api/, guide/: the live book's alone
            continue
        docname = path.relative_to(docs).with_suffix("").as_posix()
        for cell in read_text(path.read_text(encoding="utf-8"), path).cells:
            if cell.kind == "markdown":
                assert outputs.markdown_problems(cell.source, docname) == [], docname
        checked += 1
    assert checked >= 20


def test_substitutions_are_off_so_braces_are_text() -> None:
    """MyST's substitutions render ``{{ }}`` with Jinja, which reaches the build's Python:
    the book uses none, and a stored page's braces stay text."""
    from amp_book.pages import BOOK_EXTENSIONS, markdown_parser

    assert "substitution" not in BOOK_EXTENSIONS
    tokens = markdown_parser().parse("{{ env.config }}")
    assert [t.type for t in tokens[1].children] == ["text"]


@pytest.mark.parametrize(
    ("where", "metadata", "problem"),
    [
        ("notebook", {"mystnb": {"execution_mode": "force"}}, "notebook metadata 'mystnb'"),
        ("notebook", {"myst": {"enable_extensions": ["substitution"]}}, "metadata 'myst'"),
        ("cell", {"mystnb": {"execution_mode": "force"}}, "mystnb metadata 'execution_mode'"),
        ("cell", {"mystnb": {"figure": {"caption": "<script>x</script>"}}}, "raw HTML"),
        ("output", {"evil": 1}, "output metadata 'evil'"),
        ("output", [], "output metadata that is not an object"),
        ("output", {"scrapbook": "s"}, "scrapbook metadata that is not names"),
    ],
)
def test_metadata_that_would_change_how_a_page_is_built_is_refused(
    tmp_path: Path, where: str, metadata: Any, problem: str
) -> None:
    """MyST-NB takes a notebook's ``mystnb`` metadata as the page's configuration: a stored
    notebook could turn execution back on in the edition's build, and run its cells."""
    edition = _recorded(tmp_path)
    notebook = _with_output(_display("text/plain", "1"))
    if where == "notebook":
        notebook["metadata"].update(metadata)
    elif where == "cell":
        notebook["cells"][2]["metadata"] = metadata
    else:
        notebook["cells"][2]["outputs"][0]["metadata"] = metadata
    path = _replace(edition, notebook, summary=False)
    outputs.summary_path(path).write_text("not checked before the notebook is")
    with pytest.raises(EditionError, match="refused") as refused:
        store.load_edition(edition.folder)
    assert problem in str(refused.value), str(refused.value)


def test_an_edition_that_breaks_the_reader_is_refused_not_a_crash(tmp_path: Path) -> None:
    """JSON nested past the recursion limit and a file name too long for the file system
    escaped as RecursionError and OSError and stopped the whole build."""
    edition = _recorded(tmp_path)
    path = _notebook_path(edition)
    path.write_bytes(gzip.compress(b"[" * 100_000))
    with pytest.raises(EditionError, match=r"\(page p\): refused, not a notebook's JSON"):
        store.load_edition(edition.folder)
    manifest = edition.folder / store.MANIFEST
    data = json.loads(manifest.read_text())
    data["pages"]["p"]["file"] = "a" * 300 + outputs.NOTEBOOK_SUFFIX
    manifest.write_text(json.dumps(data))
    with pytest.raises(EditionError, match="page p: refused, its file must be a short path"):
        store.load_edition(edition.folder)
    manifest.write_text("[" * 100_000)
    with pytest.raises(EditionError, match="not valid JSON"):
        store.load_edition(edition.folder)


def test_the_summary_shows_markdown_and_metadata_and_is_read_in_the_folder(
    tmp_path: Path,
) -> None:
    """A change to a page's markdown or metadata alone left the summary as it was, so a pull
    request showed nothing; a summary linked from outside the folder was read."""
    edition = _recorded(tmp_path)
    notebook = _executed([(c, []) for c in CELLS])
    before = outputs.summary(notebook)
    notebook["cells"][0]["source"] += "\nA sentence added by hand.\n"
    assert "| A sentence added by hand." in outputs.summary(notebook)
    notebook["cells"][2]["metadata"] = {"tags": ["remove-input"]}
    assert '{"tags": ["remove-input"]}' in outputs.summary(notebook)
    assert outputs.summary(notebook) != before
    path = _replace(edition, notebook)
    outside = tmp_path / "outside.txt"
    outside.write_bytes(outputs.summary_path(path).read_bytes())
    outputs.summary_path(path).unlink()
    outputs.summary_path(path).symlink_to(outside)
    with pytest.raises(EditionError, match="missing \\(or a link\\)"):
        store.load_edition(edition.folder)


def test_the_edition_build_gets_the_markup_that_was_checked(tmp_path: Path) -> None:
    """The stored HTML is written again from what was read, so what a browser parses is
    what the check parsed; an SVG figure stays the same figure, as XML."""
    from xml.etree import ElementTree

    svg = (
        '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" '
        'viewBox="0 0 10 10"><defs><clipPath id="c"><rect x="0" y="0" width="10" height="10"/>'
        '</clipPath></defs><g clip-path="url(#c)"><text transform="rotate(-90 1 2)" '
        'style="fill: light-dark(#000000, #ffffff)">a &lt; b</text></g></svg>'
    )
    edition = _recorded(tmp_path)
    _replace(edition, _with_output(_display("image/svg+xml", svg)))
    shown = store.load_edition(edition.folder).notebook("p")["cells"][2]["outputs"][0]
    written = shown["data"]["image/svg+xml"]
    assert "viewBox=" in written  # SVG's case, which an SVG read as XML needs
    assert "<clipPath" in written

    def tree(text: str) -> list[Any]:
        root = ElementTree.fromstring(text)
        return [(e.tag, sorted(e.attrib.items()), e.text) for e in root.iter()]

    assert tree(written) == tree(svg)


def test_an_older_notebook_format_cannot_hide_cells_from_the_check(tmp_path: Path) -> None:
    """nbformat 3 keeps its cells in ``worksheets``, which MyST-NB converts and renders: a
    stored notebook saying ``"nbformat": 3`` showed cells no check had read."""
    hidden = {"cell_type": "markdown", "metadata": {}, "source": "<script>alert(1)</script>"}
    notebook = {
        "nbformat": 3,
        "nbformat_minor": 0,
        "metadata": {},
        "cells": [{"cell_type": "markdown", "metadata": {}, "source": "# Page"}],
        "worksheets": [{"metadata": {}, "cells": [hidden]}],
    }
    problems = outputs.notebook_problems(notebook)
    assert "a notebook of format 3, not 4" in problems
    assert "a notebook field 'worksheets'" in problems
    notebook["cells"][0]["attachments"] = {"x.png": {"image/png": "iVBORw0KGgo="}}
    assert "cell 1: a field 'attachments'" in outputs.notebook_problems(notebook)
    edition = _recorded(tmp_path)
    checked = store.load_edition(edition.folder).notebook("p")
    assert set(checked) == {"cells", "metadata", "nbformat", "nbformat_minor"}
    assert checked["nbformat"] == 4


@pytest.mark.parametrize(
    ("markdown", "problem"),
    [
        # an argument that opens a fence hid the argument and the body from the check
        (':::{admonition} ~~~ Title <img src=x onerror="alert(1)">\n<script>x</script>\n:::\n',
         "raw HTML '<img"),
        # a code span from an option line into the body
        ('```{note}\n:class: x`\n<img src=x onerror="alert(1)">`\n```\n', "raw HTML '<img"),
        # a YAML block of options, which MyST reads and markdown-it does not
        (":::{selfcheck-predict} What?\n---\nanswer: |\n\n    <img src=x>\n---\nBecause.\n:::\n",
         "a block of options (---)"),
        ("```{literalinclude} ../../src/amp_lesson/recipe.py\n:diff: /etc/passwd\n```\n",
         "a literalinclude option 'diff'"),
        ('$\\text{<!--><img/src="x"/onerror="alert(1)">-->}$', "holds a comment"),
        ("Mail [me][x].\n\n[x]: mailto:someone@example.org\n", "a link [X] to 'mailto:"),
    ],
)  # fmt: skip
def test_markdown_is_checked_as_myst_reads_it(markdown: str, problem: str) -> None:
    found = outputs.markdown_problems(markdown, "chapter/recipe")
    assert any(problem in p for p in found), found


@pytest.mark.parametrize(
    ("markup", "problem"),
    [
        ("<p>" + "<a" * 20_000, "a tag that does not close"),  # quadratic in Python's parser
        ("<table><![marked[x]]></table>", "markup Python's parser cannot read"),
        ("<svg><style>* {opacity: 0.02; font-size: 0}</style></svg>", "a style 'opacity"),
    ],
)
def test_markup_that_hangs_crashes_or_restyles_the_page_is_refused(
    markup: str, problem: str
) -> None:
    assert any(problem in p for p in outputs.markup_problems(markup))


def test_tags_are_names_not_classes(tmp_path: Path) -> None:
    """A cell's tags become classes on its element: a tag holding a tab added the book's
    widget classes."""
    notebook = _with_output(_display("text/plain", "1"))
    notebook["cells"][2]["metadata"] = {"tags": ["x\tamp-playground"]}
    assert "cell 3: tags that are not a list of names" in outputs.notebook_problems(notebook)
    notebook["cells"][2]["metadata"] = {"tags": ["remove-input"]}
    assert outputs.notebook_problems(notebook) == []


def test_a_symlink_loop_is_refused_naming_the_page(tmp_path: Path) -> None:
    edition = _recorded(tmp_path)
    path = _notebook_path(edition)
    path.unlink()
    other = path.with_name("q" + outputs.NOTEBOOK_SUFFIX)
    path.symlink_to(other)
    other.symlink_to(path)
    with pytest.raises(EditionError, match=r"page p: refused, .*[Ll]oop"):
        store.load_edition(edition.folder)


def test_the_summary_holds_all_the_code_and_the_traceback() -> None:
    notebook = _executed([(c, []) for c in CELLS])
    notebook["cells"][2]["source"] = "first = 1\nsecond = 2  # added by hand\n"
    notebook["cells"][2]["outputs"] = [
        {"output_type": "error", "ename": "ValueError", "evalue": "no",
         "traceback": ["Traceback (most recent call last)", "  line 2, in <module>"]}
    ]  # fmt: skip
    text = outputs.summary(notebook)
    assert "  > second = 2  # added by hand" in text
    assert "    ValueError: no\n    Traceback (most recent call last)\n      line 2" in text


def test_an_edition_build_leaves_out_raw_html_the_check_did_not_write() -> None:
    """The last guard, on the doctree of a stored page in the edition's build: raw HTML that
    is not the checked markup (say, from markdown MyST read unforeseen) is left out, warned of."""
    from types import SimpleNamespace

    from docutils import nodes
    from docutils.frontend import get_default_settings
    from docutils.parsers.rst import Parser
    from docutils.utils import new_document

    from amp_book.edition import render as edition
    from amp_book.playgrounds import OWN_MARKUP

    doctree = new_document("p", get_default_settings(Parser))
    checked = '<table class="amp-table"><tr><td class="amp-number">1</td></tr></table>'
    own = nodes.raw("", "<div class='amp-playground'>", format="html")
    own[OWN_MARKUP] = True
    doctree += [
        nodes.raw("", checked, format="html"),
        nodes.raw("", "<img src=x onerror=alert(1)>", format="html"),
        own,
    ]
    app = SimpleNamespace(
        config=SimpleNamespace(amp_lesson_edition="state.json"),
        _amp_lesson_edition_state={"pages": {"p": {"state": edition.STORED[0]}}},
    )
    edition.only_checked_markup(app, doctree, "p")  # type: ignore[arg-type]
    raws = [n.astext() for n in doctree.findall(nodes.raw)]
    assert raws == [checked, "<div class='amp-playground'>"]
    assert "[left out: markup the book does not show]" in doctree.astext()
