"""The self-check directives: their MyST syntax, checks and static HTML.

Every directive renders a complete static version first: the question, its
options or items as a list, and the answers inside native ``<details>``
elements, so a reader without JavaScript can reach every answer.
``selfcheck.js`` later finds this markup (by its ``sc-`` classes and
``data-sc-`` attributes) and upgrades it into an interactive widget.

The syntax keeps everything an author writes in MyST: the question is the
directive's argument, a short answer or hint is an inline option, and the
structure (options, items, rows) is the first list or table of the body, with
a note nested under each list item. Content before that list belongs to the
question; content after it is the explanation (read by :mod:`.body`). See
``docs/guide/selfchecks.md``. The two kinds read from rows, step-through and refill, are
in :mod:`.tables`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from typing import Any, ClassVar

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

from amp_book.kickers import kicker as kicker_of
from amp_book.selfcheck.body import (
    ListEntry,
    bucket_list,
    copy_nodes,
    read_list,
    shortened,
    split_at_first,
)
from amp_book.selfcheck.html import element, text_element

logger = logging.getLogger(__name__)

ID_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
# Where the ids seen on the page being read are kept; Sphinx empties
# env.temp_data after each document, so nothing leaks between pages.
IDS_SEEN = "amp_lesson_selfcheck_ids"


class SelfCheckError(Exception):
    """A directive's input cannot make a self-check; the message says why."""


# -- the directives -----------------------------------------------------------------


class SelfCheckDirective(SphinxDirective):
    """What every self-check shares: the question, the id, warnings and the wrapper."""

    has_content = True
    required_arguments = 1
    final_argument_whitespace = True
    option_spec: ClassVar[dict[str, Any]] = {
        "id": directives.unchanged_required,
        "title": directives.unchanged_required,
        "class": directives.class_option,
    }
    kind: ClassVar[str] = ""
    kicker: ClassVar[str] = ""

    def run(self) -> list[nodes.Node]:
        try:
            widget_id = self._widget_id()
            question, messages = self.parse_inline(self.arguments[0], lineno=self.lineno)
            widget = self.build(question)
        except SelfCheckError as error:
            logger.warning(
                "{%s} %r: %s",
                self.name,
                shortened(self.arguments[0]),
                error,
                location=self.get_location(),
                type="selfcheck",
                subtype=self.name,
            )
            return []
        title = self.options.get("title", self.default_title())
        wrapper = element(
            "div",
            classes=["sc", f"sc-{self.kind}", *self.options.get("class", [])],
            id=f"sc-{widget_id}",
            role="group",
            aria_labelledby=f"sc-{widget_id}-title",
            data_sc_kind=self.kind,
            data_sc_id=widget_id,
            **self.data_attributes(),
        )
        wrapper += text_element("p", title, classes=["sc-kicker"], id=f"sc-{widget_id}-title")
        wrapper.extend(widget)
        return [wrapper, *messages]

    # Subclasses fill these in.
    def default_title(self) -> str:
        """The label above the question, naming the kind of exercise."""
        return self.kicker

    def build(self, question: list[nodes.Node]) -> list[nodes.Node]:
        """The widget's static markup; raise :class:`SelfCheckError` on bad input."""
        raise NotImplementedError

    def data_attributes(self) -> dict[str, str]:
        """Extra ``data-sc-*`` attributes of the wrapper (keys with ``_``)."""
        return {}

    def id_seed(self) -> str:
        """What a derived id is computed from: the kind and the question's text."""
        return f"{self.kind}\0{self.arguments[0]}"

    # Shared helpers.
    def _widget_id(self) -> str:
        """The widget's id: ``:id:``, or derived from its kind and question.

        A derived id depends on the question alone, so answers the reader
        stored survive an edit elsewhere on the page; two self-checks on one
        page may not share an id.
        """
        if "id" in self.options:
            widget_id = self.options["id"].strip()
            if not ID_PATTERN.match(widget_id):
                raise SelfCheckError(
                    f":id: {widget_id!r} must start with a letter and hold only letters, "
                    "digits, '-' and '_'"
                )
        else:
            digest = hashlib.sha1(self.id_seed().encode(), usedforsecurity=False).hexdigest()
            widget_id = f"{self.kind}-{digest[:8]}"
        seen: dict[str, int] = self.env.temp_data.setdefault(IDS_SEEN, {})
        if widget_id in seen:
            raise SelfCheckError(
                f"duplicate id {widget_id!r} on this page (first used on line {seen[widget_id]}); "
                "give each self-check its own :id:"
            )
        seen[widget_id] = self.lineno
        return widget_id

    def question_block(
        self, question: list[nodes.Node], prompt: Iterable[nodes.Node] = ()
    ) -> nodes.Element:
        """The question's sentence and any content that belongs with it."""
        block = element("div", classes=["sc-question"])
        block += nodes.paragraph("", "", *question, classes=["sc-question-text"])
        block.extend(prompt)
        return block

    def inline_option(self, name: str) -> list[nodes.Node]:
        """An option's value parsed as inline MyST (roles and literals work)."""
        parsed, messages = self.parse_inline(self.options[name], lineno=self.lineno)
        return [*parsed, *messages]

    @staticmethod
    def answer_details(
        body: Iterable[nodes.Node],
        summary: str = "Show answer",
        classes: Iterable[str] = ("sc-answer",),
    ) -> nodes.Element:
        """A native ``<details>`` holding an answer: reachable without JavaScript."""
        return element(
            "details",
            [
                text_element("summary", summary),
                element("div", body, classes=["sc-answer-body"]),
            ],
            classes=classes,
        )


