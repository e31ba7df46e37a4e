"""Pages as plain Jupyter notebooks that run outside the book.

A page's notebook (the download on each page, and its twin in ``notebooks/``
that Colab opens) must work in plain Jupyter, with no MyST-NB and no
Sphinx:

- MyST becomes plain Markdown: admonitions and
  correction boxes become quoted blocks, a
  dropdown becomes a ``<details>`` section, and a self-check becomes its
  question, with the answers in a collapsed ``<details>`` section and no
  option marked right in the question itself. Cross-references become links
  to the online book; one that names no known target is an error.
- A passage that quotes a glued value (a claim's words, a measured number,
  a glued figure) is not frozen into Markdown: it becomes a small collapsed
  code cell, ``show_text(...)`` of :mod:`amp_lesson.notebook`, that prints
  it from the notebook's own run. Until the reader runs it, the cell shows
  the book's build of the passage, labelled with the build's device.
  Markdown cells keep only what no run can change.
- The cells' ``glue`` calls stay, importing ``glue`` from
  :mod:`amp_lesson.notebook` instead of ``myst_nb``, so those passages have
  their values. Code cells tagged ``remove-cell`` (where pages keep their
  bookkeeping) stay with their source collapsed; a cell tagged ``solution``
  is collapsed behind its title, after an empty cell to write one's own
  answer in; hidden Markdown cells go.
- A first Markdown cell says what the notebook is and how to run it on a
  GPU in Colab; the first code cell installs ``amp_lesson`` at the book's
  version from the repository declared once, in ``[project.urls]`` of
  ``pyproject.toml``.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from amp_book.export.markdown import (
    GLUE_CLOSE,
    GLUE_OPEN,
    Context,
    GlueValues,
    as_text,
    doc_link,
    glue_values_from_outputs,
    is_glue_output,
    myst_to_markdown,
)
from amp_book.export.targets import blocks
from amp_book.urls import documentation_url, install_cell_source, repository_url
from amp_lesson import __version__
from amp_lesson.notebook import (
    bundle_markup,
    substitute,
    template_keys,
)

_RUN_TEXT = re.compile(re.escape(GLUE_OPEN) + "(.*?)" + re.escape(GLUE_CLOSE), re.DOTALL)
TEXT_CELL_TAG = "amp-lesson-run-text"
"""Metadata tag of a cell that prints a passage of the page from the run's values."""
TEXT_CELL_TITLE = "#@title Printed from this run's values (double-click for the code)"
BOOK_CELL_TITLE = "#@title The book's checks of this run (double-click for the code)"
INSTALL_CELL_TAG = "amp-lesson-install"
OPENS_HERE_TAG = "opens-here"
"""Tag of the one code cell of a page its notebook opens on (the reader's own model, say)."""
OPENS_HERE_ID = "opens-here"
"""The id, in ``id`` and in ``metadata.id`` (Colab's ``#scrollTo=``), of the install cell
the notebook puts just before that cell, so that a reader who opens it there installs first."""
OPENED_HERE = "# Opened the notebook here? This installs the book's package where it is missing.\n"


def _tags(cell: Mapping[str, Any]) -> list[str]:
    return list((cell.get("metadata") or {}).get("tags", []))


def markdown_blocks(text: str) -> list[str]:
    r"""``text`` (plain Markdown) cut at its blank lines, never inside a block.

    A fenced code block, a ``<details>`` section and a ``$$`` display stay
    whole, blank lines and all.

    >>> markdown_blocks("# T\n\nA.\n\n<details>\n\nB.\n\n</details>")
    ['# T', 'A.', '<details>\n\nB.\n\n</details>']
    """
    blocks: list[list[str]] = [[]]
    fence = ""
    details = 0
    maths = False
    for line in text.splitlines():
        stripped = line.strip()
        if fence:
            if stripped.startswith(fence) and stripped.strip(fence[0]) == "":
                fence = ""
        elif m := re.match(r"^\s*(`{3,}|~{3,})", line):
            fence = m[1]
        elif stripped == "$$":
            maths = not maths
        else:
            html = re.sub(r"(`+).*?\1", "", line)  # a code span that quotes the tag opens nothing
            details = max(
                0, details + len(re.findall(r"<details\b", html)) - html.count("</details>")
            )
        if not stripped and not fence and not details and not maths:
            if blocks[-1]:
                blocks.append([])
            continue
        blocks[-1].append(line)
    return ["\n".join(b) for b in blocks if b]


