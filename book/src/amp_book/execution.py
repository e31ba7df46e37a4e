"""What each page executes: what it depends on, and how its failure is reported.

**What a page depends on.** MyST-NB's execution cache (jupyter-cache) keys a
page on its code cells and its ``kernelspec`` metadata. The book adds to that
metadata a key of everything else the page's output depends on:

- the modules of ``amp_lesson`` its cells import, and every module of the
  package those import (found by reading their imports, not by running them),
- the modules that compute what its playground directives show
  (:data:`DIRECTIVE_MODULES`), read when the page is read,
- the watched data files (``amp_lesson_watch``) it reads: those whose folder
  its cells, or the modules it imports, name.

What every page depends on alike (the installed distributions and their
versions, Python, the device the cells run on) names the cache folder
itself (:func:`environment_key`). So an edit to a module re-runs the pages
that import it and no other; a new numpy re-runs them all. The Sphinx
extension, which no cell imports, is in no page's key.

**How a failure is reported.** A kernel that dies (a segfault in a cell,
``os._exit``, the out-of-memory killer, ``kill -9``) makes MyST-NB raise
``DeadKernelError`` in the reader, which Sphinx reports as a parallel build
error naming no page, and the other pages' errors are lost. The book's parser
turns it into a failure of that page, naming the cell that was running (each
kernel records the cell it starts, through an IPython startup file), which
the build reports with every other page's failure once all pages are read.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import yaml
from myst_nb.sphinx_ import Parser as MystNbParser
from myst_parser.parsers.sphinx_ import MystParser
from nbclient.exceptions import DeadKernelError
from sphinx.application import Sphinx

from amp_book import kernels, pages
from amp_book.cache.integrity import reading_page
from amp_book.cache.key import (
    DIRECTIVE_MODULES,
    PackageGraph,
    inputs_key,
    package_graph,
    page_inputs,
)

KEY_FIELD = "amp_lesson_inputs"
"""The ``kernelspec`` field that holds a page's key (hashed by jupyter-cache with the cells)."""
INPUTS_FIELD = "amp_lesson_input_files"
"""The page-metadata field that holds the page's modules and data (see :func:`page_inputs`)."""
DEAD_KERNEL_FIELD = "amp_lesson_dead_kernel"
"""The page-metadata field that holds what was running when a page's kernel died."""
RECORDS_ENV = "AMP_LESSON_CELL_RECORDS"
"""Environment variable naming the folder where each kernel records the cell it starts."""


# -- the parser: keys in, dead kernels out ---------------------------------------------


def with_key(text: str, key: str) -> str:
    """``text`` with ``key`` in its front matter's kernelspec, on the same lines.

    The front matter is written as one line of JSON (which is YAML) followed by
    blank lines, so every later line of the page keeps its number and the
    build's messages point at the right line.

    >>> page = "---\\nkernelspec:\\n  name: python3\\n---\\n# Title\\n"
    >>> print(with_key(page, "abc"))
    ---
    {"kernelspec": {"name": "python3", "amp_lesson_inputs": "abc"}}
    <BLANKLINE>
    ---
    # Title
    <BLANKLINE>
    """
    lines = text.split("\n")
    if not lines or lines[0].rstrip() != "---":
        return text
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].rstrip() == "---")
    except StopIteration:
        return text
    front = yaml.safe_load("\n".join(lines[1:end])) or {}
    if not isinstance(front, dict) or not isinstance(front.get("kernelspec"), dict):
        return text
    front["kernelspec"] = {**front["kernelspec"], KEY_FIELD: key}
    body = [json.dumps(front, ensure_ascii=False)] + [""] * (end - 2)
    return "\n".join(["---", *body, *lines[end:]])


