# One module: everything that shows a stored run beside the live book, from the page's state to the
# switch and the banner.
"""A second edition of the book: every page as another device ran it, rendered beside it.

A build executes the pages where it runs: on Read the Docs, a CPU. A CUDA
machine's run of the same pages can be kept (:mod:`.edition_store`) and shown
beside it.

**Rendering** (every build, at its end): each stored edition is checked
(:func:`~amp_book.edition_store.load_edition`) and its sources written for a
second site under ``editions/<device>/``, from the stored notebooks, executing
nothing; the build tool builds it once this build has finished
(``tools/build_book.py``). Each page of both editions carries a switch between them
(:func:`switch_html`); a page of the stored edition whose source has changed
since is shown as recorded and said to be from an earlier version of the
page, one whose code or data changed says that, and one the device did not run
says why (:func:`page_state`). The API reference and the authors' pages
(``amp_lesson_reference_pages``) run the same everywhere and stay in the live
edition, which links into them; search covers the live edition.
"""

from __future__ import annotations

import functools
import html
import json
import os
import re
import shutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.util import logging

from amp_book import workdirs
from amp_book.edition_store import (
    CURRENT,
    EDITIONS_URL,
    FAILED,
    INPUTS_CHANGED,
    NO_CODE,
    NOT_RECORDED,
    NOT_RUN,
    PAGE_CHANGED,
    Edition,
    EditionError,
    editions_key,
    find_editions,
    load_edition,
    source_sha256,
)
from amp_book.execution import KEY_FIELD

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PageState:
    """What a page of a stored edition is against this build's sources."""

    docname: str
    state: str
    note: str = ""


def page_state(
    edition: Edition, docname: str, source: Path | None, inputs_key: str | None
) -> PageState:
    """Whether ``edition`` shows ``docname`` as it is now (see :data:`STATES`).

    ``source`` is the page's source file now; ``inputs_key`` the key of the code
    and data it runs now (:func:`.execution.inputs_key`), ``None`` for a page
    without code cells.
    """
    stored = edition.pages.get(docname)
    if stored is None:
        if inputs_key is None:
            return PageState(docname, NO_CODE)
        return PageState(
            docname,
            NOT_RECORDED,
            f"the page is newer than the recording of {edition.date}",
        )
    if stored.status == FAILED:
        return PageState(docname, NOT_RUN, str(stored.reason))
    if source is None or not source.is_file() or source_sha256(source) != stored.source_sha256:
        return PageState(docname, PAGE_CHANGED)
    if inputs_key is not None and stored.inputs_key and inputs_key != stored.inputs_key:
        return PageState(docname, INPUTS_CHANGED)
    return PageState(docname, CURRENT)


# -- the switch and the banner -------------------------------------------------------------


@dataclass(frozen=True)
class Choice:
    """One entry of the edition switch: its words, where it leads, whether it is this page."""

    label: str
    detail: str
    href: str
    current: bool
    key: str
    opens: bool = False
    """The edition this page opens on for a reader who has not chosen (see :func:`face_of`)."""


def switch_html(choices: list[Choice]) -> str:
    """The edition switch: one link per edition of this page, the one shown marked current.

    >>> print(switch_html([Choice("CPU", "", "#", True, "live"),
    ...                    Choice("NVIDIA H200", "recorded 2026-11-30", "e/x.html", False, "h200")]))
    <nav class="amp-edition-switch" aria-label="Runs of this page"><span class="amp-edition-switch-label">Run on</span> <a class="amp-edition-choice" href="#" aria-current="page" data-edition="live"><span class="amp-edition-device">CPU</span></a> · <a class="amp-edition-choice" href="e/x.html" data-edition="h200"><span class="amp-edition-device">NVIDIA H200</span> <span class="amp-edition-detail">recorded 2026-11-30</span></a></nav>
    """
    links = []
    for c in choices:
        current = ' aria-current="page"' if c.current else ""
        current += " data-opens" if c.opens else ""
        links.append(
            f'<a class="amp-edition-choice" href="{html.escape(c.href)}"{current} '
            f'data-edition="{html.escape(c.key)}">'
            f'<span class="amp-edition-device">{html.escape(c.label)}</span>'
            + (
                f' <span class="amp-edition-detail">{html.escape(c.detail)}</span>'
                if c.detail
                else ""
            )
            + "</a>"
        )
    return (
        '<nav class="amp-edition-switch" aria-label="Runs of this page">'
        '<span class="amp-edition-switch-label">Run on</span> ' + " · ".join(links) + "</nav>"
    )


