"""``python -m sphinx``, ending without Python's interpreter teardown.

After a full build the process holds torch (imported for the API pages), the
environment and every doctree. Python's shutdown frees them object by object
before the process can end: 1.3 s after a full build here, spent on memory the
operating system takes back anyway. So once Sphinx has finished, this runs the
exit handlers (``atexit``: logging, multiprocessing), flushes the standard
streams and ends the process with Sphinx's status, skipping only the teardown.

    python tools/run_sphinx.py [sphinx-build arguments]

:func:`build_book.sphinx_command` calls it: standard library, Sphinx and the book's build.
"""

from __future__ import annotations

import atexit
import os
import sys


def main(argv: list[str]) -> int:
    """Run sphinx-build with ``argv``; return its exit status.

    The book's own errors (a page, a file or a setting it names) are reported without
    Sphinx's request to report them to Sphinx (``amp_book.errors.report_own_errors``).
    """
    from sphinx.cmd.build import main as sphinx_build

    try:
        from amp_book.errors import report_own_errors
    except ModuleNotFoundError as error:  # a Sphinx without the book's build
        if error.name != "amp_book":
            raise
    else:
        report_own_errors()
    return sphinx_build(argv)


if __name__ == "__main__":
    sys.path[0] = os.getcwd()  # as under ``python -m sphinx``, not this script's folder
    status = main(sys.argv[1:])
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
