"""Two playgrounds in the page: a bit explorer and a GradScaler playground.

``{bit-explorer}`` lets a reader type a number (or flip bits) and see what
FP16, BF16, FP32, TF32, the two FP8 formats and FP4 E2M1 store for it::

    :::{bit-explorer}
    :value: 0.1
    :examples: 65519, 65520, 6.1e-5, 1e-8, -0
    :formats: fp16 bf16 fp32 tf32 fp8_e4m3 fp8_e5m2
    :show: fp16 bf16 fp32

    What a reader without JavaScript reads above the table (MyST).
    :::

``:formats:`` are the formats a reader can pick from, in the order shown
(default: the six of :data:`amp_lesson.playground.EXPLORER_FORMATS`, FP16
first); ``:show:`` those shown at first (default: all of them). ``:examples:`` are offered as buttons that type the value, and
are the rows of the table a reader without JavaScript sees (for the formats
of ``:show:``).

``{scaler-playground}`` lets a reader set GradScaler's arguments and a schedule
of overflows (``x`` an overflow, ``.`` a clean step) and watch the scale::

    :::{scaler-playground}
    :growth-interval: 4
    :steps: xxx..........xx...........x.............

    What a reader without JavaScript reads instead (MyST): point at the
    page's executed trace.
    :::

Both render a complete static version first: the explorer a table of its
columns for the ``examples``, computed now by :mod:`amp_lesson.formats`; the
playground its body, which points at the page's executed trace. The formats'
parameters and the starting settings go into the page as JSON, read by the
scripts in ``static/`` (``amp-floats.js`` and one script per widget), which
replace the static version with the live one. Scripts and style sheet are
added only to pages that use a playground, and the scripts are deferred.
Every option is checked when the book is built, with the same functions
(:mod:`amp_lesson.playground`) whose messages the widgets show.
"""

from __future__ import annotations

import hashlib
import html
import inspect
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

from amp_book import add_static_path

# amp_lesson.playground (and torch with it) is imported by the directives, when a page
# holds a playground and its data is not stored yet (computed_once): imported here, it
# cost every build, a no-change one too, 3 s.

STYLE = "amp-playgrounds.css"
FLOATS_SCRIPT = "amp-floats.js"
SCRIPTS = {"amp-bx": "amp-bit-explorer.js", "amp-sp": "amp-scaler-playground.js"}
TABLE_COLUMNS = ("format", "stored", "bits", "class", "event", "relative error")
_HEADINGS = {"bits": "sign exponent mantissa"}
WIDGET_ATTRIBUTE = "amp_playground"
OWN_MARKUP = "amp_book_markup"
"""On a raw node the book's own directives write (escaped, from computed data): a stored
edition's build lets it through (:func:`amp_book.edition.only_checked_markup`)."""


def _json_script(css_class: str, data: Any) -> str:
    """``data`` as a JSON ``<script>`` block; ``</`` is escaped so it cannot end the block."""
    text = json.dumps(data, allow_nan=False).replace("</", "<\\/")
    return f'<script type="application/json" class="{css_class}">{text}</script>'


def _raw(text: str, widget: str | None = None) -> nodes.raw:
    """An HTML-only node; ``widget`` marks the node that opens a playground of that kind."""
    node = nodes.raw("", text, format="html")
    node[OWN_MARKUP] = True  # written by this module, from computed data (edition.py checks)
    if widget:
        # Not in "classes": the HTML writer would wrap the raw text in a <div> of that class.
        node[WIDGET_ATTRIBUTE] = widget
    return node


def _static_table(rows: list[dict[str, str]], label: str) -> str:
    """The explorer's rows as a table, a group of rows per value under a heading row."""
    head = "".join(
        f'<th scope="col" class="amp-bx-col-{c.replace(" ", "-")}">'
        f"{html.escape(_HEADINGS.get(c, c))}</th>"
        for c in TABLE_COLUMNS
    )
    groups: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        groups.setdefault(row["value"], []).append(row)
    body = "".join(
        f'<tbody><tr><th scope="rowgroup" colspan="{len(TABLE_COLUMNS)}">'
        f"{html.escape(value)}</th></tr>"
        + "".join(
            "<tr>"
            + "".join(
                f'<td class="amp-bx-col-{c.replace(" ", "-")}">{html.escape(row[c])}</td>'
                for c in TABLE_COLUMNS
            )
            + "</tr>"
            for row in group
        )
        + "</tbody>"
        for value, group in groups.items()
    )
    caption = "What each format stores, computed by amp_lesson.formats"
    return (
        f'<div class="amp-bx-table-wrap" tabindex="0" role="region" aria-label="{html.escape(label)}">'
        f'<table class="amp-bx-table"><caption>{caption}</caption>'
        f"<thead><tr>{head}</tr></thead>{body}</table></div>"
    )


def _format_names(argument: str, option: str = "formats") -> list[str]:
    from amp_lesson.formats import FORMATS

    names = argument.replace(",", " ").split()
    for name in names:
        if name not in FORMATS:
            allowed = ", ".join(FORMATS)
            raise ValueError(f"{option}: {name!r} is not a format; use names from {allowed}")
    if not names:
        raise ValueError(f"{option}: name at least one format")
    if len(set(names)) < len(names):
        raise ValueError(f"{option}: name each format once, got {argument.strip()!r}")
    return names


