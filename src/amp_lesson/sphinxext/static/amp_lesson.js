/* The book's small site script: loaded (deferred) on every page; nothing fetched.
 *
 * Search results: Sphinx summarises a hit with the text of the page's
 * [role=main], which in this theme also holds the buttons and menus above the
 * article (download, "System Settings Light Dark", search) and a print-only
 * table of contents. Those are taken out before Sphinx reads the text, and so
 * are the lines the book puts under each title (what built the page, its
 * reading time), which would otherwise open every summary: a result shows the
 * page's own words.
 *
 * Phone drawers: on a narrow screen the theme shows the navigation and the
 * page's contents in modal dialogs. A link followed inside one closes it, so
 * the reader sees the section an in-page link went to, not the dialog.
 */
(function () {
  "use strict";

  var THEME_CHROME = ".bd-header-article, #jb-print-docs-body, .bd-footer-article, .prev-next-area, " +
    ".amp-provenance, .amp-page-info";

  function withoutThemeChrome(htmlString) {
    var doc = new DOMParser().parseFromString(htmlString, "text/html");
    doc.querySelectorAll(THEME_CHROME).forEach(function (node) {
      node.remove();
    });
    return doc.documentElement.outerHTML;
  }

  // `Search` is the global of Sphinx's searchtools.js, loaded before this script.
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
})();
