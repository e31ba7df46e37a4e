"""amp_book.edition: the book as another device ran it, recorded and rendered.

The mechanism runs on this machine end to end: a small book is built (its cells
executed here), recorded as an edition of this CPU (labelled with this device,
as any recording is), rendered by the next build beside the live one, switched
to in Chromium, marked after a page edit, a data change and a new page, and
refused once its provenance is incomplete. Only the content of the GPU edition
needs a GPU.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from audit import axe_path
from helpers import DOCS, FRONT_MATTER, HTML, copy_conf

from amp_book import export, workdirs
from amp_book.edition import outputs as edition_outputs
from amp_book.edition import render as ed
from amp_book.edition import store
from amp_book.edition.store import EditionError

CPU_PROVENANCE = {
    "device_type": "cpu",
    "device_name": "CPU (x86_64, 2 cores)",
    "torch_version": "2.13.0+cpu",
    "amp_lesson_version": "0.1.0",
    "python_version": "3.11.7",
    "recorded": "2026-12-02T10:00:00+00:00",
}


# -- provenance and the stored form --------------------------------------------------------


def test_a_complete_provenance_passes_and_each_missing_field_is_named() -> None:
    assert store.check_provenance(CPU_PROVENANCE) == []
    cuda = CPU_PROVENANCE | {"device_type": "cuda", "device_name": "NVIDIA H200"}
    assert store.check_provenance(cuda) == ["driver_version", "cuda_version", "compute_capability"]
    full = cuda | {"driver_version": "580.1", "cuda_version": "13.0", "compute_capability": "9.0"}
    assert store.check_provenance(full) == []
    assert store.check_provenance(full | {"driver_version": " "}) == ["driver_version"]
    assert store.check_provenance(CPU_PROVENANCE | {"recorded": "yesterday"}) == [
        "recorded (an ISO date)"
    ]
    assert store.check_provenance(CPU_PROVENANCE | {"device_type": "tpu"}) == [
        "device_type (cpu or cuda)"
    ]
    assert store.check_provenance(None) == list(store.PROVENANCE_FIELDS)


def _store(folder: Path, provenance: dict[str, Any], pages: dict[str, Any]) -> Path:
    folder.mkdir(parents=True)
    manifest = {"schema": store.SCHEMA, "provenance": provenance, "pages": pages}
    (folder / store.MANIFEST).write_text(json.dumps(manifest))
    return folder


def test_an_edition_whose_provenance_is_incomplete_is_refused_naming_what_it_lacks(
    tmp_path: Path,
) -> None:
    page = {"status": "failed", "source_sha256": "ab", "reason": "a cell raised X"}
    lacking = {k: v for k, v in CPU_PROVENANCE.items() if k != "torch_version"}
    folder = _store(tmp_path / "cpu", lacking, {"p": page})
    with pytest.raises(
        EditionError, match=r"refused, its provenance is incomplete: no torch_version"
    ):
        store.load_edition(folder)
    ok = _store(tmp_path / "ok", CPU_PROVENANCE, {"p": page})
    assert store.load_edition(ok).pages["p"].reason == "a cell raised X"
    no_file = _store(
        tmp_path / "nofile",
        CPU_PROVENANCE,
        {"p": {"status": "recorded", "source_sha256": "ab", "inputs_key": "k",
               "executed_on": "2026-12-02", "file": "p.ipynb.gz"}},
    )  # fmt: skip
    with pytest.raises(EditionError, match=r"p\.ipynb\.gz is missing"):
        store.load_edition(no_file)
    no_reason = _store(tmp_path / "noreason", CPU_PROVENANCE, {"p": {"status": "failed",
                       "source_sha256": "ab"}})  # fmt: skip
    with pytest.raises(EditionError, match=r"page p \(failed\) has no reason"):
        store.load_edition(no_reason)
    with pytest.raises(EditionError, match=r"no edition\.json"):
        store.load_edition(tmp_path / "nowhere")


PAGE = (
    FRONT_MATTER
    + """
# Page

```{code-cell} ipython3
from amp_lesson.device import provenance
provenance()
```

```{code-cell} ipython3
from myst_nb import glue
glue("answer", 6 * 7, display=False)
```