_PROVENANCE_END = re.compile(r'<p class="amp-provenance"[^>]*>.*?</p>', re.DOTALL)
_TITLE_END = re.compile(r"</h1>")


def under_title(body: str, line: str) -> str:
    """``body`` with ``line`` right under the page's provenance line (or, without one, its
    title): where a page ran is read there, not above the title.

    >>> under_title('<h1>T</h1><p class="amp-provenance">Ran on CPU</p><p>Text</p>', "<nav/>")
    '<h1>T</h1><p class="amp-provenance">Ran on CPU</p><nav/><p>Text</p>'
    >>> under_title("<h1>T</h1><p>Text</p>", "<nav/>")
    '<h1>T</h1><nav/><p>Text</p>'
    """
    for pattern in (_PROVENANCE_END, _TITLE_END):
        found = pattern.search(body)
        if found:
            return body[: found.end()] + line + body[found.end() :]
    return line + body


def choice_detail(state: PageState, edition_date: str) -> str:
    """The few words under the recorded edition's name in the switch."""
    return {
        PAGE_CHANGED: f"recorded {edition_date}, from an earlier version of this page",
        INPUTS_CHANGED: f"recorded {edition_date}, before its code changed",
        NOT_RUN: "not run there",
        NOT_RECORDED: "not recorded yet",
    }.get(state.state, f"recorded {edition_date}")


def banner_html(state: PageState, edition: Mapping[str, Any], live_href: str) -> str:
    """What a page of the stored edition says above it: whose run it is, and how current.

    ``edition`` holds ``device``, ``date`` and ``describe`` (see
    :meth:`Edition.describe`); ``live_href`` leads to the same page as this
    build ran it.
    """
    device, date = html.escape(edition["device"]), html.escape(edition["date"])
    live = f'<a href="{html.escape(live_href)}" data-edition="live">this page as it runs now</a>'
    kind = "note"
    if state.state == CURRENT:
        text = (
            f"Every output here, and every sentence that reports one, is from a run on "
            f"{device}, recorded {date}. Read {live}."
        )
    elif state.state == NO_CODE:
        text = f"This page runs no code: it reads the same in every edition. Read {live}."
    elif state.state == PAGE_CHANGED:
        kind = "warning"
        text = (
            f"This page has changed since {device} ran it on {date}: shown here is the "
            f"earlier version of the page, as recorded then. Read {live} for the current one."
        )
    elif state.state == INPUTS_CHANGED:
        kind = "warning"
        text = (
            f"The code or data this page runs has changed since {device} ran it on {date}: "
            f"the outputs below are what the earlier code gave. Read {live} for what the "
            "current code gives."
        )
    else:
        kind = "warning"
        why = html.escape(state.note.rstrip("."))
        text = f"{device} did not run this page: {why}. Read {live}."
    provenance = html.escape(edition["describe"])
    return (
        f'<div class="amp-edition-banner amp-edition-{kind}" role="note" '
        f'data-edition-state="{state.state}"><p>{text}</p>'
        f'<p class="amp-edition-provenance">{provenance}</p></div>'
    )


# -- the stored edition's sources ----------------------------------------------------------

_FENCE = re.compile(r"^(?P<fence>`{3,}|:{3,})\{toctree\}[^\n]*\n(?P<body>.*?)^(?P=fence)\s*$",
                    re.MULTILINE | re.DOTALL)  # fmt: skip


