"""Build the book: the one place that says how ``sphinx-build`` is called.

``nox -s docs``, the tests (``tests/helpers.py``), the build benchmark, CI and
Read the Docs (``.readthedocs.yaml``) all build through :data:`SPHINX_OPTS`,
so a build that passes in one passes in the others.

    python tools/build_book.py [--docs SRC] [OUTDIR] [-- extra sphinx-build options]

``OUTDIR`` defaults to ``docs/_build/html``; ``--docs`` builds another book
than ``docs/`` (the tests build small ones). Standard library only: Read the
Docs runs it in an environment with the lesson and the book's build (``./book``) and
nothing else.

The book's stored editions (a GPU's run of every page, ``docs/_editions/``) are
built after it, each a Sphinx build of its own: the book's build writes their
sources and a plan (:data:`EDITIONS_PLAN`), and :func:`build_editions` runs
it and copies each site into ``OUTDIR/editions/``.

A signal (Ctrl-C, SIGTERM, SIGHUP) is passed on to the build, which ends all
of its processes (``amp_book.shutdown``), and this script ends
when the build has; on Linux it also ends when its own parent does (nox, a
terminal that closes), so a build never goes on alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
HTML = DOCS / "_build" / "html"

SPHINX_OPTS: tuple[str, ...] = ("-W", "-n", "--keep-going", "-j", "auto", "-b", "html")
"""Any warning fails the build (``-W``, ``--keep-going`` to report them all),
every cross-reference must resolve (``-n``), and pages execute in parallel
kernels (``-j auto``)."""


RTD_MAX_JOBS = 4
"""``-j`` on Read the Docs, whose builders may have more cores than memory for a kernel per
core: a build holds 7 GB there. Each parallel reader runs a kernel. A cold build's peak, all
processes summed (``tools/peak_memory.py``), was 1.40 GiB at ``-j 2``, 2.00 GiB at ``-j 4``
and 2.57 GiB at ``-j 8`` on a 2-core machine (2026-12-05), half the budget
``tools/rtd_build.py`` holds it to at 4. Elsewhere ``auto``."""


def jobs(environ: Mapping[str, str] = os.environ) -> str:
    """The ``-j`` of a build: ``auto``, or at most :data:`RTD_MAX_JOBS` on Read the Docs.

    >>> jobs({}), jobs({"READTHEDOCS": "True"}) in ("1", "2", "3", "4")
    ('auto', True)
    """
    if environ.get("READTHEDOCS") != "True":
        return "auto"
    return str(max(1, min(os.cpu_count() or 1, RTD_MAX_JOBS)))


def sphinx_command(
    src: Path, out: Path, *extra: str, python: str | None = None, doctrees: Path | None = None
) -> list[str]:
    """The ``sphinx-build`` command line that builds ``src`` into ``out``.

    It runs ``python -m sphinx`` through ``tools/run_sphinx.py``, which ends the
    process without Python's teardown once Sphinx has finished. Sphinx's doctrees go
    beside the site, not into it (``-d``: ``doctrees``, by default
    ``amp_book.workdirs.doctrees_folder``), so a host that publishes ``out`` publishes no
    pickles.

    >>> cmd = sphinx_command(Path("docs"), Path("out"), "-q", python="python")
    >>> cmd[0], Path(cmd[1]).name, cmd[2:]
    ('python', 'run_sphinx.py', ['-W', '-n', '--keep-going', '-j', 'auto', '-b', 'html', '-d', 'out.work/doctrees', 'docs', 'out', '-q'])
    """
    from amp_book.workdirs import doctrees_folder

    runner = str(Path(__file__).resolve().with_name("run_sphinx.py"))
    where = ["-d", (doctrees or doctrees_folder(out)).as_posix()]
    options = [jobs() if option == "auto" else option for option in SPHINX_OPTS]
    return [python or sys.executable, runner, *options, *where, str(src), str(out), *extra]


def book_command(src: Path, out: Path, *extra: str, python: str | None = None) -> list[str]:
    """The command that builds the book in ``src`` into ``out`` as ``nox -s docs`` does.

    That is this script: the Sphinx build (:func:`sphinx_command`, with ``extra``), then the
    stored editions it planned (:func:`build_editions`).

    >>> cmd = book_command(Path("docs"), Path("out"), "-q", python="python")
    >>> cmd[0], Path(cmd[1]).name, cmd[2:]
    ('python', 'build_book.py', ['--docs', 'docs', 'out', '--', '-q'])
    """
    here = str(Path(__file__).resolve())
    return [python or sys.executable, here, "--docs", str(src), str(out), "--", *extra]


def main(argv: list[str]) -> int:
    """Build ``docs/`` into ``argv[0]`` (default ``docs/_build/html``); return sphinx's status."""
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    docs = DOCS
    if argv[:1] == ["--docs"] and len(argv) > 1:
        docs, argv = Path(argv[1]), argv[2:]
    if len(argv) > 1 or any(a.startswith("-") for a in argv):
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[0]) if argv else HTML
    # Sphinx runs from the repository's root: a relative path given here is the caller's.
    docs, out = docs.absolute(), out.absolute()
    env = callers_paths(os.environ)
    # The doctrees of a build from before they moved out of the site (sphinx_command's -d):
    # not this build's, and not to be published.
    shutil.rmtree(out / ".doctrees", ignore_errors=True)
    status = run_to_the_end(sphinx_command(docs, out, *extra), env=env)
    if status == 0:
        status = build_editions(out)
    if status == 0:
        print(f"The book is in {out / 'index.html'}")
    return status