The answer is {glue:text}`answer`.
"""
)


def _executed(
    cells: list[dict[str, Any]], device: str = "cpu", name: str = "CPU (x86_64, 2 cores)"
) -> dict[str, Any]:
    """A notebook as MyST-NB writes an executed page: here, made by hand for the recorder's
    refusals (the end-to-end test below records real builds)."""
    prov = (
        f"Provenance(device_type='{device}', device_name='{name}', torch_version='2.13.0', "
        "cuda_version=None, python_version='3.11.7', executed_on='2026-12-02', "
        "package_version='0.1.0')"
    )
    out = [{"output_type": "execute_result", "data": {"text/plain": prov}, "metadata": {}}]
    nb_cells = [{"cell_type": "markdown", "source": "# Page", "metadata": {}}]
    for i, (source, outputs) in enumerate(cells):
        nb_cells.append({"cell_type": "code", "source": source, "metadata": {},
                         "outputs": out if i == 0 else outputs, "execution_count": i})  # fmt: skip
    nb_cells.append({"cell_type": "markdown", "source": "The answer is {glue:text}`answer`.",
                     "metadata": {}})  # fmt: skip
    return {"cells": nb_cells, "metadata": {"kernelspec": {"amp_lesson_inputs": "k1"}},
            "nbformat": 4, "nbformat_minor": 5}  # fmt: skip


CELLS = [
    "from amp_lesson.device import provenance\nprovenance()",
    'from myst_nb import glue\nglue("answer", 6 * 7, display=False)',
]


def _book(tmp_path: Path, notebooks: dict[str, dict[str, Any]]) -> tuple[Path, Path]:
    docs, executed = tmp_path / "docs", tmp_path / "jupyter_execute"
    docs.mkdir()
    executed.mkdir()
    (docs / "conf.py").write_text("")
    for name, nb in notebooks.items():
        (docs / f"{name}.md").write_text(PAGE)
        (executed / f"{name}.ipynb").write_text(json.dumps(nb))
        ran = {"ran": [], "read": [], "list": [], "untraced": [], "modules": []}
        (executed / f"{name}.ran.json").write_text(json.dumps(ran))
    return docs, executed


def test_the_recorder_keeps_what_ran_puts_the_glue_back_and_says_why_a_page_did_not_run(
    tmp_path: Path,
) -> None:
    good = _executed([(CELLS[0], []), (CELLS[1], [])])
    glue = {"answer": {"output_type": "display_data", "data": {"text/plain": "42"},
            "metadata": {"scrapbook": {"name": "answer", "mime_prefix": "application/papermill.record/"}}}}  # fmt: skip
    error = {"output_type": "error", "ename": "RuntimeError", "evalue": "CUDA out of memory",
             "traceback": []}  # fmt: skip
    bad = _executed([(CELLS[0], []), (CELLS[1], [error])])
    docs, executed = _book(tmp_path, {"good": good, "bad": bad})
    (executed / "good.glue.json").write_text(json.dumps(glue))
    (docs / "silent.md").write_text(PAGE)  # has code, but the build wrote no notebook for it
    (docs / "plain.md").write_text("# Plain\n\nNo code.\n")
    edition = store.record(docs, executed, tmp_path / "editions", CPU_PROVENANCE)
    assert edition.slug == "cpu-x86-64-2-cores"
    assert sorted(edition.pages) == ["bad", "good", "silent"]
    assert edition.pages["bad"].reason == "a cell raised RuntimeError: CUDA out of memory"
    assert "no executed notebook" in str(edition.pages["silent"].reason)
    stored = edition.pages["good"]
    assert stored.source_sha256 == store.source_sha256(docs / "good.md")
    assert stored.ran is not None  # what it ran, digested
    assert stored.ran["torch"] == "2.13.0"
    nb = edition.notebook("good")
    restored = [o for c in nb["cells"] for o in c.get("outputs", []) if "metadata" in o
                and "scrapbook" in o["metadata"]]  # fmt: skip
    assert restored == [
        {"output_type": "display_data",
         "metadata": {"scrapbook": {"name": "answer", "mime_prefix": "application/papermill.record/"}},
         "data": {"application/papermill.record/text/plain": "42"}}
    ]  # fmt: skip
    with gzip.open(edition.folder / "good.ipynb.gz", "rb") as f:
        assert b'"id"' not in f.read()  # compact: cell ids and execution counts left out
    again = store.record(docs, executed, tmp_path / "editions", CPU_PROVENANCE)
    assert (again.folder / "good.ipynb.gz").read_bytes() == (
        edition.folder / "good.ipynb.gz"
    ).read_bytes()


def test_the_recorder_refuses_a_run_of_another_device_or_of_another_version_of_the_page(
    tmp_path: Path,
) -> None:
    other = _executed([(CELLS[0], []), (CELLS[1], [])], "cuda", "NVIDIA H200")
    docs, executed = _book(tmp_path, {"p": other})
    with pytest.raises(EditionError, match="ran on 'NVIDIA H200', not on 'CPU"):
        store.record(docs, executed, tmp_path / "editions", CPU_PROVENANCE)
    (docs / "p.md").write_text(PAGE.replace("6 * 7", "6 * 8"))
    with pytest.raises(EditionError, match="the page changed after the build"):
        store.record(docs, executed, tmp_path / "editions", CPU_PROVENANCE)
    (docs / "p.md").write_text(PAGE)
    (executed / "p.ipynb").write_text(json.dumps(_executed([(CELLS[0], []), (CELLS[1], [])])))
    (executed / "p.ran.json").unlink()  # a run from a build that did not note what it ran
    with pytest.raises(EditionError, match=r"p\.ran\.json: missing, so what the run of .* ran"):
        store.record(docs, executed, tmp_path / "editions", CPU_PROVENANCE)
    with pytest.raises(EditionError, match="provenance is incomplete: no python_version"):
        store.record(docs, executed, tmp_path / "x", {**CPU_PROVENANCE, "python_version": ""})
    assert not (tmp_path / "editions").exists()


def test_the_line_says_how_the_recording_stands_and_leads_to_the_other_run() -> None:
    summary = {"slug": "h200", "device": "NVIDIA H200", "date": "2026-12-02",
               "torch": "2.13.0", "live_device": "CPU"}  # fmt: skip
    live = {
        s: ed.live_words(ed.PageState("p", s, "why"), summary, "e/p.html") for s in store.STATES
    }
    assert "recorded on NVIDIA H200</a>, 2026-12-02, torch 2.13.0" in live[store.CURRENT]
    assert "is from an earlier version" in live[store.EARLIER]
    assert live[store.NOT_RUN] == " · not recorded on NVIDIA H200: why"
    assert live[store.NO_CODE] == live[store.NOT_RECORDED] == ""
    recorded = {s: ed.recorded_words(ed.PageState("p", s, "why"), summary, "../p.html")
                for s in store.STATES}  # fmt: skip
    assert all('href="../p.html" data-edition="live"' in w for w in recorded.values())
    assert "run live on CPU" in recorded[store.CURRENT]
    assert "from an earlier version of this page" in recorded[store.EARLIER]
    assert recorded[store.NOT_RUN].startswith("Not recorded on NVIDIA H200: why")
    assert not any("built" in w for w in [*live.values(), *recorded.values()])


# -- end to end, on this machine -----------------------------------------------------------

OTHER = (
    FRONT_MATTER
    + """
