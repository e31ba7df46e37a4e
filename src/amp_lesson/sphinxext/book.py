"""Build machinery that keeps the book honest and self-contained.

- The execution cache is keyed on the source of ``amp_lesson`` (and any
  watched data), the torch version and the build device: MyST-NB's own key
  covers a page's cells only, so without this a change to the package would
  leave old numbers on the page.
- Every page with code cells must have executed; a page that silently did
  not (for example front matter with ``kernelspec`` alone) fails the build.
- Math is rendered to MathML at build time, so no script is fetched.
- Each page offers its executed notebook for download, and an "Open in
  Colab" button when the repository is known.
"""

from __future__ import annotations

import datetime
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.errors import SphinxError
from sphinx.util import logging

import amp_lesson

logger = logging.getLogger(__name__)

PACKAGE_DIR = Path(amp_lesson.__file__).resolve().parent
KEEP_CACHES = 3
_SKIP_PARTS = {"__pycache__", ".ipynb_checkpoints"}


def source_hash(paths: Iterable[Path], extra: Iterable[str] = ()) -> str:
    """SHA-256 over every file below ``paths`` (names and bytes) and ``extra``.

    Byte-compiled files and caches are left out, so the hash changes exactly
    when a source file, a data file or one of the ``extra`` strings changes.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = (d / "a.py").write_text("X = 1")
    >>> h1 = source_hash([d])
    >>> _ = (d / "a.py").write_text("X = 2")
    >>> h1 == source_hash([d])
    False
    """
    digest = hashlib.sha256()
    for root in sorted(Path(p) for p in paths):
        if not root.exists():
            digest.update(f"missing:{root.name}".encode())
            continue
        files = [root] if root.is_file() else sorted(root.rglob("*"))
        for path in files:
            if not path.is_file() or path.suffix in {".pyc", ".pyo"}:
                continue
            if _SKIP_PARTS.intersection(path.parts):
                continue
            rel = path.relative_to(root.parent).as_posix()
            digest.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    for item in extra:
        digest.update(item.encode() + b"\0")
    return digest.hexdigest()


def execution_key(watch: Iterable[Path] = ()) -> str:
    """The execution-cache key of this build environment.

    It covers the package's source, watched files, the torch version and the
    device the cells will run on (``AMP_LESSON_DEVICE`` and whether an NVIDIA
    device is present), since each of these changes what the pages print.
    torch itself is not imported: that alone would cost an author two seconds
    on every rebuild.
    """
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = "absent"
    extra = [
        f"torch={torch_version}",
        f"device={os.environ.get('AMP_LESSON_DEVICE', 'auto')}",
        f"nvidia={os.path.exists('/dev/nvidiactl')}",
    ]
    return source_hash([PACKAGE_DIR, *watch], extra)


def _key_cache_on_sources(app: Sphinx, config: Config) -> None:
    confdir = Path(app.confdir)
    watch = [confdir / p for p in config.amp_lesson_watch]
    key = execution_key(watch)
    config.amp_lesson_source_hash = key
    base = Path(
        os.environ.get("AMP_LESSON_CACHE_DIR") or Path(app.outdir).parent / ".jupyter_cache"
    )
    cache = base / key[:16]
    config.nb_execution_cache_path = str(cache)
    if base.is_dir():
        # Keep the few most recent caches (switching branches back and forth
        # stays cheap) and drop the rest, which can never be hit again.
        old = sorted(
            (p for p in base.iterdir() if p.is_dir() and p != cache),
            key=lambda p: p.stat().st_mtime,
            reverse=True,
        )
        for stale in old[KEEP_CACHES - 1 :]:
            shutil.rmtree(stale, ignore_errors=True)
    cache.mkdir(parents=True, exist_ok=True)
    if config.nb_execution_mode == "cache":
        # Create the cache's database here, once: parallel readers (-j) that
        # each find it missing race to create it ("table settings already exists").
        from jupyter_cache.cache.db import create_db

        create_db(cache).dispose()
    logger.info("amp_lesson: execution cache key %s", key[:16])


