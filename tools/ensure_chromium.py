"""Make sure a Chromium the browser tests can drive is installed.

Uses Debian's package (``apt-get install chromium``) when running as root on a
machine that has apt and no Chromium yet; otherwise only says what it found.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def find() -> str | None:
    explicit = os.environ.get("CHROMIUM_PATH")
    if explicit:
        return explicit if os.path.exists(explicit) else None
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


def main() -> int:
    path = find()
    if path:
        print(f"chromium: {path}")
        return 0
    if shutil.which("apt-get") and hasattr(os, "geteuid") and os.geteuid() == 0:
        print("chromium: installing Debian's package for the browser tests")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], check=True, env=env)
        print(f"chromium: {find()}")
        return 0
    print(
        "chromium: not found and cannot be installed here; install Chromium (or set "
        "CHROMIUM_PATH) to run the browser tests",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