def split_passages(text: str) -> list[tuple[bool, str]]:
    """``text`` from :func:`myst_to_markdown` (``keep_glue=True``) as ``(printed, markdown)`` parts.

    A part whose blocks quote a glued value is ``printed``: the notebook's
    run prints it. Adjacent blocks of one kind make one part; a heading is
    never printed, so it stays in the notebook's outline.
    """
    parts: list[tuple[bool, str]] = []
    for block in markdown_blocks(text):
        lines = block.splitlines()
        pieces = (
            [(False, lines[0]), (None, "\n".join(lines[1:]))]
            if re.match(r"#{1,6} ", lines[0])
            else [(None, block)]
        )
        for printed, piece in pieces:
            if not piece.strip():
                continue
            printed = bool(_RUN_TEXT.search(piece)) if printed is None else printed
            if parts and parts[-1][0] == printed:
                parts[-1] = (printed, parts[-1][1] + "\n\n" + piece)
            else:
                parts.append((printed, piece))
    return parts


def _template(text: str) -> str:
    return _RUN_TEXT.sub(lambda m: m[1], text)


def _python_string(text: str) -> str:
    if '"""' not in text and not text.endswith("\\"):
        return f'r"""\n{text}\n"""'
    return repr(text)


def _markdown_output(text: str) -> dict[str, Any]:
    # The text again for text-only viewers, unless an image is inside it (kept once, not twice).
    plain = "<IPython.core.display.Markdown object>" if 'src="data:' in text else text
    return {
        "output_type": "display_data",
        "data": {"text/markdown": text, "text/plain": plain},
        "metadata": {},
    }


def build_label(built_on: str) -> str:
    """The line under a passage as the book's build printed it (before the reader's run).

    >>> build_label("CPU (x86_64, 2 cores)")
    "<sub>As the book's build on CPU (x86_64, 2 cores) printed it. Run the notebook and this passage is printed from your run.</sub>"
    """
    return (
        f"<sub>As the book's build on {built_on} printed it. "
        "Run the notebook and this passage is printed from your run.</sub>"
    )


def text_cell(text: str, glue: GlueValues, built_on: str) -> dict[str, Any]:
    """The code cell that prints ``text`` (a printed part of :func:`split_passages`).

    Its source calls :func:`amp_lesson.notebook.show_text`; its outputs, until
    the reader runs it, are the passage as the book's build printed it, from
    ``glue``, labelled with :func:`build_label`.
    """
    template = _template(text)

    def plain(key: str) -> str:
        return as_text(glue[key].get("text/plain", ""))

    def markdown(key: str) -> str:
        return as_text(glue[key].get("text/markdown", glue[key].get("text/plain", "")))

    passage = substitute(template, plain, markdown, lambda key: bundle_markup(glue[key]))
    outputs = [_markdown_output(passage), _markdown_output(build_label(built_on))]
    return {
        _FOLD: {"template": template, "passage": passage, "label": outputs[1]},
        "cell_type": "code",
        "execution_count": None,
        "metadata": {
            "tags": [TEXT_CELL_TAG],
            "jupyter": {"source_hidden": True},
            "cellView": "form",
        },
        "outputs": outputs,
        "source": f"{TEXT_CELL_TITLE}\nshow_text({_python_string(template)})",
    }


_FOLD = "_amp_lesson_fold"
"""Key of what :func:`fold_book_cells` needs of a printed passage; dropped once it has run."""


def _is_book_code(cell: Mapping[str, Any]) -> bool:
    """A code cell the page hides whole (its glue and claims): the book's work, not the lesson."""
    return cell["cell_type"] == "code" and "remove-cell" in cell["metadata"].get("tags", [])


def _is_printed(cell: Mapping[str, Any]) -> bool:
    return _FOLD in cell


def _is_plain_prose(cell: Mapping[str, Any]) -> bool:
    """A Markdown cell with no heading and no attachment: it may be printed with its neighbours."""
    if cell["cell_type"] != "markdown" or cell.get("attachments"):
        return False
    return not any(t.type == "heading_open" for t in blocks(as_text(cell["source"])))


