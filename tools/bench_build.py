"""Benchmark the book build the way an author meets it, and the weight of its pages.

Builds a copy of ``docs/`` in a scratch folder (the working tree is not
touched) with the options of ``tools/build_book.py`` and prints, each as wall
and CPU seconds (CPU counts every process of the build, kernels included, so
it moves less than wall time on a busy machine):

- cold build (no build folder, no execution cache),
- no-change rebuild,
- one-page edit rebuilds: a sentence added to one page (served from the
  cache) and a cell added to it (the page re-executes),
- a one-module edit: a comment added to one module of ``amp_lesson`` (a copy
  of the package: the working tree is not touched), and how many pages ran
  again (those that import it, directly or not),
- with ``--edition``, the scratch build stored as an edition of this CPU and
  the builds that render it beside the live book timed: the first (every live
  page written again), a no-change one, a one-page prose edit, and a wave of edits
  (a sentence on every page, a docstring in every module, one function three pages
  run), with how many recorded pages still open on the recording after it,
- with ``--compare-stock``, a second cold build with MyST-NB's stock kernels
  (``-D amp_lesson_fork_kernels=0``) in the same run, and the ratio of the two,
- every page read and written again with all outputs from the cache
  (``-E``): Sphinx's own read and write work, without execution,
- where a page's execution starts: ``import torch`` in a fresh Python, and
  a kernel started, ``import torch`` and ``amp_lesson`` run in it, shut down,
- per-page execution time (from the cold build), slowest first,
- first-load weight of each page in a real Chromium (every request, gzipped,
  by kind: HTML, CSS, JS, fonts, images), and requests that leave the machine.

- the author's loop in the live preview (``amp_book.preview``): from a save to the
  browser told to reload, for a sentence added, a save that changes nothing and a cell
  added,

Targets on a 2-core machine: cold <= 60 s and <= 1.2 x its floor (its CPU seconds
over the cores), no-change <= 3 s, one-page edit <= 12 s; in the live preview a
sentence <= 3 s, a save that changes nothing <= 2 s, a cell <= 8 s; first load <= 350
KiB gzipped, no outside request. This reports; it does not fail on a miss.

    python tools/bench_build.py [--page chapter/formats] [--module fp8] [--compare-stock] [--edition]
                                [--weigh all|PAGE ...] [--jobs N] [--json out.json]
                                [--root TREE] [--write-costs]

``--root`` benchmarks another checkout's ``docs/`` and ``src/`` (for a
before/after comparison) with this environment's packages.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import http.server
import json
import os
import pickle
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
sys.path.insert(0, str(TOOLS))
from build_book import ROOT, book_command

from amp_book import workdirs

TARGETS = {
    "cold_s": 60.0,
    "cold_over_floor": 1.2,
    "no_change_s": 3.0,
    "one_page_prose_edit_s": 12.0,
    "one_page_edit_s": 12.0,
    "preview_one_sentence_s": 3.0,
    "preview_no_change_s": 2.0,
    "preview_one_cell_s": 8.0,
    "first_load_kib_gzip": 350.0,
    "outside_requests": 0,
}
KINDS = {
    ".html": "html",
    ".css": "css",
    ".js": "js",
    ".mjs": "js",
    ".woff": "fonts",
    ".woff2": "fonts",
    ".ttf": "fonts",
    ".otf": "fonts",
    ".eot": "fonts",
    ".png": "images",
    ".svg": "images",
    ".jpg": "images",
    ".jpeg": "images",
    ".gif": "images",
    ".webp": "images",
    ".ico": "images",
}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _adopt_orphans() -> bool:
    """Become the parent of every process the build leaves running (Linux's child subreaper).

    The build's kernel server and the kernels it forks are not waited for by
    the process that started them, so their CPU time would not count among
    this process's children's; adopted and reaped here, it does.
    """
    if sys.platform != "linux":
        return False
    from peak_memory import adopt_orphans

    try:
        adopt_orphans()
    except OSError:
        return False
    return True


ADOPTS_ORPHANS = False
"""Whether this process adopts the orphans among its descendants: :func:`main` asks, not
the import (a test runner that imports the module must not become their reaper)."""


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """Run ``cmd``; return (wall seconds, CPU seconds of it and all it started)."""
    cpu0, wall0 = _children_cpu(), time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT, env=env)
    wall = time.perf_counter() - wall0
    while ADOPTS_ORPHANS:  # reap what the build left (its kernel server ends with it)
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    return wall, _children_cpu() - cpu0


def own_caches(env: dict[str, str], folder: Path) -> dict[str, str]:
    """``env`` with caches of its own in ``folder``: the book's execution cache and Inductor's
    compiled graphs. A cold build is cold whatever the caller's environment shares between
    clones (``AMP_LESSON_CACHE_DIR``); two cold builds compared share nothing either."""
    from amp_book.cache import CACHE_DIR_ENV

    return {
        **env,
        CACHE_DIR_ENV: str(folder / "execution"),
        "TORCHINDUCTOR_CACHE_DIR": str(folder / "inductor"),
    }


def build(src: Path, out: Path, jobs: str, env: dict[str, str], *extra: str) -> dict[str, float]:
    # The PDF is timed on its own (``pdf`` in the results): printed after every edit it
    # would hide what an edit costs Sphinx and the kernels.
    # The whole build, stored editions included; -j given last wins over the book's own.
    jobs_option = ["-j", jobs] if jobs != "auto" else []
    cmd = book_command(src, out, "-q", "-D", "amp_lesson_pdf=no", *jobs_option, *extra)
    wall, cpu = timed(cmd, env)
    return {"wall": round(wall, 1), "cpu": round(cpu, 1)}


def time_pdf(out: Path) -> dict[str, object]:
    """Print the built book's ``print.html`` to a PDF, as a build does; wall seconds and pages."""
    from amp_book import printbook

    if not printbook.can_print():
        return {"wall": None, "pages": None, "note": "no Playwright or Chromium here"}
    page = out / printbook.PRINT_PAGE
    start = time.perf_counter()
    pages = printbook.print_pdf(page, out / printbook.PDF)
    size = (out / printbook.PDF).stat().st_size
    return {"wall": round(time.perf_counter() - start, 1), "pages": pages, "bytes": size}


def executed_since(out: Path, since: float) -> list[str]:
    """The pages the build in ``out`` executed after time ``since`` (not served from the cache)."""
    env = pickle.loads((workdirs.doctrees_folder(out) / "environment.pickle").read_bytes())
    return sorted(
        doc
        for doc, meta in getattr(env, "nb_metadata", {}).items()
        if ((meta.get("exec_data") or {}).get("mtime") or 0) >= since  # else from the cache
    )


def exec_times(out: Path) -> dict[str, float]:
    with open(workdirs.doctrees_folder(out) / "environment.pickle", "rb") as f:
        env = pickle.load(f)
    times = {
        doc: round(meta["exec_data"]["runtime"] or 0.0, 2)
        for doc, meta in env.nb_metadata.items()
        if meta.get("exec_data")
    }
    return dict(sorted(times.items(), key=lambda kv: -kv[1]))


KERNEL_PROBE = """
import time
from jupyter_client.manager import start_new_kernel
t0 = time.perf_counter()
km, kc = start_new_kernel(kernel_name="python3")
t1 = time.perf_counter()
kc.execute_interactive("import torch", timeout=120)
t2 = time.perf_counter()
kc.execute_interactive("import amp_lesson.accumulation, amp_lesson.plotting", timeout=120)
t3 = time.perf_counter()
kc.stop_channels()
km.shutdown_kernel(now=True)
print(round(t1 - t0, 2), round(t2 - t1, 2), round(t3 - t2, 2))
"""


FORK_PROBE = """
import time
from jupyter_client.manager import start_new_kernel
from amp_book.kernels import KernelServer
server = KernelServer()
server.open()
t0 = time.perf_counter()
km, kc = start_new_kernel(kernel_name="python3")
t1 = time.perf_counter()
kc.stop_channels()
km.shutdown_kernel(now=True)
time.sleep(8)  # the server imports the rest while it waits, as during a build
t2 = time.perf_counter()
km, kc = start_new_kernel(kernel_name="python3")
t3 = time.perf_counter()
kc.execute_interactive("import torch, amp_lesson.accumulation, amp_lesson.plotting", timeout=120)
t4 = time.perf_counter()
kc.stop_channels()
km.shutdown_kernel(now=True)
server.close()
print(round(t1 - t0, 2), round(t3 - t2, 2), round(t4 - t3, 2))
"""


def startup_costs(env: dict[str, str]) -> dict[str, float]:
    """What every executed page pays before its first cell does any work.

    A kernel started from nothing (``kernel_*``), and one forked from the
    build's kernel server (``forked_*``, :mod:`amp_book.kernels`),
    after the server's own start with the first kernel.
    """
    wall, _cpu = timed([sys.executable, "-c", "import torch"], env)

    def probe(code: str) -> list[float]:
        run = [sys.executable, "-c", code]
        out = subprocess.run(run, check=True, capture_output=True, text=True, env=env, cwd=ROOT)
        return [float(x) for x in out.stdout.split()]

    start, torch_in_kernel, package = probe(KERNEL_PROBE)
    server_start, forked_start, forked_imports = probe(FORK_PROBE)
    return {
        "import_torch_s": round(wall, 2),
        "kernel_start_s": start,
        "kernel_import_torch_s": torch_in_kernel,
        "kernel_import_amp_lesson_s": package,
        "server_and_first_kernel_start_s": server_start,
        "forked_kernel_start_s": forked_start,
        "forked_kernel_imports_s": forked_imports,
    }


def _router(base: str, local: set[str], outside: list[str]):  # type: ignore[no-untyped-def]
    """A Playwright route handler: serve the site's own requests, block and count the rest."""

    def route(r):  # type: ignore[no-untyped-def]
        url = r.request.url
        if url.startswith(base):
            local.add(url.split("?")[0].split("#")[0])
            r.continue_()
        elif url.startswith(("data:", "blob:")):
            r.continue_()
        else:
            outside.append(url)
            r.abort()

    return route


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def page_weights(html_dir: Path, pages: list[str]) -> dict[str, dict[str, int]]:
    """Load each page in a fresh Chromium context; sum what it fetched, gzipped, by kind."""
    from ensure_chromium import find
    from playwright.sync_api import sync_playwright

    handler = functools.partial(_Quiet, directory=str(html_dir))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    results: dict[str, dict[str, int]] = {}
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=find(),
                args=[
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-background-networking",
                    "--disable-component-update",
                ],
            )
            for page in pages:
                local: set[str] = set()
                outside: list[str] = []
                context = browser.new_context(viewport={"width": 1280, "height": 900})
                pg = context.new_page()

                pg.route("**/*", _router(base, local, outside))
                pg.goto(base + page + ".html", wait_until="networkidle")
                context.close()
                weight = dict.fromkeys(
                    ("html", "css", "js", "fonts", "images", "other", "total"), 0
                )
                raw = 0
                for url in local:
                    path = html_dir / url[len(base) :]
                    if not path.is_file():
                        continue
                    data = path.read_bytes()
                    size = len(gzip.compress(data, 6))
                    weight[KINDS.get(path.suffix.lower(), "other")] += size
                    weight["total"] += size
                    raw += len(data)
                weight.update(requests=len(local), bytes=raw, outside_requests=len(outside))
                results[page] = weight
            browser.close()
    finally:
        server.shutdown()
    return results