class NotebookExecutionError(SphinxError):
    """A page's cell raised: the build stops and prints the cell's traceback."""

    category = "Notebook execution error"


def _fail_on_execution_errors(app: Sphinx, env: Any) -> None:
    """Stop the build, printing each failing cell's traceback.

    MyST-NB's own ``nb_execution_raise_on_error`` raises inside the reading
    process; under ``sphinx-build -j`` that is a worker whose log Sphinx drops,
    so the reader would see the page's name but not the traceback. This runs
    in the main process after all pages are read, whatever ``-j`` is.
    """
    failed = []
    for docname, meta in sorted(getattr(env, "nb_metadata", {}).items()):
        exec_data = meta.get("exec_data") or {}
        if exec_data and not exec_data.get("succeeded", True):
            trace = exec_data.get("traceback") or exec_data.get("error") or "(no traceback)"
            failed.append(f"{docname}: a cell raised\n{trace}")
    if failed:
        raise NotebookExecutionError("\n\n".join(failed))


_CODE_CELL = re.compile(r"^(```|:::)\{code-cell\}", re.MULTILINE)


def _check_pages_executed(app: Sphinx, env: Any) -> None:
    """Warn (so ``-W`` fails the build) for any page whose cells never ran."""
    nb_metadata = getattr(env, "nb_metadata", {})
    for docname in sorted(env.found_docs):
        source = Path(env.doc2path(docname))
        if source.suffix not in {".md", ".ipynb"}:
            continue
        text = source.read_text(encoding="utf-8")
        has_cells = bool(_CODE_CELL.search(text)) or source.suffix == ".ipynb"
        if not has_cells:
            continue
        exec_data = nb_metadata.get(docname, {}).get("exec_data")
        if not exec_data or not exec_data.get("succeeded"):
            logger.warning(
                "%s has code cells but was not executed; give it jupytext or "
                "'file_format: mystnb' front matter with a kernelspec",
                docname,
                location=docname,
                type="amp_lesson",
                subtype="not_executed",
            )


