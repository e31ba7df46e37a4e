"""Build machinery that keeps the book honest and self-contained.

- The execution cache is keyed on what each page depends on
  (:mod:`.execution`): its cells (MyST-NB's own key), the modules of
  ``amp_lesson`` it imports and the data it reads (the page's key), and what
  every page depends on alike (the cache folder's key: the installed
  distributions, Python, the build device, GPU model included). So no page
  shows numbers older than what made them, and an edit re-runs only the pages
  it can change. Old caches are pruned, and only folders the book itself
  created are ever deleted.
- A kernel that dies fails its page, naming the cell, and the build reports
  every page's failure; a signal ends every process of the build
  (:mod:`.shutdown`).
- Each page's kernel is forked from a server that has already imported
  torch (:mod:`.kernels`), instead of starting from nothing.
- Parallel execution (``-j``) is scheduled so the kernels finish together,
  each kernel gets its share of the cores, and kernels encrypt their sockets
  (which also keeps ipykernel's warning about it out of the build log).
- Every page with code cells must have executed; a page that silently did
  not (for example front matter with ``kernelspec`` alone) fails the build.
- Math is rendered to MathML at build time, so no script is fetched.
- Each page offers its executed notebook for download as plain Jupyter
  (:mod:`.export`), and an "Open in Colab" button for its twin in
  ``notebooks/``.
"""

from __future__ import annotations

import atexit
import datetime
import functools
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.errors import ExtensionError, SphinxError
from sphinx.util import logging

import amp_lesson
from amp_lesson.sphinxext import edition, execution, export, kernels, pages, shutdown

logger = logging.getLogger(__name__)

