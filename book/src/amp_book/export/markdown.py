"""MyST as plain Markdown, for a notebook that runs where there is no MyST-NB or Sphinx.

One idea, every construct the book's pages use, which is why it is one module: admonitions
and correction boxes become quoted blocks, a dropdown a ``<details>`` section, a self-check
its question with the answers collapsed and no option marked right in the question itself;
cross-references become links to the hosted book (one that names no known target is an
error); glue roles their values, or stay marked for a passage the notebook's run prints.
The blocks are MyST-Parser's (:func:`amp_book.pages.markdown_parser`); within a line,
roles are found between code spans' backticks.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from amp_book.corrections import TITLE as CORRECTION_TITLE
from amp_book.export.targets import DIRECTIVE_INFO, TERM_PREFIX, split_options
from amp_book.kickers import KICKERS
from amp_book.kickers import kicker as kicker_of
from amp_lesson.notebook import (
    format_glued_text,
    split_role,
)

GlueValues = Mapping[str, Mapping[str, Any]]
"""Glued values by key: a MIME bundle each (``{"text/plain": ..., "image/png": ...}``)."""


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


def is_glue_output(output: Mapping[str, Any]) -> bool:
    return "scrapbook" in (output.get("metadata") or {})


# -- MyST to plain Markdown --------------------------------------------------------------------


@dataclass
class Context:
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
    objects: Callable[[str], bool] | None = None  # whether a dotted name is documented


GLUE_OPEN, GLUE_CLOSE = "\ue000", "\ue001"
"""Around a glue role :func:`myst_to_markdown` keeps (``keep_glue=True``): private-use characters."""


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
    objects: Callable[[str], bool] | None = None,
) -> tuple[str, dict[str, dict[str, str]]]:
    """``text`` (a MyST Markdown cell) as plain Markdown, and the cell's image attachments.

    With ``keep_glue`` the glue roles stay in, between :data:`GLUE_OPEN` and
    :data:`GLUE_CLOSE`, and a glued block becomes a ``{glue:figure}`key```
    line (:mod:`amp_lesson.notebook` prints such text); ``glue`` must still
    hold every value quoted. When ``strict`` (by default, when ``labels`` are
    given), a ``{ref}`` to a label not in them, a ``{doc}`` to a page not
    in ``titles`` or a Python role to no object of the package, is a
    ``ValueError``; otherwise it becomes plain text. ``source_dir`` (the
    book's source folder) is where a ``literalinclude`` finds its file. ``objects`` says
    whether a dotted name is an object of the package (a build passes the objects its API
    reference documents); by default the name is imported.

    >>> md, _ = myst_to_markdown(
    ...     "(t)=\\n:::{note}\\nFP16 tops out at {glue:text}`max:.0f`.\\n:::",
    ...     {"max": {"text/plain": "65504.0"}})
    >>> print(md)
    > **Note**
    >
    > FP16 tops out at 65504.
    """
    ctx = Context(
        glue=glue,
        docs_url=docs_url.rstrip("/"),
        docname=docname,
        titles=titles or {},
        labels=labels or {},
        keep_glue=keep_glue,
        strict=labels is not None if strict is None else strict,
        source_dir=source_dir,
        objects=objects,
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


def _convert_block(lines: list[str], ctx: Context) -> str:
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
        directive = DIRECTIVE_INFO.match(token.info) if "fence" in token.type else None
        if directive:
            options, body = split_options(token.content.splitlines())
            out.append(_directive(directive["name"], directive["arg"].strip(), options, body, ctx))
        elif token.type == "fence":
            out.extend(lines[start:end])
        else:
            out.extend(_inline(line, ctx) for line in lines[start:end])
    out.extend(_inline(line, ctx) for line in lines[done:])
    return "\n".join(out)


def _inline(line: str, ctx: Context) -> str:
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


def doc_link(target: str, ctx: Context) -> str:
    """The online address of document ``target`` (relative to ``ctx.docname``, or absolute)."""
    return f"{ctx.docs_url}/{_resolve_doc(target, ctx)}.html"


def _resolve_doc(target: str, ctx: Context) -> str:
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


def _glued(key: str, ctx: Context) -> Mapping[str, Any] | None:
    key = key.split("::")[-1]
    if key not in ctx.glue:
        ctx.missing.append(key)
        return None
    return ctx.glue[key]


def _role(name: str, content: str, ctx: Context) -> str:
    if name in ("glue:text", "glue", "glue:any", "glue:md"):
        key, spec = split_role(name.partition(":")[2] or None, content)
        bundle = _glued(key, ctx)
        if bundle is None:
            return ""
        if ctx.keep_glue:
            return f"{GLUE_OPEN}{{{name}}}`{content}`{GLUE_CLOSE}"
        if name == "glue:md" and "text/markdown" in bundle:
            return as_text(bundle["text/markdown"])
        return format_glued_text(as_text(bundle.get("text/plain", "")), spec)
    if name == "doc":
        title, target = _split_title_target(content)
        if ctx.strict and _resolve_doc(target, ctx) not in ctx.titles:
            ctx.unresolved.append(f"{{doc}}`{content}`")
        title = title or ctx.titles.get(_resolve_doc(target, ctx), target.split("/")[-1])
        return f"[{title}]({doc_link(target, ctx)})"
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
    if name in ("cite", "cite:p", "cite:t"):
        return _citation(name, content, ctx)
    if name.startswith("cite:"):  # a citation style the notebooks do not write
        if ctx.strict:
            ctx.unresolved.append(f"{{{name}}}`{content}`")
        return content
    if name in ("math", "eq"):
        return f"${content}$"
    if name == "reading-time":  # the build sums the pages' times; a notebook has one page
        return f"[a few hours]({ctx.docs_url}/index.html)" if ctx.docs_url else "a few hours"
    if name in ("abbr",):
        return re.sub(r"\s*\(.*\)$", "", content)
    return f"`{content}`"  # an unknown role: show its text as code rather than lose it


_PY_ROLES = frozenset(["func", "meth", "class", "mod", "attr", "data", "obj", "exc"])

BIBLIOGRAPHY = "references.bib"
"""The book's bibliography, in its source folder (``docs/conf.py``'s ``bibtex_bibfiles``)."""

_BIBLIOGRAPHIES: dict[Path, dict[str, tuple[str, str, str]]] = {}


def bibliography(path: Path) -> dict[str, tuple[str, str, str]]:
    """``{key: (authors, year, address)}`` of a BibTeX file, as a citation names them.

    ``authors`` is the one or two last names, or the first and "et al." (an author in
    braces, an organisation, as it is); ``address`` the DOI's, else the ``url``.
    """
    path = path.resolve()
    if path not in _BIBLIOGRAPHIES:
        from pybtex.database import parse_file

        entries = {}
        for key, entry in parse_file(str(path), bib_format="bibtex").entries.items():
            names = [
                " ".join(p.last_names).replace("{", "").replace("}", "")
                for p in entry.persons.get("author", [])
            ]  # as sphinxcontrib-bibtex counts them: "and others" is one more person
            authors = f"{names[0]} et al." if len(names) >= 3 else " and ".join(names)
            doi = entry.fields.get("doi")
            address = f"https://doi.org/{doi}" if doi else entry.fields.get("url", "")
            entries[key] = (authors, entry.fields.get("year", ""), address)
        _BIBLIOGRAPHIES[path] = entries
    return _BIBLIOGRAPHIES[path]


def _citation(name: str, content: str, ctx: Context) -> str:
    """A citation as the book prints it (``amp_book.citations``), each linked to the work:
    "Micikevicius et al. (2018)" for ``{cite:t}``, "(Micikevicius et al., 2018)" otherwise."""
    bib = bibliography(ctx.source_dir / BIBLIOGRAPHY) if ctx.source_dir else {}
    parts = []
    for key in (k.strip() for k in content.split(",")):
        if key not in bib:
            if ctx.strict:
                ctx.unresolved.append(f"{{{name}}}`{key}`")
            parts.append(key)
            continue
        authors, year, address = bib[key]
        text = f"{authors} ({year})" if name == "cite:t" else f"{authors}, {year}"
        parts.append(f"[{text}]({address})" if address else text)
    return "; ".join(parts) if name == "cite:t" else f"({'; '.join(parts)})"


def _py_reference(kind: str, content: str, ctx: Context) -> str:
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
    if module is None or (ctx.strict and not (ctx.objects or _is_object)(target)):
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


def as_text(data: Any) -> str:
    return "".join(data) if isinstance(data, list) else str(data)


# -- directives ---------------------------------------------------------------------------------


def _quote(title: str, body: str) -> str:
    lines = [f"> **{title}**"] if title else []
    if body.strip():
        lines += [">"] if lines else []
        lines += [f"> {line}" if line.strip() else ">" for line in body.strip().splitlines()]
    return "\n".join(lines) + "\n"


DEEPER = "Going deeper"
"""The words before a Going deeper block's title (:mod:`amp_book.deeper` shows the same)."""


