"""Each page of a stored edition against this build, and the line under its title.

**Rendering** (every build, at its end): each stored edition is checked
(:func:`.store.load_edition`) and its sources written for a second site under
``editions/<device>/``, from the stored notebooks, executing nothing; the build tool
builds it once this build has finished (``tools/build_book.py``). A page whose code still
runs as recorded (:mod:`.ran`) shows today's prose with the recorded outputs, and the live
page opens on it; a retired one shows the recording as it was, and the live page opens on
this build's run. Each says so in the words it adds to its provenance line, the other run
one click away. The API reference and the authors' pages (``amp_lesson_reference_pages``)
run the same everywhere and stay in the live edition, which links into them.
"""

from __future__ import annotations

import functools
import html
import importlib.metadata
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

from amp_book import pages, workdirs
from amp_book.config import book_config, reread
from amp_book.edition import ran, store
from amp_book.edition.store import (
    CURRENT,
    EARLIER,
    EDITIONS_URL,
    FAILED,
    NO_CODE,
    NOT_RECORDED,
    NOT_RUN,
    Edition,
    EditionError,
    editions_key,
    find_editions,
    load_edition,
)

logger = logging.getLogger(__name__)

CHECKS_MEMO = "checked.txt"
"""In the editions' work folder: the stored notebooks that passed the check (see
:func:`.store.remember_checks`)."""


@dataclass(frozen=True)
class PageState:
    """What a page of a stored edition is against this build's sources."""

    docname: str
    state: str
    note: str = ""


@functools.lru_cache(maxsize=256)
def _read(path: str, stamp: tuple[int, int]) -> pages.Page:
    return pages.read_page(path)


