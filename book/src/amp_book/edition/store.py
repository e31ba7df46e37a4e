"""A stored edition of the book: its format, loading it, and recording one.

**Recording** (:func:`record`, run by ``nox -s gpu-edition`` or
``tools/record_edition.py`` after a build on that machine): each page's
executed notebook, as the build wrote it (outputs, figures and glued values,
the claims' chosen wordings among them), is stored gzipped in
``docs/_editions/<device>/``, with ``edition.json``: the run's provenance
(device, driver, CUDA, torch, ``amp_lesson``, Python, date) and, per page,
the SHA-256 of its source and the digests of what its run ran (:mod:`.ran`). A page
whose cells failed is stored as such, with why. :func:`load_edition` reads one back and
refuses one whose provenance is incomplete or whose text fields are not plain, short
text. Rendering it beside the live book is :mod:`.render`'s.
"""

from __future__ import annotations

import ast
import contextlib
import datetime as _dt
import fnmatch
import functools
import gzip
import hashlib
import json
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = "amp_lesson.edition/2"
SCHEMAS = ("amp_lesson.edition/1", SCHEMA)
"""The schemas read: the first kept no record of what a page ran (its pages are earlier ones)."""
MANIFEST = "edition.json"
"""The file in an edition's folder that holds its provenance and its pages."""
EDITIONS_URL = "editions"
"""Where the stored editions are written in the built site: ``editions/<slug>/``."""
PROVENANCE_FIELDS = (
    "device_type",
    "device_name",
    "torch_version",
    "amp_lesson_version",
    "python_version",
    "recorded",
)
"""What every edition's provenance must name (a non-empty string each)."""
CUDA_FIELDS = ("driver_version", "cuda_version", "compute_capability")
"""What an edition recorded on a CUDA device must name besides."""
RECORDED, FAILED = "recorded", "failed"
PAGE_FIELDS = {
    RECORDED: ("source_sha256", "executed_on", "file"),
    FAILED: ("source_sha256", "reason"),
}
"""What each page's entry must name, by its status."""

MAX_FIELD = 200
"""The longest provenance field, page name or file name (characters), one line each."""
MAX_REASON = 2000
"""The longest reason a page was not run (characters)."""
_PLAIN = re.compile(r"[^\x00-\x1f\x7f]*")
_DOCNAME = re.compile(r"[A-Za-z0-9_-]+(?:/[A-Za-z0-9_-]+)*")

CURRENT = "current"
EARLIER = "earlier"
NOT_RUN = "not-run"
NOT_RECORDED = "not-recorded"
NO_CODE = "no-code"
STATES = (CURRENT, EARLIER, NOT_RUN, NOT_RECORDED, NO_CODE)
"""What a page of a stored edition can be, against this build's sources
(:func:`.render.page_state`): its code runs as recorded, or not (an earlier version)."""


class EditionError(ValueError):
    """An edition that cannot be recorded or shown: it says which and why."""


# -- the stored edition --------------------------------------------------------------------


@dataclass(frozen=True)
class StoredPage:
    """One page's entry in ``edition.json``."""

    docname: str
    status: str
    source_sha256: str
    executed_on: str | None = None
    file: str | None = None
    reason: str | None = None
    ran: dict[str, Any] | None = None
    """The digests of what the page's run ran (:func:`.ran.witness`)."""


