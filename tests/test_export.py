"""Pages as plain Jupyter notebooks: MyST to Markdown, passages printed by the run, scripts."""

from __future__ import annotations

import ast
import re
import textwrap

import pytest

from amp_book import export, urls
from amp_book.corrections import TITLE as CORRECTION_TITLE
from amp_book.export import export_notebook, myst_to_markdown
from amp_book.export import markdown as myst
from amp_lesson.playground import explorer_rows

GLUE = {
    "fp16_max": {"text/plain": "65504.0"},
    "tiny": {"text/plain": "'6.104e-05'"},
    "fig": {"text/plain": "<Figure>", "image/png": "iVBORw0KGgo="},
    "table": {"text/plain": "<Table>", "text/html": "<table><tr><td>1</td></tr></table>"},
}


def md(text: str, docname: str = "chapter/formats") -> str:
    out, _ = myst_to_markdown(
        textwrap.dedent(text), GLUE, docs_url="https://book.example/en/latest", docname=docname
    )
    return out


# -- inline markup --------------------------------------------------------------------------


def test_glued_values_are_substituted_with_their_format() -> None:
    assert (
        md("Max {glue:text}`fp16_max:.0f`, tiny {glue:text}`tiny`.") == "Max 65504, tiny 6.104e-05."
    )
    assert md("{glue}`fp16_max`") == "65504.0"


def test_a_missing_glued_value_is_an_error_naming_it() -> None:
    with pytest.raises(KeyError, match=r"no glued value for \['nope'\]"):
        md("{glue:text}`nope`")


def test_code_spans_are_left_alone_roles_inside_them_too() -> None:
    assert md("Write ``{glue:text}`key` `` in prose.") == "Write ``{glue:text}`key` `` in prose."
    assert md("Call `glue()` first.") == "Call `glue()` first."


def test_cross_references_become_links_or_text() -> None:
    assert md("See {doc}`the formats page <formats>`.") == (
        "See [the formats page](https://book.example/en/latest/chapter/formats.html)."
    )
    assert md("See {doc}`../corrections`.") == (
        "See [corrections](https://book.example/en/latest/corrections.html)."
    )
    assert md("The {ref}`cell above <fp16-cast-cell>` prints it.") == "The cell above prints it."


def test_targets_and_comments_are_dropped() -> None:
    assert md("(fp16-cast-cell)=\n\n% a note to authors\nText.") == "Text."


# -- blocks -----------------------------------------------------------------------------------


def test_admonitions_and_corrections_become_quoted_blocks() -> None:
    out = md(
        """
        :::{lesson-correction} the scale
        A common statement: 65536; the run shows {glue:text}`fp16_max:.0f`.
        :::

        ```{admonition} Why
        Because.
        ```
        """
    )
    assert out == (
        f"> **{CORRECTION_TITLE}: the scale**\n>\n"
        "> A common statement: 65536; the run shows 65504.\n\n"
        "> **Why**\n>\n> Because."
    )


def test_a_dropdown_becomes_a_details_section() -> None:
    out = md(":::{dropdown} Hint\nCount the exponent bits.\n:::")
    assert out == "<details>\n<summary>Hint</summary>\n\nCount the exponent bits.\n\n</details>"


def test_fenced_code_is_copied_verbatim_directives_inside_included() -> None:
    source = "````markdown\n:::{selfcheck-choice} Q?\n- [x] right\n:::\n````"
    assert md(source) == source


def test_glued_figures_and_tables_are_embedded() -> None:
    out, attachments = myst_to_markdown(
        "```{glue:figure} fig\n:alt: A map.\n\nThe map.\n```\n\n```{glue} table\n```",
        GLUE,
        docname="chapter/review",
    )
    assert "![A map.](attachment:fig.png)" in out
    assert "*The map.*" in out
    assert attachments == {"fig.png": {"image/png": "iVBORw0KGgo="}}
    assert "<table><tr><td>1</td></tr></table>" in out


# -- self-checks: the question in the open, answers collapsed, nothing marked right ------------