# Other

```{code-cell} ipython3
import json
from pathlib import Path
from amp_lesson.device import provenance
provenance()
```

(other-value)=
## The value

```{code-cell} ipython3
json.loads(Path("_data/value.json").read_text())["value"]
```
"""
)

LIVE_PAGE = (
    PAGE
    + """
See {ref}`other-value` and {doc}`guide/notes`.

(page-later)=
## Later

The first version of this page.
"""
)


def _small_book(tmp: Path) -> tuple[Path, Path]:
    """The small book's sources under ``tmp/docs``, and where it is built (``tmp/html``)."""
    src = tmp / "docs"
    src.mkdir()
    copy_conf(src)
    shutil.copytree(DOCS / "_static", src / "_static")
    for folder in ("_data", "guide"):
        (src / folder).mkdir()
    (src / "_data" / "value.json").write_text('{"value": 1.5}')
    (src / "index.md").write_text("# Mini\n\n```{toctree}\npage\nother\nplain\n```\n\n"
                                  "```{toctree}\n:caption: For authors\n\nguide/notes\n```\n")  # fmt: skip
    (src / "page.md").write_text(LIVE_PAGE)
    (src / "other.md").write_text(OTHER)
    (src / "plain.md").write_text("# Plain\n\nNo code here.\n")
    (src / "guide" / "notes.md").write_text("# Notes\n\nFor authors.\n")
    out = tmp / "html"
    return src, out


