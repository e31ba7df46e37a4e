"""Helpers shared by tests: paths, a sphinx-build runner and an in-process Sphinx app."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from build_book import DOCS, HTML, ROOT, book_command  # the one place the options are set

__all__ = [
    "DOCS",
    "HTML",
    "ROOT",
    "BadPagesBuild",
    "build_bad_pages",
    "build_in_process",
    "built_pages",
    "built_soup",
    "examples",
    "mini_book",
    "one_step_bitwise",
    "processes_tagged",
    "recording_page",
    "sphinx_build",
]


EXAMPLE_SHARE = 1.0
"""Share of each property test's examples this run tries (:func:`examples`): all of them in
the whole suite; ``conftest.py`` sets a tenth for the fast tier (``-m fast``)."""


def examples(budget: int) -> Any:
    """Hypothesis settings for a property test whose whole-suite budget is ``budget`` examples.

    The fast tier tries a tenth of them (at least ten): a quick pass an author runs on every
    edit, where the whole suite, on CI, tries them all.
    """
    from hypothesis import settings

    return settings(max_examples=max(10, round(budget * EXAMPLE_SHARE)), deadline=None)


IN_FAST_TEST = False
"""Set by ``conftest.py`` for each test: whether it is in the fast tier (``-m fast``)."""


def sphinx_build(
    src: Path,
    out: Path,
    *extra: str,
    env: dict[str, str] | None = None,
    check: bool = True,
    pdf: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Build the book in ``src`` as the docs session does; return the finished process.

    The build prints the book's PDF only with ``pdf=True`` (as ``nox -s docs`` does
    where Chromium is at hand): the tests' many small books need none.

    Refused in a test of the fast tier: a test that builds asks for the ``sphinx``
    fixture (or is marked ``book``), so that it runs with the slow tests.
    """
    if IN_FAST_TEST:
        raise RuntimeError(
            "a fast test builds a book: ask for the `sphinx` fixture, or mark the test "
            "`book`, so that it runs with the slow tests"
        )
    if not pdf:  # through conf.py, so that a book without the extension takes it too
        env = {**(os.environ if env is None else env), "AMP_LESSON_PDF": "no"}
    cmd = book_command(src, out, *extra)  # the Sphinx build, then its stored editions
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, cwd=ROOT)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"sphinx-build failed ({proc.returncode}):\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}"
        )
    return proc


@dataclass
class InProcessBuild:
    """What :func:`build_in_process` gives back: as a finished ``sphinx-build -W``, and its folder."""

    returncode: int  # 0: built with no warning; 1: warnings (-W fails); 2: an error stopped it
    stdout: str
    stderr: str
    outdir: Path


def build_in_process(
    src: Path,
    out: Path,
    extensions: Sequence[str],
    *,
    parallel: int = 0,
    check: bool = True,
    **conf: Any,
) -> InProcessBuild:
    """Build the book in ``src`` in this process (``sphinx.testing``), loading only ``extensions``.

    The extensions loaded alone are the point: each directive extension of the book registers
    on its app and changes nothing else, so a test runs it in a few hundred milliseconds with
    the least configuration (``conf`` adds settings; ``myst_enable_extensions`` is
    ``["colon_fence"]`` unless given). ``src`` needs a ``conf.py`` (an empty one will do).
    Writes to ``out`` (HTML in ``out/html``). Warnings are collected, every one (as
    ``sphinx-build -W`` reports them when it keeps going); with ``check`` any warning or error fails the test.
    """
    from sphinx.errors import SphinxError
    from sphinx.testing.util import SphinxTestApp
    from sphinx.util.console import strip_colors

    status, warning = io.StringIO(), io.StringIO()
    overrides = {
        "extensions": list(extensions),
        "myst_enable_extensions": ["colon_fence"],
        # A dict of its own: Sphinx 9.0's default is one dict shared by every app of the
        # process, into which each app merges its extensions' suffixes (MyST-NB's ".md" after
        # myst-parser's would find "markdown" there and fail: "Source parser ... not registered").
        "source_suffix": {".rst": "restructuredtext"},
    }
    app = SphinxTestApp(
        "html",
        srcdir=src,
        builddir=out,
        confoverrides={**overrides, **conf},
        status=status,
        warning=warning,
        parallel=parallel,
    )
    code = 0
    try:
        app.build()
    except SphinxError as error:
        warning.write(f"{type(error).__name__}: {error}\n")
        code = 2
    finally:
        app.cleanup()
    warnings = strip_colors(warning.getvalue())
    if code == 0 and warnings.strip():
        code = 1
    build = InProcessBuild(code, strip_colors(status.getvalue()), warnings, Path(app.outdir))
    if check and code != 0:
        raise AssertionError(f"the in-process build failed ({code}):\n{warnings[-6000:]}")
    return build


