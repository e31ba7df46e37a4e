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

import ast
import contextlib
import functools
import hashlib
import importlib.metadata
import json
import os
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from myst_nb.sphinx_ import Parser as MystNbParser
from myst_parser.parsers.sphinx_ import MystParser
from nbclient.exceptions import DeadKernelError
from sphinx.application import Sphinx

from amp_book import kernels, pages, patches

PACKAGE = "amp_lesson"
KEY_FIELD = "amp_lesson_inputs"
"""The ``kernelspec`` field that holds a page's key (hashed by jupyter-cache with the cells)."""
INPUTS_FIELD = "amp_lesson_input_files"
"""The page-metadata field that holds the page's modules and data (see :func:`page_inputs`)."""
DEAD_KERNEL_FIELD = "amp_lesson_dead_kernel"
"""The page-metadata field that holds what was running when a page's kernel died."""
RECORDS_ENV = "AMP_LESSON_CELL_RECORDS"
"""Environment variable naming the folder where each kernel records the cell it starts."""


# -- what a page imports ---------------------------------------------------------------


def imported_modules(code: str, package: str = PACKAGE, module: str = "") -> set[str]:
    """The names in ``package`` that ``code`` imports, each a module or maybe one.

    ``module`` is the name of the module ``code`` is the source of, for its
    relative imports. ``from a import b`` gives ``a`` and ``a.b``, which is a
    module or a name in ``a``: :meth:`PackageGraph.closure` keeps the modules.
    Lines of IPython (``%magic``, ``!shell``) are left out; code that still does
    not parse gives ``{"*"}``, every module.

    A module imported at run time counts too: ``importlib.import_module``,
    ``__import__`` or ``runpy.run_module`` of a name written out. One whose name
    is computed could be any module: ``{"*"}`` again.

    >>> sorted(imported_modules("from amp_lesson.formats import ulp\\nimport torch"))
    ['amp_lesson.formats', 'amp_lesson.formats.ulp']
    >>> sorted(imported_modules("from . import display", module="amp_lesson.bench.tables"))
    ['amp_lesson.bench', 'amp_lesson.bench.display']
    >>> sorted(imported_modules("importlib.import_module('amp_lesson.mx')"))
    ['amp_lesson.mx']
    >>> imported_modules("import_module(f'amp_lesson.{name}')")
    {'*'}
    """
    text = "\n".join(
        "" if line.lstrip().startswith(("%", "!")) else line for line in code.splitlines()
    )
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return {"*"}
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if _in(a.name, package))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = module.split(".")[: len(module.split(".")) - node.level]
                base = ".".join([*parts, node.module] if node.module else parts)
            else:
                base = node.module or ""
            if _in(base, package):
                found.add(base)
                found.update(f"{base}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Call) and _call_name(node.func) in RUNTIME_IMPORTS:
            found.update(_imported_at_run_time(node, package, module))
    return found


RUNTIME_IMPORTS = frozenset({"import_module", "__import__", "run_module"})
"""The calls that import a module named by a string (``importlib``, builtins, ``runpy``)."""


def _call_name(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _imported_at_run_time(call: ast.Call, package: str, module: str) -> set[str]:
    """What a call of :data:`RUNTIME_IMPORTS` imports of ``package``: the module named, or
    ``{"*"}`` where the name is computed (it could be any)."""
    if not call.args:
        return set()
    first = call.args[0]
    if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
        return {"*"}
    name = first.value
    if name.startswith("."):  # import_module(".x", package="amp_lesson.y")
        anchor = next(
            (k.value for k in call.keywords if k.arg == "package"),
            call.args[1] if len(call.args) > 1 else None,
        )
        if isinstance(anchor, ast.Constant) and isinstance(anchor.value, str):
            base = anchor.value
        elif module:
            base = module.rsplit(".", 1)[0]
        else:
            return {"*"}
        dots = len(name) - len(name.lstrip("."))
        parts = base.split(".")[: len(base.split(".")) - dots + 1]
        name = ".".join([*parts, name.lstrip(".")])
    return {name} if _in(name, package) else set()


def _in(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


class PackageGraph:
    """The modules of a package on disk and the modules of it each one imports."""

    def __init__(self, package_dir: Path, package: str = PACKAGE) -> None:
        self.package_dir = Path(package_dir)
        self.package = package
        self.files: dict[str, Path] = {}
        for path in sorted(self.package_dir.rglob("*.py")):
            rel = path.relative_to(self.package_dir).with_suffix("")
            if "__pycache__" in rel.parts:
                continue
            parts = [package, *rel.parts]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            self.files[".".join(parts)] = path
        self.data_files = package_data_files(self.package_dir)
        """The package's files that are not Python (a JSON schema, say)."""

    @functools.cached_property
    def _imports(self) -> dict[str, set[str]]:
        memo = MEMO_FILES["imports"]
        kept = _read_memo(memo)
        graph, fresh = {}, {}
        for name, path in self.files.items():
            module = name if path.name != "__init__.py" else name + ".__init__"
            stat = path.stat()
            stamp = f"{path}|{module}|{self.package}|{stat.st_size}|{stat.st_mtime_ns}"
            if stamp in kept:
                found = set(kept[stamp])
            else:
                found = imported_modules(path.read_text(encoding="utf-8"), self.package, module)
            graph[name] = found
            fresh[stamp] = sorted(found)
        if memo is not None and fresh != kept:
            _write_memo(memo, fresh)
        return graph

    def closure(self, names: Iterable[str]) -> set[str]:
        """``names`` and every module of the package they import, directly or not.

        Importing ``a.b.c`` runs ``a/__init__.py`` and ``a/b/__init__.py`` first:
        those count too. A name that is not a module (``from a import function``)
        is dropped; ``"*"`` stands for every module.
        """
        todo = list(names)
        if "*" in todo:
            todo = list(self.files)
        seen: set[str] = set()
        while todo:
            name = todo.pop()
            parts = name.split(".")
            for i in range(1, len(parts) + 1):
                parent = ".".join(parts[:i])
                if parent in self.files and parent not in seen:
                    seen.add(parent)
                    todo.extend(self._imports[parent])
        return seen

    @functools.cached_property
    def data_readers(self) -> dict[str, list[Path]]:
        """The data files each module depends on: those its source names, and every file
        no module names (it could be read by any, through a name computed at run time)."""
        texts = {n: p.read_text(encoding="utf-8") for n, p in self.files.items()}
        named = {n: [d for d in self.data_files if names_path(t, d)] for n, t in texts.items()}
        unnamed = [d for d in self.data_files if not any(d in ds for ds in named.values())]
        return {n: sorted({*named[n], *unnamed}) for n in self.files}

    @functools.cached_property
    def _digests(self) -> dict[str, bytes]:
        digests = {}
        for name, path in self.files.items():
            h = hashlib.sha256(path.read_bytes())
            for data in self.data_readers[name]:
                h.update(b"\0" + data.relative_to(self.package_dir).as_posix().encode() + b"\0")
                h.update(data.read_bytes())
            digests[name] = h.digest()
        return digests

    def digest(self, names: Iterable[str]) -> str:
        """SHA-256 over the names and bytes of the modules ``names`` (a missing one counts)."""
        h = hashlib.sha256()
        for name in sorted(names):
            h.update(name.encode() + b"\0" + self._digests.get(name, b"missing") + b"\0")
        return h.hexdigest()


def package_data_files(package_dir: Path) -> list[Path]:
    """The files of the package in ``package_dir`` that are not Python source or bytecode."""
    return sorted(
        p
        for p in Path(package_dir).rglob("*")
        if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts
    )


DIRECTIVE_MODULES: dict[str, str] = {
    "bit-explorer": "playground",
    "scaler-playground": "playground",
}
"""The book's directives whose output a module of the package computes (module names
relative to the package): a page that uses one depends on that module as if a cell imported it."""


def page_modules(page: pages.Page, graph: PackageGraph) -> set[str]:
    """The modules of the package that the page's code cells run, imports included, and those
    its directives compute with (:data:`DIRECTIVE_MODULES`)."""
    names: set[str] = set()
    for cell in page.code_cells:
        names |= imported_modules(cell.source, graph.package)
    for directive, module in DIRECTIVE_MODULES.items():
        opening = rf"^[ \t]*(?::{{3,}}|`{{3,}})\{{{re.escape(directive)}\}}"
        if re.search(opening, page.markdown, re.MULTILINE):
            names.add(f"{graph.package}.{module}")
    return graph.closure(names)


def names_path(text: str, path: Path) -> bool:
    """Whether ``text`` names the folder or file ``path`` (its name as a path component).

    >>> names_path('Path("../_data/gpu")', Path("docs/_data"))
    True
    >>> names_path("load_digits_data(device)", Path("docs/_data"))
    False
    """
    return re.search(rf"(?<![\w.-]){re.escape(path.name)}(?![\w.-])", text) is not None


def page_inputs(
    page: pages.Page, graph: PackageGraph, watch: Iterable[Path] = ()
) -> dict[str, Any]:
    """What the page's outputs depend on besides its cells: its modules and data, and a key.

    A watched path counts when the page's code or one of its modules names it
    (``_data`` for ``docs/_data``: ``Path("../_data/gpu")``).
    """
    modules = page_modules(page, graph)
    code = "\n".join(c.source for c in page.code_cells)
    texts = [code, *(graph.files[m].read_text(encoding="utf-8") for m in modules)]
    data = sorted(Path(w) for w in watch if any(names_path(t, Path(w)) for t in texts))
    return {"modules": sorted(modules), "data": [str(p) for p in data]}


def inputs_key(inputs: dict[str, Any], graph: PackageGraph) -> str:
    """The key of ``inputs`` (see :func:`page_inputs`) as the files are now."""
    h = hashlib.sha256(graph.digest(inputs["modules"]).encode())
    for name in inputs["data"]:
        root = Path(name)
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        h.update(f"data:{root.name}".encode() + b"\0")
        for path in files:
            h.update(path.relative_to(root.parent).as_posix().encode() + b"\0")
            h.update(path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


# -- what every page depends on alike --------------------------------------------------


MEMO_FILES: dict[str, Path | None] = {"imports": None, "distributions": None}
"""Files of the build's own (:func:`remember_in`) that keep what is slow to work out and
rarely changes, each with what it depends on: the imports of each module of the lesson (its
size and modification time), the installed distributions (the names of their metadata
folders). ``None``: nothing is kept."""


def remember_in(folder: Path | None) -> None:
    """Keep :data:`MEMO_FILES` in ``folder`` (the build's work folder), or nowhere (``None``)."""
    for name in MEMO_FILES:
        MEMO_FILES[name] = None if folder is None else Path(folder) / f"{name}.json"


def _read_memo(path: Path | None) -> dict[str, Any]:
    if path is None or not path.is_file():
        return {}
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return {}
    return kept if isinstance(kept, dict) else {}


def _write_memo(path: Path, value: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}")
    partial.write_text(json.dumps(value), encoding="utf-8")
    partial.replace(path)  # a reader never sees it half-written


def _metadata_folders() -> list[str]:
    """The metadata folders of the distributions on ``sys.path`` (their names hold their
    versions): what :func:`installed_distributions` is kept against."""
    names = []
    for entry in sys.path:
        with contextlib.suppress(OSError), os.scandir(entry or ".") as found:
            names += [
                f"{entry}/{e.name}"
                for e in found
                if e.name.endswith((".dist-info", ".egg-info", ".egg-link", ".pth"))
            ]
    return sorted(names)


def installed_distributions() -> list[str]:
    """``name==version`` of every installed distribution but this book's own package, sorted.

    Reading every distribution's metadata takes half a second; where :data:`MEMO_FILES`
    keeps it, it is read again only when a metadata folder was added or removed (an install,
    an upgrade, an uninstall: each renames or replaces one).
    """
    memo = MEMO_FILES["distributions"]
    stamp = _metadata_folders() if memo is not None else []
    kept = _read_memo(memo)
    if memo is not None and kept.get("stamp") == stamp:
        return list(kept["found"])
    found = set()
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name and name != "amp-lesson":
            found.add(f"{name}=={dist.version}")
    if memo is not None:
        _write_memo(memo, {"stamp": stamp, "found": sorted(found)})
    return sorted(found)


def environment_key(device: Iterable[str]) -> str:
    """A hash of what every page's output depends on: distributions, Python, the device.

    ``device`` describes the device the cells run on (see
    :func:`amp_book.cache.execution_key`).
    """
    h = hashlib.sha256()
    for item in [
        f"python={sys.implementation.name} {sys.version}",
        *installed_distributions(),
        *device,
    ]:
        h.update(item.encode() + b"\0")
    return h.hexdigest()


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
        reading = patches.reading_page.set(env.docname)
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
            patches.reading_page.reset(reading)
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


@functools.cache
def _graph_for(package_dir: str, stamp: tuple[tuple[str, int, int], ...]) -> PackageGraph:
    return PackageGraph(Path(package_dir))


def package_graph(package_dir: Path) -> PackageGraph:
    """The package's import graph, read again only when one of its files changed."""
    files = [*sorted(Path(package_dir).rglob("*.py")), *package_data_files(Path(package_dir))]
    stamp = tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in files)
    return _graph_for(str(package_dir), stamp)


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