NOTED = {**os.environ, "AMP_LESSON_NOTE_RUNS": "1"}
"""A build whose pages note what they run, as a recording's does."""


@pytest.fixture(scope="module")
def book(tmp_path_factory: pytest.TempPathFactory, sphinx: Any) -> dict[str, Any]:
    """A small book, built and recorded here, then built again with the recording."""
    tmp = tmp_path_factory.mktemp("edition")
    src, out = _small_book(tmp)
    sphinx(src, out, env=NOTED)
    edition = store.record(src, workdirs.executed_folder(out), src / "_editions",
                        store.record_provenance("cpu"), ["guide/*"])  # fmt: skip
    proc = sphinx(src, out)
    return {"src": src, "out": out, "edition": edition, "log": proc.stdout + proc.stderr}


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_the_next_build_renders_the_recording_beside_the_live_book_executing_nothing(
    book: dict[str, Any],
) -> None:
    out, edition = book["out"], book["edition"]
    site = out / "editions" / edition.slug
    assert sorted(p.relative_to(site).as_posix() for p in site.glob("*.html")) == [
        "index.html",
        "other.html",
        "page.html",
        "plain.html",
    ]  # the authors' pages stay in the live edition; its search is the live one's
    recorded = _read(site / "page.html")
    assert "The answer is 42." in " ".join(re.sub(r"<[^>]+>", " ", recorded).split()).replace(
        " .", "."
    )
    assert 'data-edition-state="current"' in recorded
    line = re.search(r'<p class="amp-provenance"[^>]*>(.*?)</p>', recorded)
    assert line is not None
    assert re.sub(r"<[^>]+>", "", line[1]).startswith(f"Recorded on {edition.device} · torch")
    assert "run live on" in line[1]  # one line: the device, date, torch, and the live run
    # Links into the live edition's own pages resolve there; the search box searches it.
    assert 'href="../../guide/notes.html"' in recorded
    assert 'action="../../search.html"' in recorded
    assert 'href="other.html#other-value"' in recorded
    # The live page carries the switch; both link page to page.
    live = _read(out / "page.html")
    assert f'href="editions/{edition.slug}/page.html"' in live
    assert 'href="../../page.html"' in recorded
    assert "amp-edition-choice" not in _read(out / "guide" / "notes.html")
    assert not any((out / "editions").rglob("jupyter_cache"))
    assert not any((out / "editions").rglob("jupyter_execute"))
    assert "Runs no code" in _read(site / "plain.html")
    assert 'data-edition-state="no-code"' in _read(site / "plain.html")


AXE_CONTRAST = """async () => (await axe.run(
  {include: [[".amp-provenance"]]},
  {runOnly: {type: "rule", values: ["color-contrast"]}, resultTypes: ["violations"]}
)).violations.map((v) => v.id + ": " + v.nodes.map((n) => n.target[0]).join(", "))"""


