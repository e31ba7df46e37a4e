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

import base64
import copy
import importlib.metadata
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from amp_book.corrections import TITLE as CORRECTION_TITLE
from amp_book.kickers import KICKERS
from amp_book.kickers import kicker as kicker_of
from amp_lesson import __version__
from amp_lesson.notebook import (
    bundle_markup,
    format_glued_text,
    split_role,
    substitute,
    template_keys,
)

DIST = "amp-lesson"
GlueValues = Mapping[str, Mapping[str, Any]]
"""Glued values by key: a MIME bundle each (``{"text/plain": ..., "image/png": ...}``)."""


# -- where the project lives -------------------------------------------------------------


def project_urls(dist: str = DIST) -> dict[str, str]:
    """``[project.urls]`` of the installed package, by lower-case label."""
    urls = {}
    for entry in importlib.metadata.metadata(dist).get_all("Project-URL") or []:
        label, _, url = entry.partition(",")
        urls[label.strip().lower()] = url.strip()
    return urls


def repository_url() -> str:
    """The repository's address, as ``[project.urls] Repository`` declares it."""
    url = project_urls().get("repository", "")
    if not url.startswith("https://github.com/"):
        raise ValueError(
            "pyproject.toml's [project.urls] Repository must be a https://github.com/ address; "
            f"got {url!r}"
        )
    return url.rstrip("/").removesuffix(".git")


def github_slug(url: str | None = None) -> str:
    """``owner/name`` of the GitHub repository (``url`` or :func:`repository_url`)."""
    url = repository_url() if url is None else url
    return url.removeprefix("https://github.com/").strip("/")


def documentation_url() -> str:
    """Where the built book is read, with the language and version part of the path."""
    base = project_urls().get("documentation", "").rstrip("/")
    return f"{base}/en/latest" if base.endswith(".readthedocs.io") else base


def colab_url(notebook_path: str, branch: str = "main", repository: str | None = None) -> str:
    """The "Open in Colab" address of ``notebook_path`` (a path in the repository).

    >>> colab_url("notebooks/chapter/formats.ipynb", repository="https://github.com/o/r")
    'https://colab.research.google.com/github/o/r/blob/main/notebooks/chapter/formats.ipynb'
    """
    slug = github_slug(repository)
    return f"https://colab.research.google.com/github/{slug}/blob/{branch}/{notebook_path}"


def install_spec(version: str = __version__, repository: str | None = None) -> str:
    """The pip requirement that installs ``amp_lesson`` at ``version`` from the repository.

    >>> install_spec("0.1.0", "https://github.com/o/r")
    'amp-lesson[notebooks] @ git+https://github.com/o/r@v0.1.0'
    """
    url = repository_url() if repository is None else repository
    return f"{DIST}[notebooks] @ git+{url}@v{version}"


def install_cell_source(version: str = __version__, repository: str | None = None) -> str:
    """The notebook's first code cell: install the package where it is missing."""
    return (
        "import importlib\n"
        "import importlib.util\n"
        "\n"
        "# The book's package, at the version this notebook was made with.\n"
        'if importlib.util.find_spec("amp_lesson") is None:\n'
        f'    %pip install --quiet "{install_spec(version, repository)}"\n'
        "    importlib.invalidate_caches()\n"
        "\n"
        "# Prints the page's passages that report a run, from this run's values.\n"
        "from amp_lesson.notebook import show_text"
    )


# -- glue ----------------------------------------------------------------------------------


