"""Sphinx configuration of the book.

The book must not lie: a failing cell or any warning fails the build, every
page executes, and the execution cache is keyed on the package's source (see
``amp_book.cache``), so it never serves output older than
``amp_lesson``.
"""

from __future__ import annotations

import os

import amp_lesson

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

# -- Math without a CDN: rendered to MathML at build time -------------------------
html_math_renderer = "mathml"

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
}

# The API reference and the pages for authors are sections of their own, reached from
# their entries in the sidebar: no "Previous" or "Next" link leads from the learner's
# pages into them (the reading path ends at the corrections page), nor out of them.
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
# Types stay the docstrings' words ("torch.device or str, optional"), set as text: turned into
# cross-references they would point at torch and Python, whose inventories a build cannot
# fetch (no network on the build machines), and -n would fail on every one.
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
# Roles in the docstrings' prose that name another project's objects (:class:`torch.amp.GradScaler`,
# :func:`time.perf_counter`) cannot resolve offline either; they render as code. Only these
# outside namespaces are let through: a reference to a name of amp_lesson that does not exist
# still fails the build.
nitpick_ignore_regex = [
    (r"py:.*", r"(torch|numpy|matplotlib|jsonschema|sklearn|time|datetime|pathlib|typing)(\..+)?"),
]

# The theme logs a console error for an empty mode; follow the reader's system setting.
html_context = {"default_mode": "auto"}
