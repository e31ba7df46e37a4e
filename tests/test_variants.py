"""The authors' page that lists every wording of every claim (``amp_book.variants``)."""

from __future__ import annotations

import json

import pytest
from bs4 import BeautifulSoup

from amp_book import workdirs
from amp_book.variants import VARIANT_CLASS, glued_text, in_context, read_claims
from amp_lesson.claims import CLAIM_RECORD_PREFIX


def _entry(value: object) -> dict[str, object]:
    """A glue entry as MyST-NB stores one: the value's repr as text/plain."""
    return {"data": {"text/plain": repr(value)}, "metadata": {}}


def test_glued_text_unquotes_a_string_and_keeps_any_other_repr():
    assert glued_text(_entry("it's 'quoted'")) == "it's 'quoted'"
    assert glued_text(_entry(3.5)) == "3.5"
    assert glued_text({"data": {"text/plain": "tensor([1.])"}}) == "tensor([1.])"


def test_read_claims_finds_each_record_and_the_paragraphs_that_glue_it():
    record = {"key": "same", "says": "They agree.", "otherwise": "They differ.", "holds": False}
    glue = {
        "n": _entry("4"),
        CLAIM_RECORD_PREFIX + "same": _entry(json.dumps(record)),
        CLAIM_RECORD_PREFIX + "fell": _entry(
            json.dumps({"key": "fell", "says": "fell", "otherwise": None, "holds": True})
        ),
    }
    markdown = (
        "After {glue:text}`n` steps: {glue:text}`same`\n\nThe loss {glue:text}`fell`.\n\n"
        "Nothing glued here."
    )
    same, fell = read_claims(glue, markdown)
    assert same.key == "same"
    assert not same.holds
    assert same.contexts == ("After {glue:text}`n` steps: {glue:text}`same`",)
    assert [w[1:] for w in same.wordings] == [("They agree.", False), ("They differ.", True)]
    assert fell.otherwise is None
    assert [w[1:] for w in fell.wordings] == [("fell", True)]


def test_in_context_fills_every_glued_value_and_reads_roles_as_their_text():
    paragraph = (
        "See {ref}`the table <accum-table>`. With {glue:text}`n` micro-batches the weights "
        "{glue:text}`verdict` those of `train_full_batch`. **Next** we time it."
    )
    assert (
        in_context(paragraph, "verdict", "differ in the last bit from", {"n": "4"})
        == "With 4 micro-batches the weights differ in the last bit from those of "
        "train_full_batch."
    )
    # A whole-sentence wording is its own sentence; its neighbours are left out.
    assert in_context("{glue:text}`v` It ran.", "v", "All agree.", {}) == "All agree."


@pytest.mark.book
def test_the_claims_page_lists_every_wording_of_every_claim_of_the_book(built_book):
    """Every claim record any page glued, with each of its wordings, is on guide/claims.html."""
    execute = workdirs.executed_folder(built_book)
    expected: dict[str, list[dict[str, object]]] = {}
    for glue_path in sorted(execute.rglob("*.glue.json")):
        docname = glue_path.relative_to(execute).as_posix().removesuffix(".glue.json")
        glue = json.loads(glue_path.read_text(encoding="utf-8"))
        records = [
            json.loads(glued_text(v)) for k, v in glue.items() if k.startswith(CLAIM_RECORD_PREFIX)
        ]
        if records:
            expected[docname] = records
    assert len(expected) >= 15  # the chapter and beyond pages that claim
    soup = BeautifulSoup((built_book / "guide" / "claims.html").read_text("utf-8"), "html.parser")
    listed = 0
    for docname, records in expected.items():
        section = soup.find(id=f"claims-{docname.replace('/', '-')}")
        assert section is not None, docname
        shown = [
            " ".join(span.get_text().split()) for span in section.select(f"span.{VARIANT_CLASS}")
        ]
        for record in records:
            for words in (record["says"], record["otherwise"]):
                if words is not None:
                    assert " ".join(str(words).split()) in shown, (docname, record["key"], words)
                    listed += 1
            chosen = record["says"] if record["holds"] else record["otherwise"]
            marks = [
                p.get_text(" ", strip=True)
                for p in section.find_all("p")
                if "(this build)" in p.get_text() and p.find("span", class_=VARIANT_CLASS)
            ]
            assert any(" ".join(str(chosen).split()) in m for m in marks), record["key"]
    assert listed == sum(1 for s in soup.select(f"p > span.{VARIANT_CLASS}"))


@pytest.mark.book
def test_a_glued_whole_sentence_reads_as_prose_and_a_glued_value_stays_marked(built_book):
    """MyST-NB bolds glued text; a sentence the run chose is set like the prose around it."""
    from amp_book.prose import RUN_SENTENCE_CLASS, is_whole_sentence

    page = built_book / "chapter" / "why-mixed-precision.html"
    soup = BeautifulSoup(page.read_text("utf-8"), "html.parser")
    glued = soup.select("article span.pasted-text")
    sentences = [s for s in glued if RUN_SENTENCE_CLASS in s["class"]]
    values = [s for s in glued if RUN_SENTENCE_CLASS not in s["class"]]
    assert any(s.get_text().startswith("A weight of 1 stored in FP16") for s in sentences)
    assert all(is_whole_sentence(s.get_text()) for s in sentences)
    assert values, "the page's glued numbers keep MyST-NB's mark"
    assert not any(is_whole_sentence(s.get_text()) for s in values)


def test_the_directive_alone_lists_both_wordings_and_marks_the_run_s(tmp_path):
    """In a two-page book built in this process with MyST-NB and this extension alone."""
    from helpers import build_in_process

    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text("")
    (src / "index.md").write_text("# Book\n\n```{toctree}\nrun\nlist\n```\n")
    (src / "run.md").write_text(
        "---\nfile_format: mystnb\nkernelspec: {name: python3, display_name: Python 3}\n---\n"
        "# Run\n\n```{code-cell} ipython3\nfrom amp_lesson.claims import claim\n\n"
        'value = 3\nclaim("big", value > 1, "The value is big.", "The value is small.")\n```\n\n'
        "{glue:text}`big`\n"
    )
    (src / "list.md").write_text("# Claims\n\n```{claim-variants}\n```\n")
    html = build_in_process(src, tmp_path / "out", ["myst_nb", "amp_book.variants"]).outdir
    soup = BeautifulSoup((html / "list.html").read_text("utf-8"), "html.parser")
    shown = [" ".join(s.get_text().split()) for s in soup.select(f"span.{VARIANT_CLASS}")]
    assert shown == ["The value is big.", "The value is small."]
    (chosen,) = [p for p in soup.find_all("p") if "(this build)" in p.get_text()]
    assert "The value is big." in chosen.get_text()