STARTUP_FILE = "00-amp-lesson-record-cell.py"
STARTUP = """\
# Written by the amp-lesson build: a kernel started the usual way ends with the process
# that started it (one the kernel server forked, the server ends); each kernel records
# the cell it starts, so that the build can name the cell a kernel died in; and a race in
# ipykernel's shutdown does not print a traceback into the build's output.
def _amp_lesson_die_with_the_build():
    import ctypes
    import os
    import signal

    parent = os.environ.get("JPY_PARENT_PID")
    if not parent or os.environ.get("AMP_LESSON_KERNEL_SERVER"):
        return
    try:
        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG (Linux)
    except (OSError, AttributeError):
        return
    if os.getppid() != int(parent):  # it ended before the line above
        os._exit(1)


_amp_lesson_die_with_the_build()
del _amp_lesson_die_with_the_build


def _amp_lesson_temporary_files_in_the_build():
    # What a page's code leaves in the temporary folder (multiprocessing's pymp-* folders,
    # which a process killed before its exit handlers leaves behind) goes into the build's
    # own folder, removed as the build ends or, if it was killed, by the next build.
    import os
    import tempfile

    folder = os.environ.get("AMP_LESSON_KERNEL_TEMP")
    if folder and os.path.isdir(folder):
        os.environ["TMPDIR"] = folder
        tempfile.tempdir = None  # chosen again, from TMPDIR


_amp_lesson_temporary_files_in_the_build()
del _amp_lesson_temporary_files_in_the_build


def _amp_lesson_book_figures():
    # A figure a cell draws is the lesson's SVG, themed as the page is written.
    try:
        from amp_book.figures import show_figures_as_svg
    except ImportError:
        return
    show_figures_as_svg(get_ipython())


_amp_lesson_book_figures()
del _amp_lesson_book_figures


def _amp_lesson_record_cells():
    import os

    folder = os.environ.get("AMP_LESSON_CELL_RECORDS")
    if not folder:
        return
    target = os.path.join(folder, os.environ.get("JPY_PARENT_PID", "0"))

    def record(info):
        with open(target, "w", encoding="utf-8") as file:
            file.write(info.raw_cell or "")

    get_ipython().events.register("pre_run_cell", record)


_amp_lesson_record_cells()
del _amp_lesson_record_cells


def _amp_lesson_note_what_runs():
    import os

    if os.environ.get("AMP_BOOK_RAN_NOTES"):
        from amp_book.edition.ran import start

        start()


_amp_lesson_note_what_runs()
del _amp_lesson_note_what_runs


def _amp_lesson_quiet_shutdown_race():
    # ipykernel 7.4 handles shutdown_request on its control thread; IOPub can close before
    # that thread's last flush, and tornado then logs the flush's ZMQError (ENOTSOCK, a
    # closed socket) with its traceback on the build's standard error. Only that error,
    # and only once the kernel was asked to shut down, is dropped.
    import logging

    try:
        import zmq
    except ImportError:
        return
    kernel = getattr(get_ipython(), "kernel", None)
    if kernel is None:
        return

    def keep(record):
        error = record.exc_info[1] if record.exc_info else None
        return not (
            isinstance(error, zmq.ZMQError)
            and error.errno == zmq.ENOTSOCK
            and getattr(kernel, "_shutdown_message", None) is not None
        )

    for name in ("tornado.general", "tornado.application"):
        logging.getLogger(name).addFilter(keep)


_amp_lesson_quiet_shutdown_race()
del _amp_lesson_quiet_shutdown_race
"""


def record_cells(folder: Path) -> None:
    """Have every kernel started from now on record the cell it starts, in ``folder``.

    Sets ``IPYTHONDIR`` to ``folder/ipython`` (a profile of the build's own,
    whose startup file registers the recorder) and :data:`RECORDS_ENV`.
    """
    folder = Path(folder)
    startup = folder / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    target = startup / STARTUP_FILE
    if not target.is_file() or target.read_text(encoding="utf-8") != STARTUP:
        target.write_text(STARTUP, encoding="utf-8")
    (folder / "running").mkdir(exist_ok=True)
    os.environ["IPYTHONDIR"] = str(folder / "ipython")
    os.environ[RECORDS_ENV] = str(folder / "running")