class ChoiceDirective(SelfCheckDirective):
    """``{selfcheck-choice}``: multiple choice, choose-all-that-apply, or eliminate the wrong options.

    The first bullet list of the body holds the options; ``[x]`` marks a right
    one. Each option's nested content is its note: for the right option, why
    it is right; for a wrong one, why it tempts. Content after the list is a
    further explanation, content before it part of the question.
    """

    kind = "choice"
    kicker = kicker_of("selfcheck-choice")
    option_spec: ClassVar[dict[str, Any]] = {
        **SelfCheckDirective.option_spec,
        "mode": lambda arg: directives.choice(arg, ("single", "multiple", "eliminate")),
        "answer": directives.unchanged_required,
    }

    @property
    def mode(self) -> str:
        return self.options.get("mode", "single")

    def default_title(self) -> str:
        return kicker_of("selfcheck-choice", self.mode)

    def id_seed(self) -> str:
        return f"{self.kind}\0{self.mode}\0{self.arguments[0]}"

    def data_attributes(self) -> dict[str, str]:
        return {"data_sc_mode": self.mode}

    def build(self, question: list[nodes.Node]) -> list[nodes.Node]:
        prompt, options_list, explanation = split_at_first(
            self.parse_content_to_nodes(), (nodes.bullet_list, nodes.enumerated_list)
        )
        if options_list is None:
            raise SelfCheckError("no options; write them as a bullet list in the body")
        options = read_list(options_list)
        if len(options) < 2:
            raise SelfCheckError(f"needs at least two options, found {len(options)}")
        if len(options) > len(LETTERS):
            raise SelfCheckError(f"has {len(options)} options; at most {len(LETTERS)} fit")
        for letter, option in zip(LETTERS, options, strict=False):
            if not option.text:
                raise SelfCheckError(f"option {letter} has no text on its first line")
        right = self._right_options(options)
        if not right:
            raise SelfCheckError(
                "no correct option; mark the right one with '[x]' (or give :answer: B)"
            )
        if len(right) > 1 and self.mode != "multiple":
            letters = ", ".join(LETTERS[i] for i in right)
            raise SelfCheckError(
                f"{len(right)} options are marked correct ({letters}) but mode "
                f"{self.mode!r} has a single answer; use ':mode: multiple' for "
                "choose-all-that-apply"
            )
        for index, option in enumerate(options):
            if index not in right and not option.note:
                raise SelfCheckError(
                    f"wrong option {LETTERS[index]} ({shortened(option.text, 30)!r}) has no note "
                    "saying why it tempts; nest one under the option"
                )
        if not explanation and not any(options[i].note for i in right):
            raise SelfCheckError(
                "has no explanation; nest one under the right option or write it after the list"
            )
        return [
            self.question_block(question, prompt),
            self._options_list(options, right),
            self._answer(options, right, explanation),
        ]

    def _right_options(self, options: list[ListEntry]) -> list[int]:
        if "answer" in self.options:
            letters = [
                a.strip().upper() for a in re.split(r"[,\s]+", self.options["answer"]) if a.strip()
            ]
            right = []
            for letter in letters:
                index = int(letter) - 1 if letter.isdigit() else LETTERS.find(letter)
                if not 0 <= index < len(options):
                    raise SelfCheckError(f":answer: {letter!r} names no option")
                right.append(index)
            return sorted(set(right))
        unknown = [o.marker for o in options if o.marker not in (None, "x", "X", " ", "")]
        if unknown:
            raise SelfCheckError(
                f"option marker [{unknown[0]}] is neither '[x]' (right) nor '[ ]' (wrong)"
            )
        return [i for i, option in enumerate(options) if option.marker in ("x", "X")]

    def _options_list(self, options: list[ListEntry], right: list[int]) -> nodes.Element:
        listing = element("ol", classes=["sc-options"])
        for index, option in enumerate(options):
            letter = LETTERS[index]
            listing += element(
                "li",
                [
                    nodes.inline("", f"{letter}.", classes=["sc-option-key"]),
                    nodes.Text(" "),
                    nodes.inline("", "", *option.head, classes=["sc-option-text"]),
                ],
                classes=["sc-option"],
                data_sc_key=letter,
                data_sc_correct="true" if index in right else "false",
            )
        return listing

    def _answer(
        self, options: list[ListEntry], right: list[int], explanation: list[nodes.Node]
    ) -> nodes.Element:
        label = "Survives elimination" if self.mode == "eliminate" else "Answer"
        answer_line = nodes.paragraph(
            "", "", nodes.strong("", f"{label}: "), classes=["sc-answer-line"]
        )
        for position, index in enumerate(right):
            if position:
                answer_line += nodes.Text("; ")
            answer_line += nodes.Text(f"{LETTERS[index]}. ")
            answer_line.extend(copy_nodes(options[index].head))
        why = element("div", classes=["sc-explanation"])
        for index in right:
            why.extend(options[index].note)
        why.extend(explanation)
        body: list[nodes.Node] = [answer_line]
        if len(why.children):
            body.append(why)
        title = "What rules out {}" if self.mode == "eliminate" else "Why {} tempts"
        for index, option in enumerate(options):
            if index in right:
                continue
            letter = LETTERS[index]
            body.append(
                element(
                    "div",
                    [
                        nodes.paragraph(
                            "",
                            "",
                            nodes.strong("", title.format(letter)),
                            classes=["sc-note-title"],
                        ),
                        *option.note,
                    ],
                    classes=["sc-note"],
                    data_sc_for=letter,
                )
            )
        summary = "Show the survivor" if self.mode == "eliminate" else "Show answer"
        return self.answer_details(body, summary)


