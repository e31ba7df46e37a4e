/* The book's small site script: loaded (deferred) on every page; nothing fetched.
 *
 * Search results: Sphinx summarises a hit with the text of the page's
 * [role=main], which in this theme also holds the buttons and menus above the
 * article (download, "System Settings Light Dark", search) and a print-only
 * table of contents. Those are taken out before Sphinx reads the text, and so
 * are the lines the book puts under each title (what built the page, its
 * reading time), which would otherwise open every summary, and the code,
 * outputs, tables, figures and playgrounds, whose text reads as a run of
 * words without spaces: a result shows the page's prose.
 *
 * Search order: the pages a learner reads (the chapter, the pages beyond it,
 * the glossary and the corrections) come before the API reference and the
 * authors' guide. Within each group a page whose title holds the query comes
 * first: a title that holds the whole query ("Loss scaling by hand" for "loss
 * scaling"), then a page title that holds every word of it, then a section
 * title that does ("Clipping before unscale_" for "unscale_ clip"), then
 * Sphinx's own order of relevance. (Sphinx scores a page by its best word
 * alone: every page with "scaling" in any heading tied with the page named
 * for the query.)
 *
 * Editions: the line under a page's title leads to the same page of the
 * other run; the section the reader is at (the address's #anchor) goes with
 * it. A live page that a stored GPU edition ran as it stands opens on that
 * edition, unless the reader has chosen this build in such a line: the choice
 * is kept in localStorage, and a script at the top of the page's head
 * (amp_book.edition.render.opening_script) reads it before the page's styles
 * and scripts load.
 *
 * Phone drawers: on a narrow screen the theme shows the navigation and the
 * page's contents in modal dialogs. A link followed inside one closes it, so
 * the reader sees the section an in-page link went to, not the dialog.
 */