CHOICE = """
:::{selfcheck-choice} A gradient of `1e-8` is cast to FP16. What is stored?
:id: fp16-underflow

- [x] `0.0`: it underflows

  Below half the smallest subnormal it rounds to zero.
- [ ] `inf`: it overflows

  Only beyond {glue:text}`fp16_max:.0f`.

Loss scaling exists for exactly this.
:::
"""


def _split_answer(out: str) -> tuple[str, str]:
    before, _, rest = out.partition("<details>")
    assert rest, f"no collapsed answer in:\n{out}"
    return before, rest


def test_a_choice_shows_the_options_unmarked_and_hides_the_answer() -> None:
    question, answer = _split_answer(md(CHOICE))
    assert "A gradient of `1e-8` is cast to FP16. What is stored?" in question
    assert "- `0.0`: it underflows\n- `inf`: it overflows" in question
    assert "[x]" not in question
    assert "[ ]" not in question
    assert "right" not in question.lower().replace("choose", "")
    assert "rounds to zero" not in question  # notes belong to the answer
    assert "**Answer:** `0.0`: it underflows" in answer
    assert "Only beyond 65504." in answer
    assert "Loss scaling exists for exactly this." in answer
    assert "[x]" not in answer


def test_definition_style_notes_are_read_too() -> None:
    out = md(
        ":::{selfcheck-choice} Order?\n:mode: multiple\n"
        "- [x] A then B\n  : Because A first.\n- [ ] B then A\n  : Tempting.\n:::"
    )
    question, answer = _split_answer(out)
    assert "Choose every option that applies." in question
    assert "Because A first." in answer
    assert "Tempting." in answer


def test_predict_hides_its_answer() -> None:
    question, answer = _split_answer(
        md(":::{selfcheck-predict} What order?\n:answer: zero_grad first\nExplained.\n:::")
    )
    assert "What order?" in question
    assert "zero_grad" not in question
    assert "**Answer:** zero_grad first" in answer
    assert "Explained." in answer


def test_sort_lists_items_without_their_buckets() -> None:
    question, answer = _split_answer(
        md(
            ":::{selfcheck-sort} Which dtype?\n:buckets: FP16 | FP32\n"
            "- [FP16] activations\n- [FP32] master weights\n  Small changes.\n:::"
        )
    )
    assert "- activations\n- master weights" in question
    assert "[FP16]" not in question
    assert "**FP16** or **FP32**" in question
    assert "- activations: **FP16**" in answer
    assert "- master weights: **FP32**. Small changes." in answer


def test_refill_blanks_the_column_and_hides_the_values() -> None:
    question, answer = _split_answer(
        md(
            ":::{selfcheck-refill} Fill in the bits.\n:column: bits\n"
            "| format | bits |\n|---|---|\n| FP16 | 16 |\n| FP32 | 32 |\n:::"
        )
    )
    assert "| FP16 | ? |" in question
    assert "| FP32 | ? |" in question
    assert "16" not in question.replace("FP16", "")
    assert "32" not in question.replace("FP32", "")
    assert "| FP16 | 16 |" in answer


def test_discuss_keeps_its_hint_collapsed() -> None:
    question, answer = _split_answer(md(":::{selfcheck-discuss} Why?\n:hint: Think of range.\n:::"))
    assert "Why?" in question
    assert "range" not in question
    assert "Think of range." in answer


def test_step_through_shows_rows_and_asks_next() -> None:
    question, answer = _split_answer(
        md(
            ":::{selfcheck-step-through} Watch it shrink.\n:next: What comes next?\n"
            "| step | value |\n|---|---|\n| 1 | big |\n\nZero again.\n:::"
        )
    )
    assert "| 1 | big |" in question
    assert "**Then:** What comes next?" in question
    assert "Zero again." in answer


# -- code ----------------------------------------------------------------------------------------