PATH_VARIABLES = ("AMP_LESSON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR")
"""Environment variables holding a path, which a build reads from the repository's root."""


def callers_paths(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with each :data:`PATH_VARIABLES` value made absolute against this
    process's folder (the caller's), not the repository's root the build runs in.

    >>> callers_paths({"AMP_LESSON_CACHE_DIR": "cache", "HOME": "h"})["AMP_LESSON_CACHE_DIR"] == str(Path("cache").absolute())
    True
    """
    env = dict(environ)
    for name in PATH_VARIABLES:
        if env.get(name):
            env[name] = str(Path(env[name]).expanduser().absolute())
    return env


EDITIONS_PLAN = "plan.json"
"""In the output folder's editions work folder (``amp_book.workdirs.editions_folder``): the
stored editions' builds that the book's build planned (``amp_book.edition``), for
:func:`build_editions` to run once it has finished."""


def build_editions(out: Path) -> int:
    """Build each stored edition the build of ``out`` planned, and copy its site into ``out``.

    Each is a Sphinx build of its own (the options above, quiet, nothing executed), run only
    when something it depends on changed since its last build; its site is then copied to
    ``out/editions/<slug>/``. A failure names the edition and ends with Sphinx's status.
    """
    from amp_book.workdirs import editions_folder

    plan_file = editions_folder(out) / EDITIONS_PLAN
    if not plan_file.is_file():
        return 0
    for edition in json.loads(plan_file.read_text(encoding="utf-8"))["editions"]:
        stamp_file, html = Path(edition["stamp_file"]), Path(edition["html"])
        fresh = stamp_file.is_file() and stamp_file.read_text() == edition["stamp"]
        if not (fresh and (html / "index.html").is_file()):
            start = time.perf_counter()
            settings = [f"-D{name}={value}" for name, value in edition["settings"].items()]
            cmd = sphinx_command(Path(edition["src"]), html, "-q", "-c", edition["confdir"],
                                 *settings, doctrees=Path(edition["doctrees"]))  # fmt: skip
            status = run_to_the_end(cmd, env={**os.environ, "AMP_LESSON_PDF": "no"})
            if status != 0:
                print(f"The edition recorded on {edition['device']} ({edition['folder']}) "
                      f"did not build (status {status}).", file=sys.stderr)  # fmt: skip
                return status
            stamp_file.write_text(edition["stamp"])
            took = f"built in {time.perf_counter() - start:.1f} s"
        else:
            took = "unchanged"
        sync_tree(html, Path(edition["target"]), skip=edition["skip"])
        print(f"The edition recorded on {edition['device']}: {took}.")
    from amp_book.theme import MATH_FONT_OUT, write_icon_fonts, write_math_font

    # One maths font and one set of icon fonts for the live site and its editions: the
    # characters and icons of every page.
    write_math_font(Path(out))
    fonts = [MATH_FONT_OUT] + [f"fonts/{p.name}" for p in write_icon_fonts(Path(out))]
    for edition in json.loads(plan_file.read_text(encoding="utf-8"))["editions"]:
        share_static(Path(out), Path(edition["target"]), always=fonts)
        skip_forwards(Path(out), Path(edition["target"]))
    return 0


_FORWARD = re.compile(r'<meta http-equiv="refresh" content="0; url=([^"]+)">')
_HREF = re.compile(r'href="([^":#?]+\.html)(#[^"]*)?"')


def skip_forwards(out: Path, target: Path) -> int:
    """Point an edition's links to the pages it forwards to the live book (its sidebar's
    entries for the API reference and the authors' guide) at the live pages themselves;
    return how many links changed.

    >>> import tempfile
    >>> out = Path(tempfile.mkdtemp()); ed = out / "editions" / "gpu"; (ed / "api").mkdir(parents=True)
    >>> _ = (ed / "api" / "index.html").write_text('<meta http-equiv="refresh" content="0; url=../../../api/index.html">')
    >>> _ = (ed / "page.html").write_text('<a href="api/index.html#x">API</a> <a href="other.html">o</a>')
    >>> skip_forwards(out, ed), (ed / "page.html").read_text()
    (1, '<a href="../../api/index.html#x">API</a> <a href="other.html">o</a>')
    """
    import posixpath

    pages = sorted(target.rglob("*.html"))
    forwards = {}
    for page in pages:
        if match := _FORWARD.search(page.read_text(encoding="utf-8")):
            here = page.relative_to(out).parent.as_posix()
            forwards[page.relative_to(out).as_posix()] = posixpath.normpath(
                posixpath.join(here, match[1])
            )
    changed = 0
    for page in pages:
        here = page.relative_to(out).parent.as_posix()
        if page.relative_to(out).as_posix() in forwards:
            continue

        def to_live(match: re.Match[str], here: str = here) -> str:
            nonlocal changed
            linked = posixpath.normpath(posixpath.join(here, match[1]))
            if linked not in forwards:
                return match[0]
            changed += 1
            return f'href="{posixpath.relpath(forwards[linked], here)}{match[2] or ""}"'

        text = page.read_text(encoding="utf-8")
        rewritten = _HREF.sub(to_live, text)
        if rewritten != text:
            page.write_text(rewritten, encoding="utf-8")
    return changed


_STATIC_REF = re.compile(r'((?:src|href)=")((?:\.\./)*)_static/([^"?#]+)')


def share_static(out: Path, target: Path, always: Iterable[str] = ()) -> int:
    """Point an edition's pages at the live site's ``_static/`` files wherever they are the
    same, and drop the edition's copies; return how many files it shares.

    An edition built by this checkout's extension and theme has the same styles, scripts and
    fonts as the live site, under other addresses: a reader who opens a page on its GPU
    edition would load them all twice. ``always`` names files shared though their bytes
    differ (the maths font, subset for the live site and every edition together).

    >>> import tempfile
    >>> out = Path(tempfile.mkdtemp()); ed = out / "editions" / "gpu"
    >>> for root in (out, ed):
    ...     (root / "_static").mkdir(parents=True); (root / "p").mkdir()
    ...     _ = (root / "_static" / "a.css").write_text("a")
    >>> _ = (ed / "_static" / "b.js").write_text("only here")
    >>> _ = (ed / "p" / "x.html").write_text('<link href="../_static/a.css?v=1"><script src="../_static/b.js">')
    >>> share_static(out, ed)
    1
    >>> (ed / "p" / "x.html").read_text()
    '<link href="../../../_static/a.css?v=1"><script src="../_static/b.js">'
    >>> sorted(p.name for p in (ed / "_static").iterdir())
    ['b.js']
    """
    live, own = out / "_static", target / "_static"
    if not own.is_dir():
        return 0
    forced = set(always)
    shared = set()
    for path in own.rglob("*"):
        rel = path.relative_to(own).as_posix()
        there = live / rel
        if not (path.is_file() and there.is_file()):
            continue
        if rel in forced or there.read_bytes() == path.read_bytes():
            shared.add(rel)
    up = "../" * len(target.relative_to(out).parts)

    def to_live(match: re.Match[str]) -> str:
        if match[3] not in shared:
            return match[0]
        return f"{match[1]}{match[2]}{up}_static/{match[3]}"

    for page in target.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        rewritten = _STATIC_REF.sub(to_live, text)
        if rewritten != text:
            page.write_text(rewritten, encoding="utf-8")
    for rel in shared:
        (own / rel).unlink()
    for folder in sorted((p for p in own.rglob("*") if p.is_dir()), reverse=True):
        if not any(folder.iterdir()):
            folder.rmdir()
    return len(shared)


def sync_tree(source: Path, target: Path, skip: Iterable[str] = ()) -> None:
    """Make ``target`` a copy of ``source``: changed files copied, files gone removed.

    >>> import tempfile
    >>> a, b = (Path(tempfile.mkdtemp()) for _ in range(2))
    >>> _ = (a / "x.html").write_text("x"); _ = (a / "skip").mkdir(); _ = (b / "old").write_text("")
    >>> sync_tree(a, b, skip=["skip"])
    >>> sorted(p.name for p in b.iterdir())
    ['x.html']
    """
    skipped = set(skip)
    wanted = set()
    for path in sorted(source.rglob("*")):
        rel = path.relative_to(source)
        if skipped.intersection(rel.parts[:1]) or not path.is_file():
            continue
        wanted.add(rel)
        dest = target / rel
        stat = path.stat()
        if dest.is_file():
            have = dest.stat()
            if have.st_size == stat.st_size and have.st_mtime_ns == stat.st_mtime_ns:
                continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest)
    if target.is_dir():
        for path in sorted(target.rglob("*"), reverse=True):
            rel = path.relative_to(target)
            if path.is_file() and rel not in wanted:
                path.unlink()
            elif path.is_dir() and not any(path.iterdir()):
                path.rmdir()


SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
KILL_AFTER_S = 15.0
"""How long a build has to end after a signal was passed on, before it is killed."""


def _die_with_parent() -> None:
    """Receive SIGTERM when the parent ends (Linux's parent-death signal; elsewhere nothing)."""
    if sys.platform != "linux":
        return
    import ctypes

    parent = os.getppid()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent ended before the line above
        os.kill(os.getpid(), signal.SIGTERM)


def run_to_the_end(cmd: list[str], env: dict[str, str] | None = None) -> int:
    """Run ``cmd`` from the repository's root; pass signals on; return its exit status.

    A signal received is passed on, and the command has :data:`KILL_AFTER_S`
    to end before it is killed; this process then ends by the same signal.
    A command ended by signal N that this process did not receive (the
    out-of-memory killer, a ``kill`` of the build alone) gives 128 + N, as a
    shell reports it (``tests/test_build_signals.py``).
    """
    received: list[int] = []
    since: list[float] = []  # when the first signal arrived
    started: list[subprocess.Popen[bytes]] = []

    def pass_on(signum: int, frame: object) -> None:
        received.append(signum)
        since.append(time.monotonic())
        for proc in started:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signum)

    saved = {signum: signal.signal(signum, pass_on) for signum in SIGNALS}
    _die_with_parent()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env)
    started.append(proc)
    if received:  # a signal came before the build started
        proc.send_signal(received[0])
    try:
        while True:
            try:
                status = proc.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                if since and time.monotonic() - since[0] > KILL_AFTER_S:
                    proc.kill()
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
    if received:
        signal.signal(received[0], signal.SIG_DFL)
        os.kill(os.getpid(), received[0])
    return 128 - status if status < 0 else status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