def _details(summary: str, body: str) -> str:
    return f"<details>\n<summary>{summary}</summary>\n\n{body.strip()}\n\n</details>\n"


def _directive(name: str, arg: str, options: dict[str, str], body: list[str], ctx: Context) -> str:
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
    if name == "deeper":  # a block of prose collapses; one that holds code cells is marked
        title = f"{DEEPER}: {_inline(arg, ctx)}"
        if inner.strip():
            return "\n" + _details(title, inner) + "\n"
        return f"\n**{title}** (to the line below; it can wait for a second reading)\n"
    if name == "deeper-end":
        return "\n---\n"
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
        link = doc_link("/" + ctx.docname, ctx) if ctx.docname else ctx.docs_url
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


def _literal_include(arg: str, options: dict[str, str], ctx: Context) -> str:
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


def _glue_block(key: str, options: dict[str, str], caption: str, ctx: Context) -> str:
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
            ctx.attachments[name] = {mime: as_text(bundle[mime]).replace("\n", "")}
            text = f"![{alt}](attachment:{name})"
            break
    else:
        if "image/svg+xml" in bundle:
            svg = as_text(bundle["image/svg+xml"]).encode()
            data = base64.b64encode(svg).decode()
            ctx.attachments[f"{key}.svg"] = {"image/svg+xml": data}
            text = f"![{alt}](attachment:{key}.svg)"
        elif "text/markdown" in bundle:
            text = as_text(bundle["text/markdown"])
        elif "text/html" in bundle:
            text = as_text(bundle["text/html"])
        else:
            text = "```\n" + format_glued_text(as_text(bundle.get("text/plain", "")), "") + "\n```"
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
    name: str, question: str, options: dict[str, str], body: list[str], ctx: Context
) -> str:
    """A self-check as Markdown: its question, what to do, and the answer folded below."""
    kicker = options.get("title") or kicker_of(name, options.get("mode"))
    head = f"**{kicker}.** {question}"
    write = _SELFCHECKS.get(name, _discuss)
    return f"{head}\n\n" + write(options, body, ctx)


