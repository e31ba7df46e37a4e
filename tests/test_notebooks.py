"""The notebooks a reader takes away: plain Jupyter, in step with the pages, and they run."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import notebooks
import pytest
from bs4 import BeautifulSoup
from helpers import ROOT, built_soup, one_step_bitwise
from pip_config import uv_find_links

import amp_lesson
from amp_book import export, urls
from amp_book.export import markdown as myst
from amp_book.export import targets
from amp_book.kickers import KICKERS
from amp_lesson.claims import CLAIM_RECORD_PREFIX
from amp_lesson.notebook import WAITING_NOTE, format_glued_text, split_role

TWINS = sorted(notebooks.OUT.rglob("*.ipynb"))
# Notebooks known not to run outside the book, each with why; the test fails when one of
# them starts to run (remove it here then) or when any other notebook fails.
KNOWN_BROKEN: dict[str, str] = {}
LOCK = ROOT / "requirements" / "constraints.txt"
BUILD_WORDS = re.compile(
    r"\bthis build\b|\bthe build(?:'s)? device\b|\b(?:this|the) page was built\b", re.IGNORECASE
)
BUILD_LABEL = export.build_label("X").split(" on X")[0]  # "<sub>As the book's build"
WAITING = WAITING_NOTE.rsplit(";", 1)[1].strip(" *")  # "it is printed here when they have run."


def _markdown_outside_code(text: str) -> str:
    """Markdown with its fenced code blocks left out (the authoring guide quotes MyST in them)."""
    return re.sub(r"^(`{3,}|~{3,}).*?^\1\s*$", "", text, flags=re.MULTILINE | re.DOTALL)


def _cells(nb: dict, kind: str) -> list[str]:
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == kind]


def test_notebook_twins_are_in_step_with_the_pages(capsys) -> None:
    status = notebooks.main(["check"])
    assert status == 0, capsys.readouterr().err


def test_the_twin_check_notices_a_changed_page(tmp_path: Path, monkeypatch, capsys) -> None:
    """On a copy of the book checked for one page (every page is checked above)."""
    docs, out = tmp_path / "docs", tmp_path / "notebooks"
    shutil.copytree(notebooks.DOCS, docs, ignore=shutil.ignore_patterns("_build"))
    (tmp_path / "src").symlink_to(ROOT / "src")  # what the pages' literalincludes read
    (out / "chapter").mkdir(parents=True)
    shutil.copy(notebooks.OUT / "chapter" / "formats.ipynb", out / "chapter")
    monkeypatch.setattr(notebooks, "DOCS", docs)
    monkeypatch.setattr(notebooks, "OUT", out)
    monkeypatch.setattr(notebooks, "pages", lambda: [docs / "chapter" / "formats.md"])
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
    install = _cells(nb, "code")[0]
    assert urls.install_spec() in install
    assert "%pip install" in install
    for text in ["".join(c["source"]) for c in _text_cells(nb)]:
        # a notebook runs where the reader runs it: its words speak of "this run", not the build
        assert not BUILD_WORDS.search(text), BUILD_WORDS.search(text)[0]
    for text in _cells(nb, "markdown"):
        prose = _markdown_outside_code(text)
        # code spans are kept as written (the guide quotes MyST in them); a role is a
        # {name} right before a code span
        bare = re.sub(r"(?<!\})(`+)(.+?)\1", "", prose)
        assert not re.search(r"\{[\w:-]+\}`", bare), f"a MyST role is left in:\n{prose}"
        assert not re.search(r"^\s*(:{3,}|`{3,})\{", prose, re.MULTILINE), prose
        assert not re.search(r"^\([\w-]+\)=\s*$", prose, re.MULTILINE), prose
        assert not BUILD_WORDS.search(prose), BUILD_WORDS.search(prose)[0]
        # no right answer is marked; answers sit in a collapsed section
        assert not re.search(r"^\s*[-*] \[[xX ]\]", prose, re.MULTILINE), prose
        if "**Answer:**" in prose:
            assert prose.index("<details>") < prose.index("**Answer:**")


def test_the_readme_links_to_the_declared_repository() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    repo = urls.repository_url()
    assert f"]({repo})" in readme
    assert f"]({urls.colab_url('notebooks/chapter/start.ipynb')})" in readme
    for url in re.findall(r"https://github\.com/[\w.-]+/[\w.-]+", readme):
        assert url == repo, f"README names another repository: {url}"


@pytest.mark.book
def test_each_download_is_its_twin_with_outputs(built_book: Path) -> None:
    opened = []
    for twin in TWINS:
        doc = twin.relative_to(notebooks.OUT).with_suffix("").as_posix()
        download = json.loads((built_book / "_sources" / f"{doc}.ipynb").read_text())
        committed = json.loads(twin.read_text())
        assert _cells(download, "code") == _cells(committed, "code"), doc
        assert any(c.get("outputs") for c in download["cells"] if c["cell_type"] == "code")
        assert "myst_nb" not in json.dumps(download)
        html = (built_book / f"{doc}.html").read_text(encoding="utf-8")
        colab = urls.colab_url(f"notebooks/{doc}.ipynb")
        assert colab in html, f"{doc}: no Colab button"
        opens = export.opens_on(committed)
        if opens is not None:  # Colab opens the twin scrolled to that cell
            assert f"{colab}#scrollTo={opens}" in html, doc
            opened.append(doc)
    assert opened == ["beyond/check-your-own-model"]


def _venv_python(venv: Path) -> Path:
    return venv / ("Scripts" if os.name == "nt" else "bin") / "python"


def _repository_of_the_tree(path: Path) -> Path:
    """A git repository holding the working tree as it is, tagged as the install cell names it."""
    files = subprocess.run(
        ["git", "-C", ROOT, "ls-files", "-co", "--exclude-standard", "-z"],
        capture_output=True, check=True, text=True,
    ).stdout.split("\0")  # fmt: skip
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (path / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, path / name)
    git = ["git", "-C", path, "-c", "user.name=test", "-c", "user.email=test@example.invalid"]
    # the reference the install cell names: the version's tag, or the branch of a development version
    ref = urls.install_ref()
    branch = "main" if ref.startswith("v") else ref
    for args in (["init", "-q", "-b", branch], ["add", "-A"], ["commit", "-q", "-m", "tree"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    if ref.startswith("v"):
        subprocess.run([*git, "tag", ref], check=True, capture_output=True)
    return path


@pytest.mark.notebooks
def test_exported_notebooks_run_in_a_fresh_environment(tmp_path: Path) -> None:
    """The install cell, run in a kernel where amp_lesson is missing, installs the package (a
    wheel built from the repository at the version's tag or branch, here a local clone of the tree), and
    every twin then runs where MyST-NB and Sphinx are not."""
    venv, work = tmp_path / "venv", tmp_path / "work"
    work.mkdir()
    repo = _repository_of_the_tree(tmp_path / "repo")
    run = lambda *cmd, **kw: subprocess.run(
        [str(c) for c in cmd], check=True, capture_output=True, text=True, **kw
    )
    py = _venv_python(venv)
    uv = Path(sys.executable).with_name("uv")  # the environment's own, as nox installs it
    if uv.is_file():  # a minute faster than venv and pip (torch: 2 s against 48 here)
        run(uv, "venv", "-q", "--seed", "--python", sys.executable, venv)  # --seed: %pip needs pip
        pip = [uv, "pip", "install", "-q", "--compile-bytecode", "--python", py, "-c", LOCK]
        pip += uv_find_links()
    else:
        run(sys.executable, "-m", "venv", venv)
        pip = [py, "-m", "pip", "install", "-q", "--disable-pip-version-check", "-c", LOCK]
    index = os.environ.get("AMP_LESSON_TORCH_INDEX")
    run(*pip, "torch", *(["--index-url", index, "--no-deps"] if index else []))
    # What a reader's Jupyter has, and the package's dependencies (so that the install cell's
    # pip, resolving the same versions, only builds and installs amp_lesson itself).
    meta = importlib.metadata.metadata("amp-lesson")
    needs = [r for r in meta.get_all("Requires-Dist") or [] if "extra ==" not in r]
    needs += [
        r.split(";")[0] for r in meta.get_all("Requires-Dist") or [] if 'extra == "notebooks"' in r
    ]
    run(*pip, *needs, "nbclient", "ipykernel")
    assert (
        run(py, "-c", "import importlib.util as u; print(u.find_spec('amp_lesson'))").stdout.strip()
        == "None"
    )

    install = urls.install_cell_source(repository=repo.as_uri())
    assert urls.install_cell_source().replace(urls.repository_url(), repo.as_uri()) == install
    cell = {
        "cell_type": "code",
        "execution_count": None,
        "metadata": {},
        "outputs": [],
        "source": install,
    }
    (work / "install.ipynb").write_text(
        json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(
        OMP_NUM_THREADS="1", PIP_CONSTRAINT=str(LOCK)
    )  # two notebooks at a time on two cores
    runner = [py, ROOT / "tools" / "run_notebooks.py"]
    installed = subprocess.run([*runner, "install.ipynb"], capture_output=True, text=True, cwd=work, env=env, check=False)  # fmt: skip
    assert installed.returncode == 0, installed.stdout[-6000:] + installed.stderr[-4000:]
    where = run(py, "-c", "import amp_lesson, importlib.util as u, importlib.metadata as m; "
                "print(amp_lesson.__file__); print(amp_lesson.__version__, u.find_spec('myst_nb'), "
                "u.find_spec('sphinx'), u.find_spec('amp_book'), "
                "[e.name for e in m.entry_points(group='jupyter_client.kernel_provisioners')])",
                cwd=work).stdout.split(maxsplit=5)  # fmt: skip
    assert Path(where[0]).is_relative_to(venv), f"amp_lesson came from {where[0]}"
    assert where[1] == amp_lesson.__version__
    # the lesson alone: no MyST-NB, no Sphinx, no book's build, no kernel provisioner of ours
    assert where[2:5] == ["None", "None", "None"], where
    assert "amp-lesson-fork" not in where[5], where[5]
    direct = json.loads(run(py, "-m", "pip", "inspect", "--local").stdout)
    (record,) = [d for d in direct["installed"] if d["metadata"]["name"] == "amp-lesson"]
    assert record["direct_url"]["url"] == repo.as_uri(), record["direct_url"]
    assert record["direct_url"]["vcs_info"]["requested_revision"] == urls.install_ref()

    proc = subprocess.run(
        [*runner, "--jobs", "2", "--slowest-cells", "3", "--out", tmp_path / "ran", *TWINS],
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
    # Every passage was printed by this run: none kept the build's text or still waits.
    printed = 0
    for number, twin in enumerate(TWINS):
        ran = json.loads((tmp_path / "ran" / f"{number}-{twin.name}").read_text(encoding="utf-8"))
        for cell in _text_cells(ran):
            shown = " ".join(_printed(cell))
            assert shown.strip(), f"{twin}: a passage printed nothing"
            assert BUILD_LABEL not in shown, f"{twin}: the build's passage was not replaced"
            assert WAITING not in shown, f"{twin}: a passage still waits: {shown}"
            printed += 1
    assert printed == sum(len(_text_cells(json.loads(t.read_text()))) for t in TWINS)
    # The sentence that follows the run (test_a_notebooks_sentences_follow_its_own_run flips it).
    import torch

    number = TWINS.index(ACCUMULATION)
    ran = json.loads((tmp_path / "ran" / f"{number}-{ACCUMULATION.name}").read_text())
    sentence, _ = _passage(ran, "In float32 they")
    assert sentence.startswith(_float32_verdict(one_step_bitwise(torch.float32)))


# -- the words a notebook prints: its own run's ------------------------------------------------


def _text_cells(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if export.TEXT_CELL_TAG in c["metadata"].get("tags", [])]


def _printed(cell: dict) -> list[str]:
    return [
        "".join(o["data"]["text/markdown"])
        for o in cell["outputs"]
        if "text/markdown" in o.get("data", {})
    ]


def _passage(nb: dict, start: str) -> tuple[str, list[str]]:
    """The sentence of ``nb`` that begins with ``start``, and every output of its cell."""
    for cell in _text_cells(nb):
        shown = _printed(cell)
        text = " ".join(" ".join(shown).split())
        if start in text:
            return re.search(re.escape(start) + r"[^.]*\.", text).group(0), shown
    raise AssertionError(f"no printed passage holds {start!r}")


def _execute(nb: dict, cwd: Path) -> dict:
    import nbformat
    from nbclient import NotebookClient

    node = nbformat.from_dict(json.loads(json.dumps(nb)))
    NotebookClient(node, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute()  # fmt: skip
    return json.loads(nbformat.writes(node))


ACCUMULATION = notebooks.OUT / "chapter" / "accumulation-equals-full-batch.ipynb"


def _float32_verdict(bitwise: bool) -> str:
    return f"In float32 they {'are' if bitwise else 'are not'} bitwise identical"


@pytest.mark.notebooks
def test_a_notebooks_sentences_follow_its_own_run(tmp_path: Path) -> None:
    """The accumulation page's notebook with its float32 runs made float64: the sentence it
    prints follows the run, and the build's text and label are replaced. (As exported, its
    run prints the float32 verdict: test_exported_notebooks_run_in_a_fresh_environment.)"""
    import torch

    expected = {dt: one_step_bitwise(dt) for dt in (torch.float32, torch.float64)}
    assert expected[torch.float32] != expected[torch.float64], "no outcome to flip on this device"

    twin = json.loads(ACCUMULATION.read_text())
    built, shown = _passage(twin, "In float32 they")  # as the book's build printed it
    assert built.startswith(_float32_verdict(expected[torch.float32]))
    assert shown[-1].startswith(BUILD_LABEL)

    flipped = json.loads(json.dumps(twin))
    for cell in flipped["cells"]:
        if cell["cell_type"] == "code":
            cell["source"] = cell["source"].replace("(dtype=dtype)", "(dtype=torch.float64)")
    assert flipped != twin
    ran, shown = _passage(_execute(flipped, tmp_path), "In float32 they")
    assert ran.startswith(_float32_verdict(expected[torch.float64]))
    assert not any(BUILD_LABEL in text for text in shown), "the build's label outlived the run"


def _glue_records(doc: str) -> dict[str, dict]:
    return export.read_glue(notebooks.EXECUTED / f"{doc}.ipynb")


def _wordings(glue: dict[str, dict]) -> set[str]:
    """Every wording of every claim of a page, and each sentence it glued as text."""
    words = set()
    for key, bundle in glue.items():
        text = format_glued_text(myst.as_text(bundle.get("text/plain", "")), "")
        if key.startswith(CLAIM_RECORD_PREFIX):
            record = json.loads(text)
            words |= {w for w in (record["says"], record["otherwise"]) if w}
        elif not text.lstrip().startswith("<"):
            words.add(text)
    # A phrase of a word or three ("larger", "2 ulps") is also plain prose elsewhere.
    return {" ".join(w.split()) for w in words if len(w.split()) >= 4}


@pytest.mark.book
def test_no_markdown_cell_of_a_notebook_holds_a_claim_or_a_glued_sentence(built_book: Path) -> None:
    """Claims' wordings and glued sentences reach a notebook only through cells its run prints."""
    checked = 0
    for twin in TWINS:
        doc = twin.relative_to(notebooks.OUT).with_suffix("").as_posix()
        glue = _glue_records(doc)
        for path in (twin, built_book / "_sources" / f"{doc}.ipynb"):
            nb = json.loads(path.read_text(encoding="utf-8"))
            static = " ".join(" ".join(_cells(nb, "markdown")).split())
            for words in _wordings(glue):
                assert words not in static, f"{path}: a Markdown cell states {words!r}"
                checked += 1
            for cell in _text_cells(nb):
                for m in re.finditer(r"\{glue(?::\w+)?\}`([^`]+)`", cell["source"]):
                    key, _ = split_role(None, m[1])
                    assert key in glue, f"{path}: a printed passage quotes {key!r}, never glued"
    assert checked > 400, checked  # 468 when written