def glue_values_from_outputs(nb: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Glued values found in the outputs of an executed notebook ``nb``."""
    values = {}
    for cell in nb.get("cells", []):
        for output in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            scrap = (output.get("metadata") or {}).get("scrapbook") or {}
            if "name" in scrap:
                prefix = scrap.get("mime_prefix", "")
                values[scrap["name"]] = {
                    mime.removeprefix(prefix): data for mime, data in output["data"].items()
                }
    return values


def _is_glue_output(output: Mapping[str, Any]) -> bool:
    return "scrapbook" in (output.get("metadata") or {})


# -- MyST to plain Markdown --------------------------------------------------------------------


@dataclass
class _Context:
    glue: GlueValues
    docs_url: str
    docname: str
    titles: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, tuple[str, str, str]] = field(default_factory=dict)
    attachments: dict[str, dict[str, str]] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    keep_glue: bool = False  # leave glue roles in, marked, for a passage the run prints
    strict: bool = False  # a cross-reference to an unknown target is an error
    unresolved: list[str] = field(default_factory=list)
    source_dir: Path | None = None  # the book's source folder, for literalinclude


GLUE_OPEN, GLUE_CLOSE = "\ue000", "\ue001"
"""Around a glue role :func:`myst_to_markdown` keeps (``keep_glue=True``): private-use characters."""


_DIRECTIVE_INFO = re.compile(r"^\{(?P<name>[\w:-]+)\}(?P<arg>.*)$")
_OPTION = re.compile(r"^:(?P<key>[\w-]+):(?:\s+(?P<value>.*))?$")
_TARGET = re.compile(r"^\(([^()\s]+)\)=\s*$")
_ROLE_NAME = re.compile(r"\{(?P<name>[\w:-]+)\}$")

ADMONITIONS = {
    "note": "Note",
    "tip": "Tip",
    "hint": "Hint",
    "important": "Important",
    "warning": "Warning",
    "caution": "Caution",
    "attention": "Attention",
    "danger": "Danger",
    "error": "Error",
    "seealso": "See also",
}

PLAYGROUNDS = {"bit-explorer": "bit explorer", "scaler-playground": "GradScaler playground"}
"""The book's JavaScript widgets: in a notebook, their no-JavaScript content and a link."""


def myst_to_markdown(
    text: str,
    glue: GlueValues,
    *,
    docs_url: str = "",
    docname: str = "",
    titles: Mapping[str, str] | None = None,
    labels: Mapping[str, tuple[str, str, str]] | None = None,
    keep_glue: bool = False,
    strict: bool | None = None,
    source_dir: Path | None = None,
) -> tuple[str, dict[str, dict[str, str]]]:
    """``text`` (a MyST Markdown cell) as plain Markdown, and the cell's image attachments.

    With ``keep_glue`` the glue roles stay in, between :data:`GLUE_OPEN` and
    :data:`GLUE_CLOSE`, and a glued block becomes a ``{glue:figure}`key```
    line (:mod:`amp_lesson.notebook` prints such text); ``glue`` must still
    hold every value quoted. When ``strict`` (by default, when ``labels`` are
    given), a ``{ref}`` to a label not in them, a ``{doc}`` to a page not
    in ``titles`` or a Python role to no object of the package, is a
    ``ValueError``; otherwise it becomes plain text. ``source_dir`` (the
    book's source folder) is where a ``literalinclude`` finds its file.

    >>> md, _ = myst_to_markdown(
    ...     "(t)=\\n:::{note}\\nFP16 tops out at {glue:text}`max:.0f`.\\n:::",
    ...     {"max": {"text/plain": "65504.0"}})
    >>> print(md)
    > **Note**
    >
    > FP16 tops out at 65504.
    """
    ctx = _Context(
        glue=glue,
        docs_url=docs_url.rstrip("/"),
        docname=docname,
        titles=titles or {},
        labels=labels or {},
        keep_glue=keep_glue,
        strict=labels is not None if strict is None else strict,
        source_dir=source_dir,
    )
    markdown = _convert_block(text.splitlines(), ctx)
    if ctx.missing:
        raise KeyError(
            f"{docname or 'cell'}: no glued value for {sorted(set(ctx.missing))}; "
            "build the book so the page executes, then export again"
        )
    if ctx.unresolved:
        raise ValueError(
            f"{docname or 'cell'}: cross-references to unknown targets: "
            f"{sorted(set(ctx.unresolved))}"
        )
    return _tidy(markdown), ctx.attachments


def _tidy(text: str) -> str:
    return re.sub(r"\n{3,}", "\n\n", "\n".join(line.rstrip() for line in text.splitlines())).strip()


def _convert_block(lines: list[str], ctx: _Context) -> str:
    """``lines`` of MyST as plain Markdown, block by block as MyST-Parser reads them.

    A directive (a ``fence`` or ``colon_fence`` token whose info is ``{name} argument``)
    becomes what :func:`_directive` makes of it; a literal code block is copied as it is,
    MyST inside it included; a ``(label)=`` target and a ``%`` comment go; every other
    line keeps its place, its roles replaced (:func:`_inline`).
    """
    from amp_book.pages import markdown_parser

    out: list[str] = []
    done = 0  # lines before this one are converted
    for token in markdown_parser().parse("\n".join(lines)):
        if token.level != 0 or token.map is None:
            continue
        start, end = token.map
        out.extend(_inline(line, ctx) for line in lines[done:start])
        done = end
        if token.type in ("myst_target", "myst_line_comment"):
            continue
        directive = _DIRECTIVE_INFO.match(token.info) if "fence" in token.type else None
        if directive:
            options, body = _split_options(token.content.splitlines())
            out.append(_directive(directive["name"], directive["arg"].strip(), options, body, ctx))
        elif token.type == "fence":
            out.extend(lines[start:end])
        else:
            out.extend(_inline(line, ctx) for line in lines[start:end])
    out.extend(_inline(line, ctx) for line in lines[done:])
    return "\n".join(out)


def _split_options(lines: list[str]) -> tuple[dict[str, str], list[str]]:
    options: dict[str, str] = {}
    i = 0
    if lines and lines[0].strip() == "---":  # YAML block of options
        end = next((j for j in range(1, len(lines)) if lines[j].strip() == "---"), 0)
        for entry in lines[1:end]:
            key, _, value = entry.partition(":")
            options[key.strip()] = value.strip()
        return options, lines[end + 1 :]
    while i < len(lines) and (m := _OPTION.match(lines[i].strip())):
        options[m["key"]] = (m["value"] or "").strip()
        i += 1
    return options, lines[i:]


# -- inline markup ------------------------------------------------------------------------------


def _inline(line: str, ctx: _Context) -> str:
    """Roles in ``line`` replaced; code spans that are not roles left as they are."""
    out: list[str] = []
    i = 0
    while i < len(line):
        if line[i] != "`":
            out.append(line[i])
            i += 1
            continue
        run = len(line[i:]) - len(line[i:].lstrip("`"))
        close = line.find("`" * run, i + run)
        while close != -1 and close + run < len(line) and line[close + run] == "`":
            close = line.find("`" * run, close + run + 1)
        if close == -1:
            out.append(line[i:])
            break
        content = line[i + run : close]
        role = _ROLE_NAME.search("".join(out))
        if role:
            del out[len(out) - len(role.group(0)) :]
            out.append(_role(role["name"], content, ctx))
        else:
            out.append(line[i : close + run])
        i = close + run
    return "".join(out)


def _split_title_target(content: str) -> tuple[str, str]:
    m = re.match(r"^(?P<title>.*?)\s*<(?P<target>[^<>]+)>$", content, re.DOTALL)
    return (m["title"], m["target"]) if m else ("", content)


def _doc_link(target: str, ctx: _Context) -> str:
    """The online address of document ``target`` (relative to ``ctx.docname``, or absolute)."""
    return f"{ctx.docs_url}/{_resolve_doc(target, ctx)}.html"


def _resolve_doc(target: str, ctx: _Context) -> str:
    if target.startswith("/"):
        path = target.lstrip("/")
    else:
        parts = ctx.docname.split("/")[:-1] + target.split("/")
        stack: list[str] = []
        for part in parts:
            if part == "..":
                if stack:
                    stack.pop()
            elif part not in ("", "."):
                stack.append(part)
        path = "/".join(stack)
    return path


def _glued(key: str, ctx: _Context) -> Mapping[str, Any] | None:
    key = key.split("::")[-1]
    if key not in ctx.glue:
        ctx.missing.append(key)
        return None
    return ctx.glue[key]


def _role(name: str, content: str, ctx: _Context) -> str:
    if name in ("glue:text", "glue", "glue:any", "glue:md"):
        key, spec = split_role(name.partition(":")[2] or None, content)
        bundle = _glued(key, ctx)
        if bundle is None:
            return ""
        if ctx.keep_glue:
            return f"{GLUE_OPEN}{{{name}}}`{content}`{GLUE_CLOSE}"
        if name == "glue:md" and "text/markdown" in bundle:
            return _as_text(bundle["text/markdown"])
        return format_glued_text(_as_text(bundle.get("text/plain", "")), spec)
    if name == "doc":
        title, target = _split_title_target(content)
        if ctx.strict and _resolve_doc(target, ctx) not in ctx.titles:
            ctx.unresolved.append(f"{{doc}}`{content}`")
        title = title or ctx.titles.get(_resolve_doc(target, ctx), target.split("/")[-1])
        return f"[{title}]({_doc_link(target, ctx)})"
    if name in ("ref", "numref"):
        title, target = _split_title_target(content)
        doc, anchor, section = ctx.labels.get(target, ("", "", ""))
        if ctx.strict and not doc:
            ctx.unresolved.append(f"{{{name}}}`{content}`")
        # numref's "Fig. {number}" has no number outside Sphinx: keep the words
        title = re.sub(r"\s*\{(number|name)\}", "", title).strip()
        text = title or section or target.replace("-", " ")
        return f"[{text}]({ctx.docs_url}/{doc}.html#{anchor})" if doc else text
    if name.removeprefix("py:") in _PY_ROLES:
        return _py_reference(name.removeprefix("py:"), content, ctx)
    if name == "term":
        title, target = _split_title_target(content)
        doc, anchor, _ = ctx.labels.get(TERM_PREFIX + target.lower(), ("", "", ""))
        text = title or target
        return f"[{text}]({ctx.docs_url}/{doc}.html#{anchor})" if doc else text
    if name in ("math", "eq"):
        return f"${content}$"
    if name in ("abbr",):
        return re.sub(r"\s*\(.*\)$", "", content)
    return f"`{content}`"  # an unknown role: show its text as code rather than lose it


_PY_ROLES = frozenset(["func", "meth", "class", "mod", "attr", "data", "obj", "exc"])


def _py_reference(kind: str, content: str, ctx: _Context) -> str:
    """A Python role (``{py:func}`~amp_lesson.scaler.simulate```) as a link to the API reference.

    The words are Sphinx's: the last name after ``~``, with ``()`` for a function or
    a method. The page is the API reference page of the longest module that prefixes
    the target (``api/<module>.html``), the anchor the dotted name.
    """
    title, target = _split_title_target(content)
    target = target.lstrip("!")  # "!" asks Sphinx for no link; the notebook links anyway
    short = target.startswith("~")
    target = target.lstrip("~.")
    words = title or (target.rsplit(".", 1)[-1] if short else target)
    if not title and kind in ("func", "meth"):
        words += "()"
    modules = {doc.removeprefix("api/") for doc in ctx.titles if doc.startswith("api/")}
    parts = target.split(".")
    module = next(
        (".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in modules),
        None,
    )
    if module is None or (ctx.strict and not _is_object(target)):
        if ctx.strict:
            ctx.unresolved.append(f"{{py:{kind}}}`{content}`")
        return f"`{words}`"
    anchor = f"module-{target}" if kind == "mod" else target
    return f"[`{words}`]({ctx.docs_url}/api/{module}.html#{anchor})"


def _is_object(dotted: str) -> bool:
    """Whether ``dotted`` names a module of the package or something in one."""
    import importlib

    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:n]))
        except ImportError:
            continue
        for name in parts[n:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def _as_text(data: Any) -> str:
    return "".join(data) if isinstance(data, list) else str(data)


# -- directives ---------------------------------------------------------------------------------


def _quote(title: str, body: str) -> str:
    lines = [f"> **{title}**"] if title else []
    if body.strip():
        lines += [">"] if lines else []
        lines += [f"> {line}" if line.strip() else ">" for line in body.strip().splitlines()]
    return "\n".join(lines) + "\n"


def _details(summary: str, body: str) -> str:
    return f"<details>\n<summary>{summary}</summary>\n\n{body.strip()}\n\n</details>\n"


def _directive(name: str, arg: str, options: dict[str, str], body: list[str], ctx: _Context) -> str:
    inner = _convert_block(body, ctx)
    if name in ADMONITIONS:
        return "\n" + _quote(_inline(arg, ctx) or ADMONITIONS[name], inner) + "\n"
    if name == "admonition":
        return "\n" + _quote(_inline(arg, ctx), inner) + "\n"
    if name == "lesson-correction":
        title = f"{CORRECTION_TITLE}: {_inline(arg, ctx)}" if arg else CORRECTION_TITLE
        return "\n" + _quote(title, inner) + "\n"
    if name == "dropdown":
        return "\n" + _details(_inline(arg, ctx) or "Show", inner) + "\n"
    if name in KICKERS:
        return "\n" + _selfcheck(name, _inline(arg, ctx), options, body, ctx) + "\n"
    if name in ("glue", "glue:any", "glue:figure"):
        return "\n" + _glue_block(arg, options, inner, ctx) + "\n"
    if name in ("math",):
        return "\n$$\n" + "\n".join(body).strip() + "\n$$\n"
    if name in ("figure", "image"):
        alt = options.get("alt", "")
        caption = f"\n\n*{inner.strip()}*" if inner.strip() else ""
        return f"\n![{alt}]({arg}){caption}\n"
    if name in PLAYGROUNDS:
        link = _doc_link("/" + ctx.docname, ctx) if ctx.docname else ctx.docs_url
        note = f"*The {PLAYGROUNDS[name]} is interactive in [the online book]({link}).*"
        # Their bodies introduce the site's static versions, absent here.
        hint = IN_A_NOTEBOOK[name]
        if name == "bit-explorer":
            hint = hint.replace(EXPLORER_CALL, explorer_call(options))
        return f"\n{note} {hint}\n"
    if name == "literalinclude":
        return "\n" + _literal_include(arg, options, ctx) + "\n"
    if name in ("toctree", "lesson-corrections", "nb-exec-table", "contents", "page-info"):
        return ""  # navigation, build reports and the book's reading path belong to the book
    # Anything else: keep its content rather than lose it.
    return "\n" + inner + "\n"


EXPLORER_CALL = "explorer_rows([65519.0, 65520.0, 6.1e-5])"
"""The call a notebook names for a bit explorer without ``:examples:`` (see :func:`explorer_call`)."""


def explorer_call(options: dict[str, str]) -> str:
    """The ``explorer_rows`` call that gives a bit explorer's table for its own finite examples
    (three at most) and the formats it shows first, or :data:`EXPLORER_CALL`.

    >>> explorer_call({"examples": "0.25, nan, 5", "show": "fp4_e2m1 fp8_e4m3"})
    "explorer_rows([0.25, 5.0], ['fp4_e2m1', 'fp8_e4m3'])"
    >>> explorer_call({})
    'explorer_rows([65519.0, 65520.0, 6.1e-5])'
    """
    values = []
    for text in options.get("examples", "").split(","):
        try:
            value = float(text)
        except ValueError:
            continue
        if math.isfinite(value):
            values.append(value)
    if not values:
        return EXPLORER_CALL
    names = (options.get("show") or options.get("formats") or "").replace(",", " ").split()
    return f"explorer_rows({values[:3]!r}" + (f", {names!r})" if names else ")")


IN_A_NOTEBOOK = {
    "bit-explorer": (
        f"Here, `amp_lesson.playground.{EXPLORER_CALL}` gives its "
        "rows for any values you pass, as the cells of this notebook compute them."
    ),
    "scaler-playground": (
        "Here, `amp_lesson.playground.scaler_trace(settings, read_steps(pattern))` gives its "
        "trace, step by step, for GradScaler's settings and a pattern of overflows (`x`) and "
        "clean steps (`.`), and `describe_trace` its summary."
    ),
}


def _literal_include(arg: str, options: dict[str, str], ctx: _Context) -> str:
    """A ``literalinclude`` as the fenced code block Sphinx shows (same options, same reader)."""
    if ctx.source_dir is None:
        raise ValueError(f"{ctx.docname or 'cell'}: a literalinclude needs source_dir to be read")
    from types import SimpleNamespace

    from sphinx.directives.code import LiteralIncludeReader

    page = Path(ctx.source_dir) / ctx.docname
    path = (Path(ctx.source_dir) / arg.lstrip("/")) if arg.startswith("/") else page.parent / arg
    read = {key: value.strip('"') for key, value in options.items()}
    if "dedent" in read:
        read["dedent"] = int(read["dedent"]) if read["dedent"] else None  # type: ignore[assignment]
    text, _ = LiteralIncludeReader(
        str(path), read, SimpleNamespace(source_encoding="utf-8-sig")
    ).read()
    return f"```{options.get('language', '')}\n{text.rstrip()}\n```"


def _glue_block(key: str, options: dict[str, str], caption: str, ctx: _Context) -> str:
    bundle = _glued(key, ctx)
    if bundle is None:
        return ""
    if ctx.keep_glue:
        shown = f"{GLUE_OPEN}{{glue:figure}}`{key}`{GLUE_CLOSE}"
        return shown + (f"\n\n*{caption.strip()}*" if caption.strip() else "")
    alt = options.get("alt", "").replace("\n", " ")
    for mime, ext in (("image/png", "png"), ("image/jpeg", "jpg")):
        if mime in bundle:
            name = f"{key}.{ext}"
            ctx.attachments[name] = {mime: _as_text(bundle[mime]).replace("\n", "")}
            text = f"![{alt}](attachment:{name})"
            break
    else:
        if "image/svg+xml" in bundle:
            svg = _as_text(bundle["image/svg+xml"]).encode()
            data = base64.b64encode(svg).decode()
            ctx.attachments[f"{key}.svg"] = {"image/svg+xml": data}
            text = f"![{alt}](attachment:{key}.svg)"
        elif "text/markdown" in bundle:
            text = _as_text(bundle["text/markdown"])
        elif "text/html" in bundle:
            text = _as_text(bundle["text/html"])
        else:
            text = "```\n" + format_glued_text(_as_text(bundle.get("text/plain", "")), "") + "\n```"
    return text + (f"\n\n*{caption.strip()}*" if caption.strip() else "")


# -- self-checks ----------------------------------------------------------------------------------


_ITEM = re.compile(r"^(?P<indent>\s*)[-*+]\s+(?P<text>.*)$")
_MARK = re.compile(r"^\[(?P<mark>[^\]]*)\]\s*(?P<text>.*)$")


@dataclass
class _Item:
    label: str  # the text after the marker ([x], [ ], [bucket])
    mark: str | None
    note: list[str]


def _first_list(lines: list[str]) -> tuple[list[str], list[_Item], list[str]]:
    """Lines before the body's first bullet list, its items, and the lines after it."""
    start = next(
        (i for i, line in enumerate(lines) if _ITEM.match(line) and not line[0].isspace()), None
    )
    if start is None:
        return lines, [], []
    items: list[_Item] = []
    i = start
    while i < len(lines):
        line = lines[i]
        m = _ITEM.match(line)
        if m and not m["indent"]:
            mark = _MARK.match(m["text"])
            items.append(
                _Item(mark["text"] if mark else m["text"], mark["mark"] if mark else None, [])
            )
        elif line.strip() and not line[0].isspace():
            break  # unindented text: the list is over
        elif items:
            items[-1].note.append(line)
        i += 1
    return lines[:start], items, lines[i:]


def _note_text(note: list[str]) -> str:
    lines = [line.strip() for line in note]
    if lines and lines[0].startswith(":"):  # definition-list form ": note"
        lines[0] = lines[0][1:].strip()
    return " ".join(line for line in lines if line)


def _table_split(lines: list[str]) -> tuple[list[str], list[str], list[str]]:
    start = next((i for i, line in enumerate(lines) if line.lstrip().startswith("|")), None)
    if start is None:
        return lines, [], []
    end = start
    while end < len(lines) and lines[end].lstrip().startswith("|"):
        end += 1
    return lines[:start], lines[start:end], lines[end:]


def _cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip().strip("|").split("|")]