def _choice(options: dict[str, str], body: list[str], ctx: Context) -> str:
    md = lambda lines: _convert_block(lines, ctx)
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
    return f"{md(before)}\n\n{how}\n\n{shown}\n\n" + _details("Answer", "\n".join(answer))


def _predict(options: dict[str, str], body: list[str], ctx: Context) -> str:
    answer = _inline(options.get("answer", ""), ctx) + "\n\n" + _convert_block(body, ctx)
    return "Write down your prediction before you open the answer.\n\n" + _details(
        "Answer", "**Answer:** " + answer
    )


def _sort(options: dict[str, str], body: list[str], ctx: Context) -> str:
    md = lambda lines: _convert_block(lines, ctx)
    buckets = [b.strip() for b in options.get("buckets", "").split("|") if b.strip()]
    before, items, after = _first_list(body)
    shown = "\n".join(f"- {_inline(item.label, ctx)}" for item in items)
    sorted_items = "\n".join(
        f"- {_inline(item.label, ctx)}: **{(item.mark or '').strip()}**"
        + (f". {_inline(_note_text(item.note), ctx)}" if _note_text(item.note) else "")
        for item in items
    )
    groups = " or ".join(f"**{b}**" for b in buckets)
    return f"{md(before)}\n\nPut each in {groups}:\n\n{shown}\n\n" + _details(
        "Answer", f"{sorted_items}\n\n{md(after)}"
    )


def _step_through(options: dict[str, str], body: list[str], ctx: Context) -> str:
    md = lambda lines: _convert_block(lines, ctx)
    before, table, after = _table_split(body)
    if not table:
        before, items, after = _first_list(body)
        rows = "\n".join(f"1. {_inline(item.label, ctx)}" for item in items)
    else:
        rows = md(table)
    nxt = _inline(options.get("next", ""), ctx)
    ask = f"\n\n**Then:** {nxt}" if nxt else ""
    return f"{md(before)}\n\n{rows}{ask}\n\n" + _details("Answer", md(after))


def _refill(options: dict[str, str], body: list[str], ctx: Context) -> str:
    md = lambda lines: _convert_block(lines, ctx)
    before, table, after = _table_split(body)
    if not table:
        return md(body)
    header = _cells(table[0])
    wanted = [c.strip() for c in options.get("column", "").split("|") if c.strip()]
    blank = {
        int(c) - 1 if c.isdigit() else header.index(c) for c in wanted if c.isdigit() or c in header
    }
    blanked = [table[0], table[1]] + [
        "| " + " | ".join("?" if j in blank else c for j, c in enumerate(_cells(row))) + " |"
        for row in table[2:]
    ]
    names = [f"**{header[j]}**" for j in sorted(blank) if j < len(header)]
    cols = " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
    which = "columns" if len(names) > 1 else "column"
    return (
        f"{md(before)}\n\nFill in the {which} {cols} from memory:\n\n"
        + md(blanked)
        + "\n\n"
        + _details("Answer", md(table) + "\n\n" + md(after))
    )


def _discuss(options: dict[str, str], body: list[str], ctx: Context) -> str:
    hint = options.get("hint")
    text = _convert_block(body, ctx)
    return text + ("\n\n" + _details("Hint", _inline(hint, ctx)) if hint else "")


_SELFCHECKS = {
    "selfcheck-choice": _choice,
    "selfcheck-predict": _predict,
    "selfcheck-sort": _sort,
    "selfcheck-step-through": _step_through,
    "selfcheck-refill": _refill,
}
"""How each kind of self-check reads in a notebook (any other: a question to discuss)."""


# -- whole notebooks ---------------------------------------------------------------------------------
