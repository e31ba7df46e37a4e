"""Citations in the book's own style: author and year in round brackets.

``{cite:t}`micikevicius2018mixed``` reads "Micikevicius *et al.* (2018)" and
``{cite:p}`...``` "(Micikevicius *et al.*, 2018)", each linked to its entry on the
references page (sphinxcontrib-bibtex's author-year style, whose brackets are square).
``docs/conf.py`` selects it as ``bibtex_reference_style = "author_year_round"``; the
notebooks write the same words (``amp_book.export.markdown``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sphinx.application import Sphinx

STYLE = "author_year_round"


def _register() -> None:
    import sphinxcontrib.bibtex.plugin
    from sphinxcontrib.bibtex.style.referencing import BracketStyle
    from sphinxcontrib.bibtex.style.referencing.author_year import AuthorYearReferenceStyle

    def round_brackets() -> BracketStyle:  # works cited together: "(A, 2001; B, 2002)"
        return BracketStyle(left="(", right=")", sep="; ")

    @dataclasses.dataclass
    class RoundAuthorYear(AuthorYearReferenceStyle):
        bracket_parenthetical: BracketStyle = dataclasses.field(default_factory=round_brackets)
        bracket_textual: BracketStyle = dataclasses.field(default_factory=round_brackets)
        bracket_author: BracketStyle = dataclasses.field(default_factory=round_brackets)
        bracket_label: BracketStyle = dataclasses.field(default_factory=round_brackets)
        bracket_year: BracketStyle = dataclasses.field(default_factory=round_brackets)

    group = "sphinxcontrib.bibtex.style.referencing"
    try:
        sphinxcontrib.bibtex.plugin.find_plugin(group, STYLE)
    except ImportError:
        sphinxcontrib.bibtex.plugin.register_plugin(group, STYLE, RoundAuthorYear)


def setup(app: Sphinx) -> dict[str, Any]:
    _register()
    return {"parallel_read_safe": True, "parallel_write_safe": True}
