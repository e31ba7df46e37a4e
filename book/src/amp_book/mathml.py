"""Maths rendered to MathML at build time, so a page fetches no script to show it."""

from __future__ import annotations

from typing import Any

from docutils import nodes
from sphinx.application import Sphinx


def _mathml(latex: str, display: bool) -> str:
    from latex2mathml.converter import convert

    from amp_book.theme import mark_unary_signs

    return mark_unary_signs(convert(latex.strip(), display="block" if display else "inline"))


def _visit_math_html(self: Any, node: nodes.Element) -> None:
    self.body.append(f'<span class="math notranslate">{_mathml(node.astext(), False)}</span>')
    raise nodes.SkipNode


def _visit_displaymath_html(self: Any, node: nodes.Element) -> None:
    latex = node.astext()
    number = f'<span class="eqno">({node["number"]})</span>' if node.get("number") else ""
    self.body.append(self.starttag(node, "div", CLASS="math notranslate nohighlight"))
    self.body.append(f"{number}{_mathml(latex, True)}</div>\n")
    raise nodes.SkipNode


def setup(app: Sphinx) -> dict[str, bool]:
    """Offer ``html_math_renderer = "mathml"``."""
    app.add_html_math_renderer("mathml", (_visit_math_html, None), (_visit_displaymath_html, None))
    return {"parallel_read_safe": True, "parallel_write_safe": True}
