"""What a build keeps between builds in small JSON files of its own (each with what it
depends on, which its reader checks): read as found, written whole.

>>> import tempfile
>>> path = Path(tempfile.mkdtemp()) / "memo.json"
>>> read_json(path), write_json(path, {"a": 1}), read_json(path)
({}, None, {'a': 1})
>>> _ = path.write_text("{cut sh"); read_json(path)
{}
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def read_json(path: Path | None) -> dict[str, Any]:
    """The object in ``path``; ``{}`` where there is none, or none whole (nothing is kept)."""
    if path is None or not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def write_json(path: Path, value: dict[str, Any]) -> None:
    """Write ``value`` to ``path`` beside it first, then in its place: a build reading it
    (a parallel reader, the next build) never finds it half-written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}")
    partial.write_text(json.dumps(value), encoding="utf-8")
    partial.replace(path)
