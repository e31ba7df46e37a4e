"""Run a page's code cells in order, in one fresh process, as its notebook would.

``python tests/run_page.py PAGE.md`` executes every code cell of the MyST page
(hidden ones too) in one namespace, prints each claim's key, verdict and
words (``CLAIM key holds=...: words``) and exits 0, or prints the failing cell's
line and traceback and exits 1. Cells that start processes (the distributed
pages) need the guard below: a forkserver child re-imports this file as
``__mp_main__`` and must not run the page again.
"""

from __future__ import annotations

import sys
import traceback

if __name__ == "__main__":
    import matplotlib

    matplotlib.use("Agg")
    from amp_book.pages import read_page

    page = read_page(sys.argv[1])
    if not page.code_cells:
        sys.exit(f"{sys.argv[1]} has no code cells (is it a MyST notebook, with a kernelspec?)")
    namespace: dict[str, object] = {"__name__": "__main__"}
    for cell in page.code_cells:
        try:
            code = compile(cell.source, f"{sys.argv[1]}:{cell.line}", "exec")
            exec(code, namespace)  # noqa: S102 - running the page is the point
        except BaseException as error:  # noqa: BLE001 - report the cell, whatever failed
            traceback.print_exc()
            print(f"FAILED at the cell on line {cell.line}: {type(error).__name__}: {error}")
            sys.exit(1)
    print(f"ran {len(page.code_cells)} cells")
    import json

    from amp_lesson import notebook
    from amp_lesson.claims import CLAIM_RECORD_PREFIX

    for name, value in notebook._GLUED.items():  # every claim's record, and the words it chose
        if name.startswith(CLAIM_RECORD_PREFIX):
            record = json.loads(value)
            words = record["says"] if record["holds"] else record["otherwise"]
            print(f"CLAIM {record['key']} holds={record['holds']}: {words}")