def _record_path() -> Path | None:
    folder = os.environ.get(RECORDS_ENV)
    return Path(folder) / str(os.getpid()) if folder else None


def running_cell(page: pages.Page, recorded: str | None) -> str:
    """Words naming the cell of ``page`` whose source is ``recorded``."""
    if recorded is None:
        return "before its first cell started"
    for number, cell in enumerate(page.code_cells, 1):
        if cell.source.strip() == recorded.strip():
            return f"in code cell {number} (line {cell.line}: {cell.first_line!r})"
    first = next((ln for ln in recorded.splitlines() if ln.strip()), "")
    return f"in a cell that starts {first!r}"


class Parser(MystNbParser):  # type: ignore[misc]
    """MyST-NB's parser, with each page's key in its kernelspec, and dead kernels reported.

    A dead kernel becomes a failure of its page (``DEAD_KERNEL_FIELD`` in the
    page's metadata, which Sphinx merges from parallel readers), reported by
    the build with every other failure; the page is left empty.
    """

    def parse(self, inputstring: str, document: Any) -> None:
        env = document.settings.env
        path = Path(env.doc2path(env.docname))
        page = pages.read_text(inputstring, path)
        graph = _graph(env)
        inputs = page_inputs(page, graph, _watched(env))
        runs_cells = page.is_notebook and bool(page.code_cells)
        if runs_cells or inputs["modules"] or inputs["data"]:  # outdated_pages compares the key
            key = inputs_key(inputs, graph)
            env.metadata[env.docname][KEY_FIELD] = key
            env.metadata[env.docname][INPUTS_FIELD] = inputs
            if runs_cells:
                inputstring = with_key(inputstring, key)
        record = _record_path()
        if record is not None:
            record.unlink(missing_ok=True)
        notes = _notes_path()
        if notes is not None:
            notes.unlink(missing_ok=True)
        kernels.kernel_ends(clear=True)
        reading = reading_page.set(env.docname)
        try:
            super().parse(inputstring, document)
        except DeadKernelError as error:
            recorded = None
            if record is not None and record.is_file():
                recorded = record.read_text(encoding="utf-8")
            where = running_cell(page, recorded)
            ends = kernels.kernel_ends(clear=True)
            how = f"; it {'; '.join(ends.values())}" if ends else ""
            env.metadata[env.docname][DEAD_KERNEL_FIELD] = (
                f"the kernel died {where} ({type(error).__name__}: {error}{how}): a crash in "
                "compiled code, os._exit, the out-of-memory killer or a signal ends a kernel "
                "so, without a Python traceback"
            )
            # The page as plain MyST: its title and what happened (the build fails anyway).
            title = next((ln for ln in page.markdown.splitlines() if ln.startswith("# ")), "# ?")
            stand_in = f"{title}\n\nThe kernel of this page died {where}.\n"
            # MyST-NB holds its renderer on the document until it has rendered the page.
            document.attributes.pop("nb_renderer", None)
            MystParser.parse(self, stand_in, document)
        finally:
            reading_page.reset(reading)
        if runs_cells:
            keep_what_ran(env, page, inputs, key, graph, notes)


RAN_SUFFIX = ".ran.json"
"""Beside each executed notebook: what its run ran (:func:`.edition.ran.summarize`)."""


def _notes_path() -> Path | None:
    from amp_book.edition import ran

    folder = os.environ.get(ran.NOTES_ENV)
    return ran.notes_file(folder, os.getpid()) if folder else None