def read_now(path: Path) -> pages.Page | None:
    """The page at ``path`` as it is now (read again only when it changed); ``None`` if gone."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return _read(str(path), (stat.st_mtime_ns, stat.st_size))


@functools.cache
def torch_now() -> str:
    """The torch release this build runs."""
    return importlib.metadata.version("torch")


def page_state(
    edition: Edition, docname: str, page: pages.Page | Callable[[], pages.Page | None] | None,
    root: Path, torch: str, package: Path | None = None,
) -> PageState:  # fmt: skip
    """Whether ``edition``'s run of ``docname`` is the run of the page as it is now.

    ``page`` is the page now (``None``: it is gone), or what reads it when it is needed;
    ``root`` the folder the recording's paths start from (the repository), ``torch`` this
    build's torch, ``package`` the lesson's folder (default: where it is installed). A page
    whose code, and every function, constant and file its run ran (:func:`.ran.changes`),
    are as recorded, and whose prose shows no glued value the run did not glue, is
    :data:`CURRENT`.
    """
    stored = edition.pages.get(docname)
    if stored is not None and stored.status == FAILED:
        return PageState(docname, NOT_RUN, str(stored.reason))
    if stored is not None and not stored.ran:
        return PageState(docname, EARLIER, "recorded before the book noted what a run ran")
    now = page() if callable(page) else page
    if stored is None:
        if now is None or not now.code_cells:
            return PageState(docname, NO_CODE)
        return PageState(docname, NOT_RECORDED, f"the page is newer than the run of {edition.date}")
    if now is None:
        return PageState(docname, EARLIER, "the page has gone")
    found = ran.changes(stored.ran or {}, root, [c.source for c in now.code_cells], torch, package)
    found += [f"glued {n}" for n in sorted(ran.glued_names(now.markdown) - edition.glued(docname))]
    return PageState(docname, EARLIER, "; ".join(found)) if found else PageState(docname, CURRENT)


# -- the line under the title ----------------------------------------------------------------

_PROVENANCE = re.compile(r'(<p class="amp-provenance"[^>]*>)(.*?)(</p>)', re.DOTALL)
_TITLE_END = re.compile(r"</h1>")


def onto_provenance(body: str, words: str, state: str = "", recorded: bool = False) -> str:
    """``body`` with ``words`` (HTML) at the end of the page's provenance line, or, without
    one, in a line of their own under the title, marked with the page's ``state``; a
    recorded page's line says so.

    >>> onto_provenance('<h1>T</h1><p class="amp-provenance">Ran on CPU</p>', " · <a>x</a>")
    '<h1>T</h1><p class="amp-provenance">Ran on CPU<span class="amp-edition-line"> · <a>x</a></span></p>'
    >>> onto_provenance('<h1>T</h1><p class="amp-provenance">Ran on A</p>', "", "current", True)
    '<h1>T</h1><p class="amp-provenance" data-edition-state="current">Recorded on A</p>'
    >>> onto_provenance("<h1>T</h1><p>Text</p>", "Not run")
    '<h1>T</h1><p class="amp-provenance"><span class="amp-edition-line">Not run</span></p><p>Text</p>'
    """
    mark = f' data-edition-state="{html.escape(state)}"' if state else ""
    words = f'<span class="amp-edition-line">{words}</span>' if words else ""
    found = _PROVENANCE.search(body)
    if found:
        text = found.group(2)
        if recorded and text.startswith("Ran on "):
            text = "Recorded on " + text[len("Ran on ") :]
        opening = found.group(1)[:-1] + mark + ">"
        return body[: found.start()] + opening + text + words + "</p>" + body[found.end() :]
    line = f'<p class="amp-provenance"{mark}>{words}</p>'
    title = _TITLE_END.search(body)
    return body[: title.end()] + line + body[title.end() :] if title else line + body


def _link(href: str, key: str, words: str) -> str:
    return (
        f'<a class="amp-edition-choice" href="{html.escape(href)}" '
        f'data-edition="{html.escape(key)}">{words}</a>'
    )


def live_words(state: PageState, edition: Mapping[str, str], href: str) -> str:
    """What a live page adds to its provenance line about ``edition``'s run of it (HTML).

    >>> e = {"slug": "h200", "device": "NVIDIA H200", "date": "2026-12-04", "torch": "2.13.0"}
    >>> print(live_words(PageState("p", CURRENT), e, "e/p.html"))
     · <a class="amp-edition-choice" href="e/p.html" data-edition="h200">recorded on NVIDIA H200</a>, 2026-12-04, torch 2.13.0
    """
    device, date = html.escape(edition["device"]), html.escape(edition["date"])
    link = functools.partial(_link, href, edition["slug"])
    if state.state == CURRENT:
        torch = html.escape(edition["torch"])
        return f" · {link(f'recorded on {device}')}, {date}, torch {torch}"
    if state.state == EARLIER:
        return f" · the {link(f'run recorded on {device}')} ({date}) is from an earlier version"
    if state.state == NOT_RUN:
        return f" · not recorded on {device}: {html.escape(state.note.rstrip('.'))}"
    return ""


def recorded_words(state: PageState, edition: Mapping[str, str], href: str) -> str:
    """What a page of the stored edition adds to its provenance line: how its run stands
    against the page now, and this build's run one click away (HTML)."""
    device, live = html.escape(edition["device"]), html.escape(edition["live_device"])
    link = _link(href, "live", f"run live on {live}")
    if state.state == CURRENT:
        return f" · {link}"
    if state.state == EARLIER:
        return f" · from an earlier version of this page · {_link(href, 'live', 'the page now')}"
    if state.state in (NOT_RUN, NOT_RECORDED):
        why = html.escape(state.note.rstrip("."))
        return f"Not recorded on {device}: {why} · {_link(href, 'live', 'the page now')}"
    return _link(href, "live", "this page live") if state.state == NO_CODE else ""


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


def stub_page(title: str) -> str:
    """The source that stands in for a page the device did not run: its title (the line
    under it says why, as text, :func:`recorded_words`)."""
    return f"# {title}\n"


def with_outputs(text: str, recorded: Mapping[str, Any]) -> dict[str, Any]:
    """The page whose source is ``text``, as a notebook whose code cells hold the outputs of
    ``recorded``'s, in order (the same code, as :func:`.ran.changes` found)."""
    from myst_nb.core.read import read_myst_markdown_notebook

    notebook = read_myst_markdown_notebook(text)
    outputs = iter([c for c in recorded["cells"] if c.get("cell_type") == "code"])
    for cell in notebook.cells:
        cell.pop("id", None)
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = next(outputs, {}).get("outputs", []), None
    for key in ("kernelspec", "language_info"):
        if key in recorded.get("metadata", {}):
            notebook.metadata[key] = recorded["metadata"][key]
    notebook.nbformat, notebook.nbformat_minor = 4, 4
    return json.loads(json.dumps(notebook))


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

    The book's face is a GPU's run whenever one has run the page as it is. A reader who
    picks a run keeps it (the site script remembers the choice), and a page whose code has
    changed since the recording opens on this build, its line saying so.

    >>> gpu = Edition(Path("h200"), {"device_type": "cuda"})
    >>> face_of([gpu], {"h200": PageState("p", CURRENT)})
    'h200'
    >>> face_of([gpu], {"h200": PageState("p", EARLIER)}) is None
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
STORED = (CURRENT, EARLIER)
"""The states in which a page of a stored edition is shown from its recording."""