def test_glue_imports_are_rewritten_and_the_calls_kept() -> None:
    source = "from myst_nb import glue\nx = 2\nglue('x', x, display=False)"
    assert export.rewrite_glue_imports(source) == (
        "from amp_lesson.notebook import glue\nx = 2\nglue('x', x, display=False)"
    )
    assert export.rewrite_glue_imports("print('no glue')") == "print('no glue')"
    with pytest.raises(ValueError, match="only glue has a twin"):
        export.rewrite_glue_imports("from myst_nb import glue, NbParser")
    with pytest.raises(ValueError, match="imports myst_nb itself"):
        export.rewrite_glue_imports("import myst_nb")


def test_markdown_blocks_keep_code_details_and_maths_whole() -> None:
    text = "A.\n\n```\nx\n\ny\n```\n\n<details>\n\nB.\n\n</details>\n\n$$\na\n\nb\n$$\n\nC."
    assert export.markdown_blocks(text) == [
        "A.",
        "```\nx\n\ny\n```",
        "<details>\n\nB.\n\n</details>",
        "$$\na\n\nb\n$$",
        "C.",
    ]


def test_passages_that_quote_the_run_are_printed_and_headings_stay_markdown() -> None:
    text, _ = myst_to_markdown(
        "## Range\nFP16 tops out at {glue:text}`fp16_max:.0f`.\n\nNo run here.\n\n"
        "Nor here.\n\nTiny: {glue}`tiny`.",
        GLUE,
        keep_glue=True,
    )
    parts = export.split_passages(text)
    assert [printed for printed, _ in parts] == [False, True, False, True]
    assert parts[0][1] == "## Range"
    assert parts[2][1] == "No run here.\n\nNor here."
    cell = export.text_cell(parts[1][1], GLUE, "CPU (test, 1 core)")
    assert cell["source"] == (
        f"{export.TEXT_CELL_TITLE}\n"
        'show_text(r"""\nFP16 tops out at {glue:text}`fp16_max:.0f`.\n""")'
    )
    assert cell["metadata"]["jupyter"] == {"source_hidden": True}
    assert cell["metadata"]["cellView"] == "form"
    passage, label = (o["data"]["text/markdown"] for o in cell["outputs"])
    assert passage == "FP16 tops out at 65504."
    assert label == export.build_label("CPU (test, 1 core)")
    assert "CPU (test, 1 core)" in label


def test_a_printed_passage_shows_a_glued_figure_and_table_inside_it() -> None:
    text, _ = myst_to_markdown(
        "::::{dropdown} More\n```{glue:figure} fig\n:alt: A plot.\n\nThe plot.\n```\n"
        "```{glue} table\n```\n::::",
        GLUE,
        keep_glue=True,
    )
    ((printed, part),) = export.split_passages(text)
    assert printed
    assert "{glue:figure}`fig`" in part
    assert "{glue:figure}`table`" in part
    passage = export.text_cell(part, GLUE, "CPU")["outputs"][0]["data"]["text/markdown"]
    assert passage.startswith("<details>\n<summary>More</summary>")
    assert '<img alt="" src="data:image/png;base64,iVBORw0KGgo=">' in passage
    assert "<table><tr><td>1</td></tr></table>" in passage
    assert passage.rstrip().endswith("</details>")


def test_a_cross_reference_to_an_unknown_target_is_an_error() -> None:
    labels = {"known": ("chapter/a", "known", "A section")}
    titles = {"chapter/a": "Page A"}
    out, _ = myst_to_markdown(
        "See {ref}`known` and {doc}`a`.", {}, docname="chapter/b", labels=labels, titles=titles
    )
    assert out == "See [A section](/chapter/a.html#known) and [Page A](/chapter/a.html)."
    with pytest.raises(ValueError, match=r"unknown targets: \['\{ref\}`gone`'\]"):
        myst_to_markdown("See {ref}`gone`.", {}, labels=labels, titles=titles)
    with pytest.raises(ValueError, match=r"\{doc\}`missing`"):
        myst_to_markdown("See {doc}`missing`.", {}, labels=labels, titles=titles)


def _page(*cells: dict) -> dict:
    return {"cells": list(cells), "metadata": {}}


def _code(source: str, *tags: str, outputs: list | None = None) -> dict:
    return {
        "cell_type": "code",
        "metadata": {"tags": list(tags)} if tags else {},
        "source": source,
        "outputs": outputs or [],
    }