def drop_toctree_entries(text: str, docname: str, keep: Callable[[str], bool]) -> str:
    """``text`` with every toctree entry that ``keep`` refuses left out (a toctree left
    with no entry, whole).

    >>> page = "# Home\\n\\n```{toctree}\\n:caption: API\\n\\napi/index\\n```\\n"
    >>> drop_toctree_entries(page, "index", lambda d: not d.startswith("api/"))
    '# Home\\n\\n'
    """
    base = PurePosixPath(docname).parent

    def mend(match: re.Match[str]) -> str:
        kept, entries = [], 0
        for line in match.group("body").splitlines(keepends=True):
            entry = line.strip()
            if not entry or entry.startswith(":"):
                kept.append(line)
                continue
            target = entry.rsplit("<", 1)[1].rstrip(">").strip() if entry.endswith(">") else entry
            resolved = target.lstrip("/") if target.startswith("/") else str(base / target)
            resolved = os.path.normpath(resolved).replace(os.sep, "/")
            if "://" in target or keep(resolved):
                kept.append(line)
                entries += 1
        if not entries:
            return ""
        return match.group(0).replace(match.group("body"), "".join(kept))

    return _FENCE.sub(mend, text)


def forward_page(title: str, live: str) -> str:
    """The source that stands in a stored edition for a section it leaves to the live book
    (the API reference, the authors' guide): the sidebar keeps the entry, which opens the
    live page, ``live`` (relative to this one).

    >>> print(forward_page("API reference", "../../../api/index.html"))
    # API reference
    <BLANKLINE>
    ```{raw} html
    <meta http-equiv="refresh" content="0; url=../../../api/index.html">
    <p>This part of the book reads the same in every edition: <a href="../../../api/index.html">API reference</a>, as the book runs now.</p>
    ```
    <BLANKLINE>
    """
    href, name = html.escape(live), html.escape(title)
    return (
        f"# {title}\n\n```{{raw}} html\n"
        f'<meta http-equiv="refresh" content="0; url={href}">\n'
        f"<p>This part of the book reads the same in every edition: "
        f'<a href="{href}">{name}</a>, as the book runs now.</p>\n```\n'
    )


def stub_page(title: str, state: PageState, device: str) -> str:
    """The source that stands in for a page the device did not run."""
    why = state.note.rstrip(".")
    return f"# {title}\n\nThis page was not run on {device}: {why}.\n"


def write_if_changed(path: Path, data: bytes) -> bool:
    """Write ``data`` to ``path`` unless it already holds it (Sphinx then reads it again)."""
    if path.is_file() and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return True


def relative_url(from_doc: str, to: str) -> str:
    """The URL of ``to`` (a path from the site's root) relative to the page ``from_doc``.

    >>> relative_url("chapter/formats", "editions/h200/chapter/formats.html")
    '../editions/h200/chapter/formats.html'
    >>> relative_url("index", "chapter/start.html")
    'chapter/start.html'
    """
    depth = from_doc.count("/")
    return "../" * depth + to


def switch_entries(
    editions: Iterable[Edition], pagename: str, states: Mapping[str, PageState], live_device: str
) -> list[dict[str, str]]:
    """The switch's entries for ``pagename``: this build's, then each stored edition's.

    Each holds its ``label``, ``detail``, ``key`` and ``to``, the page's path
    from the site's root; ``states`` gives the page's state in each edition (by slug).
    """
    entries = [{"label": live_device, "detail": "", "key": "live", "to": f"{pagename}.html"}]
    for edition in editions:
        state = states[edition.slug]
        entries.append(
            {
                "label": edition.device,
                "detail": choice_detail(state, edition.date),
                "key": edition.slug,
                "to": f"{EDITIONS_URL}/{edition.slug}/{pagename}.html",
            }
        )
    return entries


def choices_for(
    entries: Iterable[Mapping[str, str]],
    pagename: str,
    root: str,
    current: str,
    opens: str | None = None,
) -> list[Choice]:
    """The switch's :class:`Choice` objects on ``pagename``, whose site root is ``root``
    (``""`` in the live edition, ``"../../"`` in a stored one); ``current`` is the key shown,
    ``opens`` the key of the edition the page opens on (:func:`face_of`)."""
    return [
        Choice(
            label=e["label"],
            detail=e["detail"],
            href=relative_url(pagename, root + e["to"]),
            current=e["key"] == current,
            key=e["key"],
            opens=e["key"] == opens,
        )
        for e in entries
    ]


