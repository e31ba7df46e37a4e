"""What pip is configured with that uv must be told: the find-links locations.

uv does not read pip's configuration (``PIP_FIND_LINKS``, pip.conf). A folder of
local wheels there (a CPU torch, say) is passed on to uv, so both find the same
torch. Standard library only: nox imports it before any environment exists.
"""

from __future__ import annotations

import subprocess
import sys


def find_links(python: str = sys.executable) -> list[str]:
    """The find-links locations pip (of ``python``) is configured with, in order."""
    out = subprocess.run(
        [python, "-m", "pip", "config", "list"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    links: list[str] = []
    for line in out.splitlines():
        key, _, value = line.partition("=")
        if key.strip().endswith("find-links"):
            links += [v for v in value.strip().strip("'\"").split() if v not in links]
    return links


def uv_find_links(python: str = sys.executable) -> list[str]:
    """:func:`find_links` as uv's options (``--find-links PATH`` each)."""
    return [arg for path in find_links(python) for arg in ("--find-links", path)]
