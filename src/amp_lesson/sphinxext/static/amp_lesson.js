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
 * authors' guide, each group in Sphinx's own order of relevance.
 *
 * Edition switch: a page of one edition leads to the same page of another;
 * the section the reader is at (the address's #anchor) goes with it.
 *
 * Phone drawers: on a narrow screen the theme shows the navigation and the
 * page's contents in modal dialogs. A link followed inside one closes it, so
 * the reader sees the section an in-page link went to, not the dialog.
 */
(function () {
  "use strict";

  var THEME_CHROME = ".bd-header-article, #jb-print-docs-body, .bd-footer-article, .prev-next-area, " +
    ".amp-provenance, .amp-page-info, .amp-edition-switch, .amp-edition-banner, div.cell, div.highlight, pre, table, figure, .amp-playground, " +
    "math, .math";
  // Sphinx's relevance scores stay under a hundred; this lifts a learner's page above all others.
  var READERS_PAGE_BONUS = 1000;
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

  // `Search` is the global of Sphinx's searchtools.js, loaded before this script.
  // `Scorer` is searchtools.js's global too; Sphinx applies its score() to every result.
  if (typeof Scorer !== "undefined") {
    Scorer.score = function (result) {
      var docname = result[0];
      var score = result[4];
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
  });
})();
