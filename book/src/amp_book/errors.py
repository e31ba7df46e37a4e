"""A page that did not run cleanly fails the build, naming the page and the cell.

- A cell that raised stops the build with its traceback, printed by the main
  process whatever ``-j`` is; a kernel that died fails its page, naming the
  cell (:mod:`.execution`).
- A traceback among a cell's outputs (a cell that did not raise) is a warning,
  so ``-W`` fails the build, at every build until the page is fixed.
- A page with code cells that never executed is a warning too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.errors import SphinxError
from sphinx.util import logging

from amp_book import execution, pages

logger = logging.getLogger(__name__)


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
    for docname, what in execution.dead_kernels(env).items():
        failed.append(f"{env.doc2path(docname)}: {what}")
    if failed:
        raise NotebookExecutionError(
            f"{len(failed)} page(s) failed to execute:\n\n" + "\n\n".join(sorted(failed))
        )


ERROR_OUTPUTS = "amp_lesson_error_outputs"
"""Where the environment keeps, per page, the tracebacks among its outputs."""


def _note_error_outputs(app: Sphinx, doctree: nodes.document) -> None:
    """Remember each traceback among a page's outputs (see :func:`_fail_on_error_outputs`).

    A cell can finish without raising and still print a traceback: IPython
    shows an exception raised while it displays a value (a figure's
    formatter refusing it, say) as an error output of a cell that
    succeeded. The page would publish the traceback in place of the value.
    """
    found = []
    for node in doctree.findall(nodes.literal_block):
        if "traceback" in node.get("classes", []):
            last = node.astext().strip().splitlines()[-1:] or ["(no message)"]
            found.append((node.line, last[0]))
    errors = getattr(app.env, ERROR_OUTPUTS, {})
    errors[app.env.docname] = found
    setattr(app.env, ERROR_OUTPUTS, errors)


def _forget_error_outputs(app: Sphinx, env: Any, docname: str) -> None:
    getattr(env, ERROR_OUTPUTS, {}).pop(docname, None)


def _merge_error_outputs(app: Sphinx, env: Any, docnames: set[str], other: Any) -> None:
    errors = getattr(env, ERROR_OUTPUTS, {})
    errors.update({d: v for d, v in getattr(other, ERROR_OUTPUTS, {}).items() if d in docnames})
    setattr(env, ERROR_OUTPUTS, errors)


def _fail_on_error_outputs(app: Sphinx, env: Any) -> None:
    """Warn (so ``-W`` fails the build) for every traceback among the pages' outputs.

    At every build, an unchanged page too: the environment keeps them, so a
    build after one that warned cannot pass by not reading the page again.
    """
    for docname, found in sorted(getattr(env, ERROR_OUTPUTS, {}).items()):
        for line, message in found:
            logger.warning(
                "a cell's output is a traceback, though the cell did not raise: %s",
                message,
                location=(docname, line),
                type="amp_lesson",
                subtype="error_output",
            )


def _check_pages_executed(app: Sphinx, env: Any) -> None:
    """Warn (so ``-W`` fails the build) for any page whose cells never ran.

    Not in the build of a stored edition, whose pages ran where it was recorded.
    """
    if getattr(app.config, "amp_lesson_edition", ""):
        return
    nb_metadata = getattr(env, "nb_metadata", {})
    dead = execution.dead_kernels(env)
    for docname in sorted(env.found_docs):
        source = Path(env.doc2path(docname))
        if docname in dead or not source.is_file() or source.suffix not in {".md", ".ipynb"}:
            continue
        text = source.read_text(encoding="utf-8")
        if source.suffix == ".md" and not pages.code_cell_lines(text, source):
            continue
        exec_data = nb_metadata.get(docname, {}).get("exec_data")
        if not exec_data or not exec_data.get("succeeded"):
            logger.warning(
                "%s has code cells but was not executed; give it 'file_format: mystnb' "
                "front matter with a kernelspec",
                docname,
                location=docname,
                type="amp_lesson",
                subtype="not_executed",
            )


def setup(app: Sphinx) -> dict[str, bool]:
    """Check every page's execution after reading."""
    app.connect("env-updated", _fail_on_execution_errors)
    app.connect("doctree-read", _note_error_outputs)
    app.connect("env-purge-doc", _forget_error_outputs)
    app.connect("env-merge-info", _merge_error_outputs)
    app.connect("env-check-consistency", _fail_on_error_outputs)
    app.connect("env-check-consistency", _check_pages_executed)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