def opening_script(href: str) -> str:
    """The script at the top of a live page's ``<head>`` that opens the page on its face,
    ``href`` (:func:`face_of`), unless the reader chose this build in a switch.

    It runs before the page's styles and scripts are asked for, so a reader who lands on
    the live address loads one page's worth of them. The choice is kept by the site script
    (``amp_lesson.js``) under :data:`EDITION_KEY`; with storage off, the page opens on its face.

    >>> print(opening_script("../editions/h200/chapter/x.html"))
    <script>(function(){var to="../editions/h200/chapter/x.html";try{if(localStorage.getItem("amp-lesson-edition")==="live")return}catch(e){}location.replace(to+location.hash)})()</script>
    """
    to = json.dumps(href).replace("<", "\\u003c")
    key = json.dumps(EDITION_KEY)
    return (
        f'<script>(function(){{var to={to};try{{if(localStorage.getItem({key})==="live")return}}'
        "catch(e){}location.replace(to+location.hash)})()</script>"
    )


EDITION_KEY = "amp-lesson-edition"
"""Where the site script keeps the edition a reader chose (``localStorage``)."""


def face_of(editions: Iterable[Edition], states: Mapping[str, PageState]) -> str | None:
    """The stored edition a live page opens on: the first recorded on a GPU that ran the page
    as it is now (:data:`CURRENT`), or ``None``: then the page opens on this build.

    The book's face is a GPU's run whenever one has run the page. A reader who picks an
    edition in the switch keeps it (the site script remembers the choice), and a page that
    has changed since the recording opens on this build, its switch saying why.

    >>> gpu = Edition(Path("h200"), {"device_type": "cuda"})
    >>> face_of([gpu], {"h200": PageState("p", CURRENT)})
    'h200'
    >>> face_of([gpu], {"h200": PageState("p", PAGE_CHANGED)}) is None
    True
    """
    for edition in editions:
        state = states.get(edition.slug)
        if edition.provenance.get("device_type") == "cuda" and state and state.state == CURRENT:
            return edition.slug
    return None


# -- the Sphinx extension ------------------------------------------------------------------

LIVE_ROOT = "../../"
"""The live site's root, from a stored edition's root (``editions/<slug>/``)."""
STORED = (CURRENT, PAGE_CHANGED, INPUTS_CHANGED)
"""The states in which a page of a stored edition is shown from its recording."""


def in_edition(app: Sphinx) -> bool:
    """Whether this build renders a stored edition (rather than the live book)."""
    return bool(getattr(app.config, "amp_lesson_edition", ""))


def _state(app: Sphinx) -> dict[str, Any]:
    state = getattr(app, "_amp_lesson_edition_state", None)
    if state is None:
        state = json.loads(Path(app.config.amp_lesson_edition).read_text(encoding="utf-8"))
        app._amp_lesson_edition_state = state  # type: ignore[attr-defined]
    return state


def shows_a_run(app: Sphinx, docname: str) -> bool:
    """In a stored edition: whether ``docname`` stands for a run (recorded, or not run)."""
    if not in_edition(app):
        return False
    page = _state(app)["pages"].get(docname)
    return page is not None and page["state"] != NO_CODE


def live_url(app: Sphinx, docname: str, path: str) -> str:
    """The URL of ``path`` (from the live site's root) relative to ``docname`` of this build."""
    return relative_url(docname, (LIVE_ROOT if in_edition(app) else "") + path)


def live_pdf(app: Sphinx) -> bool:
    """Whether the live build printed the PDF (in a stored edition, as the live build said)."""
    if in_edition(app):
        return bool(_state(app).get("pdf"))
    return bool(getattr(app.config, "amp_lesson_pdf_printed", False))


@functools.cache
def _live_device() -> str:
    """What this build executes on, in a word or two: the GPU's model, or "CPU"."""
    from amp_book.cache import gpu_models

    models = gpu_models()
    if os.environ.get("AMP_LESSON_DEVICE", "auto") == "cpu" or not models:
        return "CPU"
    return models[0]


