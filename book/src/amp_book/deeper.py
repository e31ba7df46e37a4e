""" "Going deeper": a collapsed block that holds what a first reading can skip.

A chapter page keeps on its main path what a learner needs the first time (the
idea, the PyTorch that does it, the run that shows it, the self-check).
Derivations, proofs by run, history, second examples and edge cases go into
a *Going deeper* block: collapsed on the page, open in the print book, a
section of its own in the notebook. Two forms:

- a block of prose, as one directive::

      :::{deeper} Why the bound is three roundings
      The input is cast for the matrix multiply, ...
      :::

- a block that holds code cells too: ``{deeper}`` with no body opens it and
  ``{deeper-end}`` closes it, everything between (prose, code cells, their
  outputs) goes in::

      :::{deeper} Three more loaders
      :::

      ```{code-cell} ipython3
      ...
      ```

      :::{deeper-end}
      :::

The two markers must sit at the same level of the page (not in another
directive, with no heading between them), and blocks do not nest; a page that
breaks either rule fails its build, naming the page and the line. A target
just before a block, ``(label)=``, names the block: ``{ref}`label``` links to
it with its title.

What a reader reads on the main path, and so the page's reading time
(:mod:`.pageinfo`), leaves these blocks out.
"""

from __future__ import annotations

from typing import Any, ClassVar

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.transforms import SphinxTransform
from sphinx.util.docutils import SphinxDirective
from sphinx.writers.html5 import HTML5Translator

from amp_book.export.markdown import DEEPER as SUMMARY

CLASS = "amp-deeper"
"""Class of the ``<details>`` element of a block (the reading time and the tests find it by it)."""


class deeper(nodes.General, nodes.Element):
    """A Going deeper block: ``title``, then its content."""


class deeper_title(nodes.General, nodes.TextElement):
    """A block's title, inline markup and all: the ``<summary>`` of its ``<details>``."""


class deeper_marker(nodes.General, nodes.Element):
    """Where a block that holds code cells opens (``title`` set, its title nodes as children)
    or closes (``title`` None)."""


class Deeper(SphinxDirective):
    """``{deeper} Title``: a block with its prose as body, or the opening of one without."""

    required_arguments = 1
    final_argument_whitespace = True
    has_content = True
    option_spec: ClassVar[dict[str, Any]] = {}

    def run(self) -> list[nodes.Node]:
        parsed, messages = self.parse_inline(self.arguments[0].strip(), lineno=self.lineno)
        heading = deeper_title("", "", *parsed)
        title = heading.astext()
        if not self.content:
            marker = deeper_marker("", heading, title=title)
            self.set_source_info(marker)
            return [marker, *messages]
        node = deeper("", heading, title=title)
        self.set_source_info(node)
        self.state.nested_parse(self.content, self.content_offset, node)
        if any(True for _ in node.findall(nodes.section)):
            raise self.error(f"deeper: the block {title!r} holds a heading; a block has none")
        return [node, *messages]


class DeeperEnd(SphinxDirective):
    """``{deeper-end}``: where a block opened by a ``{deeper}`` with no body closes."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        marker = deeper_marker(title=None)
        self.set_source_info(marker)
        return [marker]


def _where(node: nodes.Node) -> str:
    return f"{node.source or '?'}:{node.line or '?'}"


class GatherDeeper(SphinxTransform):
    """Move what lies between each pair of markers into one :class:`deeper` node."""

    default_priority = 700  # after targets move onto their nodes (260); before doctree-read (880)

    def apply(self, **kwargs: Any) -> None:
        markers = list(self.document.findall(deeper_marker))
        opened: deeper_marker | None = None
        for marker in markers:
            if marker["title"] is not None:
                if opened is not None:
                    raise self._error(
                        marker,
                        f"the Going deeper block {marker['title']!r} opens inside "
                        f"{opened['title']!r} (opened at {_where(opened)}); blocks do not nest "
                        "and each needs its {deeper-end}",
                    )
                opened = marker
                continue
            if opened is None:
                raise self._error(marker, "a {deeper-end} closes no open Going deeper block")
            self._gather(opened, marker)
            opened = None
        if opened is not None:
            raise self._error(
                opened,
                f"the Going deeper block {opened['title']!r} is never closed ({{deeper-end}})",
            )
        for block in self.document.findall(deeper):
            if any(isinstance(n, deeper) for n in block.findall(include_self=False)):
                raise self._error(block, f"the Going deeper block {block['title']!r} holds another")

    def _gather(self, start: deeper_marker, end: deeper_marker) -> None:
        parent = start.parent
        if end.parent is not parent:
            raise self._error(
                end,
                f"the Going deeper block {start['title']!r} (opened at {_where(start)}) closes "
                "at another level of the page: its {deeper-end} must follow it in the same "
                "section, with no heading between them and neither inside another directive",
            )
        first, last = parent.index(start), parent.index(end)
        block = deeper(
            "", *start.children, title=start["title"], ids=list(start["ids"]),
            names=list(start["names"]),
        )  # fmt: skip
        block.source, block.line = start.source, start.line
        for node_id in block["ids"]:
            self.document.ids[node_id] = block
        inner = parent.children[first + 1 : last]
        for node in inner:
            node.parent = None
        block.extend(inner)
        for node in block.children:
            node.parent = block
        parent.children[first : last + 1] = [block]
        block.parent = parent

    def _error(self, node: nodes.Node, message: str) -> Exception:
        from sphinx.errors import ExtensionError

        return ExtensionError(f"{_where(node)}: {message}")


def _title(node: deeper) -> str:
    return f"{SUMMARY}: {node['title']}"


def visit_deeper_html(self: HTML5Translator, node: deeper) -> None:
    ids = [i for i in node["ids"] if not i.startswith("id")] or node["ids"]
    id_attr = f' id="{ids[0]}"' if ids else ""
    self.body.append(f'<details class="{CLASS}"{id_attr}>')


def depart_deeper_html(self: HTML5Translator, node: deeper) -> None:
    self.body.append("</div></details>\n")


def visit_title_html(self: HTML5Translator, node: deeper_title) -> None:
    self.body.append(f'<summary><span class="amp-deeper-label">{SUMMARY}</span> ')


def depart_title_html(self: HTML5Translator, node: deeper_title) -> None:
    block = node.parent
    ids = [i for i in block["ids"] if not i.startswith("id")] or block["ids"]
    anchors = "".join(f'<span id="{i}"></span>' for i in block["ids"] if i not in ids[:1])
    self.body.append(f'</summary><div class="amp-deeper-body">{anchors}\n')


def visit_title_text(self: Any, node: deeper_title) -> None:
    """The text builder: the title on a line of its own, then the content."""
    self.new_state(0)
    self.add_text(f"{SUMMARY}: ")


def depart_title_text(self: Any, node: deeper_title) -> None:
    self.end_state()


def _pass(self: Any, node: nodes.Node) -> None:
    pass


def setup(app: Sphinx) -> dict[str, Any]:
    """Register ``{deeper}``, ``{deeper-end}`` and the node they make."""
    app.add_enumerable_node(
        deeper,
        "deeper",
        lambda node: _title(node),
        html=(visit_deeper_html, depart_deeper_html),
        text=(_pass, _pass),
    )
    app.add_node(
        deeper_title,
        html=(visit_title_html, depart_title_html),
        text=(visit_title_text, depart_title_text),
    )
    app.add_node(deeper_marker)
    app.add_directive("deeper", Deeper)
    app.add_directive("deeper-end", DeeperEnd)
    app.add_transform(GatherDeeper)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


__all__ = ["CLASS", "SUMMARY", "deeper", "setup"]
