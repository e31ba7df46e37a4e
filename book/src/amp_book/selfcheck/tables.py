"""The self-checks read from a table or a list of rows: step-through and refill."""

from __future__ import annotations

import re
from typing import Any, ClassVar

from docutils import nodes
from docutils.parsers.rst import directives

from amp_book.kickers import kicker as kicker_of
from amp_book.selfcheck.body import bucket_list, split_at_first
from amp_book.selfcheck.directives import SelfCheckDirective, SelfCheckError
from amp_book.selfcheck.html import element

_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
"""A cell that holds one number, which must not break across lines at its exponent's sign."""


class StepThroughDirective(SelfCheckDirective):
    """``{selfcheck-step-through}``: rows revealed one at a time, then "what would the next row be?".

    The rows are the body's first list or table; ``:next:`` asks the closing
    question (inline MyST) and the content after the rows answers it.
    ``:answer-label:`` names the box the reader answers it in (plain text), for
    a closing question that does not ask for the next row.
    """

    # Not "steps": sphinx-design 0.8 has a {steps} directive for numbered procedures.
    kind = "steps"
    kicker = kicker_of("selfcheck-step-through")
    option_spec: ClassVar[dict[str, Any]] = {
        **SelfCheckDirective.option_spec,
        "next": directives.unchanged_required,
        "answer-label": directives.unchanged,
    }
    DEFAULT_NEXT = "What would the next row be?"
    DEFAULT_ANSWER_LABEL = "Your next row"
    MAX_ANSWER_LABEL = 60

    @property
    def answer_label(self) -> str:
        """The label of the reader's answer box, whitespace collapsed."""
        if "answer-label" not in self.options:
            return self.DEFAULT_ANSWER_LABEL
        return " ".join((self.options["answer-label"] or "").split())

    def data_attributes(self) -> dict[str, str]:
        # The script labels the reader's answer box, and their answer beside the book's, with it.
        return {"data_sc_answer_label": self.answer_label}

    def _check_answer_label(self) -> None:
        label = self.answer_label
        if not label:
            raise SelfCheckError(
                ":answer-label: is empty; give the label of the box the reader answers "
                "the closing question in, such as 'Your answer'"
            )
        if len(label) > self.MAX_ANSWER_LABEL:
            raise SelfCheckError(
                f":answer-label: is {len(label)} characters long; a label of the answer box "
                f"takes at most {self.MAX_ANSWER_LABEL} (put the question itself in :next:)"
            )

    def build(self, question: list[nodes.Node]) -> list[nodes.Node]:
        self._check_answer_label()
        prompt, rows, answer = split_at_first(
            self.parse_content_to_nodes(), (nodes.bullet_list, nodes.enumerated_list, nodes.table)
        )
        if rows is None:
            raise SelfCheckError("has no steps; write the rows as a numbered list or a table")
        if isinstance(rows, nodes.table):
            count = sum(len(body) for body in rows.findall(nodes.tbody))
            rows["classes"].append("sc-rows-table")
            shown: nodes.Node = rows
        else:
            entries = [child for child in rows.children if isinstance(child, nodes.list_item)]
            count = len(entries)
            shown = element(
                "ol",
                [element("li", list(entry.children), classes=["sc-row"]) for entry in entries],
                classes=["sc-rows"],
            )
        if count == 0:
            raise SelfCheckError("has no steps; its list or table of rows is empty")
        if not answer:
            raise SelfCheckError(
                "has no answer to its next-row question; write the answer after the rows"
            )
        next_question = (
            self.inline_option("next")
            if "next" in self.options
            else [nodes.Text(self.DEFAULT_NEXT)]
        )
        after = element(
            "div",
            [
                nodes.paragraph(
                    "", "", nodes.strong("", "Next: "), *next_question, classes=["sc-next-question"]
                ),
                self.answer_details(answer),
            ],
            classes=["sc-next"],
        )
        return [self.question_block(question, prompt), shown, after]