def _note_pages_without_code(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    """Give pages that run no code a provenance line too (what built them, and when)."""
    nb_metadata = getattr(app.env, "nb_metadata", {})
    if nb_metadata.get(docname, {}).get("exec_data"):
        return  # executed pages print their own line from their first cell
    section = next(iter(doctree.findall(nodes.section)), None)
    if section is None:
        return
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = "not installed"
    today = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    text = (
        f"This page runs no code. Built with amp_lesson {amp_lesson.__version__} and "
        f"torch {torch_version} on {today}."
    )
    para = nodes.paragraph(text, text, classes=["amp-provenance"])
    title = next(iter(section.findall(nodes.title)), None)
    section.insert(section.index(title) + 1 if title is not None else 0, para)


# -- MathML ----------------------------------------------------------------------


def _mathml(latex: str, display: bool) -> str:
    from latex2mathml.converter import convert

    return convert(latex.strip(), display="block" if display else "inline")


def _visit_math_html(self: Any, node: nodes.Element) -> None:
    self.body.append(f'<span class="math notranslate">{_mathml(node.astext(), False)}</span>')
    raise nodes.SkipNode


def _visit_displaymath_html(self: Any, node: nodes.Element) -> None:
    latex = node.astext()
    number = f'<span class="eqno">({node["number"]})</span>' if node.get("number") else ""
    self.body.append(self.starttag(node, "div", CLASS="math notranslate nohighlight"))
    self.body.append(f"{number}{_mathml(latex, True)}</div>\n")
    raise nodes.SkipNode


# -- notebooks: download and Colab ------------------------------------------------


def _repository(app: Sphinx) -> str:
    """``owner/name`` of the GitHub repository, or '' when it is not known."""
    repo = app.config.amp_lesson_repository.strip()
    if not repo:
        url = os.environ.get("READTHEDOCS_GIT_CLONE_URL", "")
        match = re.match(r"(?:https://github\.com/|git@github\.com:)([^/]+/[^/.]+)", url)
        repo = match.group(1) if match else ""
    return repo.removesuffix(".git").strip("/")


def notebook_for_download(
    nb: dict[str, Any], repository: str, executed: bool = True
) -> dict[str, Any]:
    """``nb`` with two first cells that say how to run it outside the book.

    With a known GitHub ``repository`` ("owner/name") the setup cell installs
    ``amp_lesson`` from it; otherwise it stops with instructions instead of
    guessing an address.
    """
    nb = json.loads(json.dumps(nb))
    if repository:
        spec = f"amp-lesson @ git+https://github.com/{repository}"
        setup_src = (
            "import importlib.util\n"
            "if importlib.util.find_spec('amp_lesson') is None:\n"
            f'    %pip install -q "{spec}"'
        )
    else:
        setup_src = (
            "import importlib.util\n"
            "if importlib.util.find_spec('amp_lesson') is None:\n"
            '    raise SystemExit("Install the book\'s package first, from a clone of its "\n'
            '                     "repository: pip install -e .")'
        )
    outputs = "with the outputs of the build that published it" if executed else "without outputs"
    intro = {
        "cell_type": "markdown",
        "metadata": {},
        "source": (
            "This notebook is a page of the book *Mixed precision in PyTorch*, "
            f"{outputs}. It needs the book's package `amp_lesson`; the next cell "
            "checks for it."
        ),
    }
    setup = {
        "cell_type": "code",
        "execution_count": None,
        "metadata": {},
        "outputs": [],
        "source": setup_src,
    }
    cells = [intro, setup, *nb.get("cells", [])]
    for i, cell in enumerate(cells):
        cell["id"] = f"cell-{i}"  # stable ids: regenerating gives the same file
    nb["cells"] = cells
    nb["nbformat"], nb["nbformat_minor"] = 4, max(nb.get("nbformat_minor", 5), 5)
    return nb


def _add_notebook_buttons(
    app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any
) -> None:
    executed = Path(app.outdir).parent / "jupyter_execute" / f"{pagename}.ipynb"
    if doctree is None or not executed.is_file():
        return
    target = Path(app.outdir) / "_sources" / f"{pagename}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    nb = notebook_for_download(json.loads(executed.read_text(encoding="utf-8")), _repository(app))
    target.write_text(json.dumps(nb, indent=1), encoding="utf-8")
    context["ipynb_source"] = f"{pagename}.ipynb"


def _add_colab_button(
    app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any
) -> None:
    repo = _repository(app)
    if not repo or "ipynb_source" not in context or "header_buttons" not in context:
        return
    branch = app.config.amp_lesson_branch
    url = (
        f"https://colab.research.google.com/github/{repo}/blob/{branch}/notebooks/{pagename}.ipynb"
    )
    context["header_buttons"].append(
        {
            "type": "link",
            "text": "Colab",
            "url": url,
            "tooltip": "Open this page as a notebook in Colab",
            "icon": "_static/images/logo_colab.png",
            "label": "colab-button",
        }
    )


def setup(app: Sphinx) -> None:
    app.add_config_value("amp_lesson_watch", [], "env", types=[list])
    app.add_config_value("amp_lesson_source_hash", "", "env", types=[str])
    app.add_config_value("amp_lesson_repository", "", "html", types=[str])
    app.add_config_value("amp_lesson_branch", "main", "html", types=[str])
    # Before MyST-NB reads nb_execution_cache_path at builder-inited.
    app.connect("config-inited", _key_cache_on_sources, priority=100)
    app.connect("env-updated", _fail_on_execution_errors)
    app.connect("env-check-consistency", _check_pages_executed)
    app.connect("doctree-resolved", _note_pages_without_code)
    app.add_html_math_renderer("mathml", (_visit_math_html, None), (_visit_displaymath_html, None))
    # Before the theme builds its download menu (priority 500), after it adds buttons.
    app.connect("html-page-context", _add_notebook_buttons, priority=450)
    app.connect("html-page-context", _add_colab_button, priority=900)
    app.connect("config-inited", _add_static_path)
    app.add_css_file("amp_lesson.css")


def _add_static_path(app: Sphinx, config: Config) -> None:
    config.html_static_path.append(str(Path(__file__).parent / "static"))
