"""The execution cache: what its key covers, and that pruning it deletes nothing of the user's."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from helpers import mini_book, sphinx_build

import amp_lesson
from amp_book import cache as book
from amp_book import workdirs
from amp_book.cache import (
    CACHE_MARKER,
    KEEP_CACHES,
    execution_key,
    extension_key,
    gpu_models,
    integrity,
    is_book_cache,
    key,
    prune_caches,
)
from amp_book.cache.integrity import entry_problem, lock_cache_writes
from amp_book.patches import encrypt_kernel_transport


def _fake_gpu(proc: Path, slot: str, model: str) -> None:
    (proc / slot).mkdir(parents=True)
    (proc / slot / "information").write_text(
        f"Model: \t\t {model}\nIRQ:   \t\t 95\nGPU UUID: \t GPU-0\nBus Type: \t PCIe\n"
    )


def test_gpu_models_reads_the_driver_files(tmp_path: Path) -> None:
    assert gpu_models(tmp_path / "absent") == ()
    _fake_gpu(tmp_path, "0000:9a:00.0", "NVIDIA H200")
    _fake_gpu(tmp_path, "0000:17:00.0", "NVIDIA A100-SXM4-80GB")
    assert gpu_models(tmp_path) == ("NVIDIA A100-SXM4-80GB", "NVIDIA H200")


def test_the_key_changes_with_the_gpu_model(tmp_path: Path) -> None:
    a100, h200 = tmp_path / "a100", tmp_path / "h200"
    _fake_gpu(a100, "0000:17:00.0", "NVIDIA A100-SXM4-80GB")
    _fake_gpu(h200, "0000:17:00.0", "NVIDIA H200")
    keys = {
        "none": execution_key(gpus=gpu_models(tmp_path / "absent")),
        "a100": execution_key(gpus=gpu_models(a100)),
        "h200": execution_key(gpus=gpu_models(h200)),
    }
    assert len(set(keys.values())) == 3, keys
    assert execution_key(gpus=gpu_models(h200)) == keys["h200"]  # and it is stable


def test_the_key_changes_with_the_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    first = execution_key(gpus=["NVIDIA H200", "NVIDIA L4"])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert execution_key(gpus=["NVIDIA H200", "NVIDIA L4"]) != first


def _book_cache(base: Path, name: str) -> Path:
    path = base / name
    path.mkdir(parents=True)
    (path / CACHE_MARKER).write_text("")
    sqlite3.connect(path / "global.db").close()
    return path


def test_prune_deletes_only_the_books_own_caches(tmp_path: Path) -> None:
    ours = [_book_cache(tmp_path, f"{i:016x}") for i in range(5)]
    for age, path in enumerate(ours):  # ours[4] is the newest
        os.utime(path, (1e9 + age, 1e9 + age))
    # What a user might keep beside them, some of it looking much like a cache.
    lookalike = tmp_path / "0123456789abcdef"  # key-like name and a database, no marker
    lookalike.mkdir()
    sqlite3.connect(lookalike / "global.db").close()
    marked_no_db = tmp_path / "fedcba9876543210"
    marked_no_db.mkdir()
    (marked_no_db / CACHE_MARKER).write_text("")
    other = tmp_path / "pip" / "http"
    other.mkdir(parents=True)
    (other / "wheel").write_bytes(b"\1" * 10)
    (tmp_path / "notes.txt").write_text("mine")

    deleted = prune_caches(tmp_path, current=ours[0], keep=2)
    assert sorted(deleted) == sorted(ours[1:4])
    assert [p.exists() for p in ours] == [True, False, False, False, True]
    assert lookalike.is_dir()
    assert marked_no_db.is_dir()
    assert (other / "wheel").read_bytes() == b"\1" * 10
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert not is_book_cache(lookalike)
    assert not is_book_cache(tmp_path / "notes.txt")
    with pytest.raises(ValueError, match="keep must be an integer >= 1"):
        prune_caches(tmp_path, ours[0], keep=0)


def test_prune_leaves_a_link_to_a_cache_alone(tmp_path: Path) -> None:
    target = _book_cache(tmp_path / "elsewhere", "00000000000000aa")
    base = tmp_path / "base"
    base.mkdir()
    (base / "00000000000000bb").symlink_to(target, target_is_directory=True)
    assert prune_caches(base, base / "00000000000000cc", keep=1) == []
    assert target.is_dir()


@pytest.mark.usefixtures("sphinx")
@pytest.mark.book
def test_unrelated_files_beside_the_caches_survive_builds_with_new_keys(tmp_path: Path) -> None:
    """AMP_LESSON_CACHE_DIR pointed at a folder of the user's: builds delete only their caches."""
    cell = "import os\nprint(6 * 7, 'threads', os.environ.get('OMP_NUM_THREADS'))"
    src = mini_book(tmp_path, f"```{{code-cell}} ipython3\n{cell}\n```\n")
    base = tmp_path / "cache-base"
    user_files = {
        base / "notes.txt": "keep me",
        base / "project" / "data.csv": "a,b\n1,2\n",
        base / "0123456789abcdef" / "global.db": "not the book's",
        base / "fedcba9876543210" / "settings.json": "{}",
    }
    for path, text in user_files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    env = dict(os.environ, AMP_LESSON_CACHE_DIR=str(base))
    env.pop("OMP_NUM_THREADS", None)  # the extension's own choice is under test
    out = tmp_path / "html"
    builds = KEEP_CACHES + 1
    for i in range(builds):
        # Other visible devices change the cache folder's key, as a new torch would.
        proc = sphinx_build(src, out, env=dict(env, CUDA_VISIBLE_DEVICES=str(i)))
        # -j auto: each of one-per-core kernels gets one thread
        assert "42 threads 1" in (out / "page.html").read_text()
        assert "without encryption" not in proc.stdout + proc.stderr
    for path, text in user_files.items():
        assert path.read_text() == text, f"{path} was changed or deleted"
    caches = sorted(p.name for p in base.iterdir() if is_book_cache(p))
    assert len(caches) == KEEP_CACHES
    assert {p.name for p in base.iterdir()} == {
        "notes.txt",
        "project",
        "0123456789abcdef",
        "fedcba9876543210",
        *caches,
    }