class RefillDirective(SelfCheckDirective):
    """``{selfcheck-refill}``: a table with a column the reader fills in from memory.

    ``:column:`` names the column (its header text, or its number counted
    from 1; several with ``|``). Each of its cells becomes a ``<details>``
    holding the true value; the script turns them into inputs. Content after
    the table explains the values.
    """

    kind = "refill"
    kicker = kicker_of("selfcheck-refill")
    option_spec: ClassVar[dict[str, Any]] = {
        **SelfCheckDirective.option_spec,
        "column": directives.unchanged_required,
        "tolerance": directives.unchanged_required,
    }

    def data_attributes(self) -> dict[str, str]:
        if "tolerance" not in self.options:
            return {}
        return {"data_sc_tolerance": self.options["tolerance"].strip()}

    def build(self, question: list[nodes.Node]) -> list[nodes.Node]:
        if "tolerance" in self.options:
            try:
                tolerance = float(self.options["tolerance"])
            except ValueError:
                tolerance = -1.0
            if not 0 <= tolerance < 1:
                raise SelfCheckError(
                    ":tolerance: must be a relative tolerance in [0, 1), "
                    f"got {self.options['tolerance']!r}"
                )
        prompt, table, explanation = split_at_first(self.parse_content_to_nodes(), (nodes.table,))
        if table is None:
            raise SelfCheckError("has no table; write one in the body")
        header = next(table.findall(nodes.thead), None)
        body_rows = [row for tbody in table.findall(nodes.tbody) for row in tbody]
        if header is None or not body_rows:
            raise SelfCheckError("its table needs a header row and at least one body row")
        names = [entry.astext().strip() for entry in header[0]]
        columns = self._columns(names)
        table["classes"].append("sc-refill-table")
        for index in columns:
            header[0][index]["classes"].append("sc-refill-header")
        for row in body_rows:
            row_label = row[0].astext().strip() if len(row) else ""
            for entry in row:
                if _NUMBER.fullmatch(entry.astext().strip()):
                    entry["classes"].append("sc-number")  # kept on one line: 9.766e-04 whole
            for index in columns:
                if index >= len(row):
                    continue
                self._make_slot(row[index], f"{row_label}, {names[index]}")
        parts: list[nodes.Node] = [self.question_block(question, prompt), table]
        if explanation:
            parts.append(
                self.answer_details(
                    [element("div", explanation, classes=["sc-explanation"])],
                    summary="Why these values",
                )
            )
        return parts

    def _columns(self, names: list[str]) -> list[int]:
        if "column" not in self.options:
            raise SelfCheckError(
                "has no answer column; name the column the reader refills "
                f"with ':column:' (its columns are: {' | '.join(names)})"
            )
        columns = []
        for wanted in bucket_list(self.options["column"]):
            if wanted.isdigit() and 1 <= int(wanted) <= len(names):
                columns.append(int(wanted) - 1)
                continue
            matches = [i for i, name in enumerate(names) if name.casefold() == wanted.casefold()]
            if not matches:
                raise SelfCheckError(
                    f"its table has no answer column {wanted!r} "
                    f"(its columns are: {' | '.join(names)})"
                )
            columns.append(matches[0])
        if not columns:
            raise SelfCheckError("has no answer column; ':column:' is empty")
        return sorted(set(columns))

    @staticmethod
    def _make_slot(entry: nodes.Element, label: str) -> None:
        """Replace a cell's content by a ``<details>`` that holds it (the true value)."""
        content = list(entry.children)
        for child in content:
            entry.remove(child)
        if len(content) == 1 and isinstance(content[0], nodes.paragraph):
            content = list(content[0].children)  # a one-line cell: keep it inline
        if not content:
            content = [nodes.Text("(blank)")]
        entry["classes"].append("sc-refill-cell")
        entry += element(
            "div",
            [
                element(
                    "details",
                    [
                        element(
                            "summary",
                            [
                                nodes.Text("Show"),
                                nodes.inline("", f" {label}", classes=["sc-visually-hidden"]),
                            ],
                        ),
                        nodes.inline("", "", *content, classes=["sc-truth"]),
                    ],
                    classes=["sc-cell-answer"],
                )
            ],
            classes=["sc-refill-slot"],
            data_sc_label=label,
        )
