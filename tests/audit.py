"""axe-core in the browser tests: where its script is, how a page is audited, what it found."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from install_axe import axe_script

AXE_MISSING = "axe-core is not installed; run `python tools/install_axe.py`"

# What the theme changes: colours, and which images show. The rest of the page (names,
# roles, structure) is the same in both themes, so a dark audit runs these rules only.
THEME_RULES = [
    "color-contrast",
    "link-in-text-block",
    "image-alt",
    "svg-img-alt",
    "role-img-alt",
    "object-alt",
    "input-image-alt",
]

# The theme's toggle sets data-theme; the colours then ease over (CSS transitions). The
# audit reads the colours they end on: it switches with transitions held off for a frame (no
# colour is read half-way, and none waited for), then waits for any animation still running.
SWITCH_TO_DARK = """async () => {
  const still = document.createElement("style");
  still.textContent = "*, *::before, *::after { transition: none !important; }";
  document.head.append(still);
  document.documentElement.dataset.theme = "dark";
  await new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)));
  still.remove();
  await Promise.all(document.getAnimations().map((animation) => animation.finished));
}"""


def axe_path() -> Path:
    """``axe.min.js``; the test is skipped where it is not installed, and fails on CI."""
    path = axe_script()
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(AXE_MISSING)
        pytest.skip(AXE_MISSING)
    return path


def serious_violations(
    pg: Any,
    rules: list[str] | None = None,
    include: list[str] | None = None,
    exclude: tuple[str, ...] | list[str] = (),
) -> list[str]:
    """Every serious or critical axe-core violation on the page, one line each.

    ``rules``: only these (default all); ``include`` and ``exclude``: CSS selectors of the
    parts audited and left out (default the whole document). axe is added to the page
    when it is not there yet.
    """
    if not pg.evaluate("typeof axe !== 'undefined'"):
        pg.add_script_tag(path=str(axe_path()))
    options: dict[str, Any] = {"resultTypes": ["violations"]}
    if rules is not None:
        options["runOnly"] = {"type": "rule", "values": rules}
    context = None  # the whole document: axe's page-level rules run only on it
    if include or exclude:
        context = {
            "include": [[s] for s in include] if include else [["html"]],
            "exclude": [[s] for s in exclude],
        }
    results = pg.evaluate(
        "async ([context, options]) => (await axe.run(context || document, options)).violations",
        [context, options],
    )
    return [
        f"{v['id']} ({v['impact']}): {v['help']} -- "
        + "; ".join(node["target"][0] if node["target"] else "?" for node in v["nodes"][:5])
        for v in results
        if v["impact"] in ("serious", "critical")
    ]
