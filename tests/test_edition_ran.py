"""amp_book.edition.ran: a recording stays on its page until what it ran changes.

Each "page" below is run for real, in a process of its own with the build's tracing on
(:func:`amp_book.edition.ran.start`), against a small package named ``amp_lesson`` in a
folder of the test's own; its notes become the digests an edition keeps. Then the sources
are edited one way at a time, and the test asks which pages each edit retires: exactly
those whose run ran what the edit touched, and none for an edit that touches nothing run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from helpers import FRONT_MATTER

from amp_book.edition import ran, store
from amp_book.edition import render as ed

pytestmark = pytest.mark.fast

CORE = '''\
"""The toy's core."""

SCALE = 2
"""How much double doubles."""


def double(x):
    """Twice ``x``."""
    return x * SCALE


def add_one(x):
    return x + 1


def pick():
    import torch

    if torch.cuda.is_available():
        return on_cuda()
    return on_cpu()


def on_cuda():
    return "cuda"


def on_cpu():
    return "cpu"


def fails():
    raise ValueError("no")


def fake():
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        return torch.empty(2, device="cuda").dtype


class Box:
    """A box."""

    size = 3

    def area(self):
        return self.size**2
'''
DATA = '''\
"""Reads a data file."""
from pathlib import Path


def load(path):
    return Path(path).read_text()
'''
UNUSED = '''\
"""Nothing runs this."""


def never():
    return 0
'''
CHILD = '''\
"""Runs a function in a process of its own."""
import subprocess
import sys


def in_a_child(flags=(), code="from amp_lesson.core import add_one; print(add_one(1))"):
    return subprocess.run([sys.executable, *flags, "-c", code], check=True,
                          capture_output=True, text=True).stdout
