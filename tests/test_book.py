"""The book build cannot lie: it fails on errors, executes every page, never serves stale output."""

from __future__ import annotations

import json
import os
import pickle
import posixpath
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import DOCS, FRONT_MATTER, add_extension, mini_book, sphinx_build

import amp_lesson
from amp_book import workdirs
from amp_book.pages import code_cell_lines

pytestmark = pytest.mark.book


def _toctree_docs(env: Any) -> list[str]:
    """Every document reachable from the root toctree."""
    seen, todo = [], ["index"]
    while todo:
        doc = todo.pop(0)
        if doc in seen:
            continue
        seen.append(doc)
        todo.extend(env.toctree_includes.get(doc, []))
    return seen


def _env(html: Path) -> Any:
    with open(workdirs.doctrees_folder(html) / "environment.pickle", "rb") as f:
        return pickle.load(f)


def test_every_page_in_the_toctree_was_executed(built_book: Path) -> None:
    env = _env(built_book)
    docs = _toctree_docs(env)
    assert len(docs) > 1
    pages_with_code = 0
    for doc in docs:
        source = Path(env.doc2path(doc))
        # Code cells as MyST-NB finds them, notebook front matter or not: a page that has some
        # but is no notebook never ran them, and fails below.
        if source.suffix != ".ipynb" and not code_cell_lines(source.read_text(encoding="utf-8")):
            continue
        pages_with_code += 1
        exec_data = env.nb_metadata[doc].get("exec_data")
        assert exec_data, f"{doc} was not executed"
        assert exec_data["succeeded"], f"{doc} failed to execute"
        executed = json.loads((workdirs.executed_folder(built_book) / f"{doc}.ipynb").read_text())
        code = [c for c in executed["cells"] if c["cell_type"] == "code"]
        assert code, f"{doc}: no code cells in the executed notebook"
        # Outputs restored from the cache carry no execution counts, so look at
        # what ran: the provenance cell printed, and the page has outputs.
        assert code[0]["outputs"], f"{doc}: its first cell has no output"
        assert sum(bool(c["outputs"]) for c in code) >= 2, f"{doc}: almost no outputs"
        html = (built_book / f"{doc}.html").read_text(encoding="utf-8")
        assert 'class="amp-provenance"' in html, f"{doc} lacks its provenance line"
    assert pages_with_code >= 1


def test_no_page_loads_anything_from_outside(built_book: Path) -> None:
    pattern = re.compile(
        r'<(?:script|link|img|iframe|source)\b[^>]*(?:src|href)="(https?:)?//', re.IGNORECASE
    )
    offenders = []
    for page in built_book.rglob("*.html"):
        for match in pattern.finditer(page.read_text(encoding="utf-8")):
            tag = match.group(0)
            if tag.lower().startswith("<link") and "stylesheet" not in tag and "preload" not in tag:
                continue  # a plain hyperlink-like <link rel=...>, not a load
            offenders.append((page.relative_to(built_book).as_posix(), tag))
    assert offenders == []


def test_each_page_offers_its_executed_notebook(built_book: Path) -> None:
    env = _env(built_book)
    for doc in _toctree_docs(env):
        if "exec_data" not in env.nb_metadata.get(doc, {}):
            continue
        nb_path = built_book / "_sources" / f"{doc}.ipynb"
        nb = json.loads(nb_path.read_text(encoding="utf-8"))
        assert nb["nbformat"] == 4
        assert nb["cells"][1]["cell_type"] == "code"
        assert any(c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code")
        html = (built_book / f"{doc}.html").read_text(encoding="utf-8")
        assert f"_sources/{doc}.ipynb" in html, f"{doc}: no download link"


# -- small books built in a temporary folder ----------------------------------------


def test_each_pickled_doctree_holds_its_page_and_not_the_build_environment(
    built_book: Path,
) -> None:
    """API pages' nodes pointed at their parse's document, and so pickled the whole env."""
    doctrees = sorted(workdirs.doctrees_folder(built_book).rglob("*.doctree"))
    api = [d for d in doctrees if d.parent.name == "api"]
    assert len(api) >= 10
    carrying = [
        d.relative_to(built_book).as_posix()
        for d in doctrees
        if b"BuildEnvironment" in d.read_bytes()
    ]
    assert carrying == []
    # and every node still finds its document
    doctree = pickle.loads(
        (workdirs.doctrees_folder(built_book) / "api" / "amp_lesson.recipe.doctree").read_bytes()
    )
    assert all(node.document is doctree for node in doctree.findall())


def test_a_failing_cell_fails_even_a_build_without_w(tmp_path: Path) -> None:
    """The failure does not hinge on -W: the extension raises after reading."""
    src = mini_book(tmp_path, "```{code-cell} ipython3\nraise ValueError('no')\n```\n")
    cmd = [
        sys.executable,
        "-m",
        "sphinx",
        "-j",
        "auto",
        "-b",
        "html",
        str(src),
        str(tmp_path / "o"),
    ]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
    log = re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout + proc.stderr)  # IPython colours
    assert proc.returncode != 0
    assert "Notebook execution error" in log
    assert "ValueError: no" in log


