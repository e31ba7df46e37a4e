"""Maths becomes MathML at build time (amp_book.mathml), and only safe, well-formed MathML."""

from __future__ import annotations

from pathlib import Path

from helpers import build_in_process


def test_maths_that_would_not_be_safe_mathml_is_shown_as_latex_and_warned_of(
    tmp_path: Path,
) -> None:
    """latex2mathml passed ``\\text{}`` through as it was: ``\\text{a<b}`` broke the page and
    ``\\text{<img onerror=...>}`` put an element with a script on it."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text("")
    (src / "index.md").write_text(
        "# Maths\n\n"
        "Fine: $\\frac{a}{b} < 1$.\n\n"
        'Unsafe: $\\text{<img src="x" onerror="alert(1)">}$.\n\n'
        "A link: $\\href{javascript:alert(1)}{x}$.\n"
    )
    build = build_in_process(
        src,
        tmp_path / "out",
        ["myst_parser", "amp_book.mathml"],
        check=False,
        myst_enable_extensions=["dollarmath"],
        html_math_renderer="mathml",
    )
    page = (build.outdir / "index.html").read_text(encoding="utf-8")
    assert build.returncode == 1  # warned: -W fails the build
    assert "<mfrac>" in page  # the safe maths as MathML
    assert "<img" not in page
    assert "javascript:" not in page.replace("javascript:alert(1)}{x}</code>", "")
    assert "&lt;img src=&quot;x&quot; onerror=&quot;alert(1)&quot;&gt;" in page  # as its LaTeX
    warnings = build.stderr
    assert "index.md:5: WARNING: the maths" in warnings, warnings
    assert "it is not well-formed XML" in warnings
    assert "a 'href' attribute" in warnings
