"""One version: the package's, the book's build, the changelog, the citation and the notebooks'
install cell agree (CHANGELOG.md says how the version moves)."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
import tomllib
import yaml
from helpers import ROOT

import amp_lesson
from amp_book import urls

pytestmark = pytest.mark.fast

VERSION = amp_lesson.__version__
HEADING = re.compile(
    r"^## (Unreleased|\[?(\d+\.\d+\.\d+)\]? - (\d{4}-\d{2}-\d{2}))\s*$", re.MULTILINE
)


def latest_changelog_entry(text: str) -> str | None:
    """The newest entry's version in a changelog: ``None`` for **Unreleased**.

    >>> latest_changelog_entry("# Changelog\\n\\n## Unreleased\\n\\n## [0.1.0] - 2026-12-04\\n")
    >>> latest_changelog_entry("# Changelog\\n\\n## [0.2.0] - 2027-01-05\\n- x\\n")
    '0.2.0'
    """
    m = HEADING.search(text)
    if m is None:
        raise ValueError("no '## Unreleased' or '## [X.Y.Z] - YYYY-MM-DD' heading")
    return m[2]


def test_the_package_and_the_books_build_have_one_version() -> None:
    lesson = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" in lesson["project"]["dynamic"]
    assert lesson["tool"]["hatch"]["version"]["path"] == "src/amp_lesson/__init__.py"
    book = tomllib.loads((ROOT / "book" / "pyproject.toml").read_text())
    assert book["project"]["version"] == VERSION
    assert re.fullmatch(r"\d+\.\d+\.\d+(\.dev\d+)?", VERSION), VERSION


def test_the_changelogs_latest_entry_is_the_packages_version() -> None:
    latest = latest_changelog_entry((ROOT / "CHANGELOG.md").read_text(encoding="utf-8"))
    if ".dev" in VERSION:
        assert latest is None, f"{VERSION} is a development version: the newest entry is Unreleased"
    else:
        assert latest == VERSION, f"the newest entry is {latest}, the package is {VERSION}"


def test_the_citation_names_the_packages_version() -> None:
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert citation["version"] == VERSION
    assert citation["license"] == "BSD-3-Clause"
    assert (
        tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"]
        == (citation["license"])
    )


def test_the_notebooks_install_the_packages_version() -> None:
    """Every committed notebook installs the package from the reference its version names: the
    release's tag, or, for a development version, the branch the notebook was made from."""
    ref = "main" if ".dev" in VERSION else f"v{VERSION}"
    assert urls.install_ref() == ref
    spec = urls.install_spec()
    assert spec.endswith(f"@{ref}")
    notebooks = sorted((ROOT / "notebooks").rglob("*.ipynb"))
    assert notebooks
    for path in notebooks:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        install = next(c for c in cells if c["cell_type"] == "code")
        assert spec in "".join(install["source"]), path


def test_a_release_is_tagged() -> None:
    """A release version names a tag that exists, where the clone has its history and tags
    (CI's checkout of depth 1 has neither; then the test says so and skips)."""
    if ".dev" in VERSION:
        pytest.skip(f"{VERSION} is a development version: no tag to look for")
    git = ["git", "-C", str(ROOT)]
    shallow = subprocess.run(
        [*git, "rev-parse", "--is-shallow-repository"], check=False, capture_output=True, text=True
    )
    if shallow.returncode != 0 or shallow.stdout.strip() != "false":
        pytest.skip("no full git history here to look for the tag in")
    tags = subprocess.run(
        [*git, "tag", "--list", f"v{VERSION}"], check=True, capture_output=True, text=True
    )
    assert tags.stdout.strip() == f"v{VERSION}", f"no tag v{VERSION}"


def test_install_ref_refuses_a_version_it_cannot_name() -> None:
    with pytest.raises(
        ValueError, match=r"version must be X\.Y\.Z or X\.Y\.Z\.devN, got '1\.0rc1'"
    ):
        urls.install_ref("1.0rc1")
