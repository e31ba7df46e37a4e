"""The page's words, printed by the notebook's own run.

On the site, a sentence that reports the run quotes values the page's cells
glued, ``{glue:text}`key```, and MyST-NB puts them in when the book is built.
A page's notebook (its download, and the copy Colab opens) runs somewhere
else: on a reader's laptop, on a Colab GPU. There the same sentences must say
what *that* run did, so the notebook prints them:

- :func:`glue` keeps a value under a name, as ``myst_nb.glue`` does in the
  book (the notebook's cells import it from here; :func:`amp_lesson.claims.claim`
  keeps its words here too);
- :func:`show_text` prints a passage of the page, Markdown with the glue
  roles of MyST in it, with this run's values in place; a line that is only
  ``{glue:figure}`key``` shows the glued object itself (a figure, a table)
  in the passage.

>>> glue("fp16_max", 65504.0, display=False)
>>> print(render_text("FP16 tops out at {glue:text}`fp16_max:.0f`."))
FP16 tops out at 65504.
"""

from __future__ import annotations

import ast
import base64
import io
import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "ROLE",
    "WAITING_NOTE",
    "bundle_markup",
    "format_glued_text",
    "glue",
    "glued",
    "render_text",
    "show_text",
    "split_role",
    "substitute",
    "template_keys",
]

_GLUED: dict[str, Any] = {}
_WAITING: list[tuple[str, Any]] = []
"""Passages that quote values not glued yet, each with its display (``None`` in a script)."""

ROLE = re.compile(r"\{glue(?::(?P<kind>text|md|any|figure))?\}`(?P<content>[^`]+)`")
"""Matches the glue roles of MyST, as in ``{glue:text}`x:.2f``` or ``{glue:md}`x```."""

_BLOCK_LINE = re.compile(r"^\s*\{glue:figure\}`(?P<key>[^`:]+)`\s*$")


