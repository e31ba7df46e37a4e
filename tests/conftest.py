"""Fixtures shared by the suite: the built book, a local server, a browser."""

from __future__ import annotations

import functools
import http.server
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import DOCS, HTML, recording_page, sphinx_build

SLOW_FIXTURES = {
    "built_book": "book",
    "site_url": "book",
    "sphinx": "book",
    "browser": "browser",
    "page": "browser",
    "make_page": "browser",
    "server_env": "kernels",
    "shared_server": "kernels",
}
"""Fixtures that build a book, drive a browser or start a kernel server, and the marker
each gives the tests that use it (directly or through another fixture)."""
SLOW_MARKERS = ("book", "browser", "notebooks", "kernels", "pages", "validate")


def pytest_configure(config: pytest.Config) -> None:
    """Under ``pytest -n N``, each worker's torch takes its share of the cores: N workers each
    with torch's default of one thread per core would spin against each other (the fast tier
    on two cores: 50 s with two threads a worker, 29 s with one, 39 s in one process).
    Processes a test starts (builds, kernels) keep torch's default. The fast tier tries a tenth
    of each property test's examples (``helpers.examples``)."""
    import helpers

    if (config.getoption("markexpr", "") or "").strip() == "fast":
        helpers.EXAMPLE_SHARE = 0.1  # the fast tier: a tenth of each property test's examples
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(workers)))


LONG_TESTS = (
    "test_every_page_in_one_visit_per_viewport",
    "test_the_whole_book_is_recorded_and_its_stored_edition_rendered",
    "test_flipping_an_outcome_changes_the_sentence_or_fails_the_build",
)
"""Single tests of a minute or more on two cores (``--durations``), started before the rest."""


def _start_order(item: pytest.Item) -> int:
    """When a test starts: a fresh environment's notebooks and the pages' runs (minutes, no
    book needed) first, then the longest tests of the built book, the other slow ones, the fast
    tier last (many short tests fill the workers' gaps)."""
    if item.get_closest_marker("notebooks") or item.get_closest_marker("pages"):
        return 0
    if getattr(item, "originalname", item.name) in LONG_TESTS:
        return 1
    return 3 if item.get_closest_marker("fast") else 2


