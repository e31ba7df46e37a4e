"""What a page's stored outputs are keyed on: the cache folder's key and each page's.

- The folder's key (:func:`execution_key`): what every page's output depends on alike, the
  installed distributions and their versions, Python, the device (GPU models included) and
  the form of the book's entries.
- A page's key (:func:`inputs_key`): the modules of ``amp_lesson`` its code imports, with
  their own imports (:class:`PackageGraph`), and the data files it names; MyST-NB adds its
  cells.

So no page shows numbers older than what made them, and an edit re-runs only the pages it
can change. What is slow to work out and rarely changes is kept between builds
(:func:`remember_in`).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import amp_lesson
from amp_book import pages
from amp_book.memo import read_json, write_json

PACKAGE = "amp_lesson"
"""The lesson's package: the modules a page's key follows."""

PACKAGE_DIR = Path(amp_lesson.__file__).resolve().parent
"""The lesson's package, whose modules the pages import."""

EXTENSION_DIR = Path(__file__).resolve().parents[1]
"""This package: the book's build."""

ENTRY_FORMAT = 2
"""How the book writes a cache entry: 2, each notebook sealed with its digest
(:func:`.integrity.lock_cache_writes`). Part of the cache folder's key."""

_SKIP_PARTS = {"__pycache__", ".ipynb_checkpoints"}


def source_hash(
    paths: Iterable[Path],
    extra: Iterable[str] = (),
    exclude: Iterable[str] = (),
    suffixes: Iterable[str] | None = None,
) -> str:
    """SHA-256 over every file below ``paths`` (names and bytes) and ``extra``.

    Byte-compiled files and caches are left out, so the hash changes exactly
    when a source file, a data file or one of the ``extra`` strings changes.
    Folders named in ``exclude`` are left out too, and with ``suffixes`` only
    files with one of those suffixes count.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = (d / "a.py").write_text("X = 1")
    >>> h1 = source_hash([d])
    >>> _ = (d / "a.py").write_text("X = 2")
    >>> h1 == source_hash([d])
    False
    """
    digest = hashlib.sha256()
    excluded = set(exclude)
    wanted = None if suffixes is None else set(suffixes)
    for root in sorted(Path(p) for p in paths):
        if not root.exists():
            digest.update(f"missing:{root.name}".encode())
            continue
        files = [root] if root.is_file() else sorted(root.rglob("*"))
        for path in files:
            if not path.is_file() or path.suffix in {".pyc", ".pyo"}:
                continue
            if wanted is not None and path.suffix not in wanted:
                continue
            if _SKIP_PARTS.intersection(path.parts):
                continue
            if excluded.intersection(path.relative_to(root).parts[:-1]):
                continue
            rel = path.relative_to(root.parent).as_posix()
            digest.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    for item in extra:
        digest.update(item.encode() + b"\0")
    return digest.hexdigest()


NVIDIA_PROC = Path("/proc/driver/nvidia/gpus")
"""Where the NVIDIA driver describes each GPU it sees (one folder per GPU)."""


def gpu_models(proc_dir: Path = NVIDIA_PROC) -> tuple[str, ...]:
    """The model names of the NVIDIA GPUs on this machine, sorted; ``()`` when none.

    Read from the driver's ``<proc_dir>/*/information`` files ("Model: NVIDIA
    H200"), else from ``nvidia-smi`` when it is on PATH; torch is not imported.

    >>> import tempfile
    >>> gpus = Path(tempfile.mkdtemp())
    >>> gpu_models(gpus)
    ()
    >>> (gpus / "0000:17:00.0").mkdir()
    >>> info = gpus / "0000:17:00.0" / "information"
    >>> _ = info.write_text("Model: \\t\\t NVIDIA H200\\nIRQ: \\t\\t 95\\n")
    >>> gpu_models(gpus)
    ('NVIDIA H200',)
    """
    proc_dir = Path(proc_dir)
    models = []
    if proc_dir.is_dir():
        for info in sorted(proc_dir.glob("*/information")):
            for line in info.read_text(encoding="utf-8", errors="replace").splitlines():
                field, _, value = line.partition(":")
                if field.strip() == "Model":
                    models.append(value.strip())
    if not models and proc_dir == NVIDIA_PROC and (smi := shutil.which("nvidia-smi")):
        try:
            out = subprocess.run(
                [smi, "--query-gpu=name", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
                check=False,
            ).stdout
        except (OSError, subprocess.TimeoutExpired):
            out = ""
        models = [line.strip() for line in out.splitlines() if line.strip()]
    return tuple(sorted(models))


def device_description(gpus: Iterable[str] | None = None) -> list[str]:
    """What names the device the cells will run on, as the cache key holds it.

    ``AMP_LESSON_DEVICE``, the GPU models present (``gpus``, or
    :func:`gpu_models`) and ``CUDA_VISIBLE_DEVICES``: a book executed on one
    GPU never serves its outputs for another.
    """
    models = gpu_models() if gpus is None else tuple(sorted(gpus))
    return [
        f"device={os.environ.get('AMP_LESSON_DEVICE', 'auto')}",
        f"gpus={'|'.join(models)}",
        f"visible={os.environ.get('CUDA_VISIBLE_DEVICES', '*')}",
    ]


def execution_key(gpus: Iterable[str] | None = None) -> str:
    """The key of the execution-cache folder: what every page's output depends on alike.

    The installed distributions and their versions (torch, numpy, matplotlib,
    ...), the Python version and the device (:func:`device_description`).
    What a page depends on besides (the package's modules it imports, the data
    it reads) is that page's own key (:mod:`.execution`). torch itself is not
    imported: that alone would cost an author two seconds on every rebuild.
    And :data:`ENTRY_FORMAT`: a cache whose entries another version of the book
    wrote otherwise is never read; and whether pages' runs are noted
    (:func:`.edition.ran.wanted`), so that every page of such a cache has its notes.
    """
    from amp_book.edition import ran

    notes = ["notes=on"] if ran.wanted() else []  # every page's run noted: its own cache
    return environment_key([*device_description(gpus), f"entries={ENTRY_FORMAT}", *notes])


def extension_key() -> str:
    """A hash of the extension's Python code: a change re-reads every page, from the cache.

    The extension's directives and transforms shape each page's doctree, so
    Sphinx must read every page again when they change; its scripts, styles and
    templates only shape the written HTML, which Sphinx redoes anyway.
    """
    return source_hash([EXTENSION_DIR], suffixes=[".py"])


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
        kept = read_json(memo)
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
            write_json(memo, fresh)
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
    kept = read_json(memo)
    if memo is not None and kept.get("stamp") == stamp:
        return list(kept["found"])
    found = set()
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name and name != "amp-lesson":
            found.add(f"{name}=={dist.version}")
    if memo is not None:
        write_json(memo, {"stamp": stamp, "found": sorted(found)})
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


@functools.cache
def _graph_for(package_dir: str, stamp: tuple[tuple[str, int, int], ...]) -> PackageGraph:
    return PackageGraph(Path(package_dir))


def package_graph(package_dir: Path) -> PackageGraph:
    """The package's import graph, read again only when one of its files changed."""
    files = [*sorted(Path(package_dir).rglob("*.py")), *package_data_files(Path(package_dir))]
    stamp = tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in files)
    return _graph_for(str(package_dir), stamp)
