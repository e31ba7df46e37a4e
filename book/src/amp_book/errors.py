"""A page that did not run cleanly fails the build, naming the page and the cell.

- A cell that raised stops the build with its traceback, printed by the main
  process whatever ``-j`` is; a kernel that died fails its page, naming the
  cell (:mod:`.execution`).
- A traceback among a cell's outputs (a cell that did not raise) is a warning,
  so ``-W`` fails the build, at every build until the page is fixed.
- A page with code cells that never executed is a warning too.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.errors import SphinxError
from sphinx.util import logging

logger = logging.getLogger(__name__)


class BookError(SphinxError):
    """A fault the book's build found and names (a page, a file, a setting): not a bug of
    Sphinx, so it is reported without Sphinx's request to open an issue with Sphinx
    (:func:`report_own_errors`)."""

    category = "The book's build stopped"


class NotebookExecutionError(BookError):
    """A page's cell raised: the build stops and prints the cell's traceback."""

    category = "Notebook execution error"


def own_error(exception: BaseException) -> BaseException | None:
    """The book's own error behind ``exception`` (raised by ``amp_book``, wrapped or not by
    Sphinx, in this process or a parallel reader), or ``None`` for any other.

    >>> own_error(BookError("x")) is not None, own_error(ValueError("x"))
    (True, None)
    """
    from sphinx.errors import ExtensionError, SphinxParallelError

    seen: set[int] = set()
    todo: list[BaseException | None] = [exception]
    while todo:
        error = todo.pop()
        if error is None or id(error) in seen:
            continue
        seen.add(id(error))
        if type(error).__module__.split(".")[0] == "amp_book":
            return error
        if isinstance(error, SphinxParallelError):
            # A reader's error arrives as its text: "EditionError: ..." first.
            name = str(error).split(":", 1)[0].strip()
            if name in _own_error_names():
                return error
        orig = error.orig_exc if isinstance(error, ExtensionError) else None
        todo += [orig, error.__cause__, error.__context__]
    return None


def _own_error_names() -> set[str]:
    names: set[str] = set()
    todo: list[type[BaseException]] = [BaseException]
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if cls.__module__.split(".")[0] == "amp_book":
            names.add(cls.__name__)
    return names


def report_own_errors() -> Callable[[], None]:
    """Have ``sphinx-build`` report the book's own errors (:func:`own_error`) as what they
    are: the category and the message, which names the page or file and what to do, without
    Sphinx's traceback file and its request to report the error to Sphinx's developers (the
    rest as Sphinx reports them; with ``-T`` or ``-P``, all of them). Returns the undo.

    It wraps ``sphinx._cli.util.errors.handle_exception``, which ``sphinx.cmd.build``
    calls for any exception (``tests/test_patches.py`` fails if that changes).
    """
    import sphinx._cli.util.errors as sphinx_errors

    original = sphinx_errors.handle_exception

    def handle_exception(exception: BaseException, /, **options: Any) -> None:
        own = own_error(exception)
        if own is None or options.get("use_pdb") or options.get("print_traceback"):
            original(exception, **options)
            return
        stderr = options.get("stderr") or sys.stderr
        category = getattr(own, "category", "") or "The book's build stopped"
        message = str(own) or repr(own)
        print(f"\n{category}: {message}\n", file=stderr)
        print("(sphinx-build -T prints where in the build it happened)", file=stderr)

    sphinx_errors.handle_exception = handle_exception

    def undo() -> None:
        sphinx_errors.handle_exception = original

    return undo


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
    from amp_book import execution  # not at the top: the cache, which it imports, uses BookError

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
    from amp_book import execution, pages

    dead = execution.dead_kernels(env)
    for docname in sorted(env.found_docs):
        source = Path(env.doc2path(docname))
        if docname in dead or not source.is_file() or source.suffix not in {".md", ".ipynb"}:
            continue
        exec_data = nb_metadata.get(docname, {}).get("exec_data")
        if exec_data and exec_data.get("succeeded"):
            continue  # executed: whether it has code cells does not matter
        text = source.read_text(encoding="utf-8")
        if source.suffix == ".md" and (
            "code-cell" not in text or not pages.code_cell_lines(text, source)
        ):
            continue
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
