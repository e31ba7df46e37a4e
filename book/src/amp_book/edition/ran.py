"""What a page's run ran, and whether the code it ran is still the code of the book.

A recording stays on its page while what produced its outputs is unchanged, so the
build notes, while a page runs, what it runs (the witness), and the edition keeps the
digest of each thing noted:

- every function of ``amp_lesson`` a kernel (or a process it started) called, noted by
  a trace function on each call of a code object not seen before; nested functions and
  lambdas count as the function that holds them;
- every module the page's cells import (and what those import), and every module that
  holds a function it called: the module's statements outside its functions (constants,
  class bodies, decorators and defaults), docstrings left out;
- every file under the package or the book's sources the run read (an audit hook on
  ``open``) and every folder it listed, but the package's own imports; a module's source
  read at run time (a traceback's lines, ``inspect.getsource``) counts as a file;
- the page's code cells, comments left out; torch's release; the glued names the page's
  prose shows.

A process the run started that could not be traced (an interpreter started with ``-I``,
``-E`` or ``-S``, which ignore the tracing's ``sitecustomize``) makes the whole package,
docstrings left out, what the page ran. Everything is compared as source, never by
running: :func:`changes` lists what differs now, and a page with any difference is
retired. A prose edit, a comment, a docstring, another function or another module leave
a recording on its page.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import io
import os
import re
import sys
import tokenize
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

WANTED_ENV = "AMP_LESSON_NOTE_RUNS"
"""Set to ``1``, a build notes what each page runs (a recording needs it): each call of a
Python function then costs a call of the trace function, a third more time on a loop of
small steps, so an author's build does not. It keys the execution cache apart."""
NOTES_ENV = "AMP_BOOK_RAN_NOTES"
"""The folder where each kernel appends what it runs (``<JPY_PARENT_PID>.ran``)."""
ROOTS_ENV = "AMP_BOOK_RAN_ROOTS"
"""The folders (``os.pathsep``-separated) whose files read by a run are noted."""
SITE = "site"
"""In :data:`NOTES_ENV`'s folder: the ``sitecustomize`` that traces a run's child processes."""
SITECUSTOMIZE = """\
# Written by the amp-lesson build: a process a page's run starts notes what it runs too.
import os

if os.environ.get("AMP_BOOK_RAN_NOTES"):
    try:
        from amp_book.edition.ran import start
    except ImportError:
        pass
    else:
        start()
"""
UNTRACED_FLAGS = re.compile(r"^-[A-Za-z]*[IES]")

# -- in the kernel: the witness -------------------------------------------------------------

_seen: set[Any] = set()
_buffer: list[str] = []
_out: list[Any] = []
_package = ""
_roots: tuple[str, ...] = ()


def _note(line: str) -> None:
    if _out:
        _out[0].write(line + "\n")
    else:
        _buffer.append(line)


def _trace(frame: Any, event: str, arg: Any) -> None:
    code = frame.f_code
    if code not in _seen:
        _seen.add(code)
        if code.co_filename.startswith(_package):
            _note(f"ran\t{code.co_filename}\t{code.co_qualname}")


BOOKKEEPING = (
    ("torch/cuda/__init__.py", "_lazy_call"),
    ("torch/_subclasses/fake_tensor.py", "__init__"),
    ("torch/_dynamo/convert_frame.py", "_compile"),
)
"""Callers that read source lines for a record no output shows: torch keeps the stack of
each call it defers until CUDA starts (shown should CUDA fail to start, which fails the page),
of each fake tensor made (for its debug mode), and of the code Dynamo compiles (for its logs)."""