def test_a_notebook_export_keeps_hidden_code_collapsed_and_prints_the_runs_passages() -> None:
    glue_output = {
        "output_type": "display_data",
        "metadata": {"scrapbook": {"name": "n", "mime_prefix": "application/papermill.record/"}},
        "data": {"application/papermill.record/text/plain": "3"},
    }
    printed = {"output_type": "stream", "name": "stdout", "text": "3\n"}
    nb = _page(
        {"cell_type": "markdown", "metadata": {}, "source": "# Page\n\nn is {glue:text}`n`."},
        _code("from myst_nb import glue\nsecret = 1\nglue('s', secret)", "remove-cell"),
        {"cell_type": "markdown", "metadata": {"tags": ["remove-cell"]}, "source": "Hidden."},
        _code(
            "from myst_nb import glue\nn = 3 + secret - 1\nprint(n)\nglue('n', n)",
            outputs=[printed, glue_output],
        ),
    )
    glue = myst.glue_values_from_outputs(nb)
    assert glue == {"n": {"text/plain": "3"}}
    out = export_notebook(
        nb, glue, docname="chapter/x", executed=True, repository="https://github.com/o/r"
    )
    sources = [c["source"] for c in out["cells"]]
    assert sources[2] == "# Page"
    # The printed passage and the hidden cell after it are one hidden cell, in their order.
    assert sources[3] == (
        f'{export.TEXT_CELL_TITLE}\n\nshow_text(r"""\nn is {{glue:text}}`n`.\n""")\n\n'
        "from amp_lesson.notebook import glue\nsecret = 1\nglue('s', secret)"
    )
    assert out["cells"][3]["outputs"][0]["data"]["text/markdown"] == "n is 3."
    assert out["cells"][3]["metadata"]["jupyter"] == {"source_hidden": True}
    assert sources[4:] == [
        "from amp_lesson.notebook import glue\nn = 3 + secret - 1\nprint(n)\nglue('n', n)",
    ]
    assert "jupyter" not in out["cells"][4]["metadata"]
    assert out["cells"][4]["outputs"] == [printed]
    assert "myst_nb" not in str(out)
    assert "Hidden." not in str(out)
    ref = urls.install_ref()  # the version's tag, or main for a development version
    assert f"amp-lesson[notebooks] @ git+https://github.com/o/r@{ref}" in sources[1]
    assert "from amp_lesson.notebook import show_text" in sources[1]
    assert "Runtime → Change runtime type" in sources[0]
    assert [c["id"] for c in out["cells"]] == [f"cell-{i}" for i in range(5)]
    bare = export_notebook(
        nb, glue, docname="chapter/x", executed=False, repository="https://github.com/o/r"
    )
    assert bare["cells"][4]["outputs"] == []
    assert bare["cells"][3]["outputs"] == out["cells"][3]["outputs"]  # the build's passage
    with pytest.raises(TypeError, match="executed must be True or False"):
        export_notebook(nb, glue, docname="chapter/x", executed="yes")
    with pytest.raises(ValueError, match="built_on must name"):
        export_notebook(nb, glue, docname="chapter/x", executed=True, built_on=" ")


def test_a_solution_is_collapsed_after_an_empty_cell_to_write_in() -> None:
    nb = _page(
        {"cell_type": "markdown", "metadata": {}, "source": "## Milestone 1: the loop"},
        _code("def loop():\n    return 1", "hide-input", "solution"),
        _code("loop()"),
    )
    out = export_notebook(
        nb, {}, docname="c/x", executed=False, repository="https://github.com/o/r"
    )
    mine, solution, after = out["cells"][3:]
    assert mine["source"].startswith("# Your code for \u201cMilestone 1: the loop\u201d.")
    assert mine["metadata"] == {}
    assert mine["outputs"] == []
    assert solution["source"].splitlines()[0] == (
        "#@title Solution to \u201cMilestone 1: the loop\u201d (double-click to show)"
    )
    assert solution["source"].endswith("def loop():\n    return 1")
    assert solution["metadata"]["cellView"] == "form"
    assert solution["metadata"]["jupyter"] == {"source_hidden": True}
    assert after["source"] == "loop()"
    assert "cellView" not in after["metadata"]