class BitExplorer(SphinxDirective):
    """``{bit-explorer}``: type a number, see what each format stores for it."""

    has_content = True
    option_spec: ClassVar[dict[str, Any]] = {
        "value": directives.unchanged,
        "examples": directives.unchanged,
        "formats": directives.unchanged,
        "show": directives.unchanged,
        "id": directives.unchanged,
    }

    def run(self) -> list[nodes.Node]:
        initial = self.options.get("value", "0.1").strip()
        try:
            computed = computed_once(self, "bit-explorer", lambda: _explorer(self.options))
        except ValueError as error:
            raise self.error(f"bit-explorer: {error}") from None
        serial = self.env.new_serialno("amp-bx") + 1
        widget_id = self.options.get("id", f"amp-bx-{serial}").strip()
        data = {**computed["data"], "initial": initial}
        opening = (
            f'<div class="amp-playground amp-bx" id="{html.escape(widget_id)}">'
            + _json_script("amp-bx-data", data)
            + '<div class="amp-bx-static">'
        )
        body = self.parse_content_to_nodes() if self.content else []
        return [_raw(opening, "amp-bx"), *body, _raw(computed["table"] + "</div></div>")]


def _explorer(options: dict[str, str]) -> dict[str, Any]:
    """The bit explorer's data and static table for ``options``; ``ValueError`` names a bad one."""
    from amp_book.playground_text import PATTERN_PREFIXES, format_parameters, read_number
    from amp_lesson.formats import FORMATS
    from amp_lesson.playground import (
        CLASS_TEXT,
        EVENT_TEXT,
        EXAMPLE_VALUES,
        EXPLORER_FORMATS,
        NOT_STORED,
        explorer_rows,
    )

    read_number(options.get("value", "0.1").strip())
    names = _format_names(options.get("formats", " ".join(EXPLORER_FORMATS)))
    shown = _format_names(options.get("show", " ".join(names)), "show")
    outside = [name for name in shown if name not in names]
    if outside:
        raise ValueError(
            f"show: {', '.join(outside)} not among the formats offered ({', '.join(names)})"
        )
    examples_text = options.get("examples")
    texts = (
        [v.strip() for v in examples_text.split(",")]
        if examples_text
        else [repr(v) for v in EXAMPLE_VALUES]
    )
    examples = [read_number(v) for v in texts]
    data = {
        "formats": format_parameters(list(FORMATS)),  # every format: any can be typed as bits
        "show": names,
        "shown": shown,
        "examples": texts,
        "prefixes": dict(PATTERN_PREFIXES),
        "event_text": dict(EVENT_TEXT),
        "class_text": dict(CLASS_TEXT),
        "not_stored": NOT_STORED,
    }
    shown_in_order = [name for name in names if name in shown]
    table = _static_table(explorer_rows(examples, shown_in_order), "Bit explorer, static table")
    return {"data": data, "table": table}


