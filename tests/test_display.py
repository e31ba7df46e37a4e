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