LIVE_INVENTORY = "live"
"""The name of the live build's inventory in an edition's build (``intersphinx_mapping``)."""


def _configure(app: Sphinx, config: Config) -> None:
    """Load the stored editions (live build), or set up the rendering of one (edition build)."""
    if config.amp_lesson_edition:
        state = _state(app)
        config.nb_execution_mode = "off"
        config.amp_lesson_pdf = "no"
        # Links into the pages only the live edition has (the API reference, the authors'
        # guide) resolve through the live build's inventory, relative to this site's root.
        # The book's inventories of other projects' documentation stay (amp_book.apilinks).
        live = {LIVE_INVENTORY: (LIVE_ROOT.rstrip("/"), state["inventory"])}
        config.intersphinx_mapping = {**config.intersphinx_mapping, **live}
        config.intersphinx_disabled_reftypes = []
        # Its pages live under the book's address, in editions/<slug>/ (canonical links, cards).
        if config.html_baseurl:
            base = config.html_baseurl.rstrip("/")
            config.html_baseurl = f"{base}/{EDITIONS_URL}/{state['slug']}/"
            if hasattr(config, "ogp_site_url"):
                config.ogp_site_url = config.html_baseurl
        return
    if not config.amp_lesson_editions.strip():  # none wanted (the live preview)
        app._amp_lesson_editions = []  # type: ignore[attr-defined]
        return
    root = Path(app.confdir) / config.amp_lesson_editions
    config.amp_lesson_editions_key = editions_key(root)
    editions = []
    for folder in find_editions(root):
        try:
            editions.append(load_edition(folder))
        except EditionError as error:
            logger.warning("%s", error, type="amp_lesson", subtype="edition")
    app._amp_lesson_editions = editions  # type: ignore[attr-defined]


def _page_states(app: Sphinx, pagename: str) -> dict[str, PageState]:
    env = app.env
    key = env.metadata.get(pagename, {}).get(KEY_FIELD)
    source = Path(env.doc2path(pagename))
    return {
        e.slug: page_state(e, pagename, source, key)
        for e in getattr(app, "_amp_lesson_editions", [])
    }


def _in_editions(app: Sphinx, docname: str) -> bool:
    from amp_book.theme import section_of

    return section_of(docname, app.config.amp_lesson_reference_pages) is None


def _add_switch(
    app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any
) -> None:
    """Set the edition switch (and, in a stored edition, the banner) above the page."""
    if in_edition(app):
        _edition_page(app, pagename, context, doctree)
        return
    editions = getattr(app, "_amp_lesson_editions", [])
    if not editions or doctree is None or not _in_editions(app, pagename):
        return
    states = _page_states(app, pagename)
    entries = switch_entries(editions, pagename, states, _live_device())
    face = face_of(editions, states) if app.config.amp_lesson_editions_open else None
    choices = choices_for(entries, pagename, "", "live", face)
    context["body"] = under_title(context.get("body", ""), switch_html(choices))
    opens = next((c for c in choices if c.opens), None)
    if opens is not None:
        context["metatags"] = opening_script(opens.href) + context.get("metatags", "")


def _edition_page(app: Sphinx, pagename: str, context: dict[str, Any], doctree: Any) -> None:
    state = _state(app)
    pathto = context.get("pathto")
    if callable(pathto):
        # Search covers the live edition: the search box sends a query to its page.
        def to_live_search(other: str, *args: Any, **kwargs: Any) -> str:
            if other == "search" and not (args and args[0]) and not kwargs.get("resource"):
                return live_url(app, pagename, "search.html")
            return pathto(other, *args, **kwargs)

        context["pathto"] = to_live_search
    page = state["pages"].get(pagename)
    if doctree is None or page is None:
        return
    choices = choices_for(state["switch"][pagename], pagename, LIVE_ROOT, state["slug"])
    live_href = live_url(app, pagename, f"{pagename}.html")
    banner = banner_html(PageState(pagename, page["state"], page["note"]), state, live_href)
    context["body"] = under_title(context.get("body", ""), switch_html(choices) + banner)


