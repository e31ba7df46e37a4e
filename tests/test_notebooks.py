"""The Colab copies under notebooks/ match the book's pages."""

from __future__ import annotations

import json

import notebooks


def test_notebook_twins_are_in_step_with_the_pages(capsys) -> None:
    status = notebooks.main(["check"])
    assert status == 0, capsys.readouterr().err


def test_every_twin_starts_with_the_setup_cells_and_keeps_the_page_code() -> None:
    for page in notebooks.pages():
        nb = json.loads(notebooks.render(page))
        assert nb["cells"][0]["cell_type"] == "markdown"
        assert "amp_lesson" in "".join(nb["cells"][1]["source"])
        code = ["".join(c["source"]) for c in nb["cells"][2:] if c["cell_type"] == "code"]
        assert code, page
        text = page.read_text(encoding="utf-8")
        for cell in code:
            assert cell.strip() in text, f"{page}: cell not from the page"
