"""Install axe-core (the accessibility checker the browser tests inject) when it is missing.

axe-core comes from the npm registry at the exact version pinned in
``tools/axe/package.json`` and ``package-lock.json``; ``node_modules`` is
never committed. CI runs ``python tools/install_axe.py`` before the browser
tests; locally the tests skip the audit when axe is missing and ``CI`` is unset.

No shell is involved: npm is found on PATH and run with an argument list.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

AXE_DIR = Path(__file__).resolve().parent / "axe"
AXE_SCRIPT = AXE_DIR / "node_modules" / "axe-core" / "axe.min.js"


def axe_script() -> Path | None:
    """The path of ``axe.min.js`` if it is installed, else ``None``."""
    return AXE_SCRIPT if AXE_SCRIPT.is_file() else None


def install_axe(force: bool = False) -> Path:
    """Install axe-core into ``tools/axe/node_modules`` unless it is there; return ``axe.min.js``.

    ``npm ci`` installs exactly what the lock file records (and checks its
    integrity hash); without a lock file ``npm install`` writes one.
    """
    if not force and (script := axe_script()) is not None:
        return script
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm is not on PATH; install Node.js to run the accessibility audit")
    command = "ci" if (AXE_DIR / "package-lock.json").is_file() else "install"
    subprocess.run([npm, command, "--no-audit", "--no-fund"], cwd=AXE_DIR, check=True)
    if (script := axe_script()) is None:
        raise RuntimeError(f"npm {command} finished but {AXE_SCRIPT} is missing")
    return script


def main(argv: list[str]) -> int:
    """``python tools/install_axe.py [--force]``: print the path of axe.min.js."""
    print(install_axe(force="--force" in argv))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