def keep_what_ran(
    env: Any, page: pages.Page, inputs: dict[str, Any], key: str, graph: PackageGraph,
    notes: Path | None,
) -> None:  # fmt: skip
    """Write what the page's run ran beside its executed notebook (:data:`RAN_SUFFIX`).

    A page that ran now is read from its kernel's notes, and kept in the execution cache
    beside its outputs (keyed as they are: its cells and its key); a page whose outputs
    came from the cache takes it from there. One whose outputs came from a cache written
    before this was kept has none, and cannot be recorded as an edition.
    """
    from amp_book.edition import ran

    root, package = Path(env.srcdir).parent.resolve(), ran.lesson_dir()
    cells = hashlib.sha256("\0".join([key, *(c.source for c in page.code_cells)]).encode())
    cache = getattr(env.config, "nb_execution_cache_path", "") or ""
    kept = Path(cache) / "ran" / f"{cells.hexdigest()[:32]}.json" if cache else None
    target = Path(env.mystnb_config.output_folder) / f"{env.docname}{RAN_SUFFIX}"
    summary = None
    if notes is not None and notes.is_file():
        summary = ran.summarize(notes.read_text(encoding="utf-8"), root, package)
        names = {ran.key_of(p, root, package): n for n, p in graph.files.items()}
        ran_modules = {names.get(e.rpartition(":")[0]) for e in summary["ran"]} - {None}
        closure = graph.closure({*inputs["modules"], *ran_modules})  # type: ignore[arg-type]
        summary["modules"] = sorted(str(ran.key_of(graph.files[m], root, package)) for m in closure)
        # The data the page's code names, whole (a file it only tests for is not opened).
        for folder in (Path(d).resolve() for d in inputs["data"]):
            listed = [folder, *(p for p in folder.rglob("*") if p.is_dir())]
            found = [p for p in folder.rglob("*") if p.is_file()]
            for kind, paths in (("list", listed), ("read", found)):
                keys = {ran.key_of(p, root, package) for p in paths} - {None}
                summary[kind] = sorted({*summary[kind], *keys})  # type: ignore[arg-type]
        if kept is not None:
            kept.parent.mkdir(parents=True, exist_ok=True)
            kept.write_text(json.dumps(summary), encoding="utf-8")
    elif kept is not None and kept.is_file():
        summary = json.loads(kept.read_text(encoding="utf-8"))
    if summary is None:
        target.unlink(missing_ok=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(summary, indent=1), encoding="utf-8")


def _graph(env: Any) -> PackageGraph:
    import amp_lesson

    return package_graph(Path(amp_lesson.__file__).resolve().parent)


def directive_key(directive: str) -> str:
    """The digest of the package's modules that compute ``directive``'s output, as they are
    now (:data:`DIRECTIVE_MODULES`): what a stored result of the directive must match."""
    graph = _graph(None)
    return graph.digest(graph.closure({f"{graph.package}.{DIRECTIVE_MODULES[directive]}"}))


def _watched(env: Any) -> list[Path]:
    confdir = Path(env.app.confdir) if hasattr(env, "app") else Path(env.srcdir)
    return [confdir / p for p in env.config.amp_lesson_watch]


def outdated_pages(
    app: Any, env: Any, added: set[str], changed: set[str], removed: set[str]
) -> list[str]:
    """Sphinx's ``env-get-outdated``: the pages whose inputs changed, to read and run again.

    Each page's inputs were found when it was last read; a change to one of
    its modules or data files changes its key. A change to what a module
    imports is a change to that module, so the page is read again and its
    inputs found anew. No page is parsed here: a no-change build stays fast.
    """
    graph = _graph(env)
    again = []
    for docname in sorted(env.found_docs - added - changed):
        meta = env.metadata.get(docname, {})
        if KEY_FIELD in meta and inputs_key(meta[INPUTS_FIELD], graph) != meta[KEY_FIELD]:
            again.append(docname)
    return again


def dead_kernels(env: Any) -> dict[str, str]:
    """The pages whose kernel died, and what was running when it did."""
    return {
        doc: meta[DEAD_KERNEL_FIELD]
        for doc, meta in sorted(env.metadata.items())
        if DEAD_KERNEL_FIELD in meta
    }


def setup(app: Sphinx) -> dict[str, bool]:
    """MyST-NB's parser, with each page's key, and a dead kernel as a failure of its page."""
    app.add_source_parser(Parser, override=True)
    app.connect("env-get-outdated", outdated_pages)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