def fold_book_cells(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``cells`` with each run of the book's own cells folded into one hidden code cell.

    A run starts at a hidden code cell (glue, claims) or a printed passage
    (:func:`text_cell`) and goes on over such cells and over plain prose, up to
    the next code cell the reader sees, a heading or a figure. Its code keeps
    its order: the hidden cells' code, and one ``show_text`` call for each
    stretch of passages with the prose between them, which is printed with
    them. Prose before the run's first passage or after its last stays
    Markdown, before or after the folded cell: no code depends on it. Nothing
    crosses a cell the reader sees, so the notebook computes what the page
    computed, in the same order.
    """
    out: list[dict[str, Any]] = []
    i = 0
    while i < len(cells):
        if not (_is_book_code(cells[i]) or _is_printed(cells[i])):
            out.append(cells[i])
            i += 1
            continue
        j = i
        while j < len(cells) and (
            _is_book_code(cells[j]) or _is_printed(cells[j]) or _is_plain_prose(cells[j])
        ):
            j += 1
        run = cells[i:j]
        code_at = [k for k, c in enumerate(run) if c["cell_type"] == "code"]
        printed_at = [k for k, c in enumerate(run) if _is_printed(c)]
        first = printed_at[0] if printed_at else len(run)
        last = printed_at[-1] if printed_at else -1
        before = [c for k, c in enumerate(run) if c["cell_type"] == "markdown" and k < first]
        after = [
            c for k, c in enumerate(run) if c["cell_type"] == "markdown" and k > max(last, first)
        ]
        kept = {id(c) for c in before + after}
        out.extend(before)
        out.append(_folded([c for c in run[code_at[0] : max(code_at) + 1] if id(c) not in kept]))
        out.extend(after)
        i = j
    for cell in out:
        cell.pop(_FOLD, None)
    return out


PARAGRAPH = "\n\n"


def _folded(run: list[dict[str, Any]]) -> dict[str, Any]:
    """One hidden code cell doing what the cells of ``run`` did, in their order."""
    sources: list[str] = []
    outputs: list[dict[str, Any]] = []
    tags: set[str] = set()
    label: dict[str, Any] | None = None
    templates: list[str] = []
    passages: list[str] = []

    def flush() -> None:
        if templates:
            sources.append(f"show_text({_python_string(PARAGRAPH.join(templates))})")
            outputs.append(_markdown_output(PARAGRAPH.join(passages)))
            templates.clear()
            passages.clear()

    for cell in run:
        if _is_printed(cell):
            templates.append(cell[_FOLD]["template"])
            passages.append(cell[_FOLD]["passage"])
            label = cell[_FOLD]["label"]
            tags.add(TEXT_CELL_TAG)
        elif cell["cell_type"] == "markdown":
            text = as_text(cell["source"])
            templates.append(text)
            passages.append(text)
        else:
            flush()
            sources.append(as_text(cell["source"]))
            outputs.extend(cell.get("outputs", []))
            tags |= set(cell["metadata"].get("tags", []))
    flush()
    if label is not None:
        outputs.append(label)
    title = TEXT_CELL_TITLE if label is not None else BOOK_CELL_TITLE
    return {
        "cell_type": "code",
        "execution_count": None,
        "metadata": {
            "tags": sorted(tags),
            "jupyter": {"source_hidden": True},
            "cellView": "form",
        },
        "outputs": outputs,
        "source": PARAGRAPH.join([title, *sources]),
    }


def _split_introduction(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Take the last paragraph of ``cells`` off as a cell of its own when it introduces code.

    That is a static Markdown cell whose last block ends with a colon. Returns the
    taken cell (``[]`` when there is none) for the caller to put back where it belongs.
    """
    if not cells or cells[-1]["cell_type"] != "markdown":
        return []
    blocks = markdown_blocks(cells[-1]["source"])
    if not blocks or not blocks[-1].rstrip().endswith(":"):
        return []
    if len(blocks) == 1:
        return [cells.pop()]
    cells[-1]["source"] = "\n\n".join(blocks[:-1])
    return [{"cell_type": "markdown", "metadata": {}, "source": blocks[-1]}]


def rewrite_glue_imports(source: str) -> str:
    r"""``source`` with ``myst_nb``'s ``glue`` imported from :mod:`amp_lesson.notebook` instead.

    >>> print(rewrite_glue_imports("from myst_nb import glue\nglue('x', 2, display=False)"))
    from amp_lesson.notebook import glue
    glue('x', 2, display=False)
    """
    out = []
    for line in source.splitlines():
        m = re.match(r"^(\s*)from myst_nb import (.+)$", line)
        if m:
            names = [n.strip() for n in m[2].split(",")]
            if set(names) - {"glue"}:
                raise ValueError(f"a page imports {names} from myst_nb; only glue has a twin")
            line = f"{m[1]}from amp_lesson.notebook import glue"
        elif re.match(r"^\s*import myst_nb\b", line):
            raise ValueError("a page imports myst_nb itself; import glue from it instead")
        out.append(line)
    return "\n".join(out)


def build_device(executed: Mapping[str, Any]) -> str | None:
    """The device an executed page ran on, read from its provenance output.

    >>> build_device({"cells": [{"cell_type": "code", "outputs": [{"data": {
    ...     "text/plain": "Provenance(device_type='cpu', device_name='CPU (x86_64, 2 cores)')"}}]}]})
    'CPU (x86_64, 2 cores)'
    """
    for cell in executed.get("cells", []):
        for output in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            text = as_text((output.get("data") or {}).get("text/plain", ""))
            m = re.match(r"^Provenance\(.*?\bdevice_name='([^']+)'", text)
            if m:
                return m[1]
    return None


COLAB_GPU: dict[str, Any] = {"accelerator": "GPU", "colab": {"gpuType": "T4"}}
"""Notebook metadata that asks Colab for a GPU runtime when it opens the notebook."""

GPU_RUNTIME = (
    "**On a GPU.** Colab opens this notebook on a GPU runtime where one is free; if it did "
    "not, choose *Runtime → Change runtime type*, pick a GPU, save, and run "
    "the notebook from the top. The cells use CUDA whenever torch sees it "
    "(`amp_lesson.device.get_device`), so FP16 and BF16 then run on the GPU's kernels: the "
    "timings, the memory figures and the CPU-only notes change, and the passages printed from "
    "the run (the cells that show only text) say what the GPU did."
)


def opens_on(nb: Mapping[str, Any]) -> str | None:
    """The id of the cell notebook ``nb`` opens on (:data:`OPENS_HERE_TAG`), or ``None``.

    >>> opens_on({"cells": [{"cell_type": "code", "metadata": {"tags": ["opens-here"]}}]})
    'opens-here'
    >>> opens_on({"cells": []}) is None
    True
    """
    for cell in nb.get("cells", []):
        if OPENS_HERE_TAG in (cell.get("metadata") or {}).get("tags", []):
            return OPENS_HERE_ID
    return None


def export_notebook(
    nb: Mapping[str, Any],
    glue: GlueValues,
    *,
    docname: str,
    executed: bool,
    version: str = __version__,
    repository: str | None = None,
    docs_url: str | None = None,
    titles: Mapping[str, str] | None = None,
    labels: Mapping[str, tuple[str, str, str]] | None = None,
    built_on: str = "the book's machine",
    strict_references: bool = True,
    source_dir: Path | None = None,
    objects: Callable[[str], bool] | None = None,
) -> dict[str, Any]:
    """The page ``nb`` (MyST-NB's notebook of it) as a plain Jupyter notebook.

    ``glue`` holds the glued values its Markdown quotes; ``executed`` says
    whether ``nb`` carries the outputs of the build (kept, less the glue
    records) or is the bare page; ``titles`` (docname: page title) and
    ``labels`` (label: docname, anchor, section title) make cross-references
    links; ``built_on`` names the build's device in the label of each passage
    printed from the run (:func:`text_cell`); ``source_dir`` is the book's
    source folder (for ``literalinclude``); ``objects`` tells the package's objects (see
    :func:`.myst.myst_to_markdown`). Raises ``KeyError`` naming any
    glued value the Markdown quotes that ``glue`` lacks, and ``ValueError``
    for a cross-reference ``labels`` and ``titles`` do not know (unless not
    ``strict_references``: then it is plain text).
    """
    if not isinstance(executed, bool):
        raise TypeError(f"executed must be True or False, got {executed!r}")
    if not isinstance(built_on, str) or not built_on.strip():
        raise ValueError(f"built_on must name the build's device, got {built_on!r}")
    docs_url = documentation_url() if docs_url is None else docs_url
    repository = repository_url() if repository is None else repository
    to_markdown = functools.partial(
        myst_to_markdown,
        glue=glue,
        docs_url=docs_url,
        docname=docname,
        titles=titles,
        labels=labels,
        keep_glue=True,
        strict=strict_references,
        source_dir=source_dir,
        objects=objects,
    )
    cells: list[dict[str, Any]] = []
    heading = ""  # the last heading above: a solution's cells name its exercise
    for cell in copy.deepcopy(list(nb.get("cells", []))):
        source = as_text(cell.get("source", ""))
        tags = set((cell.get("metadata") or {}).get("tags", []))
        if cell["cell_type"] == "markdown" and "remove-cell" not in tags:
            heading = _add_markdown(cells, *to_markdown(source), glue, built_on, heading)
        elif cell["cell_type"] == "code":
            _add_code(cells, cell, source, tags, heading, executed)
        # raw cells (none in the book) are left out
    all_cells = _head(docname, docs_url, version, repository, executed) + fold_book_cells(cells)
    opens = [i for i, c in enumerate(all_cells) if OPENS_HERE_TAG in _tags(c)]
    if len(opens) > 1:
        raise ValueError(
            f"{docname}: {len(opens)} code cells are tagged {OPENS_HERE_TAG!r}; a notebook "
            "opens on one"
        )
    if opens:  # a reader who opens the notebook there runs the install first
        install = _code_cell(
            OPENED_HERE + install_cell_source(version, repository),
            {"tags": [INSTALL_CELL_TAG], "id": OPENS_HERE_ID},
            [],
        )
        all_cells.insert(opens[0], install)
    for i, cell in enumerate(all_cells):
        cell["id"] = f"cell-{i}"  # stable ids: exporting again gives the same file
    if opens:
        all_cells[opens[0]]["id"] = OPENS_HERE_ID
    metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
        # Colab opens the notebook on a GPU runtime (a T4, its free one) where it can.
        **COLAB_GPU,
    }
    _theme_figures(all_cells)
    return {"cells": all_cells, "metadata": metadata, "nbformat": 4, "nbformat_minor": 5}


