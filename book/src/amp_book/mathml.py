"""Maths rendered to MathML at build time, so a page fetches no script to show it."""

from __future__ import annotations

import html
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)


ELEMENTS = frozenset(
    [
        "math",
        "semantics",
        "annotation",
        "mrow",
        "mi",
        "mn",
        "mo",
        "ms",
        "mtext",
        "mspace",
        "msub",
        "msup",
        "msubsup",
        "mfrac",
        "msqrt",
        "mroot",
        "mover",
        "munder",
        "munderover",
        "mtable",
        "mtr",
        "mtd",
        "mstyle",
        "mpadded",
        "mphantom",
        "menclose",
        "mfenced",
        "merror",
    ]
)
"""The MathML elements maths may become (none links, loads or runs anything)."""
ATTRIBUTES = frozenset(
    [
        "display",
        "xmlns",
        "mathvariant",
        "stretchy",
        "fence",
        "separator",
        "lspace",
        "rspace",
        "columnalign",
        "columnspacing",
        "columnlines",
        "rowspacing",
        "rowlines",
        "frame",
        "framespacing",
        "displaystyle",
        "scriptlevel",
        "minsize",
        "maxsize",
        "accent",
        "accentunder",
        "movablelimits",
        "linethickness",
        "width",
        "height",
        "depth",
        "form",
        "symmetric",
        "largeop",
        "notation",
        "class",
        "mathsize",
        "encoding",
        "voffset",
    ]
)


def mathml_problems(latex: str, display: bool = False) -> list[str]:
    r"""What is wrong with the MathML that ``latex`` becomes (``[]``: nothing): markup that
    is not well formed (latex2mathml passes ``\text{}`` through as it is), or an element or
    attribute outside :data:`ELEMENTS` and :data:`ATTRIBUTES` (``\href`` makes a link).

    >>> mathml_problems(r"\frac{a}{b} < \text{one}")
    []
    >>> mathml_problems(r"\text{a<b}")[0][:26]
    'it is not well-formed XML '
    """
    from xml.etree import ElementTree

    from latex2mathml.converter import convert

    try:
        converted = convert(latex.strip(), display="block" if display else "inline")
    except Exception as error:  # noqa: BLE001 (latex2mathml raises what it meets)
        return [f"it is not maths latex2mathml reads ({type(error).__name__}: {error})"]
    if any(mark in converted for mark in ("<!", "<?", "]]>")):
        # An XML parser drops a comment an HTML parser reads otherwise (<!--> ends one).
        return ["it holds a comment, declaration or section (\\text{} passed through)"]
    try:
        root = ElementTree.fromstring(converted)
    except ElementTree.ParseError as error:
        return [f"it is not well-formed XML ({error})"]
    problems = []
    for element in root.iter():
        tag = element.tag.rpartition("}")[2]
        if tag not in ELEMENTS:
            problems.append(f"a <{tag}> element")
        problems += [f"a {a!r} attribute" for a in element.attrib if a not in ATTRIBUTES]
    return problems


def _mathml(self: Any, node: nodes.Element, latex: str, display: bool) -> str:
    """``latex`` as MathML; where it would not be safe MathML, the LaTeX as code, warned of."""
    from latex2mathml.converter import convert

    from amp_book.theme import mark_unary_signs

    if problems := mathml_problems(latex, display):
        logger.warning(
            "the maths %r cannot be shown as MathML: %s",
            latex.strip()[:60],
            "; ".join(problems),
            location=node,
            type="amp_lesson",
            subtype="math",
        )
        return f"<code>{html.escape(latex.strip())}</code>"
    return mark_unary_signs(convert(latex.strip(), display="block" if display else "inline"))


def _visit_math_html(self: Any, node: nodes.Element) -> None:
    shown = _mathml(self, node, node.astext(), False)
    self.body.append(f'<span class="math notranslate">{shown}</span>')
    raise nodes.SkipNode


def _visit_displaymath_html(self: Any, node: nodes.Element) -> None:
    latex = node.astext()
    number = f'<span class="eqno">({node["number"]})</span>' if node.get("number") else ""
    self.body.append(self.starttag(node, "div", CLASS="math notranslate nohighlight"))
    self.body.append(f"{number}{_mathml(self, node, latex, True)}</div>\n")
    raise nodes.SkipNode


def setup(app: Sphinx) -> dict[str, bool]:
    """Offer ``html_math_renderer = "mathml"``."""
    app.add_html_math_renderer("mathml", (_visit_math_html, None), (_visit_displaymath_html, None))
    return {"parallel_read_safe": True, "parallel_write_safe": True}