def in_edition(app: Sphinx) -> bool:
    """Whether this build renders a stored edition (rather than the live book)."""
    return bool(getattr(app.config, "amp_lesson_edition", ""))


def _state(app: Sphinx) -> dict[str, Any]:
    state = getattr(app, "_amp_lesson_edition_state", None)
    if state is None:
        state = json.loads(Path(book_config(app).edition).read_text(encoding="utf-8"))
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
    if book_config(app).edition:
        state = _state(app)
        config.nb_execution_mode = "off"
        config.amp_lesson_pdf = "no"
        reread(app)
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
    if not book_config(app).editions.strip():  # none wanted (the live preview)
        app._amp_lesson_editions = []  # type: ignore[attr-defined]
        return
    root = Path(app.confdir) / book_config(app).editions
    config.amp_lesson_editions_key = editions_key(root)
    memo = workdirs.editions_folder(app.outdir) / CHECKS_MEMO
    memo.parent.mkdir(parents=True, exist_ok=True)
    store.remember_checks(memo)
    editions = []
    for folder in find_editions(root):
        try:
            editions.append(load_edition(folder))
        except EditionError as error:
            logger.warning("%s", error, type="amp_lesson", subtype="edition")
    app._amp_lesson_editions = editions  # type: ignore[attr-defined]


def _page_states(app: Sphinx, pagename: str) -> dict[str, PageState]:
    """The page's state in each stored edition, judged once a build (its outdated pages,
    its line, the edition's sources and the kept entries all ask; the sources stand still)."""
    known = app.__dict__.setdefault("_amp_lesson_page_states", {})
    if pagename not in known:
        page = functools.partial(read_now, Path(app.env.doc2path(pagename)))
        root, torch = Path(app.srcdir).parent, torch_now()
        known[pagename] = {
            e.slug: page_state(e, pagename, page, root, torch)
            for e in getattr(app, "_amp_lesson_editions", [])
        }
    return known[pagename]


def _summary(edition: Edition) -> dict[str, str]:
    return {
        "slug": edition.slug,
        "device": edition.device,
        "date": edition.date,
        "torch": ran.release(str(edition.provenance["torch_version"])),
        "live_device": _live_device(),
    }


def _in_editions(app: Sphinx, docname: str) -> bool:
    from amp_book.theme import section_of

    return section_of(docname, book_config(app).reference_pages) is None


def _add_line(
    app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any
) -> None:
    """Add to the page's provenance line where its other run is, and how it stands."""
    if in_edition(app):
        _edition_page(app, pagename, context, doctree)
        return
    editions = getattr(app, "_amp_lesson_editions", [])
    if not editions or doctree is None or not _in_editions(app, pagename):
        return
    states = _page_states(app, pagename)
    words = ""
    for edition in editions:
        href = relative_url(pagename, f"{EDITIONS_URL}/{edition.slug}/{pagename}.html")
        words += live_words(states[edition.slug], _summary(edition), href)
    context["body"] = onto_provenance(context.get("body", ""), words)
    face = face_of(editions, states) if book_config(app).editions_open else None
    if face is not None:
        href = relative_url(pagename, f"{EDITIONS_URL}/{face}/{pagename}.html")
        context["metatags"] = opening_script(href) + context.get("metatags", "")


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
    words = recorded_words(
        PageState(pagename, page["state"], page["note"]),
        state,
        live_url(app, pagename, f"{pagename}.html"),
    )
    body = context.get("body", "")
    context["body"] = onto_provenance(body, words, page["state"], page["state"] in STORED)


def _stale_references_as_text(app: Sphinx, env: Any, node: Any, contnode: Any) -> Any:
    """In a stored edition, a page recorded from an earlier version may point at a target
    that has gone since: its words stay, unlinked (the page says it is an earlier version)."""
    if not in_edition(app):
        return None
    page = _state(app)["pages"].get(node.get("refdoc"))
    if page is None or page["state"] != EARLIER:
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
"""The attribute of the environment that keeps each page's state, in each edition, when it
was last written."""


def _entries(app: Sphinx, env: Any) -> dict[str, Any]:
    if in_edition(app):
        return {d: _state(app)["pages"].get(d) for d in env.found_docs}
    if not getattr(app, "_amp_lesson_editions", []):
        return {}
    return {
        d: {k: [s.state, s.note] for k, s in _page_states(app, d).items()}
        for d in env.found_docs
        if _in_editions(app, d)
    }


