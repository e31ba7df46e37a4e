"""One docutils node for HTML structure that docutils has no node for.

Self-checks need ``<details>``, ``<summary>``, lists whose items carry data
attributes, and so on. Rather than a node class per tag, :class:`html_element`
names its tag and attributes and holds ordinary docutils children, which the
HTML translator renders as usual (so MyST markup, glue and references inside
a note work unchanged). Builders other than HTML render the children alone.
"""

from __future__ import annotations

import html
from collections.abc import Iterable

from docutils import nodes
from sphinx.application import Sphinx


# Lower case, as docutils names its nodes.
class html_element(nodes.General, nodes.Element):
    """An HTML element ``tag`` with ``attrs`` around docutils children."""


def element(
    tag: str,
    children: Iterable[nodes.Node] = (),
    *,
    classes: Iterable[str] = (),
    **attrs: str | None,
) -> html_element:
    """Build an :class:`html_element`.

    Attribute names are given with ``_`` for ``-`` (``data_sc_id`` becomes
    ``data-sc-id``); an attribute whose value is ``None`` is left out and
    one whose value is ``""`` is written as a bare boolean attribute.

    >>> node = element("li", [nodes.Text("A")], classes=["sc-option"], data_sc_key="a")
    >>> node["tag"], node["attrs"], node["classes"]
    ('li', {'data-sc-key': 'a'}, ['sc-option'])
    """
    node = html_element(tag=tag, classes=list(classes))
    node["attrs"] = {
        name.replace("_", "-"): value for name, value in attrs.items() if value is not None
    }
    node.extend(children)
    return node


def text_element(
    tag: str, text: str, *, classes: Iterable[str] = (), **attrs: str | None
) -> html_element:
    """An :class:`html_element` that holds plain text only."""
    return element(tag, [nodes.Text(text)], classes=classes, **attrs)


def start_tag(node: html_element) -> str:
    """The opening tag of ``node``, attribute values escaped.

    Ids that Sphinx gave the node (a MyST label ``(name)=`` just before the
    directive) become the element's id, or empty ``<span>`` anchors inside it
    when the element has an id of its own, so links to the label land here.

    >>> start_tag(element("details", classes=["sc-answer"], open=""))
    '<details class="sc-answer" open>'
    >>> node = element("div", id="sc-x")
    >>> node["ids"] = ["fp16-table"]
    >>> start_tag(node)
    '<div id="sc-x"><span id="fp16-table"></span>'
    """
    attrs = dict(node["attrs"])
    anchors = list(node["ids"])
    if anchors and "id" not in attrs:
        attrs["id"] = anchors.pop(0)
    parts = [node["tag"]]
    if node["classes"]:
        parts.append(f'class="{html.escape(" ".join(node["classes"]))}"')
    for name, value in attrs.items():
        parts.append(name if value == "" else f'{name}="{html.escape(str(value))}"')
    spans = "".join(f'<span id="{html.escape(anchor)}"></span>' for anchor in anchors)
    return "<" + " ".join(parts) + ">" + spans


def _visit_html(translator: nodes.NodeVisitor, node: html_element) -> None:
    translator.body.append(start_tag(node))  # type: ignore[attr-defined]


def _depart_html(translator: nodes.NodeVisitor, node: html_element) -> None:
    translator.body.append(f"</{node['tag']}>")  # type: ignore[attr-defined]


def _pass(translator: nodes.NodeVisitor, node: html_element) -> None:
    """Other builders render the element's children and nothing of the element."""


def register(app: Sphinx) -> None:
    """Teach Sphinx's builders to render :class:`html_element`."""
    other = (_pass, _pass)
    app.add_node(
        html_element,
        html=(_visit_html, _depart_html),
        latex=other,
        text=other,
        man=other,
        texinfo=other,
    )