@dataclass(frozen=True)
class Edition:
    """A stored edition: its folder, provenance and pages (see :func:`load_edition`)."""

    folder: Path
    provenance: dict[str, Any]
    pages: dict[str, StoredPage] = field(default_factory=dict)

    @property
    def slug(self) -> str:
        """The edition's name in URLs: its folder's name."""
        return self.folder.name

    @property
    def device(self) -> str:
        """The device the pages ran on, as torch names it ("NVIDIA H200")."""
        return str(self.provenance["device_name"])

    @property
    def date(self) -> str:
        """The day it was recorded (ISO, UTC)."""
        return str(self.provenance["recorded"])[:10]

    def describe(self) -> str:
        """The run in one line: device, driver, CUDA, torch, package, Python, date."""
        p = self.provenance
        parts = [p["device_name"]]
        if p["device_type"] == "cuda":
            parts += [f"driver {p['driver_version']}", f"CUDA {p['cuda_version']}"]
        parts += [
            f"torch {p['torch_version']}",
            f"amp_lesson {p['amp_lesson_version']}",
            f"Python {p['python_version']}",
            f"recorded {self.date}",
        ]
        return " · ".join(parts)

    def glued(self, docname: str) -> set[str]:
        """The names of the values the run of ``docname`` glued."""
        return _glued(self.folder, docname, self.pages[docname].file or "")

    def notebook(self, docname: str) -> dict[str, Any]:
        """The stored notebook of ``docname`` (a recorded page), as a JSON object, read and
        checked as :func:`load_edition` does (:mod:`.outputs`)."""
        page = self.pages[docname]
        if page.status != RECORDED or page.file is None:
            raise KeyError(f"{docname} was not recorded in {self.folder}: {page.reason}")
        from amp_book.edition.outputs import shown

        return shown(_checked_notebook(self.folder, page))


@functools.lru_cache(maxsize=128)
def _glued(folder: Path, docname: str, file: str) -> set[str]:
    from amp_book.edition import outputs

    path = outputs.stored_path(folder, file)
    return {
        o.get("metadata", {}).get("scrapbook", {}).get("name")
        for c in outputs.read_notebook(path).get("cells", [])
        for o in c.get("outputs", [])
    } - {None}


_checked_clean: set[str] = set()
"""Stored notebooks (:func:`_check_key`) that passed :func:`.outputs.notebook_problems`."""
_memo_file: list[Path | None] = [None]


def remember_checks(memo: Path | None) -> None:
    """Keep the notebooks that pass the check in ``memo`` (a file of the build's own), and
    take those it lists as checked: a build that reads the same stored bytes with the same
    checker does not check them again (1 to 2 s of every build that shows an edition).

    >>> remember_checks(None)
    """
    _memo_file[0] = memo
    if memo is not None and memo.is_file():
        _checked_clean.update(memo.read_text(encoding="utf-8").split())