@dataclass
class BadPagesBuild:
    """One sphinx-build of a book with a bad page per case (see :func:`build_bad_pages`)."""

    proc: subprocess.CompletedProcess[str] | InProcessBuild
    lines: dict[str, list[str]]  # per case, the log lines that name its page

    def assert_warned(self, case: str, *texts: str) -> None:
        """The build failed, and one line naming the case's page holds every one of ``texts``."""
        log = self.proc.stdout + self.proc.stderr
        assert self.proc.returncode != 0, log[-3000:]
        found = self.lines[case]
        assert any(all(t in line for t in texts) for line in found), found or log[-3000:]


def build_bad_pages(
    src: Path, out: Path, bodies: dict[str, str], extensions: Sequence[str] | None = None
) -> BadPagesBuild:
    """Add one page ``bad-<key>.md`` per body to the book in ``src`` and build it once.

    One build reports every page's problems (the options keep going past the
    first), where a build per case would start Sphinx as many times. With
    ``extensions``, in this process with those alone (:func:`build_in_process`).
    """
    for key, body in bodies.items():
        (src / f"bad-{key}.md").write_text("# Bad\n\n" + body, encoding="utf-8")
    index = src / "index.md"
    entries = "".join(f"bad-{key}\n" for key in bodies)
    toctree = index.read_text(encoding="utf-8").replace(
        "```{toctree}\n", "```{toctree}\n" + entries
    )
    index.write_text(toctree, encoding="utf-8")
    if extensions is None:
        proc: subprocess.CompletedProcess[str] | InProcessBuild = sphinx_build(
            src, out, check=False
        )
    else:
        proc = build_in_process(src, out, extensions, check=False)
    lines = (proc.stdout + proc.stderr).splitlines()
    return BadPagesBuild(
        proc, {key: [ln for ln in lines if f"bad-{key}.md:" in ln] for key in bodies}
    )


FRONT_MATTER = """\
---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---
"""


CONF_FILES = ("conf.py", "references.bib")
CONF_FOLDERS = ("_inventories",)
"""What the book's ``conf.py`` reads beside itself: a book built with it needs them too."""


def copy_conf(src: Path) -> None:
    """Put the real book's ``conf.py``, and the files it reads, into the book folder ``src``."""
    for name in CONF_FILES:
        shutil.copy(DOCS / name, src / name)
    for name in CONF_FOLDERS:
        shutil.copytree(DOCS / name, src / name)


def mini_book(tmp: Path, body: str, front_matter: str = FRONT_MATTER) -> Path:
    """A one-page book in ``tmp/docs`` with the real book's ``conf.py``; return its folder."""
    src = tmp / "docs"
    src.mkdir()
    copy_conf(src)
    for folder in ("_data", "_static", "_templates"):
        (src / folder).mkdir()
    (src / "index.md").write_text("# Mini\n\n```{toctree}\npage\n```\n")
    (src / "page.md").write_text(front_matter + "\n# Page\n\n" + body)
    return src


def add_extension(src: Path, name: str, source: str) -> None:
    """Load the Sphinx extension ``source`` in the mini book ``src``: module ``name``, written
    beside its ``conf.py`` (which imports ``os``)."""
    (src / f"{name}.py").write_text(source)
    conf = src / "conf.py"
    conf.write_text(
        conf.read_text()
        + "\nimport sys as _sys\n_sys.path.insert(0, os.path.dirname(__file__))\n"
        + f"extensions.append({name!r})\n"
    )


def recording_page(browser: Any, site_url: str, **context_options: Any) -> Any:
    """A page in a new browser context that records what a test must not see.

    ``page.console_errors`` collects console errors and uncaught exceptions;
    ``page.outside_requests`` collects every request not served by ``site_url``.
    None of them leaves the machine: the session's Chromium resolves no host name but
    127.0.0.1 (``conftest.CHROMIUM_ARGS``), so it fails where it starts. Listening costs
    nothing; routing every request through this process to judge it (as a ``page.route``
    handler does) made each page load take twice as long.
    Close it with ``page.context.close()``.
    """
    context = browser.new_context(**context_options)
    pg = context.new_page()
    pg.console_errors = []
    pg.outside_requests = []
    pg.on("console", lambda m: m.type == "error" and pg.console_errors.append(m.text))
    pg.on("pageerror", lambda e: pg.console_errors.append(str(e)))
    ours = (site_url + "/", "data:", "blob:")
    pg.on("request", lambda r: r.url.startswith(ours) or pg.outside_requests.append(r.url))
    return pg


EDITION_PREFIX = re.compile(r"^editions/[^/]+/")
"""A page's address in a stored edition (``editions/<slug>/``): the book opens a page a GPU
has run on that run, so a reader who follows links walks the edition's copies."""


