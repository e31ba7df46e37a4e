"""The live preview (``amp_book.preview``): rebuilt on a save by a process that imported
Sphinx once, nothing rebuilt for a save that changed nothing, the served page reloaded."""

from __future__ import annotations

import contextlib
import os
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from helpers import ROOT, mini_book

from amp_book import corrections, preview

sys.path.insert(0, str(ROOT / "tools"))
from build_book import SPHINX_OPTS


def test_the_configured_extensions_are_read_without_running_conf_py(tmp_path: Path) -> None:
    (tmp_path / "conf.py").write_text(
        "import sys\nraise SystemExit('conf.py ran')\n"
        "extensions = ['myst_nb', 'amp_book', 'amp_lesson.x', 'sphinx_design']\n"
        "html_theme = 'pydata_sphinx_theme'\n"
    )
    assert preview.configured_extensions(tmp_path) == [
        "myst_nb",
        "sphinx_design",
        "pydata_sphinx_theme",
    ]
    # The real book's: every extension but the book's own, which each rebuild imports anew.
    found = preview.configured_extensions(ROOT / "docs")
    assert "myst_nb" in found
    assert not [n for n in found if n.split(".")[0] in preview.OWN_PACKAGES]


def test_a_save_that_changed_nothing_needs_no_rebuild(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# A page\n")
    builder = preview.WarmBuilder(["-M", "help"], tmp_path, "http://h:1", tmp_path / "seen.txt")
    assert builder._changed([page])  # never built: a rebuild
    builder._remember([page])
    assert not builder._changed([page])
    page.write_text("# A page\n")  # saved again, the same bytes
    assert not builder._changed([page])
    page.write_text("# A page, edited\n")
    assert builder._changed([page])
    page.unlink()  # deleted: a rebuild
    assert builder._changed([page])


def test_the_modules_worth_importing_ahead_leave_out_the_books_own() -> None:
    assert preview._worth_warming("sphinx.application")
    assert not preview._worth_warming("amp_book.cache")
    assert not preview._worth_warming("amp_lesson")
    assert not preview._worth_warming("__main__")


def test_a_store_that_shows_the_same_leaves_the_pages_that_list_it_unwritten() -> None:
    from amp_book.pageinfo import ReadingTime, ReadingTimes

    before = {"a": ReadingTime(words=400, self_checks=1, code_cells=2)}
    one_more_sentence = {"a": ReadingTime(words=410, self_checks=1, code_cells=2)}
    a_page_longer = {"a": ReadingTime(words=4000, self_checks=1, code_cells=2)}
    assert corrections._same(before, one_more_sentence, ReadingTimes.shown)
    assert not corrections._same(before, a_page_longer, ReadingTimes.shown)
    assert not corrections._same(before, {**before, "b": before["a"]}, ReadingTimes.shown)
    assert not corrections._same(before, one_more_sentence, lambda c: c)  # all of it shown


@pytest.mark.book
def test_the_preview_rebuilds_a_saved_page_and_tells_the_browser_to_reload(
    tmp_path: Path,
) -> None:
    from websockets.sync.client import connect

    src = mini_book(tmp_path, "The first version.\n")
    out = tmp_path / "_build" / "html"
    log = tmp_path / "preview.log"
    env = {**os.environ, "AMP_LESSON_CACHE_DIR": str(tmp_path / "cache")}
    page = src / "page.md"
    with preview.serving(src, out, [*SPHINX_OPTS, "-q"], env, log, ROOT) as (base, server):
        url = f"{base}/page.html"

        def reload_after(edit: str) -> str:
            with connect(base.replace("http", "ws", 1) + "/websocket-reload") as ws:
                time.sleep(1.0)  # the watcher settles
                page.write_text(page.read_text() + edit)
                assert ws.recv(timeout=180) == "refresh"
            return urllib.request.urlopen(url).read().decode()

        assert "The first version." in urllib.request.urlopen(url).read().decode()
        assert "The second sentence." in reload_after("\nThe second sentence.\n")
        reload_after("")  # saved unchanged
        assert "nothing to rebuild" in log.read_text()
        served = reload_after("\n```{code-cell} ipython3\nprint(6 * 7)\n```\n")
        assert "42" in served
        # A page that fails leaves the last good one served, and says so.
        reload_after("\n```{code-cell} ipython3\nraise ValueError('broken on purpose')\n```\n")
        text = log.read_text()
        assert "the build failed" in text
        assert "broken on purpose" in text
        assert "42" in urllib.request.urlopen(url).read().decode()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.pid, 0)
        pytest.fail(f"a process of the preview outlived it: {log.read_text()[-2000:]}")