class PredictDirective(SelfCheckDirective):
    """``{selfcheck-predict}``: the reader commits a prediction before the answer is revealed.

    ``:answer:`` is the answer (inline MyST); the body is the explanation.
    """

    kind = "predict"
    kicker = kicker_of("selfcheck-predict")
    option_spec: ClassVar[dict[str, Any]] = {
        **SelfCheckDirective.option_spec,
        "answer": directives.unchanged_required,
    }

    def build(self, question: list[nodes.Node]) -> list[nodes.Node]:
        if "answer" not in self.options:
            raise SelfCheckError(
                "needs :answer: with the answer the reader's prediction is compared with"
            )
        answer = nodes.paragraph(
            "",
            "",
            nodes.strong("", "Answer: "),
            *self.inline_option("answer"),
            classes=["sc-answer-line"],
        )
        body: list[nodes.Node] = [answer]
        explanation = self.parse_content_to_nodes()
        if explanation:
            body.append(element("div", explanation, classes=["sc-explanation"]))
        return [self.question_block(question), self.answer_details(body)]


class SortDirective(SelfCheckDirective):
    """``{selfcheck-sort}``: sort items into buckets.

    ``:buckets: FP16 | FP32`` names the buckets; each item of the body's list
    starts with its bucket in brackets, ``- [FP16] activations``, and may nest
    a note. Content after the list explains the sort as a whole.
    """

    kind = "sort"
    kicker = kicker_of("selfcheck-sort")
    option_spec: ClassVar[dict[str, Any]] = {
        **SelfCheckDirective.option_spec,
        "buckets": directives.unchanged_required,
    }

    def build(self, question: list[nodes.Node]) -> list[nodes.Node]:
        buckets = bucket_list(self.options.get("buckets", ""))
        if len(buckets) < 2:
            raise SelfCheckError("needs ':buckets:' naming two or more buckets, separated by '|'")
        if len(set(buckets)) != len(buckets):
            raise SelfCheckError(f":buckets: names a bucket twice: {buckets}")
        prompt, items_list, explanation = split_at_first(
            self.parse_content_to_nodes(), (nodes.bullet_list, nodes.enumerated_list)
        )
        if items_list is None:
            raise SelfCheckError(
                "no items; write them as a bullet list, each starting "
                "with its bucket in brackets: '- [FP16] activations'"
            )
        items = read_list(items_list)
        if len(items) < 2:
            raise SelfCheckError(f"needs at least two items, found {len(items)}")
        for number, item in enumerate(items, start=1):
            if item.marker is None or not item.marker.strip():
                raise SelfCheckError(
                    f"item {number} ({shortened(item.text, 30)!r}) does not "
                    "start with its bucket in brackets, e.g. '[FP16]'"
                )
            if item.marker.strip() not in buckets:
                raise SelfCheckError(
                    f"item {number} ({shortened(item.text, 30)!r}) is in unknown bucket "
                    f"{item.marker.strip()!r}; the buckets are {' | '.join(buckets)}"
                )
            if not item.text:
                raise SelfCheckError(f"item {number} has no text after its bucket")

        bucket_line = nodes.paragraph("", "Buckets: ", classes=["sc-buckets"])
        for position, name in enumerate(buckets):
            if position:
                bucket_line += nodes.Text(" · ")
            bucket_line += nodes.inline("", name, classes=["sc-bucket-name"])
        listing = element("ul", classes=["sc-items"])
        for number, item in enumerate(items, start=1):
            listing += element(
                "li",
                [nodes.inline("", "", *item.head, classes=["sc-item-text"])],
                classes=["sc-item"],
                data_sc_key=str(number),
                data_sc_bucket=item.marker.strip(),
            )  # type: ignore[union-attr]
        return [
            self.question_block(question, prompt),
            bucket_line,
            listing,
            self.answer_details(self._answer(buckets, items, explanation)),
        ]

    @staticmethod
    def _answer(
        buckets: list[str], items: list[ListEntry], explanation: list[nodes.Node]
    ) -> list[nodes.Node]:
        body: list[nodes.Node] = []
        for name in buckets:
            members = [
                (n, item) for n, item in enumerate(items, start=1) if item.marker.strip() == name
            ]  # type: ignore[union-attr]
            group = element("ul", classes=["sc-bucket-members"])
            for number, item in members:
                member = element("li", [nodes.inline("", "", *copy_nodes(item.head))])
                if item.note:
                    member += element(
                        "div", item.note, classes=["sc-note"], data_sc_for=str(number)
                    )
                group += member
            body.append(
                element(
                    "div",
                    [
                        nodes.paragraph(
                            "", "", nodes.strong("", name), classes=["sc-bucket-title"]
                        ),
                        group if members else nodes.paragraph("", "(nothing goes here)"),
                    ],
                    classes=["sc-bucket-answer"],
                )
            )
        if explanation:
            body.append(element("div", explanation, classes=["sc-explanation"]))
        return body


class DiscussDirective(SelfCheckDirective):
    """``{selfcheck-discuss}``: an open question, with an optional ``:hint:`` behind ``<details>``.

    The body adds to the prompt. There is nothing to check; the script gives
    the reader a box for their answer, kept in their browser.
    """

    kind = "discuss"
    kicker = kicker_of("selfcheck-discuss")
    option_spec: ClassVar[dict[str, Any]] = {
        **SelfCheckDirective.option_spec,
        "hint": directives.unchanged_required,
    }

    def build(self, question: list[nodes.Node]) -> list[nodes.Node]:
        parts: list[nodes.Node] = [self.question_block(question, self.parse_content_to_nodes())]
        if "hint" in self.options:
            parts.append(
                self.answer_details(
                    [nodes.paragraph("", "", *self.inline_option("hint"))],
                    summary="Hint",
                    classes=("sc-hint",),
                )
            )
        return parts