def computed_once(
    directive: SphinxDirective, kind: str, compute: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """What ``compute`` returns for ``directive``'s options, computed once per execution key.

    Computing it imports torch (3 s in the Sphinx process) and casts with it,
    so the result is stored as JSON beside the execution cache, under a name
    made of ``kind`` (the directive's name), the options, the extension's own
    hash and the digest of the package's modules that compute it
    (:func:`~amp_book.execution.directive_key`). The execution
    cache's folder is chosen by the installed distributions (torch's version
    among them), Python and the device, so a stored result is never older than
    any of these. A ``ValueError`` from ``compute`` (a bad option) is raised
    and nothing is stored.
    """
    from amp_book.cache import extension_key
    from amp_book.execution import directive_key

    config = directive.env.config
    base = getattr(config, "nb_execution_cache_path", "")
    name = json.dumps(
        [
            kind,
            sorted(directive.options.items()),
            # set by amp_book.cache in the book; computed here where this extension loads alone
            getattr(config, "amp_lesson_extension_hash", "") or extension_key(),
            directive_key(kind),
        ]
    )
    path = Path(base) / "playgrounds" / f"{hashlib.sha256(name.encode()).hexdigest()[:32]}.json"
    if base and path.is_file():
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            stored = None
        if isinstance(stored, dict):
            return stored
    result = compute()
    if base:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")  # parallel readers write whole files
        tmp.write_text(json.dumps(result), encoding="utf-8")
        os.replace(tmp, path)
    return result


def _scaler_defaults() -> dict[str, str]:
    """GradScaler's own defaults, read from its signature."""
    import torch

    params = inspect.signature(torch.amp.GradScaler).parameters
    names = ("init_scale", "growth_factor", "backoff_factor", "growth_interval")
    return {name: repr(params[name].default) for name in names}


class ScalerPlayground(SphinxDirective):
    """``{scaler-playground}``: GradScaler's arguments and a schedule in, the scale trace out."""

    has_content = True
    option_spec: ClassVar[dict[str, Any]] = {
        "init-scale": directives.unchanged,
        "growth-factor": directives.unchanged,
        "backoff-factor": directives.unchanged,
        "growth-interval": directives.unchanged,
        "steps": directives.unchanged,
        "id": directives.unchanged,
    }

    def run(self) -> list[nodes.Node]:
        if not self.content:
            raise self.error(
                "scaler-playground needs a body: what a reader without JavaScript reads "
                "instead (point at the page's executed trace)"
            )
        try:
            computed = computed_once(self, "scaler-playground", lambda: _scaler(self.options))
        except ValueError as error:
            raise self.error(f"scaler-playground: {error}") from None
        serial = self.env.new_serialno("amp-sp") + 1
        widget_id = self.options.get("id", f"amp-sp-{serial}").strip()
        opening = (
            f'<div class="amp-playground amp-sp" id="{html.escape(widget_id)}">'
            + _json_script("amp-sp-data", computed["data"])
            + '<div class="amp-sp-static">'
        )
        body = self.parse_content_to_nodes()
        return [_raw(opening, "amp-sp"), *body, _raw(computed["static"] + "</div></div>")]


def _scaler(options: dict[str, str]) -> dict[str, Any]:
    """The scaler playground's data and worked example for ``options``; ``ValueError``
    names a bad option."""
    from amp_book.playground_text import read_scaler_settings, steps_pattern
    from amp_lesson.playground import (
        CHANGE_TEXT,
        MAX_STEPS,
        read_steps,
    )

    settings = _scaler_defaults()
    for name in settings:
        option = name.replace("_", "-")
        if option in options:
            settings[name] = options[option].strip()
    steps = options.get("steps", steps_pattern([False] * 9 + [True]) * 4)
    values = read_scaler_settings(settings)
    schedule = read_steps(steps)
    data = {
        **settings,
        "steps": steps.strip(),
        "max_steps": MAX_STEPS,
        "change_text": dict(CHANGE_TEXT),
    }
    return {"data": data, "static": _worked_example(values, schedule)}


def _worked_example(settings: dict[str, Any], schedule: list[bool]) -> str:
    """The playground's starting point, worked through: the call, the schedule, the
    summary and the trace, for a reader without JavaScript (and without the widget)."""
    from amp_book.playground_text import steps_pattern
    from amp_lesson.playground import (
        TRACE_COLUMNS,
        describe_trace,
        scaler_trace,
    )

    rows = scaler_trace(settings, schedule)
    call = "torch.amp.GradScaler(" + ", ".join(
        ['"cpu"', *(f"{name}={value!r}" for name, value in settings.items())]
    )
    head = "".join(f'<th scope="col">{html.escape(c)}</th>' for c in TRACE_COLUMNS)
    body = "".join(
        ('<tr class="amp-sp-skipped">' if row["skipped"] == "yes" else "<tr>")
        + "".join(f"<td>{html.escape(row[c])}</td>" for c in TRACE_COLUMNS)
        + "</tr>"
        for row in rows
    )
    return (
        '<div class="amp-sp-worked">'
        f'<p class="amp-sp-call"><code>{html.escape(call)})</code></p>'
        '<p class="amp-sp-schedule">Steps (x an overflow, . a clean step): '
        f"<code>{html.escape(steps_pattern(schedule))}</code></p>"
        f'<p class="amp-sp-summary">{html.escape(describe_trace(rows))}</p>'
        '<div class="amp-sp-table-wrap" tabindex="0" role="region" '
        'aria-label="Trace, step by step">'
        '<table class="amp-sp-table amp-sp-table-static">'
        "<caption>The trace: what update() did after each step, computed by "
        "amp_lesson.playground</caption>"
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div></div>"
    )


def _widgets_on(doctree: nodes.document | None) -> list[str]:
    """The kinds of playground (``amp-bx``, ``amp-sp``) on a page, in a fixed order."""
    if doctree is None:
        return []
    kinds = {node.get(WIDGET_ATTRIBUTE) for node in doctree.findall(nodes.raw)}
    return [kind for kind in SCRIPTS if kind in kinds]


def _add_assets_to_page(
    app: Sphinx,
    pagename: str,
    templatename: str,
    context: dict[str, Any],
    doctree: nodes.document | None,
) -> None:
    """Add the style sheet and scripts to pages that hold a playground, and only those."""
    kinds = _widgets_on(doctree)
    if not kinds:
        return
    app.add_css_file(STYLE)
    app.add_js_file(FLOATS_SCRIPT, loading_method="defer")
    for kind in kinds:
        app.add_js_file(SCRIPTS[kind], loading_method="defer")


def setup(app: Sphinx) -> dict[str, Any]:
    """Register the two directives and their assets."""
    app.add_directive("bit-explorer", BitExplorer)
    app.add_directive("scaler-playground", ScalerPlayground)
    app.connect("config-inited", add_static_path, priority=600)
    app.connect("html-page-context", _add_assets_to_page)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


__all__ = ["BitExplorer", "ScalerPlayground", "setup"]