@pytest.mark.usefixtures("sphinx")
def test_a_page_that_would_silently_not_execute_fails_the_build(tmp_path: Path) -> None:
    kernelspec_only = "---\nkernelspec:\n  name: python3\n  display_name: Python 3\n---\n"
    src = mini_book(tmp_path, "```{code-cell} ipython3\n1 + 1\n```\n", kernelspec_only)
    proc = sphinx_build(src, tmp_path / "html", check=False)
    assert proc.returncode != 0
    assert "has code cells but was not executed" in proc.stdout + proc.stderr


@pytest.mark.usefixtures("sphinx")
def test_a_module_edit_reexecutes_the_pages_that_import_it_and_no_other(
    tmp_path: Path,
) -> None:
    """A constant changed in one module shows on the rebuilt page that imports it; the page
    that imports another module is served from the cache (and not even read again)."""
    pkg = tmp_path / "pkg"
    shutil.copytree(
        Path(amp_lesson.__file__).parent,
        pkg / "amp_lesson",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    lesson = pkg / "amp_lesson" / "lesson_constant.py"
    lesson.write_text("LESSON_CONSTANT = 'first value'\n")
    body = (
        "```{code-cell} ipython3\nfrom amp_lesson.lesson_constant import LESSON_CONSTANT\n"
        "print(LESSON_CONSTANT)\n```\n"
    )
    src = mini_book(tmp_path, body)
    (src / "other.md").write_text(
        FRONT_MATTER + "\n# Other\n\n```{code-cell} ipython3\nimport amp_lesson.formats\n```\n"
    )
    index = src / "index.md"
    index.write_text(index.read_text().replace("page\n", "page\nother\n"))
    out = tmp_path / "html"
    env = dict(os.environ, PYTHONPATH=str(pkg))

    sphinx_build(src, out, env=env)
    assert "first value" in (out / "page.html").read_text()
    other_mtime = _env(out).nb_metadata["other"]["exec_data"]["mtime"]

    lesson.write_text("LESSON_CONSTANT = 'second value'\n")
    proc = sphinx_build(src, out, env=env)  # no -E: an author's plain rebuild
    page = (out / "page.html").read_text()
    assert "second value" in page
    assert "first value" not in page
    log = proc.stdout + proc.stderr
    assert "page.md: Executing notebook" in log
    assert "other.md" not in log  # not read again, so not executed
    assert _env(out).nb_metadata["other"]["exec_data"]["mtime"] == other_mtime


@pytest.mark.usefixtures("sphinx")
def test_a_module_edit_reads_again_a_page_whose_playground_it_computes(tmp_path: Path) -> None:
    """The explorer's table is computed by amp_lesson.playground when its page is read; the page
    imports nothing, yet an edit to that module shows on the rebuilt page."""
    pkg = tmp_path / "pkg"
    shutil.copytree(
        Path(amp_lesson.__file__).parent,
        pkg / "amp_lesson",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    src = mini_book(tmp_path, ":::{bit-explorer}\n:value: 1\n:examples: 1e-8\n:::\n")
    out = tmp_path / "html"
    env = dict(os.environ, PYTHONPATH=str(pkg))
    sphinx_build(src, out, env=env)
    assert "underflow to zero" in (out / "page.html").read_text()

    playground = pkg / "amp_lesson" / "playground.py"
    text = playground.read_text()
    assert text.count('"underflow to zero"') == 1
    playground.write_text(text.replace('"underflow to zero"', '"flushed to zero"'))
    sphinx_build(src, out, env=env)  # no -E: an author's plain rebuild
    page = (out / "page.html").read_text()
    assert "flushed to zero" in page
    assert "underflow to zero" not in page


def test_execution_timeout_is_raised_from_the_default() -> None:
    import runpy

    conf = runpy.run_path(str(DOCS / "conf.py"))
    assert conf["nb_execution_timeout"] > 30
    assert conf["nb_execution_show_tb"] is True


def test_the_api_pages_and_only_they_are_known_to_need_amp_lesson_imported() -> None:
    # Before the parallel readers fork, the extension imports amp_lesson once if an API page
    # is to be read (autodoc imports it); it recognises those pages by their directives.
    from amp_book.scheduling import AUTODOC as _AUTODOC

    pages = {
        p.relative_to(DOCS).as_posix(): p.read_text(encoding="utf-8")
        for p in DOCS.rglob("*.md")
        if "_build" not in p.parts
    }
    found = {name for name, text in pages.items() if _AUTODOC.search(text)}
    expected = {name for name in pages if name.startswith("api/amp_lesson")}
    assert expected
    assert found == expected


@pytest.mark.usefixtures("sphinx")
def test_the_runner_keeps_sphinx_status_and_all_of_its_output(tmp_path: Path) -> None:
    # tools/run_sphinx.py ends the process without Python's teardown: nothing
    # buffered may be lost, and the status must be Sphinx's own.
    src = mini_book(tmp_path, "Text.\n")
    built = sphinx_build(src, tmp_path / "html")  # output piped, so block-buffered
    assert built.returncode == 0
    # Sphinx's last line, then the build tool's (tools/build_book.py, once Sphinx has ended)
    *_, sphinx_last, tool_last = built.stdout.splitlines()
    assert sphinx_last.startswith("The HTML pages are in")
    assert tool_last == f"The book is in {tmp_path / 'html' / 'index.html'}"
    bad = [str(src), str(tmp_path / "bad"), "-b", "no_such_builder"]
    runner = subprocess.run(
        [sys.executable, str(DOCS.parent / "tools" / "run_sphinx.py"), *bad],
        capture_output=True,
        text=True,
        check=False,
    )
    plain = subprocess.run(
        [sys.executable, "-m", "sphinx", *bad], capture_output=True, text=True, check=False
    )
    assert runner.returncode == plain.returncode != 0
    assert "no_such_builder" in runner.stderr


RENDEZVOUS = '''\
"""Each process that writes pages (not the main one) waits on its first page to meet another."""
import os
import time
from pathlib import Path

FOLDER = Path(os.environ["RENDEZVOUS_DIR"])
MAIN = os.getpid()


def _meet(app, pagename, templatename, context, doctree):
    me = FOLDER / f"{os.getpid()}.arrived"
    if os.getpid() == MAIN or me.exists():
        return
    me.touch()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        others = {p.stem for p in FOLDER.glob("*.arrived")} - {str(os.getpid())}
        if others:
            (FOLDER / f"{os.getpid()}.saw").write_text(" ".join(sorted(others)))
            return
        time.sleep(0.05)


def setup(app):
    app.connect("html-page-context", _meet)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
'''


@pytest.mark.usefixtures("sphinx")
def test_with_j_n_the_pages_are_written_in_n_processes_at_once(tmp_path: Path) -> None:
    # Sphinx itself writes with N - 1 processes, one writer for -j 2; the extension uses N.
    # Two writers that each see the other while waiting on their first page ran at once; a
    # writer that only starts after another has finished sees it, but is not seen back.
    src = mini_book(tmp_path, "Text.\n")
    add_extension(src, "rendezvous", RENDEZVOUS)
    pages = ["page"] + [f"page{i}" for i in range(5)]
    for name in pages[1:]:
        (src / f"{name}.md").write_text(f"# {name}\n\nText.\n")
    (src / "index.md").write_text("# Mini\n\n```{toctree}\n" + "\n".join(pages) + "\n```\n")
    meet = tmp_path / "meet"
    meet.mkdir()
    env = dict(os.environ, RENDEZVOUS_DIR=str(meet))
    sphinx_build(src, tmp_path / "html", "-j", "2", env=env)

    saw = {p.stem: set(p.read_text().split()) for p in meet.glob("*.saw")}
    assert len(list(meet.glob("*.arrived"))) >= 2, "fewer than two writer processes"
    met = {(a, b) for a in saw for b in saw[a] if a in saw.get(b, ())}
    assert met, f"no two writers ran at once: {saw}"


FAILING_CELLS = {
    "exit": "x = 1\n```\n\n```{code-cell} ipython3\nimport os\nos._exit(3)",
    "segfault": "import ctypes\nctypes.string_at(0)",
    "kill": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)",
    "raise": "def f():\n    return 1 / 0\nf()",
    "warn": "import warnings\nwarnings.warn('kept for the reader')",
}
"""One small book's pages, each failing its own way: the build reports every one of them."""


@pytest.mark.usefixtures("sphinx")
@pytest.mark.parametrize("fork", [True, False])
def test_every_failing_page_fails_the_build_naming_its_cell_and_how_it_failed(
    tmp_path: Path, fork: bool
) -> None:
    """A kernel that exits, segfaults or is killed fails its page naming the cell; a cell
    that raises prints its traceback; a cell that warns fails the build pointing to its
    line (a reader never sees a page whose own code prints a warning,
    ``nb_output_stderr``). All in one build, with forked kernels and with fresh ones."""
    src = mini_book(tmp_path, "```{code-cell} ipython3\nprint('fine')\n```\n")
    for name, code in FAILING_CELLS.items():
        (src / f"bad-{name}.md").write_text(
            FRONT_MATTER + f"\n# Bad {name}\n\n```{{code-cell}} ipython3\n{code}\n```\n"
        )
    index = src / "index.md"
    entries = "".join(f"bad-{name}\n" for name in FAILING_CELLS)
    index.write_text(index.read_text().replace("```{toctree}\n", "```{toctree}\n" + entries))
    proc = sphinx_build(
        src, tmp_path / "html", "-D", f"amp_lesson_fork_kernels={int(fork)}", check=False
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "4 page(s) failed to execute" in log, log[-4000:]
    assert "parallel build error" not in log
    died = "the kernel died in code cell"
    assert f"bad-exit.md: {died} 2 (line 18: 'import os')" in log, log[-4000:]
    assert f"bad-segfault.md: {died} 1 (line 14: 'import ctypes')" in log
    assert f"bad-kill.md: {died} 1 (line 14: 'import os, signal')" in log
    # and how it died: its exit status, or the signal that ended it, whether the kernel was
    # forked or started as jupyter_client starts it (the book's provisioner sees it either way)
    how = [
        "Kernel died; it ended with exit status 3)",
        "Kernel died; it ended with signal SIGSEGV (11; a crash in compiled code))",
        "Kernel died; it ended with signal SIGKILL (9; the out-of-memory killer",
    ]
    assert [h in log for h in how] == [True] * 3, log[-4000:]
    assert "bad-raise: a cell raised" in log
    assert "ZeroDivisionError" in log
    assert "return 1 / 0" in log  # the traceback itself, not just the error name
    # the page and the line of the cell, so the author can find it
    assert re.search(r"bad-warn\.md:\d+: WARNING: stderr was found in the cell outputs", log), log


# -- The book among its neighbours: links out, references, what a host publishes ----------


def test_the_site_publishes_no_doctrees_and_has_a_sitemap_a_404_page_and_a_card(
    built_book: Path,
) -> None:
    import xml.etree.ElementTree as ET

    from amp_book import urls

    assert not (built_book / ".doctrees").exists()
    assert (workdirs.doctrees_folder(built_book) / "environment.pickle").is_file()
    base = urls.documentation_url() + "/"  # no READTHEDOCS_CANONICAL_URL in a test's build
    ns = {"s": "http://www.sitemaps.org/schemas/sitemap/0.9"}
    locs = [
        e.text for e in ET.parse(built_book / "sitemap.xml").getroot().findall("s:url/s:loc", ns)
    ]
    pages = {p.relative_to(built_book).as_posix() for p in built_book.rglob("*.html")
             if not p.relative_to(built_book).parts[0] in ("editions", "_static", "_images")}  # fmt: skip
    assert {base + page for page in pages - {"search.html", "404.html", "print.html"}} == set(locs)
    index = (built_book / "index.html").read_text(encoding="utf-8")
    assert f'<link rel="canonical" href="{base}index.html" />' in index
    assert f'<meta property="og:image" content="{base}_static/social-card.png" />' in index
    assert (built_book / "_static" / "social-card.png").is_file()
    assert "Page not found" in (built_book / "404.html").read_text(encoding="utf-8")
    edition = next((built_book / "editions").glob("*/chapter/formats.html"), None)
    if edition is not None:  # its own address, under editions/<slug>/
        slug = edition.parent.parent.name
        assert f'href="{base}editions/{slug}/chapter/formats.html"' in edition.read_text()
        assert not (edition.parent.parent / "sitemap.xml").exists()


def test_every_work_in_the_bibliography_is_cited_and_every_citation_reaches_it(
    built_book: Path,
) -> None:
    from bs4 import BeautifulSoup
    from pybtex.database import parse_file

    keys = set(parse_file(str(DOCS / "references.bib")).entries)
    refs = BeautifulSoup((built_book / "references.html").read_text(), "html.parser")
    entries = refs.select("div.citation")
    assert len(entries) == len(keys), "a work in references.bib is cited on no page"
    ids = {e["id"] for e in entries}
    cited = 0
    for page in built_book.rglob("*.html"):
        rel = page.relative_to(built_book)
        if rel.parts[0] in ("editions", "_static") or rel.name == "print.html":
            continue
        soup = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")
        for link in soup.select("span.bibtex-citation a"):
            target, _, anchor = link["href"].partition("#")
            resolved = posixpath.normpath(posixpath.join(rel.parent.as_posix(), target))
            assert (resolved, anchor in ids) == ("references.html", True), (page, link)
            cited += 1
    assert cited >= len(keys)


LINKS_AT_LEAST = {"torch": 60, "python": 5}
"""Links into each project's documentation the built book must hold (issue: 60 into PyTorch's)."""


@pytest.mark.parametrize("project", sorted(LINKS_AT_LEAST))
def test_the_book_links_into_the_documentation_whose_inventory_it_holds(
    built_book: Path, project: str
) -> None:
    from amp_book import inventories

    folder = DOCS / "_inventories"
    site = inventories.load_sources(folder)[project]["site"]
    if project in inventories.missing(folder):
        pytest.skip(f"{project}'s inventory is not read yet (docs/_inventories/sources.json)")
    links = 0
    for page in built_book.rglob("*.html"):
        if (
            page.relative_to(built_book).parts[0] in ("editions", "_static")
            or page.name == "print.html"
        ):
            continue
        links += page.read_text(encoding="utf-8").count(f'href="{site}')
    assert links >= LINKS_AT_LEAST[project], f"{links} links into {site}"


def test_every_page_and_the_print_book_state_the_licences(built_book: Path) -> None:
    """The footer of every page, and the print book's cover (so the PDF's first page)."""
    from bs4 import BeautifulSoup

    where = {
        "index.html": "footer .amp-licence",
        "chapter/formats.html": "footer .amp-licence",
        "references.html": "footer .amp-licence",
        "print.html": "header.amp-print-cover .amp-licence",
    }
    for page, selector in where.items():
        soup = BeautifulSoup((built_book / page).read_text(encoding="utf-8"), "html.parser")
        (licence,) = soup.select(selector)
        assert licence.get_text() == "Text and figures: CC BY 4.0. Code: BSD-3-Clause.", page
        assert licence.select_one('a[rel="license"]')["href"] == (
            "https://creativecommons.org/licenses/by/4.0/"
        )
