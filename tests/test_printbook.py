"""amp_book.printbook: the whole book on one page, and the choice to print it."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from amp_book import printbook


def _page(body: str) -> str:
    return f'<html><head><title>x</title></head><body><article class="bd-article">{body}</article>'


def test_the_reading_path_stops_at_the_first_reference_page_and_never_loops() -> None:
    relations = {
        "index": [None, None, "a"],
        "a": ["index", "index", "b"],
        "b": ["index", "a", "api/index"],
        "api/index": ["index", "b", "api/x"],
    }
    assert printbook.reading_path(relations, "index", ["api/*"]) == ["index", "a", "b"]
    looped = {"index": [None, None, "a"], "a": [None, "index", "index"]}
    assert printbook.reading_path(looped, "index", []) == ["index", "a"]


def test_pages_with_the_same_ids_keep_apart_and_their_links_follow() -> None:
    one = _page(
        '<h1 id="intro">One</h1><a href="#intro">here</a><a href="two.html#intro">two</a>'
        '<svg><clipPath id="c"/><path clip-path="url(#c)"/><use xlink:href="#c"/></svg>'
        '<details class="sc"><summary>Answer</summary>42</details>'
        '<label for="intro">x</label><p aria-labelledby="intro c" data-sc-for="B">y</p>'
        '<a href="api/x.html">api</a><a href="https://example.org/a">out</a>'
        '<img src="_images/f.svg"/><script>alert(1)</script>'
    )
    two = _page('<h1 id="intro">Two</h1><a href="index.html">back</a>')
    text = printbook.print_page(
        [("index", "One", one), ("two", "Two", two)],
        '<title>x</title><link rel="stylesheet" href="_static/a.css"/><script src="s.js"></script>',
        "https://book.example/en/latest",
        "The book",
        '<p>Text: <a href="https://creativecommons.org/licenses/by/4.0/">CC BY 4.0</a></p>',
    )
    cover = re.search(r'<header class="amp-print-cover">(.*?)</header>', text, re.DOTALL).group(1)
    assert (
        'class="amp-print-licence"><p>Text: <a href="https://creativecommons.org/licenses' in cover
    )
    ids = re.findall(r'\bid="([^"]+)"', text)
    assert len(ids) == len(set(ids))  # the two pages' "intro" no longer clash
    assert {"index--intro", "two--intro", "index", "two"} <= set(ids)
    assert 'href="#two--intro"' in text  # a link to another page of the book, within it
    assert 'href="#index"' in text  # a link to a page, to its start
    assert 'clip-path="url(#index--c)"' in text  # a figure's own references too
    assert 'xlink:href="#index--c"' in text
    assert 'href="https://book.example/en/latest/api/x.html"' in text  # not in it: the site
    assert 'href="https://example.org/a"' in text
    assert 'src="_images/f.svg"' in text
    assert "<details open" in text  # a printed self-check shows its answer
    assert 'for="index--intro"' in text  # what names an element follows it
    assert 'aria-labelledby="index--intro index--c"' in text
    assert 'data-sc-for="B"' in text  # an option's letter is no id
    assert "<script" not in text
    assert '<link rel="stylesheet" href="_static/a.css"/>' in text
    assert "<title>The book</title>" in text
    contents = re.search(r"<ol>(.*?)</ol>", text).group(1)
    assert re.findall(r'href="#([^"]+)"', contents) == ["index", "two"]


def test_a_page_without_an_article_is_named() -> None:
    with pytest.raises(ValueError, match="chapter/x: no <article"):
        printbook.page_section("chapter/x", "<p>no article</p>", set(), "https://b.example")


def _config(choice: str) -> SimpleNamespace:
    return SimpleNamespace(amp_lesson_pdf=choice, amp_lesson_pdf_printed=None)


def test_the_build_prints_only_where_it_can_and_says_so_when_told_to(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    monkeypatch.setenv("CHROMIUM_PATH", str(tmp_path / "no-such-chromium"))
    assert printbook.find_chromium() is None
    config = _config("auto")
    printbook._decide(None, config)
    assert config.amp_lesson_pdf_printed is False  # no Chromium: no PDF, and no link to one
    with pytest.raises(printbook.PrintError, match="cannot print the book"):
        printbook._decide(None, _config("yes"))
    with pytest.raises(printbook.PrintError, match="must be one of auto, yes, no, got 'maybe'"):
        printbook._decide(None, _config("maybe"))
    fake = tmp_path / "chromium"
    fake.write_text("#!/bin/sh\n")
    monkeypatch.setenv("CHROMIUM_PATH", str(fake))
    assert printbook.find_chromium() == str(fake)
    config = _config("no")
    printbook._decide(None, config)
    assert config.amp_lesson_pdf_printed is False


def test_the_landing_pages_links_name_only_what_the_build_made() -> None:
    with_pdf = printbook.downloads_html(True)
    without = printbook.downloads_html(False)
    assert 'href="amp-lesson.pdf"' in with_pdf
    assert 'href="print.html"' in with_pdf
    assert "amp-lesson.pdf" not in without
    assert 'href="print.html"' in without
