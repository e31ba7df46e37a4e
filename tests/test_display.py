"""amp_lesson.display: number formatting and tables built from computed rows."""

from __future__ import annotations

import pytest

from amp_lesson.display import Table, fmt_num


def test_a_table_shows_its_rows_in_html_and_text_and_escapes_markup() -> None:
    table = Table([{"format": "<FP16>", "max": 65504.0}, {"format": "FP32", "max": 3.4e38}])
    html = table._repr_html_()
    assert "&lt;FP16&gt;" in html
    assert "<FP16>" not in html
    assert html.count("<tr>") == 3  # the heading row and two rows
    assert fmt_num(3.4e38) in html
    assert fmt_num(3.4e38) in str(table)


@pytest.mark.parametrize(("value", "text"), [(65504.0, "65504"), (2.0**-24, "5.96e-08")])
def test_numbers_are_plain_when_moderate_and_scientific_otherwise(value, text) -> None:
    assert fmt_num(value, 3) == text


def test_table_html_marks_number_columns_and_text_columns() -> None:
    from bs4 import BeautifulSoup

    rows = [
        {"format": "fp16", "bits": 16, "max": 65504.0, "note": None, "ok": True},
        {"format": "bf16", "bits": 16, "max": None, "note": "wide range", "ok": False},
    ]
    soup = BeautifulSoup(Table(rows)._repr_html_(), "html.parser")
    kinds = [th["class"] for th in soup.select("thead th")]
    assert kinds == [["amp-text"], ["amp-number"], ["amp-number"], ["amp-text"], ["amp-text"]]
    for tr in soup.select("tbody tr"):  # every cell carries its column's kind
        assert [td["class"] for td in tr.select("td")] == kinds
    # A column that is all missing has nothing to line up: text.
    assert Table([{"a": None}]).column_kinds() == ["text"]


def test_only_a_table_of_many_columns_is_marked_wide() -> None:
    from bs4 import BeautifulSoup

    from amp_lesson.display import WIDE_COLUMNS

    def table_classes(n_columns: int) -> list[str]:
        row = {f"c{i}": i for i in range(n_columns)}
        return BeautifulSoup(Table([row])._repr_html_(), "html.parser").table["class"]

    assert table_classes(WIDE_COLUMNS) == ["amp-table"]
    assert table_classes(WIDE_COLUMNS + 1) == ["amp-table", "amp-wide"]


@pytest.mark.parametrize(
    ("n", "word", "plural", "text"),
    [
        (1, "row", None, "1 row"),
        (2, "row", None, "2 rows"),
        (0, "step", None, "0 steps"),
        (1, "batch", "batches", "1 batch"),
        (4, "batch", "batches", "4 batches"),
    ],
)
def test_count_agrees_in_number(n, word, plural, text) -> None:
    from amp_lesson.display import count

    assert count(n, word, plural) == text


@pytest.mark.parametrize(
    ("items", "text"),
    [
        ([], ""),
        (["float32"], "float32"),
        (["float32", "float32"], "float32"),
        (["a", "b"], "a and b"),
        (["a", "b", "c"], "a, b and c"),
        (["a", "b", "a", "c"], "a, b and c"),
    ],
)
def test_join_words_lists_each_word_once(items, text) -> None:
    from amp_lesson.display import join_words

    assert join_words(items) == text
    assert join_words(items, "or") == text.replace(" and ", " or ")
