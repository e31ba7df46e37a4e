"""The API reference documents every public name of every module, and the chapter links to it."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
from helpers import DOCS
from sphinx.util.inventory import InventoryFile
from test_docstrings import MODULES

pytestmark = pytest.mark.book


def test_every_module_has_a_page_that_documents_its_members() -> None:
    for module in MODULES:
        if module.endswith("__main__"):
            continue
        page = DOCS / "api" / f"{module}.md"
        assert page.is_file(), f"no API page for {module}"
        text = page.read_text()
        assert f".. automodule:: {module}\n" in text
        if module != "amp_lesson.bench":  # the overview: its names are documented where defined
            assert ":members:" in text, module
        assert f"\n{module}\n" in (DOCS / "api" / "index.md").read_text()


def test_every_public_name_is_in_the_built_reference(built_book: Path) -> None:
    with open(built_book / "objects.inv", "rb") as f:
        inventory = InventoryFile.load(f, "", lambda base, uri: uri)
    documented = {name for kind, entries in inventory.items() if kind.startswith("py:")
                  for name in entries}  # fmt: skip
    missing = []
    for module_name in MODULES:
        if module_name.endswith("__main__"):
            continue
        module = importlib.import_module(module_name)
        assert module_name in documented, module_name
        for name in module.__all__:
            obj = getattr(module, name)
            owner = getattr(obj, "__module__", None)
            if owner != module_name and (owner is not None or hasattr(module, "__path__")):
                continue  # re-exported (a package re-exports): documented where it is defined
            if f"{module_name}.{name}" not in documented:
                missing.append(f"{module_name}.{name}")
    assert missing == []


def test_chapter_links_reach_the_reference(built_book: Path) -> None:
    html = (built_book / "chapter" / "formats.html").read_text(encoding="utf-8")
    link = re.search(
        r'href="(\.\./api/amp_lesson\.formats\.html#amp_lesson\.formats\.store)"', html
    )
    assert link, "the formats page does not link store() to the API reference"
    target = (built_book / "chapter" / link.group(1).split("#")[0]).resolve()
    assert 'id="amp_lesson.formats.store"' in target.read_text(encoding="utf-8")
