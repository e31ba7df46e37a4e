"""The notebook's own words: values glued by its cells, passages printed from them."""

from __future__ import annotations

import textwrap

import pytest

from amp_lesson import claims, notebook


@pytest.fixture(autouse=True)
def _fresh_notebook_state():
    """Each test starts with nothing glued and no passage waiting, as a fresh kernel does."""
    saved = dict(notebook._GLUED), list(notebook._WAITING)
    notebook._GLUED.clear()
    notebook._WAITING.clear()
    yield
    notebook._GLUED.clear()
    notebook._WAITING.clear()
    notebook._GLUED.update(saved[0])
    notebook._WAITING.extend(saved[1])


def test_a_passage_is_printed_with_the_values_glued_by_this_run(capsys) -> None:
    notebook.glue("nb_test_ratio", 34.25, display=False)
    notebook.glue("nb_test_words", "FP16 was slower here.", display=False)
    notebook.show_text("{glue:text}`nb_test_words` It took {glue:text}`nb_test_ratio:.0f`x.")
    assert capsys.readouterr().out == "FP16 was slower here. It took 34x.\n"
    notebook.glue("nb_test_ratio", 0.5, display=False)  # another run, another sentence
    assert notebook.render_text("{glue:text}`nb_test_ratio:.1f`x") == "0.5x"


def test_a_claim_keeps_its_words_for_the_notebook() -> None:
    claims.claim("nb_test_claim", 1 + 1 == 3, "One plus one is three.", "One plus one is two.")
    assert notebook.render_text("{glue:text}`nb_test_claim`") == "One plus one is two."


def test_glue_display_shows_the_value_where_the_cell_runs(capsys) -> None:
    notebook.glue("nb_test_shown", 7)
    assert capsys.readouterr().out == "7\n"


def test_rendering_a_value_not_yet_glued_names_it() -> None:
    with pytest.raises(KeyError, match="no value glued under 'nb_test_never'"):
        notebook.render_text("{glue:text}`nb_test_never`")


def test_a_passage_quoting_a_later_value_is_printed_when_it_is_glued(capsys) -> None:
    notebook.show_text("Later: {glue:text}`nb_test_later_a` and {glue:text}`nb_test_later_b:.1f`.")
    assert capsys.readouterr().out == ""  # a script prints nothing yet
    notebook.glue("nb_test_later_a", "one", display=False)
    assert capsys.readouterr().out == ""
    notebook.glue("nb_test_later_b", 2, display=False)
    assert capsys.readouterr().out == "Later: one and 2.0.\n"
    notebook.glue("nb_test_later_b", 3, display=False)  # printed once, not again
    assert capsys.readouterr().out == ""


def test_a_waiting_passage_that_cannot_be_printed_says_why_and_the_others_still_print(
    capsys,
) -> None:
    notebook.show_text("Ratio {glue:text}`nb_test_bad:.2f`.")
    notebook.show_text("Then {glue:text}`nb_test_bad`.")
    notebook.glue("nb_test_bad", "not a number", display=False)  # the cell itself does not fail
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("*This passage could not be printed from this run: could not convert")
    assert out[1] == "Then not a number."


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: notebook.glue("", 1), ValueError, "name must be a non-empty string"),
        (lambda: notebook.glue(3, 1), ValueError, "name must be a non-empty string"),
        (lambda: notebook.glue("k", 1, display="no"), TypeError, "display must be True or False"),
        (lambda: notebook.show_text(None), TypeError, "template must be a str"),
        (lambda: notebook.render_text(b"x"), TypeError, "template must be a str"),
    ],
)
def test_bad_arguments_are_named(call, error, match) -> None:
    with pytest.raises(error, match=match):
        call()


def test_in_a_kernel_a_passage_is_one_markdown_display_with_the_figure_inside() -> None:
    """A real Jupyter kernel: the passage is one Markdown display, the plot inside it."""
    import nbformat
    from nbclient import NotebookClient

    code = textwrap.dedent(
        """
        import matplotlib.pyplot as plt
        from amp_lesson.notebook import glue, show_text
        fig, ax = plt.subplots()
        ax.plot([0, 1])
        plt.close(fig)
        glue("fig", fig, display=False)
        glue("n", 3, display=False)
        show_text("n is {glue:text}`n`.\\n{glue:figure}`fig`\\n*A line.*")
        show_text("m is {glue:text}`m`.")  # glued by the next cell
        """
    )
    cells = [nbformat.v4.new_code_cell(code), nbformat.v4.new_code_cell('glue("m", 4, False)')]
    nb = nbformat.v4.new_notebook(cells=cells)
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    passage, waiting = nb.cells[0].outputs
    text = passage["data"]["text/markdown"]
    assert text.startswith('n is 3.\n<img alt="" src="data:image/png;base64,iVBOR')
    assert text.endswith("\n*A line.*")
    # printed in its place once the later cell glued its value
    assert waiting["data"]["text/markdown"] == "m is 4."
    assert nb.cells[1].outputs == []


def test_a_script_prints_the_passage_even_after_ipython_formatted_a_value(capsys) -> None:
    from IPython.core.formatters import format_display_data

    format_display_data(1)  # what myst_nb.glue does: it leaves a bare IPython shell behind
    notebook.glue("nb_test_after", 2, display=False)
    notebook.show_text("It is {glue:text}`nb_test_after`.")
    assert capsys.readouterr().out == "It is 2.\n"