def _theme_figures(cells: list[dict[str, Any]]) -> None:
    """Theme each figure the cells hold, in their outputs and in the run's values they
    carry (:func:`amp_book.figures.themed_svg`), as the page themes them: drawn on a
    transparent background, a figure follows the notebook's light or dark theme.

    >>> cells = [{"cell_type": "code", "outputs": [{"data": {
    ...     "image/svg+xml": '<svg class="amp-svg"><path style="fill: #000000"/></svg>'}}]}]
    >>> _theme_figures(cells)
    >>> "light-dark(#000000, #ffffff)" in cells[0]["outputs"][0]["data"]["image/svg+xml"]
    True
    """
    from amp_book.figures import theme_figures_within as themed

    for cell in cells:
        for key in ("outputs", "metadata"):
            if key in cell:
                cell[key] = themed(cell[key])


def _add_markdown(
    cells: list[dict[str, Any]],
    text: str,
    attachments: dict[str, Any],
    glue: GlueValues,
    built_on: str,
    heading: str,
) -> str:
    """Append a page's converted Markdown: a cell per passage, those that report the run
    printed from it (:func:`text_cell`). Returns the last heading so far."""
    for printed, part in split_passages(text):
        if printed:
            cells.append(text_cell(part, glue, built_on))
            continue
        new: dict[str, Any] = {"cell_type": "markdown", "metadata": {}, "source": part}
        if attachments:
            new["attachments"], attachments = attachments, {}
        cells.append(new)
        for line in part.splitlines():
            if m := re.match(r"#{1,6} (.+)$", line):
                heading = m[1].strip()
    return heading