def _pages_whose_state_changed(
    app: Sphinx, env: Any, added: set[str], changed: set[str], removed: set[str]
) -> list[str]:
    """The pages whose recording's state changed since they were written (a function their
    run ran was edited, say), read and written again; no other page."""
    before, now = getattr(env, PAGE_STATES_ENV, {}), _entries(app, env)
    return sorted(d for d in env.found_docs - added - changed if before.get(d) != now.get(d))


def _keep_page_entries(app: Sphinx, env: Any) -> None:
    setattr(env, PAGE_STATES_ENV, _entries(app, env))


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


def _edition_sources(
    app: Sphinx, edition: Edition, docs: list[str], kept: set[str], forwarded: list[str]
) -> tuple[dict[str, PageState], dict[Path, bytes]]:
    """Each page's state in ``edition`` and the source its build reads: the recording
    (with today's prose where it is current), a stub, or today's page; a forwarding page for
    each section the edition leaves to the live book."""
    env = app.env
    srcdir = Path(app.srcdir)
    states: dict[str, PageState] = {}
    wanted: dict[Path, bytes] = {}
    for doc in docs:
        state = states[doc] = _page_states(app, doc)[edition.slug]
        source = Path(env.doc2path(doc))
        if state.state in STORED:
            notebook = edition.notebook(doc)
            if state.state == CURRENT:  # today's prose, the recorded outputs
                notebook = with_outputs(source.read_text(encoding="utf-8"), notebook)
            text = json.dumps(notebook, ensure_ascii=False)
            wanted[Path(f"{doc}.ipynb")] = text.encode()
        elif state.state in (NOT_RUN, NOT_RECORDED):
            title = env.titles[doc].astext() if doc in env.titles else doc
            wanted[Path(f"{doc}.md")] = stub_page(title).encode()
        else:
            text = drop_toctree_entries(source.read_text(encoding="utf-8"), doc, kept.__contains__)
            wanted[source.relative_to(srcdir)] = text.encode()
    for doc in forwarded:
        title = env.titles[doc].astext() if doc in env.titles else doc
        live = relative_url(doc, LIVE_ROOT + f"{doc}.html")
        wanted[Path(f"{doc}.md")] = forward_page(title, live).encode()
    return states, wanted


def _put_in_place(src: Path, wanted: dict[Path, bytes], work: Path) -> None:
    """Write each source that changed, remove those the edition no longer has, and the
    output of a page it no longer has."""
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


def _link_what_lies_beside(srcdir: Path, tree: Path) -> None:
    """The pages' relative includes (``../../src/...``) find what lies beside the sources."""
    for entry in sorted(srcdir.parent.iterdir()):
        link = tree / entry.name
        if entry.name == srcdir.name or entry.name.startswith(".") or link.is_symlink():
            continue
        link.symlink_to(entry.resolve(), target_is_directory=entry.is_dir())


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
    states, wanted = _edition_sources(app, edition, docs, kept, forwarded)
    _put_in_place(src, wanted, work)
    _link_what_lies_beside(srcdir, tree)
    state_file = work / "state.json"
    state_data = {
        **_summary(edition),
        "inventory": str(Path(app.outdir) / "objects.inv"),
        "pdf": live_pdf(app),
        "pages": {d: {"state": s.state, "note": s.note} for d, s in states.items()},
    }
    write_if_changed(state_file, json.dumps(state_data, indent=1).encode())
    from amp_book.cache import EXTENSION_DIR, source_hash
    from amp_book.edition.outputs import INCLUDE_ROOT

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
    (:func:`.outputs.shown`); whatever else becomes raw HTML on the way (a stored
    page's markdown read by MyST in a way the check did not foresee) is refused here, on
    the doctree, with a warning naming the page, and left out of the page. The book's own
    directives' markup, written from computed data, passes.
    """
    from docutils import nodes

    from amp_book.edition.outputs import clean_markup
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
    # The settings (amp_lesson_editions, _editions_open, _edition, _editions_key) are
    # amp_book.config's; what a folder holds is in amp_lesson_editions_key, so naming another
    # folder alone changes nothing.
    app.connect("config-inited", _configure, priority=60)
    app.connect("html-page-context", _add_line, priority=600)
    app.connect("env-get-outdated", _pages_whose_state_changed)
    app.connect("env-updated", _keep_page_entries)
    app.connect("missing-reference", _documents_from_the_root, priority=400)
    app.connect("missing-reference", _stale_references_as_text, priority=900)
    app.connect("build-finished", _render_editions, priority=960)
    app.connect("doctree-resolved", only_checked_markup, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
