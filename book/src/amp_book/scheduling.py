"""Parallel execution (``-j``) scheduled so that the pages' kernels finish together."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.util import logging

from amp_book import pages

logger = logging.getLogger(__name__)

DEFAULT_COST = 1.0
"""Assumed cost of a page with code that has no recorded execution time."""

AUTODOC_COST = 0.2
"""Assumed cost of reading an API page (autodoc), in seconds; other pages without code: 0."""

PAGE_COSTS_FILE = "_page_costs.json"
"""Execution seconds per page, measured by ``tools/bench_build.py --write-costs``; a hint only."""

AUTODOC = re.compile(r"^(\.\. auto\w+::|(```|:::)\{auto\w+\})", re.MULTILINE)


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
        costs[doc] = float(last) + (AUTODOC_COST if AUTODOC.search(text) else 0.0)
    return costs


def schedule_reading(app: Sphinx, env: Any, docnames: list[str]) -> None:
    """Reorder the pages to read (in place) so parallel kernels finish together."""
    if app.parallel > 1 and len(docnames) > 1:
        docnames[:] = balanced_order(_page_costs(app, env, docnames), app.parallel)


def setup(app: Sphinx) -> dict[str, bool]:
    """Order the pages to read by their expected cost."""
    app.connect("env-before-read-docs", schedule_reading)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
