"""Small display helpers: tables built from computed rows, and number formatting.

Pages show results as tables built from the data a cell computed, never typed
in. :class:`Table` renders as an HTML table in the book and as aligned text in
a terminal or doctest.
"""

from __future__ import annotations

import html
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Table", "count", "fmt_num", "join_words"]

# Above this many columns a table's HTML is marked ``amp-wide`` and set tighter.
WIDE_COLUMNS = 8


def fmt_num(x: Any, digits: int = 4) -> str:
    """Format a number for prose and tables: plain when moderate, else scientific.

    Parameters
    ----------
    x : int, float or None
        The number; ``None`` is shown as a dash (not measured, or not known).
    digits : int, default 4
        Significant digits.

    Returns
    -------
    str
        Integers as integers, moderate values with ``digits`` significant
        digits, very large or small ones in scientific notation.

    Examples
    --------
    >>> fmt_num(65504.0), fmt_num(6.103515625e-05), fmt_num(0.1), fmt_num(3)
    ('65504', '6.104e-05', '0.1', '3')
    >>> fmt_num(float("inf")), fmt_num(-0.0), fmt_num(None)
    ('inf', '-0', '—')
    """
    if x is None:
        return "—"
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, int):
        return str(x)
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == 0:
        return "-0" if math.copysign(1.0, x) < 0 else "0"
    if x.is_integer() and abs(x) < 1e7:
        return str(int(x))
    if 1e-3 <= abs(x) < 1e5:
        return f"{x:.{digits}g}"
    return f"{x:.{digits - 1}e}"


def count(n: float, word: str, plural: str | None = None) -> str:
    """``n`` (as :func:`fmt_num` writes it) and ``word``, singular for one, plural otherwise.

    Parameters
    ----------
    n : int or float
        How many.
    word : str
        The singular noun.
    plural : str, optional
        The plural, when it is not ``word`` + ``"s"``.

    Returns
    -------
    str
        ``"1 row"``, ``"2 rows"``, ``"0 rows"``, ``"1.5 ulps"``.

    Examples
    --------
    >>> count(1, "row"), count(2, "row"), count(0, "step")
    ('1 row', '2 rows', '0 steps')
    >>> count(3, "batch", "batches")
    '3 batches'
    >>> count(1.0, "ulp"), count(2.0, "ulp")
    ('1 ulp', '2 ulps')
    """
    return f"{fmt_num(n)} {word if n == 1 else (plural or word + 's')}"


def join_words(items: Sequence[str], conjunction: str = "and") -> str:
    """The distinct ``items`` as an English list: "a", "a and b", "a, b and c".

    A word that repeats is listed once, at its first place, so a list never
    reads "float32 and float32".

    Parameters
    ----------
    items : sequence of str
        The words, in order; repeats are dropped.
    conjunction : str, default "and"
        The word before the last item ("or" for alternatives).

    Returns
    -------
    str
        The list; ``""`` for no items.

    Examples
    --------
    >>> join_words(["float32", "float32"])
    'float32'
    >>> join_words(["a", "b"]), join_words(["a", "b", "c"])
    ('a and b', 'a, b and c')
    >>> join_words(["x", "y", "x"], "or"), join_words([])
    ('x or y', '')
    """
    distinct = list(dict.fromkeys(items))
    if len(distinct) <= 1:
        return "".join(distinct)
    return f"{', '.join(distinct[:-1])} {conjunction} {distinct[-1]}"


@dataclass
class Table:
    """Rows (mappings) shown as a table: HTML in the book, aligned text elsewhere.

    Parameters
    ----------
    rows : sequence of mapping
        The rows, computed by a cell, never typed in.
    columns : sequence of str, optional
        The keys to show, in order (default: the first row's keys).
    formats : mapping of str to callable, optional
        For a column, a function that turns a value into text (default
        :func:`fmt_num` for numbers, ``str`` otherwise).
    caption : str, optional
        The table's caption.

    Raises
    ------
    TypeError
        If ``rows`` is not a sequence of mappings.
    ValueError
        If a column is not a key of the rows.

    Examples
    --------
    >>> t = Table([{"format": "fp16", "max": 65504.0},
    ...            {"format": "bf16", "max": 3.39e38}])
    >>> print(t)
    format  max
    fp16    65504
    bf16    3.390e+38
    """

    rows: Sequence[Mapping[str, Any]]
    columns: Sequence[str] | None = None
    formats: Mapping[str, Callable[[Any], str]] = field(default_factory=dict)
    caption: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.rows, Sequence) or isinstance(self.rows, (str, bytes)):
            raise TypeError(f"rows must be a sequence of mappings, got {type(self.rows).__name__}")
        for i, row in enumerate(self.rows):
            if not isinstance(row, Mapping):
                raise TypeError(f"rows[{i}] must be a mapping, got {type(row).__name__}")
        if self.columns is None:
            self.columns = list(self.rows[0]) if self.rows else []
        unknown = [c for c in self.columns for r in self.rows[:1] if c not in r]
        if unknown:
            raise ValueError(f"columns {unknown} are not keys of the rows")

    def _cell(self, column: str, value: Any) -> str:
        if column in self.formats:
            return self.formats[column](value)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return fmt_num(value)
        return "—" if value is None else str(value)

    def text_rows(self) -> list[list[str]]:
        """The header and each row as lists of strings.

        Returns
        -------
        list of list of str
            The header first.
        """
        cols = list(self.columns or [])
        return [cols] + [[self._cell(c, row.get(c)) for c in cols] for row in self.rows]

    def __str__(self) -> str:
        rows = self.text_rows()
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))] if rows else []
        lines = [
            "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=False)).rstrip()
            for r in rows
        ]
        return "\n".join(lines)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))

    def column_kinds(self) -> list[str]:
        """``"number"`` for each column whose values are all numbers (or missing), else ``"text"``.

        The HTML table aligns number columns right, so digits line up, and
        text columns left.

        Returns
        -------
        list of str
            One kind per column, in the order of ``columns``.

        Examples
        --------
        >>> Table([{"format": "fp16", "max": 65504.0, "note": None}]).column_kinds()
        ['text', 'number', 'text']
        """

        def is_number(value: Any) -> bool:  # NumPy's scalars count too
            return isinstance(value, numbers.Real) and not isinstance(value, bool)

        kinds = []
        for column in self.columns or []:
            values = [row.get(column) for row in self.rows if row.get(column) is not None]
            kinds.append("number" if values and all(map(is_number, values)) else "text")
        return kinds

    def _repr_html_(self) -> str:
        rows = self.text_rows()
        kinds = [f' class="amp-{kind}"' for kind in self.column_kinds()]
        head = "".join(
            f'<th scope="col"{kind}>{html.escape(c)}</th>'
            for c, kind in zip(rows[0], kinds, strict=True)
        )
        body = "".join(
            "<tr>"
            + "".join(f"<td{kind}>{html.escape(c)}</td>" for c, kind in zip(r, kinds, strict=True))
            + "</tr>"
            for r in rows[1:]
        )
        caption = f"<caption>{html.escape(self.caption)}</caption>" if self.caption else ""
        # a table of many columns is set tighter, so it fits the text column on a desktop
        classes = "amp-table amp-wide" if len(kinds) > WIDE_COLUMNS else "amp-table"
        return (
            f'<table class="{classes}">{caption}<thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table>"
        )