def test_a_script_is_the_notebooks_cells_with_its_text_as_comments() -> None:
    nb = _page(
        {"cell_type": "markdown", "metadata": {}, "source": "# Page\n\nn is {glue:text}`n`."},
        _code("from myst_nb import glue\nn = 3\nglue('n', n, display=False)"),
    )
    out = export_notebook(
        nb, {"n": {"text/plain": "3"}}, docname="c/x", executed=False,
        repository="https://github.com/o/r",
    )  # fmt: skip
    script = export.export_script(out)
    ast.parse(script)
    assert script.startswith('"""Page: a page of the book')
    ref = urls.install_ref()
    assert f'#     pip install "amp-lesson[notebooks] @ git+https://github.com/o/r@{ref}' in script
    assert "%pip" not in script
    assert "# %% [markdown]\n# # Page" in script
    assert 'show_text(r"""\nn is {glue:text}`n`.\n""")' in script


def test_the_repository_is_declared_once_in_pyproject() -> None:
    import tomllib
    from helpers import ROOT

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    repository = "https://github.com/amp-lesson/amp-lesson"
    assert urls.repository_url() == declared["Repository"] == repository
    assert urls.github_slug() == "amp-lesson/amp-lesson"
    assert urls.install_spec("0.1.0") == (
        "amp-lesson[notebooks] @ git+https://github.com/amp-lesson/amp-lesson@v0.1.0"
    )
    assert urls.documentation_url() == declared["Documentation"] + "/en/latest"


def test_a_numbered_reference_keeps_its_words() -> None:
    out, _ = myst_to_markdown(
        "As {numref}`Figure {number} <fig-hist>` shows, and {numref}`fig-hist` too.",
        {},
        docs_url="https://b.example",
        labels={"fig-hist": ("beyond/h", "fig-hist", "Gradient histogram")},
    )
    assert out == (
        "As [Figure](https://b.example/beyond/h.html#fig-hist) shows, and "
        "[Gradient histogram](https://b.example/beyond/h.html#fig-hist) too."
    )


def test_a_playground_links_to_the_book_and_each_names_its_function() -> None:
    out = md(":::{scaler-playground}\n:steps: xx\n\nWith JavaScript off, the trace above.\n:::")
    assert out.startswith(
        "*The GradScaler playground is interactive in "
        "[the online book](https://book.example/en/latest/chapter/formats.html).* "
    )
    assert "JavaScript" not in out  # the site's worked example is not in a notebook
    assert out.endswith(myst.IN_A_NOTEBOOK["scaler-playground"])
    # the calls it names run, and give the playground's trace and summary
    from amp_lesson.playground import describe_trace, read_steps, scaler_trace

    call = re.search(r"`amp_lesson\.playground\.(scaler_trace\(.*?\))`", out)[1]
    settings = {"init_scale": 4.0, "growth_factor": 2.0, "backoff_factor": 0.5,
                "growth_interval": 2}  # fmt: skip
    pattern = "x.."
    names = {"scaler_trace": scaler_trace, "read_steps": read_steps}
    rows = eval(call, names, {"settings": settings, "pattern": pattern})
    assert [r["scale after"] for r in rows] == ["2.0", "2.0", "4.0"]
    assert "describe_trace" in out
    assert describe_trace(rows).startswith("3 steps, 1 skipped.")
    out = md(":::{bit-explorer}\n:value: 0.1\n\nWith JavaScript off, this table.\n:::")
    assert "this table" not in out  # the site's static table is not in a notebook
    assert out.endswith(myst.IN_A_NOTEBOOK["bit-explorer"])
    # the call it names runs, and gives what the site's table shows for those values
    call = re.search(r"`amp_lesson\.playground\.(explorer_rows\(.*?\))`", out)[1]
    rows = eval(call, {"explorer_rows": explorer_rows})
    fp16 = {float(r["value"]): r for r in rows if r["format"] == "FP16"}
    assert (fp16[65519.0]["stored"], fp16[65520.0]["stored"]) == ("65504.0", "inf")
    assert fp16[6.1e-5]["class"] == "subnormal"
    # With examples and formats of its own, the call names them: the page's table, run here.
    out = md(":::{bit-explorer}\n:examples: 0.25, nan, 7\n:show: fp4_e2m1 fp16\n\nStatic.\n:::")
    call = re.search(r"`amp_lesson\.playground\.(explorer_rows\(.*?\))`", out)[1]
    assert call == "explorer_rows([0.25, 7.0], ['fp4_e2m1', 'fp16'])"
    rows = eval(call, {"explorer_rows": explorer_rows})
    assert [(r["format"], r["stored"]) for r in rows] == [
        ("FP4 E2M1", "0.0"),
        ("FP16", "0.25"),
        ("FP4 E2M1", "6.0"),
        ("FP16", "7.0"),
    ]