def _stale_references_as_text(app: Sphinx, env: Any, node: Any, contnode: Any) -> Any:
    """In a stored edition, a page recorded from an earlier version may point at a target
    that has gone since: its words stay, unlinked (the page says it is an earlier version)."""
    if not in_edition(app):
        return None
    page = _state(app)["pages"].get(node.get("refdoc"))
    if page is None or page["state"] != PAGE_CHANGED:
        return None
    logger.info("%s: %s left unlinked (earlier version)", node.get("refdoc"), node.get("reftarget"))
    return contnode


def _documents_from_the_root(app: Sphinx, env: Any, node: Any, contnode: Any) -> None:
    """In a stored edition, a ``{doc}`` link to a page only the live edition has names it
    from the root, as the live build's inventory does (``../guide/x`` on ``chapter/y``:
    ``guide/x``), so that the inventory finds it."""
    if in_edition(app) and node.get("reftype") == "doc" and node.get("refdoc"):
        from sphinx.util import docname_join

        node["reftarget"] = docname_join(node["refdoc"], node["reftarget"])


PAGE_STATES_ENV = "amp_lesson_edition_pages"
"""The attribute of a stored edition's environment that keeps what each page's switch and
banner said when it was last written."""


def _page_entry(state: Mapping[str, Any], docname: str) -> Any:
    return [state["pages"].get(docname), state["switch"].get(docname)]


def _pages_whose_banner_changed(
    app: Sphinx, env: Any, added: set[str], changed: set[str], removed: set[str]
) -> list[str]:
    """In a stored edition: the pages whose switch or banner changed since they were written
    (a page edited since the recording, say), read and written again; no other page."""
    if not in_edition(app):
        return []
    state = _state(app)
    before = getattr(env, PAGE_STATES_ENV, {})
    return sorted(
        d for d in env.found_docs - added - changed if before.get(d) != _page_entry(state, d)
    )


def _keep_page_entries(app: Sphinx, env: Any) -> None:
    if in_edition(app):
        state = _state(app)
        setattr(env, PAGE_STATES_ENV, {d: _page_entry(state, d) for d in env.found_docs})


PLAN = "plan.json"
"""In :func:`.workdirs.editions_folder`: the editions' builds for the build tool to run after
this build."""


def _render_editions(app: Sphinx, exception: Exception | None) -> None:
    """Write each stored edition's sources, and the plan of their builds (:func:`prepare_edition`).

    The build tool (``tools/build_book.py``) runs those builds once this one has finished,
    each an ordinary Sphinx build of its own, and copies each site into ``editions/<slug>/``.
    """
    if exception is not None or in_edition(app) or app.builder.format != "html":
        return
    editions = getattr(app, "_amp_lesson_editions", [])
    site = Path(app.outdir) / EDITIONS_URL
    plan = [prepare_edition(app, edition) for edition in editions]
    plan_file = workdirs.editions_folder(app.outdir) / PLAN
    if plan:
        write_if_changed(plan_file, json.dumps({"editions": plan}, indent=1).encode())
    else:
        plan_file.unlink(missing_ok=True)
    if site.is_dir():  # an edition no longer stored is no longer shown
        for old in site.iterdir():
            if old.is_dir() and old.name not in {e.slug for e in editions}:
                shutil.rmtree(old)
        if not any(site.iterdir()):
            site.rmdir()


def _forget_output(work: Path, doc: str) -> None:
    """Delete what the edition's last build wrote for ``doc``, a page it no longer has.

    Sphinx leaves a removed page's HTML, source copy and doctree where they were; the site
    copied from that folder would still serve the page (a forward to the authors' guide, say,
    after the guide left the book's navigation).
    """
    for stale in (
        work / "html" / f"{doc}.html",
        work / "doctrees" / f"{doc}.doctree",
        *(work / "html" / "_sources").glob(f"{doc}.*"),
    ):
        stale.unlink(missing_ok=True)


