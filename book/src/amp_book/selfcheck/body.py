"""How a self-check's body is read: its first list (each item's marker and note) or table.

The structure an author writes (options, items, rows) is the first list or table of the
directive's body, with a note nested under each list item; what comes before it belongs to
the question, what comes after it is the explanation (:mod:`.directives`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from docutils import nodes

# "[x] option", "[ ] option", "[FP16] item": a marker in brackets at the start
# of a list item's first line.
MARKER = re.compile(r"^\s*\[([^\[\]]*)\]\s?")


@dataclass
class ListEntry:
    """One item of a body list: its first line (with any marker taken off) and its note."""

    head: list[nodes.Node]
    note: list[nodes.Node]
    marker: str | None
    text: str


def split_at_first(
    body: Sequence[nodes.Node],
    kinds: tuple[type[nodes.Node], ...],
) -> tuple[list[nodes.Node], nodes.Node | None, list[nodes.Node]]:
    """Split top-level ``body`` around its first node of one of ``kinds``.

    >>> p, ul = nodes.paragraph(text="q"), nodes.bullet_list()
    >>> split_at_first([p, ul, p], (nodes.bullet_list,)) == ([p], ul, [p])
    True
    """
    for index, node in enumerate(body):
        if isinstance(node, kinds):
            return list(body[:index]), node, list(body[index + 1 :])
    return list(body), None, []


def _take_marker(head: list[nodes.Node]) -> tuple[str | None, list[nodes.Node]]:
    """Take a leading ``[...]`` marker (or a task-list checkbox) off ``head``."""
    if not head:
        return None, head
    first = head[0]
    if isinstance(first, nodes.raw) and "task-list-item-checkbox" in first.astext():
        # MyST's tasklist extension turns "[x]" into a raw checkbox.
        return ("x" if "checked" in first.astext() else " "), _strip_leading(head[1:])
    if isinstance(first, nodes.Text):
        match = MARKER.match(str(first))
        if match:
            rest = str(first)[match.end() :]
            return match.group(1), ([nodes.Text(rest)] if rest else []) + head[1:]
    return None, head


def _strip_leading(head: list[nodes.Node]) -> list[nodes.Node]:
    if head and isinstance(head[0], nodes.Text):
        rest = str(head[0]).lstrip()
        return ([nodes.Text(rest)] if rest else []) + head[1:]
    return head


def read_list(items: nodes.Element) -> list[ListEntry]:
    """Read each item of a bullet or enumerated list as a :class:`ListEntry`.

    An item's first paragraph is its head and the rest of the item its note.
    The definition-list form, a first line followed by ``: note``, is read the
    same way. An item that does not start with a line of text has an empty head.
    """
    entries: list[ListEntry] = []
    for item in (child for child in items.children if isinstance(child, nodes.list_item)):
        children = list(item.children)
        head: list[nodes.Node] = []
        note: list[nodes.Node] = []
        if children and isinstance(children[0], nodes.definition_list):
            first_item = children[0][0]
            for part in first_item.children:
                if isinstance(part, nodes.term):
                    head = list(part.children)
                elif isinstance(part, nodes.definition):
                    note.extend(part.children)
            # Further terms of the same definition list belong to the note, still
            # as a definition list.
            others = list(children[0].children[1:])
            for other in others:
                children[0].remove(other)
            if others:
                note.append(nodes.definition_list("", *others, classes=children[0]["classes"]))
            note.extend(children[1:])
        elif children and isinstance(children[0], nodes.paragraph):
            head = list(children[0].children)
            note = children[1:]
        else:
            note = children
        marker, head = _take_marker(head)
        for node in [*head, *note]:
            if node.parent is not None:
                node.parent.remove(node)
        text = "".join(node.astext() for node in head).strip()
        entries.append(ListEntry(head=head, note=note, marker=marker, text=text))
    return entries


def copy_nodes(nodes_: Iterable[nodes.Node]) -> list[nodes.Node]:
    return [node.deepcopy() for node in nodes_]


def shortened(text: str, width: int = 48) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def bucket_list(argument: str) -> list[str]:
    """Bucket names from ``:buckets: FP16 | FP32``.

    >>> bucket_list(" FP16 |FP32| ")
    ['FP16', 'FP32']
    """
    return [name.strip() for name in argument.split("|") if name.strip()]