def _dealt(items: list[pytest.Item], workers: int) -> list[pytest.Item]:
    """``items`` (longest first) ordered for xdist's ``--dist worksteal`` (``nox -s tests``).

    That scheduler gives each of the N workers one contiguous slice of the list to start with
    (the first ``len // N``, then ``len // (N - 1)`` of what is left, ...) and lets an idle
    worker take the tail of another's slice. So the long tests are dealt out in turn, each
    worker's slice beginning with its share of them, and the short ones fill the slices.
    """
    long = [item for item in items if _start_order(item) < 2]
    rest = iter([item for item in items if _start_order(item) >= 2])
    sizes, left = [], len(items)
    for worker in range(workers):
        sizes.append(left // (workers - worker))
        left -= sizes[-1]
    dealt = []
    for worker, size in enumerate(sizes):
        share = long[worker::workers]
        dealt += share + [next(rest) for _ in range(size - len(share))]
    return dealt


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test by the fixtures it uses; a test with no slow marker is ``fast``."""
    for item in items:
        for fixture in getattr(item, "fixturenames", ()):
            if fixture in SLOW_FIXTURES:
                item.add_marker(getattr(pytest.mark, SLOW_FIXTURES[fixture]))
        if not any(item.get_closest_marker(m) for m in SLOW_MARKERS):
            item.add_marker(pytest.mark.fast)
    # Longest first, so that under -n N no worker is left with a long test at the end while
    # the others idle (a stable sort: a module's tests of one kind stay together).
    items.sort(key=_start_order)
    workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
    if workers > 1:
        items[:] = _dealt(items, workers)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device; torch sees none")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A fast test that builds a book fails (see ``helpers.sphinx_build``), however it got there."""
    import helpers

    helpers.IN_FAST_TEST = item.get_closest_marker("fast") is not None


@pytest.fixture(scope="session")
def sphinx() -> Any:
    """``helpers.sphinx_build``: a test that builds a book asks for it (and is marked ``book``)."""
    return sphinx_build


@pytest.fixture(scope="session")
def built_book(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The book, built (incrementally, through the execution cache) into docs/_build/html,
    with its PDF where Chromium is at hand, as ``nox -s docs`` builds it.

    Built once per run: under ``pytest -n N`` the first worker to ask builds it while the
    others wait on a lock in the run's shared temporary folder, then use it.
    """
    # Its pages note what they run (amp_book.edition.ran), as a recording's do: the suite
    # records the whole book from it.
    env = {**os.environ, "AMP_LESSON_NOTE_RUNS": "1"}
    if "PYTEST_XDIST_WORKER" not in os.environ:
        sphinx_build(DOCS, HTML, env=env, pdf=True)
        return HTML
    from filelock import FileLock  # a dependency of torch

    shared = tmp_path_factory.getbasetemp().parent  # one folder per run, common to its workers
    built = shared / "book-built"
    with FileLock(shared / "book-built.lock"):
        if not built.exists():
            sphinx_build(DOCS, HTML, env=env, pdf=True)
            built.touch()
    return HTML


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    """A browser that leaves a page while it loads (a live page opening on its GPU edition,
    a test that moves on) closes connections mid-response: not an error of the site."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


@pytest.fixture(scope="session")
def site_url(built_book: Path) -> Iterator[str]:
    """The built book served on 127.0.0.1 (a free port)."""
    handler = functools.partial(_QuietHandler, directory=str(built_book))
    server = _Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    # No host but the test server's: a page's request for anything else fails at once
    # (``helpers.recording_page`` records it), and nothing leaves the machine.
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
]


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    """Chromium driven by Playwright (skipped off CI when absent).

    Which Chromium: the one ``CHROMIUM_PATH`` names, see ``tools/ensure_chromium.py``.
    """
    from ensure_chromium import find

    path = find()
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("Chromium is missing on CI; .ci/run must install it")
        pytest.skip("no Chromium found (install Debian's chromium, or set CHROMIUM_PATH)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Any, site_url: str) -> Iterator[Any]:
    """A fresh page that records console errors and requests leaving 127.0.0.1.

    ``page.console_errors`` and ``page.outside_requests`` are lists the test
    can assert on.
    """
    pg = recording_page(browser, site_url, viewport={"width": 1280, "height": 900})
    try:
        yield pg
    finally:
        pg.context.close()


@pytest.fixture
def make_page(browser: Any, site_url: str) -> Iterator[Any]:
    """``make_page(**context_options)``: recording pages, closed after the test."""
    pages: list[Any] = []

    def _make(**context_options: Any) -> Any:
        pg = recording_page(browser, site_url, **context_options)
        pages.append(pg)
        return pg

    yield _make
    for pg in pages:
        pg.context.close()


MEASUREMENTS: list[tuple[str, str]] = []
"""What tests measured for a person to read (``report`` fixture), printed after the run."""


@pytest.fixture
def report(request: pytest.FixtureRequest) -> Any:
    """``report(what, value)``: a measurement to print in the run's summary, for figures a
    test records but does not limit. Kept in the test's properties, which reach the process
    that prints the summary from wherever the test ran (``pytest -n N`` included)."""

    def _report(what: str, value: str) -> None:
        request.node.user_properties.append((what, value))

    return _report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # a subtest's report carries its test's properties too: they are counted once, with it
    if report.when == "call" and not isinstance(report, pytest.SubtestReport):
        name = report.nodeid.rpartition("::")[2]
        MEASUREMENTS.extend((f"{name}: {what}", value) for what, value in report.user_properties)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if MEASUREMENTS:
        terminalreporter.section("measured (reported, not limited)")
        for what, value in MEASUREMENTS:
            terminalreporter.write_line(f"{what}: {value}")