def _selfcheck(
    name: str, question: str, options: dict[str, str], body: list[str], ctx: _Context
) -> str:
    kicker = options.get("title") or kicker_of(name, options.get("mode"))
    head = f"**{kicker}.** {question}"
    md = lambda lines: _convert_block(lines, ctx)
    if name == "selfcheck-choice":
        mode = options.get("mode", "single")
        before, items, after = _first_list(body)
        how = {
            "single": "Choose one.",
            "multiple": "Choose every option that applies.",
            "eliminate": "Rule out the wrong options one by one, saying why.",
        }.get(mode, "Choose one.")
        shown = "\n".join(f"- {_inline(item.label, ctx)}" for item in items)
        right = [item for item in items if (item.mark or "").strip().lower() == "x"]
        answer = ["**Answer:** " + "; ".join(_inline(item.label, ctx) for item in right)]
        if options.get("answer"):
            answer.append(_inline(options["answer"], ctx))
        notes = [
            f"- {_inline(item.label, ctx)}: {'right' if item in right else 'wrong'}. "
            + _inline(_note_text(item.note), ctx)
            for item in items
        ]
        answer += ["", *notes, "", md(after)]
        return f"{head}\n\n{md(before)}\n\n{how}\n\n{shown}\n\n" + _details(
            "Answer", "\n".join(answer)
        )
    if name == "selfcheck-predict":
        answer = "**Answer:** " + _inline(options.get("answer", ""), ctx) + "\n\n" + md(body)
        return f"{head}\n\nWrite down your prediction before you open the answer.\n\n" + _details(
            "Answer", answer
        )
    if name == "selfcheck-sort":
        buckets = [b.strip() for b in options.get("buckets", "").split("|") if b.strip()]
        before, items, after = _first_list(body)
        shown = "\n".join(f"- {_inline(item.label, ctx)}" for item in items)
        sorted_items = "\n".join(
            f"- {_inline(item.label, ctx)}: **{(item.mark or '').strip()}**"
            + (f". {_inline(_note_text(item.note), ctx)}" if _note_text(item.note) else "")
            for item in items
        )
        groups = " or ".join(f"**{b}**" for b in buckets)
        return f"{head}\n\n{md(before)}\n\nPut each in {groups}:\n\n{shown}\n\n" + _details(
            "Answer", f"{sorted_items}\n\n{md(after)}"
        )
    if name == "selfcheck-step-through":
        before, table, after = _table_split(body)
        if not table:
            before, items, after = _first_list(body)
            rows = "\n".join(f"1. {_inline(item.label, ctx)}" for item in items)
        else:
            rows = md(table)
        nxt = _inline(options.get("next", ""), ctx)
        ask = f"\n\n**Then:** {nxt}" if nxt else ""
        return f"{head}\n\n{md(before)}\n\n{rows}{ask}\n\n" + _details("Answer", md(after))
    if name == "selfcheck-refill":
        before, table, after = _table_split(body)
        if not table:
            return f"{head}\n\n{md(body)}"
        header = _cells(table[0])
        wanted = [c.strip() for c in options.get("column", "").split("|") if c.strip()]
        blank = {
            int(c) - 1 if c.isdigit() else header.index(c)
            for c in wanted
            if c.isdigit() or c in header
        }
        blanked = [table[0], table[1]] + [
            "| " + " | ".join("?" if j in blank else c for j, c in enumerate(_cells(row))) + " |"
            for row in table[2:]
        ]
        names = [f"**{header[j]}**" for j in sorted(blank) if j < len(header)]
        cols = " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
        which = "columns" if len(names) > 1 else "column"
        return (
            f"{head}\n\n{md(before)}\n\nFill in the {which} {cols} from memory:\n\n"
            + md(blanked)
            + "\n\n"
            + _details("Answer", md(table) + "\n\n" + md(after))
        )
    # selfcheck-discuss
    hint = options.get("hint")
    text = f"{head}\n\n{md(body)}"
    return text + ("\n\n" + _details("Hint", _inline(hint, ctx)) if hint else "")


