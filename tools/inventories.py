"""Read the documentation inventories the book links into, and check the committed ones.

    python tools/inventories.py refresh [NAME ...]   # read each from its source (network)
    python tools/inventories.py check                # verify the files in docs/_inventories

``docs/_inventories/sources.json`` says where each inventory is read and records, when its
file is written, the file's SHA-256, the date and the inventory's own project and version
(``amp_book.inventories``). The weekly lock workflow runs ``refresh`` and proposes what
changed; the build itself never touches the network.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import sys
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _module():  # amp_book's module alone: its package imports the lesson, and so torch
    import importlib.util

    path = ROOT / "book" / "src" / "amp_book" / "inventories.py"
    spec = importlib.util.spec_from_file_location("amp_book_inventories", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


_inv = _module()
SOURCES, InventoryError, header = _inv.SOURCES, _inv.InventoryError, _inv.header
load_sources, verify = _inv.load_sources, _inv.verify
FOLDER = ROOT / "docs" / "_inventories"
MAX_BYTES = 16 * 1024 * 1024
"""An inventory larger than this is refused (PyTorch's is well under 1 MB)."""


def read(url: str) -> bytes:
    """The inventory at ``url`` (https only), at most :data:`MAX_BYTES`."""
    if not url.startswith("https://"):
        raise InventoryError(f"{url}: only https sources are read")
    with urllib.request.urlopen(url, timeout=60) as response:
        data = response.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise InventoryError(f"{url}: larger than {MAX_BYTES} bytes")
    return data


def refresh(names: list[str], folder: Path = FOLDER, today: str | None = None) -> int:
    """Read the inventories ``names`` (all when empty) again and record them.

    Each is read, checked (header, Sphinx's reader) and only then put in place; one that
    fails is named and left as it was, and the others are still read. 1 if any failed.
    """
    sources = load_sources(folder, present=False)
    unknown = sorted(set(names) - set(sources))
    if unknown:
        print(f"inventories: no project {', '.join(unknown)} in {SOURCES}", file=sys.stderr)
        return 2
    status = 0
    for name in names or list(sources):
        entry = sources[name]
        new = folder / f".{entry['file']}.new"
        try:
            data = read(entry["source"])
            project, version = header(data)
            new.write_bytes(data)
            read_entry = dict(
                entry,
                file=new.name,
                sha256=hashlib.sha256(data).hexdigest(),
                read=today or datetime.date.today().isoformat(),
                project=project,
                version=version,
            )
            read_entry["from"] = entry["source"]
            verify(folder, name, read_entry)
        except (OSError, InventoryError) as error:
            new.unlink(missing_ok=True)
            print(f"inventories: {name}: {entry['source']}: {error}", file=sys.stderr)
            status = 1
            continue
        os.replace(new, folder / entry["file"])
        sources[name] = dict(read_entry, file=entry["file"])
        print(f"inventories: {name}: {project} {version}, {len(data)} bytes")
    text = json.dumps(sources, indent=2) + "\n"
    (folder / f".{SOURCES}.new").write_text(text, encoding="utf-8")
    os.replace(folder / f".{SOURCES}.new", folder / SOURCES)
    return status


def check(folder: Path = FOLDER) -> int:
    """Verify every inventory present; name those not read yet. 1 if any is wrong."""
    try:
        sources = load_sources(folder)
    except InventoryError as error:
        print(f"inventories: {error}", file=sys.stderr)
        return 1
    status = 0
    for name, entry in sources.items():
        if not (folder / entry["file"]).is_file():
            print(f"inventories: {name}: not read yet ({entry['source']})")
            continue
        try:
            verify(folder, name, entry)
        except InventoryError as error:
            print(f"inventories: {error}", file=sys.stderr)
            status = 1
        else:
            print(
                f"inventories: {name}: {entry['project']} {entry['version']}, read {entry['read']}"
            )
    return status


def main(argv: list[str]) -> int:
    if argv[:1] == ["refresh"]:
        return refresh(argv[1:])
    if argv == ["check"]:
        return check()
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