def _code_cell(source: str, metadata: dict[str, Any], outputs: list[Any]) -> dict[str, Any]:
    return {
        "cell_type": "code",
        "execution_count": None,
        "metadata": metadata,
        "outputs": outputs,
        "source": source,
    }


def _add_code(
    cells: list[dict[str, Any]],
    cell: dict[str, Any],
    source: str,
    tags: set[str],
    heading: str,
    executed: bool,
) -> None:
    """Append a page's code cell (its glue imports rewritten, its glue records dropped); a
    solution goes after an empty cell for the reader's own code."""
    code = rewrite_glue_imports(source)
    if not code.strip():
        return
    outputs = [o for o in cell.get("outputs", []) if not is_glue_output(o)]
    metadata: dict[str, Any] = {"tags": sorted(tags)} if tags else {}
    if {"remove-cell", "hide-input", "remove-input"} & tags:
        # The page hides this cell, but later cells may use what it defines: keep
        # it, with its source collapsed in Jupyter and Colab.
        metadata |= {"jupyter": {"source_hidden": True}, "cellView": "form"}
    if "solution" in tags:
        # The reader's own cell goes before the solution, and before the paragraph
        # that introduces it (one that ends with a colon) if it comes right before.
        intro = _split_introduction(cells)
        cells.append(
            _code_cell(
                f"# Your code for \u201c{heading}\u201d. The solution is "
                "collapsed below: run it to compare.",
                {},
                [],
            )
        )
        cells.extend(intro)
        code = f"#@title Solution to \u201c{heading}\u201d (double-click to show)\n{code}"
    cells.append(_code_cell(code, metadata, outputs if executed else []))


