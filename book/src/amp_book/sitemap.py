"""Every page in the sitemap, whichever pages this build wrote.

sphinx-sitemap lists the pages it sees written (``html-page-context``), so an incremental
build, which writes only the pages that changed, left every other page out of
``sitemap.xml`` (its issue jdillard/sphinx-sitemap#13, open since 2018, read on 2026-12-04).
Before it writes the file, this adds each of the book's documents it has not seen, named
and filtered (``sitemap_excludes``) as it names them, so a no-change build writes the same
sitemap as a fresh one.
"""

from __future__ import annotations

import queue
from typing import Any

from sphinx.application import Sphinx


def complete(app: Sphinx, exception: BaseException | None) -> None:
    """``build-finished``, before sphinx-sitemap's own handler: queue the pages it lacks."""
    links = getattr(app, "sitemap_links", None)
    if exception is not None or links is None or app.builder.format != "html":
        return
    if getattr(app.env, "is_directory_builder", False):
        return  # the dirhtml builder names pages otherwise; the book is built with html
    from sphinx_sitemap import is_excluded

    seen: list[tuple[str, Any]] = []
    while True:
        try:
            seen.append(links.get_nowait())
        except queue.Empty:
            break
    names = {link for link, _ in seen}
    suffix = app.config.html_file_suffix or ".html"
    for doc in sorted(app.env.found_docs):
        link = doc + suffix
        if link not in names and not is_excluded(link, app.config.sitemap_excludes):
            seen.append((link, None))
    for entry in seen:
        links.put(entry)


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("build-finished", complete, priority=400)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
