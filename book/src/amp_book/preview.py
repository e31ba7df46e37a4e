"""Live preview: the book rebuilt on every save, by a process that imported Sphinx once.

``nox -s docs -- --serve`` runs it::

    python -m amp_book.preview SRC OUT [--port N] [--host H] [--watch DIR ...] [-- sphinx options]

sphinx-autobuild (whose watcher, server and page reloading this uses) starts a new
``python -m sphinx`` for every rebuild, and each pays the imports again: Sphinx, MyST-NB, the
theme and the extensions, about two seconds of a typo fix here. This process imports them
once (:func:`warm_up`), and every rebuild runs in a process forked from it (sphinx-autobuild
forks one per change), which starts with them imported and ends with the rebuild, so nothing
of one build leaks into the next. The book's own packages (``amp_book``, ``amp_lesson``) are
not imported here: each rebuild imports them as they are on disk.

A rebuild writes only what the edit changed: the pages Sphinx finds outdated, no PDF
(``AMP_LESSON_PDF=no``), no stored edition (``AMP_LESSON_EDITIONS=""``); ``nox -s docs``
builds those. The benchmark (``tools/bench_build.py``) times a sentence, a saved file that
changed nothing and a cell edit, each until the served page shows it.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import hashlib
import importlib
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import subprocess

OWN_PACKAGES = ("amp_book", "amp_lesson")
"""Never imported ahead: a rebuild must see them as they are on disk."""

ALWAYS_WARM = (
    "sphinx.cmd.build",
    "sphinx.application",
    "sphinx.builders.html",
    "sphinx.ext.autodoc",
    "docutils.parsers.rst",
    "myst_parser.parsers.mdit",
    "myst_parser.sphinx_ext",
    "myst_nb.sphinx_ext",
    "nbformat",
    "nbclient",
    "jupyter_client",
    "jupyter_cache.cache.main",
    "sqlalchemy.orm",
    "IPython.display",
)
"""Imported ahead whatever the configuration names: what every build of the book imports."""

IMPORTS_SEEN = "preview-imports.txt"
"""In the build's work folder: the modules the last rebuild imported (the book's own left
out), which the next preview imports ahead too."""

IGNORED = (r"/__pycache__/", r"\.ipynb$", r"/\.jupyter_cache/", r"/_build/", r"~$", r"\.sw[px]$")
"""Changes that never rebuild (regular expressions on the path): byte code, notebooks and
caches the build writes, editors' backup and swap files."""

PREVIEW_ENV = {"AMP_LESSON_PDF": "no", "AMP_LESSON_EDITIONS": "", "AMP_LESSON_PREVIEW": "1"}
"""A preview's settings: no PDF, no stored edition (``nox -s docs`` builds both), and
``conf.py`` told it is previewed (``amp_lesson_preview``)."""


def configured_extensions(confdir: Path) -> list[str]:
    """The modules a book's ``conf.py`` names in ``extensions`` and ``html_theme``, read
    without running it; the book's own packages left out.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = (d / "conf.py").write_text(
    ...     "extensions = ['myst_nb', 'amp_book', 'sphinx.ext.mathjax']\\n"
    ...     "html_theme = 'sphinx_book_theme'\\n")
    >>> configured_extensions(d)
    ['myst_nb', 'sphinx.ext.mathjax', 'sphinx_book_theme']
    """
    tree = ast.parse((Path(confdir) / "conf.py").read_text(encoding="utf-8"))
    names: list[str] = []
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target = getattr(node.targets[0], "id", "")
        with contextlib.suppress(ValueError):
            value = ast.literal_eval(node.value)
            if target == "extensions" and isinstance(value, list):
                names += [v for v in value if isinstance(v, str)]
            elif target == "html_theme" and isinstance(value, str):
                names.append(value)
    return [n for n in names if n.split(".")[0] not in OWN_PACKAGES]


