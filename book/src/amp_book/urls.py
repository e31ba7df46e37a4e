"""Where the project lives, as ``[project.urls]`` of the lesson's ``pyproject.toml`` says.

The repository and the hosted book, declared once; the Colab address of a page's notebook
and the line that installs the lesson in a notebook are made from them.
"""

from __future__ import annotations

import importlib.metadata
import re

from amp_lesson import __version__

DIST = "amp-lesson"


# -- where the project lives -------------------------------------------------------------


def project_urls(dist: str = DIST) -> dict[str, str]:
    """``[project.urls]`` of the installed package, by lower-case label."""
    urls = {}
    for entry in importlib.metadata.metadata(dist).get_all("Project-URL") or []:
        label, _, url = entry.partition(",")
        urls[label.strip().lower()] = url.strip()
    return urls


def repository_url() -> str:
    """The repository's address, as ``[project.urls] Repository`` declares it."""
    url = project_urls().get("repository", "")
    if not url.startswith("https://github.com/"):
        raise ValueError(
            "pyproject.toml's [project.urls] Repository must be a https://github.com/ address; "
            f"got {url!r}"
        )
    return url.rstrip("/").removesuffix(".git")


def github_slug(url: str | None = None) -> str:
    """``owner/name`` of the GitHub repository (``url`` or :func:`repository_url`)."""
    url = repository_url() if url is None else url
    return url.removeprefix("https://github.com/").strip("/")


def documentation_url() -> str:
    """Where the built book is read, with the language and version part of the path."""
    base = project_urls().get("documentation", "").rstrip("/")
    return f"{base}/en/latest" if base.endswith(".readthedocs.io") else base


def colab_url(notebook_path: str, branch: str = "main", repository: str | None = None) -> str:
    """The "Open in Colab" address of ``notebook_path`` (a path in the repository).

    >>> colab_url("notebooks/chapter/formats.ipynb", repository="https://github.com/o/r")
    'https://colab.research.google.com/github/o/r/blob/main/notebooks/chapter/formats.ipynb'
    """
    slug = github_slug(repository)
    return f"https://colab.research.google.com/github/{slug}/blob/{branch}/{notebook_path}"


def install_ref(version: str = __version__, branch: str = "main") -> str:
    """The git reference the notebooks install ``amp_lesson`` from, for ``version``.

    A release (``0.1.0``) is tagged ``v0.1.0``; a development version (``0.2.0.dev0``, the
    version between releases, CHANGELOG.md) has no tag, so its notebooks install ``branch``,
    the code they were made from.

    >>> install_ref("0.1.0"), install_ref("0.2.0.dev0")
    ('v0.1.0', 'main')
    """
    if not re.fullmatch(r"\d+\.\d+\.\d+(\.dev\d+)?", version):
        raise ValueError(f"version must be X.Y.Z or X.Y.Z.devN, got {version!r}")
    return branch if ".dev" in version else f"v{version}"


def install_spec(
    version: str = __version__, repository: str | None = None, branch: str = "main"
) -> str:
    """The pip requirement that installs ``amp_lesson`` at ``version`` from the repository.

    >>> install_spec("0.1.0", "https://github.com/o/r")
    'amp-lesson[notebooks] @ git+https://github.com/o/r@v0.1.0'
    >>> install_spec("0.2.0.dev0", "https://github.com/o/r")
    'amp-lesson[notebooks] @ git+https://github.com/o/r@main'
    """
    url = repository_url() if repository is None else repository
    return f"{DIST}[notebooks] @ git+{url}@{install_ref(version, branch)}"


def install_cell_source(version: str = __version__, repository: str | None = None) -> str:
    """The notebook's first code cell: install the package where it is missing."""
    return (
        "import importlib\n"
        "import importlib.util\n"
        "\n"
        "# The book's package, at the version this notebook was made with.\n"
        'if importlib.util.find_spec("amp_lesson") is None:\n'
        f'    %pip install --quiet "{install_spec(version, repository)}"\n'
        "    importlib.invalidate_caches()\n"
        "\n"
        "# Prints the page's passages that report a run, from this run's values.\n"
        "from amp_lesson.notebook import show_text"
    )


# -- glue ----------------------------------------------------------------------------------
