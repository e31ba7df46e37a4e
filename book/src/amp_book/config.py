"""The book's settings: every ``amp_lesson_*`` value of ``conf.py``, in one place.

An author sets them in ``conf.py`` (or ``sphinx-build -D``); :func:`setup` registers each
with Sphinx from :class:`BookConfig`'s fields (name, default, what a change rebuilds, the
types allowed), and :func:`book_config` gives the build one :class:`BookConfig`, checked
and read once, at ``config-inited``, in the manner of MyST-NB's ``NbParserConfig``.

What the build works out itself and Sphinx must compare between builds (the execution
cache's key, the extension's hash, whether the PDF is printed, the stored editions' key)
are settings too, registered here (:data:`DERIVED`), but set by the part that works
them out, never by an author.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.errors import ConfigError

PREFIX = "amp_lesson_"
"""Every setting's name in ``conf.py`` starts so: ``amp_lesson_pdf`` is :attr:`BookConfig.pdf`."""


def _setting(default: Any, rebuild: str, doc: str) -> Any:
    """A field of :class:`BookConfig`: its default, what a change rebuilds (Sphinx's
    ``rebuild``: ``"env"`` reads every page again, ``"html"`` writes every page again,
    ``""`` nothing), and what it is for. A list's default is empty."""
    metadata = {"rebuild": rebuild, "doc": doc}
    if default == []:
        return field(default_factory=list, metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class BookConfig:
    """The book's settings, as ``conf.py`` sets them (``amp_lesson_`` + the field's name)."""

    reference_pages: list[str] = _setting(  # noqa: RUF009 (a dataclass field)
        [], "html", "Glob patterns of the pages outside the reading path (the API reference, "
        "the authors' guide): no reading time, no print book, no notebook zip."
    )  # fmt: skip
    repository: str = _setting(
        "", "html", "The repository's address, for the edit, issue and Colab buttons "
        "('' reads it from git)."
    )  # fmt: skip
    branch: str = _setting("main", "html", "The branch the buttons and notebooks point at.")
    pdf: str = _setting(
        "auto", "html", "'yes' prints the print book to a PDF (failing where it cannot), "
        "'no' does not, 'auto' where Chromium is at hand."
    )  # fmt: skip
    editions: str = _setting(
        "_editions", "", "The folder of the stored editions (GPU recordings), beside conf.py; "
        "'' builds none (the live preview)."
    )  # fmt: skip
    editions_open: bool = _setting(
        True, "html", "Whether a page a stored edition recorded as it stands opens on that run."
    )
    watch: list[str] = _setting(  # noqa: RUF009 (a dataclass field)
        [], "env", "Folders beside conf.py whose files a page's code reads: a page that names "
        "one runs again when one of its files changes."
    )  # fmt: skip
    inventories: str = _setting(
        "", "html", "The digests of the other projects' inventories (docs/_inventories): a "
        "refreshed one writes every page again."
    )  # fmt: skip
    fork_kernels: bool = _setting(
        True, "", "Fork each page's kernel from a server that imported torch (False: "
        "MyST-NB's stock kernels, for comparison)."
    )  # fmt: skip
    preview: bool = _setting(
        False, "", "Set by the live preview: defer what only a whole build needs."
    )
    edition: str = _setting(
        "", "env", "Set only in the build of a stored edition: the rendering's state file."
    )


DERIVED: dict[str, tuple[Any, str, str]] = {
    "environment_key": ("", "env", "The execution cache's key (amp_book.cache)."),
    "extension_hash": ("", "env", "A hash of the book's build code: a change reads every page."),
    "pdf_printed": (False, "html", "Whether this build prints the PDF (amp_book.printbook)."),
    "editions_key": ("", "html", "What the stored editions hold (amp_book.edition)."),
}  # fmt: skip
"""Settings the build works out and sets (never ``conf.py``): name, default, rebuild, doc."""


def setup(app: Sphinx) -> None:
    """Register every setting of :class:`BookConfig` and :data:`DERIVED` with Sphinx."""
    for item in dataclasses.fields(BookConfig):
        default = item.default_factory() if callable(item.default_factory) else item.default
        kind = type(default)
        app.add_config_value(PREFIX + item.name, default, item.metadata["rebuild"], types=[kind])
    for name, (default, rebuild, _doc) in DERIVED.items():
        app.add_config_value(PREFIX + name, default, rebuild, types=[type(default)])
    app.connect("config-inited", _read, priority=10)


def _read(app: Sphinx, config: Config) -> None:
    app._amp_lesson_config = from_config(config)  # type: ignore[attr-defined]


def from_config(config: Any) -> BookConfig:
    """The :class:`BookConfig` of a Sphinx ``config``, each value checked: a value of the
    wrong type is a :class:`~sphinx.errors.ConfigError` naming the setting and what it takes.

    >>> from types import SimpleNamespace
    >>> from_config(SimpleNamespace(amp_lesson_pdf="no")).pdf
    'no'
    >>> from_config(SimpleNamespace(amp_lesson_pdf=False))
    Traceback (most recent call last):
    ...
    sphinx.errors.ConfigError: amp_lesson_pdf must be a str ('yes', 'no' or 'auto'), got False
    """
    values = {}
    for item in dataclasses.fields(BookConfig):
        name = PREFIX + item.name
        if not hasattr(config, name):
            continue
        value = getattr(config, name)
        default = item.default_factory() if callable(item.default_factory) else item.default
        if not isinstance(value, type(default)) or (
            isinstance(default, list) and not all(isinstance(v, str) for v in value)
        ):
            kind = "a list of str" if isinstance(default, list) else f"a {type(default).__name__}"
            hint = " ('yes', 'no' or 'auto')" if item.name == "pdf" else ""
            raise ConfigError(f"{name} must be {kind}{hint}, got {value!r}")
        values[item.name] = list(value) if isinstance(value, list) else value
    return BookConfig(**values)


def reread(app: Sphinx) -> BookConfig:
    """Read the settings again, after a handler changed one (the build of a stored edition
    prints no PDF, whatever ``conf.py`` says)."""
    app._amp_lesson_config = from_config(app.config)  # type: ignore[attr-defined]
    return app._amp_lesson_config  # type: ignore[attr-defined,no-any-return]


def book_config(app: Sphinx) -> BookConfig:
    """The book's settings, as read at ``config-inited`` (or now, for an app set up before)."""
    found = getattr(app, "_amp_lesson_config", None)
    if found is None:
        found = from_config(app.config)
        app._amp_lesson_config = found  # type: ignore[attr-defined]
    return found