def _roles(page: Path) -> list[tuple[str, str]]:
    """The cross-references of a page's prose: (role, content), outside code and the info line."""
    text = _markdown_outside_code(page.read_text(encoding="utf-8"))
    text = re.sub(r"^:assumes:.*$", "", text, flags=re.MULTILINE)  # {page-info}: the book's own
    # A playground's body introduces the site's static version, which a notebook has not
    # (myst.IN_A_NOTEBOOK says instead which call gives it).
    text = re.sub(
        r"^:::\{(?:bit-explorer|scaler-playground)\}.*?^:::$",
        "",
        text,
        flags=re.MULTILINE | re.DOTALL,
    )
    return re.findall(r"(?<!`)\{(ref|numref|doc|term|py:\w+)\}`([^`]+)`", text)


@pytest.mark.book
def test_every_cross_reference_is_a_link_to_the_hosted_page_and_anchor(built_book: Path) -> None:
    titles, labels = notebooks._titles_and_labels()
    docs_url = urls.documentation_url()
    seen = 0
    for page in notebooks.pages():
        doc = notebooks.docname(page)
        twin = json.loads(notebooks.twin_path(page).read_text(encoding="utf-8"))
        text = "\n".join(
            _cells(twin, "markdown") + [t for c in _text_cells(twin) for t in _printed(c)]
        )
        for role, content in _roles(page):
            title, target = myst._split_title_target(content)
            if role.startswith("py:"):
                name = target.lstrip("~")
                module = max(
                    (d[4:] for d in titles if d.startswith("api/") and name.startswith(d[4:])),
                    key=len,
                )
                target_doc = f"api/{module}"
                anchor = f"module-{name}" if role == "py:mod" else name
                url = f"{docs_url}/{target_doc}.html#{anchor}"
                words = title or (name.rsplit(".", 1)[-1] if target.startswith("~") else name)
                words = (
                    f"`{words}()`" if role in ("py:func", "py:meth") and not title else f"`{words}`"
                )
            elif role == "term":  # the glossary entry, by the anchor Sphinx gave it
                target_doc, anchor, _ = labels[targets.TERM_PREFIX + target.lower()]
                url, words = f"{docs_url}/{target_doc}.html#{anchor}", title or target
            elif role == "doc":
                target_doc = myst._resolve_doc(target, myst.Context({}, docs_url, doc))
                url, words = f"{docs_url}/{target_doc}.html", title or titles[target_doc]
                anchor = None
            else:
                target_doc, anchor, section = labels[target]
                url = f"{docs_url}/{target_doc}.html#{anchor}"
                words = re.sub(r"\s*\{(number|name)\}", "", title).strip() or section
            assert f"[{words}]({url})" in text, f"{doc}: {{{role}}}`{content}` is not a link"
            assert anchor is None or built_soup(built_book / f"{target_doc}.html").find(
                id=anchor
            ), f"{url}: no such anchor on the site"
            seen += 1
    assert seen > 230, seen  # 197 terms and 30 other references when written