def test_the_switch_leads_to_the_same_section_of_the_other_edition_on_a_phone(
    book: dict[str, Any], browser: Any
) -> None:
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(book["out"]))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    slug = book["edition"].slug
    context = browser.new_context(viewport={"width": 390, "height": 800}, has_touch=True)
    try:
        pg = context.new_page()
        errors: list[str] = []
        pg.on("pageerror", lambda e: errors.append(str(e)))
        pg.on("response", lambda r: r.status >= 400 and errors.append(f"{r.status} {r.url}"))
        pg.goto(f"{url}/page.html#page-later")
        choice = pg.locator(f'a.amp-edition-choice[data-edition="{slug}"]')
        box = choice.bounding_box()
        assert box is not None
        assert box["height"] >= 44
        assert box["x"] + box["width"] <= 390
        choice.tap()
        pg.wait_for_url(f"**/editions/{slug}/page.html#page-later")
        assert pg.locator("#page-later").is_visible()
        assert pg.locator('p.amp-provenance[data-edition-state="current"]').count() == 1
        width = pg.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, width
        pg.locator('a.amp-edition-choice[data-edition="live"]').tap()
        pg.wait_for_url(f"{url}/page.html#page-later")
        # The line reads in both themes (axe-core's contrast rule), its links not yet visited.
        pg.goto(f"{url}/editions/{slug}/other.html")
        pg.add_script_tag(path=str(axe_path()))
        for theme in ("light", "dark"):
            pg.evaluate(f"document.documentElement.dataset.theme = {theme!r}")
            pg.wait_for_timeout(400)  # the theme's colour transitions
            found = pg.evaluate(AXE_CONTRAST)
            assert found == [], (theme, found)
        assert errors == []
    finally:
        context.close()
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def gpu_book(tmp_path_factory: pytest.TempPathFactory, sphinx: Any) -> dict[str, Any]:
    """The small book with a recording whose provenance says a GPU ran it; since then, a
    sentence added to one page ("page") and a code cell of another ("other") edited."""
    tmp = tmp_path_factory.mktemp("gpu-edition")
    src, out = _small_book(tmp)
    sphinx(src, out, env=NOTED)
    edition = store.record(src, workdirs.executed_folder(out), src / "_editions",
                        store.record_provenance("cpu"), ["guide/*"])  # fmt: skip
    manifest = edition.folder / store.MANIFEST
    data = json.loads(_read(manifest))
    data["provenance"] |= {"device_type": "cuda", "device_name": "NVIDIA H200",
                           "driver_version": "580.1", "cuda_version": "13.0",
                           "compute_capability": "9.0"}  # fmt: skip
    manifest.write_text(json.dumps(data))
    (src / "page.md").write_text(LIVE_PAGE + "\nA sentence added since the recording.\n")
    (src / "other.md").write_text(OTHER.replace('["value"]', '["value"] * 1'))
    sphinx(src, out, "-D", "amp_lesson_editions_open=1")  # the book's conf.py leaves it off
    return {"out": out, "slug": edition.slug}


def test_a_page_a_gpu_has_run_opens_on_the_gpus_run_and_this_build_is_one_click_away(
    gpu_book: dict[str, Any], browser: Any
) -> None:
    import functools
    import http.server
    import threading

    out, slug = gpu_book["out"], gpu_book["slug"]
    live = _read(out / "page.html")
    assert ed.opening_script(f"editions/{slug}/page.html") in live  # prose edited: still run
    assert "location.replace" not in _read(out / "other.html")  # code edited: this build
    assert "is from an earlier version" in _read(out / "other.html")
    recorded = _read(out / "editions" / slug / "page.html")
    assert "A sentence added since the recording." in recorded  # today's prose, and
    assert "The answer is 42" in " ".join(re.sub(r"<[^>]+>", " ", recorded).split())

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(out))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        pg = context.new_page()
        errors: list[str] = []
        pg.on("pageerror", lambda e: errors.append(str(e)))
        pg.goto(f"{url}/page.html#page-later")
        pg.wait_for_url(f"**/editions/{slug}/page.html#page-later")
        assert 'data-edition-state="current"' in pg.content()
        pg.locator('a.amp-edition-choice[data-edition="live"]').click()
        pg.wait_for_url(f"{url}/page.html#page-later")
        pg.wait_for_load_state("load")
        pg.wait_for_timeout(300)  # a redirect would have started by now
        assert pg.url == f"{url}/page.html#page-later"  # the reader's choice holds
        pg.goto(f"{url}/page.html")
        pg.wait_for_load_state("load")
        assert pg.url == f"{url}/page.html"  # and is remembered
        fresh = browser.new_context().new_page()
        fresh.goto(f"{url}/other.html")
        fresh.wait_for_load_state("load")
        fresh.wait_for_timeout(300)
        assert fresh.url == f"{url}/other.html"  # changed since the GPU ran it: this build
        fresh.goto(f"{url}/editions/{slug}/page.html")
        fresh.locator('a.amp-edition-choice[data-edition="live"]').click()
        fresh.wait_for_url(f"{url}/page.html")
        fresh.wait_for_timeout(300)
        assert fresh.url == f"{url}/page.html"  # the line's link is a choice too
        fresh.context.close()
        assert errors == []
    finally:
        context.close()
        server.shutdown()
        server.server_close()