(function () {
  "use strict";

  var THEME_CHROME = ".bd-header-article, #jb-print-docs-body, .bd-footer-article, .prev-next-area, " +
    ".amp-provenance, .amp-page-info, div.cell, div.highlight, pre, table, figure, .amp-playground, " +
    "math, .math";
  // Sphinx's relevance scores stay under a hundred; this lifts a learner's page above all others.
  var READERS_PAGE_BONUS = 1000;
  // Title matches, under the reader's-page bonus and above any score of Sphinx's own.
  var TITLE_PHRASE_BONUS = 400; // a page's or section's title holds the whole query
  var PAGE_TITLE_WORDS_BONUS = 300; // the page's title holds every word of the query
  var SECTION_TITLE_WORDS_BONUS = 200; // one of its section titles does
  // The reference sections, as conf.py's amp_lesson_reference_pages names them (globs).
  var meta = document.querySelector('meta[name="amp-lesson-reference-pages"]');
  var REFERENCE = (meta ? meta.content.split(/\s+/) : []).filter(Boolean).map(function (glob) {
    var pattern = glob.replace(/[.+^${}()|[\]\\]/g, "\\$&").replace(/\*/g, ".*").replace(/\?/g, ".");
    return new RegExp("^" + pattern + "$");
  });

  function withoutThemeChrome(htmlString) {
    var doc = new DOMParser().parseFromString(htmlString, "text/html");
    doc.querySelectorAll(THEME_CHROME).forEach(function (node) {
      node.remove();
    });
    return doc.documentElement.outerHTML;
  }

  /* The words of the query being searched, stemmed as Sphinx stems them (its
   * _parseQuery's search terms, caught on their way into _performSearch), and the
   * stemmed words of each title, from the search index. */
  var queryWords = [];
  var titleWords = {};
  var sectionsOf = null;

  function stems(text) {
    var stemmer = typeof Stemmer === "function" ? new Stemmer() : null;
    var split = typeof splitQuery === "function" ? splitQuery : function (t) { return t.split(/\W+/); };
    return split(String(text).toLowerCase()).filter(Boolean).map(function (word) {
      return stemmer ? stemmer.stemWord(word) : word;
    });
  }

  function holdsEvery(title) {
    if (!queryWords.length || !title) return false;
    if (!titleWords[title]) titleWords[title] = stems(title);
    var words = titleWords[title];
    return queryWords.every(function (word) {
      return words.indexOf(word) !== -1;
    });
  }

  /** The section titles of each page (by docname), from the index's alltitles. */
  function sections() {
    if (sectionsOf) return sectionsOf;
    sectionsOf = {};
    var index = typeof Search !== "undefined" ? Search._index : null;
    if (!index || !index.alltitles) return sectionsOf;
    Object.keys(index.alltitles).forEach(function (title) {
      index.alltitles[title].forEach(function (found) {
        var docname = index.docnames[found[0]];
        (sectionsOf[docname] = sectionsOf[docname] || []).push(title);
      });
    });
    return sectionsOf;
  }

  /** How much a result's titles add: its kind is "title" when Sphinx found the whole query
   * in a page's or a section's title ([docname, title, anchor, descr, score, filename, kind]). */
  function titleBonus(result) {
    if (result[6] === "title") return TITLE_PHRASE_BONUS;
    var pageTitle = String(result[1] || "").split(" > ")[0];
    if (holdsEvery(pageTitle)) return PAGE_TITLE_WORDS_BONUS;
    if ((sections()[result[0]] || []).some(holdsEvery)) return SECTION_TITLE_WORDS_BONUS;
    return 0;
  }

  // `Search` is the global of Sphinx's searchtools.js, loaded before this script.
  if (typeof Search !== "undefined" && typeof Search._performSearch === "function") {
    var performSearch = Search._performSearch;
    Search._performSearch = function (query, searchTerms) {
      queryWords = searchTerms ? Array.from(searchTerms) : stems(query);
      return performSearch.apply(this, arguments);
    };
  }

  /** Within a tier, what orders pages: each word of the query the page's title holds
   * (TITLE_WORD), each its section titles hold (HEADING_WORD), and for each word the body
   * says, log2(1 + the times it says it) times the word's inverse page frequency
   * (amp_book.searchweights counts them). It stays under the smallest title bonus. */
  var TITLE_WORD = 30;
  var HEADING_WORD = 10;
  function withinTier(result) {
    var docname = result[0];
    var pageTitle = String(result[1] || "").split(" > ")[0];
    if (!titleWords[pageTitle]) titleWords[pageTitle] = stems(pageTitle);
    var headings = [];
    (sections()[docname] || []).forEach(function (title) {
      if (!titleWords[title]) titleWords[title] = stems(title);
      headings = headings.concat(titleWords[title]);
    });
    var counts = window.AMP_SEARCH_COUNTS || {};
    var pages = Object.keys(counts);
    var weight = 0;
    queryWords.forEach(function (word) {
      if (titleWords[pageTitle].indexOf(word) !== -1) weight += TITLE_WORD;
      if (headings.indexOf(word) !== -1) weight += HEADING_WORD;
      var n = (counts[docname] || {})[word] || 0;
      if (!n) return;
      var saying = pages.filter(function (page) { return counts[page][word]; }).length;
      weight += Math.log2(1 + n) * Math.log2(1 + pages.length / saying);
    });
    return Math.min(weight, SECTION_TITLE_WORDS_BONUS - 10);
  }

  // `Scorer` is searchtools.js's global too; Sphinx applies its score() to every result.
  if (typeof Scorer !== "undefined") {
    Scorer.score = function (result) {
      var docname = result[0];
      var score = result[4] + titleBonus(result) + withinTier(result);
      var reference = REFERENCE.some(function (pattern) {
        return pattern.test(docname);
      });
      return reference ? score : score + READERS_PAGE_BONUS;
    };
  }

  if (typeof Search !== "undefined" && typeof Search.htmlToText === "function") {
    var htmlToText = Search.htmlToText;
    Search.htmlToText = function (htmlString, anchor) {
      return htmlToText.call(this, withoutThemeChrome(htmlString), anchor);
    };
  }

  var EDITION_KEY = "amp-lesson-edition";

  var DRAWERS = ["pst-primary-sidebar-modal", "pst-secondary-sidebar-modal"];
  document.addEventListener("click", function (event) {
    var link = event.target.closest ? event.target.closest("a[href]") : null;
    var dialog = link ? link.closest("dialog") : null;
    if (dialog && dialog.open && DRAWERS.indexOf(dialog.id) !== -1) dialog.close();
  });

  document.addEventListener("click", function (event) {
    var choice = event.target.closest ? event.target.closest("a.amp-edition-choice") : null;
    if (choice && window.location.hash && !choice.hash) {
      choice.href = choice.href + window.location.hash;
    }
    var chosen = event.target.closest ? event.target.closest("a[data-edition]") : null;
    if (chosen) {
      try {
        window.localStorage.setItem(EDITION_KEY, chosen.getAttribute("data-edition"));
      } catch (e) { /* storage off: the choice holds for this click only */ }
    }
  });

  /* A table wider than its column scrolls sideways; on a phone its last columns (often
   * the deciding ones) start off-screen. Each such table gets a visible cue above it,
   * "Scroll the table sideways", and its first column stays in place while it scrolls
   * (the stylesheet's .amp-scrolls rules). Checked again whenever the window resizes. */
  var SCROLLERS = "div.cell_output .output.text_html, .bd-article div.output.text_html, " +
    ".bd-article .pst-scrollable-table-container, .amp-bx-table-wrap, .amp-sp-table-wrap";
  var CUE = "Scroll the table sideways \u2192";

  function markScrollers() {
    document.querySelectorAll(SCROLLERS).forEach(function (box) {
      if (!box.querySelector("table")) return;
      var scrolls = box.scrollWidth > box.clientWidth + 1;
      box.classList.toggle("amp-scrolls", scrolls);
      var cue = box.previousElementSibling;
      var hasCue = cue && cue.classList.contains("amp-scroll-cue");
      if (scrolls && !hasCue) {
        cue = document.createElement("p");
        cue.className = "amp-scroll-cue";
        cue.textContent = CUE;
        box.parentNode.insertBefore(cue, box);
        if (!box.hasAttribute("tabindex")) box.setAttribute("tabindex", "0");
      } else if (!scrolls && hasCue) {
        cue.remove();
      }
    });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", markScrollers);
  } else {
    markScrollers();
  }
  window.addEventListener("load", markScrollers);
  var resizing = null;
  window.addEventListener("resize", function () {
    clearTimeout(resizing);
    resizing = setTimeout(markScrollers, 150);
  });

})();