def _unshown_source_read() -> bool:
    """Whether a read of a ``.py`` file is an import's, or bookkeeping's (:data:`BOOKKEEPING`)."""
    frame = sys._getframe(2)
    for depth in range(40):
        if frame is None:
            return False
        code = frame.f_code
        if depth < 4 and code.co_filename.startswith("<frozen importlib"):
            return True
        if any(code.co_filename.endswith(f) and code.co_name == n for f, n in BOOKKEEPING):
            return True
        frame = frame.f_back
    return False


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "open":
        path, mode, flags = args
        if not isinstance(path, (str, bytes)):
            return
        full = os.path.abspath(os.fsdecode(path))
        if not full.startswith(_roots) or full.endswith(".pyc"):
            return
        reads = "r" in mode or "+" in mode if mode else not flags & os.O_WRONLY
        if reads and full.endswith(".py") and _unshown_source_read():
            return
        _note(f"{'read' if reads else 'wrote'}\t{full}")
    elif event in ("os.listdir", "os.scandir") and isinstance(args[0], (str, bytes, type(None))):
        full = os.path.abspath(os.fsdecode(args[0] or "."))
        if full.startswith(_roots):
            _note(f"list\t{full}")
    elif event in ("subprocess.Popen", "os.posix_spawn", "os.exec"):
        argv = [os.fsdecode(a) for a in (args[1] or []) if isinstance(a, (str, bytes))]
        if "python" in os.path.basename(argv[0] if argv else "") and any(
            UNTRACED_FLAGS.match(a) for a in argv[1:]
        ):
            _note(f"untraced\t{' '.join(argv)[:200]}")


def start(path: str | None = None) -> None:
    """Note what this process runs from now on (and what it already noted, unwritten).

    ``path`` defaults to ``<NOTES_ENV>/<JPY_PARENT_PID>.ran``; with neither, the notes
    are kept in memory, for a process forked from this one (the kernel server's preloads).
    Every process the run starts from here notes into the same file.
    """
    global _package, _roots
    folder = os.environ.get(NOTES_ENV)
    if path is None and folder and os.environ.get("JPY_PARENT_PID"):
        path = os.path.join(folder, os.environ["JPY_PARENT_PID"] + ".ran")
    if not _package:
        import importlib.util

        spec = importlib.util.find_spec("amp_lesson")
        if spec is None or spec.origin is None:
            return
        _package = os.path.dirname(spec.origin) + os.sep
        roots = os.environ.get(ROOTS_ENV, "").split(os.pathsep)
        _roots = tuple(os.path.abspath(r) + os.sep for r in [_package, *roots] if r)
        sys.addaudithook(_audit)
        sys.settrace(_trace)
        import threading

        threading.settrace(_trace)
    if path is not None and not _out:
        import linecache

        linecache.clearcache()  # a source read from here on is noted, not served from memory
        _out.append(open(path, "a", buffering=1, encoding="utf-8"))  # noqa: SIM115
        for line in _buffer:
            _note(line)
        _buffer.clear()
        if folder:
            site = os.path.join(folder, SITE)
            paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
            os.environ["PYTHONPATH"] = os.pathsep.join([site, *[p for p in paths if p]])


def wanted() -> bool:
    """Whether this build notes what its pages run (:data:`WANTED_ENV`)."""
    return os.environ.get(WANTED_ENV) == "1"


def prepare(folder: Path, roots: Iterable[Path]) -> None:
    """Have every kernel started from now on note what it runs into ``folder``."""
    folder = Path(folder)
    (folder / SITE).mkdir(parents=True, exist_ok=True)
    site = folder / SITE / "sitecustomize.py"
    if not site.is_file() or site.read_text(encoding="utf-8") != SITECUSTOMIZE:
        site.write_text(SITECUSTOMIZE, encoding="utf-8")
    os.environ[NOTES_ENV] = str(folder)
    os.environ[ROOTS_ENV] = os.pathsep.join(str(Path(r).resolve()) for r in roots)


def notes_file(folder: str | Path, pid: int) -> Path:
    """Where the kernels of the build process ``pid`` note what they run."""
    return Path(folder) / f"{pid}.ran"


@functools.cache
def lesson_dir() -> Path:
    """The lesson's package folder, found without importing it."""
    import importlib.util

    spec = importlib.util.find_spec("amp_lesson")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError("amp_lesson is not installed")
    return Path(spec.origin).resolve().parent


def key_of(path: str | Path, root: Path, package: Path) -> str | None:
    """How the edition names ``path``: from the package's parent if it is the package's
    (``amp_lesson/core.py``), else from ``root`` (``docs/_data/gpu``); ``None`` if neither."""
    full = Path(path).resolve()
    if full.is_relative_to(package):
        return f"{package.name}/{full.relative_to(package).as_posix()}".rstrip("/")
    if full.is_relative_to(root):
        return full.relative_to(root).as_posix()
    return None