def glue(name: str, variable: Any, display: bool = True) -> None:
    """Keep ``variable`` under ``name`` for the text this notebook prints.

    The signature is ``myst_nb.glue``'s, so a page's cell runs unchanged in
    its notebook with ``from amp_lesson.notebook import glue``.

    Parameters
    ----------
    name
        The key the page's text quotes.
    variable
        The value: a number, a string, a figure, anything IPython can display.
    display
        Also display the value where the cell runs.

    Examples
    --------
    >>> glue("answer", 42, display=False)
    >>> glued("answer")
    42
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    if not isinstance(display, bool):
        raise TypeError(f"display must be True or False, got {display!r}")
    _GLUED[name] = variable
    if display:
        _display(variable)
    _print_waiting()


def glued(name: str) -> Any:
    """The value :func:`glue` kept under ``name``.

    Parameters
    ----------
    name
        The key it was glued under.

    Returns
    -------
    object
        The value itself.

    Raises
    ------
    KeyError
        If nothing was glued under ``name``: the cell that computes it has
        not run yet.
    """
    if name not in _GLUED:
        raise KeyError(
            f"no value glued under {name!r}: run the cells above this one first "
            f"(glued so far: {sorted(_GLUED) or 'nothing'})"
        )
    return _GLUED[name]


def format_glued_text(text: str, spec: str) -> str:
    """A value's plain-text form with a format spec applied, as ``{glue:text}`` does.

    Parameters
    ----------
    text
        What IPython shows for the value (its ``repr`` for a number or a string).
    spec
        The part of the role after the key's last colon (``".2f"``), or ``""``.

    Returns
    -------
    str
        The value as the sentence quotes it.

    Examples
    --------
    >>> format_glued_text("65504.0", ".0f"), format_glued_text("'1.2e-07'", "")
    ('65504', '1.2e-07')
    """
    try:
        value: Any = ast.literal_eval(text)
    except (SyntaxError, ValueError):
        value = text
    if not spec:
        return str(value)
    kind = spec[-1]
    if kind == "s":
        value = str(value)
    elif kind in "bcdoxX":
        value = int(value)
    elif kind in "eEfFgGn%":
        value = float(value)
    return format(value, spec)


def split_role(kind: str | None, content: str) -> tuple[str, str]:
    """The key and the format spec of a glue role's content (``key:spec``; no spec for ``md``).

    Parameters
    ----------
    kind
        The role's kind: ``"text"``, ``"md"``, ``"any"``, ``"figure"`` or ``None``
        (plain ``{glue}``).
    content
        What is between the role's backticks.

    Returns
    -------
    tuple of str
        The key and the spec (``""`` when there is none).

    Examples
    --------
    >>> split_role("text", "ratio:.1f"), split_role(None, "fig")
    (('ratio', '.1f'), ('fig', ''))
    """
    content = content.split("::")[-1]  # "page::key" names another page's value; the key is enough
    if kind in (None, "text", "any") and ":" in content:
        key, _, spec = content.rpartition(":")
        return key, spec
    return content, ""


def substitute(
    text: str,
    plain: Callable[[str], str],
    markdown: Callable[[str], str],
    block: Callable[[str], str],
) -> str:
    r"""``text`` with each glue role replaced.

    Parameters
    ----------
    text
        Markdown with glue roles in it.
    plain
        The text form of the value glued under a key (for ``{glue:text}`` and
        ``{glue}``); may raise ``KeyError``.
    markdown
        Its Markdown (for ``{glue:md}``).
    block
        The markup that shows it in place of a ``{glue:figure}`key``` line.

    Returns
    -------
    str
        ``text`` with the values in place.

    Examples
    --------
    >>> substitute("x = {glue:text}`x:.2f`\n{glue:figure}`f`", lambda k: "1.0",
    ...            str.upper, lambda k: "<img>")
    'x = 1.00\n<img>'
    """
    lines = []
    for line in text.splitlines():
        whole = _BLOCK_LINE.match(line)
        if whole:
            lines.append(block(whole["key"]))
            continue

        def one(match: re.Match[str]) -> str:
            key, spec = split_role(match["kind"], match["content"])
            if match["kind"] == "md":
                return markdown(key)
            return format_glued_text(plain(key), spec)

        lines.append(ROLE.sub(one, line))
    return "\n".join(lines)


def bundle_markup(bundle: Mapping[str, Any]) -> str:
    """Markup that shows a display bundle (``{mime: data}``) inside Markdown.

    HTML as it is; an image as an ``<img>`` with the data in its address, so
    that it shows where the passage shows (a collapsed section included).

    Parameters
    ----------
    bundle
        A MIME bundle, as IPython formats a value or the book's glue records it.

    Returns
    -------
    str
        HTML or Markdown.

    Examples
    --------
    >>> bundle_markup({"text/plain": "3", "text/html": "<b>3</b>"})
    '<b>3</b>'
    """
    if "text/html" in bundle:
        return _joined(bundle["text/html"])
    for mime in ("image/png", "image/jpeg"):
        if mime in bundle:
            data = _joined(bundle[mime]).replace("\n", "")
            return f'<img alt="" src="data:{mime};base64,{data}">'
    if "image/svg+xml" in bundle:
        return _joined(bundle["image/svg+xml"])
    if "text/markdown" in bundle:
        return _joined(bundle["text/markdown"])
    return "```\n" + _joined(bundle.get("text/plain", "")) + "\n```"


def _joined(data: Any) -> str:
    return "".join(data) if isinstance(data, list) else str(data)


def _shell() -> Any:
    """The IPython shell of a Jupyter kernel (Jupyter, Colab, VS Code), or ``None``.

    Not any IPython shell: formatting a value for display creates a bare one
    in a plain script, which would print a Markdown object's ``repr``.
    """
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - the notebook extra brings IPython
        return None
    shell = get_ipython()
    kernel = any(cls.__name__ == "ZMQInteractiveShell" for cls in type(shell).__mro__)
    return shell if kernel else None


def _bundle(value: Any) -> dict[str, Any]:
    """The display bundle IPython makes of ``value`` (its ``text/plain`` outside IPython)."""
    shell = _shell()
    if shell is None:
        return {"text/plain": _plain_text(value)}
    data, _ = shell.display_formatter.format(value)
    data = dict(data)
    if not {"image/png", "text/html"} & set(data) and hasattr(value, "savefig"):
        # A matplotlib figure where no inline backend formats it: draw it here.
        buffer = io.BytesIO()
        value.savefig(buffer, format="png", bbox_inches="tight")
        data["image/png"] = base64.b64encode(buffer.getvalue()).decode()
    return data


def _plain_text(value: Any) -> str:
    """What IPython shows as ``text/plain`` for ``value`` (what the book's glue records)."""
    try:
        from IPython.core.formatters import PlainTextFormatter
    except ImportError:  # pragma: no cover - the notebook extra brings IPython
        return repr(value)
    return str(PlainTextFormatter()(value))


def _markdown_of(value: Any) -> str:
    data = getattr(value, "data", None)  # IPython.display.Markdown
    if isinstance(data, str):
        return data
    if hasattr(value, "_repr_markdown_"):
        return str(value._repr_markdown_())
    return str(value)


def render_text(template: str) -> str:
    """The Markdown of ``template`` with this run's glued values in place.

    Parameters
    ----------
    template
        A passage of the page: Markdown with glue roles in it.

    Returns
    -------
    str
        The passage as this run prints it, glued objects as inline markup.

    Raises
    ------
    KeyError
        If the passage quotes a value no cell has glued yet.
    """
    if not isinstance(template, str):
        raise TypeError(f"template must be a str, got {type(template).__name__}")
    return substitute(
        template,
        lambda k: _plain_text(glued(k)),
        lambda k: _markdown_of(glued(k)),
        lambda k: bundle_markup(_bundle(glued(k))),
    )


def _display(value: Any) -> None:
    if _shell() is None:  # a plain script: print what a notebook would show
        print(value)
        return
    from IPython.display import display

    display(value)


def template_keys(template: str) -> list[str]:
    r"""The glue keys ``template`` quotes, in order, each once.

    Parameters
    ----------
    template
        Markdown with glue roles in it.

    Returns
    -------
    list of str
        The keys.

    Examples
    --------
    >>> template_keys("{glue:text}`a:.1f` and {glue}`b`\n{glue:figure}`a`")
    ['a', 'b']
    """
    keys = [split_role(m["kind"], m["content"])[0] for m in ROLE.finditer(template)]
    return list(dict.fromkeys(keys))


WAITING_NOTE = (
    "*This passage quotes {values} that cells further down the page compute ({keys}); "
    "it is printed here when they have run.*"
)
"""What a passage shows while a value it quotes is still to be glued."""


def show_text(template: str) -> None:
    """Print a passage of the page, ``template``, with this run's glued values in place.

    In a notebook the Markdown is rendered, and a ``{glue:figure}`key```
    line shows the glued object there; run as a script, the text is printed.
    A page may quote a value before the cell that computes it (the book
    fills in every value when it is built): such a passage shows
    :data:`WAITING_NOTE` and is printed in its place as soon as the last of
    its values is glued (in a script: printed then).

    Parameters
    ----------
    template
        A passage of the page: Markdown with glue roles in it.
    """
    if not isinstance(template, str):
        raise TypeError(f"template must be a str, got {type(template).__name__}")
    missing = [key for key in template_keys(template) if key not in _GLUED]
    if not missing:
        _display_text(render_text(template))
        return
    values = "a value" if len(missing) == 1 else f"{len(missing)} values"
    note = WAITING_NOTE.format(values=values, keys=", ".join(f"`{k}`" for k in missing))
    handle = None
    if _shell() is not None:
        from IPython.display import Markdown, display

        handle = display(Markdown(note), display_id=True)
    _WAITING.append((template, handle))


def _display_text(text: str) -> None:
    if _shell() is None:
        print(text)
        return
    from IPython.display import Markdown, display

    display(Markdown(text))


def _print_waiting() -> None:
    """Print each waiting passage whose values are all glued now, in its own place."""
    for entry in list(_WAITING):
        template, handle = entry
        if any(key not in _GLUED for key in template_keys(template)):
            continue
        _WAITING.remove(entry)
        try:
            text = render_text(template)
        except (KeyError, TypeError, ValueError) as error:  # a value this passage cannot print
            text = f"*This passage could not be printed from this run: {error}*"
        if handle is None:
            print(text)
        else:
            from IPython.display import Markdown

            handle.update(Markdown(text))