def _bold_leads(texts: list[str]) -> list[str]:
    return [m[1] for t in texts for m in re.finditer(r"^\*\*(.+?)\.\*\* ", t, re.MULTILINE)]


@pytest.mark.book
def test_self_checks_carry_the_sites_labels(built_book: Path) -> None:
    compared = 0
    for twin in TWINS:
        doc = twin.relative_to(notebooks.OUT).with_suffix("").as_posix()
        html = built_soup(built_book / f"{doc}.html")
        site = [p.get_text(strip=True) for p in html.select("article .sc-kicker")]
        nb = json.loads(twin.read_text(encoding="utf-8"))
        known = set(site) | set(KICKERS.values())
        ordered = [
            c for c in nb["cells"][1:] if c["cell_type"] == "markdown" or c in _text_cells(nb)
        ]
        texts = [
            "".join(c["source"]) if c["cell_type"] == "markdown" else "\n\n".join(_printed(c))
            for c in ordered
        ]
        assert [k for k in _bold_leads(texts) if k in known] == site, doc
        compared += len(site)
    assert compared > 40, compared


# -- downloads -----------------------------------------------------------------------------------


@pytest.mark.book
def test_the_site_offers_every_notebook_in_one_zip_and_each_page_as_a_script(
    built_book: Path, tmp_path: Path
) -> None:
    import zipfile

    from amp_book.buttons import NOTEBOOKS_ZIP

    docs = {t.relative_to(notebooks.OUT).with_suffix("").as_posix() for t in TWINS}
    lesson = {d for d in docs if not d.startswith("guide/")}  # the authors' guide is no lesson
    assert lesson < docs  # the guide has a notebook, and the zip leaves it out
    with zipfile.ZipFile(built_book / NOTEBOOKS_ZIP) as archive:
        names = set(archive.namelist())
        assert names == {f"amp-lesson/{d}.ipynb" for d in lesson}
        for doc in lesson:
            assert (
                archive.read(f"amp-lesson/{doc}.ipynb")
                == (built_book / "_sources" / f"{doc}.ipynb").read_bytes()
            )
    index = BeautifulSoup((built_book / "index.html").read_text(), "html.parser")
    assert index.select_one(f"article a[href='{NOTEBOOKS_ZIP}']"), "the landing page has no link"
    for doc in docs:
        script = (built_book / "_sources" / f"{doc}.py").read_text(encoding="utf-8")
        compile(script, f"{doc}.py", "exec")
        html = built_soup(built_book / f"{doc}.html")
        links = {
            a.get("href", "").rsplit("/", 1)[-1]
            for a in html.select(".dropdown-download-buttons a")
        }
        assert {f"{doc.rsplit('/', 1)[-1]}.py", NOTEBOOKS_ZIP} <= links, f"{doc}: {links}"
    # A script prints the page's passages from its own run.
    doc = "chapter/why-accumulate"
    record = json.loads(
        format_glued_text(_glue_records(doc)[CLAIM_RECORD_PREFIX + "act_linear"]["text/plain"], "")
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"MPLBACKEND": "agg"}
    proc = subprocess.run(
        [sys.executable, built_book / "_sources" / f"{doc}.py"],
        capture_output=True, text=True, cwd=tmp_path, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    said = record["says"] if record["holds"] else record["otherwise"]
    assert " ".join(said.split()) in " ".join(proc.stdout.split())