def path_of(key: str, root: Path, package: Path) -> Path:
    """The file or folder the edition names ``key`` (:func:`key_of`)."""
    head, _, rest = key.partition("/")
    return package / rest if head == package.name else root / key


def summarize(text: str, root: Path, package: Path | None = None) -> dict[str, Any]:
    """The notes in ``text`` as the edition keeps them (:func:`key_of`), a file the run wrote
    itself left out of what it read."""
    root, package = Path(root).resolve(), Path(package or lesson_dir()).resolve()
    found: dict[str, set[str]] = {"ran": set(), "read": set(), "list": set(), "wrote": set()}
    untraced = []
    for line in text.splitlines():
        kind, _, rest = line.partition("\t")
        if kind == "untraced":
            untraced.append(rest)
            continue
        path, _, qualname = rest.partition("\t")
        key = key_of(path, root, package)
        if key is None:
            if kind == "ran":  # code of the package from another copy of it
                untraced.append(f"code outside {package}: {path}")
            continue
        if kind in found:
            found[kind].add(f"{key}:{qualname}" if kind == "ran" else key)
    return {
        "ran": sorted(found["ran"]),
        "read": sorted(found["read"] - found["wrote"]),
        "list": sorted(found["list"]),
        "untraced": untraced,
    }


# -- in the build: digests of what ran, as the sources are now ----------------------------


def _digest(data: str | bytes) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()[:16]


class _NoDocstrings(ast.NodeTransformer):
    """Leaves out every string that stands alone as a statement: docstrings, of modules,
    classes, functions and attributes, which no code runs."""

    def generic_visit(self, node: ast.AST) -> ast.AST:
        super().generic_visit(node)
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                kept = [s for s in body if not _docstring(s)]
                setattr(node, field, kept or [ast.Pass()])
        return node