def page_of(address: str) -> str:
    """The page an address shows, in whichever edition.

    >>> page_of("editions/nvidia-h200/chapter/recipe.html"), page_of("chapter/recipe.html")
    ('chapter/recipe.html', 'chapter/recipe.html')
    """
    return EDITION_PREFIX.sub("", address)


def any_edition(site_url: str, page: str) -> re.Pattern[str]:
    """The addresses of ``page`` on ``site_url``, live or in a stored edition (for
    ``wait_for_url``)."""
    return re.compile(rf"{re.escape(site_url)}/(editions/[^/]+/)?{re.escape(page)}(#.*)?$")


def live_pages(html: Path) -> list[str]:
    """:func:`built_pages` of the live site, a stored edition's pages left out."""
    return [p for p in built_pages(html) if not EDITION_PREFIX.match(p)]


_SOUPS: dict[tuple[Path, int, int], Any] = {}


def built_soup(page: Path) -> Any:
    """``page`` of a built site parsed with BeautifulSoup, once per file version in this
    process: several tests read every page of the whole book, and parsing them was seconds
    each time. Read it, never change it (another test may be reading the same tree)."""
    from bs4 import BeautifulSoup

    stat = page.stat()
    key = (page.resolve(), stat.st_mtime_ns, stat.st_size)
    if key not in _SOUPS:
        _SOUPS[key] = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")
    return _SOUPS[key]


def built_pages(html: Path) -> list[str]:
    """The book's pages in a built site, as paths relative to ``html`` (no index, search or
    print page)."""
    skip = {"genindex.html", "search.html", "print.html"}  # the book on one page: not a page
    return sorted(
        p.relative_to(html).as_posix()
        for p in html.rglob("*.html")
        if p.name not in skip
        and "_static" not in p.parts
        and "_sources" not in p.parts
        and not _forwards(p)
    )


def _forwards(page: Path) -> bool:
    """Whether ``page`` only forwards to another (a stored edition's entry for a section it
    leaves to the live book: ``amp_book.edition.render.forward_page``)."""
    return "editions" in page.parts and 'http-equiv="refresh"' in page.read_text(encoding="utf-8")


TAG_ENV = "AMP_LESSON_TEST_BUILD"
"""Environment variable a test sets to a tag of its own, to find its build's processes."""


def processes_tagged(tag: str) -> list[int]:
    """The running processes whose environment holds ``TAG_ENV=tag``: one build's, and no other's.

    Every process of a build inherits its environment (the kernel server and the kernels it
    forks too), so a tag finds them all without looking at any other build on the machine.
    """
    import os

    found = []
    needle = f"{TAG_ENV}={tag}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
                if state not in ("Z", "X"):
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def one_step_bitwise(dtype: Any) -> bool:
    """Whether one full-batch step and four accumulated micro-batches give bitwise equal weights
    in ``dtype``, as the accumulation page runs them (the outcome its sentence reports)."""
    from torch import nn

    from amp_lesson.accumulation import (
        compare_params,
        make_toy_model,
        make_toy_optimizer,
        make_toy_problem,
        train_accumulated,
        train_full_batch,
    )

    X, y = make_toy_problem(dtype=dtype)
    m1, m2 = make_toy_model(dtype=dtype), make_toy_model(dtype=dtype)
    loss_fn = nn.BCEWithLogitsLoss()
    full = train_full_batch(m1, make_toy_optimizer(m1), X, y, loss_fn)
    accumulated = train_accumulated(m2, make_toy_optimizer(m2), X, y, loss_fn, 4)
    return compare_params(full, accumulated).bitwise_equal


def build_one_page(
    tmp_path: Path, page: str, edit: Callable[[str], str] = lambda text: text
) -> subprocess.CompletedProcess[str]:
    """Build a one-page book holding ``page`` (say ``"chapter/autocast"``), edited by ``edit``.

    Without ``-W``: the page links to pages this one-page book does not have. A failing
    cell or a contradicted claim still fails it. No PDF, as :func:`sphinx_build`'s small
    books (printing it in Chromium took two thirds of such a build).
    """
    src = tmp_path / "docs"
    (src / page).parent.mkdir(parents=True)
    copy_conf(src)
    text = (DOCS / f"{page}.md").read_text(encoding="utf-8")
    (src / f"{page}.md").write_text(edit(text), encoding="utf-8")
    (src / "index.md").write_text(f"# Book\n\n```{{toctree}}\n{page}\n```\n", encoding="utf-8")
    cmd = [sys.executable, "-m", "sphinx", "-q", "-b", "html", str(src), str(tmp_path / "html")]
    env = {**os.environ, "AMP_LESSON_PDF": "no"}
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, check=False)