def _head(
    docname: str, docs_url: str, version: str, repository: str, executed: bool
) -> list[dict[str, Any]]:
    """The notebook's first cells: what it is, and the cell that installs the package."""
    where = (
        "with the outputs of the build that published it"
        if executed
        else "without the outputs of its code cells (run them to see yours)"
    )
    intro = (
        f"This notebook is a page of the book *Mixed precision in PyTorch* "
        f"([read it online]({doc_link('/' + docname, Context({}, docs_url, docname))})), "
        f"{where}. It runs in plain Jupyter or Colab: the next cell installs the book's "
        f"package `amp_lesson` {version} from [its repository]({repository}) where it is missing. "
        "Its text and figures are under [CC BY 4.0](https://creativecommons.org/licenses/by/4.0/), "
        "its code under the BSD 3-Clause licence."
        "\n\n" + GPU_RUNTIME
    )
    return [
        {"cell_type": "markdown", "metadata": {}, "source": intro},
        _code_cell(install_cell_source(version, repository), {"tags": [INSTALL_CELL_TAG]}, []),
    ]


def export_script(nb: Mapping[str, Any]) -> str:
    """An exported notebook (:func:`export_notebook`) as a Python script, one ``# %%`` per cell.

    Markdown cells become comments under ``# %% [markdown]`` (the percent
    format that Jupytext, VS Code and Spyder read as cells); the install cell
    becomes the ``pip install`` line to run first, as a comment. Run as a
    plain script, it prints the page's passages from its own run.
    """
    out = ['"""' + _script_title(nb) + '"""', ""]
    for cell in nb.get("cells", []):
        source = as_text(cell.get("source", ""))
        tags = (cell.get("metadata") or {}).get("tags", [])
        if cell.get("cell_type") == "markdown":
            comment = "\n".join(f"# {line}".rstrip() for line in source.splitlines())
            out += ["# %% [markdown]", comment, ""]
        elif INSTALL_CELL_TAG in tags:
            spec = re.search(r'%pip install --quiet "([^"]+)"', source)
            line = f'#     pip install "{spec[1]}"' if spec else ""
            out += [
                "# %%",
                "# The book's package, at the version this script was made with:",
                line,
                "from amp_lesson.notebook import show_text",
                "",
            ]
        elif cell.get("cell_type") == "code":
            code = re.sub(r"^(\s*)([%!])", r"\1# \2", source, flags=re.MULTILINE)
            out += ["# %%", code, ""]
    return "\n".join(out).rstrip() + "\n"


def _script_title(nb: Mapping[str, Any]) -> str:
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "markdown":
            m = re.search(r"^# (.+)$", as_text(cell.get("source", "")), re.MULTILINE)
            if m:
                return f"{m[1]}: a page of the book Mixed precision in PyTorch, as a script."
    return "A page of the book Mixed precision in PyTorch, as a script."


"""Key prefix of a glossary term in the labels of :func:`titles_and_labels` (lower case)."""


"""Directives whose content is not MyST (a heading or a target in it is none)."""


def glue_keys(texts: Iterable[str]) -> set[str]:
    """Every glue key the MyST ``texts`` quote (roles and directives)."""
    keys = set()
    for text in texts:
        keys.update(template_keys(text))
        for m in re.finditer(r"^[`:]{3,}\{glue(?::\w+)?\}\s*(\S+)", text, re.MULTILINE):
            keys.add(m[1])
    return keys


def read_glue(executed_notebook: Path) -> dict[str, dict[str, Any]]:
    """The glued values MyST-NB stored beside ``executed_notebook`` (``<page>.glue.json``).

    Falls back on glue records still among the notebook's outputs; ``{}`` when neither exists.
    """
    executed_notebook = Path(executed_notebook)
    glue_file = executed_notebook.with_name(executed_notebook.stem + ".glue.json")
    if glue_file.is_file():
        data = json.loads(glue_file.read_text(encoding="utf-8"))
        return {key: dict(record.get("data", {})) for key, record in data.items()}
    if executed_notebook.is_file():
        return glue_values_from_outputs(json.loads(executed_notebook.read_text(encoding="utf-8")))
    return {}
