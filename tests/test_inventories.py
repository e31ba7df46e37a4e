"""The documentation inventories on disk (amp_book.inventories, tools/inventories.py) and the
links the book makes from them (amp_book.apilinks), in an in-process Sphinx app."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import inventories as tool  # tools/inventories.py
import pytest
from bs4 import BeautifulSoup
from helpers import ROOT, build_in_process

from amp_book import inventories

FOLDER = ROOT / "docs" / "_inventories"


def _copy(tmp_path: Path) -> Path:
    folder = tmp_path / "_inventories"
    shutil.copytree(FOLDER, folder)
    return folder


@pytest.mark.fast
def test_the_committed_inventories_are_the_ones_sources_json_records() -> None:
    assert tool.check() == 0
    sources = inventories.load_sources(FOLDER)
    present = inventories.mapping(FOLDER)
    assert set(present) | set(inventories.missing(FOLDER)) == set(sources)
    assert present["python"] == ("https://docs.python.org/3.11/", str(FOLDER / "python.inv"))
    # a project not read yet lets its namespaces through -n; one that is read does not
    unlinked = inventories.unlinked_namespaces(FOLDER)
    assert "time" not in unlinked
    assert all(space in unlinked for name in inventories.missing(FOLDER)
               for space in sources[name]["namespaces"])  # fmt: skip


@pytest.mark.fast
def test_an_inventory_changed_by_hand_fails_naming_the_file(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    data = bytearray((folder / "python.inv").read_bytes())
    data[-10] ^= 0xFF
    (folder / "python.inv").write_bytes(bytes(data))
    with pytest.raises(inventories.InventoryError, match=r"python\.inv: its SHA-256 is"):
        inventories.mapping(folder)


@pytest.mark.fast
def test_a_file_that_is_no_inventory_is_refused_even_with_its_digest_recorded(
    tmp_path: Path,
) -> None:
    folder = _copy(tmp_path)
    bad = b"# Sphinx inventory version 2\n# Project: Python\n# Version: 3.11\nnot zlib"
    (folder / "python.inv").write_bytes(bad)
    sources = json.loads((folder / "sources.json").read_text())
    sources["python"]["sha256"] = hashlib.sha256(bad).hexdigest()
    (folder / "sources.json").write_text(json.dumps(sources))
    with pytest.raises(inventories.InventoryError, match="Sphinx cannot read it"):
        inventories.mapping(folder)


@pytest.mark.fast
def test_a_deleted_inventory_that_sources_json_records_fails_naming_it(tmp_path: Path) -> None:
    """Not "not read yet": that would let its namespaces through -n and drop its links."""
    folder = _copy(tmp_path)
    (folder / "python.inv").unlink()
    with pytest.raises(inventories.InventoryError, match=r"python\.inv: sources\.json records it"):
        inventories.mapping(folder)
    assert tool.check(folder) == 1  # and so does the check, which names it


@pytest.mark.fast
def test_the_digests_name_every_inventory_read() -> None:
    recorded = inventories.load_sources(FOLDER)["python"]["sha256"]
    assert f"python:{recorded}" in inventories.digests(FOLDER).split()
    assert "torch:" not in inventories.digests(FOLDER)  # not read yet


@pytest.mark.fast
def test_an_entry_lacking_a_field_is_named(tmp_path: Path) -> None:
    folder = tmp_path
    (folder / "sources.json").write_text(json.dumps({"x": {"site": "https://a.example/"}}))
    with pytest.raises(inventories.InventoryError, match="'x' lacks file, namespaces, source"):
        inventories.load_sources(folder)
    (folder / "sources.json").write_text(json.dumps({"x": {
        "site": "http://a.example/", "source": "s", "file": "x.inv", "namespaces": []}}))  # fmt: skip
    with pytest.raises(inventories.InventoryError, match="site must be an https address"):
        inventories.load_sources(folder)
    (folder / "sources.json").write_text(json.dumps({"x": {
        "site": "https://a.example/", "source": "s", "file": "x.inv", "namespaces": "torch"}}))  # fmt: skip
    with pytest.raises(inventories.InventoryError, match="namespaces must be a list"):
        inventories.load_sources(folder)
    (folder / "sources.json").write_text(json.dumps({"x": {
        "site": "https://a.example/", "source": "s", "file": "", "namespaces": []}}))  # fmt: skip
    with pytest.raises(inventories.InventoryError, match="file must be a non-empty string"):
        inventories.load_sources(folder)


@pytest.mark.fast
def test_refresh_writes_the_inventory_and_records_where_and_when(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the weekly workflow runs, with the network replaced by the committed file."""
    folder = _copy(tmp_path)
    data = (FOLDER / "python.inv").read_bytes()
    asked = []
    monkeypatch.setattr(tool, "read", lambda url: asked.append(url) or data)
    (folder / "python.inv").unlink()
    assert tool.refresh(["python"], folder, today="2027-01-04") == 0
    assert asked == ["https://docs.python.org/3.11/objects.inv"]
    entry = inventories.load_sources(folder)["python"]
    assert entry["sha256"] == hashlib.sha256(data).hexdigest()
    assert (entry["read"], entry["project"], entry["version"]) == ("2027-01-04", "Python", "3.11")
    assert entry["from"] == entry["source"]
    assert "python" in inventories.mapping(folder)
    assert tool.refresh(["nothing"], folder) == 2
    monkeypatch.setattr(tool, "read", lambda url: b"<html>")
    before = (folder / "python.inv").read_bytes(), (folder / "sources.json").read_bytes()
    assert tool.refresh(["python"], folder) == 1
    assert "python: https://docs.python.org/3.11/objects.inv: not a Sphinx inventory" in (
        capsys.readouterr().err
    )
    assert ((folder / "python.inv").read_bytes(), (folder / "sources.json").read_bytes()) == before


PAGE = """\
# Links

A code span naming an object links: `time.perf_counter`, and called, `time.perf_counter()`.
A name no inventory holds stays code: `time.nothing`, and so does an undotted one: `sum`.
A span in a link stays as it is: [see `time.sleep`](https://example.org/).

## The heading `time.monotonic`

A role resolves through the inventory too: {py:func}`time.perf_counter`.

```python
time.perf_counter()
```
"""


def test_a_code_span_naming_an_inventorys_object_links_to_it(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text("")
    (src / "index.md").write_text(PAGE)
    conf = {
        "intersphinx_mapping": inventories.mapping(FOLDER),
        "nitpicky": True,
    }
    extensions = ["myst_parser", "sphinx.ext.intersphinx", "amp_book.apilinks"]
    html = build_in_process(src, tmp_path / "out", extensions, **conf).outdir
    soup = BeautifulSoup((html / "index.html").read_text(), "html.parser")
    links = {a.get_text(): a["href"] for a in soup.select("a.amp-api-link")}
    url = "https://docs.python.org/3.11/library/time.html#time.perf_counter"
    assert links == {"time.perf_counter": url, "time.perf_counter()": url}
    codes = [c.get_text() for c in soup.select("code") if not c.find_parent("a")]
    assert {"time.nothing", "sum", "time.monotonic"} <= set(codes)
    assert soup.select_one('a[href="https://example.org/"]').get_text() == "see time.sleep"
    role = soup.select("a.reference.external:not(.amp-api-link)")
    assert any(a["href"] == url for a in role)  # the role, resolved by intersphinx itself
    assert "time.perf_counter" not in str(soup.select_one("pre").find_all("a"))