def test_kernels_encrypt_their_transport() -> None:
    from jupyter_client.manager import KernelManager

    before = KernelManager(kernel_name="python3").transport_encryption
    undo = encrypt_kernel_transport()
    assert undo is not None
    try:
        assert KernelManager(kernel_name="python3").transport_encryption == "auto"
    finally:
        undo()
    assert KernelManager(kernel_name="python3").transport_encryption == before != "auto"


def test_a_page_with_a_playground_depends_on_the_module_that_computes_it() -> None:
    from amp_book import pages

    graph = key.PackageGraph(Path(amp_lesson.__file__).parent)
    front = "---\nfile_format: mystnb\nkernelspec: {name: python3, display_name: P}\n---\n"
    explorer = pages.read_text(front + "# P\n\n:::{bit-explorer}\n:value: 1\n:::\n")
    playground = pages.read_text(front + "````{scaler-playground}\n````\n")
    quoted = pages.read_text(front + "Write `:::{bit-explorer}` to show one.\n")
    assert {"amp_lesson.playground", "amp_lesson.formats"} <= key.page_modules(explorer, graph)
    assert "amp_lesson.scaler" in key.page_modules(playground, graph)
    assert key.page_modules(quoted, graph) == set()


def _page_keys(
    package: Path, cells: dict[str, str], watch: tuple[Path, ...] | list[Path] = ()
) -> dict[str, str]:
    """The key of a one-cell page of each code in ``cells``, against ``package`` as it is now."""
    from amp_book import pages

    front = "---\nfile_format: mystnb\nkernelspec: {name: python3, display_name: P}\n---\n"
    graph = key.PackageGraph(package)
    keys = {}
    for name, code in cells.items():
        page = pages.read_text(front + f"```{{code-cell}} ipython3\n{code}\n```\n")
        keys[name] = key.inputs_key(key.page_inputs(page, graph, watch), graph)
    return keys


def test_a_page_is_keyed_on_the_modules_it_imports_and_not_on_the_extension(
    tmp_path: Path,
) -> None:
    """A module edit changes the keys of the pages that import it (directly or not) only;
    an extension edit changes no page's key, only the key that has Sphinx read them again."""

    package = tmp_path / "amp_lesson"
    package.mkdir()
    extension = tmp_path / "amp_book"
    extension.mkdir()
    (package / "__init__.py").write_text("")
    (package / "formats.py").write_text("X = 1\n")
    (package / "display.py").write_text("from .formats import X\n")
    (package / "scaler.py").write_text("Y = 1\n")
    (extension / "book.py").write_text("Z = 1\n")
    data = tmp_path / "_data"
    data.mkdir()
    (data / "gpu.json").write_text("{}")
    cells = {
        "display": "import amp_lesson.display",
        "scaler": "from amp_lesson.scaler import Y",
        "data": "from pathlib import Path\nPath('../_data/gpu.json')",
    }

    def keys() -> dict[str, str]:
        return _page_keys(package, cells, [data])

    before = keys()
    (package / "formats.py").write_text("X = 2\n")  # imported by display, not by scaler
    after = keys()
    assert after["display"] != before["display"]
    assert after["scaler"] == before["scaler"]
    assert after["data"] == before["data"]
    (data / "gpu.json").write_text('{"x": 1}')
    assert keys()["data"] != after["data"]
    assert keys()["scaler"] == after["scaler"]
    extension_before = extension_key_of(extension)
    (extension / "book.py").write_text("Z = 2\n")
    assert keys()["scaler"] == after["scaler"]
    assert extension_key_of(extension) != extension_before