def warm_up(confdir: Path, seen: Path | None = None) -> list[str]:
    """Import what every rebuild of the book in ``confdir`` imports, and the modules a
    rebuild imported before (listed in ``seen``); return what failed to import (a rebuild
    that needs it reports it, as a plain build would)."""
    failed = []
    before = []
    if seen is not None and seen.is_file():
        before = seen.read_text(encoding="utf-8").split()
    for name in (*ALWAYS_WARM, *configured_extensions(confdir), *before):
        if name.split(".")[0] in OWN_PACKAGES or name in sys.modules:
            continue
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 (reported by the build that needs it)
            failed.append(name)
    leaked = sorted(m for m in sys.modules if m.split(".")[0] in OWN_PACKAGES)
    if leaked:  # a third-party module imported ours: rebuilds would run stale code
        raise RuntimeError(f"warming up imported the book's own modules: {', '.join(leaked)}")
    return failed


class WarmBuilder:
    """sphinx-autobuild's change callback: one Sphinx build, in the process it runs in.

    sphinx-autobuild calls it in a process forked from this one for every change (and
    :func:`main` for the first build); it builds with ``sphinx_args`` from ``root`` and
    reports how long the build took.
    """

    def __init__(
        self, sphinx_args: Sequence[str], root: Path, url: str, seen: Path | None = None
    ) -> None:
        self.sphinx_args = list(sphinx_args)
        self.root = Path(root)
        self.url = url
        self.seen = seen
        self.digests = None if seen is None else seen.with_name(DIGESTS)

    def _changed(self, paths: Sequence[Path]) -> bool:
        """Whether any of ``paths`` differs from what the last build that passed read (a
        save that changed nothing, a file touched, needs no rebuild)."""
        from amp_book.memo import read_json

        kept = read_json(self.digests)
        return any(kept.get(str(p)) != _digest(Path(p)) for p in paths)

    def _remember(self, paths: Sequence[Path]) -> None:
        if self.digests is None:
            return
        from amp_book.memo import read_json, write_json

        kept = read_json(self.digests)
        kept.update({str(p): _digest(Path(p)) for p in paths})
        with contextlib.suppress(OSError):
            write_json(self.digests, kept)

    def __call__(self, *, changed_paths: Sequence[Path] = ()) -> int:
        from sphinx.cmd.build import build_main

        if changed_paths:
            names = ", ".join(_short(p, self.root) for p in changed_paths[:5])
            if self.digests is not None and not self._changed(changed_paths):
                print(f"[preview] saved unchanged: {names}; nothing to rebuild", flush=True)
                return 0
            print(f"[preview] changed: {names}", flush=True)
        from amp_book.errors import report_own_errors

        report_own_errors()
        start = time.perf_counter()
        os.chdir(self.root)
        status = build_main(self.sphinx_args)
        took = time.perf_counter() - start
        if status == 0:
            print(f"[preview] rebuilt in {took:.1f} s; serving {self.url}", flush=True)
        else:
            print(
                f"[preview] the build failed (status {status}, {took:.1f} s); the pages served "
                "are those of the last build that passed, until the error above is fixed",
                flush=True,
            )
        if status == 0 and self.digests is not None:
            self._remember(changed_paths)
        if self.seen is not None:
            imported = sorted(m for m in sys.modules if _worth_warming(m))
            with contextlib.suppress(OSError):
                self.seen.write_text("\n".join(imported) + "\n", encoding="utf-8")
        sys.stdout.flush()
        sys.stderr.flush()
        return status


def _worth_warming(name: str) -> bool:
    """Whether a module a rebuild imported is one to import ahead: not the book's own, not
    ``__main__``, not one that a name with a dash or a private top level marks as odd."""
    top = name.split(".")[0]
    return not (top in OWN_PACKAGES or top.startswith("_") or name == "__main__" or "-" in name)


DIGESTS = "preview-digests.json"
"""In the build's work folder: the digest of each file a rebuild was started for, as the
build that passed read it."""