def prepare_edition(app: Sphinx, edition: Edition) -> dict[str, Any]:
    """Write ``edition``'s sources and state; return how the build tool builds and copies it.

    Its sources are written to ``<outdir>.work/editions/<slug>/`` (each file only
    when it changed, so Sphinx reads again only those). The entry names the Sphinx
    command's parts (sources, configuration, output, doctrees, the settings that make it a
    stored edition: nothing executed), whether anything it depends on changed since its last
    build (``stamp``), and where its site goes (``target``).
    """
    env = app.env
    srcdir = Path(app.srcdir)
    work = workdirs.editions_folder(app.outdir) / edition.slug
    tree = work / "tree"
    src = tree / srcdir.name
    docs = sorted(d for d in env.found_docs if _in_editions(app, d))
    kept = set(docs)
    # The sections an edition leaves to the live book keep their entries in its sidebar.
    forwarded = sorted(
        {d for doc in docs for d in env.toctree_includes.get(doc, []) if d not in kept}
    )
    kept.update(forwarded)
    states: dict[str, PageState] = {}
    switch: dict[str, list[dict[str, str]]] = {}
    wanted: dict[Path, bytes] = {}
    live_device = _live_device()
    for doc in docs:
        all_states = _page_states(app, doc)
        state = states[doc] = all_states[edition.slug]
        switch[doc] = switch_entries(app._amp_lesson_editions, doc, all_states, live_device)
        if state.state in STORED:
            text = json.dumps(edition.notebook(doc), ensure_ascii=False)
            wanted[Path(f"{doc}.ipynb")] = text.encode()
        elif state.state in (NOT_RUN, NOT_RECORDED):
            title = env.titles[doc].astext() if doc in env.titles else doc
            wanted[Path(f"{doc}.md")] = stub_page(title, state, edition.device).encode()
        else:
            source = Path(env.doc2path(doc))
            text = drop_toctree_entries(source.read_text(encoding="utf-8"), doc, kept.__contains__)
            wanted[source.relative_to(srcdir)] = text.encode()
    for doc in forwarded:
        title = env.titles[doc].astext() if doc in env.titles else doc
        live = relative_url(doc, LIVE_ROOT + f"{doc}.html")
        wanted[Path(f"{doc}.md")] = forward_page(title, live).encode()
    for rel, data in wanted.items():
        write_if_changed(src / rel, data)
    if src.is_dir():
        for path in sorted(src.rglob("*"), reverse=True):
            if path.is_file() and path.relative_to(src) not in wanted:
                path.unlink()
            elif path.is_dir() and not any(path.iterdir()):
                path.rmdir()
    # A page the edition no longer has, pruned now or by an earlier build, leaves no output.
    sources = {rel.with_suffix("").as_posix() for rel in wanted}
    for doctree in sorted((work / "doctrees").rglob("*.doctree")):
        doc = doctree.relative_to(work / "doctrees").with_suffix("").as_posix()
        if doc not in sources:
            _forget_output(work, doc)
    # The pages' relative includes (``../../src/...``) find what lies beside the sources.
    for entry in sorted(srcdir.parent.iterdir()):
        link = tree / entry.name
        if entry.name == srcdir.name or entry.name.startswith(".") or link.is_symlink():
            continue
        link.symlink_to(entry.resolve(), target_is_directory=entry.is_dir())
    state_file = work / "state.json"
    state_data = {
        "slug": edition.slug,
        "device": edition.device,
        "date": edition.date,
        "describe": edition.describe(),
        "inventory": str(Path(app.outdir) / "objects.inv"),
        "pdf": live_pdf(app),
        "pages": {d: {"state": s.state, "note": s.note} for d, s in states.items()},
        "switch": switch,
    }
    write_if_changed(state_file, json.dumps(state_data, indent=1).encode())
    from amp_book.cache import EXTENSION_DIR, source_hash
    from amp_book.edition_outputs import INCLUDE_ROOT

    # the lesson's source too: a page's literalinclude shows it as it is now
    stamp = source_hash(
        [src, state_file, EXTENSION_DIR, Path(app.confdir) / "conf.py",
         Path(app.confdir) / "_static", Path(app.outdir) / "objects.inv",
         srcdir.parent / INCLUDE_ROOT]
    ) + app.config.amp_lesson_environment_key  # fmt: skip
    html_dir = work / "html"
    stamp_file = work / "stamp"
    if not (stamp_file.is_file() and stamp_file.read_text() == stamp):
        stamp_file.unlink(missing_ok=True)  # stale until the build tool builds it again
    return {
        "device": edition.device,
        "folder": str(edition.folder),
        "src": str(src),
        "confdir": str(app.confdir),
        "html": str(html_dir),
        "doctrees": str(work / "doctrees"),
        "settings": {
            "amp_lesson_edition": str(state_file),
            "nb_execution_mode": "off",
            "extensions": ",".join([*app.config.extensions, "sphinx.ext.intersphinx"]),
        },
        "stamp": stamp,
        "stamp_file": str(stamp_file),
        "target": str(Path(app.outdir) / EDITIONS_URL / edition.slug),
        # the live build's own: one sitemap and one 404 page for the whole site
        "skip": [
            ".doctrees",
            ".buildinfo",
            "search.html",
            "searchindex.js",
            "sitemap.xml",
            "404.html",
        ],
    }