def test_a_page_is_keyed_on_modules_imported_at_run_time_and_on_the_packages_data(
    tmp_path: Path,
) -> None:
    """Before: a cell's ``importlib.import_module("amp_lesson.x")`` was served from the cache
    after ``x`` changed, and ``recording.schema.json`` (read by a module) was in no key."""

    package = tmp_path / "amp_lesson"
    (package / "bench").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "formats.py").write_text("X = 1\n")
    (package / "scaler.py").write_text("Y = 1\n")
    (package / "bench" / "__init__.py").write_text("")
    (package / "bench" / "recording.py").write_text(
        "SCHEMA = Path(__file__).with_name('recording.schema.json')\n"
    )
    (package / "bench" / "recording.schema.json").write_text("{}")
    cells = {
        "dynamic": "import importlib\nfmt = importlib.import_module('amp_lesson.formats')",
        "computed": "import importlib\nname = 'formats'\nimportlib.import_module(f'amp_lesson.{name}')",
        "recording": "from amp_lesson.bench import recording",
        "scaler": "from amp_lesson.scaler import Y",
    }

    def keys() -> dict[str, str]:
        return _page_keys(package, cells)

    before = keys()
    (package / "formats.py").write_text("X = 2\n")
    after = keys()
    changed = {name for name in before if before[name] != after[name]}
    assert changed == {"dynamic", "computed"}  # a computed name could be any module
    (package / "bench" / "recording.schema.json").write_text('{"type": "object"}')
    changed = {name for name, key in keys().items() if key != after[name]}
    assert changed == {"recording", "computed"}
    # a data file no module names could be read by any: every page depends on it
    (package / "bench" / "other.json").write_text("[]")
    final = keys()
    (package / "bench" / "other.json").write_text("[1]")
    assert all(key != final[name] for name, key in keys().items())


def extension_key_of(extension: Path) -> str:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(key, "EXTENSION_DIR", extension)
        return extension_key()