def _digest(path: Path) -> str | None:
    """The SHA-256 of the file ``path``; ``None`` where there is none (deleted, a folder)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _short(path: Path, root: Path) -> str:
    with contextlib.suppress(ValueError):
        return Path(path).relative_to(root).as_posix()
    return str(path)


def _parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    parser = argparse.ArgumentParser(prog="python -m amp_book.preview", description=__doc__)
    parser.add_argument("src", type=Path, help="the book's source folder (docs)")
    parser.add_argument("out", type=Path, help="the folder the HTML is built into and served from")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--watch", type=Path, action="append", default=[], help="another folder to watch"
    )
    return parser.parse_args(argv), extra


def make_app(builder: WarmBuilder, watch: Sequence[Path], ignore: Sequence[Path], out: Path) -> Any:
    """The Starlette app that serves ``out``, reloads the pages open in a browser after
    each rebuild, and rebuilds (``builder``) when a file under ``watch`` changes."""
    from sphinx_autobuild.filter import IgnoreFilter
    from sphinx_autobuild.middleware import JavascriptInjectorMiddleware
    from sphinx_autobuild.server import RebuildServer
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.routing import Mount, WebSocketRoute
    from starlette.staticfiles import StaticFiles

    ignored = IgnoreFilter([str(p) for p in ignore], IGNORED)
    watcher = RebuildServer(list(watch), ignored, change_callback=builder)
    return Starlette(
        routes=[
            WebSocketRoute("/websocket-reload", watcher, name="reload"),
            Mount("/", app=StaticFiles(directory=out, html=True), name="static"),
        ],
        middleware=[Middleware(JavascriptInjectorMiddleware, ws_url=builder.url.split("//")[1])],
        lifespan=watcher.lifespan,
    )


@contextlib.contextmanager
def serving(
    src: Path, out: Path, sphinx_options: Sequence[str], env: dict[str, str], log: Path,
    cwd: Path,
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:  # fmt: skip
    """Run the preview of ``src`` in a process of its own (its output in ``log``) until the
    block ends; give the address it serves on, once it answers, and the process.

    For the benchmark and the tests: ended as an author ends it (Ctrl-C to its process
    group), killed if it has not ended 30 s later. A preview that ends first is an error
    (``RuntimeError``, with the end of its log).
    """
    import signal
    import socket
    import subprocess
    import urllib.error
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cmd = [sys.executable, "-m", "amp_book.preview", str(src), str(out), "--port", str(port)]
    with open(log, "wb") as sink:
        server = subprocess.Popen(
            [*cmd, "--", *sphinx_options], cwd=cwd, env=env, stdout=sink,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        while True:  # the first build, then the server listens
            if server.poll() is not None:
                raise RuntimeError(f"the preview ended: {log.read_text(errors='replace')[-3000:]}")
            try:
                urllib.request.urlopen(base + "/").close()
                break
            except urllib.error.HTTPError:  # it answered
                break
            except OSError:
                time.sleep(0.1)
        yield base, server
    finally:
        os.killpg(server.pid, signal.SIGINT)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def main(argv: list[str] | None = None) -> int:
    """Build the book once, then serve it and rebuild it on every change until stopped."""
    args, sphinx_options = _parse(list(sys.argv[1:] if argv is None else argv))
    src, out = args.src.resolve(), args.out.resolve()
    if not (src / "conf.py").is_file():
        raise SystemExit(f"src: {src} holds no conf.py (the book's source folder is docs/)")
    from amp_book.workdirs import doctrees_folder, work_folder

    os.environ.update(PREVIEW_ENV)
    root = Path.cwd()
    # Warm before anything of ours is imported by this process's own code path (the
    # workdirs import above is the standard library only).
    for name in [m for m in sys.modules if m.split(".")[0] in OWN_PACKAGES]:
        del sys.modules[name]
    seen = work_folder(out) / IMPORTS_SEEN
    failed = warm_up(src, seen)
    if failed:
        print(f"[preview] not imported ahead: {', '.join(failed)}", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    url = f"http://{args.host}:{args.port}"
    sphinx_args = [*sphinx_options, "-d", str(doctrees_folder(out)), str(src), str(out)]
    builder = WarmBuilder(sphinx_args, root, url, seen)
    import multiprocessing

    # The first build, like every other, in a process of its own forked from this one.
    first = multiprocessing.get_context("fork").Process(target=builder)
    first.start()
    first.join()
    ignore = [out, work_folder(out), src / "_build"]
    watch = [src, *(p.resolve() for p in args.watch)]
    app = make_app(builder, watch, ignore, out)
    import uvicorn

    print(f"[preview] watching {', '.join(_short(p, root) for p in watch)}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
