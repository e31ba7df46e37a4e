"""How often each page says each word: what the search ranks a page by within a tier.

Sphinx's search scores a page that holds a query's word in its body the same,
whether it names it once or builds its whole lesson on it, and orders pages of
equal score by name. The site script (``amp_lesson.js``) adds, within the
tiers it sets (the reader's pages first, then title matches), a body weight:
for each word of the query, ``log2(1 + n)`` times that word's inverse page
frequency, ``n`` the times the page says it. This part counts ``n``: the
words of each page as read (its glued values in place), split and stemmed as
Sphinx's index splits and stems them, are written to
:data:`WEIGHTS_FILE` for the search page to load.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx

from amp_book.corrections import PageStore

WEIGHTS_FILE = "_static/amp-search-counts.js"
"""Where the counts go, as a script that sets ``window.AMP_SEARCH_COUNTS``."""

MIN_COUNT = 2
"""A word said once on a page adds nothing beyond Sphinx's own match: it is left out."""


def word_counts(text: str, language: Any) -> Counter[str]:
    """The stemmed words of ``text`` as ``language`` (a Sphinx ``SearchLanguage``) indexes them.

    >>> from sphinx.search.en import SearchEnglish
    >>> sorted(word_counts("Scaling the scaled gradients; GradScaler scales.",
    ...                    SearchEnglish({})).items())
    [('gradient', 1), ('gradscal', 1), ('scale', 3)]
    """
    counts: Counter[str] = Counter()
    for word in language.split(text):
        word = word.lower()
        if word in language.stopwords or len(word) < 3:
            continue
        counts[language.stem(word)] += 1
    return counts


class SearchCounts(PageStore):
    """Each page's word counts, kept across parallel reads."""

    attribute = "amp_lesson_search_counts"

    def collect(self, app: Sphinx, doctree: nodes.document) -> dict[str, int] | None:
        from sphinx.search import languages

        language = languages["en"]({})
        text = " ".join(
            node.astext()
            for node in doctree.findall(nodes.Text)
            if not isinstance(node.parent, (nodes.literal_block, nodes.raw, nodes.comment))
        )
        counts = word_counts(text, language)
        return {w: n for w, n in sorted(counts.items()) if n >= MIN_COUNT}


def _write_counts(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    docs = set(app.env.found_docs)
    store = {d: c for d, c in SearchCounts.store(app.env).items() if d in docs}
    target = Path(app.outdir, WEIGHTS_FILE)
    target.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(store, sort_keys=True, separators=(",", ":"))
    text = f"window.AMP_SEARCH_COUNTS = {data};\n"
    if not target.is_file() or target.read_text(encoding="utf-8") != text:
        target.write_text(text, encoding="utf-8")


def setup(app: Sphinx) -> dict[str, Any]:
    """Count each page's words as read; write the counts when the build ends."""
    app.add_env_collector(SearchCounts)
    app.connect("build-finished", _write_counts)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


__all__ = ["MIN_COUNT", "WEIGHTS_FILE", "setup", "word_counts"]