_DESIGN_ICON = re.compile(
    r'<svg version="1\.1" width="[\d.]+em" height="[\d.]+em" '
    r'class="sd-octicon sd-octicon-[\w-]+(?: [\w-]+)*" viewBox="0 0 \d+ \d+" '
    r'aria-hidden="true"><path d="[\w\s.,-]+"></path></svg>'
)


def only_checked_markup(app: Sphinx, doctree: Any, docname: str) -> None:
    """In a stored edition's build, let no raw HTML reach a page but what was checked.

    Outputs were checked and written again before the build read them
    (:func:`.edition_outputs.shown`); whatever else becomes raw HTML on the way (a stored
    page's markdown read by MyST in a way the check did not foresee) is refused here, on
    the doctree, with a warning naming the page, and left out of the page. The book's own
    directives' markup, written from computed data, passes.
    """
    from docutils import nodes

    from amp_book.edition_outputs import clean_markup
    from amp_book.playgrounds import OWN_MARKUP

    if not in_edition(app):
        return
    page = _state(app)["pages"].get(docname)
    if page is None or page["state"] not in STORED:  # the book's own sources, not a recording
        return
    for node in list(doctree.findall(nodes.raw)):
        if "html" not in node.get("format", "").split() or node.get(OWN_MARKUP):
            continue
        if _DESIGN_ICON.fullmatch(node.astext()):  # sphinx-design's, on a dropdown
            continue
        text = node.astext()
        written, problems = clean_markup(text)
        if problems or written != text:
            why = "; ".join(problems) or "it is not the markup that was checked"
            logger.warning(
                "%s: stored edition: raw HTML refused and left out of the page (%s): %r",
                docname,
                why[:200],
                text[:80],
                location=node,
                type="amp_lesson",
                subtype="edition",
            )
            node.replace_self(nodes.inline(text="[left out: markup the book does not show]"))


def setup(app: Sphinx) -> dict[str, bool]:
    # The folder of stored editions, from the configuration folder ("_editions").
    # (What it holds is in amp_lesson_editions_key: naming another folder alone changes nothing.)
    app.add_config_value("amp_lesson_editions", "_editions", "", types=[str])
    # A new recording changes every page's switch: every page is written again.
    app.add_config_value("amp_lesson_editions_key", "", "html", types=[str])
    # Whether a live page a GPU has run as it stands opens on that run (face_of); else
    # this build is the book's face and the switch leads to the GPU's run.
    app.add_config_value("amp_lesson_editions_open", True, "html", types=[bool])
    # Set (to the rendering's state file) only in the build of a stored edition.
    app.add_config_value("amp_lesson_edition", "", "env", types=[str])
    app.connect("config-inited", _configure, priority=60)
    app.connect("html-page-context", _add_switch, priority=600)
    app.connect("env-get-outdated", _pages_whose_banner_changed)
    app.connect("env-updated", _keep_page_entries)
    app.connect("missing-reference", _documents_from_the_root, priority=400)
    app.connect("missing-reference", _stale_references_as_text, priority=900)
    app.connect("build-finished", _render_editions, priority=960)
    app.connect("doctree-resolved", only_checked_markup, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
