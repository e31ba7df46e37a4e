"""The inventories of other projects' documentation that the book links into, kept on disk.

The build machines have no network, so intersphinx reads each inventory (``objects.inv``)
from ``docs/_inventories/``, where ``sources.json`` says, for each project:

- ``site``: the documentation the links point at (``https://docs.python.org/3.11/``);
- ``source``: where the inventory was read (``<site>objects.inv``);
- ``file``: the inventory's file beside ``sources.json``;
- ``sha256``, ``read`` (the date), ``from`` (what it was read from), ``project`` and
  ``version`` (its own header): written when the file is.

``tools/inventories.py refresh`` reads every inventory again from its ``source`` (the weekly
lock workflow runs it), ``check`` verifies the files against ``sources.json``. A project
whose file is not there yet links nowhere: :func:`missing` names it and ``docs/conf.py``
lets its namespaces through ``-n`` (their references render as code) until it is read.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

SOURCES = "sources.json"
"""The file in the inventories' folder that says where each came from."""

FIELDS = {"site", "source", "file", "namespaces"}
"""What each project's entry in :data:`SOURCES` must hold (``namespaces``: the top-level
names of its objects, ``["torch"]``)."""

READ_FIELDS = {"sha256", "read", "from", "project", "version"}
"""What an entry holds once its file is written."""

HEADER = re.compile(rb"# Sphinx inventory version 2\n# Project: (.*)\n# Version: (.*)\n")


class InventoryError(ValueError):
    """An inventory's file or entry is not what ``sources.json`` says."""


def load_sources(folder: Path, *, present: bool = True) -> dict[str, dict[str, Any]]:
    """``sources.json`` of ``folder``, each entry checked for the fields it needs, and (with
    ``present``) each inventory it records as read there."""
    path = folder / SOURCES
    try:
        sources = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise InventoryError(f"{path}: cannot be read ({error})") from error
    if not isinstance(sources, dict):
        raise InventoryError(f"{path}: not an object of projects")
    for name, entry in sources.items():
        lacking = FIELDS - set(entry) if isinstance(entry, dict) else FIELDS
        if lacking:
            raise InventoryError(f"{path}: {name!r} lacks {', '.join(sorted(lacking))}")
        for field in ("site", "source", "file"):
            if not isinstance(entry[field], str) or not entry[field]:
                raise InventoryError(f"{path}: {name!r}: {field} must be a non-empty string")
        spaces = entry["namespaces"]
        if not isinstance(spaces, list) or not all(
            isinstance(n, str) and re.fullmatch(r"[A-Za-z_]\w*", n) for n in spaces
        ):
            raise InventoryError(f"{path}: {name!r}: namespaces must be a list of module names")
        if not entry["site"].startswith("https://") or not entry["site"].endswith("/"):
            raise InventoryError(f"{path}: {name!r}: site must be an https address ending in /")
        if Path(entry["file"]).name != entry["file"]:
            raise InventoryError(f"{path}: {name!r}: file must be a name in {folder}")
        if present and not (folder / entry["file"]).is_file() and READ_FIELDS & set(entry):
            raise InventoryError(
                f"{folder / entry['file']}: {SOURCES} records it as read, and it is missing "
                "(restore it, or read it again with tools/inventories.py refresh)"
            )
    return sources


def header(data: bytes) -> tuple[str, str]:
    """``(project, version)`` from an inventory's header.

    >>> header(b"# Sphinx inventory version 2\\n# Project: Python\\n# Version: 3.11\\n...")
    ('Python', '3.11')
    >>> header(b"<html>")
    Traceback (most recent call last):
    ...
    amp_book.inventories.InventoryError: not a Sphinx inventory of version 2
    """
    m = HEADER.match(data)
    if m is None:
        raise InventoryError("not a Sphinx inventory of version 2")
    return m[1].decode(), m[2].decode()


def verify(folder: Path, name: str, entry: dict[str, Any], read: bool = True) -> None:
    """Raise :class:`InventoryError` unless ``entry``'s file is the one it records, whole;
    with ``read``, that Sphinx can read it too (a third of a second for Python's)."""
    from sphinx.util.inventory import InventoryFile

    path = folder / entry["file"]
    lacking = READ_FIELDS - set(entry)
    if lacking:
        raise InventoryError(f"{path}: {SOURCES} does not record its {', '.join(sorted(lacking))}")
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != entry["sha256"]:
        raise InventoryError(
            f"{path}: its SHA-256 is {digest}, {SOURCES} records {entry['sha256']} "
            "(read it again with tools/inventories.py refresh)"
        )
    if header(data) != (entry["project"], entry["version"]):
        raise InventoryError(f"{path}: its header is not {entry['project']} {entry['version']}")
    if not read:
        return
    try:
        InventoryFile.loads(data, uri=entry["site"])
    except Exception as error:  # zlib, or a line Sphinx cannot read
        raise InventoryError(f"{path}: Sphinx cannot read it ({error})") from error


def mapping(folder: Path, read: bool = True) -> dict[str, tuple[str, str]]:
    """``intersphinx_mapping`` for the inventories ``folder`` holds, each verified first
    (``read``: :func:`verify`'s; the live preview checks the digests alone, and intersphinx,
    which reads the files anyway, warns of one it cannot read)."""
    result = {}
    for name, entry in load_sources(folder).items():
        if (folder / entry["file"]).is_file():
            verify(folder, name, entry, read=read)
            result[name] = (entry["site"], str(folder / entry["file"]))
    return result


def digests(folder: Path) -> str:
    """The recorded SHA-256 of every inventory read, one string: a build whose inventories
    change writes every page again, so no page keeps a link into the older one."""
    return " ".join(
        f"{name}:{entry['sha256']}"
        for name, entry in sorted(load_sources(folder).items())
        if "sha256" in entry
    )


def missing(folder: Path) -> list[str]:
    """The projects ``sources.json`` names whose inventory has not been read yet."""
    return [
        name
        for name, entry in load_sources(folder).items()
        if not (folder / entry["file"]).is_file()
    ]


def unlinked_namespaces(folder: Path) -> list[str]:
    """The namespaces of the projects whose inventory is missing (:func:`missing`)."""
    sources = load_sources(folder)
    return [space for name in missing(folder) for space in sources[name]["namespaces"]]