def test_the_cache_folder_is_keyed_on_the_installed_distributions_and_python(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = execution_key(gpus=[])
    real = key.installed_distributions()
    monkeypatch.setattr(
        key,
        "installed_distributions",
        lambda: [d if not d.startswith("numpy==") else "numpy==0.0.1" for d in real],
    )
    assert execution_key(gpus=[]) != first
    monkeypatch.setattr(key, "installed_distributions", lambda: real)
    assert execution_key(gpus=[]) == first
    monkeypatch.setattr(key.sys, "version", "3.99.0 (an other Python)")
    assert execution_key(gpus=[]) != first


@pytest.mark.usefixtures("sphinx")
def test_a_page_read_again_from_the_cache_keeps_its_outputs_in_its_notebook(
    tmp_path: Path,
) -> None:
    """MyST-NB writes the executed notebook without the outputs it takes from the cache."""
    src = mini_book(tmp_path, "```{code-cell} ipython3\nprint(6 * 7)\n```\n")
    out = tmp_path / "html"
    notebook = workdirs.executed_folder(out) / "page.ipynb"

    def outputs() -> list[Any]:
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        return [o for c in cells if c["cell_type"] == "code" for o in c["outputs"]]

    sphinx_build(src, out)  # executes
    assert ["".join(o.get("text", "")) for o in outputs()] == ["42\n"]
    proc = sphinx_build(src, out, "-E")  # every page read again, outputs from the cache
    assert "Executing notebook" not in proc.stdout + proc.stderr
    assert ["".join(o.get("text", "")) for o in outputs()] == ["42\n"]


def _add_notebooks(path: str, writer: int, count: int) -> None:
    import nbformat
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    cache = get_cache(path)
    for i in range(count):
        cell = nbformat.v4.new_code_cell(f"x = {writer * 1000 + i}", execution_count=1)
        nb = nbformat.v4.new_notebook(cells=[cell])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
        cache.cache_notebook_bundle(
            CacheBundleIn(nb, f"/book/{writer}/{i}.md"), check_validity=False
        )


def test_parallel_readers_adding_to_one_cache_lose_nothing(tmp_path: Path) -> None:
    # Unlocked, jupyter-cache's trim after each addition races with the other writers'
    # additions: here every run lost records or raised "Notebook file does not exist"
    # (the writer's traceback is in the captured stderr).
    import multiprocessing

    from jupyter_cache import get_cache
    from jupyter_cache.cache.db import create_db
    from jupyter_cache.cache.main import JupyterCacheBase

    unpatched = JupyterCacheBase.cache_notebook_bundle
    undo = lock_cache_writes()
    assert undo is not None
    try:
        lock_cache_writes()  # a second call wraps nothing twice
        assert JupyterCacheBase.cache_notebook_bundle.__wrapped__ is unpatched
        create_db(tmp_path).dispose()
        fork = multiprocessing.get_context("fork")  # as Sphinx makes its parallel readers
        writers = [
            fork.Process(target=_add_notebooks, args=(str(tmp_path), w, 30)) for w in range(3)
        ]
        for w in writers:
            w.start()
        for w in writers:
            w.join()
    finally:
        undo()
    assert JupyterCacheBase.cache_notebook_bundle is unpatched
    assert [w.exitcode for w in writers] == [0, 0, 0]
    assert len(get_cache(str(tmp_path)).list_cache_records()) == 90
    assert (tmp_path / integrity.CACHE_LOCK).is_file()


FAULTS = ("truncated", "deleted", "edited")


@pytest.mark.usefixtures("sphinx")
def test_a_broken_cache_entry_is_dropped_and_its_page_runs_again(tmp_path: Path) -> None:
    """Before: a cut-short entry failed every later build (``NotJSONError``, naming neither
    page nor path), a deleted one with ``KeyError: 'Notebook file does not exist for cache
    record PK: 1'``, and an edited one was served as the page's run. One page for each."""
    src = mini_book(tmp_path, "```{code-cell} ipython3\nprint('answer', 6 * 7)\n```\n")
    page = (src / "page.md").read_text()
    for fault in FAULTS:  # a page each, each its own entry (the cells differ)
        (src / f"{fault}.md").write_text(page.replace("6 * 7)", f"6 * 7, {fault!r})"))
    index = src / "index.md"
    index.write_text(index.read_text().replace("page\n", "page\n" + "\n".join(FAULTS) + "\n"))
    out = tmp_path / "html"
    sphinx_build(src, out)
    cache = workdirs.cache_folder(out)

    def entry(title: str) -> Path:
        (found,) = [
            nb
            for nb in cache.glob("*/executed/*/base.ipynb")
            if (f"'{title}')" if title else "6 * 7)") in nb.read_text()
        ]
        return found

    broken = {fault: entry(fault) for fault in FAULTS}
    broken["truncated"].write_bytes(broken["truncated"].read_bytes()[:100])  # a full disk
    shutil.rmtree(broken["deleted"].parent)
    edited = broken["edited"]
    edited.write_text(edited.read_text().replace("answer 42 edited", "answer 41 edited"))
    proc = sphinx_build(src, out, "-E", check=False)
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0  # the book builds with -W: this build says so, not the next
    for fault, notebook in broken.items():
        assert f"{fault}: the execution cache's entry {notebook.parent} was dropped: " in log, (
            fault,
            log[-3000:],
        )
    assert log.count("was dropped") == len(FAULTS)  # the healthy page's entry was served
    assert "Traceback" not in log, log[-3000:]
    for fault in FAULTS:
        html = (out / f"{fault}.html").read_text()
        assert f"answer 42 {fault}" in html  # run again, not served as it was
        assert "answer 41" not in html
    again = sphinx_build(src, out, "-E")  # and the next build is clean, from the cache
    assert "dropped" not in again.stdout + again.stderr
    assert "Executing notebook" not in again.stdout + again.stderr
    assert all(entry_problem(entry(title)) is None for title in [*FAULTS, ""])


def test_a_write_that_fails_half_way_leaves_no_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """jupyter-cache commits the record, then writes the notebook: a disk that fills up
    between the two left a record of half a notebook. Now nothing is kept, and the error
    names the entry; the next addition, with space again, is whole."""
    import errno

    import nbformat
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn
    from jupyter_cache.cache.db import create_db

    create_db(tmp_path).dispose()
    cache = get_cache(str(tmp_path))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    write_text = Path.write_text

    def full_disk(self: Path, data: str, *args: Any, **kwargs: Any) -> int:
        if self.name == "base.ipynb":
            write_text(self, data[:50], *args, **kwargs)
            raise OSError(errno.ENOSPC, "No space left on device")
        return write_text(self, data, *args, **kwargs)

    undo = lock_cache_writes()
    assert undo is not None
    try:
        monkeypatch.setattr(Path, "write_text", full_disk)
        with pytest.raises(OSError, match=r"could not be stored in the execution cache at .*"
                           r"\(No space left on device\); nothing of it was kept"):  # fmt: skip
            cache.cache_notebook_bundle(CacheBundleIn(nb, "/book/p.md"), check_validity=False)
        monkeypatch.undo()
        assert cache.list_cache_records() == []
        assert not list(tmp_path.glob("executed/*"))
        with pytest.raises(KeyError):
            cache.match_cache_notebook(nb)
        record = cache.cache_notebook_bundle(CacheBundleIn(nb, "/book/p.md"), check_validity=False)
        assert cache.match_cache_notebook(nb).pk == record.pk
        assert entry_problem(cache._get_notebook_path_cache(record.hashkey)) is None
    finally:
        undo()


@pytest.mark.parametrize("damage", ["cut short", "overwritten", "emptied"])
def test_a_damaged_cache_database_is_emptied_instead_of_failing_every_build(
    tmp_path: Path, damage: str
) -> None:
    """A cut-short or overwritten ``global.db`` failed every later build ("database disk image
    is malformed"); now the cache is emptied, once, and its pages run again. So does an empty
    one (zero bytes): SQLite's check passes it, and jupyter-cache, finding a database, made
    none of its tables ("Unexpected error accessing jupyter cache" at every build)."""
    from jupyter_cache.cache.db import create_db

    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / book.CACHE_MARKER).write_text("")
    create_db(cache).dispose()
    with sqlite3.connect(cache / book.DATABASE_NAME) as db:  # some records, as a build leaves
        db.execute("CREATE TABLE filler (x TEXT)")
        db.executemany("INSERT INTO filler VALUES (?)", [("x" * 500,)] * 200)
    db.close()
    entry = cache / "executed" / "0123abcd"
    entry.mkdir(parents=True)
    (entry / "base.ipynb").write_text("{}")
    assert book.database_problem(cache) is None  # whole: left as it is
    assert entry.is_dir()
    path = cache / book.DATABASE_NAME
    data = path.read_bytes()
    damaged = {"cut short": data[: len(data) // 2], "overwritten": b"x" * len(data)}
    path.write_bytes(damaged.get(damage, b""))
    problem = book.database_problem(cache)
    assert problem is not None
    said = {"cut short": "malformed", "overwritten": "not a database"}
    expected = said.get(damage, "(0 bytes) lacks jupyter-cache's nbcache, nbproject, settings")
    assert expected in problem, problem
    assert sorted(p.name for p in cache.iterdir()) == sorted(
        [book.CACHE_MARKER, integrity.CACHE_LOCK]
    )
    create_db(cache).dispose()  # what the build does next: a new, empty database
    assert book.database_problem(cache) is None


def test_an_entry_removed_while_it_is_read_fails_the_page_with_a_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another build sharing the cache may trim an entry between the lookup and the read; the
    read then raised a bare KeyError. Now the error says what happened and what to do."""
    import fcntl

    import nbformat
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn
    from jupyter_cache.cache.db import NbCacheRecord, create_db

    create_db(tmp_path).dispose()
    cache = get_cache(str(tmp_path))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    undo = lock_cache_writes()
    assert undo is not None
    try:
        record = cache.cache_notebook_bundle(CacheBundleIn(nb, "/book/p.md"), check_validity=False)
        flock = fcntl.flock

        def trimmed_meanwhile(lock: Any, mode: int) -> None:
            if mode == fcntl.LOCK_SH:  # the other build's trim, just before this read
                NbCacheRecord.remove_records([record.pk], cache.db)
            flock(lock, mode)

        monkeypatch.setattr(fcntl, "flock", trimmed_meanwhile)
        token = integrity.reading_page.set("chapter/p")
        try:
            with pytest.raises(RuntimeError, match=r"^chapter/p: the execution cache's entry "
                               r"was removed by another build while this one read it"):  # fmt: skip
                cache.merge_match_into_notebook(nb)
        finally:
            integrity.reading_page.reset(token)
    finally:
        undo()