def _built_pages(html_dir: Path) -> list[str]:
    skip = {"genindex", "search"}
    return sorted(
        p.relative_to(html_dir).with_suffix("").as_posix()
        for p in html_dir.rglob("*.html")
        if p.stem not in skip and "_static" not in p.parts and "_sources" not in p.parts
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--page", default="chapter/formats", help="page to edit")
    parser.add_argument(
        "--weigh", nargs="+", default=["all"], help="pages to weigh ('all', or names)"
    )
    parser.add_argument("--jobs", default="auto", help="sphinx-build -j value (default auto)")
    parser.add_argument(
        "--module", default="fp8", help="module of amp_lesson to edit (default fp8)"
    )
    parser.add_argument(
        "--compare-stock",
        action="store_true",
        help="also time a cold build with stock kernels (-D amp_lesson_fork_kernels=0)",
    )
    parser.add_argument(
        "--edition",
        action="store_true",
        help="then store the scratch build as an edition of this CPU and time the builds "
        "that render it beside the live book: the first, a no-change one, a one-page edit",
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--root", type=Path, default=ROOT, help="checkout whose docs/src to build")
    parser.add_argument(
        "--write-costs",
        action="store_true",
        help="write the cold build's per-page times to docs/_page_costs.json (the extension "
        "schedules parallel execution by them)",
    )
    return parser


def main() -> int:
    parser = _parser()
    args = parser.parse_args()
    global ADOPTS_ORPHANS
    ADOPTS_ORPHANS = _adopt_orphans()
    from ensure_chromium import ENV_VAR, find

    if find() is None:  # before the builds: the page weights need a browser
        parser.error(
            f"no Chromium to weigh the pages with: install Debian's chromium "
            f"(python tools/ensure_chromium.py does, as root), or set {ENV_VAR}"
        )

    root = args.root.resolve()
    scratch = Path(tempfile.mkdtemp(prefix="amp-bench-"))
    env = own_caches(dict(os.environ), scratch / "caches" / "forked")
    if root != ROOT:
        env["PYTHONPATH"] = os.pathsep.join([str(root / "src"), env.get("PYTHONPATH", "")])
    results: dict[str, object] = {"jobs": args.jobs, "root": str(root), "cpus": os.cpu_count()}
    try:
        src = scratch / "docs"
        shutil.copytree(root / "docs", src, ignore=shutil.ignore_patterns("_build"))
        # Pages include the package's source (literalinclude ../src/...); the module edit
        # edits a copy of it, which the builds import first.
        shutil.copytree(root / "src", scratch / "src", ignore=shutil.ignore_patterns("__pycache__"))
        env["PYTHONPATH"] = os.pathsep.join([str(scratch / "src"), env.get("PYTHONPATH", "")])
        module_src = scratch / "src" / "amp_lesson" / f"{args.module.replace('.', '/')}.py"
        if not module_src.is_file():
            parser.error(f"--module {args.module!r}: no such module in src/amp_lesson")
        out = scratch / "_build" / "html"
        page_src = src / f"{args.page}.md"
        if not page_src.is_file():
            parser.error(f"--page {args.page!r}: no such page in docs/")
        paths = {"src": src, "out": out, "page": page_src, "module": module_src}
        measure(args, root, scratch, paths, env, results)
        results["load_avg_after"] = round(os.getloadavg()[0], 1)
        pages = _built_pages(out) if args.weigh == ["all"] else args.weigh
        results["page_weight"] = page_weights(out, pages)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    report(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


def measure(
    args: argparse.Namespace, root: Path, scratch: Path, paths: dict[str, Path],
    env: dict[str, str], results: dict[str, object],
) -> None:  # fmt: skip
    """Every build and timing of the run, in order, into ``results`` (written out as it goes
    where ``--json`` asks)."""
    src, out, page_src, module_src = (paths[k] for k in ("src", "out", "page", "module"))
    results["load_avg_before"] = round(os.getloadavg()[0], 1)
    save = (lambda: args.json.write_text(json.dumps(results, indent=2))) if args.json else None
    results["cold"] = build(src, out, args.jobs, env)
    # The floor: every CPU second of the build spread over the cores, none idle.
    floor = results["cold"]["cpu"] / (os.cpu_count() or 1)
    results["cold"]["floor"] = round(floor, 1)
    results["cold"]["over_floor"] = round(results["cold"]["wall"] / floor, 2)
    results["per_page_exec_s"] = exec_times(out)
    if args.write_costs:
        costs = dict(sorted(results["per_page_exec_s"].items()))
        (ROOT / "docs" / "_page_costs.json").write_text(json.dumps(costs, indent=1) + "\n")
    results["no_change"] = build(src, out, args.jobs, env)
    if save:
        save()
    # A prose edit re-reads the page and serves its outputs from the cache; a
    # cell edit re-executes it. The second is the one an author waits for.
    page_src.write_text(page_src.read_text() + "\nOne more sentence for the benchmark.\n")
    results["one_page_prose_edit"] = build(src, out, args.jobs, env)
    page_src.write_text(page_src.read_text() + "\n```{code-cell} ipython3\n1 + 1\n```\n")
    results["one_page_edit"] = build(src, out, args.jobs, env)
    if save:
        save()
    since = time.time()
    module_src.write_text(module_src.read_text() + "\n# A comment for the benchmark.\n")
    results["one_module_edit"] = build(src, out, args.jobs, env)
    results["one_module_edit"]["pages_run"] = executed_since(out, since)
    results["module"] = args.module
    if save:
        save()
    results["reread_all_from_cache"] = build(src, out, args.jobs, env, "-E")
    if save:
        save()
    results["pdf"] = time_pdf(out)
    if save:
        save()
    results["startup"] = startup_costs(env)
    if save:
        save()
    results["preview"] = time_preview(src, out, page_src, env)
    if save:
        save()
    if args.edition:
        results["edition"] = time_edition(src, out, page_src, args.jobs, env)
        if save:
            save()
    if args.compare_stock:
        stock_src = scratch / "stock" / "docs"
        shutil.copytree(root / "docs", stock_src, ignore=shutil.ignore_patterns("_build"))
        (scratch / "stock" / "src").symlink_to(scratch / "src", target_is_directory=True)
        stock_out = scratch / "stock" / "_build" / "html"
        stock_env = own_caches(env, scratch / "caches" / "stock")  # cold: nothing shared
        stock = build(stock_src, stock_out, args.jobs, stock_env, "-D", "amp_lesson_fork_kernels=0")
        results["cold_stock_kernels"] = stock
        results["cold_ratio_stock_over_forked"] = {
            k: round(stock[k] / results["cold"][k], 2) for k in ("wall", "cpu")
        }
        if save:
            save()


def time_preview(src: Path, out: Path, page_src: Path, env: dict[str, str]) -> dict[str, object]:
    """The author's loop in the live preview (``amp_book.preview``, as ``nox -s docs --
    --serve`` runs it): from a save to the browser told to reload (the preview's websocket
    says "refresh" once the rebuild has finished), for a sentence added, a save that changed
    nothing and a cell added; each edited page checked to be served with the edit."""
    import urllib.request

    from build_book import SPHINX_OPTS
    from websockets.sync.client import connect

    from amp_book.preview import serving

    results: dict[str, object] = {}
    page = page_src.relative_to(src).with_suffix(".html").as_posix()
    start = time.perf_counter()
    options = [*SPHINX_OPTS, "-q"]
    with serving(src, out, options, env, out.parent / "preview.log", ROOT) as (base, _):
        results["start_s"] = round(time.perf_counter() - start, 1)
        with connect(base.replace("http", "ws", 1) + "/websocket-reload") as ws:
            for name, edit, marker in (
                ("one_sentence_s", "\nA sentence for the preview.\n", "A sentence for the preview."),
                ("no_change_s", "", None),
                # a cell no cache holds: the page runs again
                ("one_cell_s", f"\n```{{code-cell}} ipython3\nprint('preview' + '{os.getpid()}')\n```\n",
                 f"preview{os.getpid()}"),
            ):  # fmt: skip
                time.sleep(1.0)  # the watcher settles
                begin = time.perf_counter()
                page_src.write_text(page_src.read_text() + edit)
                while ws.recv(timeout=300) != "refresh":
                    pass
                results[name] = round(time.perf_counter() - begin, 2)
                if marker is not None:
                    served = urllib.request.urlopen(f"{base}/{page}").read().decode()
                    if marker not in served:
                        raise RuntimeError(f"{name}: the page served lacks {marker!r}")
    return results


def time_edition(
    src: Path, out: Path, page_src: Path, jobs: str, env: dict[str, str]
) -> dict[str, object]:
    """Store the build in ``out`` as an edition of this CPU (``src/_editions``), then time
    the builds that render it beside the live book (see ``amp_book.edition``)."""
    import runpy

    from amp_book.edition import record, record_provenance
    from amp_book.workdirs import executed_folder

    refs = runpy.run_path(str(src / "conf.py")).get("amp_lesson_reference_pages", [])
    # A recording keeps what each page ran: a build that notes it (its own cache, so every
    # page runs again, the trace function on).
    noted = build(src, out, jobs, {**env, "AMP_LESSON_NOTE_RUNS": "1"})
    # the lesson the scratch builds ran: the copy beside the sources
    lesson = src.parent / "src" / "amp_lesson"
    edition = record(
        src, executed_folder(out), src / "_editions", record_provenance("cpu"), refs, lesson
    )
    stored = sum(p.stat().st_size for p in edition.folder.rglob("*") if p.is_file())
    site = out / "editions" / edition.slug
    first = build(src, out, jobs, env)  # every live page written again, with its switch
    no_change = build(src, out, jobs, env)
    page_src.write_text(page_src.read_text() + "\nA sentence after the recording.\n")
    edit = build(src, out, jobs, env)  # the page re-read; its recording stays on it
    return {
        "pages": len(edition.pages),
        "stored_kib": round(stored / 1024),
        "site_mib": round(sum(p.stat().st_size for p in site.rglob("*") if p.is_file()) / 2**20, 1),
        "noted_build": noted,
        "first_build": first,
        "no_change": no_change,
        "one_page_prose_edit": edit,
        "wave": wave(src, out, edition, jobs, env),
    }


WAVE_FUNCTION = ("scaler", "max_safe_scale")
"""The function the wave edits: three pages call it, and no other code of the lesson."""


def wave(
    src: Path, out: Path, edition: object, jobs: str, env: dict[str, str]
) -> dict[str, object]:
    """A day's edits at once: a sentence added to every page, a docstring edited in every
    module, and one function (:data:`WAVE_FUNCTION`) edited; then which recorded pages open
    on the recording, against those whose cells call the function (known before the build)."""
    import ast
    import re

    from amp_book import pages

    module, function = WAVE_FUNCTION
    calls = re.compile(rf"\b{function}\(")
    known = set()
    for page in sorted(src.rglob("*.md")):
        rel = page.relative_to(src)
        if any(part.startswith(("_", ".")) for part in rel.parts):
            continue
        if any(calls.search(c.source) for c in pages.read_page(page).code_cells):
            known.add(rel.with_suffix("").as_posix())
        page.write_text(page.read_text() + "\nA sentence added in the wave.\n")
    package = src.parent / "src" / "amp_lesson"
    for path in sorted(package.rglob("*.py")):
        text = path.read_text()
        tree = ast.parse(text)
        doc = tree.body[0] if tree.body and isinstance(tree.body[0], ast.Expr) else None
        lines = text.splitlines(keepends=True)
        if doc is not None and isinstance(doc.value, ast.Constant):
            # its first line, the summary, says a little more
            first = doc.lineno - 1
            if doc.end_lineno == doc.lineno:  # """One line."""
                head, quotes, tail = lines[first].rpartition('"""')
                lines[first] = f"{head} Edited in the wave.{quotes}{tail}"
            else:
                lines[first] = lines[first].rstrip("\n") + " Edited in the wave.\n"
        else:
            lines.insert(0, '"""Edited in the wave."""\n')
        if path.name == f"{module}.py":
            found = next(n for n in tree.body if getattr(n, "name", "") == function)
            first = found.body[1] if ast.get_docstring(found) else found.body[0]
            indent = " " * first.col_offset
            lines.insert(first.lineno - 1 + (doc is None), f"{indent}pass  # edited in the wave\n")
        path.write_text("".join(lines))
    timing = build(src, out, jobs, env)
    state = json.loads((workdirs.editions_folder(out) / edition.slug / "state.json").read_text())
    recorded = {d for d, p in state["pages"].items() if d in edition.pages}
    current = sorted(d for d in recorded if state["pages"][d]["state"] == "current")
    fell_back = {d: state["pages"][d]["note"] for d in recorded if d not in current}
    return {
        **timing,
        "function": f"{module}.{function}",
        "recorded": len(recorded),
        "current": len(current),
        "fell_back": fell_back,
        "expected_to_fall_back": sorted(known),
        "as_expected": set(fell_back) == known and len(current) == len(recorded) - len(known),
    }


def report(results: dict) -> None:  # type: ignore[type-arg]
    print(f"load average before/after: {results['load_avg_before']} / {results['load_avg_after']}")
    print(f"{'build':<24}{'wall s':>8}{'CPU s':>8}{'target':>8}")
    for key in (
        "cold",
        "no_change",
        "one_page_prose_edit",
        "one_page_edit",
        "one_module_edit",
        "reread_all_from_cache",
        "cold_stock_kernels",
    ):
        if key not in results:
            continue
        target = TARGETS.get(f"{key}_s", "")
        print(f"{key:<24}{results[key]['wall']:>8}{results[key]['cpu']:>8}{target!s:>8}")
    cold = results["cold"]
    print(
        f"cold build over its floor (CPU s / {results['cpus']} cores = {cold['floor']} s): "
        f"{cold['over_floor']} (target <= {TARGETS['cold_over_floor']})"
    )
    preview = results.get("preview")
    if preview:
        print(f"live preview (started in {preview['start_s']} s), save to reload:")
        for key in ("one_sentence", "no_change", "one_cell"):
            target = TARGETS[f"preview_{key}_s"]
            secs = preview[f"{key}_s"]
            verdict = "met" if secs <= target else "MISSED"
            print(f"  {key:<22}{secs:>8}{'':>8}{target:>8}  {verdict}")
    edition = results.get("edition")
    if edition:
        for key in ("noted_build", "first_build", "no_change", "one_page_prose_edit"):
            name = f"edition: {key}"
            print(f"{name:<24}{edition[key]['wall']:>8}{edition[key]['cpu']:>8}{'':>8}")
        print(
            f"edition: {edition['pages']} pages stored in {edition['stored_kib']} KiB, "
            f"{edition['site_mib']} MiB in the site"
        )
        w = edition["wave"]
        print(f"{'edition: wave':<24}{w['wall']:>8}{w['cpu']:>8}{'':>8}")
        print(
            f"edition: after the wave ({w['function']} edited), {w['current']} of "
            f"{w['recorded']} recorded pages open on the recording; fell back: "
            + "; ".join(f"{d} ({why})" for d, why in sorted(w["fell_back"].items()))
            + f" ({'as' if w['as_expected'] else 'NOT as'} expected: "
            + ", ".join(w["expected_to_fall_back"])
            + ")"
        )
    _report_the_rest(results)


def _report_the_rest(results: dict) -> None:  # type: ignore[type-arg]
    """The PDF, the module edit, the start-up costs, the pages' times and weights."""
    pdf = results.get("pdf")
    if pdf and pdf.get("wall") is not None:
        print(
            f"{'pdf (print.html, Chromium)':<24}{pdf['wall']:>8}{'':>8}{'':>8}  "
            f"{pdf['pages']} pages, {pdf['bytes'] / 1e6:.1f} MB"
        )
    elif pdf:
        print(f"pdf: not printed ({pdf['note']})")
    print(
        f"one-module edit ({results['module']}): "
        f"{len(results['one_module_edit']['pages_run'])} page(s) ran again: "
        + ", ".join(results["one_module_edit"]["pages_run"])
    )
    if "cold_ratio_stock_over_forked" in results:
        ratio = results["cold_ratio_stock_over_forked"]
        print(
            f"cold build, stock kernels / forked kernels: {ratio['wall']} wall, {ratio['cpu']} CPU"
        )
    print("start-up of an executed page:")
    for key, secs in results["startup"].items():
        print(f"  {key:<30}{secs:>6.2f} s")
    print("execution time per page (cold build), slowest first:")
    for doc, secs in results["per_page_exec_s"].items():
        print(f"  {doc:<44}{secs:>6.1f} s")
    print("first load, KiB gzipped (target <= 350 total, 0 outside requests):")
    cols = ("html", "css", "js", "fonts", "images", "other", "total")
    print(f"  {'page':<40}" + "".join(f"{c:>8}" for c in cols) + f"{'reqs':>6}{'outside':>8}")
    for page, w in results["page_weight"].items():
        print(
            f"  {page:<40}"
            + "".join(f"{w[c] / 1024:>8.0f}" for c in cols)
            + f"{w['requests']:>6}{w['outside_requests']:>8}"
        )


if __name__ == "__main__":
    sys.exit(main())