def test_a_prose_edit_keeps_the_recording_a_data_change_retires_it_a_new_page_has_none(
    book: dict[str, Any], sphinx: Any
) -> None:
    src, out, slug = book["src"], book["out"], book["edition"].slug
    plain = workdirs.editions_folder(out) / slug / "doctrees" / "plain.doctree"
    read = plain.stat().st_mtime_ns
    page = src / "page.md"
    page.write_text(_read(page).replace("The first version", "The second version"))
    (src / "_data" / "value.json").write_text('{"value": 2.5}')
    (src / "new.md").write_text(
        OTHER.replace("# Other", "# New").replace("other-value", "new-value")
    )
    index = src / "index.md"
    index.write_text(_read(index).replace("plain\n", "plain\nnew\n"))
    sphinx(src, out)
    site = out / "editions" / slug
    current = _read(site / "page.html")
    assert 'data-edition-state="current"' in current  # the same code: the recorded run,
    assert "The second version" in current  # under today's prose
    assert "The first version" not in current
    other = _read(site / "other.html")  # it read the data file that changed
    assert 'data-edition-state="earlier"' in other
    assert "from an earlier version of this page" in other
    assert "1.5" in other
    assert "2.5" in _read(out / "other.html")
    assert "is from an earlier version" in _read(out / "other.html")
    new = _read(site / "new.html")
    assert 'data-edition-state="not-recorded"' in new
    assert f"newer than the run of {book['edition'].date}" in new
    # A page of the stored edition is read again only when its own state changed.
    assert plain.stat().st_mtime_ns == read


def test_an_editions_text_reaches_a_page_as_text_never_as_markup(
    book: dict[str, Any], sphinx: Any
) -> None:
    """A failed page's reason and the device's name come from the edition's file: a reason
    holding MyST that would publish a script and a file of the machine shows as text, and a
    device name with a line break in it (a second line of MyST) is refused, naming the field."""
    src, out, slug = book["src"], book["out"], book["edition"].slug
    manifest = next((src / "_editions").glob(f"*/{store.MANIFEST}"))
    whole = _read(manifest)
    data = json.loads(whole)
    hostile = (
        "it did not\n\n```{raw} html\n<script>alert(1)</script>\n```\n\n"
        "```{literalinclude} ../../../../etc/hostname\n```\n"
    )
    data["pages"]["other"] = {"status": "failed", "source_sha256": "ab", "reason": hostile}
    data["provenance"]["device_name"] = "CPU <script>alert(2)</script>"
    try:
        manifest.write_text(json.dumps(data))
        sphinx(src, out)
        stub, live = _read(out / "editions" / slug / "other.html"), _read(out / "other.html")
        for page in (stub, live):
            assert "<script>alert(" not in page
            assert "&lt;script&gt;alert(" in page
        assert "literalinclude} ../../../../etc/hostname" in stub  # the words, as words
        machine = Path("/etc/hostname")
        if machine.is_file() and (name := machine.read_text().strip()):
            assert name not in stub
        data["provenance"]["device_name"] = "CPU\n```{raw} html\n<script>alert(3)</script>\n```"
        manifest.write_text(json.dumps(data))
        proc = sphinx(src, out, check=False)
        assert proc.returncode != 0
        assert "refused, provenance device_name holds a control character" in (
            proc.stdout + proc.stderr
        )
        data["provenance"]["device_name"] = "x" * (store.MAX_FIELD + 1)
        manifest.write_text(json.dumps(data))
        proc = sphinx(src, out, check=False)
        assert (
            f"device_name is longer than {store.MAX_FIELD} characters" in proc.stdout + proc.stderr
        )
    finally:
        manifest.write_text(whole)
    sphinx(src, out)
    assert "alert(" not in _read(out / "other.html")


def test_an_edition_with_incomplete_provenance_fails_the_build(
    book: dict[str, Any], sphinx: Any
) -> None:
    src, out = book["src"], book["out"]
    manifest = next((src / "_editions").glob(f"*/{store.MANIFEST}"))
    whole = _read(manifest)
    data = json.loads(whole)
    del data["provenance"]["device_name"]
    manifest.write_text(json.dumps(data))
    try:
        proc = sphinx(src, out, check=False)
    finally:
        manifest.write_text(whole)
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "refused, its provenance is incomplete: no device_name" in log
    assert not (out / "editions").exists()  # the one it showed before is no longer shown