# -- whole notebooks ---------------------------------------------------------------------------------


_RUN_TEXT = re.compile(re.escape(GLUE_OPEN) + "(.*?)" + re.escape(GLUE_CLOSE), re.DOTALL)
TEXT_CELL_TAG = "amp-lesson-run-text"
"""Metadata tag of a cell that prints a passage of the page from the run's values."""
TEXT_CELL_TITLE = "#@title Printed from this run's values (double-click for the code)"
BOOK_CELL_TITLE = "#@title The book's checks of this run (double-click for the code)"
INSTALL_CELL_TAG = "amp-lesson-install"


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
        return _as_text(glue[key].get("text/plain", ""))

    def markdown(key: str) -> str:
        return _as_text(glue[key].get("text/markdown", glue[key].get("text/plain", "")))

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
    return not any(t.type == "heading_open" for t in _blocks(_as_text(cell["source"])))


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
            text = _as_text(cell["source"])
            templates.append(text)
            passages.append(text)
        else:
            flush()
            sources.append(_as_text(cell["source"]))
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
            text = _as_text((output.get("data") or {}).get("text/plain", ""))
            m = re.match(r"^Provenance\(.*?\bdevice_name='([^']+)'", text)
            if m:
                return m[1]
    return None


GPU_RUNTIME = (
    "**On a GPU.** In Colab, choose *Runtime → Change runtime type*, pick a GPU, save, and run "
    "the notebook from the top. The cells use CUDA whenever torch sees it "
    "(`amp_lesson.device.get_device`), so FP16 and BF16 then run on the GPU's kernels: the "
    "timings, the memory figures and the CPU-only notes change, and the passages printed from "
    "the run (the cells that show only text) say what the GPU did."
)


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
) -> dict[str, Any]:
    """The page ``nb`` (MyST-NB's notebook of it) as a plain Jupyter notebook.

    ``glue`` holds the glued values its Markdown quotes; ``executed`` says
    whether ``nb`` carries the outputs of the build (kept, less the glue
    records) or is the bare page; ``titles`` (docname: page title) and
    ``labels`` (label: docname, anchor, section title) make cross-references
    links; ``built_on`` names the build's device in the label of each passage
    printed from the run (:func:`text_cell`); ``source_dir`` is the book's
    source folder (for ``literalinclude``). Raises ``KeyError`` naming any
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
    cells: list[dict[str, Any]] = []
    heading = ""
    for cell in copy.deepcopy(list(nb.get("cells", []))):
        source = _as_text(cell.get("source", ""))
        tags = set((cell.get("metadata") or {}).get("tags", []))
        hidden = "remove-cell" in tags
        if hidden and cell["cell_type"] != "code":
            continue
        if cell["cell_type"] == "markdown":
            text, attachments = myst_to_markdown(
                source,
                glue,
                docs_url=docs_url,
                docname=docname,
                titles=titles,
                labels=labels,
                keep_glue=True,
                strict=strict_references,
                source_dir=source_dir,
            )
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
        elif cell["cell_type"] == "code":
            code = rewrite_glue_imports(source)
            if not code.strip():
                continue
            outputs = [o for o in cell.get("outputs", []) if not _is_glue_output(o)]
            metadata: dict[str, Any] = {"tags": sorted(tags)} if tags else {}
            if hidden or {"hide-input", "remove-input"} & tags:
                # The page hides this cell, but later cells may use what it defines: keep
                # it, with its source collapsed in Jupyter and Colab.
                metadata |= {"jupyter": {"source_hidden": True}, "cellView": "form"}
            if "solution" in tags:
                # The reader's own cell goes before the solution, and before the paragraph
                # that introduces it (one that ends with a colon) if it comes right before.
                intro = _split_introduction(cells)
                cells.append(
                    {
                        "cell_type": "code",
                        "execution_count": None,
                        "metadata": {},
                        "outputs": [],
                        "source": f"# Your code for \u201c{heading}\u201d. The solution is "
                        "collapsed below: run it to compare.",
                    }
                )
                cells.extend(intro)
                code = f"#@title Solution to \u201c{heading}\u201d (double-click to show)\n{code}"
            cells.append(
                {
                    "cell_type": "code",
                    "execution_count": None,
                    "metadata": metadata,
                    "outputs": outputs if executed else [],
                    "source": code,
                }
            )
        # raw cells (none in the book) are left out
    where = (
        "with the outputs of the build that published it"
        if executed
        else "without the outputs of its code cells (run them to see yours)"
    )
    intro = (
        f"This notebook is a page of the book *Mixed precision in PyTorch* "
        f"([read it online]({_doc_link('/' + docname, _Context({}, docs_url, docname))})), "
        f"{where}. It runs in plain Jupyter or Colab: the next cell installs the book's "
        f"package `amp_lesson` {version} from [its repository]({repository}) where it is missing."
        "\n\n" + GPU_RUNTIME
    )
    head = [
        {"cell_type": "markdown", "metadata": {}, "source": intro},
        {
            "cell_type": "code",
            "execution_count": None,
            "metadata": {"tags": [INSTALL_CELL_TAG]},
            "outputs": [],
            "source": install_cell_source(version, repository),
        },
    ]
    all_cells = head + fold_book_cells(cells)
    for i, cell in enumerate(all_cells):
        cell["id"] = f"cell-{i}"  # stable ids: exporting again gives the same file
    metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    return {"cells": all_cells, "metadata": metadata, "nbformat": 4, "nbformat_minor": 5}


def export_script(nb: Mapping[str, Any]) -> str:
    """An exported notebook (:func:`export_notebook`) as a Python script, one ``# %%`` per cell.

    Markdown cells become comments under ``# %% [markdown]`` (the percent
    format that Jupytext, VS Code and Spyder read as cells); the install cell
    becomes the ``pip install`` line to run first, as a comment. Run as a
    plain script, it prints the page's passages from its own run.
    """
    out = ['"""' + _script_title(nb) + '"""', ""]
    for cell in nb.get("cells", []):
        source = _as_text(cell.get("source", ""))
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
            m = re.search(r"^# (.+)$", _as_text(cell.get("source", "")), re.MULTILINE)
            if m:
                return f"{m[1]}: a page of the book Mixed precision in PyTorch, as a script."
    return "A page of the book Mixed precision in PyTorch, as a script."


TERM_PREFIX = "term:"
"""Key prefix of a glossary term in the labels of :func:`titles_and_labels` (lower case)."""


def _blocks(text: str) -> Iterator[Any]:
    """The tokens of the MyST ``text``, and in turn those of each directive's content that is
    MyST (a literal one's, :data:`_LITERAL_DIRECTIVES`, is not: a heading in it is none)."""
    from amp_book.pages import markdown_parser

    for token in markdown_parser().parse(text):
        yield token
        directive = _DIRECTIVE_INFO.match(token.info) if "fence" in token.type else None
        if directive and directive["name"] not in _LITERAL_DIRECTIVES:
            yield from _blocks("\n".join(_split_options(token.content.splitlines())[1]))


def _glossary_terms(token: Any) -> list[str]:
    """The terms a ``{glossary}`` token defines: its content's unindented lines, less options."""
    directive = _DIRECTIVE_INFO.match(token.info) if "fence" in token.type else None
    if directive is None or directive["name"] != "glossary":
        return []
    lines = token.content.splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln[0].isspace() and ln[0] != ":"]