def test_a_literalinclude_is_the_code_sphinx_shows(tmp_path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(
        "import x\n\ndef f():\n    return 1\n\n\ndef g():\n    pass\n"
    )
    (tmp_path / "docs" / "chapter").mkdir(parents=True)
    out, _ = myst_to_markdown(
        "```{literalinclude} ../../pkg/m.py\n:language: python\n:pyobject: f\n```",
        {},
        docname="chapter/p",
        source_dir=tmp_path / "docs",
    )
    assert out == "```python\ndef f():\n    return 1\n```"
    with pytest.raises(ValueError, match="literalinclude needs source_dir"):
        myst_to_markdown("```{literalinclude} m.py\n```", {}, docname="chapter/p")


def test_a_python_role_links_to_the_api_reference_and_an_unknown_name_fails() -> None:
    titles = {"api/amp_lesson.scaler": "scaler"}
    out, _ = myst_to_markdown(
        "{py:func}`~amp_lesson.scaler.simulate` and {py:mod}`amp_lesson.scaler`",
        {},
        docs_url="https://b.example",
        labels={},
        titles=titles,
    )
    assert out == (
        "[`simulate()`](https://b.example/api/amp_lesson.scaler.html#amp_lesson.scaler.simulate)"
        " and [`amp_lesson.scaler`](https://b.example/api/amp_lesson.scaler.html"
        "#module-amp_lesson.scaler)"
    )
    with pytest.raises(ValueError, match=r"\{py:func\}`~amp_lesson.scaler.no_such_thing`"):
        myst_to_markdown(
            "{py:func}`~amp_lesson.scaler.no_such_thing`", {}, labels={}, titles=titles
        )
    with pytest.raises(ValueError, match=r"\{py:class\}`torch.Tensor`"):
        myst_to_markdown("{py:class}`torch.Tensor`", {}, labels={}, titles=titles)


def test_a_python_role_is_checked_against_the_objects_a_build_documents_when_given() -> None:
    # A build passes the objects its API reference documents: no import of the lesson.
    titles = {"api/amp_lesson.scaler": "scaler"}
    documented = {"amp_lesson.scaler", "amp_lesson.scaler.simulate"}
    asked: list[str] = []

    def objects(name: str) -> bool:
        asked.append(name)
        return name in documented

    role = "{py:func}`~amp_lesson.scaler.simulate`"
    out, _ = myst_to_markdown(role, {}, labels={}, titles=titles, objects=objects)
    assert out.startswith("[`simulate()`](")
    assert asked == ["amp_lesson.scaler.simulate"]
    # An object the package has but the reference does not document is refused.
    with pytest.raises(ValueError, match="max_safe_scale"):
        myst_to_markdown(
            "{py:func}`~amp_lesson.scaler.max_safe_scale`", {}, labels={}, titles=titles,
            objects=objects,
        )  # fmt: skip


def test_a_details_tag_quoted_in_a_code_span_opens_no_section() -> None:
    text = "A `<details>` tag.\n\nB.\n\nC `</details>` too.\n\nD."
    assert export.markdown_blocks(text) == ["A `<details>` tag.", "B.", "C `</details>` too.", "D."]


def test_hidden_input_is_collapsed_and_a_solutions_introduction_follows_the_readers_cell() -> None:
    nb = _page(
        _code("provenance()", "remove-input"),
        {
            "cell_type": "markdown",
            "metadata": {},
            "source": "## Milestone 1\n\nDo it.\n\n**Solution** (folded):",
        },
        _code("answer = 1", "hide-input", "solution"),
    )
    out = export_notebook(
        nb, {}, docname="c/x", executed=False, repository="https://github.com/o/r"
    )
    cells = out["cells"][2:]
    assert cells[0]["metadata"]["jupyter"] == {"source_hidden": True}
    assert [c["cell_type"] for c in cells[1:]] == ["markdown", "code", "markdown", "code"]
    assert cells[1]["source"] == "## Milestone 1\n\nDo it."
    assert cells[2]["source"].startswith("# Your code for \u201cMilestone 1\u201d.")
    assert cells[3]["source"] == "**Solution** (folded):"
    assert cells[4]["source"].startswith("#@title Solution to \u201cMilestone 1\u201d")


def test_the_books_cells_between_two_code_cells_fold_into_one_hidden_cell() -> None:
    """Hidden cells, printed passages and the prose between them become one hidden cell that
    runs their code in order; prose before the first passage stays Markdown; a cell the reader
    sees and a heading end the fold."""
    nb = _page(
        _code("x = 2"),
        _code("glue('a', x)", "remove-cell"),
        {"cell_type": "markdown", "metadata": {}, "source": "Plain words first."},
        {"cell_type": "markdown", "metadata": {}, "source": "a is {glue:text}`a`."},
        _code("glue('b', x + 1)", "remove-cell"),
        {"cell_type": "markdown", "metadata": {}, "source": "In between.\n\nb is {glue:text}`b`."},
        {"cell_type": "markdown", "metadata": {}, "source": "## Next\n\nc is {glue:text}`c`."},
        _code("glue('c', 4)", "remove-cell"),
        _code("y = x"),
    )
    glue = {"a": {"text/plain": "2"}, "b": {"text/plain": "3"}, "c": {"text/plain": "4"}}
    out = export_notebook(nb, glue, docname="c/x", executed=True, repository="https://g/o/r")
    cells = out["cells"][2:]
    kinds = [
        "code, seen" if c["cell_type"] == "code" and "jupyter" not in c["metadata"] else
        "code, hidden" if c["cell_type"] == "code" else f"md: {c['source'][:11]}"
        for c in cells
    ]  # fmt: skip
    assert kinds == [
        "code, seen",
        "md: Plain words",
        "code, hidden",
        "md: ## Next",
        "code, hidden",
        "code, seen",
    ]
    folded = cells[2]["source"]
    # Its code in the page's order: glue a, print a's passage and the prose, glue b, print b's.
    order = [folded.index(s) for s in ("glue('a'", "a is {glue", "glue('b'", "In between.")]
    assert order == sorted(order)
    assert folded.count("show_text(") == 2
    printed = [o["data"]["text/markdown"] for o in cells[2]["outputs"]]
    assert printed[:2] == ["a is 2.", "In between.\n\nb is 3."]
    assert printed[2].startswith("<sub>As the book's build")
    assert export.TEXT_CELL_TAG in cells[2]["metadata"]["tags"]
    assert cells[4]["source"].count("show_text(") == 1  # after the heading, its own cell


def test_a_notebook_asks_colab_for_a_gpu_runtime() -> None:
    nb = {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    out = export_notebook(
        nb, {}, docname="c/x", executed=False, repository="https://github.com/o/r"
    )
    assert out["metadata"]["accelerator"] == "GPU"
    assert out["metadata"]["colab"] == {"gpuType": "T4"}
    assert out["metadata"]["kernelspec"]["name"] == "python3"


BIB = (
    "@misc{one, author = {Doe, Jane}, title = {T}, year = {2001}, url = {https://a.example/1}}\n"
    "@misc{two, author = {Roe, R. and Poe, P. and Moe, M.}, title = {U}, year = {2002},"
    " doi = {10.1/x}}\n"
    "@misc{org, author = {{Open Compute Project}}, title = {V}, year = {2023}}\n"
    "@misc{pair, author = {Smith, J. and others}, title = {W}, year = {2004}}\n"
)
CITING = "{cite:t}`one` and {cite:p}`two,org`; {cite:t}`pair`."


def test_a_citation_in_a_notebook_is_the_books_words_linked_to_the_work(tmp_path) -> None:
    """``{cite:t}`` and ``{cite:p}`` read as on the page (author and year in round brackets),
    each linked to the work's DOI or address; a key the bibliography lacks is an error."""
    (tmp_path / myst.BIBLIOGRAPHY).write_text(BIB)
    md, _ = myst_to_markdown(CITING, {}, source_dir=tmp_path, strict=False)
    assert md == (
        "[Doe (2001)](https://a.example/1) and "
        "([Roe et al., 2002](https://doi.org/10.1/x); Open Compute Project, 2023); "
        "Smith and others (2004)."
    )
    with pytest.raises(ValueError, match="nothing"):
        myst_to_markdown("{cite:p}`nothing`", {}, source_dir=tmp_path, labels={})
    with pytest.raises(ValueError, match="cite:ps"):  # a style the notebooks do not write
        myst_to_markdown("{cite:ps}`one`", {}, source_dir=tmp_path, labels={})


def test_a_notebooks_citations_read_as_the_pages(tmp_path) -> None:
    """The same words in the notebook as in the built page (sphinxcontrib-bibtex with the
    book's style, amp_book.citations), the links aside."""
    from bs4 import BeautifulSoup
    from helpers import build_in_process

    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text("")
    (src / myst.BIBLIOGRAPHY).write_text(BIB)
    (src / "index.md").write_text(f"# Page\n\n{CITING}\n\n```{{bibliography}}\n```\n")
    conf = {"bibtex_bibfiles": [myst.BIBLIOGRAPHY], "bibtex_reference_style": "author_year_round"}
    extensions = ["myst_parser", "sphinxcontrib.bibtex", "amp_book.citations"]
    html = build_in_process(src, tmp_path / "out", extensions, **conf).outdir
    soup = BeautifulSoup((html / "index.html").read_text(), "html.parser")
    page = " ".join(soup.select_one("section p").get_text().split())
    md, _ = myst_to_markdown(CITING, {}, source_dir=src, strict=False)
    assert page == re.sub(r"\[([^]]*)\]\([^)]*\)", r"\1", md)


def test_the_cell_a_notebook_opens_on_has_the_id_colab_scrolls_to() -> None:
    nb = _page(
        {"cell_type": "markdown", "metadata": {}, "source": "# Page"},
        _code("x = 1"),
        _code("model = make_model()", export.OPENS_HERE_TAG),
    )
    assert export.opens_on(nb) == export.OPENS_HERE_ID
    out = export_notebook(
        nb, {}, docname="beyond/x", executed=False, repository="https://github.com/o/r"
    )
    ids = [c["id"] for c in out["cells"]]
    assert ids.count(export.OPENS_HERE_ID) == 1
    where = ids.index(export.OPENS_HERE_ID)
    install, mine = out["cells"][where], out["cells"][where + 1]
    # Colab opens on an install cell (its own id field too), then the reader's cell
    assert install["metadata"]["id"] == export.OPENS_HERE_ID
    assert install["source"].startswith(export.OPENED_HERE)
    assert install["source"].endswith(urls.install_cell_source(repository="https://github.com/o/r"))
    assert mine["source"] == "model = make_model()"
    assert len(set(ids)) == len(ids)
    assert export.opens_on(_page(_code("x = 1"))) is None
    twice = _page(_code("a = 1", export.OPENS_HERE_TAG), _code("b = 2", export.OPENS_HERE_TAG))
    with pytest.raises(ValueError, match=r"beyond/x: 2 code cells are tagged 'opens-here'"):
        export_notebook(
            twice, {}, docname="beyond/x", executed=False, repository="https://github.com/o/r"
        )