def test_the_whole_book_is_recorded_and_its_stored_edition_rendered(
    built_book: Path, tmp_path: Path, report: Any
) -> None:
    """Every page of the real book with code is recorded from the build the suite made; and
    the book's stored edition (recorded so on a GPU) is rendered by that build: a page for
    each of them, whatever its state against the sources now, that the live page's switch
    leads to, and the sections left to the live book forwarded there."""
    import runpy

    refs = runpy.run_path(str(DOCS / "conf.py"))["amp_lesson_reference_pages"]
    recording = store.record(DOCS, workdirs.executed_folder(HTML), tmp_path / "editions",
                             store.record_provenance("cpu"), refs)  # fmt: skip
    assert all(p.status == store.RECORDED for p in recording.pages.values()), recording.pages
    assert len(recording.pages) >= 24  # the book's pages with code
    # What each page ran, digested from the sources now, is what the sources are: every page
    # of a recording of this checkout is current (none retired by a digest that moves).
    root, torch = DOCS.parent, ed.torch_now()
    states = {d: ed.page_state(recording, d, ed.read_now(DOCS / f"{d}.md"), root, torch)
              for d in recording.pages}  # fmt: skip
    assert {d: s.note for d, s in states.items() if s.state != store.CURRENT} == {}
    ran = {d: len(p.ran["functions"]) for d, p in recording.pages.items() if p.ran}
    assert min(ran.values()) > 0, ran  # every page called some of the lesson's functions
    ddp = recording.pages["beyond/ddp-accumulation"].ran
    assert ddp is not None
    assert any("_ddp_worker" in f for f in ddp["functions"])  # run in the ranks' processes
    # The recording keeps the cells' tags: a GPU edition's Colab link opens on the reader's cell.
    stored_page = (
        recording.folder / "beyond" / f"check-your-own-model{edition_outputs.NOTEBOOK_SUFFIX}"
    )
    assert export.opens_on(edition_outputs.read_notebook(stored_page)) == export.OPENS_HERE_ID
    size = sum(p.stat().st_size for p in recording.folder.rglob("*") if p.is_file())
    report("stored edition of the whole book (CPU recording)", f"{size / 1024:.0f} KiB")
    (stored,) = [m.parent for m in (DOCS / "_editions").glob(f"*/{store.MANIFEST}")]
    site = built_book / "editions" / stored.name
    for docname in recording.pages:
        text = _read(site / f"{docname}.html")
        state = re.search(r'data-edition-state="([a-z-]+)"', text)
        assert state is not None, docname
        assert state[1] in store.STATES, docname
        if state[1] in (store.CURRENT, store.EARLIER):
            assert f'href="editions/{stored.name}/{docname}.html"'.replace(
                "editions/", "../" * docname.count("/") + "editions/"
            ) in _read(built_book / f"{docname}.html"), docname
    # The API reference is left to the live book: the sidebar's entry opens it. The authors'
    # guide is in no reader's navigation, so an edition has no page of it, not even a forward.
    forward = [p.relative_to(site).as_posix() for p in (site / "api").rglob("*.html")]
    assert forward == ["api/index.html"], forward
    live = "../../../api/index.html"
    assert f'http-equiv="refresh" content="0; url={live}"' in _read(site / forward[0])
    assert (built_book / "api" / "index.html").is_file()
    assert not (site / "guide").exists()
    assert (built_book / "guide" / "index.html").is_file()
    sidebar = _read(site / "chapter" / "recipe.html").split('id="pst-primary-sidebar"')[1]
    assert 'href="../../../api/index.html"' in sidebar.split("</nav>")[0]  # the live one


def test_a_page_an_edition_no_longer_has_leaves_no_output_behind(tmp_path: Path) -> None:
    """Sphinx keeps a removed page's HTML; the edition's site would still serve it."""
    from amp_book.edition.render import _forget_output

    work = tmp_path / "work"
    stale = [
        work / "html" / "guide" / "index.html",
        work / "html" / "_sources" / "guide" / "index.md.txt",
        work / "doctrees" / "guide" / "index.doctree",
    ]
    kept = [work / "html" / "chapter" / "start.html", work / "html" / "search.html"]
    for path in stale + kept:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x", encoding="utf-8")
    _forget_output(work, "guide/index")
    assert [p for p in stale if p.exists()] == []
    assert all(p.exists() for p in kept)