def _docstring(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def _definitions(body: list[ast.stmt], prefix: str = "") -> Iterable[tuple[str, ast.AST]]:
    """The functions and classes a module defines outside functions, by qualified name."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield prefix + node.name, node
        if isinstance(node, ast.ClassDef):
            yield from _definitions(node.body, f"{prefix}{node.name}.")
        else:
            for field in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(node, field, None)
                if isinstance(inner, list):
                    yield from _definitions([s for s in inner if isinstance(s, ast.AST)], prefix)


def _dump(node: ast.AST) -> str:
    return ast.dump(node, annotate_fields=False, include_attributes=False)


@functools.cache
def _module_digests(path: str, stamp: tuple[int, int]) -> dict[str, str]:
    tree = _NoDocstrings().visit(ast.parse(Path(path).read_bytes()))
    found = {  # a class's body is the module's: outside functions
        name: "" if isinstance(node, ast.ClassDef) else _digest(_dump(node))
        for name, node in _definitions(tree.body)
    }
    for _, node in _definitions(tree.body):
        if not isinstance(node, ast.ClassDef):
            node.body = [ast.Pass()]  # type: ignore[attr-defined]
    found["<module>"] = _digest(_dump(tree))
    return found


def module_digests(path: Path) -> dict[str, str] | None:
    """Each function's digest in the module at ``path`` (docstrings left out), and its
    statements outside functions (``"<module>"``); ``None`` if it is missing or unreadable."""
    try:
        stat = path.stat()
        return _module_digests(str(path.resolve()), (stat.st_mtime_ns, stat.st_size))
    except (OSError, SyntaxError, ValueError):
        return None


def file_digest(path: Path) -> str:
    """The digest of a file's bytes, or of a folder's listing; ``"missing"`` if neither."""
    if path.is_file():
        return _digest(path.read_bytes())
    if path.is_dir():
        return _digest("\0".join(sorted(p.name for p in path.iterdir())))
    return "missing"


def code_digest(sources: Iterable[str]) -> str:
    """The digest of code cells as Python reads them: comments and blank lines left out."""
    h = hashlib.sha256()
    for source in sources:
        try:
            tokens = tokenize.generate_tokens(io.StringIO(source).readline)
            kept = repr([(t.type, t.string) for t in tokens if t.type not in _SKIPPED])
        except (tokenize.TokenError, SyntaxError):
            kept = source
        h.update(kept.encode() + b"\0")
    return h.hexdigest()[:16]


_SKIPPED = (tokenize.COMMENT, tokenize.NL)
_GLUE = re.compile(
    r"\{glue(?::\w+)?\}`([^`:]+)|^[ \t]*(?:`{3,}|:{3,})\{glue(?::\w+)?\}[ \t]+(\S+)", re.MULTILINE
)


def glued_names(markdown: str) -> set[str]:
    """The glued values the prose ``markdown`` shows.

    >>> sorted(glued_names("A {glue:text}`x:.2f` and {glue}`y`.\\n```{glue:figure} z\\n```"))
    ['x', 'y', 'z']
    """
    return {a or b for a, b in _GLUE.findall(markdown)}


def release(version: str) -> str:
    """A torch version without its build (``2.13.0+cu130``: ``2.13.0``)."""
    return version.split("+")[0]


def witness(
    notes: Mapping[str, Any], root: Path, modules: Iterable[str], code: Iterable[str],
    torch_version: str, package: Path | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The digests of what a page's run ran (``notes``, :func:`summarize`), from the sources
    as they are now: under ``root``, and the package's in ``package`` (default: the
    lesson's); ``modules`` are the modules its cells import (:func:`key_of`), ``code`` its
    code cells."""
    root, package = Path(root), Path(package or lesson_dir())
    where = functools.partial(path_of, root=root, package=package)
    functions: dict[str, str] = {}
    files = {p: file_digest(where(p)) for p in notes["read"]}
    folders = {p: file_digest(where(p)) for p in notes["list"]}
    module_files = set(modules)
    for entry in notes["ran"]:
        rel, _, qualname = entry.rpartition(":")
        outer = qualname.split(".<locals>")[0]
        module_files.add(rel)
        digests = module_digests(where(rel)) or {}
        if outer.startswith("<"):  # a module's, a class's or a comprehension's own code
            continue
        if digests.get(outer):
            functions[f"{rel}:{outer}"] = digests[outer]
        elif outer not in digests:
            files[rel] = file_digest(where(rel))  # code the module's source does not show
    if notes.get("untraced"):
        for path in sorted(package.rglob("*.py")):
            rel = str(key_of(path, root, package))
            for name, digest in (module_digests(path) or {"<module>": "missing"}).items():
                if digest:
                    functions[f"{rel}:{name}"] = digest
    skeletons = {}
    for rel in sorted(module_files):
        skeletons[rel] = (module_digests(where(rel)) or {}).get("<module>", "missing")
    return {
        "functions": dict(sorted(functions.items())),
        "modules": skeletons,
        "files": dict(sorted(files.items())),
        "folders": folders,
        "code": code_digest(code),
        "torch": release(torch_version),
    }


def changes(
    recorded: Mapping[str, Any], root: Path, code: Iterable[str], torch_version: str,
    package: Path | None = None,
) -> list[str]:  # fmt: skip
    """What differs now from what a recorded run ran (:func:`witness`): ``[]`` if nothing."""
    where = functools.partial(path_of, root=Path(root), package=Path(package or lesson_dir()))
    found = []
    if recorded.get("code") != code_digest(code):
        found.append("its code cells")
    if recorded.get("torch") != release(torch_version):
        found.append(f"torch {recorded.get('torch')} (now {release(torch_version)})")
    for key, digest in recorded.get("functions", {}).items():
        rel, _, name = key.rpartition(":")
        if (module_digests(where(rel)) or {}).get(name, "missing") != digest:
            found.append(f"{rel.rsplit('/', 1)[-1]}: {name}")
    for rel, digest in recorded.get("modules", {}).items():
        if (module_digests(where(rel)) or {}).get("<module>", "missing") != digest:
            found.append(f"{rel.rsplit('/', 1)[-1]}: what it defines outside functions")
    for kind in ("files", "folders"):
        for rel, digest in recorded.get(kind, {}).items():
            if file_digest(where(rel)) != digest:
                found.append(rel)
    return found