def titles_and_labels(
    pages: Mapping[str, str],
) -> tuple[dict[str, str], dict[str, tuple[str, str, str]]]:
    """Page titles and section labels of MyST ``pages`` (docname: text), as Sphinx finds them.

    Each page is read as the build reads it (:func:`.pages.read_text`, then
    MyST-Parser's tokens): titles and ``(label)=`` targets come from its
    Markdown cells, outside literal blocks, and a code cell's figure ``name`` is a label too. Each term of a
    ``{glossary}`` is a label under :data:`TERM_PREFIX` and its lower-case
    text, with the anchor Sphinx gives it.

    >>> titles_and_labels({"a/b": "# Bee\\n\\n(sec-x)=\\n## Sec X\\n"})
    ({'a/b': 'Bee'}, {'sec-x': ('a/b', 'sec-x', 'Sec X')})
    >>> titles_and_labels({"g": "# G\\n\\n```{glossary}\\nLoss scale\\n  The factor.\\n```\\n"})[1]
    {'term:loss scale': ('g', 'term-Loss-scale', 'Loss scale')}
    """
    from sphinx.util.nodes import _make_id  # the ids Sphinx gives glossary terms

    from amp_book.pages import read_text

    titles: dict[str, str] = {}
    labels: dict[str, tuple[str, str, str]] = {}
    for doc, text in pages.items():
        for cell in read_text(text).cells:
            if cell.kind == "code":
                figure = (cell.metadata.get("mystnb") or {}).get("figure") or {}
                if figure.get("name"):
                    labels[figure["name"]] = (doc, figure["name"], figure.get("caption", ""))
                continue
            if cell.kind != "markdown":
                continue
            tokens = list(_blocks(cell.source))
            for i, token in enumerate(tokens):
                for term in _glossary_terms(token):
                    labels[TERM_PREFIX + term.lower()] = (doc, _make_id(f"term-{term}"), term)
                if token.type == "heading_open" and doc not in titles:
                    titles[doc] = _smart(tokens[i + 1].content)
                elif token.type == "myst_target":
                    after = tokens[i + 1 : i + 3]
                    heading = [t.type for t in after[:1]] == ["heading_open"]
                    title = _smart(after[1].content) if heading else ""
                    labels[token.content] = (doc, token.content, title)
    return titles, labels


def _smart(title: str) -> str:
    """``title`` with the typographic quotes and dashes Sphinx gives it (``smartquotes``)."""
    from docutils.utils.smartquotes import smartyPants

    return smartyPants(title, "qDe", "en")


def book_titles_and_labels(docs: Path) -> tuple[dict[str, str], dict[str, tuple[str, str, str]]]:
    """:func:`titles_and_labels` of every MyST page under ``docs`` (the book's source folder)."""
    docs = Path(docs)
    texts = {
        path.relative_to(docs).with_suffix("").as_posix(): path.read_text(encoding="utf-8")
        for path in sorted(docs.rglob("*.md"))
        if not {"_build", ".jupyter_cache"} & set(path.relative_to(docs).parts)
    }
    return titles_and_labels(texts)


_LITERAL_DIRECTIVES = frozenset(
    ["code-block", "code", "sourcecode", "code-cell", "math", "eval-rst", "raw", "mermaid"]
)
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
