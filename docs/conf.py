"""Sphinx configuration of the book.

The book must not lie: a failing cell or any warning fails the build, every
page executes, and the execution cache is keyed on the package's source (see
``amp_book.cache``), so it never serves output older than
``amp_lesson``.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse

import amp_lesson
from amp_book import inventories as _inventories
from amp_book import urls as _urls

project = "Mixed precision, loss scaling and gradient accumulation"
author = "The amp-lesson authors"
copyright = "2026, the amp-lesson authors"
release = version = amp_lesson.__version__

extensions = [
    "myst_nb",
    "sphinx_design",
    "sphinx_copybutton",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.intersphinx",
    "sphinxcontrib.bibtex",
    "sphinx_sitemap",
    "sphinxext.opengraph",
    "notfound.extension",
    "amp_book",
]

root_doc = "index"
exclude_patterns = ["_build", "**.ipynb_checkpoints", "README.md", "_data", "_editions"]

# -- MyST and MyST-NB ---------------------------------------------------------
myst_enable_extensions = ["colon_fence", "dollarmath", "amsmath", "deflist"]
myst_heading_anchors = 3

# "cache" executes a page when its cells or amp_lesson's source change and
# otherwise reuses the stored outputs. The cache folder is chosen per source
# hash by amp_book.cache, so a change to the package re-executes.
nb_execution_mode = os.environ.get("AMP_LESSON_EXECUTION_MODE", "cache")
# A failing cell fails the build and prints its traceback. MyST-NB's own
# nb_execution_raise_on_error would raise in a -j worker whose log Sphinx drops
# (the traceback would be lost), so amp_book.errors raises instead,
# in the main process, with every failing cell's traceback.
nb_execution_raise_on_error = False
nb_execution_show_tb = True
nb_execution_allow_errors = False
# MyST-NB's default is 30 s a cell; the slowest cell (two gloo processes for
# the DDP page) needs about 10 s on 2 cores, so 180 s leaves a wide margin.
nb_execution_timeout = 180
nb_merge_streams = True
# A warning printed by a cell is a Sphinx warning, so -W fails the build: a reader
# never sees a page whose own code warns.
nb_output_stderr = "warn"

# -- Bibliography: docs/references.bib, cited with {cite:t} / {cite:p}, listed on references.md
bibtex_bibfiles = ["references.bib"]
bibtex_reference_style = "author_year_round"
bibtex_default_style = "plain"

# -- Math without a CDN: rendered to MathML at build time -------------------------
html_math_renderer = "mathml"

# -- Licences: the prose and figures CC BY 4.0, the code BSD-3-Clause (LICENSE) --------------
LICENCE_HTML = (
    '<p class="amp-licence">Text and figures: <a rel="license" '
    'href="https://creativecommons.org/licenses/by/4.0/">CC BY 4.0</a>. Code: '
    '<a href="https://opensource.org/license/bsd-3-clause">BSD-3-Clause</a>.</p>'
)

# -- HTML -------------------------------------------------------------------------
html_theme = "sphinx_book_theme"
html_title = "Mixed precision in PyTorch"
html_last_updated_fmt = ""
html_theme_options = {
    "home_page_in_toc": True,
    "use_download_button": True,
    "use_fullscreen_button": False,
    "show_toc_level": 2,
    "navigation_with_keys": False,
    # pydata-sphinx-theme >= 0.17 adds a navbar with its own hidden copies of
    # the sidebar buttons; its script wires the first copy it finds, so the
    # visible buttons of sphinx-book-theme did nothing. No navbar, no copies
    # (sphinx-book-theme 1.4 pins pydata-sphinx-theme 0.20, so no pin avoids it).
    "navbar_persistent": [],
    # Top-level entries only: the API reference's module pages are reached from its index
    # page, so the sidebar needs no expand toggles (the theme's toggle has no accessible name).
    "max_navbar_depth": 1,
    # The licences, under the copyright line of every page (and of the PDF's last page).
    "extra_footer": LICENCE_HTML,
}

# The API reference and the pages for authors are sections of their own, reached from
# their entries in the sidebar: no "Previous" or "Next" link leads from the learner's
# pages into them (the reading path ends at the references page), nor out of them.
amp_lesson_reference_pages = ["api/*", "guide/*"]

# -- Copy buttons: on code, not on a cell's output; prompts and their output lines
# (">>> ", "... ", "$ ") are left out of what is copied.
# A block of class no-copy is an excerpt that does not run alone: it gets no button.
copybutton_selector = "div:not(.output):not(.no-copy) > div.highlight pre"
copybutton_exclude = ".linenos, .gp, .go"
copybutton_prompt_text = r">>> |\.\.\. |\$ "
copybutton_prompt_is_regexp = True

# Where the repository lives, for the "Open in Colab" button: by default the
# Repository address in pyproject.toml's [project.urls]; AMP_LESSON_REPOSITORY
# (owner/name or an https address) points a fork's build at the fork.
amp_lesson_repository = os.environ.get("AMP_LESSON_REPOSITORY", "")
amp_lesson_branch = os.environ.get("AMP_LESSON_BRANCH", "main")
# The whole book as one PDF, printed by Chromium from print.html when the build has one
# (amp_book.printbook): "auto", "yes" (fail without it) or "no".
amp_lesson_pdf = os.environ.get("AMP_LESSON_PDF", "auto")
# Set by the live preview (amp_book.preview): a rebuild defers what only a whole build needs.
amp_lesson_preview = os.environ.get("AMP_LESSON_PREVIEW") == "1"
# The book as another device ran it (docs/_editions/<device>/, written there by
# `nox -s gpu-edition`), rendered beside this build under editions/<device>/.
# AMP_LESSON_EDITIONS="" builds none (the live preview: a save rebuilds the live edition only).
amp_lesson_editions = os.environ.get("AMP_LESSON_EDITIONS", "_editions")
# Files besides the package whose change must re-execute the book.
amp_lesson_watch = ["_data"]

nitpicky = True
# No figure numbers: prose points at a figure by its place ({ref} to its name). Numbering
# walked every page's doctree on every build, a no-change one too (1.5 s of 4.6).
numfig = False

# -- API reference (docs/api/): autodoc reads amp_lesson's numpydoc docstrings ------------
napoleon_google_docstring = False
napoleon_numpy_docstring = True
# Types stay the docstrings' words ("torch.device or str, optional"), set as text.
napoleon_use_param = False
napoleon_use_rtype = False
autodoc_typehints = "none"
autodoc_member_order = "bysource"
autodoc_class_signature = "separated"
html_static_path = ["_static"]
html_css_files = ["api.css"]
# No page links to a general index (readers search, and the API pages list every name), and
# writing it cost about a second on every build, a no-change one included.
html_use_index = False
# Nor to the Python module index: the API reference's index page lists every module, and
# the module index was written again on every build (0.7 s of a no-change one).
html_domain_indices = False
# -- Links into other projects' documentation ------------------------------------------
# Intersphinx reads each inventory from docs/_inventories/ (the build has no network): a role
# such as :class:`torch.amp.GradScaler` or :func:`time.perf_counter` resolves to its entry,
# and a code span in the prose that names one links to it (amp_book.apilinks). Where an
# inventory came from and how it is read again: docs/_inventories/sources.json,
# tools/inventories.py. A file that is not what sources.json records fails the build.
_INVENTORIES = Path(__file__).parent / "_inventories"
# The live preview checks their digests only: a rebuild stays quick.
intersphinx_mapping = _inventories.mapping(_INVENTORIES, read=not amp_lesson_preview)
amp_lesson_inventories = _inventories.digests(_INVENTORIES)
# The namespaces of a project whose inventory has not been read yet render as code; so do
# those of projects the book keeps no inventory of. A reference to a name of amp_lesson
# that does not exist still fails the build.
_UNLINKED = [*_inventories.unlinked_namespaces(_INVENTORIES), "matplotlib", "jsonschema", "sklearn"]
nitpick_ignore_regex = [(r"py:.*", rf"({'|'.join(_UNLINKED)})(\..+)?")]

# -- Where the book is published ---------------------------------------------------------
# Read the Docs says where this version's pages live (READTHEDOCS_CANONICAL_URL, ending in
# /en/<version>/): every page names it as its canonical address, so "latest" and "stable"
# are one book to a search engine, and the sitemap and the social cards are made from it.
# Elsewhere the address of the book's latest version, from pyproject.toml's [project.urls].
html_baseurl = (os.environ.get("READTHEDOCS_CANONICAL_URL") or _urls.documentation_url()).rstrip(
    "/"
)
html_baseurl += "/"  # sphinx-sitemap and the editions' addresses append to it
sitemap_url_scheme = "{link}"  # html_baseurl holds the language and the version
sitemap_excludes = ["search.html", "404.html", "print.html"]
# Social cards: one static image (docs/_static/social-card.png, drawn by
# tools/social_card.py), not one drawn per page.
ogp_site_url = html_baseurl
ogp_image = "_static/social-card.png"
ogp_image_alt = "Mixed precision in PyTorch: an executable book"
ogp_social_cards = {"enable": False}
ogp_type = "book"
# A 404 page in the book's theme. Read the Docs serves it for every missing address of this
# version, so its links start at the version's root (/en/<version>/); a book served from its
# own folder (a local build, the tests) has it at /.
notfound_urls_prefix = urlparse(os.environ.get("READTHEDOCS_CANONICAL_URL", "")).path or "/"
notfound_context = {
    "title": "Page not found",
    "body": (
        "<h1>Page not found</h1><p>There is no page at this address. The book's contents are in "
        "the sidebar, and the search finds a word on any page.</p>"
    ),
}

# The theme logs a console error for an empty mode; follow the reader's system setting.
html_context = {"default_mode": "auto"}