def _check_key(path: Path, docname: str) -> str:
    """What a check's verdict depends on: the file's bytes, the page's name and the checker."""
    from amp_book.edition import outputs

    digest = hashlib.sha256(Path(outputs.__file__).read_bytes())
    digest.update(docname.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _checked_notebook(folder: Path, page: StoredPage) -> dict[str, Any]:
    """The stored notebook of ``page``, refused (:class:`EditionError`, naming the page and
    the file) if it is not one the book would show (:mod:`.outputs`)."""
    where = f"{folder / MANIFEST}: page {page.docname}"
    try:
        return _read_checked(folder, page, where)
    except EditionError:
        raise
    except Exception as error:  # noqa: BLE001 (whatever a hand-made file makes a reader raise)
        raise EditionError(f"{where}: refused, {type(error).__name__}: {error}") from None


def _read_checked(folder: Path, page: StoredPage, where: str) -> dict[str, Any]:
    from amp_book.edition import outputs

    try:
        path = outputs.stored_path(folder, page.file)
    except ValueError as error:
        raise EditionError(f"{where}: refused, {error}") from None
    if not path.is_file():
        raise EditionError(f"{where}: {page.file} is missing")
    try:
        notebook = outputs.read_notebook(path)
    except ValueError as error:
        raise EditionError(f"{path} (page {page.docname}): refused, {error}") from None
    seen = _check_key(path, page.docname)
    if seen in _checked_clean:
        pass  # these very bytes passed this very check before
    elif problems := outputs.notebook_problems(notebook, page.docname):
        shown = "; ".join(problems[:5]) + ("; ..." if len(problems) > 5 else "")
        raise EditionError(
            f"{path} (page {page.docname}): refused, it holds what the book does not show: {shown}"
        )
    else:
        _checked_clean.add(seen)
        if _memo_file[0] is not None:
            with contextlib.suppress(OSError), open(_memo_file[0], "a", encoding="utf-8") as f:
                f.write(seen + "\n")
    summary = outputs.summary_path(path)
    if summary.is_symlink() or not summary.is_file():
        raise EditionError(
            f"{summary} (page {page.docname}): missing (or a link); the recorder writes it "
            "beside the notebook, so that a pull request shows what a recording changed"
        )
    with open(summary, "rb") as f:
        written = f.read(outputs.MAX_NOTEBOOK_BYTES + 1)
    if written != outputs.summary(notebook).encode():
        raise EditionError(
            f"{summary} (page {page.docname}): refused, it is not the summary of {path.name} "
            "(one of the two was changed by hand); record the edition again"
        )
    return notebook


def write_summaries(folder: str | Path) -> list[Path]:
    """Write the plain-text summary beside each stored notebook of the edition in
    ``folder`` (the recorder does; this is for an edition recorded before summaries)."""
    from amp_book.edition import outputs

    written = []
    for path in sorted(Path(folder).rglob("*" + outputs.NOTEBOOK_SUFFIX)):
        target = outputs.summary_path(path)
        target.write_text(outputs.summary(outputs.read_notebook(path)), encoding="utf-8")
        written.append(target)
    return written


def _missing(record: Mapping[str, Any], names: Iterable[str]) -> list[str]:
    return [
        n for n in names if not isinstance(record.get(n), str) or not str(record.get(n)).strip()
    ]


def check_provenance(provenance: Any) -> list[str]:
    """What ``provenance`` lacks (field names, in order); ``[]`` when it is complete.

    Every edition names the fields of :data:`PROVENANCE_FIELDS`; one recorded on
    a CUDA device names :data:`CUDA_FIELDS` too. ``recorded`` must be an ISO date.

    >>> check_provenance({"device_type": "cuda", "device_name": "NVIDIA H200"})
    ['torch_version', 'amp_lesson_version', 'python_version', 'recorded', 'driver_version', 'cuda_version', 'compute_capability']
    """
    if not isinstance(provenance, Mapping):
        return list(PROVENANCE_FIELDS)
    missing = _missing(provenance, PROVENANCE_FIELDS)
    if provenance.get("device_type") == "cuda":
        missing += _missing(provenance, CUDA_FIELDS)
    elif "device_type" not in missing and provenance["device_type"] != "cpu":
        missing.append("device_type (cpu or cuda)")
    if "recorded" not in missing:
        try:
            _dt.date.fromisoformat(str(provenance["recorded"])[:10])
        except ValueError:
            missing.append("recorded (an ISO date)")
    return missing


def load_edition(folder: str | Path) -> Edition:
    """Read and check the edition stored in ``folder``.

    Raises
    ------
    EditionError
        If ``folder`` holds no ``edition.json``, or one of another schema; if
        the provenance is incomplete (:func:`check_provenance`); if a page's
        entry lacks a field its status needs, or its notebook is missing.
    """
    from amp_book.edition.outputs import MAX_MANIFEST_BYTES

    folder = Path(folder)
    manifest = folder / MANIFEST
    if not manifest.is_file():
        raise EditionError(f"{folder}: no {MANIFEST}; record it with `nox -s gpu-edition`")
    if manifest.is_symlink():
        raise EditionError(f"{manifest}: refused, a link (an edition's files lie in its folder)")
    if manifest.stat().st_size > MAX_MANIFEST_BYTES:
        raise EditionError(f"{manifest}: refused, larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as error:
        raise EditionError(f"{manifest}: not valid JSON ({type(error).__name__})") from None
    if not isinstance(data, dict) or data.get("schema") not in SCHEMAS:
        raise EditionError(f"{manifest}: schema must be one of {', '.join(SCHEMAS)}")
    missing = check_provenance(data.get("provenance"))
    if missing:
        raise EditionError(
            f"{manifest}: refused, its provenance is incomplete: no {', '.join(missing)}; "
            "an edition says what ran it, or it is not shown (record it again)"
        )
    pages: dict[str, StoredPage] = {}
    entries = data.get("pages")
    if not isinstance(entries, dict) or not entries:
        raise EditionError(f"{manifest}: pages must be an object naming at least one page")
    if problem := not_plain(data["provenance"], PROVENANCE_FIELDS + CUDA_FIELDS, MAX_FIELD):
        raise EditionError(f"{manifest}: refused, provenance {problem}")
    for docname, entry in sorted(entries.items()):
        if not _DOCNAME.fullmatch(docname) or len(docname) > MAX_FIELD:
            raise EditionError(
                f"{manifest}: refused, page {docname[:80]!r}: a page's name is letters, digits, "
                f"_, - and / only, at most {MAX_FIELD} characters"
            )
        status = entry.get("status") if isinstance(entry, dict) else None
        if status not in PAGE_FIELDS:
            raise EditionError(f"{manifest}: page {docname}: status must be recorded or failed")
        limits = {"reason": MAX_REASON, "executed_on": MAX_FIELD}
        if problem := not_plain(entry, limits, MAX_FIELD, lines=("reason",)):
            raise EditionError(f"{manifest}: refused, page {docname}: {problem}")
        if entry.get("ran") is not None and not _digests(entry["ran"]):
            raise EditionError(f"{manifest}: refused, page {docname}: ran is not digests")
        lacks = _missing(entry, PAGE_FIELDS[status])
        if lacks:
            raise EditionError(
                f"{manifest}: refused, page {docname} ({status}) has no {', '.join(lacks)}"
            )
        known = {k: entry.get(k) for k in StoredPage.__dataclass_fields__ if k != "docname"}
        page = StoredPage(docname=docname, **known)
        if status == RECORDED:
            _checked_notebook(folder, page)  # refused now, not half-way through a build
        pages[docname] = page
    return Edition(folder, dict(data["provenance"]), pages)


def not_plain(
    record: Mapping[str, Any], fields: Iterable[str] | Mapping[str, int], longest: int,
    lines: Iterable[str] = (),
) -> str | None:  # fmt: skip
    """Why a text field of ``record`` is refused (``None`` if none is): longer than its limit
    (``fields`` maps a field to it, else ``longest``), or holding a control character (a
    newline only in ``lines``). An edition's text reaches a page only escaped; this keeps
    it to the short, plain text it is for.

    >>> not_plain({"device_name": "H200\\n```{raw} html"}, ["device_name"], 200)
    'device_name holds a control character (a newline, say)'
    """
    limits = fields if isinstance(fields, Mapping) else dict.fromkeys(fields, longest)
    for name, limit in limits.items():
        value = record.get(name)
        if not isinstance(value, str):
            continue
        if len(value) > limit:
            return f"{name} is longer than {limit} characters"
        if not _PLAIN.fullmatch(value.replace("\n", "") if name in lines else value):
            return f"{name} holds a control character (a newline, say)"
    return None


def _digests(ran: Any) -> bool:
    """Whether ``ran`` is a page's digests of what it ran: names to short hex strings."""
    if not isinstance(ran, dict):
        return False
    for key in ("functions", "modules", "files", "folders"):
        value = ran.get(key, {})
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and len(v) <= 16 for k, v in value.items()
        ):
            return False
    return all(isinstance(ran.get(k), str) for k in ("code", "torch"))


def find_editions(root: str | Path) -> list[Path]:
    """The folders below ``root`` (one level) that hold an edition, sorted; ``[]`` if none."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if (p / MANIFEST).is_file())


def editions_key(root: str | Path) -> str:
    """A hash of every stored edition below ``root``: a new recording rewrites every page."""
    from amp_book.cache import source_hash

    return source_hash(find_editions(root))[:16]


# -- recording -----------------------------------------------------------------------------


def source_sha256(path: str | Path) -> str:
    """The SHA-256 of a page's source file, kept with its recording: the version it ran."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


_PROVENANCE_REPR = re.compile(r"^Provenance\(.*\)$", re.DOTALL)


def run_provenance(notebook: Mapping[str, Any]) -> dict[str, Any] | None:
    """The provenance the page printed in its run (:class:`amp_lesson.device.Provenance`).

    Read from the first output that shows one, as the keywords of its
    ``text/plain`` representation; ``None`` if the page printed none.

    >>> nb = {"cells": [{"cell_type": "code", "outputs": [{"output_type": "execute_result",
    ...     "data": {"text/plain": "Provenance(device_type='cpu', cuda_version=None)"}}]}]}
    >>> run_provenance(nb)
    {'device_type': 'cpu', 'cuda_version': None}
    """
    for cell in notebook.get("cells", []):
        for output in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            text = output.get("data", {}).get("text/plain", "")
            text = "".join(text) if isinstance(text, list) else str(text)
            if not _PROVENANCE_REPR.match(text.strip()):
                continue
            call = ast.parse(text.strip(), mode="eval").body
            if isinstance(call, ast.Call):
                return {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg}
    return None


def _error_of(notebook: Mapping[str, Any]) -> str | None:
    """The first error among the notebook's outputs, as ``Name: value``; ``None`` if none."""
    for cell in notebook.get("cells", []):
        for output in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            if output.get("output_type") == "error":
                return f"{output.get('ename', 'Error')}: {output.get('evalue', '')}".strip()
    return None


def _with_glue(notebook: dict[str, Any], glue: Mapping[str, Any]) -> dict[str, Any]:
    """``notebook`` with the glued values MyST-NB took out of its outputs put back.

    MyST-NB moves a value glued without display into ``<page>.glue.json``; put
    back as the output it was (its MIME types prefixed again), the notebook
    renders alone. Values glued with display are still among the outputs.
    """
    first = next((c for c in notebook["cells"] if c.get("cell_type") == "code"), None)
    if first is None:
        return notebook
    restored = []
    present = {
        o.get("metadata", {}).get("scrapbook", {}).get("name")
        for c in notebook["cells"]
        for o in c.get("outputs", [])
    }
    for key, record in glue.items():
        scrapbook = record.get("metadata", {}).get("scrapbook", {})
        prefix = scrapbook.get("mime_prefix", "")
        if key in present or not prefix:
            continue
        restored.append(
            {
                "output_type": "display_data",
                "metadata": {"scrapbook": {"name": key, "mime_prefix": prefix}},
                "data": {prefix + mime: value for mime, value in record.get("data", {}).items()},
            }
        )
    first["outputs"] = [*first.get("outputs", []), *restored]
    return notebook


def _compact(notebook: dict[str, Any]) -> dict[str, Any]:
    """The notebook without what its rendering does not read (cell ids, execution counts)."""
    for cell in notebook.get("cells", []):
        cell.pop("id", None)
        if cell.get("cell_type") == "code":
            cell["execution_count"] = None
            for output in cell.get("outputs", []):
                if "execution_count" in output:
                    output["execution_count"] = None
    notebook.get("metadata", {}).pop("source_map", None)
    notebook["nbformat"], notebook["nbformat_minor"] = 4, 4  # the last minor without cell ids
    return notebook


def record_provenance(device: str | None = None) -> dict[str, Any]:
    """The provenance of a recording made here: device, driver, CUDA, versions, date and time.

    ``device`` as :func:`amp_lesson.device.get_device` takes it (default: the
    book's device). Imports torch.
    """
    import platform

    import torch

    from amp_lesson import __version__
    from amp_lesson.device import device_name, get_device

    dev = get_device(device)
    provenance: dict[str, Any] = {
        "device_type": dev.type,
        "device_name": device_name(dev),
        "torch_version": torch.__version__,
        "amp_lesson_version": __version__,
        "python_version": platform.python_version(),
        "recorded": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "driver_version": None,
        "cuda_version": None,
        "compute_capability": None,
        "commit": _git_commit(),
    }
    if dev.type == "cuda":
        from amp_lesson.bench.recording import driver_version

        major, minor = torch.cuda.get_device_capability(dev)
        provenance.update(
            driver_version=driver_version(),
            cuda_version=torch.version.cuda,
            compute_capability=f"{major}.{minor}",
        )
    return provenance


def _git_commit() -> str | None:
    """The commit of the working tree the recording was made from (``+dirty`` if edited)."""
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            check=False,
            cwd=here,
            capture_output=True,
            text=True,
            timeout=10,
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            check=False, cwd=here, capture_output=True, text=True, timeout=10,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def record(
    docs: str | Path,
    executed: str | Path,
    into: str | Path,
    provenance: Mapping[str, Any],
    reference_pages: Iterable[str] = (),
    package: Path | None = None,
) -> Edition:
    """Store the pages a build just executed as an edition; return it, loaded back.

    Parameters
    ----------
    docs : str or Path
        The book's sources (``docs/``).
    executed : str or Path
        Where that build wrote each executed page (``docs/_build/html.work/jupyter_execute``).
    into : str or Path
        The folder of editions (``docs/_editions``); the edition goes in a
        folder named for the device, which is replaced whole.
    provenance : mapping
        What ran them (:func:`record_provenance`); checked by :func:`check_provenance`.
    reference_pages : iterable of str
        Glob patterns of the pages that stay in the live edition (not recorded).
    package : Path, optional
        The lesson's folder that build ran (default: where it is installed here).

    Raises
    ------
    EditionError
        If the provenance is incomplete; if an executed page's cells are not
        those of its source now (it changed after the build: build again); if a
        page's run printed no provenance, or one of another device.
    """
    from amp_book import pages as page_reader
    from amp_lesson.bench.recording import slugify

    docs, executed, into = Path(docs), Path(executed), Path(into)
    provenance = dict(provenance)
    missing = check_provenance(provenance)
    if missing:
        raise EditionError(f"provenance is incomplete: no {', '.join(missing)}")
    patterns = list(reference_pages)
    sources = {
        path.relative_to(docs).with_suffix("").as_posix(): path
        for path in sorted(docs.rglob("*.md"))
        if not any(part.startswith(("_", ".")) for part in path.relative_to(docs).parts)
    }
    stored: dict[str, dict[str, Any]] = {}
    notebooks: dict[str, dict[str, Any]] = {}
    for docname, path in sources.items():
        if any(fnmatch.fnmatchcase(docname, p) for p in patterns):
            continue
        page = page_reader.read_page(path)
        if page.code_cells:
            nb_path = executed / f"{docname}.ipynb"
            entry, notebook = _record_page(page, path, nb_path, provenance, package)
            stored[docname] = {"source_sha256": source_sha256(path)} | entry
            if notebook is not None:
                notebooks[docname] = notebook
                stored[docname]["file"] = f"{docname}.ipynb.gz"
    if not stored:
        raise EditionError(f"{docs}: no page with code cells to record")
    folder = into / slugify(str(provenance["device_name"]))
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    for docname, notebook in notebooks.items():
        target = partial / f"{docname}.ipynb.gz"
        target.parent.mkdir(parents=True, exist_ok=True)
        payload = json.dumps(notebook, ensure_ascii=False, separators=(",", ":")).encode()
        # mtime 0: the same run stores the same bytes.
        with open(target, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
            gz.write(payload)
    write_summaries(partial)
    partial.mkdir(parents=True, exist_ok=True)
    manifest = {"schema": SCHEMA, "provenance": provenance, "pages": stored}
    (partial / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    load_edition(partial)  # never store what would be refused
    shutil.rmtree(folder, ignore_errors=True)
    partial.replace(folder)
    return load_edition(folder)


def _record_page(
    page: Any, path: Path, nb_path: Path, provenance: Mapping[str, Any], package: Path | None
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """One page's manifest entry, and its notebook to store (``None``: it failed to run).

    Raises :class:`EditionError` when the executed notebook is not of the page as it is
    now, or printed no provenance, or one of another device than ``provenance``'s.
    """
    if not nb_path.is_file():
        return {
            "status": FAILED,
            "reason": "the build wrote no executed notebook for it (its kernel died, "
            "or the build stopped before it)",
        }, None
    notebook = json.loads(nb_path.read_text(encoding="utf-8"))
    ran = [c for c in notebook.get("cells", []) if c.get("cell_type") in ("code", "markdown")]
    ran_sources = [_joined(c.get("source", "")) for c in ran]
    if ran_sources != [c.source for c in page.cells if c.kind in ("code", "markdown")]:
        raise EditionError(
            f"{nb_path}: its cells are not those of {path} now (the page changed after "
            "the build); build the book again, then record"
        )
    error = _error_of(notebook)
    if error is not None:
        return {"status": FAILED, "reason": f"a cell raised {error}"}, None
    ran_on = run_provenance(notebook)
    if ran_on is None:
        raise EditionError(f"{nb_path}: the page printed no provenance line")
    if (ran_on.get("device_type"), ran_on.get("device_name")) != (
        provenance["device_type"],
        provenance["device_name"],
    ):
        raise EditionError(
            f"{nb_path}: the page ran on {ran_on.get('device_name')!r}, not on "
            f"{provenance['device_name']!r} (set AMP_LESSON_DEVICE and build again)"
        )
    glue_path = nb_path.with_name(nb_path.stem + ".glue.json")
    glue = json.loads(glue_path.read_text(encoding="utf-8")) if glue_path.is_file() else {}
    entry = {
        "status": RECORDED,
        "executed_on": str(ran_on.get("executed_on") or provenance["recorded"][:10]),
        "ran": _what_ran(page, path, nb_path, str(provenance["torch_version"]), package),
    }
    return entry, _compact(_with_glue(notebook, glue))


def _what_ran(
    page: Any, path: Path, nb_path: Path, torch_version: str, package: Path | None
) -> dict[str, Any]:
    """The digests of what the page's run ran, from the notes the build kept beside its
    notebook (:func:`.execution.keep_what_ran`) and the sources as they are."""
    from amp_book.edition import ran
    from amp_book.execution import RAN_SUFFIX

    notes = nb_path.with_name(nb_path.name.removesuffix(".ipynb") + RAN_SUFFIX)
    if not notes.is_file():
        raise EditionError(
            f"{notes}: missing, so what the run of {path} ran is unknown (its outputs came "
            "from an execution cache kept before the build noted it); build the book with an "
            "empty cache (AMP_LESSON_CACHE_DIR), then record"
        )
    summary = json.loads(notes.read_text(encoding="utf-8"))
    code = [c.source for c in page.code_cells]
    modules = summary.get("modules", [])
    return ran.witness(summary, _repository(path), modules, code, torch_version, package)


def _repository(path: Path) -> Path:
    """The folder a page's recorded paths start from: its book's sources' parent."""
    for parent in path.resolve().parents:
        if (parent / "conf.py").is_file():
            return parent.parent
    raise EditionError(f"{path}: no conf.py above it")


def _joined(source: Any) -> str:
    return "".join(source) if isinstance(source, list) else str(source)


# -- each page against this build ----------------------------------------------------------
