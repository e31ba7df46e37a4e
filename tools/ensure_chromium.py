"""Find, and where it can, install the Chromium that the browser tests drive.

One setting chooses the browser: the environment variable ``CHROMIUM_PATH``.

- unset: the system's Chromium (``chromium``, ``chromium-browser`` or
  ``google-chrome`` on ``PATH``; Debian's package on this project's machines).
  When none is there and this runs as root on a machine with apt, it
  installs Debian's ``chromium`` (what ``.ci/run`` relies on);
- ``playwright``: the Chromium build that Playwright installs for itself
  (``python -m playwright install --with-deps chromium``; Playwright's
  supported route, used by the GitHub workflow, where Ubuntu's ``chromium``
  package is a snap stub Playwright cannot drive);
- a path: that executable.

The tests (``tests/conftest.py``) and the benchmark call :func:`find`;
``nox -s tests`` runs this file first to install what is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

ENV_VAR = "CHROMIUM_PATH"
PLAYWRIGHT = "playwright"


def find() -> str | None:
    """The Chromium executable the tests should drive, or ``None`` when there is none.

    The book's build prints its PDF with the same one
    (:func:`amp_book.printbook.find_chromium`).
    """
    from amp_book.printbook import find_chromium

    return find_chromium()


def main() -> int:
    path = find()
    if path:
        print(f"chromium: {path}")
        return 0
    setting = os.environ.get(ENV_VAR, "").strip()
    if setting == PLAYWRIGHT:
        print("chromium: installing Playwright's Chromium and the libraries it needs")
        cmd = [sys.executable, "-m", "playwright", "install", "--with-deps", "chromium"]
        subprocess.run(cmd, check=True)
        print(f"chromium: {find()}")
        return 0
    if setting:
        print(f"chromium: {ENV_VAR}={setting!r} does not exist", file=sys.stderr)
        return 1
    if shutil.which("apt-get") and hasattr(os, "geteuid") and os.geteuid() == 0:
        print("chromium: installing Debian's package for the browser tests")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], check=True, env=env)
        print(f"chromium: {find()}")
        return 0
    print(
        f"chromium: not found and cannot be installed here; install Chromium, or set "
        f"{ENV_VAR} to its path or to '{PLAYWRIGHT}', to run the browser tests",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