PACKAGE_DIR = Path(amp_lesson.__file__).resolve().parent
KEEP_CACHES = 3
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
    """
    return execution.environment_key(device_description(gpus))


def extension_key() -> str:
    """A hash of the extension's Python code: a change re-reads every page, from the cache.

    The extension's directives and transforms shape each page's doctree, so
    Sphinx must read every page again when they change; its scripts, styles and
    templates only shape the written HTML, which Sphinx redoes anyway.
    """
    return source_hash([PACKAGE_DIR / "sphinxext"], suffixes=[".py"])


CACHE_MARKER = ".amp-lesson-execution-cache"
"""File the book writes into each execution cache it creates; only those are ever pruned."""
_KEY_NAME = re.compile(r"[0-9a-f]{16}")


def is_book_cache(path: Path) -> bool:
    """Whether ``path`` is an execution cache this book created.

    That is a real folder (not a link) named by a cache key (16 hex digits)
    that holds the book's marker file and a jupyter-cache database. Nothing
    else is ever deleted by :func:`prune_caches`.
    """
    path = Path(path)
    return (
        path.is_dir()
        and not path.is_symlink()
        and _KEY_NAME.fullmatch(path.name) is not None
        and (path / CACHE_MARKER).is_file()
        and (path / "global.db").is_file()
    )


def prune_caches(base: Path, current: Path, keep: int = KEEP_CACHES) -> list[Path]:
    """Delete the book's older execution caches in ``base``; return what was deleted.

    ``current`` and the ``keep - 1`` most recently used other caches stay
    (switching branches back and forth stays cheap). Only folders for which
    :func:`is_book_cache` holds are candidates: other files and folders in
    ``base`` are never touched, whatever their names.
    """
    if not isinstance(keep, int) or keep < 1:
        raise ValueError(f"keep must be an integer >= 1, got {keep!r}")
    base, current = Path(base), Path(current)
    if not base.is_dir():
        return []
    ours = sorted(
        (p for p in base.iterdir() if p != current and is_book_cache(p)),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    stale = ours[keep - 1 :]
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)
    return stale


def _key_cache_on_sources(app: Sphinx, config: Config) -> None:
    key = execution_key()
    config.amp_lesson_environment_key = key
    config.amp_lesson_extension_hash = extension_key()
    if config.amp_lesson_edition:
        return  # a stored edition executes nothing: no cache, no kernels
    base = Path(
        os.environ.get("AMP_LESSON_CACHE_DIR") or Path(app.outdir).parent / ".jupyter_cache"
    )
    cache = base / key[:16]
    config.nb_execution_cache_path = str(cache)
    prune_caches(base, cache)
    cache.mkdir(parents=True, exist_ok=True)
    (cache / CACHE_MARKER).write_text(
        "Execution cache of the amp-lesson book; deleted when it is no longer among the "
        f"{KEEP_CACHES} most recent.\n",
        encoding="utf-8",
    )
    os.utime(cache)  # most recently used: pruning orders the caches by this time
    if config.nb_execution_mode == "cache":
        # Create the cache's database here, once: parallel readers (-j) that
        # each find it missing race to create it ("table settings already exists").
        from jupyter_cache.cache.db import create_db

        create_db(cache).dispose()
        lock_cache_writes()
    # Each kernel records the cell it starts, so that a kernel that dies is named with its cell.
    execution.record_cells(Path(app.outdir).parent / ".amp-lesson-kernels")
    logger.info("amp_lesson: execution cache key %s", key[:16])


CACHE_LOCK = ".amp-lesson-write.lock"
"""File in an execution cache that :func:`lock_cache_writes` locks."""


def lock_cache_writes() -> bool:
    """Let one process at a time add an executed notebook to a jupyter-cache.

    After each addition jupyter-cache trims the cache to its size limit in two
    queries: the records to keep, then every record not among them, deleted.
    A parallel reader (``-j``) that adds its page between the two queries has
    its new record taken for an old one, deleted or missing its file: the
    build stopped with "Notebook file does not exist for cache record" in
    two of some 25 cold builds here. An exclusive lock on a file in the cache
    folder (:data:`CACHE_LOCK`) makes each addition and its trim one step.
    Applies to this process and those it forks from now on; calling it again
    changes nothing. Returns whether additions are locked (not where the
    platform has no ``fcntl``, which is also where Sphinx reads serially).
    """
    try:
        import fcntl
    except ImportError:
        return False
    from jupyter_cache.cache.main import JupyterCacheBase

    add = JupyterCacheBase.cache_notebook_bundle
    if getattr(add, "amp_lesson_locked", False):
        return True

    @functools.wraps(add)
    def add_locked(self: Any, *args: Any, **kwargs: Any) -> Any:
        with open(Path(self.path) / CACHE_LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            return add(self, *args, **kwargs)

    add_locked.amp_lesson_locked = True  # type: ignore[attr-defined]
    JupyterCacheBase.cache_notebook_bundle = add_locked  # type: ignore[method-assign]
    return True


def encrypt_kernel_transport() -> bool:
    """Have the kernels that execute the pages encrypt their local sockets.

    ipykernel warns once per kernel, so once per page, that it "is running
    over TCP without encryption"; that noise would hide a real warning in the
    build log. The cure it names is CurveZMQ keys provisioned by the kernel
    manager, which jupyter_client does when ``transport_encryption`` is
    ``"auto"`` and the kernelspec declares ``curve`` (ipykernel's does).
    MyST-NB offers no setting for its kernel manager, so this changes the
    default of that one trait. Returns whether encryption is now the default
    (``False`` where zmq lacks CurveZMQ or jupyter_client predates the trait).
    """
    try:
        import zmq
        from jupyter_client.manager import KernelManager
    except ImportError:
        return False
    trait = KernelManager.class_traits().get("transport_encryption")
    if trait is None or not zmq.has("curve"):
        return False
    trait.default_value = "auto"
    return KernelManager().transport_encryption == "auto"


# -- scheduling parallel execution -----------------------------------------------------

DEFAULT_COST = 1.0
"""Assumed cost of a page with code that has no recorded execution time."""
AUTODOC_COST = 0.2
"""Assumed cost of reading an API page (autodoc), in seconds; other pages without code: 0."""
PAGE_COSTS_FILE = "_page_costs.json"
"""Execution seconds per page, measured by ``tools/bench_build.py --write-costs``; a hint only."""


def balanced_order(costs: dict[str, float], nproc: int) -> list[str]:
    """Order ``costs``' documents so that ``nproc`` parallel readers finish together.

    Sphinx splits the documents to read, in order, into chunks
    (``sphinx.util.parallel.make_chunks``); the first ``nproc`` run at once and
    each later one starts when a reader is free. So the cheapest documents go
    to the later chunks, and the rest are dealt, longest first, to whichever
    of the first chunks has the least work so far (and room left). The later
    chunks, which start together once the first ones end, are dealt the same
    way among themselves: else the one reader left with the costlier of them
    works on alone.

    >>> costs = {"a": 9, "b": 8, "c": 1, "d": 1, "e": 0}
    >>> balanced_order(costs, 1) == sorted(costs)
    True
    >>> costs |= {f"x{i}": 2 for i in range(20)}  # 25 pages: chunks of 11, 11 and 3
    >>> order = balanced_order(costs, 2)
    >>> sum(costs[d] for d in order[:11]), sum(costs[d] for d in order[11:22]), order[22:]
    (29, 28, ['c', 'd', 'e'])
    >>> costs = {f"run{i}": 5 for i in range(4)} | {f"api{i}": 1 for i in range(30)}
    >>> costs |= {f"page{i}": 0 for i in range(17)}  # 51 pages: chunks of 15, 15, 15 and 6
    >>> order = balanced_order(costs, 2)
    >>> [sum(costs[d] for d in order[i:j]) for i, j in ((0, 15), (15, 30), (30, 45), (45, 51))]
    [23, 23, 2, 2]
    """
    from sphinx.util.parallel import make_chunks

    docs = sorted(costs, key=lambda d: (-costs[d], d))
    if nproc < 2 or len(docs) < 2:
        return sorted(costs)
    sizes = [len(chunk) for chunk in make_chunks(docs, nproc)]
    head, tail = sizes[:nproc], sizes[nproc:]
    n_head = sum(head)
    return _deal(docs[:n_head], head, costs) + _deal(docs[n_head:], tail, costs)


def _deal(docs: list[str], sizes: list[int], costs: dict[str, float]) -> list[str]:
    """``docs`` (longest first) dealt into chunks of ``sizes`` to even their costs; flattened."""
    chunks: list[list[str]] = [[] for _ in sizes]
    loads = [0.0] * len(sizes)
    for doc in docs:
        i = min((j for j in range(len(sizes)) if len(chunks[j]) < sizes[j]), key=loads.__getitem__)
        chunks[i].append(doc)
        loads[i] += costs[doc]
    return [doc for chunk in chunks for doc in chunk]


def _page_costs(app: Sphinx, env: Any, docnames: list[str]) -> dict[str, float]:
    """Expected seconds of each page: its last execution, else the hint file, else a guess.

    An API page adds :data:`AUTODOC_COST` for reading it.
    """
    hints: dict[str, float] = {}
    hint_file = Path(app.confdir) / PAGE_COSTS_FILE
    if hint_file.is_file():
        try:
            hints = {str(k): float(v) for k, v in json.loads(hint_file.read_text()).items()}
        except (ValueError, TypeError, AttributeError):
            logger.info("amp_lesson: %s is not a JSON object of seconds; ignored", hint_file)
    nb_metadata = getattr(env, "nb_metadata", {})
    costs = {}
    for doc in docnames:
        source = Path(env.doc2path(doc))
        text = source.read_text("utf-8") if source.is_file() else ""
        last = (nb_metadata.get(doc, {}).get("exec_data") or {}).get("runtime")
        if last is None:
            last = hints.get(doc)
        if last is None:
            last = DEFAULT_COST if source.is_file() and pages.has_code_cells(source) else 0.0
        costs[doc] = float(last) + (AUTODOC_COST if _AUTODOC.search(text) else 0.0)
    return costs


def _schedule_reading(app: Sphinx, env: Any, docnames: list[str]) -> None:
    """Reorder the pages to read (in place) so parallel kernels finish together."""
    if app.parallel > 1 and len(docnames) > 1:
        docnames[:] = balanced_order(_page_costs(app, env, docnames), app.parallel)


def _end_workers_of_a_failed_build(app: Sphinx, exception: BaseException | None) -> None:
    """A failed build kills the readers and writers Sphinx's SIGTERM did not end."""
    if exception is not None:
        ended = shutdown.end_workers()
        if ended:
            logger.info(
                "amp_lesson: the build failed; killed %d process(es) still running", len(ended)
            )


def _write_on_every_core(app: Sphinx) -> None:
    """Write the pages in ``-j N`` processes at once, not Sphinx's N - 1.

    Sphinx keeps one of the N for its main process, which resolves each
    chunk of pages before it forks a writer for it. But resolving is the
    lighter half (0.07 s a page here, against 0.14 s to write one, mostly the
    theme's navigation), so with ``-j 2`` the one writer worked through the
    chunks one after another while the main process waited, one core idle
    (5.6 s of writing on two cores here, 3.6 s with two writers). N writers
    and the main process share the N cores. Nothing changes where Sphinx
    writes serially (``-j 1``, or an extension that is not parallel-write
    safe), and nothing is patched if this Sphinx has no such method.
    """
    builder = app.builder
    if app.parallel < 2 or not getattr(builder, "allow_parallel", True):
        return
    write_parallel = getattr(builder, "_write_parallel", None)
    if not callable(write_parallel):  # loud: -W fails the build, the benchmark would drop
        logger.warning(
            "amp_lesson: this Sphinx's builder has no _write_parallel; pages are written in "
            "N - 1 processes (see CONTRIBUTING.md, 'Where the build leans on private APIs')",
            type="amp_lesson",
            subtype="upstream",
        )
        return

    def write_in_n_processes(docnames: Any, nproc: int) -> None:
        write_parallel(docnames, nproc=max(nproc, app.parallel))

    builder._write_parallel = write_in_n_processes  # type: ignore[method-assign]


_AUTODOC = re.compile(r"^(\.\. auto\w+::|(```|:::)\{auto\w+\})", re.MULTILINE)


def _prepare_readers(app: Sphinx, env: Any, docnames: list[str]) -> None:
    """Get ready, before the readers fork, for what the pages to read need.

    A page with code cells will want a kernel: the kernel server starts now,
    in the background, while Sphinx parses. When more such pages are read than
    run at once, it imports every module it can before the first kernel (see
    :data:`.kernels.PRELOAD_LATER`). API pages import ``amp_lesson``
    (and torch with it) for autodoc: imported here once, every parallel
    reader forked after it has it, instead of each importing it (2.5 s each).
    A build that reads no such page (a no-change build) does neither. Nor does
    one whose pages import none of what the server imports first
    (:func:`.kernels.worth_a_server`): their kernels start the usual way, in
    about a second, where a forked one would wait for the server's torch.
    """
    sources = [Path(env.doc2path(doc)) for doc in docnames]
    sources = [p for p in sources if p.suffix == ".md" and p.is_file()]
    texts = [p.read_text(encoding="utf-8") for p in sources]
    code = [
        [cell.source for cell in pages.read_text(t, p).code_cells]
        for p, t in zip(sources, texts, strict=True)
    ]
    with_cells = sum(1 for cells in code if cells)
    if _kernel_server.folder is not None and with_cells:
        if any(kernels.worth_a_server(source) for cells in code for source in cells):
            _kernel_server.start_soon(preload_all=with_cells > app.parallel)
        else:
            _kernel_server.usual_way()
    if app.parallel > 1 and len(docnames) > 5 and any(_AUTODOC.search(t) for t in texts):
        import importlib

        for name in kernels.package_modules():
            importlib.import_module(name)


def _book_figures_in_kernels(app: Sphinx, config: Config) -> None:
    """Tell the pages' kernels they draw the book's figures (see
    :data:`amp_lesson.plotting.BOOK_FIGURES_ENV`): set before the kernel server starts,
    so that every kernel, forked or started the usual way, inherits it."""
    from amp_lesson.plotting import BOOK_FIGURES_ENV

    os.environ[BOOK_FIGURES_ENV] = "1"


def _limit_kernel_threads(app: Sphinx, config: Config) -> None:
    """Give each of the ``-j N`` parallel kernels its share of the cores.

    Each kernel's maths libraries would otherwise start one thread per core,
    and N kernels would fight over the cores. A value already in the
    environment wins, so an author can still choose.
    """
    if app.parallel > 1:
        share = str(max(1, (os.cpu_count() or 1) // app.parallel))
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            os.environ.setdefault(name, share)


_kernel_server = kernels.KernelServer()


def _fork_kernels(app: Sphinx, config: Config) -> None:
    """Fork each page's kernel from one server that has imported torch (see :mod:`.kernels`).

    In the main process, before ``-j`` forks the readers, so that they share
    the server. Off with ``amp_lesson_fork_kernels = False``, off the Linux
    platform, and when nothing executes.
    """
    if not config.amp_lesson_fork_kernels or config.nb_execution_mode == "off":
        kernels.forget_inherited_server()  # off means MyST-NB's stock kernels, whoever started us
        return
    if sys.platform != "linux":
        return
    if not kernels.provisioner_installed():
        raise ExtensionError(
            f"the kernel provisioner {kernels.PROVISIONER_NAME!r} is not installed: install "
            "amp_lesson again (pip install -e .), or set amp_lesson_fork_kernels = False"
        )
    _kernel_server.open()
    atexit.register(_kernel_server.close)
    shutdown.watch(_kernel_server.close)  # a signal ends the server too
    app.connect("build-finished", lambda app, exc: _kernel_server.close())


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
    if app.config.amp_lesson_edition:
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
                "%s has code cells but was not executed; give it jupytext or "
                "'file_format: mystnb' front matter with a kernelspec",
                docname,
                location=docname,
                type="amp_lesson",
                subtype="not_executed",
            )


def _note_pages_without_code(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    """Give pages that run no code a provenance line too (what built them, and when).

    It goes under the title, except on the landing page, which leads with what the book
    is for and carries the line at its foot.
    """
    nb_metadata = getattr(app.env, "nb_metadata", {})
    if nb_metadata.get(docname, {}).get("exec_data") or edition.shows_a_run(app, docname):
        return  # executed pages print their own line from their first cell
    section = next(iter(doctree.findall(nodes.section)), None)
    if section is None:
        return
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = "not installed"
    today = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    text = f"Runs no code · built with amp_lesson {amp_lesson.__version__} · torch {torch_version} · {today}"
    para = nodes.paragraph(text, text, classes=["amp-provenance"])
    if docname == app.config.root_doc:
        section.append(para)
        return
    title = next(iter(section.findall(nodes.title)), None)
    section.insert(section.index(title) + 1 if title is not None else 0, para)


# -- MathML ----------------------------------------------------------------------


def _mathml(latex: str, display: bool) -> str:
    from latex2mathml.converter import convert

    from amp_lesson.sphinxext.theme import mark_unary_signs

    return mark_unary_signs(convert(latex.strip(), display="block" if display else "inline"))


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
    """The repository's https address: ``amp_lesson_repository`` or ``[project.urls]``."""
    repo = app.config.amp_lesson_repository.strip().removesuffix(".git").strip("/")
    if repo and not repo.startswith("https://"):
        repo = f"https://github.com/{repo}"  # the setting may be given as owner/name
    return repo or export.repository_url()


def _add_repository_buttons(app: Sphinx, config: Config) -> None:
    """The theme's repository, "Edit this page" and "Open an issue" buttons, pointed at the
    repository of ``[project.urls]`` (or ``amp_lesson_repository``) unless ``conf.py`` says
    otherwise."""
    options = config.html_theme_options
    options.setdefault("repository_url", _repository(app))
    options.setdefault("repository_branch", config.amp_lesson_branch)
    options.setdefault("path_to_docs", Path(app.srcdir).name)
    for button in ("use_repository_button", "use_edit_page_button", "use_issues_button"):
        options.setdefault(button, True)


def _add_notebook_buttons(
    app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any
) -> None:
    """Offer the executed page as a plain Jupyter notebook (see :mod:`.export`)."""
    executed = Path(app.outdir).parent / "jupyter_execute" / f"{pagename}.ipynb"
    if doctree is None or not executed.is_file() or edition.in_edition(app):
        return
    # The titles and labels read from the sources, as tools/notebooks.py reads them for the
    # twins Colab opens: the download and its twin say the same words.
    if getattr(app, "_amp_lesson_targets", None) is None:
        app._amp_lesson_targets = export.book_titles_and_labels(Path(app.srcdir))
    titles, labels = app._amp_lesson_targets
    executed_nb = json.loads(executed.read_text(encoding="utf-8"))
    export_page = functools.partial(
        export.export_notebook,
        executed_nb,
        export.read_glue(executed),
        docname=pagename,
        executed=True,
        repository=_repository(app),
        titles=titles,
        labels=labels,
        built_on=export.build_device(executed_nb) or "this build's machine",
        source_dir=Path(app.srcdir),
    )
    try:
        nb = export_page()
    except ValueError as error:  # a part of the book only (a test's one-page book, say)
        logger.warning("%s: the notebook keeps it as plain text", error, location=pagename)
        nb = export_page(strict_references=False)
    target = Path(app.outdir) / "_sources" / f"{pagename}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(nb, indent=1, ensure_ascii=False), encoding="utf-8")
    target.with_suffix(".py").write_text(export.export_script(nb), encoding="utf-8")
    context["ipynb_source"] = f"{pagename}.ipynb"


NOTEBOOKS_ZIP = "amp-lesson-notebooks.zip"
"""Every page's notebook in one download, at the root of the built site."""


def _add_download_entries(context: dict[str, Any]) -> None:
    """The page's code as a script, and every notebook as one zip, in the theme's download menu."""
    for button in context.get("header_buttons", []):
        if button.get("label") != "download-buttons":
            continue
        pathto = context["pathto"]
        entries = button["buttons"]
        where = next(
            (i + 1 for i, b in enumerate(entries) if b.get("label") == "download-notebook-button"),
            0,
        )
        script = {
            "type": "link",
            "url": f"{pathto('_sources', 1)}/{context['ipynb_source'].removesuffix('.ipynb')}.py",
            "text": ".py",
            "icon": "fas fa-code",
            "tooltip": "Download this page's code as a Python script",
            "label": "download-script-button",
        }
        every = {
            "type": "link",
            "url": pathto(NOTEBOOKS_ZIP, 1),
            "text": "all notebooks (.zip)",
            "icon": "fas fa-file-archive",
            "tooltip": "Download every page of the book as a notebook, in one zip file",
            "label": "download-all-notebooks-button",
        }
        entries[where:where] = [script, every]


def _write_notebooks_zip(app: Sphinx, exception: Exception | None) -> None:
    """Gather the pages' notebooks (``_sources/**/*.ipynb``) into :data:`NOTEBOOKS_ZIP`."""
    if exception is not None or app.builder.format != "html" or edition.in_edition(app):
        return
    sources = Path(app.outdir) / "_sources"
    notebooks = sorted(sources.rglob("*.ipynb")) if sources.is_dir() else []
    if not notebooks:
        return
    target = Path(app.outdir) / NOTEBOOKS_ZIP
    partial = target.with_suffix(".zip.partial")
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in notebooks:
            # A fixed date: the same notebooks give the same zip, build after build.
            info = zipfile.ZipInfo(f"amp-lesson/{path.relative_to(sources).as_posix()}")
            info.date_time = (2020, 1, 1, 0, 0, 0)
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes())
    partial.replace(target)


def _add_colab_button(
    app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any
) -> None:
    if "ipynb_source" not in context or "header_buttons" not in context:
        return
    _add_download_entries(context)
    url = export.colab_url(
        f"notebooks/{pagename}.ipynb", app.config.amp_lesson_branch, _repository(app)
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


# -- doctrees: the page's own, nothing more ----------------------------------------------


def _detach_foreign_documents(app: Sphinx, doctree: nodes.document) -> None:
    """Point every node at its own doctree before Sphinx pickles it.

    Nodes that autodoc's nested parse creates keep a reference to the document
    they were parsed in, and through its settings to the whole build
    environment: each API page's pickled doctree held a copy of it (about 800 KB
    each, 20 MB in all), unpickled again on every build that numbers figures.
    Without the reference a node finds its document through its parent.
    """
    for node in doctree.findall():
        if node.__dict__.get("_document", doctree) is not doctree:
            del node._document


def _write_cached_outputs(app: Sphinx, doctree: nodes.document) -> None:
    """Give ``jupyter_execute/<page>.ipynb`` the outputs the page shows.

    MyST-NB writes that notebook from the one it parsed. When it executes the
    page, the execution fills that notebook in; when the outputs come from the
    execution cache it merges them into a copy, and the file it writes has
    none. The download button and the notebook twins read that file, so a
    page read again from the cache (an extension edit, ``-E``) would offer a
    notebook without outputs. Merge them in here, from the same cache.
    """
    path = Path(app.outdir).parent / "jupyter_execute" / f"{app.env.docname}.ipynb"
    if app.config.nb_execution_mode != "cache" or not path.is_file():
        return
    import nbformat
    from jupyter_cache import get_cache

    notebook = nbformat.reads(path.read_text(encoding="utf-8"), as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    if not code or any(cell.get("outputs") for cell in code):
        return
    try:
        _, merged = get_cache(app.config.nb_execution_cache_path).merge_match_into_notebook(
            notebook
        )
    except KeyError:  # not in the cache: nothing ran, nothing to add
        return
    path.write_text(nbformat.writes(merged), encoding="utf-8")


def setup(app: Sphinx) -> None:
    app.add_config_value("amp_lesson_watch", [], "env", types=[list])
    # A new environment key names a new cache folder: every page is read (and run) again.
    app.add_config_value("amp_lesson_environment_key", "", "env", types=[str])
    app.add_config_value("amp_lesson_extension_hash", "", "env", types=[str])
    app.add_config_value("amp_lesson_repository", "", "html", types=[str])
    app.add_config_value("amp_lesson_branch", "main", "html", types=[str])
    # Before MyST-NB reads nb_execution_cache_path at builder-inited.
    app.connect("config-inited", _key_cache_on_sources, priority=100)
    # In the main process, before -j forks the readers that start kernels.
    app.connect("config-inited", lambda app, config: encrypt_kernel_transport())
    app.connect("config-inited", _limit_kernel_threads)
    app.connect("config-inited", _book_figures_in_kernels, priority=100)
    app.add_config_value("amp_lesson_fork_kernels", True, "", types=[bool])
    # After the thread limits: the kernel server takes its environment from this process.
    app.connect("config-inited", _fork_kernels, priority=600)
    # From here a signal, or the end of the build's parent, ends every process of the build.
    app.connect("config-inited", lambda app, config: shutdown.watch(), priority=50)
    app.connect("build-finished", lambda app, exc: shutdown.stop_watching(), priority=900)
    app.connect("build-finished", _end_workers_of_a_failed_build, priority=100)
    app.connect("builder-inited", _write_on_every_core)
    app.connect("env-before-read-docs", _schedule_reading)
    app.connect("env-before-read-docs", _prepare_readers)
    # MyST-NB's parser, with each page's key, and a dead kernel as a failure of its page.
    app.add_source_parser(execution.Parser, override=True)
    app.connect("env-get-outdated", execution.outdated_pages)
    app.connect("env-updated", _fail_on_execution_errors)
    app.connect("doctree-read", _note_error_outputs)
    app.connect("env-purge-doc", _forget_error_outputs)
    app.connect("env-merge-info", _merge_error_outputs)
    app.connect("env-check-consistency", _fail_on_error_outputs)
    app.connect("env-check-consistency", _check_pages_executed)
    app.connect("doctree-resolved", _note_pages_without_code)
    app.connect("doctree-read", _detach_foreign_documents)
    app.connect("doctree-read", _write_cached_outputs)
    app.add_html_math_renderer("mathml", (_visit_math_html, None), (_visit_displaymath_html, None))
    # Before the theme builds its download menu (priority 500), after it adds buttons.
    app.connect("html-page-context", _add_notebook_buttons, priority=450)
    app.connect("html-page-context", _add_colab_button, priority=900)
    app.connect("build-finished", _write_notebooks_zip)
    app.connect("config-inited", _add_static_path)
    app.connect("config-inited", _add_repository_buttons)
    app.add_css_file("amp_lesson.css")


def _add_static_path(app: Sphinx, config: Config) -> None:
    config.html_static_path.append(str(Path(__file__).parent / "static"))
