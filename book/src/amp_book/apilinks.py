"""Code spans that name a documented object link to its documentation.

A page says `` `torch.autocast` `` or `` `time.perf_counter` `` in its prose; where a name
like that is an object of an inventory that intersphinx loaded (the book's are committed
under ``docs/_inventories/``, :mod:`amp_book.inventories`), the code span becomes a link to
that object's entry, as a ``{py:class}`` role would make it. Only dotted names are linked
(``torch.nn.Linear``, not ``sum``), with or without a trailing ``()``; a name no inventory
holds stays code, and so does a span inside a link, a heading or an object's signature.

The link is the inventory's own address for the object, so an inventory refreshed with a
new release moves every link with it.
"""

from __future__ import annotations

import re
from typing import Any

from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.transforms.post_transforms import SphinxPostTransform

DOTTED_NAME = re.compile(r"(?P<name>[A-Za-z_]\w*(?:\.\w+)+)(?:\(\))?")
"""A code span that may name an object: ``module.name`` and deeper, optionally called."""

PY_TYPES = (
    "py:class",
    "py:function",
    "py:method",
    "py:attribute",
    "py:data",
    "py:module",
    "py:property",
    "py:exception",
)
"""The inventory entries a code span may link to, in the order they are tried."""


def find_object(inventories: dict[str, Any], name: str) -> tuple[str, str, str] | None:
    """``(address, project, version)`` of ``name`` in the first inventory that holds it.

    ``inventories`` maps an inventory's name to its entries by type, as intersphinx loads
    them (``{"py:class": {"torch.nn.Linear": item}}``, ``item`` with ``uri``,
    ``project_name`` and ``project_version``); they are tried in their order.

    >>> from types import SimpleNamespace as Item
    >>> inv = {"python": {"py:function": {"time.perf_counter": Item(
    ...     uri="https://docs.python.org/3/library/time.html#time.perf_counter",
    ...     project_name="Python", project_version="3.11")}}}
    >>> find_object(inv, "time.perf_counter")
    ('https://docs.python.org/3/library/time.html#time.perf_counter', 'Python', '3.11')
    >>> find_object(inv, "time.nothing") is None
    True
    """
    for entries in inventories.values():
        for kind in PY_TYPES:
            item = entries.get(kind, {}).get(name)
            if item is not None:
                return item.uri, item.project_name, item.project_version
    return None


def _skipped(node: nodes.Node) -> bool:
    """Whether a code span stays code: inside a link, a heading or a signature."""
    parent = node.parent
    while parent is not None:
        if isinstance(
            parent,
            nodes.reference
            | nodes.title
            | addnodes.desc_signature
            | addnodes.pending_xref
            | nodes.literal_block,
        ):
            return True
        parent = parent.parent
    return False


class LinkCodeSpans(SphinxPostTransform):
    """Turn a code span naming an inventory's object into a link to its documentation."""

    default_priority = 900  # after intersphinx and the references have resolved
    formats = ("html",)

    def run(self, **kwargs: Any) -> None:
        from sphinx.ext.intersphinx import InventoryAdapter

        from amp_book.edition import LIVE_INVENTORY

        # not the live build's own inventory, which a stored edition reads for its links into
        # the API reference: no build links a code span into the book's own reference
        inventories = {
            name: entries
            for name, entries in InventoryAdapter(self.env).named_inventory.items()
            if name != LIVE_INVENTORY
        }
        if not inventories:
            return
        for literal in list(self.document.findall(nodes.literal)):
            if "code" in literal.get("classes", []) and len(literal["classes"]) > 1:
                continue  # a highlighted inline code role ({code}`...`{language}) is code
            match = DOTTED_NAME.fullmatch(literal.astext())
            if match is None or _skipped(literal):
                continue
            found = find_object(inventories, match["name"])
            if found is None:
                continue
            uri, project, version = found
            link = nodes.reference(
                "",
                "",
                internal=False,
                refuri=uri,
                reftitle=f"(in {project} v{version})" if version else f"(in {project})",
                classes=["amp-api-link"],
            )
            literal.replace_self(link)
            link += literal


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_post_transform(LinkCodeSpans)
    # What the links were made from (amp_book.inventories.digests): its change rewrites
    # every page, so an incremental build after a refresh keeps no link into the old file.
    return {"parallel_read_safe": True, "parallel_write_safe": True}
