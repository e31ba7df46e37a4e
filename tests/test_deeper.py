"""Going deeper blocks: collapsed on the page, a section in the notebook, errors that name the page."""

from __future__ import annotations

from pathlib import Path

from bs4 import BeautifulSoup
from helpers import build_in_process

from amp_book.export import myst_to_markdown, titles_and_labels

EXTENSIONS = ["myst_parser", "amp_book.deeper"]


def _build(tmp_path: Path, body: str, *, check: bool = True) -> tuple[BeautifulSoup | None, str]:
    src = tmp_path / "src"
    src.mkdir(parents=True)
    (src / "conf.py").write_text("", encoding="utf-8")
    (src / "index.md").write_text("# Book\n\n" + body, encoding="utf-8")
    build = build_in_process(src, tmp_path / "out", EXTENSIONS, check=check)
    page = build.outdir / "index.html"
    soup = (
        BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser") if page.is_file() else None
    )
    return soup, build.stdout + build.stderr


def test_a_block_of_prose_and_a_block_between_markers_collapse_with_their_titles(
    tmp_path: Path,
) -> None:
    body = (
        "Before.\n\n"
        "(why-label)=\n:::{deeper} Why it holds\nThe proof.\n:::\n\n"
        "Between, see {ref}`why-label`.\n\n"
        ":::{deeper} Two more runs\n:::\n\nFirst.\n\n```python\nx = 1\n```\n\nSecond.\n\n"
        ":::{deeper-end}\n:::\n\nAfter.\n"
    )
    soup, _ = _build(tmp_path, body)
    assert soup is not None
    blocks = soup.select("details.amp-deeper")
    assert [b.summary.get_text(" ", strip=True) for b in blocks] == [
        "Going deeper Why it holds",
        "Going deeper Two more runs",
    ]
    assert all(not b.has_attr("open") for b in blocks)
    assert blocks[0]["id"] == "why-label"
    assert [p.get_text() for p in blocks[1].select("p")] == ["First.", "Second."]
    assert blocks[1].select_one("pre").get_text().strip() == "x = 1"
    link = soup.find("a", href="#why-label")
    assert link is not None
    assert link.get_text() == "Going deeper: Why it holds"
    main = [p.get_text() for p in soup.select("section > p")]
    assert main == ["Before.", "Between, see Going deeper: Why it holds.", "After."]


def test_a_block_left_open_nested_or_across_a_heading_fails_the_build_naming_the_page(
    tmp_path: Path,
) -> None:
    cases = {
        "open": ":::{deeper} Never closed\n:::\n\nText.\n",
        "nested": ":::{deeper} Outer\n:::\n\n:::{deeper} Inner\n:::\n\n:::{deeper-end}\n:::\n",
        "heading": ":::{deeper} Across\n:::\n\n## A heading\n\nText.\n\n:::{deeper-end}\n:::\n",
        "stray": "Text.\n\n:::{deeper-end}\n:::\n",
    }
    expected = {
        "open": "the Going deeper block 'Never closed' is never closed ({deeper-end})",
        "nested": "the Going deeper block 'Inner' opens inside 'Outer'",
        "heading": "closes at another level of the page",
        "stray": "a {deeper-end} closes no open Going deeper block",
    }
    for name, body in cases.items():
        _, log = _build(tmp_path / name, body, check=False)
        assert expected[name] in log, (name, log[-2000:])
        assert "index.md:" in log, (name, log[-2000:])


def test_in_a_notebook_a_block_of_prose_is_a_details_section_and_markers_are_marked() -> None:
    prose, _ = myst_to_markdown(":::{deeper} Why\nThe proof.\n:::", {})
    assert prose.strip() == (
        "<details>\n<summary>Going deeper: Why</summary>\n\nThe proof.\n\n</details>"
    )
    opened, _ = myst_to_markdown(":::{deeper} Two more runs\n:::", {})
    assert opened.strip().startswith("**Going deeper: Two more runs**")
    closed, _ = myst_to_markdown(":::{deeper-end}\n:::", {})
    assert closed.strip() == "---"


def test_a_label_before_a_block_is_titled_as_the_block_for_the_notebooks_links() -> None:
    _, labels = titles_and_labels({"p": "# P\n\n(why)=\n:::{deeper} Why it holds\nText.\n:::\n"})
    assert labels["why"] == ("p", "why", "Going deeper: Why it holds")


def test_a_title_takes_inline_markup_and_a_reference_to_it_reads_as_plain_text(
    tmp_path: Path,
) -> None:
    body = "(t)=\n:::{deeper} Why `scaler.update()` follows\n:::\n\nBody.\n\n:::{deeper-end}\n:::\n\n{ref}`t`\n"
    soup, _ = _build(tmp_path, body)
    assert soup is not None
    summary = soup.select_one("details.amp-deeper > summary")
    assert summary.select_one("code").get_text() == "scaler.update()"
    assert "`" not in summary.get_text()
    assert soup.find("a", href="#t").get_text() == "Going deeper: Why scaler.update() follows"