'''
PAGES = {
    "doubles": ["from amp_lesson.core import double\nx = double(3)  # six"],
    "adds": ["from amp_lesson.core import add_one\nadd_one(3)"],
    "reads": ["from amp_lesson.data import load\nload('docs/_data/value.json')"],
    "cpu": ["from amp_lesson.core import pick\npick()"],
    "gpu": [
        "import torch\ntorch.cuda.is_available = lambda: True  # a GPU, stubbed",
        "from amp_lesson.core import pick\nassert pick() == 'cuda'",
    ],
    "box": ["from amp_lesson.core import Box\nBox().area()"],
    "child": ["from amp_lesson.child import in_a_child\nin_a_child()"],
    "untraced": ["from amp_lesson.child import in_a_child\nin_a_child(['-I'], 'print(1)')"],
    # a traceback quotes the module's lines, and their numbers: its source is what it shows
    "traceback": [
        (
            "import traceback\nfrom amp_lesson.core import fails\ntry:\n    fails()\n"
            "except ValueError:\n    print(traceback.format_exc())"
        )
    ],
    # torch keeps the stack of each fake tensor, read but never shown
    "fake": ["import torch\nfrom amp_lesson.core import fake\nfake()"],
}
RUN = """\
import os, sys
sys.path.insert(0, {book!r})
from amp_book.edition import ran
ran.start()
namespace = {{}}
for cell in {cells!r}:
    exec(compile(cell, "<cell>", "exec"), namespace)
"""


def _write(root: Path) -> None:
    package = root / "src" / "amp_lesson"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('"""The toy lesson."""\n')
    for name, text in {"core": CORE, "data": DATA, "unused": UNUSED, "child": CHILD}.items():
        (package / f"{name}.py").write_text(text)
    (root / "docs" / "_data").mkdir(parents=True)
    (root / "docs" / "_data" / "value.json").write_text('{"value": 1.5}')
    (root / "docs" / "_data" / "other.json").write_text('{"value": 0}')


def _record(root: Path, notes: Path, name: str, cells: list[str]) -> dict[str, Any]:
    """Run ``cells`` as one page's kernel would, and return the digests an edition keeps."""
    book = str(Path(__file__).resolve().parents[1] / "book" / "src")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root / "src"), book]),
        "JPY_PARENT_PID": name,
    }
    subprocess.run(
        [sys.executable, "-c", RUN.format(book=book, cells=cells)],
        check=True, cwd=root, env=env, capture_output=True, text=True,
    )  # fmt: skip
    package = root / "src" / "amp_lesson"
    summary = ran.summarize((notes / f"{name}.ran").read_text(), root, package)
    modules = {e.rpartition(":")[0] for e in summary["ran"]}
    return ran.witness(summary, root, sorted(modules), cells, "2.13.0+cpu", package)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("ran")
    _write(root)
    notes = root / "notes"
    saved = {k: os.environ.get(k) for k in (ran.NOTES_ENV, ran.ROOTS_ENV)}
    ran.prepare(notes, [root / "docs"])
    try:
        digests = {name: _record(root, notes, name, cells) for name, cells in PAGES.items()}
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return {"root": root, "digests": digests}


def _retired(
    recorded: dict[str, Any], edit: Any, torch: str = "2.13.0", cells: Any = None
) -> set[str]:
    """The pages whose recording an edit (a function of the folder) retires."""
    root = recorded["root"]
    work = root.parent / (root.name + "-edited")
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(root, work, ignore=shutil.ignore_patterns("notes"))
    edit(work)
    return {
        name
        for name, digests in recorded["digests"].items()
        if ran.changes(
            digests, work, (cells or {}).get(name, PAGES[name]), torch, work / "src" / "amp_lesson"
        )
    }


def _replace(path: str, old: str, new: str) -> Any:
    def edit(root: Path) -> None:
        target = root / ("src/" + path if path.startswith("amp_lesson/") else path)
        text = target.read_text()
        assert old in text
        target.write_text(text.replace(old, new))

    return edit


def test_what_each_page_ran_is_noted_from_its_run(recorded: dict[str, Any]) -> None:
    d = recorded["digests"]
    assert set(d["doubles"]["functions"]) == {"amp_lesson/core.py:double"}
    assert set(d["cpu"]["functions"]) == {"amp_lesson/core.py:pick",
                                          "amp_lesson/core.py:on_cpu"}  # fmt: skip
    assert set(d["gpu"]["functions"]) == {"amp_lesson/core.py:pick",
                                          "amp_lesson/core.py:on_cuda"}  # fmt: skip
    assert set(d["reads"]["files"]) == {"docs/_data/value.json"}
    assert set(d["traceback"]["files"]) == {"amp_lesson/core.py"}
    assert d["fake"]["files"] == {}
    assert set(d["fake"]["functions"]) == {"amp_lesson/core.py:fake"}
    # a process the run started is traced too; one that ignores the environment is not,
    # and then the whole package is what the page ran
    assert "amp_lesson/core.py:add_one" in d["child"]["functions"]
    assert "amp_lesson/unused.py:never" not in d["child"]["functions"]
    assert "amp_lesson/unused.py:never" in d["untraced"]["functions"]


@pytest.mark.parametrize(
    ("kind", "edit", "retires"),
    [
        ("function body", _replace("amp_lesson/core.py", "x * SCALE", "SCALE * x"),
         {"doubles", "untraced", "traceback"}),
        ("module constant", _replace("amp_lesson/core.py", "SCALE = 2", "SCALE = 3"),
         {"doubles", "adds", "cpu", "gpu", "box", "child", "untraced", "traceback", "fake"}),
        ("class attribute", _replace("amp_lesson/core.py", "size = 3", "size = 4"),
         {"doubles", "adds", "cpu", "gpu", "box", "child", "untraced", "traceback", "fake"}),
        ("data file", _replace("docs/_data/value.json", "1.5", "2.5"), {"reads"}),
        ("a branch taken only on CUDA", _replace("amp_lesson/core.py", 'return "cuda"', 'return "gpu"'),
         {"gpu", "untraced", "traceback"}),
        ("a branch taken only on the CPU", _replace("amp_lesson/core.py", 'return "cpu"', 'return "CPU"'),
         {"cpu", "untraced", "traceback"}),
        ("a function run in a child process",
         _replace("amp_lesson/core.py", "x + 1", "1 + x"), {"adds", "child", "untraced", "traceback"}),
    ],
)  # fmt: skip
def test_an_edit_retires_exactly_the_pages_that_ran_what_it_changed(
    recorded: dict[str, Any], kind: str, edit: Any, retires: set[str]
) -> None:
    assert _retired(recorded, edit) == retires, kind


CORE_TEXT_EDITS = {"a docstring", "a module docstring", "a constant's docstring", "a comment",
                   "lines moved"}  # fmt: skip
"""Edits to core.py's text that no code runs, which a traceback of it quotes."""


@pytest.mark.parametrize(
    ("kind", "edit"),
    [
        ("a docstring", _replace("amp_lesson/core.py", "Twice ``x``.", "Two times x.")),
        ("a module docstring", _replace("amp_lesson/core.py", "The toy's core.", "Core.")),
        ("a constant's docstring", _replace("amp_lesson/core.py", "How much", "By how much")),
        ("a comment", _replace("amp_lesson/core.py", "def pick():", "def pick():  # note")),
        ("lines moved", _replace("amp_lesson/core.py", '"""The toy', '\n\n"""The toy')),
        ("a function nobody ran", _replace("amp_lesson/unused.py", "return 0", "return 1")),
        ("another data file", _replace("docs/_data/other.json", "0", "1")),
    ],
)  # fmt: skip
def test_an_edit_to_nothing_a_page_ran_keeps_every_recording(
    recorded: dict[str, Any], kind: str, edit: Any
) -> None:
    retired = _retired(recorded, edit)
    # the untraced page ran "everything"; the traceback page shows core.py's lines as they were
    shows_core = {"traceback"} if "core.py" in kind or kind in CORE_TEXT_EDITS else set()
    assert retired <= {"untraced"} | shows_core, kind
    assert retired >= shows_core, kind
    if kind in ("a function nobody ran",):
        assert retired == {"untraced"}


def test_a_cell_edit_retires_its_page_and_a_comment_in_a_cell_does_not(
    recorded: dict[str, Any],
) -> None:
    def nothing(root: Path) -> None:
        pass

    comment = {"doubles": ["from amp_lesson.core import double\nx = double(3)  # 6"]}
    assert _retired(recorded, nothing, cells=comment) == set()
    code = {"doubles": ["from amp_lesson.core import double\nx = double(4)  # six"]}
    assert _retired(recorded, nothing, cells=code) == {"doubles"}


def test_another_torch_release_retires_every_page_and_another_build_of_it_none(
    recorded: dict[str, Any],
) -> None:
    def nothing(root: Path) -> None:
        pass

    assert _retired(recorded, nothing, torch="2.13.0+cu130") == set()
    assert _retired(recorded, nothing, torch="2.14.0") == set(PAGES)


def test_a_page_shows_the_recording_until_its_code_changes_or_it_glues_a_new_name(
    recorded: dict[str, Any], tmp_path: Path
) -> None:
    """The page's state against its source now: prose edits keep it current."""
    root = recorded["root"]
    folder = tmp_path / "edition"
    folder.mkdir()
    stored = store.StoredPage("doubles", "recorded", "sha", ran=recorded["digests"]["doubles"])
    edition = store.Edition(folder, {"torch_version": "2.13.0+cu130"}, {"doubles": stored})
    edition_glued = {"six"}
    from amp_book import pages

    def state(markdown: str, cells: list[str]) -> ed.PageState:
        text = (
            FRONT_MATTER
            + markdown
            + "".join(f"\n```{{code-cell}} ipython3\n{c}\n```\n" for c in cells)
        )
        page = pages.read_text(text, "p.md")
        original = store.Edition.glued
        store.Edition.glued = lambda self, doc: edition_glued  # type: ignore[method-assign]
        try:
            return ed.page_state(
                edition, "doubles", page, root, "2.13.0", root / "src" / "amp_lesson"
            )
        finally:
            store.Edition.glued = original  # type: ignore[method-assign]

    cells = PAGES["doubles"]
    assert state("# P\n\nSix is {glue:text}`six`.\n", cells).state == store.CURRENT
    assert state("# P\n\nA new sentence. Six: {glue:text}`six`.\n", cells).state == store.CURRENT
    new_name = state("# P\n\n{glue:text}`seven`\n", cells)
    assert (new_name.state, new_name.note) == (store.EARLIER, "glued seven")
    edited = state("# P\n", [cells[0].replace("3", "5")])
    assert (edited.state, edited.note) == (store.EARLIER, "its code cells")
    assert ed.page_state(edition, "doubles", None, root, "2.13.0").state == store.EARLIER
    old = store.Edition(folder, {}, {"doubles": store.StoredPage("doubles", "recorded", "sha")})
    assert ed.page_state(old, "doubles", pages.read_text("# P\n", "p.md"), root, "2.13.0").note == (
        "recorded before the book noted what a run ran"
    )


def test_the_notes_survive_a_process_that_ends_without_exiting(tmp_path: Path) -> None:
    """Each note is written as it is made: a worker ended by os._exit keeps them."""
    notes = tmp_path / "notes"
    notes.mkdir()
    code = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1] / "book" / "src")!r})
        from amp_book.edition import ran
        ran.start({str(notes / "x.ran")!r})
        from amp_lesson.formats import FORMATS
        FORMATS["fp16"].eps
        os._exit(0)
    """)
    subprocess.run([sys.executable, "-c", code], check=True)
    text = (notes / "x.ran").read_text()
    assert "formats.py\t<module>" in text
    summary = ran.summarize(text, Path(__file__).resolve().parents[1])
    assert "amp_lesson/formats.py:<module>" in summary["ran"]
