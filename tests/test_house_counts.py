"""tools/house_counts.py: what it counts, and the two counts this repository keeps at zero."""

from __future__ import annotations

from pathlib import Path

import house_counts
from helpers import ROOT


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_each_count_finds_what_it_names(tmp_path: Path) -> None:
    lesson, book = tmp_path / "src" / "amp_lesson", tmp_path / "book" / "src" / "amp_book"
    body = "".join(f"    x{i} = {i}\n" for i in range(81))
    _write(lesson / "__init__.py", '__all__ = ["shown", "built"]\n')
    _write(lesson / "big.py", "\n" * 601 + f"def long():\n    '''Doc.'''\n{body}")
    _write(lesson / "core.py", "def _inner():\n    pass\n\ndef shown():\n    pass\n")
    _write(lesson / "pkg" / "__init__.py", "from amp_lesson.pkg import _own\n")
    _write(lesson / "pkg" / "_own.py", "X = 1\n")
    _write(
        book / "__init__.py", "from amp_lesson.core import _inner\nfrom amp_lesson import built\n"
    )
    _write(tmp_path / "docs" / "page.md", "`shown()`\n")
    _write(tmp_path / "tools" / "t.py", "")
    found = house_counts.counts(tmp_path)
    assert found["modules over 600 lines"] == ["amp_lesson.big (684)"]
    assert found["functions over 80 lines of code"] == ["amp_lesson.big.long (82)"]
    # a package's own private submodule is its business; another module's _name is not
    assert found["private names crossing modules"] == ["amp_book -> amp_lesson.core._inner"]
    assert found["lesson __all__ names used only by the build"] == ["built"]


def test_the_lesson_holds_no_name_only_the_build_uses_and_no_private_name_crosses() -> None:
    found = house_counts.counts(ROOT)
    assert found["lesson __all__ names used only by the build"] == []
    assert found["private names crossing modules"] == []
